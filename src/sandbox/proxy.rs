//! The proxy of `network = "allow"`: runs outside the sandbox (in the wrapper), listens on a
//! Unix socket bound into it, and lets through only the hosts the profile's `allow` list
//! names: `CONNECT host:port` tunnels (HTTPS) and absolute-form plain-HTTP requests
//! (`GET http://localhost:8080/v1/messages HTTP/1.1`, a scripted model server's base URL).
//! Everything else is answered `403` and connects nowhere.
//!
//! What an agent sends here is a stranger's input: the head is bounded (16 KiB, 10 s), names
//! are checked before anything is resolved, connections are bounded (64), and what is
//! reported ([`ProxyEvent`]) is the host and port only, bounded: never a header or a body
//! (they carry the agent's API keys).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::relay::{self, Filter, Slot, Verbatim};

pub use crate::spec::sandbox::allow::{Allow, DEFAULT_PORTS};
use crate::spec::sandbox::allow::{Host, parse_port, request_host, shown};

// ---- events ----

/// How a request reached the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `CONNECT host:port`: a tunnel (TLS inside).
    Connect,
    /// An absolute-form plain-HTTP request (`GET http://host:port/…`).
    Http,
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Via::Connect => "CONNECT",
            Via::Http => "HTTP",
        })
    }
}

/// What the proxy did with one connection, for the wrapper to record (as an op). Hosts are
/// bounded and escaped ([`fmt::Display`] gives one line); nothing of a request's headers or
/// body is ever in one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyEvent {
    /// An allowed host and port: connecting to it.
    Allowed { host: String, port: u16, via: Via },
    /// A host or port the `allow` list does not name: answered 403, nothing connected.
    Refused { host: String, port: u16, via: Via },
    /// An allowed host that could not be reached: answered 502.
    Unreachable {
        host: String,
        port: u16,
        error: String,
    },
    /// Not a request the proxy forwards (answered 403, 408 or 431).
    Rejected { why: String },
    /// More connections at once than allowed: answered 503.
    Busy { limit: usize },
}

impl fmt::Display for ProxyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyEvent::Allowed { host, port, via } => write!(f, "allowed {via} {host}:{port}"),
            ProxyEvent::Refused { host, port, via } => {
                write!(
                    f,
                    "refused {via} {host}:{port} (not in the profile's allow list)"
                )
            }
            ProxyEvent::Unreachable { host, port, error } => {
                write!(f, "could not reach {host}:{port}: {error}")
            }
            ProxyEvent::Rejected { why } => write!(f, "rejected: {why}"),
            ProxyEvent::Busy { limit } => {
                write!(f, "refused a connection: {limit} already open")
            }
        }
    }
}

// ---- serving ----

/// The proxy's bounds. [`Limits::default`] is what [`serve`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head longer than this is answered 431.
    pub head_bytes: usize,
    /// A request head not complete in this time is answered 408 (a slow client holds no
    /// connection longer).
    pub head_timeout: Duration,
    /// Connecting to an allowed host, all its addresses together.
    pub connect_timeout: Duration,
    /// Connections at once; the next is answered 503.
    pub max_connections: usize,
    /// A tunnel or a response with no byte either way for this long is closed.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_connections: relay::MAX_CONNECTIONS,
            idle: relay::IDLE,
        }
    }
}

/// A response head from upstream longer than this is answered 502.
const RESPONSE_HEAD_BYTES: usize = 64 * 1024;

/// A running proxy. Dropping it (or [`Proxy::stop`]) stops accepting and ends the open
/// connections.
pub struct Proxy {
    stop: Option<io::PipeWriter>,
    accept: Option<std::thread::JoinHandle<()>>,
    open: Arc<Registry>,
}

