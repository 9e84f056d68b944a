//! Child processes that cannot outlive the test: each is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG`, so the kernel kills it when that thread (and so the test process) dies,
//! even on SIGKILL where no destructor runs.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::{Error, Result, io_err};

/// Makes the child die with its parent thread. Runs between fork and exec.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure only calls async-signal-safe prctl/getppid.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

type Job = (Command, mpsc::Sender<std::io::Result<Child>>);

/// A thread that lives as long as the cluster and spawns its processes, because the parent-death
/// signal fires when the *spawning thread* exits, not the process.
pub(crate) struct Spawner {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Spawner {
    pub(crate) fn new() -> Spawner {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("ari-e2e-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    die_with_parent(&mut cmd);
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok();
        Spawner {
            jobs: Some(tx),
            thread,
        }
    }

    /// Spawns `program args` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<ManagedProcess> {
        let out = File::create(log).map_err(io_err(log))?;
        let err = out.try_clone().map_err(io_err(log))?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        let (tx, rx) = mpsc::channel();
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| Error::Other("spawner stopped".into()))?;
        jobs.send((cmd, tx))
            .map_err(|_| Error::Other("spawner thread is gone".into()))?;
        let child = rx
            .recv()
            .map_err(|_| Error::Other("spawner thread is gone".into()))?
            .map_err(io_err(program))?;
        Ok(ManagedProcess {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        })
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running control-plane component.
pub(crate) struct ManagedProcess {
    pub(crate) name: String,
    child: Child,
    pub(crate) log: PathBuf,
}

impl ManagedProcess {
    /// Fails with the log's tail if the process has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                log: self.log.clone(),
                tail: log_tail(&self.log, 4000),
            }),
            Err(e) => Err(io_err(&self.log)(e)),
        }
    }

    /// Kills and reaps the process.
    pub(crate) fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `max` bytes of a log file, for error messages.
pub fn log_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Loopback ports handed to servers the suite starts: below Linux's ephemeral range
/// (32768–60999), so no outgoing connection's local port can take one between the moment it
/// is chosen and the moment its server binds it. A port the kernel picked (`bind` to port 0)
/// comes from the ephemeral range, and under the e2e suite's load an outgoing connection took
/// such a port before kube-apiserver bound it ("address already in use").
const SERVER_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback TCP port that was free a moment ago, from [`SERVER_PORTS`], tried at random.
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    let span = u64::from(SERVER_PORTS.end - SERVER_PORTS.start);
    for _ in 0..256 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(u64::from(std::process::id()));
        let offset = u16::try_from(h.finish() % span).unwrap_or(0);
        let port = SERVER_PORTS.start + offset;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io_err("127.0.0.1:0"))?;
    let port = l.local_addr().map_err(io_err("127.0.0.1:0"))?.port();
    Ok(port)
}
