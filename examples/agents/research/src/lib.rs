//! A primary agent that delegates: it hands its document to three subagents at once
//! (`wordcount`, `keywords`, `summarize`), waits for all three, and merges their answers into
//! one JSON object. Needs `delegation` granted for those three Agents.

use ari_sdk::host::delegation::{self, Budget};
use ari_sdk::host::log;
use ari_sdk::{Agent, Error, Output, Task};

struct Research;

/// The subagents, in the order their answers appear.
const SUBAGENTS: [&str; 3] = ["wordcount", "keywords", "summarize"];

/// A subagent's answer as a JSON value: JSON objects and arrays as they are, text quoted.
fn as_json(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    let trimmed = text.trim();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        trimmed.to_owned()
    } else {
        let escaped: String = trimmed
            .chars()
            .flat_map(|c| match c {
                '"' => vec!['\\', '"'],
                '\\' => vec!['\\', '\\'],
                c if c.is_control() => vec![' '],
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    }
}

impl Agent for Research {
    fn execute(task: Task) -> Result<Output, Error> {
        let document = &task.input;
        log::info(&format!(
            "researching a document of {} bytes",
            document.len()
        ));
        // All three run at once; each may spend up to 20 M fuel of this task's.
        let children = SUBAGENTS
            .iter()
            .map(|agent| delegation::start(agent, document, Budget::fuel(20_000_000)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut fields = Vec::with_capacity(SUBAGENTS.len());
        for (agent, child) in SUBAGENTS.iter().zip(children) {
            let answer = child.wait()?;
            log::info(&format!("{agent} answered with {} bytes", answer.len()));
            fields.push(format!("\"{agent}\":{}", as_json(&answer)));
        }
        Ok(Output::from(format!("{{{}}}", fields.join(","))))
    }
}

ari_sdk::export_agent!(Research);

#[cfg(test)]
mod tests {
    #[test]
    fn answers_are_merged_as_json_values() {
        assert_eq!(super::as_json(br#"{"words":3}"#), r#"{"words":3}"#);
        assert_eq!(super::as_json(b"[\"a\"]"), "[\"a\"]");
        assert_eq!(super::as_json(b"say \"hi\"\n"), r#""say \"hi\"""#);
    }
}
