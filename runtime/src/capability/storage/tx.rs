//! The per-task storage transaction (overlay, quota, recording, replay).

use std::collections::{BTreeMap, HashMap};

use super::backend::{
    Batch, MAX_RECEIPT_BYTES, StorageBackend, StorageError, entry_size, unix_now_secs,
};
use super::events::StorageEvent;
use super::grant::StorageGrant;
use crate::capability::CapError;
use crate::trace::{Recorder, internal_kind_mismatch, mismatch};

/// Longest key accepted; keeps trace and backend keys sane.
pub const MAX_KEY_BYTES: usize = 1024;

pub struct TaskStorage {
    grant: Option<StorageGrant>,
    backend: Option<Box<dyn StorageBackend>>,
    /// Committed values as first read by this task (repeatable reads).
    snapshot: HashMap<String, Option<Vec<u8>>>,
    /// Committed entry sizes of keys this task wrote or deleted.
    committed_size: HashMap<String, Option<u64>>,
    /// The overlay: `None` is a delete.
    pending: BTreeMap<String, Option<Vec<u8>>>,
    used_at_start: Option<u64>,
    /// Net change the overlay makes to committed bytes.
    pending_delta: i128,
    bytes_written: u64,
}

fn backend_err(e: StorageError) -> CapError {
    match e {
        StorageError::QuotaExceeded { .. } => CapError::QuotaExceeded(e.to_string()),
        StorageError::Conflict { key } => CapError::Conflict(key),
        StorageError::Backend(_) => CapError::Failed(e.to_string()),
    }
}

fn overlay_size(key: &str, value: &Option<Vec<u8>>) -> u64 {
    value.as_ref().map_or(0, |v| entry_size(key, v.len()))
}

impl TaskStorage {
    pub fn new(grant: Option<StorageGrant>, backend: Option<Box<dyn StorageBackend>>) -> Self {
        Self {
            grant,
            backend,
            snapshot: HashMap::new(),
            committed_size: HashMap::new(),
            pending: BTreeMap::new(),
            used_at_start: None,
            pending_delta: 0,
            bytes_written: 0,
        }
    }

