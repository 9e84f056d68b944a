//! CPU-bound: input `ROUNDS DATA` (decimal rounds, one space, then the data bytes); returns the
//! hex digest of SHA-256 applied `ROUNDS` times (see [`kernel::sha256_loop`]).

mod kernel;

use ari_sdk::{Agent, Output, Task, hex};

struct Sha256Loop;

/// Splits `ROUNDS DATA`; the data may be empty and may contain anything.
fn parse(input: &[u8]) -> Result<(u32, &[u8]), String> {
    let (rounds, data) = match input.iter().position(|&b| b == b' ') {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &[][..]),
    };
    let rounds = std::str::from_utf8(rounds)
        .ok()
        .and_then(|r| r.trim().parse().ok())
        .ok_or("input must be `ROUNDS DATA` with ROUNDS a decimal u32")?;
    Ok((rounds, data))
}

impl Agent for Sha256Loop {
    fn execute(task: Task) -> Result<Output, String> {
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
