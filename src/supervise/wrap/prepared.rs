//! The next start, read during the cooldown. After an exit the wrapper has the whole cooldown
//! with nothing left to do: what a start reads (the restart record, the recorded session and
//! its transcript, the `.fresh` marker) is read then, and at the cooldown's end one look at
//! what was written in the agent's state dir since says whether that reading still stands.
//! Anything written there meanwhile (an operator's `restart --fresh`, a late hook, a
//! quarantine, the daemon) sends the start back to reading it all again: the start then costs
//! what it always did, never a decision taken on files that changed under it.

use std::path::Path;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::run::StartChoice;
use crate::state;

/// Files of the state dir written while an agent is down that no start reads: the tap's kept
/// pane output (the wrapper's own lines about the exit) and the doorbell that wakes it.
const NOT_READ_BY_A_START: [&str; 3] = [
    state::pane_log::PANE_LOG,
    state::pane_log::PANE_LOG_PREVIOUS,
    state::doorbell::DOORBELL,
];

/// A start read during the cooldown, and the watch that says whether it still stands.
pub(super) struct PreparedStart {
    choice: Option<StartChoice>,
    /// Closed once the start is under way: closing an inotify instance waits for the
    /// kernel's grace period (milliseconds), which the spawn must not wait for.
    since: Inotify,
}

impl PreparedStart {
    /// Begin watching `dir`, then read the start with `read`: every write after the reading
    /// began is seen. `None` where no watch can be had (the start reads at its time then).
    pub(super) fn read(dir: &Path, read: impl FnOnce() -> StartChoice) -> Option<PreparedStart> {
        let since = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let written = AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF;
        since.add_watch(dir, written).ok()?;
        Some(PreparedStart {
            choice: Some(read()),
            since,
        })
    }

    /// The choice (once), if nothing a start reads was written since it was read.
    pub(super) fn if_unchanged(&mut self) -> Option<StartChoice> {
        loop {
            match self.since.read_events() {
                Ok(events) => {
                    let changed = events.iter().any(|e| {
                        e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || e.name.as_ref().is_none_or(|name| {
                                !NOT_READ_BY_A_START.iter().any(|f| name.as_os_str() == *f)
                            })
                    });
                    if changed {
                        return None;
                    }
                }
                Err(Errno::EAGAIN) => return self.choice.take(),
                Err(Errno::EINTR) => {}
                Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::Start;

    fn choice() -> StartChoice {
        StartChoice::fresh(vec!["true".into()])
    }

    #[test]
    fn a_start_read_stands_until_a_file_it_reads_is_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("state.json"), "{}").unwrap();
        // Untouched: the reading stands.
        let mut p = PreparedStart::read(dir.path(), choice).unwrap();
        assert_eq!(p.if_unchanged().map(|c| c.mode()), Some(Start::Fresh));
        // The tap's log and the doorbell are not what a start reads.
        let mut p = PreparedStart::read(dir.path(), choice).unwrap();
        std::fs::write(dir.path().join(state::pane_log::PANE_LOG), "out").unwrap();
        assert!(p.if_unchanged().is_some());
        // A marker created, a file replaced, a file appended to: read again.
        for touch in [
            |d: &Path| std::fs::write(d.join(".fresh"), "").unwrap(),
            |d: &Path| {
                std::fs::write(d.join("x.tmp"), "{}").unwrap();
                std::fs::rename(d.join("x.tmp"), d.join("state.json")).unwrap();
            },
            |d: &Path| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(d.join("state.json"))
                    .unwrap();
                f.write_all(b" ").unwrap();
            },
        ] {
            let mut p = PreparedStart::read(dir.path(), choice).unwrap();
            touch(dir.path());
            assert!(p.if_unchanged().is_none());
        }
        // Written while it was being read: read again too.
        let mut p = PreparedStart::read(dir.path(), || {
            std::fs::write(dir.path().join("restarts.json"), "{}").unwrap();
            choice()
        })
        .unwrap();
        assert!(p.if_unchanged().is_none());
    }
}