    fn check(&self, key: &str) -> Result<StorageGrant, CapError> {
        let grant = self.grant.ok_or_else(|| CapError::not_granted("storage"))?;
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(CapError::Invalid(format!(
                "storage key must be 1..={MAX_KEY_BYTES} bytes, got {}",
                key.len()
            )));
        }
        Ok(grant)
    }

    fn backend(&mut self) -> Result<&mut Box<dyn StorageBackend>, CapError> {
        self.backend.as_mut().ok_or_else(|| {
            CapError::Failed("storage is granted but no storage backend is configured".into())
        })
    }

    pub fn get(&mut self, key: &str, rec: &mut Recorder) -> Result<Option<Vec<u8>>, CapError> {
        self.check(key)?;
        if let Some(v) = self.pending.get(key) {
            return Ok(v.clone());
        }
        self.committed(key, rec)
    }

    /// The committed value of `key` as this task first saw it.
    fn committed(&mut self, key: &str, rec: &mut Recorder) -> Result<Option<Vec<u8>>, CapError> {
        if let Some(v) = self.snapshot.get(key) {
            return Ok(v.clone());
        }
        let value = if rec.is_replay() {
            match rec.replay_next(&[StorageEvent::GET])? {
                StorageEvent::Get { key: k, value } if k == key => value,
                StorageEvent::Get { key: k, .. } => {
                    return Err(mismatch("storage key", &k, key));
                }
                _ => return Err(internal_kind_mismatch()),
            }
        } else {
            let value = self.backend()?.get(key).map_err(backend_err)?;
            rec.record(StorageEvent::Get {
                key: key.to_owned(),
                value: value.clone(),
            });
            value
        };
        self.snapshot.insert(key.to_owned(), value.clone());
        Ok(value)
    }

    /// Committed entry size of `key`, from the snapshot if read, else looked up (and recorded).
    fn committed_entry_size(
        &mut self,
        key: &str,
        rec: &mut Recorder,
    ) -> Result<Option<u64>, CapError> {
        if let Some(v) = self.snapshot.get(key) {
            return Ok(v.as_ref().map(|v| entry_size(key, v.len())));
        }
        if let Some(s) = self.committed_size.get(key) {
            return Ok(*s);
        }
        let size = if rec.is_replay() {
            match rec.replay_next(&[StorageEvent::SIZE])? {
                StorageEvent::Size { key: k, bytes } if k == key => bytes,
                StorageEvent::Size { key: k, .. } => {
                    return Err(mismatch("storage key", &k, key));
                }
                _ => return Err(internal_kind_mismatch()),
            }
        } else {
            let value = self.backend()?.get(key).map_err(backend_err)?;
            let bytes = value.map(|v| entry_size(key, v.len()));
            rec.record(StorageEvent::Size {
                key: key.to_owned(),
                bytes,
            });
            bytes
        };
        self.committed_size.insert(key.to_owned(), size);
        Ok(size)
    }

    fn used_at_start(&mut self, rec: &mut Recorder) -> Result<u64, CapError> {
        if let Some(u) = self.used_at_start {
            return Ok(u);
        }
        let used = if rec.is_replay() {
            match rec.replay_next(&[StorageEvent::USED])? {
                StorageEvent::Used { bytes } => bytes,
                _ => return Err(internal_kind_mismatch()),
            }
        } else {
            let used = self.backend()?.used_bytes().map_err(backend_err)?;
            rec.record(StorageEvent::Used { bytes: used });
            used
        };
        self.used_at_start = Some(used);
        Ok(used)
    }

    /// Replaces `key`'s overlay entry, refusing growth past the quota.
    fn stage(
        &mut self,
        key: &str,
        value: Option<Vec<u8>>,
        rec: &mut Recorder,
    ) -> Result<(), CapError> {
        let grant = self.check(key)?;
        let committed = i128::from(self.committed_entry_size(key, rec)?.unwrap_or(0));
        let old = self
            .pending
            .get(key)
            .map_or(0, |p| i128::from(overlay_size(key, p)) - committed);
        let new = i128::from(overlay_size(key, &value)) - committed;
        if new > old {
            let used = i128::from(self.used_at_start(rec)?);
            let projected = used + self.pending_delta - old + new;
            if projected > i128::from(grant.max_bytes) {
                return Err(CapError::QuotaExceeded(format!(
                    "storage quota exceeded: writing `{key}` would use {projected} bytes, limit {}",
                    grant.max_bytes
                )));
            }
        }
        self.pending_delta += new - old;
        if let Some(v) = &value {
            self.bytes_written += entry_size(key, v.len());
        }
        self.pending.insert(key.to_owned(), value);
        Ok(())
    }

    pub fn set(&mut self, key: &str, value: &[u8], rec: &mut Recorder) -> Result<(), CapError> {
        self.stage(key, Some(value.to_vec()), rec)
    }

    pub fn delete(&mut self, key: &str, rec: &mut Recorder) -> Result<(), CapError> {
        self.stage(key, None, rec)
    }

    /// Applies the overlay atomically (live runs only; a replay never writes).
    /// `receipt` is stored with the writes (see [`Batch::receipt`]); a task that wrote nothing
    /// commits nothing and leaves no receipt (running it again has no effect to repeat).
    pub fn commit(
        &mut self,
        replay: bool,
        receipt: Option<(String, Vec<u8>)>,
    ) -> Result<(), CapError> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_delta = 0;
        if replay || pending.is_empty() {
            return Ok(());
        }
        if let Some((_, r)) = &receipt
            && r.len() > MAX_RECEIPT_BYTES
        {
            return Err(CapError::Failed(format!(
                "storage receipt is {} bytes, over {MAX_RECEIPT_BYTES}",
                r.len()
            )));
        }
        let mut batch = Batch {
            now_unix_secs: unix_now_secs(),
            max_bytes: self.grant.map(|g| g.max_bytes),
            reads: self
                .snapshot
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            receipt,
            ..Batch::default()
        };
        for (k, v) in pending {
            match v {
                Some(v) => batch.writes.push((k, v)),
                None => batch.deletes.push(k),
            }
        }
        self.backend()?.apply(&batch).map_err(backend_err)
    }

    /// Key + value bytes of every accepted `set` (the metered figure).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }
}
