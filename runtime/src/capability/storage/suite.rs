//! One test suite run against every backend: the backend contract itself, and
//! the per-task transaction on top of it. Redis tests start a real
//! `redis-server` and skip (with a notice) only when the binary is absent.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;
use crate::capability::{CapError, Grants, Mode, StorageGrant, TaskCapabilities};
use ari_model::grant::GrantSet;

/// Makes a handle to agent `name`'s namespace in the store under test (all share one store).
type Make<'a> = &'a dyn Fn(&str) -> Box<dyn StorageBackend>;

fn batch(writes: &[(&str, &[u8])], deletes: &[&str], max: Option<u64>) -> Batch {
    Batch {
        writes: writes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect(),
        deletes: deletes.iter().map(|k| k.to_string()).collect(),
        max_bytes: max,
        reads: Vec::new(),
        receipt: None,
        ..Batch::default()
    }
}

/// Receipts are bounded by count and pruned by age, whatever the backend.
fn receipt_contract(make: Make) {
    let limits = ReceiptLimits {
        max_count: 3,
        ttl_secs: 100,
    };
    let commit = |id: &str, now: u64| {
        make("receipts").apply(&Batch {
            writes: vec![(format!("k-{id}"), b"v".to_vec())],
            receipt: Some((id.to_owned(), id.as_bytes().to_vec())),
            now_unix_secs: now,
            receipt_limits: limits,
            ..Batch::default()
        })
    };
    let held = |id: &str| make("receipts").receipt(id).unwrap().is_some();
    for (i, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
        commit(id, 1000 + i as u64).unwrap();
    }
    assert_eq!(make("receipts").receipt_count().unwrap(), 3);
    // A fourth forgets the oldest: never more than max_count.
    commit("r4", 1003).unwrap();
    assert_eq!(make("receipts").receipt_count().unwrap(), 3);
    assert!(!held("r1") && held("r2") && held("r3") && held("r4"));
    // Receipts past their age are pruned by the next commit that stores one.
    commit("r5", 1150).unwrap();
    assert_eq!(make("receipts").receipt_count().unwrap(), 1);
    assert!(!held("r2") && !held("r3") && !held("r4") && held("r5"));
    assert_eq!(
        make("receipts").receipt("r5").unwrap().as_deref(),
        Some(&b"r5"[..])
    );
    // A commit without a receipt prunes nothing; dropping one frees its slot.
    make("receipts")
        .apply(&Batch {
            writes: vec![("plain".into(), b"v".to_vec())],
            now_unix_secs: 99_999,
            receipt_limits: limits,
            ..Batch::default()
        })
        .unwrap();
    assert!(held("r5"));
    make("receipts").drop_receipt("r5").unwrap();
    assert_eq!(make("receipts").receipt_count().unwrap(), 0);
    assert_eq!(make("other").receipt_count().unwrap(), 0);
}

fn backend_contract(make: Make) {
    let mut a = make("alpha");
    assert_eq!(a.get("k").unwrap(), None);
    assert_eq!(a.used_bytes().unwrap(), 0);

    a.apply(&batch(
        &[("k", b"hello"), ("bin", &[0, 255, 10])],
        &[],
        None,
    ))
    .unwrap();
    assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"hello"[..]));
    assert_eq!(a.get("bin").unwrap().as_deref(), Some(&[0u8, 255, 10][..]));
    assert_eq!(a.used_bytes().unwrap(), 6 + 6);

    // Overwrite shrinks usage.
    a.apply(&batch(&[("k", b"hi")], &[], None)).unwrap();
    assert_eq!(a.used_bytes().unwrap(), 3 + 6);

    // Another handle to the same agent sees it; another agent does not.
    let mut a2 = make("alpha");
    assert_eq!(a2.get("k").unwrap().as_deref(), Some(&b"hi"[..]));
    let mut b = make("beta");
    assert_eq!(b.get("k").unwrap(), None);
    assert_eq!(b.used_bytes().unwrap(), 0);

    // Over quota: refused whole, nothing applied.
    let err = a
        .apply(&batch(
            &[("big", b"0123456789"), ("k", b"h")],
            &[],
            Some(12),
        ))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::QuotaExceeded {
                would_use: 21,
                max_bytes: 12
            }
        ),
        "{err:?}"
    );
    assert_eq!(a.get("big").unwrap(), None);
    assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"hi"[..]));
    assert_eq!(a.used_bytes().unwrap(), 9);

    // Exactly at quota is fine; shrinking is fine even when over a lowered quota.
    a.apply(&batch(&[("k", b"hiya")], &[], Some(11))).unwrap();
    assert_eq!(a.used_bytes().unwrap(), 11);
    a.apply(&batch(&[("k", b"h")], &[], Some(1))).unwrap();
    assert_eq!(a.used_bytes().unwrap(), 8);

    // Deletes, including of a missing key.
    a.apply(&batch(&[], &["k", "bin", "nope"], None)).unwrap();
    assert_eq!(a.get("k").unwrap(), None);
    assert_eq!(a.used_bytes().unwrap(), 0);
    assert_eq!(b.used_bytes().unwrap(), 0);
}

