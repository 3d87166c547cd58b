//! The connections of `phoenix serve`: how many may be open, how long a request's headers may
//! take, and who gives way when the server is full. `axum::serve` has none of these knobs, so
//! connections are accepted here and each is served by hyper's HTTP/1 connection with a header
//! read timeout (which also bounds the wait for the next request on a kept-alive connection),
//! a deadline for the request body, and a limit on how long a write may stall.
//! At the cap, the connection that has been idle the longest (no request in progress) is closed
//! for the new one: a thousand sockets that never send anything cannot lock out a real client.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

/// Tunable through the environment (tests use short values); see [`Limits::from_env`].
pub const TIMEOUT_ENV: &str = "PHOENIX_SERVE_TIMEOUT";
pub const MAX_CONNECTIONS_ENV: &str = "PHOENIX_SERVE_MAX_CONNECTIONS";

/// How long in-flight requests get to finish once the server is asked to stop.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most (a browser uses about six).
    pub max_connections: usize,
    /// A request's headers must arrive within this long, counted from the moment the server
    /// waits for them (a new connection, or the end of the previous response); its body
    /// within as long again; and a write the client does not take (it stopped reading) is
    /// given up after as long.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// The defaults, overridden by `PHOENIX_SERVE_TIMEOUT` (a duration, at least
    /// 100ms) and `PHOENIX_SERVE_MAX_CONNECTIONS` (1 to 65536).
    pub fn from_env() -> crate::error::Result<Limits> {
        let mut limits = Limits::default();
        // Connections must never take the file descriptors that SQLite, state files and tmux
        // need (a server out of descriptors answers no one): at most a quarter of them.
        if let Some(fds) = open_files_limit() {
            limits.max_connections = limits.max_connections.min((fds / 4).max(8));
        }
        if let Ok(text) = std::env::var(TIMEOUT_ENV) {
            let d = crate::spec::duration::parse(&text)
                .map_err(|e| crate::error::Error::msg(format!("`{TIMEOUT_ENV}`: {e}")))?;
            if d < Duration::from_millis(100) {
                crate::bail!("`{TIMEOUT_ENV}` = `{text}` is too short: the minimum is 100ms");
            }
            limits.timeout = d;
        }
        if let Ok(text) = std::env::var(MAX_CONNECTIONS_ENV) {
            limits.max_connections = text
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=65_536).contains(n))
                .ok_or_else(|| {
                    crate::error::Error::msg(format!(
                        "`{MAX_CONNECTIONS_ENV}` = `{text}` is not a number from 1 to 65536"
                    ))
                })?;
        }
        Ok(limits)
    }
}

/// The soft `RLIMIT_NOFILE`, if known.
fn open_files_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY)
        .then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// One open connection as the table sees it.
struct Slot {
    /// Requests whose response has not been sent completely.
    busy: AtomicUsize,
    /// When the last request finished (or the connection opened).
    idle_since: Mutex<Instant>,
    /// Closes the connection (it was chosen to make room).
    evict: Notify,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Arc<Slot>>,
}

impl Table {
    /// Room for one more: at the cap the longest-idle connection is evicted; `None` when
    /// every open connection has a request in progress.
    fn admit(&mut self, cap: usize) -> Option<(u64, Arc<Slot>)> {
        if self.open.len() >= cap {
            let (&victim, _) = self
                .open
                .iter()
                .filter(|(_, s)| s.busy.load(Ordering::SeqCst) == 0)
                .min_by_key(|(_, s)| *s.idle_since.lock().unwrap_or_else(|e| e.into_inner()))?;
            if let Some(slot) = self.open.remove(&victim) {
                slot.evict.notify_one();
            }
        }
        self.next += 1;
        let slot = Arc::new(Slot {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            evict: Notify::new(),
        });
        self.open.insert(self.next, slot.clone());
        Some((self.next, slot))
    }
}

/// A request in progress on `slot`, until its response body is dropped.
struct Busy(Arc<Slot>);

