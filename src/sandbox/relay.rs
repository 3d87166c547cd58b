//! The sandbox's end of `network = "allow"`: inside the agent's own network namespace a relay
//! listens on a loopback TCP port and carries each connection to the proxy's Unix socket,
//! which bubblewrap binds in from outside. Also `phoenix sandbox-inner`, bubblewrap's payload:
//! it forks the relay, then execs the agent's CLI with the proxy settings pointing at it.
//!
//! The byte pump both ends use ([`pipe_both_ways`]) lives here: it is the relay's whole job.

use std::ffi::{CString, OsString};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Connections the relay carries at once; the next one is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 64;

/// A connection with no byte either way for this long is closed (the proxy bounds it too).
pub const IDLE: Duration = Duration::from_secs(600);

/// The name the relay process shows in `ps` and `/proc/PID/comm`.
pub const PROCESS_NAME: &str = "phoenix-relay";

/// The variables that send a program's HTTP(S) through the relay at `listen`, with no bypass:
/// an empty `NO_PROXY` (a bypassed host would only meet the sandbox's empty network anyway,
/// and a proxy-less connection is how a refusal would go unseen).
pub fn proxy_env(listen: SocketAddr) -> Vec<(&'static str, String)> {
    let url = format!("http://{listen}");
    let mut env: Vec<(&'static str, String)> =
        ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"]
            .into_iter()
            .map(|name| (name, url.clone()))
            .collect();
    env.push(("NO_PROXY", String::new()));
    env.push(("no_proxy", String::new()));
    env
}

/// Bind TCP `listen` and carry each connection to the Unix socket `to`, until an accept fails
/// for good.
pub fn run(listen: SocketAddr, to: PathBuf) -> io::Result<()> {
    serve(TcpListener::bind(listen)?, to)
}

/// [`run`] on a listener already bound (so its port is known, and listening, before anyone
/// connects).
pub fn serve(listener: TcpListener, to: PathBuf) -> io::Result<()> {
    let open = Arc::new(AtomicUsize::new(0));
    let to = Arc::new(to);
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if accept_again(&e) => continue,
            Err(e) if out_of_files(&e) => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(slot) = Slot::take(&open, MAX_CONNECTIONS) else {
            refuse_now(
                &stream,
                503,
                "too many connections at once through the sandbox's relay",
            );
            continue;
        };
        let to = Arc::clone(&to);
        // A thread that cannot start drops the connection (and the slot) with it.
        let _ = std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || {
                let _slot = slot;
                carry(stream, &to);
            });
    }
}

fn carry(client: TcpStream, to: &Path) {
    let _ = client.set_nodelay(true);
    match UnixStream::connect(to) {
        Ok(proxy) => pipe_both_ways(client.as_fd(), proxy.as_fd(), IDLE, &mut Verbatim, false),
        Err(_) => refuse_now(
            &client,
            502,
            "the sandbox's proxy (outside the sandbox) does not answer",
        ),
    }
}

/// An accept error that concerns only the connection being accepted.
pub(crate) fn accept_again(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO | libc::EAGAIN)
    ) || e.kind() == io::ErrorKind::Interrupted
}

