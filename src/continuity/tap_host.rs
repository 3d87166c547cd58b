//! The tap inside the wrapper. tmux gives a pane's output only to a command it starts
//! (`pipe-pane`, in the same call that makes the pane: `world::Launch::tap`); that command is
//! `phoenix tap --agent A --wrapper PID`, which passes the pipe it was given (its stdin) to
//! the agent's wrapper over a local socket and exits. The wrapper reads the pane's output on
//! a thread (`super::tap::read`), so an agent costs one phoenix process, its wrapper, instead
//! of a wrapper, a tap and the `sh` tmux ran it through.
//!
//! The socket is abstract (no file to clean up, no path-length limit) and named after the
//! wrapper's pid, which tmux gives the tap (`#{pane_pid}`). Each side checks the other: the
//! wrapper takes a pipe only from a process of its own user (what comes through it is read as
//! the agent's own output), and the tap gives it only to the process with that pid, of its own
//! user (a process squatting the name gets nothing).

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags, sockopt};
use serde_json::json;

use crate::state::{AgentDir, Op};

/// How long a tap waits for its wrapper to listen: a wrapper starts listening within
/// milliseconds, but a thousand of them starting at once on two cores take seconds. After
/// this the tap reads the pane itself.
const WRAPPER_WAIT: Duration = Duration::from_secs(60);

/// The socket the wrapper with `pid` listens on.
fn socket_name(pid: u32) -> String {
    format!("phoenix-tap/{pid}")
}

/// The socket a wrapper's tap listens on, for `phoenix tap --wrapper`.
pub struct Host;

impl Host {
    /// Listen for the pane's pipe and read what comes through it on a thread, acting on the
    /// agent's `->continuity:` commands (`config` and `agent` as for `phoenix tap`); each
    /// pipe taken is recorded in `dir` (`tap_started`).
    pub fn start(config: &Path, agent: &str, dir: &AgentDir) -> io::Result<Host> {
        let name = socket_name(std::process::id());
        let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
        let (config, agent, dir) = (config.to_path_buf(), agent.to_string(), dir.clone());
        std::thread::Builder::new()
            .name("tap".into())
            .spawn(move || serve(listener, config, agent, dir))?;
        Ok(Host)
    }
}

/// Take each pipe handed over (a new one replaces the pane's old pipe, which then ends).
fn serve(listener: UnixListener, config: PathBuf, agent: String, dir: AgentDir) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let Some(pipe) = receive(&conn) else { continue };
        // Told only once the pipe is ours: until then the sender could read it itself.
        let _ = conn.write_all(b"k");
        let _ = dir.record_op(Op::TapStarted, json!({"reader": "wrapper"}));
        let (config, agent) = (config.clone(), agent.clone());
        let _ = std::thread::Builder::new()
            .name("tap reader".into())
            .spawn(move || super::tap::read(std::fs::File::from(pipe), &config, &agent, |_| {}));
    }
}

/// The pipe a process of this user sent, if that is what came.
fn receive(conn: &UnixStream) -> Option<OwnedFd> {
    let peer = socket::getsockopt(conn, sockopt::PeerCredentials).ok()?;
    if peer.uid() != nix::unistd::getuid().as_raw() {
        return None;
    }
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = socket::recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            fds.extend(received);
        }
    }
    // SAFETY: the kernel just installed these descriptors in this process for this message;
    // nothing else owns them. Extra ones (none are sent) are closed on drop.
    let mut owned = fds
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    owned.next()
}

/// `phoenix tap --wrapper PID`: give this process's stdin (the pane's pipe) to the wrapper
/// `pid`, waiting for it to listen (it may be starting). `Ok(true)` once the wrapper took it;
/// `Ok(false)` when it did not (it ended, or listened nowhere in time), and the caller reads
/// the pipe itself.
pub fn hand_over(pid: u32) -> io::Result<bool> {
    hand_over_descriptor(pid, io::stdin().as_raw_fd())
}

