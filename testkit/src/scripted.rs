//! A scripted HTTP/1.1 server on 127.0.0.1: a hostile registry, or an internal service behind
//! one. Scripted because a real registry cannot be made to misbehave this way (redirect to
//! another port or host, name a token realm elsewhere, stream a manifest forever, serve junk
//! layers, answer with an internal error page); every test that uses it says which of these
//! it plays. Used by `oci/tests/hostile.rs` and the e2e tenant trials; it needs only std and
//! tokio.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// What a reply's body is.
#[derive(Clone)]
pub enum Body {
    Bytes(Vec<u8>),
    /// `len` bytes of `byte`, without a Content-Length when `declared` is false (a stream that
    /// looks endless to the client).
    Repeat {
        byte: u8,
        len: u64,
        declared: bool,
    },
    /// These bytes (no Content-Length), then nothing more while the connection stays open: a
    /// stream that stalls. With `head` false not even the status line is sent (a server that
    /// accepts and never answers).
    Stall {
        prefix: Vec<u8>,
        head: bool,
    },
}

/// One scripted answer.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// Pause between 64 KiB chunks (0: none): makes transfers overlap so concurrency shows.
    pub pace: Duration,
}

impl Reply {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Bytes(body.into()),
            pace: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    pub fn redirect(to: impl Into<String>) -> Reply {
        Reply::new(307, Vec::new()).header("Location", to)
    }

    /// Sends the head and `prefix`, then stalls.
    pub fn stall_after(status: u16, prefix: impl Into<Vec<u8>>) -> Reply {
        Reply {
            body: Body::Stall {
                prefix: prefix.into(),
                head: true,
            },
            ..Reply::new(status, Vec::new())
        }
    }

    /// Accepts the request and never answers.
    pub fn hang() -> Reply {
        Reply {
            body: Body::Stall {
                prefix: Vec::new(),
                head: false,
            },
            ..Reply::new(200, Vec::new())
        }
    }

    pub fn repeat(byte: u8, len: u64, declared: bool) -> Reply {
        Reply {
            body: Body::Repeat {
                byte,
                len,
                declared,
            },
            ..Reply::new(200, Vec::new())
        }
    }
}

/// A request as the script sees it.
pub struct Request {
    /// The path with its query.
    pub target: String,
    headers: Vec<(String, String)>,
    /// The body, as far as its Content-Length says (at most 1 MiB).
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `http://<Host header>`: this server as the client addressed it.
    pub fn origin(&self) -> String {
        format!("http://{}", self.header("host").unwrap_or_default())
    }
}

type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// Largest request body kept.
const MAX_BODY: usize = 1 << 20;

struct State {
    script: Box<Script>,
    /// Request targets (path and query) in arrival order.
    hits: Mutex<Vec<String>>,
    /// Every request in arrival order.
    requests: Mutex<Vec<Arc<Request>>>,
    /// Body bytes written, over all replies.
    sent: AtomicU64,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running scripted server; stops when dropped.
pub struct Scripted {
    port: u16,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Scripted {
    /// Serves `script(request)` for every request.
    pub async fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let state = Arc::new(State {
            script: Box::new(script),
            hits: Mutex::default(),
            requests: Mutex::default(),
            sent: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let serving = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, serving.clone()));
            }
        });
        Scripted { port, state, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, as a registry in a reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn hits(&self) -> Vec<String> {
        self.state
            .hits
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default()
    }

    /// Every request so far, bodies included, in arrival order.
    pub fn requests(&self) -> Vec<Arc<Request>> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Requests whose target contains `needle`.
    pub fn hits_on(&self, needle: &str) -> usize {
        self.hits().iter().filter(|h| h.contains(needle)).count()
    }

    /// Body bytes written so far (a client that stops reading stops this growing).
    pub fn bytes_sent(&self) -> u64 {
        self.state.sent.load(Ordering::Relaxed)
    }

    /// Requests being answered now (a stalled one counts until its client hangs up).
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests answered at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::Relaxed)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, state: Arc<State>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    if let Ok(mut hits) = state.hits.lock() {
        hits.push(request.target.clone());
    }
    let request = Arc::new(request);
    if let Ok(mut requests) = state.requests.lock() {
        requests.push(request.clone());
    }
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let reply = (state.script)(&request);
    let _ = write_reply(&mut stream, &reply, &state).await;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
}

