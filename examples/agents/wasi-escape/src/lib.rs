//! Hostile: tries to reach the host through WASI — files, directories, sockets, DNS, the
//! environment, arguments and stdin — and reports what it got.
//!
//! Input: optional lines `path=FILE` (more files to read) and `tcp=HOST:PORT` (more addresses to
//! connect to); `/etc/passwd`, `/proc/self/environ`, `/`, `.` and `127.0.0.1:22` are always
//! tried. Output (always `ok`): `{"leaks":N,"attempts":[{"what":W,"got":G,"leak":bool},...]}`;
//! `leaks` counts attempts that got anything of the host, and must be 0.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};

use ari_sdk::{Agent, Output, Task};

struct WasiEscape;

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One attempt: what was tried, what came back, and whether that is a leak.
struct Attempt {
    what: String,
    got: String,
    leak: bool,
}

impl Attempt {
    fn new<T>(what: String, result: std::io::Result<T>, leak: impl Fn(&T) -> bool) -> Self
    where
        T: std::fmt::Debug,
    {
        match result {
            Ok(v) => {
                let mut got = format!("ok: {v:?}");
                got.truncate(200);
                Attempt {
                    what,
                    leak: leak(&v),
                    got,
                }
            }
            Err(e) => Attempt {
                what,
                got: format!("error: {e}"),
                leak: false,
            },
        }
    }

    fn json(&self) -> String {
        format!(
            r#"{{"what":{},"got":{},"leak":{}}}"#,
            json_string(&self.what),
            json_string(&self.got),
            self.leak
        )
    }
}

/// Every escape attempt, in a fixed order.
fn attempts(paths: &[String], addrs: &[String]) -> Vec<Attempt> {
    let mut out = Vec::new();
    for path in paths {
        out.push(Attempt::new(
            format!("read file {path}"),
            std::fs::read(path).map(|b| b.len()),
            |_| true,
        ));
        out.push(Attempt::new(
            format!("list directory {path}"),
            std::fs::read_dir(path).map(|d| d.count()),
            |_| true,
        ));
    }
    out.push(Attempt::new(
        "create file /tmp/ari-wasi-escape".into(),
        std::fs::write("/tmp/ari-wasi-escape", b"escaped"),
        |_| true,
    ));
    let env: Vec<(String, String)> = std::env::vars().collect();
    out.push(Attempt::new("environment".into(), Ok(env), |v| {
        !v.is_empty()
    }));
    let args: Vec<String> = std::env::args().collect();
    out.push(Attempt::new("arguments".into(), Ok(args), |v| {
        !v.is_empty()
    }));
    out.push(Attempt::new(
        "current directory".into(),
        std::env::current_dir(),
        |_| false,
    ));
    let mut stdin = Vec::new();
    out.push(Attempt::new(
        "read stdin".into(),
        std::io::stdin().read_to_end(&mut stdin),
        |n| *n > 0,
    ));
    for addr in addrs {
        out.push(Attempt::new(
            format!("tcp connect {addr}"),
            TcpStream::connect(addr.as_str()).map(|s| s.peer_addr().ok()),
            |_| true,
        ));
        out.push(Attempt::new(
            format!("udp send to {addr}"),
            UdpSocket::bind("0.0.0.0:0").and_then(|s| s.send_to(b"escaped", addr.as_str())),
            |_| true,
        ));
    }
    out.push(Attempt::new(
        "tcp listen 0.0.0.0:0".into(),
        std::net::TcpListener::bind("0.0.0.0:0").map(|l| l.local_addr().ok()),
        |_| true,
    ));
    out.push(Attempt::new(
        "resolve localhost".into(),
        ("localhost", 80)
            .to_socket_addrs()
            .map(|a| a.collect::<Vec<_>>()),
        |a| !a.is_empty(),
    ));
    out
}

impl Agent for WasiEscape {
    fn execute(task: Task) -> Result<Output, String> {
        let mut paths: Vec<String> = ["/etc/passwd", "/proc/self/environ", "/", "."]
            .map(String::from)
            .to_vec();
        let mut addrs = vec!["127.0.0.1:22".to_string()];
        for line in task.input_str()?.lines().map(str::trim) {
            if let Some(p) = line.strip_prefix("path=") {
                paths.push(p.to_owned());
            } else if let Some(a) = line.strip_prefix("tcp=") {
                addrs.push(a.to_owned());
            }
        }
        let all = attempts(&paths, &addrs);
        let leaks = all.iter().filter(|a| a.leak).count();
        let list: Vec<String> = all.iter().map(Attempt::json).collect();
        Ok(Output::from(format!(
            r#"{{"leaks":{leaks},"attempts":[{}]}}"#,
            list.join(",")
        )))
    }
}

ari_sdk::export_agent!(WasiEscape);
