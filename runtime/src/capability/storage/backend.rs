//! The backend trait every store implements, and the shared quota arithmetic.

/// Committed writes of one task, applied all-or-nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub writes: Vec<(String, Vec<u8>)>,
    pub deletes: Vec<String>,
    /// When set, the batch is refused if it would grow usage past this.
    pub max_bytes: Option<u64>,
    /// Committed values the task read (`None`: absent). The batch is refused with
    /// [`StorageError::Conflict`] if any changed since, so two tasks that read the same key
    /// cannot both commit a write based on it (no lost updates).
    pub reads: Vec<(String, Option<Vec<u8>>)>,
    /// `(id, bytes)` stored in the same transaction, outside the Agent's keys and quota: proof
    /// that task `id`'s writes are committed, with what it returned. The batch is refused with
    /// [`StorageError::Conflict`] if a receipt `id` exists (its writes are in already), so a
    /// task retried after its executor died never applies its writes twice.
    pub receipt: Option<(String, Vec<u8>)>,
    /// Seconds since the Unix epoch: the receipt's time stamp, and what receipt ages are
    /// measured against.
    pub now_unix_secs: u64,
    /// How many receipts the Agent keeps and for how long (applied when a receipt is stored).
    pub receipt_limits: ReceiptLimits,
}

/// Receipts are bounded and pruned: storing one first forgets those older than `ttl_secs`,
/// then the oldest until fewer than `max_count` remain. A retry later than that (or behind more
/// than `max_count` newer commits) is no longer recognised; the operator retries a lost Task
/// within minutes, far inside both bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptLimits {
    pub max_count: u64,
    pub ttl_secs: u64,
}

/// Receipts an Agent keeps at most (each at most [`MAX_RECEIPT_BYTES`]).
pub const MAX_RECEIPTS: u64 = 10_000;
/// How long a receipt is kept: 24 hours.
pub const RECEIPT_TTL_SECS: u64 = 24 * 60 * 60;
/// Largest receipt stored (digests and a signed attestation need about 2 KiB).
pub const MAX_RECEIPT_BYTES: usize = 16 << 10;

impl Default for ReceiptLimits {
    fn default() -> Self {
        Self {
            max_count: MAX_RECEIPTS,
            ttl_secs: RECEIPT_TTL_SECS,
        }
    }
}

impl ReceiptLimits {
    /// Receipts stamped before this are expired at `now`.
    pub fn cutoff(&self, now_unix_secs: u64) -> u64 {
        now_unix_secs.saturating_sub(self.ttl_secs)
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("storage quota exceeded: {would_use} bytes > {max_bytes} byte limit")]
    QuotaExceeded { would_use: u64, max_bytes: u64 },
    #[error("storage backend: {0}")]
    Backend(String),
    /// A key read by the task (or its receipt id) changed before the commit.
    #[error("storage conflict: `{key}` changed since this task read it")]
    Conflict { key: String },
}

/// The first key of `batch.reads` whose committed value is no longer the one read.
pub fn check_reads(
    batch: &Batch,
    mut current: impl FnMut(&str) -> Result<Option<Vec<u8>>, StorageError>,
) -> Result<(), StorageError> {
    for (key, seen) in &batch.reads {
        if current(key)? != *seen {
            return Err(StorageError::Conflict { key: key.clone() });
        }
    }
    Ok(())
}

/// A key-value store scoped to one agent (its namespace).
///
/// Handles of the same store share data (a clone sees the other's commits), so
/// the executor can hand one to each task. Implementations must make `apply`
/// atomic, including its quota check, and keep `used_bytes` equal to the sum of
/// [`entry_size`] over the namespace.
pub trait StorageBackend: Send {
    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, StorageError>;
    fn apply(&mut self, batch: &Batch) -> Result<(), StorageError>;
    fn used_bytes(&mut self) -> Result<u64, StorageError>;
    /// Another handle on the same store (for running a task again).
    fn handle(&self) -> Box<dyn StorageBackend>;
    /// The receipt a committed batch left under `id`.
    fn receipt(&mut self, id: &str) -> Result<Option<Vec<u8>>, StorageError>;
    /// Forgets receipt `id` (once the task's outcome is recorded elsewhere).
    fn drop_receipt(&mut self, id: &str) -> Result<(), StorageError>;
    /// How many receipts the Agent holds now.
    fn receipt_count(&mut self) -> Result<u64, StorageError>;
}

/// What one entry costs against the quota: key bytes plus value bytes.
pub fn entry_size(key: &str, value_len: usize) -> u64 {
    (key.len() + value_len) as u64
}

/// New usage after `batch`, or `QuotaExceeded`. `size_of` returns the current
/// entry size of a key. Shrinking is always allowed, even above the limit.
pub fn plan_usage(
    batch: &Batch,
    used: u64,
    mut size_of: impl FnMut(&str) -> Result<Option<u64>, StorageError>,
) -> Result<u64, StorageError> {
    let mut new = i128::from(used);
    for (key, value) in &batch.writes {
        new -= i128::from(size_of(key)?.unwrap_or(0));
        new += i128::from(entry_size(key, value.len()));
    }
    for key in &batch.deletes {
        new -= i128::from(size_of(key)?.unwrap_or(0));
    }
    let new = u64::try_from(new.max(0)).unwrap_or(u64::MAX);
    if let Some(max_bytes) = batch.max_bytes
        && new > max_bytes
        && new > used
    {
        return Err(StorageError::QuotaExceeded {
            would_use: new,
            max_bytes,
        });
    }
    Ok(new)
}
