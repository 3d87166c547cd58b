//! The agent's doorbell: a FIFO in its state dir that its wrapper listens on, so the wrapper
//! sleeps until something it acts on happens instead of looking every quarter second.
//!
//! Whoever leaves the wrapper something to act on (a hook setting the turn-failed or
//! needs-input marker, `phoenix send` leaving a message) rings it after the file is written;
//! the wrapper wakes, drains it and looks at its files as before. A ring is only a hint: the
//! files say what happened, so a lost or spurious ring costs a late or needless look, never a
//! wrong decision. No inotify: a user gets 128 inotify instances by default, and a fleet has
//! more wrappers than that. A FIFO costs one descriptor, works through a sandbox's bind mount
//! of the state dir, and needs no kernel limit raised.
//!
//! Ringing never blocks and never follows a link: `O_NONBLOCK` makes opening a FIFO with no
//! reader fail (`ENXIO`: no wrapper listens, nothing to wake) instead of wait, and a byte
//! that does not fit (the pipe is full: rung already) is dropped. Anything at the path that
//! is not a FIFO gets no byte.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use super::AgentDir;

/// The doorbell's name in the agent's state dir.
pub const DOORBELL: &str = ".doorbell";

const FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;

/// Wake the agent's wrapper, if one listens.
pub fn ring(dir: &AgentDir) {
    ring_at(&dir.file(DOORBELL));
}

fn ring_at(path: &Path) {
    let Ok(mut fifo) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(FLAGS)
        .open(path)
    else {
        return;
    };
    if fifo.metadata().is_ok_and(|m| m.file_type().is_fifo()) {
        let _ = fifo.write(&[1]);
    }
}

/// The wrapper's end of the doorbell: it reads what is rung, and keeps a writing end of its
/// own, so the FIFO never reads as closed between ringers and its own threads and signal
/// handlers can ring it too.
pub struct Doorbell {
    read: File,
    write: File,
}

impl Doorbell {
    /// Make the agent's doorbell (replacing whatever else is at its path) and listen on it.
    pub fn install(dir: &AgentDir) -> io::Result<Doorbell> {
        let path = dir.file(DOORBELL);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_fifo() => {}
            Ok(_) => {
                std::fs::remove_file(&path)?;
                make(&path)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => make(&path)?,
            Err(e) => return Err(e),
        }
        let read = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(FLAGS)
            .open(&path)?;
        let write = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(FLAGS)
            .open(&path)?;
        // The two ends are one FIFO of ours, not something planted between the calls.
        let (r, w) = (read.metadata()?, write.metadata()?);
        use std::os::unix::fs::MetadataExt;
        if !r.file_type().is_fifo() || (r.dev(), r.ino()) != (w.dev(), w.ino()) {
            return Err(io::Error::other(format!(
                "{} is not a FIFO of this wrapper",
                path.display()
            )));
        }
        Ok(Doorbell { read, write })
    }

    /// The writing end, for a signal handler (`write(2)` is async-signal-safe).
    pub fn raw_write_fd(&self) -> i32 {
        self.write.as_raw_fd()
    }

    /// Ring it from this process (a thread that finished its work).
    pub fn ringer(&self) -> io::Result<Ringer> {
        Ok(Ringer(self.write.try_clone()?))
    }

    /// Sleep until it rings or `timeout` passes (`None`: until it rings); then empty it.
    /// Whether it rang.
    pub fn wait(&mut self, timeout: Option<Duration>) -> bool {
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        let mut fds = [libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd, for the length given.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if ready <= 0 {
            return false;
        }
        let mut buf = [0u8; 256];
        while matches!(self.read.read(&mut buf), Ok(n) if n > 0) {}
        true
    }
}

/// Rings a doorbell of this process from another thread.
pub struct Ringer(File);

impl Ringer {
    pub fn ring(&self) {
        let _ = (&self.0).write(&[1]);
    }
}

fn make(path: &Path) -> io::Result<()> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn dir() -> (tempfile::TempDir, AgentDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = AgentDir {
            name: "a".into(),
            path: tmp.path().to_path_buf(),
        };
        (tmp, dir)
    }

    #[test]
    fn a_ring_wakes_the_listener_and_no_ring_lets_it_sleep() {
        let (_tmp, dir) = dir();
        let mut bell = Doorbell::install(&dir).unwrap();
        assert!(!bell.wait(Some(Duration::from_millis(30))), "nothing rang");
        ring(&dir);
        ring(&dir);
        let t = Instant::now();
        assert!(bell.wait(Some(Duration::from_secs(5))));
        assert!(t.elapsed() < Duration::from_secs(1));
        // Both rings were drained by the one wake.
        assert!(!bell.wait(Some(Duration::from_millis(30))));
        let ringer = bell.ringer().unwrap();
        std::thread::spawn(move || ringer.ring()).join().unwrap();
        assert!(bell.wait(Some(Duration::from_secs(5))));
    }

    #[test]
    fn ringing_with_nobody_listening_or_a_full_pipe_never_blocks() {
        let (_tmp, dir) = dir();
        // No doorbell at all, then one nobody listens on.
        ring(&dir);
        make(&dir.file(DOORBELL)).unwrap();
        let t = Instant::now();
        ring(&dir);
        assert!(t.elapsed() < Duration::from_secs(1), "no reader: no wait");
        // A listener that never reads: the pipe fills, and ringing still returns at once.
        let mut bell = Doorbell::install(&dir).unwrap();
        let t = Instant::now();
        for _ in 0..70_000 {
            ring(&dir);
        }
        assert!(t.elapsed() < Duration::from_secs(20));
        assert!(bell.wait(Some(Duration::from_secs(1))));
    }

    #[test]
    fn a_file_or_link_planted_at_the_doorbell_gets_no_byte_and_is_replaced() {
        let (tmp, dir) = dir();
        let target = tmp.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.file(DOORBELL)).unwrap();
        ring(&dir);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        std::fs::remove_file(dir.file(DOORBELL)).unwrap();
        std::fs::write(dir.file(DOORBELL), "").unwrap();
        ring(&dir);
        assert_eq!(std::fs::read(dir.file(DOORBELL)).unwrap(), b"");
        let mut bell = Doorbell::install(&dir).unwrap();
        assert!(
            std::fs::symlink_metadata(dir.file(DOORBELL))
                .unwrap()
                .file_type()
                .is_fifo()
        );
        ring(&dir);
        assert!(bell.wait(Some(Duration::from_secs(5))));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
