//! The sweep of temp files that killed writers left behind (`.<name>.tmp.<pid>.<n>`).

use std::fs;
use std::path::Path;

use super::{STALE_TEMP_AGE, TMP_MARK};
use crate::state::FleetDir;

/// The pid a temp file name carries, if it is one of ours.
fn temp_owner(name: &str) -> Option<Option<i32>> {
    if !name.starts_with('.') {
        return None;
    }
    if name.ends_with(".tmp") {
        return Some(None);
    }
    let (_, rest) = name.rsplit_once(TMP_MARK)?;
    // `.<name>.tmp.<pid>.<n>` (or `.<name>.tmp.<pid>` from older versions).
    Some(rest.split('.').next().and_then(|p| p.parse().ok()))
}

fn alive(pid: i32) -> bool {
    use nix::errno::Errno;
    pid > 0
        && !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(Errno::ESRCH)
        )
}

/// Remove temp files in `dir` left by writers that died: older than `STALE_TEMP_AGE` and
/// named after a pid that no longer runs (or after none: an older version's fixed name).
/// Returns how many were removed.
pub fn sweep_temp_files(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = temp_owner(&name.to_string_lossy()) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= STALE_TEMP_AGE);
        if meta.is_file()
            && old
            && !owner.is_some_and(alive)
            && fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

impl FleetDir {
    /// Sweep stale temp files from the whole state dir: the root and the dirs in it (hook
    /// backups…), each agent's dir and the dirs in it (handoffs, crash records, snapshots).
    pub fn sweep_temp_files(&self) -> usize {
        let mut n = sweep_temp_files(&self.root);
        for sub in fs::read_dir(&self.root).into_iter().flatten().flatten() {
            if sub.file_name() != "agents" && sub.file_type().is_ok_and(|t| t.is_dir()) {
                n += sweep_temp_files(&sub.path());
            }
        }
        for name in self.agent_names() {
            let dir = self.agent(&name).path;
            n += sweep_temp_files(&dir);
            for sub in fs::read_dir(&dir).into_iter().flatten().flatten() {
                if sub.file_type().is_ok_and(|t| t.is_dir()) {
                    n += sweep_temp_files(&sub.path());
                }
            }
        }
        n
    }
}
