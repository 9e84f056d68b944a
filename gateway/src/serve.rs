//! The A2A port's connections: a bounded number at once, each with a deadline for its request
//! headers (also while idle between requests) and for every write, so a client that opens
//! connections and sends nothing, sends headers a byte at a time, or stops reading a stream
//! loses its connection instead of holding a place, a task and buffers for ever.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower::ServiceExt as _;
use tracing::debug;

/// Kernel send buffer of each connection: what a client that stops reading can make the
/// gateway's host hold for it before its writes stall (and the write deadline runs).
const SEND_BUFFER: u32 = 64 * 1024;

/// How connections are bounded.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub write_timeout: Duration,
}

/// A listener on `addr` whose connections get [`SEND_BUFFER`].
pub fn bind(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    // Inherited by accepted sockets.
    socket.set_send_buffer_size(SEND_BUFFER)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves `router` on `listener` until `shutdown` resolves. Each request carries the peer's
/// address as [`ConnectInfo`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnLimits,
    open: prometheus::IntGauge,
    shutdown: impl Future<Output = ()>,
) {
    let places = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Past the cap the gateway stops accepting (the kernel's backlog waits) until a
        // connection ends; header and write deadlines make sure they do end.
        let permit = tokio::select! {
            _ = &mut shutdown => return,
            p = places.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    debug!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let io = TimedIo::new(stream, limits.write_timeout, permit, open.clone());
        let router = router.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(io), service);
            if let Err(e) = conn.await {
                debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}

/// A connection whose writes must make progress within `timeout`, holding its place.
pub struct TimedIo {
    inner: TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    _place: OwnedSemaphorePermit,
    open: prometheus::IntGauge,
}

impl TimedIo {
    fn new(
        inner: TcpStream,
        timeout: Duration,
        place: OwnedSemaphorePermit,
        open: prometheus::IntGauge,
    ) -> Self {
        open.inc();
        Self {
            inner,
            timeout,
            stalled: None,
            _place: place,
            open,
        }
    }

    /// After a write that could not go on: an error once it has waited `timeout`.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client has not read for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for TimedIo {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair(write_timeout: Duration) -> (TimedIo, TcpStream) {
        let listener = bind("127.0.0.1:0".parse().expect("an address")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpSocket::new_v4().expect("socket");
        client.set_recv_buffer_size(4096).expect("rcvbuf");
        let (client, accepted) = tokio::join!(client.connect(addr), listener.accept());
        let permit = Arc::new(Semaphore::new(1))
            .acquire_owned()
            .await
            .expect("a place");
        let gauge = prometheus::IntGauge::new("g", "g").expect("gauge");
        let io = TimedIo::new(accepted.expect("accept").0, write_timeout, permit, gauge);
        (io, client.expect("connect"))
    }

    #[tokio::test]
    async fn a_peer_that_stops_reading_gets_a_write_error_after_the_timeout() {
        let (mut io, _client) = pair(Duration::from_millis(300)).await;
        let chunk = vec![b'x'; 64 * 1024];
        let err = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Err(e) = io.write_all(&chunk).await {
                    return e;
                }
            }
        })
        .await
        .expect("the write stalls and then fails, well before 30 s");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_peer_that_reads_is_never_cut() {
        let (mut io, mut client) = pair(Duration::from_millis(300)).await;
        let reader = tokio::spawn(async move {
            let mut buf = vec![0; 64 * 1024];
            let mut total = 0;
            while total < 4 << 20 {
                total += client.read(&mut buf).await.expect("read");
            }
        });
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..64 {
            io.write_all(&chunk).await.expect("writes go through");
        }
        reader.await.expect("reader");
    }
}
