//! The tap inside the wrapper. tmux gives a pane's output only to a command it starts
//! (`pipe-pane`, in the same call that makes the pane: `world::Launch::tap`); that command is
//! `phoenix tap --agent A --wrapper PID`, which passes the pipe it was given (its stdin) to
//! the agent's wrapper over a local socket and exits. The wrapper reads the pane's output on
//! a thread (`super::tap::read`), so an agent costs one phoenix process, its wrapper, instead
//! of a wrapper, a tap and the `sh` tmux ran it through.
//!
//! The socket is abstract (no file to clean up, no path-length limit) and named after the
//! wrapper's pid, which tmux gives the tap (`#{pane_pid}`). Any process of the machine can
//! connect to it, so what comes through it proves itself before it is read as the agent's
//! words:
//!
//! - **The pipe must carry this pane's output.** For each pipe handed over the wrapper makes a
//!   one-time proof (16 random bytes), writes it to its own pane as an escape sequence tmux
//!   shows nowhere (an OSC it does not know), and reads the pipe until the proof comes
//!   through. Only the pipe tmux feeds with this pane's output carries it; a pipe another
//!   process made carries what that process writes, which cannot hold a proof it never saw.
//!   The proof is in no argv, environment or file: the wrapper makes it when the pipe arrives,
//!   and it is spent when it comes back (a respawned pane is a new wrapper with new proofs).
//! - **One hand-over per pane start.** Once a pipe proved itself, every later connection is
//!   refused at once. Refusals are counted and recorded (`tap_refused`, at most one record a
//!   second with the count and the reasons).
//! - **Bounded.** One thread serves the socket (poll, non-blocking): no thread per
//!   connection. At most [`MAX_ATTEMPTS`] hand-overs are under way at once (a newer one
//!   pushes out the oldest that has sent nothing yet); a connection that sends nothing is
//!   dropped after [`SILENT_WAIT`], a pipe that shows no proof after [`PROOF_WAIT`] or
//!   [`MAX_PROLOGUE`] bytes. The pane's output read while waiting for the proof is given to
//!   the reader with the pipe: nothing of it is lost.
//!
//! The tap, for its part, gives its pipe only to the process with the wrapper's pid, of its
//! own user (a process squatting the name gets nothing), and reads the pane itself when the
//! wrapper does not take the pipe, but only a pane's pipe ([`stdin_is_a_pane_pipe`]: its
//! parent, a tmux server, made it), never a file or a pipe some other process gives it.
//!
//! What this does not stop (`docs/architecture.md`, "The tap's hand-over"): a process of the
//! same user can still reach a pane's output pipe other ways than this socket — through the
//! tmux server (its socket, or the pipe's other end under `/proc/<tmux pid>/fd`), through
//! `/proc/<pid>/fd` of the wrapper or of the short-lived tap, or by ptrace where the kernel
//! allows it. Those need an agent kept out of the fleet's tmux server and of other processes'
//! `/proc` entries: the sandbox, not this socket.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags, sockopt};
use serde_json::json;

use crate::state::{AgentDir, Op};

/// How long a tap waits for its wrapper to listen: a wrapper starts listening within
/// milliseconds, but a thousand of them starting at once on two cores take seconds. After
/// this the tap reads the pane itself.
const WRAPPER_WAIT: Duration = Duration::from_secs(60);
/// How long a connection may take to pass its pipe (a tap passes it as soon as it connects).
pub const SILENT_WAIT: Duration = Duration::from_secs(5);
/// How long a pipe may take to show the proof written to the pane (one trip through tmux,
/// which a thousand panes starting at once slow down).
pub const PROOF_WAIT: Duration = Duration::from_secs(30);
/// How long a tap waits for the wrapper's word that it took the pipe: past the proof's wait.
const ACK_WAIT: Duration = Duration::from_secs(40);
/// Hand-overs under way at once.
pub const MAX_ATTEMPTS: usize = 16;
/// Bytes of a pipe read before its proof came (the pane's output since the pipe started).
pub const MAX_PROLOGUE: usize = 256 * 1024;
/// Refusals are recorded at most this often (each record counts those since the last).
const REFUSALS_EVERY: Duration = Duration::from_secs(1);
/// The OSC number the proof is written under: one no terminal or tmux uses, so tmux drops it
/// from the screen and passes it only to the pane's pipe.
const PROOF_OSC: &str = "7739";

