//! A short extractive summary: the document's first sentences, up to 160 characters, with the
//! whitespace folded. A subagent of `research`.

use ari_sdk::{Agent, Error, Output, Task};

struct Summarize;

/// Longest summary, in characters.
const MAX_CHARS: usize = 160;

fn summarize(text: &str) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut summary = String::new();
    for sentence in folded.split_inclusive(['.', '!', '?']) {
        let sentence = sentence.trim();
        let would = summary.chars().count() + sentence.chars().count() + 1;
        if !summary.is_empty() && would > MAX_CHARS {
            break;
        }
        if !summary.is_empty() {
            summary.push(' ');
        }
        summary.push_str(sentence);
    }
    summary.chars().take(MAX_CHARS).collect()
}

impl Agent for Summarize {
    fn execute(task: Task) -> Result<Output, Error> {
        Ok(Output::from(summarize(task.input_str()?)))
    }
}

ari_sdk::export_agent!(Summarize);

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_whole_first_sentences_within_the_limit() {
        let text = "ari runs agents.\n  It is fast!  ".to_owned() + &"x".repeat(200) + ".";
        assert_eq!(super::summarize(&text), "ari runs agents. It is fast!");
        assert_eq!(super::summarize(&"y".repeat(300)).chars().count(), 160);
    }
}
