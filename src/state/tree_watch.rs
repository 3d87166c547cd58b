//! A watch of a state directory and every directory below it (inotify), for the daemon's
//! journal and the API's status snapshot: they sleep until something there is written instead
//! of reading it on a timer. One thread per watch blocks in `poll` on the inotify descriptor
//! and on a pipe that dropping the watch closes, so the thread ends with its owner.
//!
//! Only writes are watched (no access or open events): the watchers' own reads wake nobody.
//! A queue overflow is reported as such: the owner must assume anything changed.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// One write seen below the watched root.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// The file or directory written, by its name in its directory (none for the directory
    /// itself, or an overflow).
    pub name: Option<&'a OsStr>,
    /// A directory was made (and is watched from now on).
    pub dir_created: bool,
    /// Events were lost: anything may have changed.
    pub overflow: bool,
}

/// Watching until dropped.
pub struct TreeWatch {
    /// Closed on drop: the watching thread sees the hang-up and ends.
    _stop: OwnedFd,
}

const WRITES: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

/// How deep below its root a state dir's watch goes: an agent's dir and its own subdirs
/// (handoffs, inbox) hold all a state dir has.
pub const STATE_DIR_DEPTH: usize = 3;

/// The watched directories: each one's descriptor, path and depth below the root.
struct Dirs {
    max_depth: usize,
    watched: Vec<(WatchDescriptor, PathBuf, usize)>,
}

/// Watch `root` and the directories below it to `max_depth` (0: `root` alone), calling
/// `on_change` on the watch's own thread for each write. `root` must be a directory.
pub fn watch_tree(
    root: &Path,
    max_depth: usize,
    on_change: impl Fn(Change<'_>) + Send + 'static,
) -> io::Result<TreeWatch> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    let mut dirs = Dirs {
        max_depth,
        watched: Vec::new(),
    };
    add_tree(&inotify, root, 0, &mut dirs)?;
    let (stop_read, stop_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    std::thread::Builder::new()
        .name("tree-watch".into())
        .spawn(move || follow(inotify, stop_read, dirs, on_change))?;
    Ok(TreeWatch { _stop: stop_write })
}

/// Watch `dir` and, to the watch's depth, the directories in it. Only the root must be
/// watched: a subdirectory removed meanwhile is simply not there to watch.
fn add_tree(inotify: &Inotify, dir: &Path, depth: usize, dirs: &mut Dirs) -> io::Result<()> {
    let wd = inotify.add_watch(dir, WRITES | AddWatchFlags::IN_DONT_FOLLOW)?;
    dirs.watched.push((wd, dir.to_path_buf(), depth));
    if depth >= dirs.max_depth {
        return Ok(());
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            // Not followed: a link to a directory elsewhere is not part of the tree.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = add_tree(inotify, &entry.path(), depth + 1, dirs);
            }
        }
    }
    Ok(())
}

fn follow(inotify: Inotify, stop: OwnedFd, mut dirs: Dirs, on_change: impl Fn(Change<'_>)) {
    loop {
        let mut fds = [
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
        if fds[1].any().unwrap_or(true) {
            // The owner dropped the watch.
            return;
        }
        let events = match inotify.read_events() {
            Ok(events) => events,
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(_) => return,
        };
        for event in events {
            if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                on_change(Change {
                    name: None,
                    dir_created: false,
                    overflow: true,
                });
                continue;
            }
            if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                dirs.watched.retain(|(wd, _, _)| *wd != event.wd);
                continue;
            }
            let dir_created = event.mask.contains(AddWatchFlags::IN_ISDIR)
                && event
                    .mask
                    .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO);
            let parent = dirs.watched.iter().find(|(wd, _, _)| *wd == event.wd);
            if dir_created
                && let Some((_, parent, depth)) = parent
                && let Some(name) = &event.name
                && *depth < dirs.max_depth
            {
                let (path, depth) = (parent.join(name), *depth + 1);
                let _ = add_tree(&inotify, &path, depth, &mut dirs);
            }
            on_change(Change {
                name: event.name.as_deref(),
                dir_created,
                overflow: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn next(rx: &mpsc::Receiver<(Option<String>, bool)>) -> Option<(Option<String>, bool)> {
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    #[test]
    fn writes_in_the_tree_are_seen_new_dirs_included_and_reads_are_not() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("a")).unwrap();
        std::fs::write(root.path().join("a/ops.jsonl"), "").unwrap();
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let watch = watch_tree(root.path(), STATE_DIR_DEPTH, move |c| {
            let _ = tx.lock().unwrap().send((
                c.name.map(|n| n.to_string_lossy().into_owned()),
                c.dir_created,
            ));
        })
        .unwrap();
        // A read wakes nobody.
        std::fs::read_to_string(root.path().join("a/ops.jsonl")).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        // A write in an existing dir.
        std::fs::write(root.path().join("a/ops.jsonl"), "x").unwrap();
        assert_eq!(next(&rx), Some((Some("ops.jsonl".into()), false)));
        while rx.recv_timeout(Duration::from_millis(50)).is_ok() {}
        // A new dir, then a write in it.
        std::fs::create_dir(root.path().join("b")).unwrap();
        assert_eq!(next(&rx), Some((Some("b".into()), true)));
        std::fs::write(root.path().join("b/state.json"), "{}").unwrap();
        assert_eq!(next(&rx), Some((Some("state.json".into()), false)));
        // Dropped: the thread ends, and a write is no longer reported.
        drop(watch);
        std::thread::sleep(Duration::from_millis(50));
        while rx.recv_timeout(Duration::from_millis(50)).is_ok() {}
        std::fs::write(root.path().join("b/state.json"), "{}").unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }
}
