//! Conversations: end a turn asking the caller for input, and read the earlier turns when a
//! reply continues it. No capability is needed.
//!
//! ```no_run
//! use ari_sdk::conversation;
//!
//! let earlier = conversation::history();
//! match earlier.last() {
//!     None => {
//!         conversation::ask_for_input();
//!         // return Ok(Output::text("What is your name?")) from `execute`
//!     }
//!     Some(turn) => println!("turn {} asked {:?}", turn.number, turn.output),
//! }
//! ```

use crate::bindings::ainur::ari::conversation as wit;

/// One earlier turn: what this Agent was asked and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// 1 for the conversation's first task; the history may start later (only the most
    /// recent 32 turns, and 256 KiB of them, are given).
    pub number: u32,
    pub input: Vec<u8>,
    pub output: Vec<u8>,
}

impl Turn {
    /// The input as text (lossy for bytes that are not UTF-8).
    pub fn input_text(&self) -> String {
        String::from_utf8_lossy(&self.input).into_owned()
    }

    /// The output as text (lossy for bytes that are not UTF-8).
    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }
}

/// The earlier turns of this task's conversation, oldest first (empty for a first turn).
pub fn history() -> Vec<Turn> {
    wit::history()
        .into_iter()
        .map(|t| Turn {
            number: t.number,
            input: t.input,
            output: t.output,
        })
        .collect()
}

/// Ends this turn asking for input: when `execute` returns `Ok`, the task ends
/// `InputRequired` with the output as its question, and the caller's reply is the next turn.
pub fn ask_for_input() {
    wit::ask_for_input();
}