fn task(make: Make, max_bytes: u64) -> TaskCapabilities {
    let grants = Grants::load(
        GrantSet {
            storage: Some(StorageGrant { max_bytes }),
            ..GrantSet::default()
        },
        None,
    )
    .unwrap();
    TaskCapabilities::for_test(&grants, Some(make("agent")), [0; 32], 0, Mode::Live)
}

fn transaction_contract(make: Make) {
    // Uncommitted writes are invisible to other tasks; committed ones are visible.
    let mut t1 = task(make, 1024);
    assert_eq!(t1.storage_get("count").unwrap(), None);
    t1.storage_set("count", b"1").unwrap();
    assert_eq!(t1.storage_get("count").unwrap().as_deref(), Some(&b"1"[..]));
    let mut t2 = task(make, 1024);
    assert_eq!(
        t2.storage_get("count").unwrap(),
        None,
        "uncommitted write leaked"
    );
    t1.commit(None).unwrap();
    let mut t3 = task(make, 1024);
    assert_eq!(t3.storage_get("count").unwrap().as_deref(), Some(&b"1"[..]));
    // A task that is never committed (failed task) leaves no trace in storage.
    t3.storage_set("count", b"2").unwrap();
    t3.storage_delete("count").unwrap();
    assert_eq!(t3.storage_get("count").unwrap(), None);
    drop(t3);
    let mut t4 = task(make, 1024);
    assert_eq!(t4.storage_get("count").unwrap().as_deref(), Some(&b"1"[..]));
    t4.storage_delete("count").unwrap();
    t4.commit(None).unwrap();
    assert_eq!(task(make, 1024).storage_get("count").unwrap(), None);

    // Quota: committed + pending key+value bytes.
    let mut q = task(make, 20);
    q.storage_set("a", &[1; 9]).unwrap(); // 10
    q.storage_set("a", &[1; 9]).unwrap(); // overwrite in overlay: still 10
    q.storage_set("b", &[2; 9]).unwrap(); // 20: exactly at quota
    let err = q.storage_set("c", &[3]).unwrap_err();
    assert!(
        matches!(&err, CapError::QuotaExceeded(m) if m.starts_with("storage quota exceeded")),
        "{err:?}"
    );
    assert_eq!(q.denials().len(), 1);
    q.storage_set("b", &[2; 4]).unwrap(); // shrink: 15
    q.storage_set("c", &[3; 4]).unwrap(); // 20
    assert_eq!(q.usage().storage_bytes_written, 10 + 10 + 10 + 5 + 5);
    q.commit(None).unwrap();
    assert_eq!(make("agent").used_bytes().unwrap(), 20);
    // The next task sees the committed bytes against its quota; a delete frees room.
    let mut n = task(make, 20);
    assert!(matches!(
        n.storage_set("d", &[0]),
        Err(CapError::QuotaExceeded(_))
    ));
    n.storage_delete("a").unwrap();
    n.storage_set("d", &[0; 9]).unwrap();
    n.commit(None).unwrap();
    assert_eq!(make("agent").used_bytes().unwrap(), 20);

    // Two concurrent tasks each within quota cannot jointly overrun it at commit.
    let mut x = task(make, 40);
    let mut y = task(make, 40);
    x.storage_set("x", &[0; 14]).unwrap(); // 20 + 15 = 35
    y.storage_set("y", &[0; 14]).unwrap(); // 35 from y's view too
    x.commit(None).unwrap();
    let err = y.commit(None).unwrap_err();
    assert!(
        matches!(&err, CapError::QuotaExceeded(m) if m.contains("quota")),
        "{err:?}"
    );
    assert_eq!(make("agent").used_bytes().unwrap(), 35);

    // Two concurrent read-modify-writes of one key: the second commit is refused as a
    // conflict (the runtime runs that task again), so neither update is lost.
    let mut p = task(make, 1000);
    let mut q = task(make, 1000);
    assert_eq!(p.storage_get("n").unwrap(), None);
    assert_eq!(q.storage_get("n").unwrap(), None);
    p.storage_set("n", b"1").unwrap();
    q.storage_set("n", b"1").unwrap();
    p.commit(None).unwrap();
    let err = q.commit(None).unwrap_err();
    assert!(matches!(&err, CapError::Conflict(_)), "{err:?}");
    let mut r = task(make, 1000);
    assert_eq!(r.storage_get("n").unwrap().as_deref(), Some(&b"1"[..]));
    r.storage_set("n", b"2").unwrap();
    r.commit(None).unwrap();
    assert_eq!(make("agent").get("n").unwrap().as_deref(), Some(&b"2"[..]));
    // A blind write (no read) never conflicts.
    let mut blind = task(make, 1000);
    blind.storage_set("n", b"3").unwrap();
    let mut reader = task(make, 1000);
    reader.storage_get("other").unwrap();
    reader.storage_set("n", b"4").unwrap();
    blind.commit(None).unwrap();
    reader.commit(None).unwrap();

    // A receipt is stored with the writes; a second commit under the same receipt (a retried
    // task) is refused whole, so its writes never land twice.
    let mut first = task(make, 1000);
    first.storage_set("r", b"1").unwrap();
    first
        .commit(Some(("task-1".into(), b"done".to_vec())))
        .unwrap();
    assert_eq!(
        make("agent").receipt("task-1").unwrap().as_deref(),
        Some(&b"done"[..])
    );
    assert_eq!(make("other").receipt("task-1").unwrap(), None);
    let mut again = task(make, 1000);
    again.storage_set("r", b"2").unwrap();
    let err = again
        .commit(Some(("task-1".into(), b"again".to_vec())))
        .unwrap_err();
    assert!(matches!(&err, CapError::Conflict(_)), "{err:?}");
    assert_eq!(make("agent").get("r").unwrap().as_deref(), Some(&b"1"[..]));
    make("agent").drop_receipt("task-1").unwrap();
    assert_eq!(make("agent").receipt("task-1").unwrap(), None);
}

