//! Embedded on-disk backend on `redb` (ACID, crash-safe, pure Rust): `--state DIR`.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::backend::{Batch, StorageBackend, StorageError, check_reads, entry_size, plan_usage};

/// (agent, key) → value.
const KV: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("kv");
/// agent → committed bytes.
const USED: TableDefinition<&str, u64> = TableDefinition::new("used");
/// (agent, task id) → (stamp, receipt of a committed batch).
const RECEIPTS: TableDefinition<(&str, &str), (u64, &[u8])> = TableDefinition::new("receipts-v2");
/// (agent, stamp, task id): receipts in age order, for pruning.
const RECEIPT_TIMES: TableDefinition<(&str, u64, &str), ()> = TableDefinition::new("receipt-times");
/// agent → receipts held.
const RECEIPT_COUNT: TableDefinition<&str, u64> = TableDefinition::new("receipt-count");
/// Receipts of earlier versions (whole outcomes, never pruned): dropped on open.
const OLD_RECEIPTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("receipts");

/// File name inside the state directory.
pub const DB_FILE: &str = "storage.redb";

fn be(e: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(format!("redb: {e}"))
}

/// One agent's namespace in a redb file; clones (and [`RedbBackend::for_agent`]) share the database.
#[derive(Clone)]
pub struct RedbBackend {
    db: Arc<Database>,
    agent: String,
}

impl std::fmt::Debug for RedbBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbBackend")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl RedbBackend {
    /// Opens (creating) `DIR/storage.redb`. A file can be open once per process:
    /// use [`RedbBackend::for_agent`] for further agents.
    pub fn open(dir: &Path, agent: &str) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| be(format!("{}: {e}", dir.display())))?;
        let db = Database::create(dir.join(DB_FILE)).map_err(be)?;
        let txn = db.begin_write().map_err(be)?;
        txn.open_table(KV).map_err(be)?;
        txn.open_table(USED).map_err(be)?;
        txn.open_table(RECEIPTS).map_err(be)?;
        txn.open_table(RECEIPT_TIMES).map_err(be)?;
        txn.open_table(RECEIPT_COUNT).map_err(be)?;
        txn.delete_table(OLD_RECEIPTS).map_err(be)?;
        txn.commit().map_err(be)?;
        Ok(Self {
            db: Arc::new(db),
            agent: agent.to_owned(),
        })
    }

    /// Another agent's namespace in the same database.
    pub fn for_agent(&self, agent: &str) -> Self {
        Self {
            db: Arc::clone(&self.db),
            agent: agent.to_owned(),
        }
    }
}

impl StorageBackend for RedbBackend {
    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let txn = self.db.begin_read().map_err(be)?;
        let table = txn.open_table(KV).map_err(be)?;
        let value = table.get((self.agent.as_str(), key)).map_err(be)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn apply(&mut self, batch: &Batch) -> Result<(), StorageError> {
        let agent = self.agent.as_str();
        let txn = self.db.begin_write().map_err(be)?;
        {
            let mut kv = txn.open_table(KV).map_err(be)?;
            let mut used_t = txn.open_table(USED).map_err(be)?;
            let used = used_t.get(agent).map_err(be)?.map_or(0, |g| g.value());
            check_reads(batch, |k| {
                Ok(kv.get((agent, k)).map_err(be)?.map(|v| v.value().to_vec()))
            })?;
            if let Some((id, bytes)) = &batch.receipt {
                let mut receipts = txn.open_table(RECEIPTS).map_err(be)?;
                if receipts.get((agent, id.as_str())).map_err(be)?.is_some() {
                    return Err(StorageError::Conflict { key: id.clone() });
                }
                let mut times = txn.open_table(RECEIPT_TIMES).map_err(be)?;
                let mut count_t = txn.open_table(RECEIPT_COUNT).map_err(be)?;
                let mut count = count_t.get(agent).map_err(be)?.map_or(0, |g| g.value());
                // Expired receipts, then the oldest until one more fits under the count.
                let cutoff = batch.receipt_limits.cutoff(batch.now_unix_secs);
                loop {
                    let oldest = times
                        .range((agent, 0u64, "")..=(agent, u64::MAX, "\u{10ffff}"))
                        .map_err(be)?
                        .next()
                        .transpose()
                        .map_err(be)?
                        .map(|(k, _)| {
                            let (_, t, id) = k.value();
                            (t, id.to_owned())
                        });
                    let Some((t, old_id)) = oldest else { break };
                    if t >= cutoff && count < batch.receipt_limits.max_count {
                        break;
                    }
                    times.remove((agent, t, old_id.as_str())).map_err(be)?;
                    receipts.remove((agent, old_id.as_str())).map_err(be)?;
                    count = count.saturating_sub(1);
                }
                let t = batch.now_unix_secs;
                receipts
                    .insert((agent, id.as_str()), (t, bytes.as_slice()))
                    .map_err(be)?;
                times.insert((agent, t, id.as_str()), ()).map_err(be)?;
                count_t.insert(agent, count + 1).map_err(be)?;
            }
            let new_used = plan_usage(batch, used, |k| {
                Ok(kv
                    .get((agent, k))
                    .map_err(be)?
                    .map(|v| entry_size(k, v.value().len())))
            })?;
            for (k, v) in &batch.writes {
                kv.insert((agent, k.as_str()), v.as_slice()).map_err(be)?;
            }
            for k in &batch.deletes {
                kv.remove((agent, k.as_str())).map_err(be)?;
            }
            used_t.insert(agent, new_used).map_err(be)?;
        }
        // On any early return above the transaction is dropped, which aborts it.
        txn.commit().map_err(be)
    }

    fn used_bytes(&mut self) -> Result<u64, StorageError> {
        let txn = self.db.begin_read().map_err(be)?;
        let table = txn.open_table(USED).map_err(be)?;
        let used = table.get(self.agent.as_str()).map_err(be)?;
        Ok(used.map_or(0, |g| g.value()))
    }

    fn handle(&self) -> Box<dyn StorageBackend> {
        Box::new(self.clone())
    }

    fn receipt(&mut self, id: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let txn = self.db.begin_read().map_err(be)?;
        let table = txn.open_table(RECEIPTS).map_err(be)?;
        let value = table.get((self.agent.as_str(), id)).map_err(be)?;
        Ok(value.map(|v| v.value().1.to_vec()))
    }

    fn drop_receipt(&mut self, id: &str) -> Result<(), StorageError> {
        let agent = self.agent.as_str();
        let txn = self.db.begin_write().map_err(be)?;
        {
            let mut table = txn.open_table(RECEIPTS).map_err(be)?;
            let stamp = table.remove((agent, id)).map_err(be)?.map(|v| v.value().0);
            if let Some(t) = stamp {
                let mut times = txn.open_table(RECEIPT_TIMES).map_err(be)?;
                times.remove((agent, t, id)).map_err(be)?;
                let mut count_t = txn.open_table(RECEIPT_COUNT).map_err(be)?;
                let count = count_t.get(agent).map_err(be)?.map_or(0, |g| g.value());
                count_t.insert(agent, count.saturating_sub(1)).map_err(be)?;
            }
        }
        txn.commit().map_err(be)
    }

    fn receipt_count(&mut self) -> Result<u64, StorageError> {
        let txn = self.db.begin_read().map_err(be)?;
        let table = txn.open_table(RECEIPT_COUNT).map_err(be)?;
        let count = table.get(self.agent.as_str()).map_err(be)?;
        Ok(count.map_or(0, |g| g.value()))
    }
}
