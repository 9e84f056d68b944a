//! Delegation: sends each line of its input to a `wordcount` Agent, all at once, then sums the
//! word counts. The Agent to call is the configuration (`spec.config`, or `ari run --config`),
//! `wordcount` when empty. Needs `delegation` granted for that Agent.

use ari_sdk::host::delegation::{self, Budget};
use ari_sdk::{Agent, Error, Output, Task};

struct FanOut;

/// The `"words":N` figure of a wordcount answer.
fn words(answer: &[u8]) -> Result<u64, Error> {
    let text = std::str::from_utf8(answer).map_err(|_| Error::from("answer is not UTF-8"))?;
    let digits: String = text
        .split("\"words\":")
        .nth(1)
        .ok_or_else(|| Error::from(format!("no word count in {text:?}")))?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .map_err(|_| Error::from(format!("bad word count in {text:?}")))
}

impl Agent for FanOut {
    fn execute(task: Task) -> Result<Output, Error> {
        let config = ari_sdk::config();
        let counter = match std::str::from_utf8(config).map(str::trim) {
            Ok("") | Err(_) => "wordcount",
            Ok(name) => name,
        };
        let lines: Vec<&str> = task
            .input_str()?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        // Each child may spend up to 50 M fuel of this task's; what it leaves comes back.
        let share = Budget::fuel(50_000_000);
        let children = lines
            .iter()
            .map(|line| delegation::start(counter, line.as_bytes(), share))
            .collect::<Result<Vec<_>, _>>()?;
        let mut total = 0;
        for child in children {
            total += words(&child.wait()?)?;
        }
        Ok(Output::from(format!(
            r#"{{"parts":{},"words":{total}}}"#,
            lines.len()
        )))
    }
}

ari_sdk::export_agent!(FanOut);

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_word_count_of_an_answer() {
        assert_eq!(super::words(br#"{"lines":0,"words":12,"bytes":3}"#), Ok(12));
        assert!(super::words(b"{}").is_err());
    }
}
