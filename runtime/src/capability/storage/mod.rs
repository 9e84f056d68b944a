//! The `storage` capability: a per-task transaction over a per-agent key-value backend.
//!
//! Reads see the committed state (each key as first read by the task) plus the
//! task's own writes; writes stay in an overlay until [`TaskStorage::commit`],
//! which the executor calls only when the task succeeds. The quota is counted on
//! committed key + value bytes and checked twice: at each `set` (against the state
//! the task saw) and again atomically in the backend at commit (against the state
//! then, so concurrent tasks cannot jointly overrun it).

mod backend;
mod events;
mod grant;
mod link;
mod memory;
mod redb_store;
#[cfg(feature = "redis")]
mod redis_store;
mod tx;

#[cfg(test)]
mod suite;

pub use backend::{
    Batch, MAX_RECEIPT_BYTES, MAX_RECEIPTS, RECEIPT_TTL_SECS, ReceiptLimits, StorageBackend,
    StorageError, check_reads, entry_size, plan_usage, unix_now_secs,
};
pub use events::StorageEvent;
pub use grant::{StorageGrant, grant_from_cli};
pub use link::FUEL;
pub use memory::MemoryBackend;
pub use redb_store::RedbBackend;
#[cfg(feature = "redis")]
pub use redis_store::RedisBackend;
pub use tx::{MAX_KEY_BYTES, TaskStorage};

use ari_model::CapabilityName;

use super::{CapUsage, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;

impl Capability for TaskStorage {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Storage);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        Self::new(grants.spec().storage, task.storage.take())
    }

    fn add_usage(&self, usage: &mut CapUsage) {
        usage.storage_bytes_written = self.bytes_written();
    }
}
