//! A real OpenAI-compatible model server on 127.0.0.1: llama.cpp's, from the
//! `llama-cpp-python` package that `scripts/model-server.sh` installs (with the tiny model it
//! generates), started on a free port for one test and stopped when dropped.
//!
//! The install is found through `ARI_MODEL_SERVER` (the directory the script prints last);
//! a test without it is skipped with that reason printed, as `scripts/test.sh` always sets it.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable naming the install.
pub const ENV: &str = "ARI_MODEL_SERVER";
/// The chat model's name on the server.
pub const CHAT_MODEL: &str = "tiny";
/// The embedding model's name on the server (the same weights, loaded for embeddings).
pub const EMBEDDING_MODEL: &str = "tiny-embed";
/// How long a server may take to load before the start is a failure.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running server; killed when dropped.
pub struct ModelServer {
    child: Child,
    port: u16,
    /// Holds the config and the log; removed on drop.
    work: PathBuf,
    log: PathBuf,
}

impl ModelServer {
    /// The install `ARI_MODEL_SERVER` names, or why there is none.
    pub fn installed() -> Result<PathBuf, String> {
        let dir = std::env::var_os(ENV).map(PathBuf::from).ok_or_else(|| {
            format!("{ENV} is not set: run `export {ENV}=$(scripts/model-server.sh | tail -n 1)`")
        })?;
        if !dir.join("bin/python").is_file() || !dir.join("models/tiny.gguf").is_file() {
            return Err(format!(
                "{ENV}={} holds no server and model: run scripts/model-server.sh",
                dir.display()
            ));
        }
        Ok(dir)
    }

    /// The installed server started, or `None` after printing why it is not installed.
    pub fn start_or_skip(test: &str) -> Option<ModelServer> {
        match ModelServer::installed() {
            Ok(dir) => Some(ModelServer::start(&dir)),
            Err(why) => {
                eprintln!("skipping {test}: {why}");
                None
            }
        }
    }

    /// Starts the server of install `dir` on a free loopback port and waits until it answers.
    /// Panics (with the server's log) if it exits or does not answer in time. A port taken
    /// between choosing it and the server binding it is retried with another.
    pub fn start(dir: &Path) -> ModelServer {
        let mut tries = 0;
        loop {
            let mut server = ModelServer::spawn(dir);
            match server.wait_ready() {
                Ok(()) => return server,
                Err(log) if tries < 3 && log.contains("address already in use") => tries += 1,
                Err(log) => panic!("{log}"),
            }
        }
    }

    fn spawn(dir: &Path) -> ModelServer {
        let port = free_port();
        let model = dir.join("models/tiny.gguf");
        let config = serde_json::json!({
            "host": "127.0.0.1",
            "port": port,
            "models": [
                {
                    "model": model,
                    "model_alias": CHAT_MODEL,
                    // Tools through llama-cpp-python's grammar-constrained function calling.
                    "chat_format": "chatml-function-calling",
                    "n_ctx": 2048,
                    "n_threads": 1,
                    "n_threads_batch": 1,
                    "verbose": false,
                },
                {
                    "model": model,
                    "model_alias": EMBEDDING_MODEL,
                    "embedding": true,
                    "n_ctx": 512,
                    "n_threads": 1,
                    "n_threads_batch": 1,
                    "verbose": false,
                },
            ],
        });
        let work = std::env::temp_dir().join(format!("ari-model-server-{port}"));
        std::fs::create_dir_all(&work).expect("a work directory");
        let config_path = work.join("config.json");
        std::fs::write(&config_path, config.to_string()).expect("write the server config");
        let log = work.join("server.log");
        let log_file = std::fs::File::create(&log).expect("create the server log");
        let child = Command::new(dir.join("bin/python"))
            .args(["-m", "llama_cpp.server", "--config_file"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log handle"))
            .stderr(log_file)
            .spawn()
            .expect("start llama_cpp.server");
        ModelServer {
            child,
            port,
            work,
            log,
        }
    }

    /// `http://127.0.0.1:<port>/v1`, the API root clients are given.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the server printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `GET /v1/models` until it answers 200 (`Ok`), or the process exits or the time is
    /// up (`Err` with what happened and the server's log).
    fn wait_ready(&mut self) -> Result<(), String> {
        let end = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the model server exited ({status}):\n{}",
                    self.log()
                ));
            }
            if models_answer(self.port) {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(format!(
                    "the model server did not answer within {START_TIMEOUT:?}:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// A port no one listens on now (the server binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Whether `GET /v1/models` answers 200.
fn models_answer(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request =
        format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}
