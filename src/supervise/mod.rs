//! Supervision: `phoenix wrap` keeps one agent alive inside its pane (hybrid resume, crash
//! limits, safe mode); `phoenix run` is the controller daemon that reconciles the fleet;
//! `phoenix restart` and `phoenix service install` are the operator's levers.

pub mod daemon;
pub mod journal;
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

/// The pid of the `phoenix run` that supervises this state dir, if one does: the process
/// holding the flock on `daemon.lock`, read from /proc/locks. Only looks: taking the lock to
/// test it, even for a moment, could make a daemon starting at that moment refuse to start.
pub fn daemon_pid(fleet: &FleetDir) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::symlink_metadata(fleet.root.join(DAEMON_LOCK))
        .ok()?
        .ino();
    let locks = crate::state::bounded::read_string(
        std::path::Path::new("/proc/locks"),
        1 << 20,
        crate::state::bounded::Links::Follow,
    )
    .ok()?;
    holder_of(&locks, inode)
}

/// `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF` → 4242 for inode 1234567.
fn holder_of(proc_locks: &str, inode: u64) -> Option<u32> {
    proc_locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at = fields.iter().position(|f| *f == "FLOCK")?;
        let pid = fields.get(at + 3)?.parse().ok()?;
        let file_inode: u64 = fields.get(at + 4)?.rsplit(':').next()?.parse().ok()?;
        (file_inode == inode).then_some(pid)
    })
}

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

    #[test]
    fn the_daemon_is_the_holder_of_its_lock_files_flock() {
        let locks = "1: POSIX  ADVISORY  WRITE 17 fd:01:99 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 5 fd:01:12345670 0 EOF\n";
        assert_eq!(holder_of(locks, 1234567), Some(4242));
        assert_eq!(
            holder_of(locks, 99),
            None,
            "a POSIX lock is not the daemon's"
        );
        assert_eq!(holder_of(locks, 7), None);
        // A real flock on a real file, as the daemon takes it.
        let dir = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(dir.path());
        assert_eq!(daemon_pid(&fleet), None, "no lock file");
        let file = std::fs::File::create(dir.path().join(DAEMON_LOCK)).unwrap();
        assert_eq!(daemon_pid(&fleet), None, "not locked");
        let _lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        assert_eq!(daemon_pid(&fleet), Some(std::process::id()));
    }
}
