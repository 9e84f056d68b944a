//! An intake form as a conversation: the first message is the request; then the agent asks
//! its questions one turn at a time (each turn ends asking for input), and once every one is
//! answered it returns the request with the answers as JSON. Each turn is its own Task, run
//! in a fresh instance: what came before is read from the conversation's history, never kept
//! in memory, so every turn replays on its own with `ari verify`.
//!
//! Config (the Agent's `spec.config`): the questions, one per line; none gives the two
//! [`DEFAULT_QUESTIONS`].

use std::sync::OnceLock;

use ari_sdk::conversation::{self, Turn};
use ari_sdk::{Agent, Error, Output, Task};

pub const DEFAULT_QUESTIONS: [&str; 2] = ["What is your name?", "When do you need it?"];

static QUESTIONS: OnceLock<Vec<String>> = OnceLock::new();

/// The questions `config` lists (blank lines skipped), or the defaults.
pub fn questions(config: &str) -> Vec<String> {
    let listed: Vec<String> = config
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if listed.is_empty() {
        DEFAULT_QUESTIONS.map(str::to_owned).to_vec()
    } else {
        listed
    }
}

/// What to do this turn.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Ask this question and wait for the reply.
    Ask(String),
    /// Everything is answered: the request and the answers, as JSON text.
    Done(String),
}

/// The step after `history` (the earlier turns, oldest first) and this turn's `input`: the
/// first turn's input is the request, each later input answers the question the turn before
/// asked. History may start after turn 1 (only recent turns are kept): then the request is
/// unknown and said so.
pub fn step(questions: &[String], history: &[Turn], input: &str) -> Step {
    let mut said: Vec<String> = history.iter().map(Turn::input_text).collect();
    said.push(input.to_owned());
    let starts_at_first = history.first().is_none_or(|t| t.number == 1);
    let (request, answers) = if starts_at_first {
        (Some(said[0].clone()), said[1..].to_vec())
    } else {
        (None, said)
    };
    // Turn n's input (n > 1) answers question n - 1: a history starting at turn s left out
    // the answers to the first s - 2 questions.
    let asked = match history.first() {
        Some(t) if !starts_at_first => t.number.saturating_sub(2) as usize,
        _ => 0,
    };
    let answered = asked + answers.len();
    match questions.get(answered) {
        Some(q) => Step::Ask(q.clone()),
        None => {
            let pairs: serde_json::Map<String, serde_json::Value> = questions
                .iter()
                .skip(asked)
                .zip(answers)
                .map(|(q, a)| (q.clone(), serde_json::Value::String(a)))
                .collect();
            Step::Done(serde_json::json!({"request": request, "answers": pairs}).to_string())
        }
    }
}

struct Intake;

impl Agent for Intake {
    fn initialize(config: Vec<u8>) -> Result<(), Error> {
        let _ = QUESTIONS.set(questions(&String::from_utf8_lossy(&config)));
        Ok(())
    }

    fn execute(task: Task) -> Result<Output, Error> {
        let questions = QUESTIONS.get_or_init(|| questions(""));
        let input = String::from_utf8_lossy(&task.input).into_owned();
        match step(questions, &conversation::history(), &input) {
            Step::Ask(q) => {
                conversation::ask_for_input();
                Ok(Output::from(q))
            }
            Step::Done(json) => Ok(Output::from(json)),
        }
    }
}

ari_sdk::export_agent!(Intake);

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(number: u32, input: &str, output: &str) -> Turn {
        Turn {
            number,
            input: input.as_bytes().to_vec(),
            output: output.as_bytes().to_vec(),
        }
    }

    #[test]
    fn the_first_turn_asks_the_first_question() {
        let q = questions("");
        assert_eq!(step(&q, &[], "a new laptop"), Step::Ask(q[0].clone()));
    }

    #[test]
    fn each_reply_is_the_answer_to_the_question_before_it_until_all_are_answered() {
        let q = questions("");
        let h1 = [turn(1, "a new laptop", &q[0])];
        assert_eq!(step(&q, &h1, "Ada"), Step::Ask(q[1].clone()));
        let h2 = [turn(1, "a new laptop", &q[0]), turn(2, "Ada", &q[1])];
        let Step::Done(json) = step(&q, &h2, "Friday") else {
            panic!("all answered");
        };
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(v["request"], "a new laptop");
        assert_eq!(v["answers"][&q[0]], "Ada");
        assert_eq!(v["answers"][&q[1]], "Friday");
    }

    #[test]
    fn a_history_that_starts_late_still_counts_the_questions_asked() {
        let q = questions("a\nb\nc");
        let late = [turn(3, "B", "c")];
        let Step::Done(json) = step(&q, &late, "C") else {
            panic!("all answered");
        };
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(v["request"], serde_json::Value::Null);
        assert_eq!(v["answers"]["b"], "B");
        assert_eq!(v["answers"]["c"], "C");
    }
}