/// Out of file descriptors: wait for connections to end rather than spin or give up.
pub(crate) fn out_of_files(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// A short plain-text HTTP answer written at once, before the stream is dropped: what was
/// already sent is read first, so closing does not reset the connection over the answer.
pub(crate) fn refuse_now(stream: &(impl AsFd + ?Sized), code: u16, why: &str) {
    let fd = stream.as_fd().as_raw_fd();
    let mut sink = [0u8; 4096];
    // SAFETY: recv into a local buffer of its length on an fd we hold; MSG_DONTWAIT never blocks.
    while unsafe { libc::recv(fd, sink.as_mut_ptr().cast(), sink.len(), libc::MSG_DONTWAIT) } > 0 {}
    let answer = plain_answer(code, why);
    let _ = send_all(fd, answer.as_bytes(), Duration::from_secs(1));
    // SAFETY: shutdown on an fd we hold.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// `HTTP/1.1 CODE REASON` with `line` as a one-line text body, closing the connection.
pub(crate) fn plain_answer(code: u16, line: &str) -> String {
    let reason = match code {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = format!("phoenix sandbox: {line}\n");
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Write all of `bytes` to a socket within `within`, never raising SIGPIPE.
pub(crate) fn send_all(fd: RawFd, mut bytes: &[u8], within: Duration) -> io::Result<()> {
    let deadline = Instant::now() + within;
    while !bytes.is_empty() {
        // SAFETY: send from a live slice of its length on an fd the caller holds.
        let n = unsafe {
            libc::send(
                fd,
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            bytes = &bytes[n as usize..];
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        wait_for(fd, libc::POLLOUT, left);
    }
    Ok(())
}

fn wait_for(fd: RawFd, events: libc::c_short, within: Duration) {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = within.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one pollfd, its count 1.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}

/// A place among a bounded number of connections, given back when dropped.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Slot {
    pub(crate) fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        open.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Slot(Arc::clone(open)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

// ---- the byte pump ----

/// What one direction of [`pipe_both_ways`] passes on of what it reads.
pub(crate) trait Filter {
    /// `input` was read: append what to pass on to `out`. `false`: read no more from this
    /// side (after `out` is written, the connection ends).
    fn data(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool;
    /// The side ended (or failed): append anything still owed.
    fn end(&mut self, _out: &mut Vec<u8>) {}
}

/// Every byte as it came.
pub(crate) struct Verbatim;

impl Filter for Verbatim {
    fn data(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
        out.extend_from_slice(input);
        true
    }
}

const CHUNK: usize = 64 * 1024;

/// One direction: read from its source side, written to the other.
#[derive(Default)]
struct Flow {
    buf: Vec<u8>,
    sent: usize,
    /// The source gave its last byte (end, error, or its filter stopped it).
    src_done: bool,
    /// The filter ended the exchange: once `buf` is written, the whole connection ends.
    last: bool,
    /// The destination was told the end (`shutdown(SHUT_WR)`).
    dst_shut: bool,
}

impl Flow {
    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }
    fn finished(&self) -> bool {
        self.src_done && self.pending() == 0
    }
    /// Nothing more can reach the destination: drop what is owed and read no more.
    fn abandon(&mut self) {
        self.buf.clear();
        self.sent = 0;
        self.src_done = true;
        self.dst_shut = true;
    }
}

/// Carry bytes both ways between sockets `a` and `b` in one thread, each direction buffered
/// at most a chunk ahead of what its reader takes (so neither direction can stall the other),
/// every byte passed on as soon as it is read (a streamed answer flows as it comes). A side
/// that ends is told on to the other (half-close); a side that is gone (closed, reset) ends
/// what flowed toward it. `b_to_a` sees what `b` sends. Ends when both directions ended, when
/// `end_with_b` and `b`'s direction ended, or after `idle` without a byte either way.
pub(crate) fn pipe_both_ways(
    a: BorrowedFd<'_>,
    b: BorrowedFd<'_>,
    idle: Duration,
    b_to_a: &mut dyn Filter,
    end_with_b: bool,
) {
    let fds = [a.as_raw_fd(), b.as_raw_fd()];
    // flows[s] reads side s and writes side 1 - s.
    let mut flows = [Flow::default(), Flow::default()];
    // Side s takes no more writes (it hung up, was reset or a write failed).
    let mut gone = [false, false];
    let mut verbatim = Verbatim;
    let mut chunk = vec![0u8; CHUNK];
    let mut last_byte = Instant::now();
    loop {
        for s in 0..2 {
            let flow = &mut flows[s];
            if flow.finished() && !flow.dst_shut {
                // SAFETY: shutdown on an fd the caller holds.
                unsafe { libc::shutdown(fds[1 - s], libc::SHUT_WR) };
                flow.dst_shut = true;
            }
        }
        let done = (flows[0].finished() && flows[1].finished())
            || (end_with_b && flows[1].finished())
            || flows.iter().any(|f| f.last && f.finished());
        if done {
            return;
        }
        let mut pfds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; 2];
        for s in 0..2 {
            let mut events = 0;
            if !flows[s].src_done && flows[s].pending() < CHUNK {
                events |= libc::POLLIN;
            }
            if !gone[s] && flows[1 - s].pending() > 0 {
                events |= libc::POLLOUT;
            }
            // A side that is gone reports its hangup on every poll: watched only to read it.
            if events != 0 || !gone[s] {
                pfds[s] = libc::pollfd {
                    fd: fds[s],
                    events,
                    revents: 0,
                };
            }
        }
        let left = idle.saturating_sub(last_byte.elapsed());
        if left.is_zero() {
            return;
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: two pollfds, count 2; an fd of -1 is ignored by poll.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        for s in 0..2 {
            let revents = pfds[s].revents;
            if revents == 0 {
                continue;
            }
            if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                && !flows[s].src_done
                && flows[s].pending() < CHUNK
            {
                // SAFETY: recv into the chunk buffer of its length on an fd the caller holds.
                let got = unsafe {
                    libc::recv(
                        fds[s],
                        chunk.as_mut_ptr().cast(),
                        chunk.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                let filter: &mut dyn Filter = if s == 1 { &mut *b_to_a } else { &mut verbatim };
                let flow = &mut flows[s];
                if got > 0 {
                    last_byte = Instant::now();
                    if !filter.data(&chunk[..got as usize], &mut flow.buf) {
                        flow.src_done = true;
                        flow.last = true;
                    }
                } else if got == 0 {
                    flow.src_done = true;
                    filter.end(&mut flow.buf);
                } else {
                    let e = io::Error::last_os_error();
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) {
                        flow.src_done = true;
                        filter.end(&mut flow.buf);
                        gone[s] = true;
                    }
                }
            }
            if revents & libc::POLLOUT != 0 && !gone[s] {
                let toward = &mut flows[1 - s];
                let owed = &toward.buf[toward.sent..];
                // SAFETY: send from a live slice of its length on an fd the caller holds.
                let put = unsafe {
                    libc::send(
                        fds[s],
                        owed.as_ptr().cast(),
                        owed.len(),
                        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                    )
                };
                if put > 0 {
                    last_byte = Instant::now();
                    toward.sent += put as usize;
                    if toward.sent == toward.buf.len() {
                        toward.buf.clear();
                        toward.sent = 0;
                    }
                } else if put < 0 {
                    let e = io::Error::last_os_error();
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) {
                        gone[s] = true;
                    }
                }
            }
            // Hung up or failed without a read to tell: nothing more reaches this side.
            if revents & (libc::POLLHUP | libc::POLLERR) != 0 && revents & libc::POLLIN == 0 {
                gone[s] = true;
            }
            if revents & libc::POLLNVAL != 0 {
                return;
            }
        }
        for s in 0..2 {
            if gone[s] {
                flows[1 - s].abandon();
            }
        }
    }
}

// ---- `phoenix sandbox-inner` ----

/// `phoenix sandbox-inner`: with a relay (`listen`, `to`), bind `listen`, fork the relay
/// serving it, and set the proxy variables ([`proxy_env`], with the port bound: `:0` picks
/// one); then exec `program` (its first word looked up in `PATH`), which becomes the process
/// the wrapper signals. Returns only when that fails.
pub fn exec_inside(relay: Option<(SocketAddr, PathBuf)>, program: &[OsString]) -> io::Error {
    let Some(name) = program.first() else {
        return io::Error::new(io::ErrorKind::InvalidInput, "no program to run");
    };
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    if let Some((listen, to)) = relay {
        let bound = match start_child(listen, to) {
            Ok(bound) => bound,
            Err(e) => return io::Error::new(e.kind(), format!("the relay on {listen}: {e}")),
        };
        let set = proxy_env(bound);
        env.retain(|(k, _)| !set.iter().any(|(name, _)| k == name));
        env.extend(set.into_iter().map(|(k, v)| (k.into(), v.into())));
    }
    let c = |s: &std::ffi::OsStr| CString::new(s.as_bytes());
    let argv: Result<Vec<CString>, _> = program.iter().map(|a| c(a)).collect();
    let envp: Result<Vec<CString>, _> = env
        .iter()
        .map(|(k, v)| {
            let mut pair = k.clone();
            pair.push("=");
            pair.push(v);
            c(&pair)
        })
        .collect();
    let (Ok(argv), Ok(envp)) = (argv, envp) else {
        return io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte");
    };
    let e = match nix::unistd::execvpe(&argv[0], &argv, &envp) {
        Err(errno) => io::Error::from(errno),
        Ok(never) => match never {},
    };
    io::Error::new(
        e.kind(),
        format!("cannot run `{}`: {e}", name.to_string_lossy()),
    )
}

/// Bind `listen` here (so it listens before the program starts: its first request never
/// races the relay), then fork the relay child serving it toward `to`. The address bound.
///
/// The child ends with this process, whatever it becomes by exec: bubblewrap's pid namespace
/// kills it when its init exits, and, sandbox or not, it waits on a pidfd of this process,
/// which names the process across exec and wakes when it ends however it ends (even if the
/// program's main thread ends before its others). `PR_SET_PDEATHSIG` is not used where a
/// pidfd is: it follows the parent *thread*, not the process. Without a pidfd (a kernel
/// before 5.3) it is the fallback, with a check of the parent four times a second. The
/// child leaves this process's session and process group, so Ctrl-C in the pane or a signal
/// to the program's group never takes the network from a program that lives on; and the
/// program starts only once all this is in place.
///
/// Forks only while this process has one thread (a fork copies only the calling thread, and
/// the child then starts threads of its own).
pub fn start_child(listen: SocketAddr, to: PathBuf) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen)?;
    let bound = listener.local_addr()?;
    if threads() != Some(1) {
        return Err(io::Error::other(
            "the relay forks only while phoenix runs one thread",
        ));
    }
    let parent = std::process::id() as libc::pid_t;
    // Not inherited by the program (std's pipes are close-on-exec).
    let (mut ready_read, ready_write) = io::pipe()?;
    // SAFETY: this process has one thread (checked above), so the child owns every lock and
    // may allocate and start threads.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        drop(ready_read);
        // The child never returns into the caller (which would exec the program twice).
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            relay_child(listener, to, parent, ready_write)
        }))
        .unwrap_or(70);
        // SAFETY: _exit ends this process at once.
        unsafe { libc::_exit(code) };
    }
    // The listener is the child's; ours is closed here (and would be on exec anyway).
    drop(listener);
    drop(ready_write);
    // The program starts once the relay is tied to it and out of its process group (a
    // Ctrl-C at once, or the program's death, must find it so).
    let mut byte = [0u8; 1];
    match ready_read.read_exact(&mut byte) {
        Ok(()) => Ok(bound),
        Err(_) => Err(io::Error::other("the relay process did not start")),
    }
}

/// The relay process: detached from the program's terminal signals, tied to its life.
fn relay_child(
    listener: TcpListener,
    to: PathBuf,
    parent: libc::pid_t,
    mut ready: io::PipeWriter,
) -> i32 {
    // SAFETY: setsid changes only this process's own session.
    unsafe { libc::setsid() };
    let watch = pidfd_open(parent);
    if watch.is_none() {
        // No pidfd (a kernel before 5.3): the death signal, and the checks below.
        // SAFETY: prctl sets this process's own parent-death signal.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    }
    // Still our parent after the pidfd was opened: it names the parent, not a reused pid
    // (and a parent that died before it is not waited for).
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return 0;
    }
    name_this_process(PROCESS_NAME);
    quiet_stdio();
    let _ = ready.write_all(&[1]);
    drop(ready);
    let server = std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            let _ = serve(listener, to);
            // SAFETY: _exit ends the relay when it can serve no more.
            unsafe { libc::_exit(1) };
        });
    if server.is_err() {
        return 1;
    }
    if let Some(fd) = watch {
        loop {
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, its count 1.
            let n = unsafe { libc::poll(&mut pfd, 1, -1) };
            if n > 0 {
                return 0;
            }
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
    }
    // SAFETY: getppid has no preconditions.
    while unsafe { libc::getppid() } == parent {
        std::thread::sleep(Duration::from_millis(250));
    }
    0
}

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: the kernel just handed us this fd and nothing else owns it.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn name_this_process(name: &str) {
    if let Ok(name) = CString::new(name) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string (cut at 15 bytes by the kernel).
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
    }
}

/// The relay holds neither the pane's terminal nor a pipe someone waits to see closed.
fn quiet_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this process.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// How many threads this process has (`/proc/self/status`).
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_variables_name_the_relay_and_bypass_nothing() {
        let env = proxy_env("127.0.0.1:18080".parse().unwrap());
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            assert!(env.contains(&(name, "http://127.0.0.1:18080".to_string())));
        }
        assert!(env.contains(&("NO_PROXY", String::new())));
        assert!(env.contains(&("no_proxy", String::new())));
    }

    #[test]
    fn slots_are_bounded_and_given_back() {
        let open = Arc::new(AtomicUsize::new(0));
        let a = Slot::take(&open, 2).unwrap();
        let _b = Slot::take(&open, 2).unwrap();
        assert!(Slot::take(&open, 2).is_none());
        drop(a);
        assert!(Slot::take(&open, 2).is_some());
    }

    #[test]
    fn an_answer_is_one_line_of_text_and_closes() {
        let a = plain_answer(403, "`x:1` is not allowed");
        assert!(a.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert!(a.contains("Connection: close\r\n"));
        assert!(a.ends_with("\r\n\r\nphoenix sandbox: `x:1` is not allowed\n"));
    }
}
