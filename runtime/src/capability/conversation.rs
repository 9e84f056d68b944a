//! The turns of a conversation (docs/conversations.md): the earlier turns the executor found
//! for a Task that continues another (`spec.continues`), and the guest's wish to end its turn
//! asking for input. Always available: a conversation is this Agent's own inputs and outputs.

mod events;
mod link;
pub use events::ConversationEvent;
pub use link::{CONVERSATION_IMPORT, FUEL};

use ari_model::{CapabilityName, Turn};

use super::{CapError, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;
use crate::trace::Recorder;

pub struct ConversationCapability {
    /// What the executor found (live); empty in a replay, which reads the trace.
    given: Vec<Turn>,
    /// What the guest was handed, once read: later reads repeat it without a record.
    read: Option<Vec<Turn>>,
    asked: bool,
}

impl ConversationCapability {
    pub fn new(history: Vec<Turn>) -> Self {
        Self {
            given: history,
            read: None,
            asked: false,
        }
    }

    /// The earlier turns, oldest first: recorded on the first read, served from the trace in
    /// a replay.
    pub fn history(&mut self, rec: &mut Recorder) -> Result<Vec<Turn>, CapError> {
        if let Some(turns) = &self.read {
            return Ok(turns.clone());
        }
        let turns = if rec.is_replay() {
            let ConversationEvent::History { turns } =
                rec.replay_next(&[ConversationEvent::HISTORY])?;
            turns
        } else {
            let turns = std::mem::take(&mut self.given);
            rec.record(ConversationEvent::History {
                turns: turns.clone(),
            });
            turns
        };
        self.read = Some(turns.clone());
        Ok(turns)
    }

    /// The guest ends its turn asking for input.
    pub fn ask(&mut self) {
        self.asked = true;
    }

    /// Whether the guest asked for input during the task.
    pub fn asked(&self) -> bool {
        self.asked
    }
}

impl Capability for ConversationCapability {
    const GRANT: Option<CapabilityName> = None;
    const HOST: HostFunctions = link::HOST;

    fn for_task(_grants: &Grants, task: &mut TaskSetup) -> Self {
        Self::new(std::mem::take(&mut task.history))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: u32) -> Turn {
        Turn {
            number: n,
            task: format!("t-{n}"),
            input: b"hi".to_vec(),
            output: b"who?".to_vec(),
        }
    }

    #[test]
    fn history_is_recorded_once_and_replayed_without_the_cluster() {
        let mut rec = Recorder::live();
        let mut live = ConversationCapability::new(vec![turn(1), turn(2)]);
        assert_eq!(live.history(&mut rec).expect("live").len(), 2);
        assert_eq!(live.history(&mut rec).expect("again").len(), 2);
        let trace = rec.take();
        assert_eq!(trace.events.len(), 1, "a second read records nothing");

        let mut replay_rec = Recorder::replay(trace);
        let mut replay = ConversationCapability::new(Vec::new());
        let turns = replay.history(&mut replay_rec).expect("replay");
        assert_eq!(turns, vec![turn(1), turn(2)]);
        assert_eq!(replay_rec.remaining(), 0);
    }

    #[test]
    fn asking_for_input_is_remembered_until_the_task_ends() {
        let mut c = ConversationCapability::new(Vec::new());
        assert!(!c.asked());
        c.ask();
        assert!(c.asked());
    }
}