/// The first request on the connection (one request per connection).
async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    };
    let mut body = head.split_off(end);
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let target = lines.next()?.split_whitespace().nth(1)?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    // Read the body the client declared, so closing the connection does not reset it.
    let declared = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_BODY);
    while body.len() < declared {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Request {
        target,
        headers,
        body,
    })
}

async fn write_reply(stream: &mut TcpStream, reply: &Reply, state: &State) -> std::io::Result<()> {
    if let Body::Stall { prefix, head } = &reply.body {
        if *head {
            let head = format!(
                "HTTP/1.1 {} Scripted\r\nConnection: close\r\n",
                reply.status
            );
            let headers: String = reply
                .headers
                .iter()
                .map(|(n, v)| format!("{n}: {v}\r\n"))
                .collect();
            stream
                .write_all(format!("{head}{headers}\r\n").as_bytes())
                .await?;
            stream.write_all(prefix).await?;
            stream.flush().await?;
        }
        // Hold the connection until the client gives up on it.
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        return Ok(());
    }
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nConnection: close\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match &reply.body {
        Body::Bytes(b) => head.push_str(&format!("Content-Length: {}\r\n", b.len())),
        Body::Repeat {
            len,
            declared: true,
            ..
        } => head.push_str(&format!("Content-Length: {len}\r\n")),
        Body::Repeat { .. } | Body::Stall { .. } => {}
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    match &reply.body {
        Body::Bytes(b) => {
            stream.write_all(b).await?;
            state.sent.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        Body::Repeat { byte, len, .. } => {
            let chunk = vec![*byte; 64 * 1024];
            let mut left = *len;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                stream.write_all(&chunk[..n]).await?;
                state.sent.fetch_add(n as u64, Ordering::Relaxed);
                left -= n as u64;
                // Between chunks only: a pause after the last one kept a reply counted in
                // flight after its client had it all and sent its next request, so a bound
                // of two pulls once looked like three (`pulls_are_bounded_in_number`).
                if left > 0 && !reply.pace.is_zero() {
                    tokio::time::sleep(reply.pace).await;
                }
            }
        }
        Body::Stall { .. } => {}
    }
    stream.shutdown().await
}

/// A [`Scripted`] server on a runtime of its own, for tests that run the task (or the `ari`
/// binary) on their own thread, as a worker does. Dropping it stops the server.
pub struct Blocking {
    pub server: Scripted,
    _runtime: tokio::runtime::Runtime,
}

impl Blocking {
    pub fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Blocking {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the scripted server");
        let server = runtime.block_on(Scripted::start(script));
        Blocking {
            server,
            _runtime: runtime,
        }
    }

    /// `http://127.0.0.1:PORT/v1`: an OpenAI-compatible API root.
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.server.host())
    }
}

/// An OpenAI chat-completions answer whose message is `content`, with the usage given.
pub fn chat_answer(content: &str, prompt_tokens: u32, completion_tokens: u32) -> Reply {
    let body = serde_json::json!({
        "id": "c1",
        "model": "scripted-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    });
    Reply::new(200, body.to_string()).header("content-type", "application/json")
}

/// The model of the tool-using examples (`assistant` in Rust and Python): asked with no tool
/// result yet, it calls `wordcount` on "one two three four"; given the result (a
/// `"role":"tool"` message), it answers "The text has 4 words." (59 then 66 tokens).
pub fn tool_using_answer(request: &Request) -> Reply {
    let body = String::from_utf8_lossy(&request.body);
    let answer = if body.contains(r#""role":"tool""#) {
        r#"{"id":"c2","model":"scripted-1","choices":[{"index":0,
            "message":{"role":"assistant","content":"The text has 4 words."},
            "finish_reason":"stop"}],
            "usage":{"prompt_tokens":60,"completion_tokens":6,"total_tokens":66}}"#
    } else {
        r#"{"id":"c1","model":"scripted-1","choices":[{"index":0,
            "message":{"role":"assistant","content":null,"tool_calls":[{"id":"call-1",
            "type":"function","function":{"name":"wordcount",
            "arguments":"{\"input\":\"one two three four\"}"}}]},
            "finish_reason":"tool_calls"}],
            "usage":{"prompt_tokens":50,"completion_tokens":9,"total_tokens":59}}"#
    };
    Reply::new(200, answer).header("content-type", "application/json")
}
