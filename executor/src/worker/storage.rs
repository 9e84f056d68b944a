//! The Agent's storage backend as the worker shares it between tasks.

use std::path::Path;

use ari_runtime::capability::storage::{RedbBackend, RedisBackend, StorageBackend, StorageError};

/// One backend handle per process; each task gets its own view of it.
#[derive(Clone)]
pub enum AgentStorage {
    /// The Agent has no storage grant.
    None,
    /// Embedded on-disk store (single replica).
    Embedded(RedbBackend),
    /// Shared across replicas.
    Redis(Box<RedisBackend>),
}

impl AgentStorage {
    pub fn open(
        granted: bool,
        redis_url: Option<&str>,
        state_dir: &Path,
        namespace: &str,
        agent_uid: &str,
    ) -> Result<Self, StorageError> {
        // The Agent's uid, not its name: an Agent deleted and re-created under the same name
        // must not inherit its predecessor's state (or its receipts). The namespace stays in
        // the scope for readability of the keys.
        let scope = scope(namespace, agent_uid);
        if !granted {
            return Ok(Self::None);
        }
        match redis_url {
            Some(url) => Ok(Self::Redis(Box::new(RedisBackend::connect(url, &scope)?))),
            None => {
                std::fs::create_dir_all(state_dir)
                    .map_err(|e| StorageError::Backend(format!("{}: {e}", state_dir.display())))?;
                Ok(Self::Embedded(RedbBackend::open(state_dir, &scope)?))
            }
        }
    }

    pub fn for_task(&self) -> Option<Box<dyn StorageBackend>> {
        match self {
            Self::None => None,
            Self::Embedded(b) => Some(Box::new(b.clone())),
            Self::Redis(b) => Some(Box::new((**b).clone())),
        }
    }
}

/// The storage scope of an Agent: `NAMESPACE/AGENT_UID`.
pub fn scope(namespace: &str, agent_uid: &str) -> String {
    format!("{namespace}/{agent_uid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recreated_agent_of_the_same_name_gets_a_fresh_scope() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old = AgentStorage::open(true, None, dir.path(), "ns", "uid-old").expect("open");
        let mut h = old.for_task().expect("granted");
        h.apply(&ari_runtime::capability::storage::Batch {
            writes: vec![("k".into(), b"v".to_vec())],
            deletes: Vec::new(),
            reads: Vec::new(),
            max_bytes: None,
            receipt: None,
            now_unix_secs: 0,
            receipt_limits: Default::default(),
        })
        .expect("commit");
        drop((h, old));
        let new = AgentStorage::open(true, None, dir.path(), "ns", "uid-new").expect("open");
        let mut h = new.for_task().expect("granted");
        assert_eq!(
            h.get("k").expect("get"),
            None,
            "the new Agent sees the old one's data"
        );
        assert_eq!(scope("ns", "uid-new"), "ns/uid-new");
    }
}
