//! Supervision: `phoenix wrap` keeps one agent alive inside its pane (hybrid resume, crash
//! limits, safe mode); `phoenix run` is the controller daemon that reconciles the fleet;
//! `phoenix restart` and `phoenix service install` are the operator's levers.

pub mod daemon;
pub mod restart;
pub mod service;
pub mod strays;
pub mod term;
pub mod wrap;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crate::state::FleetDir;

pub use wrap::wrap;

/// The daemon's wake-up channel: a FIFO in the state dir (no socket path length limit, and
/// nothing to connect to when no daemon runs).
pub const DAEMON_FIFO: &str = "daemon.fifo";
pub const DAEMON_LOCK: &str = "daemon.lock";

pub fn fifo_path(fleet: &FleetDir) -> PathBuf {
    fleet.root.join(DAEMON_FIFO)
}

/// Tell a running daemon that something happened to `agent`, so it reconciles now rather than
/// at its next interval. Never blocks and never fails: without a daemon there is no reader and
/// the open fails with ENXIO, which is fine.
pub fn poke(fleet: &FleetDir, agent: &str) {
    // Never through a link, and only into a FIFO: a file planted in its place is not written.
    let Ok(mut fifo) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(fifo_path(fleet))
    else {
        return;
    };
    if !fifo
        .metadata()
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()))
    {
        return;
    }
    // One short write is atomic on a pipe (< PIPE_BUF), so lines from many wrappers never mix.
    let mut line = agent.as_bytes().to_vec();
    line.truncate(200);
    line.push(b'\n');
    let _ = fifo.write_all(&line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poke_never_writes_into_a_file_or_link_planted_as_the_fifo() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path().join(".phoenix"));
        fleet.ensure().unwrap();
        let target = tmp.path().join("root-only");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, fifo_path(&fleet)).unwrap();
        poke(&fleet, "agent");
        std::fs::remove_file(fifo_path(&fleet)).unwrap();
        std::fs::copy(&target, fifo_path(&fleet)).unwrap();
        poke(&fleet, "agent");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert_eq!(std::fs::read(fifo_path(&fleet)).unwrap(), b"precious");
    }
}