fn replay_contract(make: Make) {
    let mut seed = task(make, 1024);
    seed.storage_set("greeting", b"hello").unwrap();
    seed.commit(None).unwrap();

    let grants = Grants::load(
        GrantSet {
            storage: Some(StorageGrant { max_bytes: 30 }),
            ..GrantSet::default()
        },
        None,
    )
    .unwrap();
    let mut live = TaskCapabilities::for_test(&grants, Some(make("agent")), [0; 32], 0, Mode::Live);
    let g = live.storage_get("greeting").unwrap();
    live.storage_set("other", b"abc").unwrap();
    let denied = live
        .storage_set("other", b"abcdefghijklmnopqrst")
        .unwrap_err();
    live.commit(None).unwrap();
    let trace = live.take_trace();
    assert!(!trace.events.is_empty());

    // Change the store behind the replay's back: the replay must not look at it.
    let mut change = task(make, 1024);
    change.storage_set("greeting", b"changed").unwrap();
    change.commit(None).unwrap();

    let mut replay =
        TaskCapabilities::for_test(&grants, None, [0; 32], 0, Mode::Replay(trace.clone()));
    assert_eq!(replay.storage_get("greeting").unwrap(), g);
    replay.storage_set("other", b"abc").unwrap();
    assert_eq!(
        replay
            .storage_set("other", b"abcdefghijklmnopqrst")
            .unwrap_err(),
        denied
    );
    replay.commit(None).unwrap();
    assert_eq!(replay.replay_remaining(), 0);
    assert_eq!(replay.take_trace().sha256(), trace.sha256());
    assert_eq!(
        make("agent").get("other").unwrap().as_deref(),
        Some(&b"abc"[..]),
        "replay must not commit"
    );

    // A replay asking for a different key diverges.
    let mut wrong = TaskCapabilities::for_test(&grants, None, [0; 32], 0, Mode::Replay(trace));
    let err = wrong.storage_get("other-key").unwrap_err();
    assert!(
        matches!(&err, CapError::Failed(m) if m.starts_with("replay diverged")),
        "{err:?}"
    );
}

