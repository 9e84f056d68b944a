//! Randomness from the task seed: reproducible, so replays and re-executions agree.
//!
//! Two ChaCha20 streams with domain-separated keys: one behind the gated
//! `random-bytes` host call, one behind WASI `random_get` (always allowed,
//! because language runtimes seed hash maps from it). Using separate streams
//! means a guest's hidden WASI reads never shift its `random-bytes` values.

mod events;
mod link;
pub use events::RandomEvent;
pub use link::FUEL;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

use ari_model::CapabilityName;

use super::{CapError, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;
use crate::trace::{Recorder, mismatch};

/// Largest single `random-bytes` request.
pub const MAX_RANDOM_BYTES: u32 = 64 * 1024;

const HOST_DOMAIN: &[u8] = b"ari.random.host.v1";
const WASI_DOMAIN: &[u8] = b"ari.random.wasi.v1";

fn stream(seed: &[u8; 32], domain: &[u8]) -> ChaCha20Rng {
    let mut h = Sha256::new();
    h.update(domain);
    h.update(seed);
    ChaCha20Rng::from_seed(h.finalize().into())
}

/// The streams are keyed on first use: most tasks draw from neither, and keying both (two
/// SHA-256s) was a cost every task paid. The bytes drawn are the same either way.
pub struct RandomCapability {
    granted: bool,
    seed: [u8; 32],
    host: Option<ChaCha20Rng>,
    wasi: Option<ChaCha20Rng>,
}

impl RandomCapability {
    pub fn new(granted: bool, seed: [u8; 32]) -> Self {
        Self {
            granted,
            seed,
            host: None,
            wasi: None,
        }
    }

    /// `random-bytes`: needs `randomness`; recorded (live) or served from the trace (replay).
    pub fn random_bytes(&mut self, len: u32, rec: &mut Recorder) -> Result<Vec<u8>, CapError> {
        if !self.granted {
            return Err(CapError::not_granted("randomness"));
        }
        if len > MAX_RANDOM_BYTES {
            return Err(CapError::Failed(format!(
                "random-bytes: {len} bytes requested, at most {MAX_RANDOM_BYTES} per call"
            )));
        }
        if rec.is_replay() {
            let RandomEvent::Bytes { bytes } = rec.replay_next(&[RandomEvent::BYTES])?;
            if bytes.len() != len as usize {
                return Err(mismatch(
                    "random length",
                    &bytes.len().to_string(),
                    &len.to_string(),
                ));
            }
            return Ok(bytes);
        }
        let mut bytes = vec![0u8; len as usize];
        let seed = &self.seed;
        self.host
            .get_or_insert_with(|| stream(seed, HOST_DOMAIN))
            .fill_bytes(&mut bytes);
        rec.record(RandomEvent::Bytes {
            bytes: bytes.clone(),
        });
        Ok(bytes)
    }

    /// WASI `random_get`: deterministic from the seed, so not recorded.
    pub fn fill_wasi(&mut self, buf: &mut [u8]) {
        let seed = &self.seed;
        self.wasi
            .get_or_insert_with(|| stream(seed, WASI_DOMAIN))
            .fill_bytes(buf);
    }
}

impl Capability for RandomCapability {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Randomness);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        Self::new(grants.grants(CapabilityName::Randomness), task.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_denied_without_grant() {
        let mut r = RandomCapability::new(false, [0; 32]);
        let mut rec = Recorder::live();
        assert!(matches!(
            r.random_bytes(4, &mut rec),
            Err(CapError::Denied(_))
        ));
    }

    #[test]
    fn random_is_seeded_and_streams_are_separate() {
        let mut rec = Recorder::live();
        let mut a = RandomCapability::new(true, [1; 32]);
        let mut b = RandomCapability::new(true, [1; 32]);
        let mut c = RandomCapability::new(true, [2; 32]);
        let mut wasi = [0u8; 16];
        b.fill_wasi(&mut wasi); // must not shift b's host stream
        let x = a.random_bytes(16, &mut rec).unwrap();
        assert_eq!(x, b.random_bytes(16, &mut rec).unwrap());
        assert_ne!(x, c.random_bytes(16, &mut rec).unwrap());
        assert_ne!(&x[..], &wasi[..]);
        assert!(a.random_bytes(MAX_RANDOM_BYTES + 1, &mut rec).is_err());
    }

    #[test]
    fn the_streams_are_the_seeds_chacha20_keyed_by_domain() {
        // Keyed lazily, the streams still start where eagerly keyed ones did.
        let seed = [9u8; 32];
        let mut r = RandomCapability::new(true, seed);
        let mut rec = Recorder::live();
        let mut host = [0u8; 40];
        stream(&seed, HOST_DOMAIN).fill_bytes(&mut host);
        let mut wasi = [0u8; 40];
        stream(&seed, WASI_DOMAIN).fill_bytes(&mut wasi);
        let mut got = [0u8; 40];
        r.fill_wasi(&mut got);
        assert_eq!(got, wasi);
        assert_eq!(r.random_bytes(40, &mut rec).expect("granted"), host);
    }
}
