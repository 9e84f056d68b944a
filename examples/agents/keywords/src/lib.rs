//! The five most frequent words of a document (four letters or more, case folded), most
//! frequent first, ties in alphabetical order, as a JSON array. A subagent of `research`.

use std::collections::BTreeMap;

use ari_sdk::{Agent, Error, Output, Task};

struct Keywords;

/// How many words the answer lists.
const TOP: usize = 5;

fn keywords(text: &str) -> Vec<String> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 4)
    {
        *counts.entry(word.to_lowercase()).or_default() += 1;
    }
    let mut ranked: Vec<(String, u32)> = counts.into_iter().collect();
    // Stable: equal counts keep the map's alphabetical order.
    ranked.sort_by(|a, b| b.1.cmp(&a.1));
    ranked.into_iter().take(TOP).map(|(w, _)| w).collect()
}

impl Agent for Keywords {
    fn execute(task: Task) -> Result<Output, Error> {
        let words = keywords(task.input_str()?);
        let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
        Ok(Output::from(format!("[{}]", quoted.join(","))))
    }
}

ari_sdk::export_agent!(Keywords);

#[cfg(test)]
mod tests {
    #[test]
    fn lists_the_most_frequent_long_words_first_and_ties_alphabetically() {
        let words = super::keywords("Wasm runs agents. Agents delegate; wasm agents plan. The end");
        assert_eq!(words, ["agents", "wasm", "delegate", "plan", "runs"]);
    }
}
