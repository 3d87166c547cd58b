//! The daemon's files in the fleet's state dir: its lock (whose holder is the running
//! `phoenix run`), its wake-up FIFO, which wrappers, the watchdog and commands poke and
//! through which an operator's restart is handed to the controller, and the running count of
//! its reconcile passes (`/metrics` reads it, whichever process serves it).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::FleetDir;

/// The daemon's wake-up channel: a FIFO in the state dir (no socket path length limit, and
/// nothing to connect to when no daemon runs).
pub const DAEMON_FIFO: &str = "daemon.fifo";
pub const DAEMON_LOCK: &str = "daemon.lock";
/// The daemon's reconcile passes so far, counted across its restarts.
pub const RECONCILE_STATS: &str = "reconcile_stats.json";

/// Upper bounds (seconds) of the reconcile duration histogram: a quiet pass takes a few
/// milliseconds (one tmux call), one that starts agents seconds.
pub const RECONCILE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Every reconcile pass the daemons of this state dir ran: the counters of `/metrics`. Kept in
/// a file, not in the daemon's memory, so that a restarted daemon counts on from where the
/// last one stopped and `phoenix serve` reports the same numbers as the daemon itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReconcileStats {
    pub ok: u64,
    pub failed: u64,
    /// The histogram's bounds when it was written: another build's bounds start it afresh.
    pub bounds: Vec<f64>,
    /// Passes per bucket (not cumulative); one more than `bounds`, the last past them all.
    pub buckets: Vec<u64>,
    pub sum_seconds: f64,
}

impl Default for ReconcileStats {
    fn default() -> Self {
        ReconcileStats {
            ok: 0,
            failed: 0,
            bounds: RECONCILE_BUCKETS.to_vec(),
            buckets: vec![0; RECONCILE_BUCKETS.len() + 1],
            sum_seconds: 0.0,
        }
    }
}

impl ReconcileStats {
    /// The counts so far; none when there is no file, an unreadable one or one of another
    /// histogram shape (a reset, which Prometheus expects of a counter now and then).
    pub fn load(fleet: &FleetDir) -> ReconcileStats {
        let path = fleet.root.join(RECONCILE_STATS);
        super::file::read_bounded(&path, 64 * 1024)
            .ok()
            .and_then(|b| serde_json::from_slice::<ReconcileStats>(&b).ok())
            .filter(|s| s.bounds == RECONCILE_BUCKETS && s.buckets.len() == s.bounds.len() + 1)
            .unwrap_or_default()
    }

    /// Count one pass that took `seconds`.
    pub fn observe(&mut self, seconds: f64, ok: bool) {
        if ok {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
        let at = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        self.buckets[at] += 1;
        self.sum_seconds += seconds;
    }

    /// Write the counts (atomically; not synced: a power cut costs the last few passes, which
    /// Prometheus reads as a counter reset).
    pub fn save(&self, fleet: &FleetDir) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        super::file::write_atomic(&fleet.root.join(RECONCILE_STATS), &bytes, 0o600, false)
    }

    pub fn passes(&self) -> u64 {
        self.ok + self.failed
    }
}

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
    fn reconcile_passes_are_counted_on_across_daemons() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        assert_eq!(ReconcileStats::load(&fleet), ReconcileStats::default());
        let mut stats = ReconcileStats::load(&fleet);
        stats.observe(0.003, true);
        stats.observe(0.2, true);
        stats.observe(99.0, false);
        stats.save(&fleet).unwrap();
        let mut again = ReconcileStats::load(&fleet);
        assert_eq!((again.ok, again.failed), (2, 1));
        assert_eq!(again.buckets[0], 1, "≤ 5 ms");
        assert_eq!(again.buckets[5], 1, "≤ 250 ms");
        assert_eq!(again.buckets[12], 1, "past every bound");
        again.observe(0.01, true);
        assert_eq!(again.passes(), 4);
        // Another build's buckets, or a broken file: counted afresh.
        std::fs::write(
            tmp.path().join(RECONCILE_STATS),
            br#"{"ok":5,"failed":0,"bounds":[1.0],"buckets":[5,0],"sum_seconds":1.0}"#,
        )
        .unwrap();
        assert_eq!(ReconcileStats::load(&fleet), ReconcileStats::default());
        std::fs::write(tmp.path().join(RECONCILE_STATS), b"{").unwrap();
        assert_eq!(ReconcileStats::load(&fleet), ReconcileStats::default());
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