/// The socket the wrapper with `pid` listens on.
fn socket_name(pid: u32) -> String {
    format!("phoenix-tap/{pid}")
}

/// The socket a wrapper's tap listens on, for `phoenix tap --wrapper`.
pub struct Host;

impl Host {
    /// Listen for the pane's pipe and read what comes through it on a thread, acting on the
    /// agent's `->continuity:` commands (`config` and `agent` as for `phoenix tap`). The proofs
    /// are written to `pane`: the wrapper's stdout, its pane. The pipe taken is recorded in
    /// `dir` (`tap_started`), refused hand-overs too (`tap_refused`).
    pub fn start(
        config: &Path,
        agent: &str,
        dir: &AgentDir,
        pane: Box<dyn Write + Send>,
    ) -> io::Result<Host> {
        let (config, agent) = (config.to_path_buf(), agent.to_string());
        let keep = dir.clone();
        let read = move |input: Box<dyn Read + Send>| {
            let _ = std::thread::Builder::new()
                .name("tap reader".into())
                .spawn(move || super::tap::read(input, &config, &agent, Some(&keep), |_| {}));
        };
        start_on(&socket_name(std::process::id()), pane, dir, Box::new(read))
    }
}

/// What is done with the pane's output once its pipe proved itself.
type Reader = Box<dyn FnOnce(Box<dyn Read + Send>) + Send>;

/// Listen on the abstract socket `name`, writing proofs to `pane`, giving the proven pipe to
/// `read`.
fn start_on(
    name: &str,
    pane: Box<dyn Write + Send>,
    dir: &AgentDir,
    read: Reader,
) -> io::Result<Host> {
    let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
    listener.set_nonblocking(true)?;
    let server = Server {
        listener,
        pane,
        dir: dir.clone(),
        read: Some(read),
        attempts: Vec::new(),
        refusals: Refusals::default(),
    };
    std::thread::Builder::new()
        .name("tap".into())
        .spawn(move || server.serve())?;
    Ok(Host)
}

/// Why a hand-over was refused (the keys of `tap_refused`'s `reasons`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Refusal {
    /// The pane's pipe was handed over already: one hand-over per pane start.
    AlreadyHandedOver,
    /// Another user's process.
    OtherUser,
    /// It connected and passed nothing in time.
    Silent,
    /// It closed without passing a pipe, or passed something that is not a readable pipe.
    NoPipe,
    /// Its pipe did not carry the proof (ended, too long without it, or too late).
    NotThePane,
    /// Too many hand-overs at once.
    TooMany,
    /// The proof could not be written to the pane.
    PaneUnwritable,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::AlreadyHandedOver => "already handed over",
            Refusal::OtherUser => "another user",
            Refusal::Silent => "passed nothing",
            Refusal::NoPipe => "no pipe",
            Refusal::NotThePane => "not the pane's output",
            Refusal::TooMany => "too many at once",
            Refusal::PaneUnwritable => "cannot write to the pane",
        }
    }
}

/// Refusals counted, and recorded at most once every [`REFUSALS_EVERY`].
#[derive(Default)]
struct Refusals {
    total: u64,
    unrecorded: BTreeMap<Refusal, u64>,
    recorded_at: Option<Instant>,
}

impl Refusals {
    fn count(&mut self, why: Refusal) {
        self.total += 1;
        *self.unrecorded.entry(why).or_default() += 1;
    }

    /// When the refusals not recorded yet are due (`None`: none are waiting).
    fn due(&self) -> Option<Instant> {
        if self.unrecorded.is_empty() {
            return None;
        }
        Some(
            self.recorded_at
                .map_or_else(Instant::now, |t| t + REFUSALS_EVERY),
        )
    }

    fn record_if_due(&mut self, dir: &AgentDir) {
        if self.due().is_none_or(|t| t > Instant::now()) {
            return;
        }
        let reasons: serde_json::Map<String, serde_json::Value> = self
            .unrecorded
            .iter()
            .map(|(why, n)| (why.as_str().to_string(), json!(n)))
            .collect();
        let refused: u64 = self.unrecorded.values().sum();
        let _ = dir.record_op(
            Op::TapRefused,
            json!({"refused": refused, "total": self.total, "reasons": reasons}),
        );
        self.unrecorded.clear();
        self.recorded_at = Some(Instant::now());
    }
}

