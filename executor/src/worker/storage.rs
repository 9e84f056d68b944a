//! The Agent's storage backend as the worker shares it between tasks.

use std::path::Path;

use crate::capability::storage::{RedbBackend, RedisBackend, StorageBackend, StorageError};

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
        agent: &str,
    ) -> Result<Self, StorageError> {
        // Namespaced so two Agents of the same name in different namespaces never share state.
        let scope = format!("{namespace}/{agent}");
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