fn hand_over_descriptor(pid: u32, fd: RawFd) -> io::Result<bool> {
    let addr = SocketAddr::from_abstract_name(socket_name(pid).as_bytes())?;
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
    send_descriptor(&conn, fd)?;
    let mut conn = conn;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut ack = [0u8; 1];
    Ok(io::Read::read(&mut conn, &mut ack).is_ok_and(|n| n == 1))
}

/// Pass descriptor `fd` over `conn` (SCM_RIGHTS, with one byte of data to carry it).
fn send_descriptor(conn: &UnixStream, fd: std::os::fd::RawFd) -> io::Result<()> {
    socket::sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(b"p")],
        &[ControlMessage::ScmRights(&[fd])],
        MsgFlags::empty(),
        None,
    )
    .map(drop)
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receiving half takes a descriptor another process of this user sends: a pipe
    /// written at one end is read at the other, through the descriptor that was passed.
    #[test]
    fn a_pipe_handed_over_is_read_by_the_receiver() {
        let name = format!("phoenix-tap-test/{}/receiver", std::process::id());
        let listener =
            UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let (reader, mut writer) = std::io::pipe().unwrap();
        let sender = std::thread::spawn(move || {
            let conn =
                UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                    .unwrap();
            send_descriptor(&conn, reader.as_raw_fd()).unwrap();
            drop(reader);
            conn
        });
        let (conn, _) = listener.accept().unwrap();
        let got = receive(&conn).expect("a descriptor");
        let _conn = sender.join().unwrap();
        writer.write_all(b"->continuity:load\n").unwrap();
        drop(writer);
        let mut text = String::new();
        io::Read::read_to_string(&mut std::fs::File::from(got), &mut text).unwrap();
        assert_eq!(text, "->continuity:load\n");
    }

    /// A tap gives the pipe to its wrapper once it listens (it may still be starting), and
    /// to no other process listening under the wrapper's name: a name squatted by a process
    /// that is not the wrapper is refused, and the tap reads the pane itself.
    #[test]
    fn the_pipe_goes_to_the_wrapper_pid_only() {
        let own = std::process::id();
        let (reader, mut writer) = std::io::pipe().unwrap();
        // The tap starts before the wrapper listens.
        let tap = std::thread::spawn(move || hand_over_descriptor(own, reader.as_raw_fd()));
        std::thread::sleep(Duration::from_millis(30));
        let listener = UnixListener::bind_addr(
            &SocketAddr::from_abstract_name(socket_name(own).as_bytes()).unwrap(),
        )
        .unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let got = receive(&conn).expect("the pipe");
        conn.write_all(b"k").unwrap();
        assert!(tap.join().unwrap().unwrap(), "the wrapper took it");
        writer.write_all(b"->continuity:load\n").unwrap();
        drop(writer);
        let mut text = String::new();
        io::Read::read_to_string(&mut std::fs::File::from(got), &mut text).unwrap();
        assert_eq!(text, "->continuity:load\n");

        // This process squats the name of pid 1 (never a wrapper of this test's user).
        let squatted = UnixListener::bind_addr(
            &SocketAddr::from_abstract_name(socket_name(1).as_bytes()).unwrap(),
        );
        if let Ok(squatted) = squatted {
            squatted.set_nonblocking(true).unwrap();
            let (reader, _writer) = std::io::pipe().unwrap();
            assert!(!hand_over_descriptor(1, reader.as_raw_fd()).unwrap());
            if let Ok((conn, _)) = squatted.accept() {
                assert!(receive(&conn).is_none(), "nothing was sent to the squatter");
            }
        }
        // A wrapper that is gone: the tap stops waiting at once.
        let (reader, _writer) = std::io::pipe().unwrap();
        let started = Instant::now();
        assert!(!hand_over_descriptor(u32::MAX - 1, reader.as_raw_fd()).unwrap());
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