impl Proxy {
    /// Stop accepting, end every open connection, and wait for the accept thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        // Closing the pipe's write end wakes the accept thread's poll.
        drop(self.stop.take());
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        self.open.end_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The open connections, so stopping the proxy ends them.
#[derive(Default)]
struct Registry {
    next: AtomicU64,
    streams: Mutex<HashMap<u64, UnixStream>>,
}

impl Registry {
    fn add(&self, stream: &UnixStream) -> Option<u64> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let clone = stream.try_clone().ok()?;
        self.streams.lock().ok()?.insert(id, clone);
        Some(id)
    }
    fn remove(&self, id: u64) {
        if let Ok(mut streams) = self.streams.lock() {
            streams.remove(&id);
        }
    }
    fn end_all(&self) {
        if let Ok(streams) = self.streams.lock() {
            for stream in streams.values() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

type OnEvent = dyn Fn(ProxyEvent) + Send + Sync;

struct Shared {
    allow: Allow,
    limits: Limits,
    on_event: Box<OnEvent>,
}

/// Serve the proxy on `listener` with the default [`Limits`], in a thread of its own (and one
/// per connection); `on_event` hears what it did with each connection.
pub fn serve(
    listener: UnixListener,
    allow: Allow,
    on_event: impl Fn(ProxyEvent) + Send + Sync + 'static,
) -> io::Result<Proxy> {
    serve_with(listener, allow, Limits::default(), on_event)
}

/// [`serve`] with other bounds.
pub fn serve_with(
    listener: UnixListener,
    allow: Allow,
    limits: Limits,
    on_event: impl Fn(ProxyEvent) + Send + Sync + 'static,
) -> io::Result<Proxy> {
    listener.set_nonblocking(true)?;
    // Close-on-exec: a program the wrapper starts must not hold the wake pipe open.
    let (wake_read, wake_write) = io::pipe()?;
    let shared = Arc::new(Shared {
        allow,
        limits,
        on_event: Box::new(on_event),
    });
    let open = Arc::new(Registry::default());
    let registry = Arc::clone(&open);
    let accept = std::thread::Builder::new()
        .name("sandbox-proxy".into())
        .spawn(move || accept_loop(listener, wake_read, shared, registry))?;
    Ok(Proxy {
        stop: Some(wake_write),
        accept: Some(accept),
        open,
    })
}

fn accept_loop(
    listener: UnixListener,
    wake: io::PipeReader,
    shared: Arc<Shared>,
    open: Arc<Registry>,
) {
    let count = Arc::new(AtomicUsize::new(0));
    loop {
        let mut pfds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds, count 2.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if pfds[1].revents != 0 {
            return;
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || relay::accept_again(&e) => {
                continue;
            }
            Err(e) if relay::out_of_files(&e) => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(_) => return,
        };
        let limit = shared.limits.max_connections;
        let Some(slot) = Slot::take(&count, limit) else {
            // Told before answered: whoever sees the answer finds the event recorded.
            (shared.on_event)(ProxyEvent::Busy { limit });
            relay::refuse_now(
                &stream,
                503,
                &format!("too many connections at once ({limit}); try again"),
            );
            continue;
        };
        let Some(id) = open.add(&stream) else {
            continue;
        };
        let shared = Arc::clone(&shared);
        let registry = Arc::clone(&open);
        let started = std::thread::Builder::new()
            .name("sandbox-proxy-conn".into())
            .spawn(move || {
                let _slot = slot;
                handle(stream, &shared);
                registry.remove(id);
            });
        if started.is_err() {
            open.remove(id);
        }
    }
}

/// One client connection: its request head, the allow check, then the tunnel or the request.
fn handle(client: UnixStream, shared: &Shared) {
    let limits = &shared.limits;
    let (head, rest) = match read_head(&client, limits.head_bytes, limits.head_timeout) {
        Ok(Some(read)) => read,
        Ok(None) => return,
        Err(HeadError::TooLarge) => {
            return reject(&client, shared, 431, "a request head over the limit".into());
        }
        Err(HeadError::Slow) => {
            return reject(
                &client,
                shared,
                408,
                "a request head that did not come in time".into(),
            );
        }
    };
    let request = match parse_request(&head) {
        Ok(request) => request,
        Err(why) => return reject(&client, shared, 403, why),
    };
    let (host, port) = (request.host.clone(), request.port);
    let Some(checked) = request_host(&host) else {
        return refuse(&client, shared, &host, port, request.via);
    };
    let Some(by_wildcard) = shared.allow.admit(&checked, port) else {
        return refuse(&client, shared, &host, port, request.via);
    };
    let shown_host = checked.to_string();
    (shared.on_event)(ProxyEvent::Allowed {
        host: shown_host.clone(),
        port,
        via: request.via,
    });
    let upstream = match connect(&checked, port, by_wildcard, limits.connect_timeout) {
        Ok(upstream) => upstream,
        Err(e) => {
            let error = shown(&e.to_string());
            let answer = format!("`{shown_host}:{port}` could not be reached: {error}");
            (shared.on_event)(ProxyEvent::Unreachable {
                host: shown_host,
                port,
                error,
            });
            relay::refuse_now(&client, 502, &answer);
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let _ = client.set_read_timeout(None);
    let (up, down) = (upstream.as_raw_fd(), client.as_raw_fd());
    let give = Duration::from_secs(10);
    match request.via {
        Via::Connect => {
            let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
            if relay::send_all(down, established, give).is_err()
                || relay::send_all(up, &rest, give).is_err()
            {
                return;
            }
            relay::pipe_both_ways(
                client.as_fd(),
                upstream.as_fd(),
                limits.idle,
                &mut Verbatim,
                false,
            );
        }
        Via::Http => {
            if relay::send_all(up, &request.upstream_head, give).is_err()
                || relay::send_all(up, &rest, give).is_err()
            {
                return;
            }
            relay::pipe_both_ways(
                client.as_fd(),
                upstream.as_fd(),
                limits.idle,
                &mut ResponseHead::default(),
                true,
            );
        }
    }
}

fn refuse(client: &UnixStream, shared: &Shared, host: &str, port: u16, via: Via) {
    let host = shown(host);
    let answer = format!(
        "`{host}:{port}` is not allowed: the sandbox profile's `allow` list decides which hosts this agent reaches"
    );
    (shared.on_event)(ProxyEvent::Refused { host, port, via });
    relay::refuse_now(client, 403, &answer);
}

fn reject(client: &UnixStream, shared: &Shared, code: u16, why: String) {
    let answer = format!(
        "{why}; this proxy forwards `CONNECT host:port` and `http://` requests to the hosts the sandbox profile's `allow` list names"
    );
    (shared.on_event)(ProxyEvent::Rejected { why });
    relay::refuse_now(client, code, &answer);
}

/// Resolve (only now, after the allow check) and connect, all addresses within `within`.
fn connect(host: &Host, port: u16, by_wildcard: bool, within: Duration) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = match host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
        Host::Name(name) => (name.as_str(), port).to_socket_addrs()?.collect(),
    };
    let reachable: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| !by_wildcard || !own_machine(a.ip()))
        .collect();
    if reachable.is_empty() {
        return Err(io::Error::other(if addrs.is_empty() {
            "the name resolves to no address"
        } else {
            "a `*.domain` entry never reaches a loopback, link-local or unspecified address"
        }));
    }
    let deadline = Instant::now() + within;
    let mut last = io::Error::from(io::ErrorKind::TimedOut);
    for addr in reachable {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// An address that reaches this machine or its link (what a `*.domain` never leads to).
fn own_machine(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

// ---- the request head ----

/// A request head (through its blank line) and the bytes read after it.
type Head = (Vec<u8>, Vec<u8>);

enum HeadError {
    TooLarge,
    Slow,
}

/// The request head (through its blank line) and any bytes read after it; `None` if the
/// client went away first.
fn read_head(
    client: &UnixStream,
    limit: usize,
    within: Duration,
) -> Result<Option<Head>, HeadError> {
    use std::io::Read;
    let deadline = Instant::now() + within;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut reader = client;
    loop {
        if let Some(end) = head_end(&buf) {
            if end > limit {
                return Err(HeadError::TooLarge);
            }
            let rest = buf.split_off(end);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > limit {
            return Err(HeadError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Slow);
        }
        if client.set_read_timeout(Some(left)).is_err() {
            return Ok(None);
        }
        match reader.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::Slow);
            }
            Err(_) => return Ok(None),
        }
    }
}

/// Where a head ends: after its first empty line (`\r\n\r\n`, or bare `\n\n`).
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(p) = buf[i..].iter().position(|&b| b == b'\n') {
        let at = i + p;
        let next = &buf[at + 1..];
        if next.starts_with(b"\r\n") {
            return Some(at + 3);
        }
        if next.starts_with(b"\n") {
            return Some(at + 2);
        }
        i = at + 1;
    }
    None
}

/// A head's lines, without their line ends (the empty last one left out).
fn head_lines(head: &[u8]) -> Vec<&[u8]> {
    head.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .collect()
}

struct Request {
    via: Via,
    host: String,
    port: u16,
    /// For `Via::Http`: the head sent upstream (origin-form, hop-by-hop headers dropped,
    /// `Host` from the URL, `Connection: close`).
    upstream_head: Vec<u8>,
}

/// Headers of one hop only: never passed on. (`Transfer-Encoding` stays: the body is passed
/// on as it came, framing and all.)
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "upgrade",
    "host",
];

fn parse_request(head: &[u8]) -> Result<Request, String> {
    let lines = head_lines(head);
    let Some(first) = lines.first() else {
        return Err("an empty request".into());
    };
    let first = std::str::from_utf8(first).map_err(|_| "a request line that is not text")?;
    if first.chars().any(|c| c.is_control()) {
        return Err("a request line holding a control character".into());
    }
    let parts: Vec<&str> = first.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err("a request line that is not `METHOD TARGET HTTP/1.x`".into());
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err("not HTTP/1.x".into());
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("a request method that is not a word in capitals".into());
    }
    let mut headers: Vec<(&[u8], &[u8])> = Vec::new();
    for line in &lines[1..] {
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            return Err("a folded header line".into());
        }
        if line.iter().any(|&b| b == b'\r' || b == 0) {
            return Err("a header holding a CR or NUL byte".into());
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err("a header line without `:`".into());
        };
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return Err("a header name that is not a token".into());
        }
        headers.push((name, line[colon + 1..].trim_ascii()));
    }
    if method == "CONNECT" {
        let (host, port) =
            split_authority(target, None).ok_or("a CONNECT target that is not `host:port`")?;
        return Ok(Request {
            via: Via::Connect,
            host,
            port,
            upstream_head: Vec::new(),
        });
    }
    let scheme_end = target.find("://").ok_or(
        "not a proxy request (an origin-form target: a proxy is asked with `http://host/…`)",
    )?;
    let scheme = target[..scheme_end].to_ascii_lowercase();
    if scheme != "http" {
        return Err(format!(
            "a `{}://` URL (HTTPS goes through `CONNECT host:443`)",
            shown(&scheme)
        ));
    }
    let after = &target[scheme_end + 3..];
    let path_at = after.find(['/', '?', '#']).unwrap_or(after.len());
    let authority = &after[..path_at];
    let mut path = after[path_at..].split('#').next().unwrap_or("").to_string();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let (host, port) = split_authority(authority, Some(80))
        .ok_or("a URL without a host (or with a user name or a bad port)")?;
    let dropped: Vec<String> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, value)| value.split(|&b| b == b','))
        .map(|v| String::from_utf8_lossy(v.trim_ascii()).to_ascii_lowercase())
        // The body's framing is never dropped, whatever `Connection` lists.
        .filter(|v| v != "content-length" && v != "transfer-encoding")
        .collect();
    let mut out = format!("{method} {path} {version}\r\nHost: {authority}\r\n").into_bytes();
    for (name, value) in &headers {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || dropped.contains(&lower) {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request {
        via: Via::Http,
        host,
        port,
        upstream_head: out,
    })
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `host[:port]` or `[v6][:port]` as (host, port); the host keeps its brackets. `None` for a
/// user name, an empty host, a bad port, or no port where none is the default.
fn split_authority(authority: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if authority.contains('@') || authority.is_empty() {
        return None;
    }
    let (host, port) = if authority.starts_with('[') {
        let close = authority.find(']')?;
        let (host, rest) = authority.split_at(close + 1);
        match rest {
            "" => (host, None),
            _ => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => parse_port(p).ok()?,
        None => default_port?,
    };
    Some((host.to_string(), port))
}

// ---- the response head ----

/// Upstream's response head, passed on with `Connection: close` (the client opens a new
/// connection for its next request, so each is checked); 1xx interim heads pass as they
/// came, and everything after the final head flows untouched as it arrives.
#[derive(Default)]
struct ResponseHead {
    buf: Vec<u8>,
    passed: bool,
}

impl Filter for ResponseHead {
    fn data(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
        if self.passed {
            out.extend_from_slice(input);
            return true;
        }
        self.buf.extend_from_slice(input);
        while let Some(end) = head_end(&self.buf) {
            let head: Vec<u8> = self.buf.drain(..end).collect();
            let Some(code) = status_code(&head) else {
                out.extend_from_slice(
                    relay::plain_answer(502, "the allowed host answered something not HTTP")
                        .as_bytes(),
                );
                return false;
            };
            if (100..200).contains(&code) && code != 101 {
                out.extend_from_slice(&head);
                continue;
            }
            out.extend_from_slice(&closing(&head));
            out.append(&mut self.buf);
            self.passed = true;
            return true;
        }
        if self.buf.len() > RESPONSE_HEAD_BYTES {
            out.extend_from_slice(
                relay::plain_answer(502, "the allowed host's response head is too long").as_bytes(),
            );
            return false;
        }
        true
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if !self.passed {
            out.extend_from_slice(
                relay::plain_answer(
                    502,
                    "the allowed host closed the connection without an answer",
                )
                .as_bytes(),
            );
        }
    }
}

fn status_code(head: &[u8]) -> Option<u16> {
    let first = head_lines(head).into_iter().next()?;
    let first = std::str::from_utf8(first).ok()?;
    let mut parts = first.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    (code.len() == 3).then(|| code.parse().ok()).flatten()
}

/// A response head with its connection headers replaced by `Connection: close`.
fn closing(head: &[u8]) -> Vec<u8> {
    let lines = head_lines(head);
    let mut out = Vec::with_capacity(head.len() + 20);
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            let name = String::from_utf8_lossy(name.trim_ascii()).to_ascii_lowercase();
            if matches!(
                name.as_str(),
                "connection" | "keep-alive" | "proxy-connection"
            ) {
                continue;
            }
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(list: &[&str]) -> Allow {
        Allow::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn error(list: &[&str]) -> String {
        Allow::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap_err()
    }

    #[test]
    fn a_name_without_a_port_allows_80_and_443_only() {
        let a = allow(&["api.anthropic.com"]);
        assert!(a.allows("api.anthropic.com", 443));
        assert!(a.allows("api.anthropic.com", 80));
        assert!(!a.allows("api.anthropic.com", 8443));
        assert!(!a.allows("anthropic.com", 443));
        assert!(!a.allows("evil.api.anthropic.com", 443));
    }

    #[test]
    fn a_port_allows_that_port_only() {
        let a = allow(&["localhost:8080"]);
        assert!(a.allows("localhost", 8080));
        assert!(!a.allows("localhost", 80));
        assert!(!a.allows("localhost", 443));
        assert!(
            !a.allows("127.0.0.1", 8080),
            "an IP is reached only when listed"
        );
    }

    #[test]
    fn names_compare_case_insensitively_without_a_trailing_dot() {
        let a = allow(&["API.Anthropic.com."]);
        assert!(a.allows("api.anthropic.com", 443));
        assert!(a.allows("API.ANTHROPIC.COM.", 443));
        assert!(!a.allows("api.anthropic.com..", 443));
    }

    #[test]
    fn a_wildcard_is_any_subdomain_but_not_the_domain() {
        let a = allow(&["*.example.com"]);
        assert!(a.allows("a.example.com", 443));
        assert!(a.allows("a.b.example.com", 80));
        assert!(!a.allows("example.com", 443));
        assert!(!a.allows("badexample.com", 443));
        assert!(!a.allows("a.example.com.evil.org", 443));
        let both = allow(&["*.example.com", "example.com"]);
        assert!(both.allows("example.com", 443));
    }

    #[test]
    fn ip_literals_match_only_ip_entries() {
        let a = allow(&["127.0.0.1:9000", "[::1]:9001", "::2"]);
        assert!(a.allows("127.0.0.1", 9000));
        assert!(a.allows("[::1]", 9001));
        assert!(a.allows("[0:0:0:0:0:0:0:1]", 9001));
        assert!(a.allows("[::2]", 443));
        assert!(!a.allows("127.0.0.1", 9001));
        assert!(!a.allows("localhost", 9000));
        // Spellings the resolver would read as 127.0.0.1 are no host names.
        for spelling in ["127.1", "2130706433", "127.0.0.01", "0177.0.0.1"] {
            assert!(!a.allows(spelling, 9000), "{spelling}");
        }
        let star = allow(&["*.0.1.example"]);
        assert!(!star.allows("127.0.0.1", 443));
    }

    #[test]
    fn bad_entries_are_named_with_what_an_entry_is() {
        let e = error(&["https://api.example.com/v1", "ok.example.com", "a b", ""]);
        assert!(
            e.contains("`https://api.example.com/v1`: a host, not a URL"),
            "{e}"
        );
        assert!(e.contains("`a b`: holds a space"), "{e}");
        assert!(e.contains("``: empty"), "{e}");
        assert!(!e.contains("ok.example.com"), "{e}");
        assert!(e.contains("optionally with `:port`"), "{e}");
        assert!(error(&["*"]).contains("network = \"host\""));
        assert!(error(&["a.*.com"]).contains("first label"));
        assert!(error(&["*example.com"]).contains("first label"));
        assert!(error(&["x.com:0"]).contains("port `0`"));
        assert!(error(&["x.com:99999"]).contains("port `99999`"));
        assert!(error(&["x.com:+80"]).contains("port `+80`"));
        assert!(error(&["127.1"]).contains("IPv4 address is a.b.c.d"));
        assert!(error(&["-x.com"]).contains("label `-x`"));
        assert!(error(&["[::1"]).contains("unclosed"));
        assert!(error(&["[zz]:80"]).contains("IPv6"));
        assert!(error(&["u@x.com"]).contains("user name"));
        assert!(error(&["x\u{1b}[2J.com"]).contains("\\u{1b}"));
    }

    #[test]
    fn a_wildcard_never_reaches_this_machine_but_an_exact_entry_may() {
        assert!(own_machine("127.0.0.1".parse().unwrap()));
        assert!(own_machine("0.0.0.0".parse().unwrap()));
        assert!(own_machine("169.254.169.254".parse().unwrap()));
        assert!(own_machine("::1".parse().unwrap()));
        assert!(own_machine("::ffff:127.0.0.1".parse().unwrap()));
        assert!(own_machine("fe80::1".parse().unwrap()));
        assert!(!own_machine("93.184.216.34".parse().unwrap()));
        assert!(!own_machine("2606:4700::1".parse().unwrap()));
        let a = allow(&["*.example.com", "localhost"]);
        let wild = request_host("a.example.com").unwrap();
        assert_eq!(a.admit(&wild, 443), Some(true));
        let exact = request_host("localhost").unwrap();
        assert_eq!(a.admit(&exact, 443), Some(false));
    }

    #[test]
    fn an_absolute_request_goes_upstream_in_origin_form_closing() {
        let head = b"POST http://LocalHost:8080/v1/messages?beta=true HTTP/1.1\r\n\
            Host: wrong\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\n\
            X-Secret: no\r\nProxy-Authorization: Basic eA==\r\nx-api-key: k\r\n\
            Content-Length: 2\r\n\r\n";
        let r = parse_request(head).unwrap();
        assert_eq!(
            (r.via, r.host.as_str(), r.port),
            (Via::Http, "LocalHost", 8080)
        );
        let up = String::from_utf8(r.upstream_head).unwrap();
        assert_eq!(
            up,
            "POST /v1/messages?beta=true HTTP/1.1\r\nHost: LocalHost:8080\r\nx-api-key: k\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n"
        );
        let r = parse_request(b"GET http://example.com HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.port, 80);
        assert!(
            r.upstream_head
                .starts_with(b"GET / HTTP/1.0\r\nHost: example.com\r\n")
        );
    }

    #[test]
    fn connect_needs_host_and_port() {
        let r =
            parse_request(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            (r.via, r.host.as_str(), r.port),
            (Via::Connect, "api.anthropic.com", 443)
        );
        let r = parse_request(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.host, "[::1]");
        assert!(parse_request(b"CONNECT api.anthropic.com HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn what_is_not_a_proxy_request_is_refused() {
        for head in [
            &b"GET /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"GET https://x.com/ HTTP/1.1\r\n\r\n",
            b"GET http://user:pw@x.com/ HTTP/1.1\r\n\r\n",
            b"GET http://x.com/ HTTP/2\r\n\r\n",
            b"get http://x.com/ HTTP/1.1\r\n\r\n",
            b"GET http://x.com/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
            b"GET http://x.com/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            b"GET http://x.com/ HTTP/1.1\r\nNo colon\r\n\r\n",
            b"GET http://x.com/a\rX:1 HTTP/1.1\r\n\r\n",
            b"GET http://x.com/a\tb HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                parse_request(head).is_err(),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn a_head_ends_at_its_first_empty_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\nA: b\n\nbody"), Some(21));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    #[test]
    fn the_response_head_closes_and_interim_heads_pass() {
        let mut f = ResponseHead::default();
        let mut out = Vec::new();
        assert!(f.data(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConn",
            &mut out
        ));
        assert!(f.data(
            b"ection: keep-alive\r\nKeep-Alive: 5\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n",
            &mut out
        ));
        assert!(f.data(b"data: 2\n\n", &mut out));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
             Connection: close\r\n\r\ndata: 1\n\ndata: 2\n\n"
        );
        let mut f = ResponseHead::default();
        let mut out = Vec::new();
        assert!(!f.data(b"SSH-2.0-OpenSSH\r\n\r\n", &mut out));
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 502"));
        let mut f = ResponseHead::default();
        let mut out = Vec::new();
        f.data(b"HTTP/1.1 200", &mut out);
        f.end(&mut out);
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 502"));
    }

    #[test]
    fn events_show_hosts_bounded_and_escaped() {
        let long = "a".repeat(400);
        assert_eq!(shown(&long).chars().count(), 256);
        assert_eq!(shown("x\u{1b}]0;t\u{7}"), "x\\u{1b}]0;t\\u{7}");
        let e = ProxyEvent::Refused {
            host: "evil.com".into(),
            port: 443,
            via: Via::Connect,
        };
        assert_eq!(
            e.to_string(),
            "refused CONNECT evil.com:443 (not in the profile's allow list)"
        );
    }

    #[test]
    fn default_limits_are_the_documented_bounds() {
        let l = Limits::default();
        assert_eq!(l.head_bytes, 16 * 1024);
        assert_eq!(l.head_timeout, Duration::from_secs(10));
        assert_eq!(l.connect_timeout, Duration::from_secs(10));
        assert_eq!(l.max_connections, 64);
        assert_eq!(l.idle, Duration::from_secs(600));
    }
}
