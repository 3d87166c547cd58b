//! The tap inside the wrapper. tmux's `pipe-pane` must start a command to give the pane's
//! output to; that command is `phoenix tap --agent A --hand-over NAME`, which passes the pipe
//! it was given (its stdin) to the agent's wrapper over a local socket and exits. The wrapper
//! reads the pane's output on a thread (`super::tap::read`), so an agent costs one phoenix
//! process, its wrapper, instead of a wrapper, a tap and the `sh` tmux ran it through.
//!
//! The socket is abstract (no file to clean up, no path-length limit), named per wrapper with
//! a random part, and the wrapper takes a pipe only from a process of its own user: what comes
//! through it is read as the agent's own output.

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags, sockopt};

/// The socket a wrapper's tap listens on, for `phoenix tap --hand-over`.
pub struct Host {
    pub name: String,
}

impl Host {
    /// Listen for the pane's pipe and read what comes through it on a thread, acting on the
    /// agent's `->continuity:` commands. `config` and `agent` are as for `phoenix tap`.
    pub fn start(config: &Path, agent: &str) -> io::Result<Host> {
        let name = format!("phoenix-tap/{}/{:016x}", std::process::id(), nonce());
        let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
        let (config, agent) = (config.to_path_buf(), agent.to_string());
        std::thread::Builder::new()
            .name("tap".into())
            .spawn(move || serve(listener, config, agent))?;
        Ok(Host { name })
    }
}

/// Take each pipe handed over (a new one replaces the pane's old pipe, which then ends).
fn serve(listener: UnixListener, config: PathBuf, agent: String) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let Some(pipe) = receive(&conn) else { continue };
        // Told only once the pipe is ours: until then the sender could read it itself.
        let _ = conn.write_all(b"k");
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

/// `phoenix tap --hand-over NAME`: give this process's stdin (the pane's pipe) to the wrapper
/// listening on `name`. `Ok(true)` once the wrapper took it; `Ok(false)` when no wrapper
/// answers there, and the caller reads the pipe itself.
pub fn hand_over(name: &str) -> io::Result<bool> {
    let Ok(addr) = SocketAddr::from_abstract_name(name.as_bytes()) else {
        return Ok(false);
    };
    let Ok(mut conn) = UnixStream::connect_addr(&addr) else {
        return Ok(false);
    };
    send_descriptor(&conn, io::stdin().as_raw_fd())?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
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

/// A random part for the socket's name: another process cannot guess it in advance.
fn nonce() -> u64 {
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32);
    }
    u64::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receiving half takes a descriptor another process of this user sends: a pipe
    /// written at one end is read at the other, through the descriptor that was passed.
    #[test]
    fn a_pipe_handed_over_is_read_by_the_receiver() {
        let name = format!("phoenix-tap-test/{}/{:x}", std::process::id(), nonce());
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
}
