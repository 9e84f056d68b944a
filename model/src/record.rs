//! What a host keeps of the calls it makes for a guest — model calls (`ari-llm`), tools
//! exchanges (`ari-mcp`) — and their replay: the records in order under a ceiling on their
//! canonical bytes, and a queue that serves them back in order and names the first call that
//! differs. Each crate owns its record type and what "the same call" means; the bookkeeping is
//! one piece here.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// What a call ended with: its answer, or the error the guest was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome<T, E> {
    Answer(T),
    Error(E),
}

impl<T, E> From<Result<T, E>> for Outcome<T, E> {
    fn from(result: Result<T, E>) -> Self {
        match result {
            Ok(answer) => Outcome::Answer(answer),
            Err(error) => Outcome::Error(error),
        }
    }
}

impl<T, E> From<Outcome<T, E>> for Result<T, E> {
    fn from(outcome: Outcome<T, E>) -> Self {
        match outcome {
            Outcome::Answer(answer) => Ok(answer),
            Outcome::Error(error) => Err(error),
        }
    }
}

/// One call as a trace keeps it.
pub trait Record: Serialize + Clone {
    /// What one record is of, for messages: "model call", "tools exchange".
    const KIND: &'static str;

    /// Replaces the record's answer by an error saying `message` (its answer did not fit).
    fn replace_answer(&mut self, message: String);

