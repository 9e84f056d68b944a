//! Randomness: rolls N six-sided dice (input `N`, default 1, at most 10000) from the task's
//! seeded PRNG and returns the rolls separated by spaces.

use ari_sdk::host::random;
use ari_sdk::{Agent, Error, Output, Task};

struct Dice;

const MAX_DICE: u32 = 10_000;

fn parse_count(input: &str) -> Result<u32, Error> {
    let n = match input.trim() {
        "" => 1,
        s => s
            .parse::<u32>()
            .map_err(|e| Error::Invalid(format!("input must be a dice count: {e}")))?,
    };
    if n == 0 || n > MAX_DICE {
        return Err(Error::Invalid(format!(
            "dice count must be 1..={MAX_DICE}, got {n}"
        )));
    }
    Ok(n)
}

impl Agent for Dice {
    fn execute(task: Task) -> Result<Output, Error> {
        let n = parse_count(task.input_str()?)?;
        let rolls = (0..n)
            .map(|_| random::below(6).map(|r| (r + 1).to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Output::from(rolls.join(" ")))
    }
}

ari_sdk::export_agent!(Dice);

#[cfg(test)]
mod tests {
    #[test]
    fn parses_counts() {
        assert_eq!(super::parse_count(""), Ok(1));
        assert_eq!(super::parse_count("3\n"), Ok(3));
        assert!(super::parse_count("0").is_err());
        assert!(super::parse_count("x").is_err());
        assert!(super::parse_count("10001").is_err());
    }
}