/// One hand-over under way.
struct Attempt {
    conn: UnixStream,
    since: Instant,
    stage: Stage,
}

enum Stage {
    /// Connected; its pipe has not come yet.
    Connected,
    /// Its pipe came and a proof went to the pane: reading the pipe until it comes through.
    Proving {
        pipe: File,
        proof: Vec<u8>,
        read: Vec<u8>,
    },
}

/// What one look at an attempt came to.
enum Step {
    Wait,
    Refuse(Refusal),
    /// Its pipe carried the proof: what was read of it besides the proof.
    Proven(Vec<u8>),
}

struct Server {
    listener: UnixListener,
    pane: Box<dyn Write + Send>,
    dir: AgentDir,
    /// Until a pipe proved itself.
    read: Option<Reader>,
    attempts: Vec<Attempt>,
    refusals: Refusals,
}

impl Server {
    fn serve(mut self) {
        loop {
            let ready = self.wait();
            if ready.first() == Some(&true) {
                self.accept_all();
            }
            // Newest first, so that removing one leaves the indexes still to look at valid.
            for i in (0..ready.len().saturating_sub(1)).rev() {
                if ready[i + 1] && i < self.attempts.len() {
                    self.step(i);
                }
            }
            self.drop_late();
            self.refusals.record_if_due(&self.dir);
        }
    }

    /// Wait for the socket, an attempt's connection or pipe, or a deadline. Which of the
    /// listener (first) and the attempts (in order) are ready.
    fn wait(&self) -> Vec<bool> {
        let now = Instant::now();
        let deadline = self
            .attempts
            .iter()
            .map(|a| a.since + a.wait())
            .chain(self.refusals.due())
            .min();
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let ms = d.saturating_duration_since(now).as_millis() + 1;
                PollTimeout::try_from(ms.min(60_000)).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = vec![PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
        for a in &self.attempts {
            let fd = match &a.stage {
                Stage::Connected => a.conn.as_fd(),
                Stage::Proving { pipe, .. } => pipe.as_fd(),
            };
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        if poll(&mut fds, timeout).is_err() {
            // Interrupted: look again.
            return vec![false; fds.len()];
        }
        fds.iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect()
    }

    /// Take every connection waiting on the socket.
    fn accept_all(&mut self) {
        loop {
            let conn = match self.listener.accept() {
                Ok((conn, _)) => conn,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // Out of descriptors, say: the connections wait in the backlog.
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            };
            if self.read.is_none() {
                self.refusals.count(Refusal::AlreadyHandedOver);
                continue;
            }
            let own_user = socket::getsockopt(&conn, sockopt::PeerCredentials)
                .is_ok_and(|peer| peer.uid() == nix::unistd::getuid().as_raw());
            if !own_user {
                self.refusals.count(Refusal::OtherUser);
                continue;
            }
            if conn.set_nonblocking(true).is_err() {
                continue;
            }
            if self.attempts.len() >= MAX_ATTEMPTS {
                // Room is made by the oldest that has sent nothing; a pipe being proven keeps
                // its place (what was read of it cannot be given back).
                match self
                    .attempts
                    .iter()
                    .position(|a| matches!(a.stage, Stage::Connected))
                {
                    Some(i) => self.refuse(i, Refusal::TooMany),
                    None => {
                        self.refusals.count(Refusal::TooMany);
                        continue;
                    }
                }
            }
            self.attempts.push(Attempt {
                conn,
                since: Instant::now(),
                stage: Stage::Connected,
            });
        }
    }

    /// Look at attempt `i`, which is ready.
    fn step(&mut self, i: usize) {
        let step = match &mut self.attempts[i].stage {
            Stage::Proving { pipe, proof, read } => look_for_proof(pipe, proof, read),
            Stage::Connected => match receive(&self.attempts[i].conn) {
                Received::Nothing => Step::Wait,
                Received::Closed | Received::NotAPipe => Step::Refuse(Refusal::NoPipe),
                Received::Pipe(pipe) => match prove(&mut *self.pane, pipe) {
                    Ok(stage) => {
                        let attempt = &mut self.attempts[i];
                        attempt.stage = stage;
                        // Its deadline is the proof's from now.
                        attempt.since = Instant::now();
                        Step::Wait
                    }
                    Err(why) => Step::Refuse(why),
                },
            },
        };
        match step {
            Step::Wait => {}
            Step::Refuse(why) => self.refuse(i, why),
            Step::Proven(prologue) => self.take(i, prologue),
        }
    }

    /// Attempt `i`'s pipe is the pane's: tell its tap, give it to the reader, and refuse the
    /// rest (now and later).
    fn take(&mut self, i: usize, prologue: Vec<u8>) {
        let attempt = self.attempts.remove(i);
        let Stage::Proving { pipe, .. } = attempt.stage else {
            return;
        };
        let Some(read) = self.read.take() else {
            return;
        };
        let _ = set_blocking(&pipe, true);
        // Told only once the pipe is ours: until then the sender could read it itself.
        let _ = (&attempt.conn).write_all(b"k");
        let _ = self.dir.record_op(
            Op::TapStarted,
            json!({"reader": "wrapper", "proven_after_bytes": prologue.len()}),
        );
        read(Box::new(io::Cursor::new(prologue).chain(pipe)));
        for i in (0..self.attempts.len()).rev() {
            self.refuse(i, Refusal::AlreadyHandedOver);
        }
    }

    /// Refuse attempt `i`: its connection closes without the word, and its tap (if it is
    /// one) reads the pane itself, from a pipe left as it came.
    fn refuse(&mut self, i: usize, why: Refusal) {
        let attempt = self.attempts.remove(i);
        if let Stage::Proving { pipe, .. } = &attempt.stage {
            let _ = set_blocking(pipe, true);
        }
        self.refusals.count(why);
    }

    /// Refuse the attempts whose time is up.
    fn drop_late(&mut self) {
        for i in (0..self.attempts.len()).rev() {
            let a = &self.attempts[i];
            if a.since.elapsed() >= a.wait() {
                let why = match a.stage {
                    Stage::Connected => Refusal::Silent,
                    Stage::Proving { .. } => Refusal::NotThePane,
                };
                self.refuse(i, why);
            }
        }
    }
}

impl Attempt {
    fn wait(&self) -> Duration {
        match self.stage {
            Stage::Connected => SILENT_WAIT,
            Stage::Proving { .. } => PROOF_WAIT,
        }
    }
}

/// Write a new proof for `pipe` to `pane`.
fn prove(pane: &mut dyn Write, pipe: File) -> Result<Stage, Refusal> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| Refusal::PaneUnwritable)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let proof = format!("\x1b]{PROOF_OSC};phoenix-tap-proof={hex}\x07").into_bytes();
    set_blocking(&pipe, false).map_err(|_| Refusal::NoPipe)?;
    // One write: the agent's own output never lands inside it.
    pane.write_all(&proof)
        .and_then(|()| pane.flush())
        .map_err(|_| Refusal::PaneUnwritable)?;
    Ok(Stage::Proving {
        pipe,
        proof,
        read: Vec::new(),
    })
}