impl Busy {
    fn new(slot: &Arc<Slot>) -> Busy {
        slot.busy.fetch_add(1, Ordering::SeqCst);
        Busy(slot.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request counted as in progress while it streams (a live
/// event stream is not an idle connection).
struct Tracked {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that must be complete by a deadline: a body trickled a byte at a time
/// would otherwise keep its connection busy (and so never evicted) for as long as it likes.
struct Deadline {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    within: Duration,
}

impl http_body::Body for Deadline {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                "the request body did not arrive within {}",
                crate::spec::duration::format(self.within)
            )
            .into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection whose writes fail once one has made no progress for `within`: a client that
/// stops reading its response (or a live stream) must not hold a connection for ever.
struct Stall<T> {
    io: T,
    within: Duration,
    since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Stall<T> {
    fn new(io: T, within: Duration) -> Stall<T> {
        Stall {
            io,
            within,
            since: None,
        }
    }

    /// After a write-side poll: clear the clock on progress, start or check it when stuck.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        if poll.is_ready() {
            self.since = None;
            return poll;
        }
        let within = self.within;
        let clock = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(within)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took nothing for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Stall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

/// Serve `router` on `listener` within `limits` until `shutdown` resolves; then stop
/// accepting, let the requests in flight finish (at most [`DRAIN`]) and return.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let table = Arc::new(Mutex::new(Table::default()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => break,
        };
        let stream = match accepted {
            // A response, and each event of a stream (`/api/live`, an MCP call's answer over
            // `/mcp`), is written as soon as it is whole: with Nagle's algorithm a small write
            // after another waits for the client's delayed ACK (~40 ms on Linux).
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                stream
            }
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was accepted:
                // breathe, then go on (never a hot loop, never the end of the server).
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admitted = locked(&table).admit(limits.max_connections);
        let Some((id, slot)) = admitted else {
            refuse(&stream, limits.max_connections);
            continue;
        };
        let connection = serve_connection(stream, slot, router.clone(), limits, stop_rx.clone());
        let table = table.clone();
        tokio::spawn(async move {
            connection.await;
            locked(&table).open.remove(&id);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + DRAIN;
    while !locked(&table).open.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The table of open connections, whatever a panicking holder left in it.
fn locked(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|e| e.into_inner())
}

/// Full of requests in progress: say so if the socket takes it at once, and close.
fn refuse(stream: &tokio::net::TcpStream, max_connections: usize) {
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
    tracing::warn!("{max_connections} connections with requests in progress: refusing another");
}

/// Serve one admitted connection until it closes, is evicted to make room, or (once `stop`
/// changes) has finished the request in flight.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    slot: Arc<Slot>,
    router: axum::Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn({
        let slot = slot.clone();
        move |request: Request<Incoming>| {
            let busy = Busy::new(&slot);
            let router = router.clone();
            let within = limits.timeout;
            let request = request.map(|inner| {
                Body::new(Deadline {
                    inner,
                    deadline: Box::pin(tokio::time::sleep(within)),
                    within,
                })
            });
            async move {
                let response = router
                    .oneshot(request)
                    .await
                    .unwrap_or_else(|never: Infallible| match never {});
                Ok::<_, Infallible>(response.map(|inner| Body::new(Tracked { inner, _busy: busy })))
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.timeout);
    let connection =
        builder.serve_connection(TokioIo::new(Stall::new(stream, limits.timeout)), service);
    let mut connection = std::pin::pin!(connection);
    let mut draining = false;
    loop {
        tokio::select! {
            _ = connection.as_mut() => break,
            _ = slot.evict.notified() => break,
            changed = stop.changed(), if !draining => {
                draining = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_the_peer_does_not_take_fails_after_the_timeout() {
        use tokio::io::AsyncWrite;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            // A real TCP connection whose other end never reads.
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (ours, _) = listener.accept().await.unwrap();
            let mut io = Stall::new(ours, Duration::from_millis(300));
            let chunk = vec![0u8; 64 * 1024];
            let started = Instant::now();
            let error = loop {
                let written =
                    std::future::poll_fn(|cx| Pin::new(&mut io).poll_write(cx, &chunk)).await;
                match written {
                    Ok(_) => {}
                    Err(e) => break e,
                }
                assert!(started.elapsed() < Duration::from_secs(10), "never gave up");
            };
            assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
            assert!(started.elapsed() >= Duration::from_millis(300));
            drop(peer);
        });
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_gives_way() {
        let mut table = Table::default();
        let (first, a) = table.admit(2).unwrap();
        let (_, b) = table.admit(2).unwrap();
        // `b` is busy; `a` has been idle the longest and is evicted.
        let busy = Busy::new(&b);
        let (_, _c) = table.admit(2).unwrap();
        assert!(!table.open.contains_key(&first));
        assert_eq!(table.open.len(), 2);
        drop(a);
        // Everything busy: the next one is refused.
        let _busy_c = Busy::new(
            &table
                .open
                .values()
                .find(|s| !Arc::ptr_eq(s, &b))
                .unwrap()
                .clone(),
        );
        assert!(table.admit(2).is_none());
        drop(busy);
        assert!(table.admit(2).is_some());
    }
}