fn full_suite(make: Make) {
    backend_contract(make);
    // Fresh namespace for the transaction tests: wipe "agent".
    transaction_contract(make);
    let mut wipe = make("agent");
    let keys = ["a", "b", "c", "d", "x", "y", "n", "r"];
    wipe.apply(&batch(&[], &keys, None)).unwrap();
    assert_eq!(wipe.used_bytes().unwrap(), 0);
    replay_contract(make);
    receipt_contract(make);
}

#[test]
fn storage_memory_backend_suite() {
    let store = std::sync::Mutex::new(std::collections::HashMap::<String, MemoryBackend>::new());
    full_suite(&|agent| {
        let mut map = store.lock().unwrap();
        Box::new(map.entry(agent.to_owned()).or_default().clone())
    });
}

#[test]
fn storage_redb_backend_suite() {
    let dir = tempfile::tempdir().unwrap();
    let root = RedbBackend::open(dir.path(), "root").unwrap();
    full_suite(&|agent| Box::new(root.for_agent(agent)));
    drop(root);
    // Durable: a reopened database still has the committed state.
    let mut reopened = RedbBackend::open(dir.path(), "agent").unwrap();
    assert_eq!(reopened.get("other").unwrap().as_deref(), Some(&b"abc"[..]));
}

/// The Redis backend's share of the suite (the backend is behind the `redis` feature).
#[cfg(feature = "redis")]
mod redis_backend {
    use super::*;

    /// A real `redis-server` on a free 127.0.0.1 port in a temp dir; killed on drop.
    struct RedisServer {
        child: Child,
        url: String,
        _dir: tempfile::TempDir,
    }

    impl RedisServer {
        fn binary() -> Option<PathBuf> {
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
                .map(|d| d.join("redis-server"))
                .find(|p| p.is_file())
        }

        fn start() -> Option<Self> {
            let Some(bin) = Self::binary() else {
                eprintln!(
                    "NOTICE: redis-server not found; skipping Redis backend tests (apt-get install -y redis-server)"
                );
                return None;
            };
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("free port");
            let dir = tempfile::tempdir().expect("tempdir");
            let child = Command::new(bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server");
            let server = Self {
                child,
                url: format!("redis://127.0.0.1:{port}/"),
                _dir: dir,
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(mut b) = RedisBackend::connect(&server.url, "probe")
                    && b.used_bytes().is_ok()
                {
                    return Some(server);
                }
                assert!(Instant::now() < deadline, "redis-server did not come up");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn storage_redis_backend_suite() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let root = RedisBackend::connect(&server.url, "root").unwrap();
        full_suite(&|agent| Box::new(root.for_agent(agent)));
        // Keys are namespaced by agent (hash-tagged).
        let mut raw = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut raw).unwrap();
        assert!(keys.contains(&"ari:{agent}:kv".to_string()), "{keys:?}");
        assert!(keys.contains(&"ari:{alpha}:used".to_string()), "{keys:?}");
    }

    #[test]
    fn storage_redis_unreachable_is_a_backend_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let err = RedisBackend::connect(&format!("redis://127.0.0.1:{port}/"), "a").unwrap_err();
        assert!(matches!(err, StorageError::Backend(_)), "{err:?}");
    }
}

#[test]
fn storage_denied_without_grant_and_bad_keys() {
    let mut t = TaskCapabilities::for_test(
        &Grants::default(),
        Some(Box::new(MemoryBackend::new())),
        [0; 32],
        0,
        Mode::Live,
    );
    assert!(matches!(t.storage_get("k"), Err(CapError::Denied(_))));
    assert!(matches!(t.storage_set("k", b"v"), Err(CapError::Denied(_))));
    assert!(matches!(t.storage_delete("k"), Err(CapError::Denied(_))));
    assert_eq!(t.denials().len(), 3);
    let mut g = task(&|_| Box::new(MemoryBackend::new()), 10_000);
    assert!(matches!(g.storage_set("", b"v"), Err(CapError::Invalid(_))));
    let long = "k".repeat(MAX_KEY_BYTES + 1);
    assert!(matches!(g.storage_get(&long), Err(CapError::Invalid(_))));
    let mut none = TaskCapabilities::for_test(
        &Grants::load(
            GrantSet {
                storage: Some(StorageGrant { max_bytes: 10 }),
                ..GrantSet::default()
            },
            None,
        )
        .unwrap(),
        None,
        [0; 32],
        0,
        Mode::Live,
    );
    assert!(
        matches!(none.storage_get("k"), Err(CapError::Failed(m)) if m.contains("no storage backend"))
    );
}