/// Read what `pipe` has now; the proof in it (and what came besides) once it is there.
fn look_for_proof(pipe: &mut File, proof: &[u8], read: &mut Vec<u8>) -> Step {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => return Step::Refuse(Refusal::NotThePane),
            Ok(n) => {
                // Only the new bytes and the proof's length before them can complete it.
                let from = read.len().saturating_sub(proof.len());
                read.extend_from_slice(&chunk[..n]);
                if find(&read[from..], proof).is_some() {
                    return Step::Proven(without_proofs(std::mem::take(read)));
                }
                if read.len() > MAX_PROLOGUE {
                    return Step::Refuse(Refusal::NotThePane);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Refuse(Refusal::NotThePane),
        }
    }
}

/// `bytes` without the proofs in them: this pipe's, and those written for other hand-overs
/// before it (a pipe refused meanwhile), which went to the pane too.
fn without_proofs(bytes: Vec<u8>) -> Vec<u8> {
    let start = format!("\x1b]{PROOF_OSC};phoenix-tap-proof=").into_bytes();
    const HEX: usize = 32;
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(&start)
            && rest.len() > start.len() + HEX
            && rest[start.len()..start.len() + HEX]
                .iter()
                .all(u8::is_ascii_hexdigit)
            && rest[start.len() + HEX] == 0x07
        {
            i += start.len() + HEX + 1;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn set_blocking(file: &File, blocking: bool) -> nix::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(file, FcntlArg::F_GETFL)?);
    let flags = if blocking {
        flags - OFlag::O_NONBLOCK
    } else {
        flags | OFlag::O_NONBLOCK
    };
    fcntl(file, FcntlArg::F_SETFL(flags)).map(drop)
}

