//! Pure compute: counts lines, words and bytes of its input like `wc`, answers in JSON.

use ari_sdk::{Agent, Error, Output, Task};

struct WordCount;

/// `wc` semantics: lines are newline characters, words are runs of non-whitespace bytes.
fn count(input: &[u8]) -> (usize, usize, usize) {
    let lines = input.iter().filter(|&&b| b == b'\n').count();
    let words = input
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .count();
    (lines, words, input.len())
}

impl Agent for WordCount {
    fn execute(task: Task) -> Result<Output, Error> {
        let (lines, words, bytes) = count(&task.input);
        Ok(Output::from(format!(
            r#"{{"lines":{lines},"words":{words},"bytes":{bytes}}}"#
        )))
    }
}

ari_sdk::export_agent!(WordCount);

#[cfg(test)]
mod tests {
    #[test]
    fn counts_like_wc() {
        assert_eq!(super::count(b"hello world\nfoo  bar baz\n"), (2, 5, 25));
        assert_eq!(super::count(b""), (0, 0, 0));
        assert_eq!(super::count(b"no newline"), (0, 2, 10));
    }
}
