//! In-memory backend: for `ari run` without `--state` and for tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::backend::{Batch, StorageBackend, StorageError, check_reads, entry_size, plan_usage};

#[derive(Debug, Default)]
struct Inner {
    map: BTreeMap<String, Vec<u8>>,
    used: u64,
    /// id → (stamp, receipt), and the same ordered by stamp for pruning.
    receipts: BTreeMap<String, (u64, Vec<u8>)>,
    receipt_times: BTreeSet<(u64, String)>,
}

impl Inner {
    fn forget_receipt(&mut self, id: &str) {
        if let Some((t, _)) = self.receipts.remove(id) {
            self.receipt_times.remove(&(t, id.to_owned()));
        }
    }

    /// Expired receipts, then the oldest until one more fits under the count.
    fn prune_receipts(&mut self, batch: &Batch) {
        let cutoff = batch.receipt_limits.cutoff(batch.now_unix_secs);
        while let Some((t, id)) = self.receipt_times.first().cloned() {
            let over = self.receipts.len() as u64 >= batch.receipt_limits.max_count;
            if t >= cutoff && !over {
                break;
            }
            self.forget_receipt(&id);
        }
    }
}

/// One agent's namespace in memory; clones share the data.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    inner: Arc<Mutex<Inner>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave `Inner` half-updated (apply mutates after planning).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StorageBackend for MemoryBackend {
    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.lock().map.get(key).cloned())
    }

    fn apply(&mut self, batch: &Batch) -> Result<(), StorageError> {
        let mut inner = self.lock();
        check_reads(batch, |k| Ok(inner.map.get(k).cloned()))?;
        if let Some((id, _)) = &batch.receipt
            && inner.receipts.contains_key(id)
        {
            return Err(StorageError::Conflict { key: id.clone() });
        }
        let new_used = plan_usage(batch, inner.used, |k| {
            Ok(inner.map.get(k).map(|v| entry_size(k, v.len())))
        })?;
        for (k, v) in &batch.writes {
            inner.map.insert(k.clone(), v.clone());
        }
        for k in &batch.deletes {
            inner.map.remove(k);
        }
        inner.used = new_used;
        if let Some((id, bytes)) = &batch.receipt {
            inner.prune_receipts(batch);
            let t = batch.now_unix_secs;
            inner.receipts.insert(id.clone(), (t, bytes.clone()));
            inner.receipt_times.insert((t, id.clone()));
        }
        Ok(())
    }

    fn used_bytes(&mut self) -> Result<u64, StorageError> {
        Ok(self.lock().used)
    }

    fn handle(&self) -> Box<dyn StorageBackend> {
        Box::new(self.clone())
    }

    fn receipt(&mut self, id: &str) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.lock().receipts.get(id).map(|(_, r)| r.clone()))
    }

    fn drop_receipt(&mut self, id: &str) -> Result<(), StorageError> {
        self.lock().forget_receipt(id);
        Ok(())
    }

    fn receipt_count(&mut self) -> Result<u64, StorageError> {
        Ok(self.lock().receipts.len() as u64)
    }
}