/// What a connection sent.
enum Received {
    /// Nothing yet.
    Nothing,
    /// It closed (or failed) without a descriptor.
    Closed,
    /// A descriptor that is not a pipe.
    NotAPipe,
    Pipe(File),
}

/// The pipe `conn` sent, without waiting.
fn receive(conn: &UnixStream) -> Received {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = match socket::recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(msg) => msg,
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Received::Nothing,
        Err(_) => return Received::Closed,
    };
    let mut fds = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                fds.extend(received);
            }
        }
    }
    // SAFETY: the kernel just installed these descriptors in this process for this message;
    // nothing else owns them. Extra ones (none are sent) are closed on drop.
    let mut owned = fds
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    let Some(fd) = owned.next() else {
        return Received::Closed;
    };
    let file = File::from(fd);
    // A pipe only (tmux makes it a socket pair): never a file or a device, whose read could
    // be anything or never end.
    match file.metadata() {
        Ok(m) if m.file_type().is_fifo() || m.file_type().is_socket() => Received::Pipe(file),
        _ => Received::NotAPipe,
    }
}

/// Why `phoenix tap` would not read its stdin.
pub const NOT_A_PANE_PIPE: &str = "phoenix tap: its input is not a pane's output pipe from the fleet's terminal server (its pane's launch starts it): it is not read, since what it says would be taken as the agent's own words";

/// Whether this process's stdin is a pane's output pipe, as `tmux pipe-pane` starts the tap:
/// a socket (tmux makes that pipe a socket pair) whose other end its parent, a tmux server of
/// this user, made. The tap's own reading (when the wrapper does not take the pipe) is the
/// agent's words as much as the wrapper's: a file, a shell's pipe or a socket some other
/// process made is refused, or any process could run `phoenix tap` to speak as an agent.
pub fn stdin_is_a_pane_pipe() -> bool {
    let stdin = io::stdin();
    let Ok(peer) = socket::getsockopt(&stdin.as_fd(), sockopt::PeerCredentials) else {
        return false;
    };
    let parent = nix::unistd::getppid().as_raw();
    peer.pid() == parent
        && peer.uid() == nix::unistd::getuid().as_raw()
        && crate::world::is_pane_server(parent)
}

/// `phoenix tap --wrapper PID`: give this process's stdin (the pane's pipe) to the wrapper
/// `pid`, waiting for it to listen (it may be starting). `Ok(true)` once the wrapper took it;
/// `Ok(false)` when it did not (it ended, listened nowhere in time, or refused the pipe), and
/// the caller reads the pipe itself.
pub fn hand_over(pid: u32) -> io::Result<bool> {
    hand_over_to(&socket_name(pid), pid, io::stdin().as_raw_fd())
}

fn hand_over_to(name: &str, pid: u32, fd: RawFd) -> io::Result<bool> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let deadline = Instant::now() + WRAPPER_WAIT;
    let mut pause = Duration::from_millis(1);
    let conn = loop {
        if let Ok(conn) = UnixStream::connect_addr(&addr) {
            break conn;
        }
        let alive = Path::new(&format!("/proc/{pid}")).exists();
        if !alive || Instant::now() > deadline {
            return Ok(false);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    // Only to that very process of this user: a squatter on the name gets nothing.
    let peer = socket::getsockopt(&conn, sockopt::PeerCredentials)?;
    if peer.uid() != nix::unistd::getuid().as_raw() || peer.pid() != pid as i32 {
        return Ok(false);
    }
    // A wrapper that refused it may have closed the connection already.
    if send_descriptor(&conn, fd).is_err() {
        return Ok(false);
    }
    let mut conn = conn;
    conn.set_read_timeout(Some(ACK_WAIT))?;
    let mut ack = [0u8; 1];
    Ok(conn.read(&mut ack).is_ok_and(|n| n == 1))
}

/// Pass descriptor `fd` over `conn` (SCM_RIGHTS, with one byte of data to carry it).
fn send_descriptor(conn: &UnixStream, fd: RawFd) -> io::Result<()> {
    socket::sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(b"p")],
        &[ControlMessage::ScmRights(&[fd])],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map(drop)
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests;