    /// The record's canonical bytes (its JSON, fields in declaration order): what the trace
    /// digests and what its size bound counts.
    fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Longest error message a record keeps from a provider or server: enough to say what went
/// wrong, too short to carry a whole answer into a trace, a status or a log.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// `text` cut to [`MAX_MESSAGE_CHARS`] characters, on one line.
pub fn short(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let one_line = one_line.trim();
    if one_line.chars().count() <= MAX_MESSAGE_CHARS {
        return one_line.to_string();
    }
    let mut cut: String = one_line.chars().take(MAX_MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

/// A guest-chosen name as a message shows it: at most 64 characters.
pub fn clip(name: &str) -> String {
    name.chars().take(64).collect()
}

/// Bytes kept for the record of a call whose own record would not fit: room enough for the
/// request and a short error in place of the answer.
pub const RESERVE_BYTES: usize = 1024;

/// The records of one task, under a ceiling on their canonical bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording<R> {
    records: Vec<R>,
    bytes: usize,
    ceiling: usize,
}

impl<R> Default for Recording<R> {
    fn default() -> Self {
        Self::new(0)
    }
}

impl<R> Recording<R> {
    pub fn new(ceiling: usize) -> Self {
        Self {
            records: Vec::new(),
            bytes: 0,
            ceiling,
        }
    }

    pub fn records(&self) -> &[R] {
        &self.records
    }

    pub fn into_records(self) -> Vec<R> {
        self.records
    }

    /// Canonical bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes left under the ceiling.
    pub fn room(&self) -> usize {
        self.ceiling.saturating_sub(self.bytes)
    }

    /// Whether a call whose request takes `request_bytes` may start: its record must at
    /// least fit with a short error in place of the answer.
    pub fn admits(&self, request_bytes: usize) -> bool {
        request_bytes.saturating_add(RESERVE_BYTES) <= self.room()
    }
}

impl<R: Record> Recording<R> {
    /// Keeps `record`. One that does not fit is kept with its answer replaced by an error
    /// saying so (the guest gets that error too, and a replay serves it the same way); that
    /// stand-in fits when the request left [`RESERVE_BYTES`] of room, which
    /// [`Recording::admits`] checks before the call. Returns the record as kept.
    pub fn push(&mut self, mut record: R) -> R {
        let mut size = record.canonical_bytes().len();
        if size > self.room() {
            record.replace_answer(format!(
                "the answer does not fit in the {} bytes left for the task's trace",
                self.room()
            ));
            size = record.canonical_bytes().len();
        }
        self.bytes += size;
        self.records.push(record.clone());
        record
    }
}

/// Why a replay stopped: the run asked for something the record does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {index} differs from the recorded run: {what}")]
pub struct Divergence {
    /// What was replayed ([`Record::KIND`]).
    pub kind: &'static str,
    /// 0-based position of the call in the run.
    pub index: usize,
    pub what: String,
}

/// Serves recorded calls in order. A crate's own replayer checks that each call taken is the
/// one asked for, and says how it differs through [`Replay::diverged`].
#[derive(Debug, Clone)]
pub struct Replay<R> {
    left: VecDeque<R>,
    served: usize,
}

impl<R> Default for Replay<R> {
    fn default() -> Self {
        Self {
            left: VecDeque::new(),
            served: 0,
        }
    }
}

impl<R: Record> Replay<R> {
    pub fn new(records: impl IntoIterator<Item = R>) -> Self {
        Self {
            left: records.into_iter().collect(),
            served: 0,
        }
    }

    /// Adds a record to serve after those already held.
    pub fn push(&mut self, record: R) {
        self.left.push_back(record);
    }

    /// The next record; a divergence when none is left.
    pub fn take(&mut self) -> Result<R, Divergence> {
        let Some(record) = self.left.pop_front() else {
            return Err(self.diverged(&format!("no recorded {} is left", R::KIND)));
        };
        self.served += 1;
        Ok(record)
    }

    /// Fails when recorded calls were never made (a replay that ended early).
    pub fn finish(&self) -> Result<(), Divergence> {
        match self.left.len() {
            0 => Ok(()),
            n => Err(Divergence {
                kind: R::KIND,
                index: self.served,
                what: format!("the run ended with {n} recorded {}s not made", R::KIND),
            }),
        }
    }

    /// A divergence at the call just taken (or the next one, when none was).
    pub fn diverged(&self, what: &str) -> Divergence {
        Divergence {
            kind: R::KIND,
            index: self.served.saturating_sub(1),
            what: what.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize)]
    struct Call {
        request: String,
        answer: Result<String, String>,
    }

    impl Record for Call {
        const KIND: &'static str = "test call";
        fn replace_answer(&mut self, message: String) {
            self.answer = Err(message);
        }
    }

    fn call(request: &str, answer: &str) -> Call {
        Call {
            request: request.into(),
            answer: Ok(answer.into()),
        }
    }

    #[test]
    fn a_record_that_does_not_fit_is_kept_with_an_error_in_place_of_its_answer() {
        let small = call("q", "a");
        let ceiling = small.canonical_bytes().len() + RESERVE_BYTES;
        let mut recording = Recording::new(ceiling);
        assert!(recording.admits(1));
        assert_eq!(recording.push(small.clone()), small);
        let big = recording.push(call("q", &"x".repeat(ceiling)));
        let Err(message) = &big.answer else {
            panic!("kept whole: {big:?}")
        };
        assert!(message.contains("does not fit"), "{message}");
        assert_eq!(recording.records().len(), 2);
        assert_eq!(
            recording.bytes(),
            small.canonical_bytes().len() + big.canonical_bytes().len()
        );
        assert!(!recording.admits(recording.room() + 1));
    }

    #[test]
    fn a_replay_names_the_call_that_differs_and_the_calls_left_unmade() {
        let mut replay = Replay::new([call("a", "1"), call("b", "2")]);
        assert_eq!(replay.take(), Ok(call("a", "1")));
        let err = replay.diverged("other");
        assert_eq!(err.index, 0);
        assert_eq!(
            err.to_string(),
            "test call 0 differs from the recorded run: other"
        );
        let unmade = replay.finish().expect_err("one left");
        assert_eq!(unmade.index, 1);
        assert!(unmade.what.contains("1 recorded test calls not made"));
        replay.take().expect("the second");
        assert_eq!(replay.finish(), Ok(()));
        let none = replay.take().expect_err("none left");
        assert_eq!(none.what, "no recorded test call is left");
        assert_eq!(none.index, 1);
    }
}
