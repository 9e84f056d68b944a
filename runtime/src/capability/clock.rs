//! The task's logical clock: starts at the recorded start time and advances
//! one microsecond per read, so a task cannot measure real time (no timing
//! side channels) and a replay sees exactly the same values.

mod events;
mod link;
pub use events::ClockEvent;
pub use link::{FUEL, NOW as NOW_FUEL};

use ari_model::CapabilityName;

use super::{CapError, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;
use crate::trace::Recorder;

pub const TICK_NANOS: u64 = 1_000;

pub struct ClockCapability {
    granted: bool,
    start: u64,
    reads: u64,
}

impl ClockCapability {
    pub fn new(granted: bool, start_unix_nanos: u64) -> Self {
        Self {
            granted,
            start: start_unix_nanos,
            reads: 0,
        }
    }

    /// `now`: needs `timeAccess`; every read is recorded.
    pub fn now(&mut self, rec: &mut Recorder) -> Result<u64, CapError> {
        if !self.granted {
            return Err(CapError::not_granted("timeAccess"));
        }
        self.tick(rec)
    }

    /// WASI clocks: the logical clock when `timeAccess` is granted, else always 0.
    pub fn wasi_now(&mut self, rec: &mut Recorder) -> Result<u64, CapError> {
        if !self.granted {
            return Ok(0);
        }
        self.tick(rec)
    }

    fn tick(&mut self, rec: &mut Recorder) -> Result<u64, CapError> {
        self.reads += 1;
        if rec.is_replay() {
            let ClockEvent::Time { nanos } = rec.replay_next(&[ClockEvent::TIME])?;
            return Ok(nanos);
        }
        let nanos = self
            .start
            .saturating_add(self.reads.saturating_mul(TICK_NANOS));
        rec.record(ClockEvent::Time { nanos });
        Ok(nanos)
    }
}

impl Capability for ClockCapability {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::TimeAccess);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        Self::new(
            grants.grants(CapabilityName::TimeAccess),
            task.start_unix_nanos,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_logical_and_gated() {
        let mut rec = Recorder::live();
        let mut c = ClockCapability::new(true, 1_000_000);
        assert_eq!(c.now(&mut rec).unwrap(), 1_001_000);
        assert_eq!(c.wasi_now(&mut rec).unwrap(), 1_002_000);
        assert_eq!(rec.take().events.len(), 2);
        let mut off = ClockCapability::new(false, 1_000_000);
        assert!(matches!(off.now(&mut rec), Err(CapError::Denied(_))));
        assert_eq!(off.wasi_now(&mut rec).unwrap(), 0);
        assert!(rec.take().events.is_empty());
    }
}
