//! CPU-bound: input `ROUNDS DATA` (decimal rounds, one space, then the data bytes); returns the
//! hex digest of SHA-256 applied `ROUNDS` times (see [`kernel::sha256_loop`]).

mod kernel;

use ari_sdk::{Agent, Error, Estimate, Output, Task, hex};

struct Sha256Loop;

/// Splits `ROUNDS DATA`; the data may be empty and may contain anything.
fn parse(input: &[u8]) -> Result<(u32, &[u8]), Error> {
    let (rounds, data) = match input.iter().position(|&b| b == b' ') {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &[][..]),
    };
    let rounds = std::str::from_utf8(rounds)
        .ok()
        .and_then(|r| r.trim().parse().ok())
        .ok_or_else(|| {
            Error::Invalid("input must be `ROUNDS DATA` with ROUNDS a decimal u32".into())
        })?;
    Ok((rounds, data))
}

/// Fuel of one SHA-256 round over 32 bytes, as measured under ari (rounded up).
const FUEL_PER_ROUND: u64 = 4_000;

impl Agent for Sha256Loop {
    /// The work is known from the input alone, so the agent can say what it will cost.
    fn estimate(task: &Task) -> Result<Estimate, Error> {
        let (rounds, data) = parse(&task.input)?;
        let fuel = FUEL_PER_ROUND * u64::from(rounds) + 64 * data.len() as u64;
        Ok(Estimate {
            fuel,
            // Roughly 100 million fuel per second on one core.
            duration_millis: fuel / 100_000,
            memory_bytes: 2 * 1024 * 1024 + data.len() as u64,
        })
    }

    fn execute(task: Task) -> Result<Output, Error> {
        let (rounds, data) = parse(&task.input)?;
        Ok(Output::from(hex::encode(&kernel::sha256_loop(
            data, rounds,
        ))))
    }
}

ari_sdk::export_agent!(Sha256Loop);

#[cfg(test)]
mod tests {
    #[test]
    fn parses_rounds_and_data() {
        assert_eq!(super::parse(b"3 a b"), Ok((3, &b"a b"[..])));
        assert_eq!(super::parse(b"10"), Ok((10, &b""[..])));
        assert!(super::parse(b"x y").is_err());
    }
}
