//! Real HTTP servers on 127.0.0.1 for the network tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Server {
    pub base: String,
    pub port: u16,
    hits: Arc<AtomicUsize>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// `/hello` → 200; `/redirect?to=URL` → 302 to URL; `/bomb` → 64 MiB of zeros sent
    /// gzip-encoded (≈64 KiB on the wire); `/slow` → 200 `slow` after 3 s (answered on its
    /// own thread); anything else → 200 `got it`.
    pub fn start() -> Self {
        Self::start_on("127.0.0.1")
    }

    /// The same server on another loopback address (`127.0.0.2`, `[::1]`); `base` uses it.
    pub fn start_on(ip: &str) -> Self {
        let server = Arc::new(tiny_http::Server::http(format!("{ip}:0")).expect("bind"));
        let port = server.server_addr().to_ip().expect("ip").port();
        let hits = Arc::new(AtomicUsize::new(0));
        let (s, h) = (server.clone(), hits.clone());
        let thread = std::thread::spawn(move || {
            for req in s.incoming_requests() {
                h.fetch_add(1, Ordering::SeqCst);
                let url = req.url().to_string();
                if url == "/slow" {
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_secs(3));
                        let _ = req.respond(tiny_http::Response::from_string("slow"));
                    });
                    continue;
                }
                if url == "/bomb" {
                    let header =
                        tiny_http::Header::from_bytes("Content-Encoding", "gzip").expect("header");
                    let _ = req.respond(
                        tiny_http::Response::from_data(gzip_bomb().to_vec()).with_header(header),
                    );
                    continue;
                }
                let resp = if url == "/hello" {
                    tiny_http::Response::from_string("hello from the test server")
                } else if let Some(to) = url.strip_prefix("/redirect?to=") {
                    let header = tiny_http::Header::from_bytes("Location", to).expect("header");
                    tiny_http::Response::from_string("moved")
                        .with_status_code(302)
                        .with_header(header)
                } else {
                    tiny_http::Response::from_string("got it")
                };
                let _ = req.respond(resp);
            }
        });
        Self {
            base: format!("http://{ip}:{port}"),
            port,
            hits,
            server,
            thread: Some(thread),
        }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// 64 MiB of zeros, gzip-compressed (built once).
pub fn gzip_bomb() -> &'static [u8] {
    static BOMB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BOMB.get_or_init(|| {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            gz.write_all(&zeros).expect("gzip");
        }
        gz.finish().expect("gzip")
    })
}
