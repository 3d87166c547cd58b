//! What wakes the controller: pokes through the FIFO (a wrapper, the watchdog, an operator's
//! restart request), a pane process's exit (pidfd), a change of phoenix.toml (inotify).

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::error::Context;
use tokio::sync::mpsc::UnboundedSender;
use tracing::warn;

use crate::spec;

#[derive(Debug)]
pub(super) enum Event {
    /// A wrapper or a phoenix command wrote to the FIFO.
    Poke(String),
    /// The process of a watched pane exited.
    PaneExited(u32),
    ConfigChanged,
    /// An `[[agent_set]]`'s source gave a new list (stored): the spec expands anew.
    IntakeChanged,
}

pub(super) fn ensure_fifo(path: &Path) -> crate::error::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_fifo() => return Ok(()),
        Ok(_) => std::fs::remove_file(path)
            .with_context(|| format!("cannot replace `{}`", path.display()))?,
        Err(_) => {}
    }
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .with_context(|| format!("cannot create FIFO `{}`", path.display()))
}

/// Read agent names poked into the FIFO. Opened read-write so it never sees end-of-file when
/// the last writer goes.
pub(super) async fn read_fifo(path: PathBuf, tx: UnboundedSender<Event>) {
    let receiver = match tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&path)
    {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, fifo = %path.display(), "cannot read the wake-up FIFO; relying on the interval");
            return;
        }
    };
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if receiver.readable().await.is_err() {
            return;
        }
        match receiver.try_read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let agent = String::from_utf8_lossy(&line).trim().to_string();
                    if tx.send(Event::Poke(agent)).is_err() {
                        return;
                    }
                }
                if pending.len() > 64 * 1024 {
                    pending.clear();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// What `reload` compares; `None` when the file cannot be read (a reload then reports why).
pub(super) fn config_digest(file: &Path) -> Option<String> {
    spec::file_digest(file)
}

/// Watch the config file's directory: editors replace files by renaming, which a watch on the
/// file itself would lose.
pub(super) fn watch_config(
    file: &Path,
    tx: UnboundedSender<Event>,
) -> std::io::Result<crate::state::tree_watch::TreeWatch> {
    let name = file.file_name().map(|n| n.to_owned());
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    crate::state::tree_watch::watch_tree(dir, 0, move |change| {
        // Lost events may have been the file's: look again.
        if change.overflow || change.name.map(|n| n.to_owned()) == name {
            let _ = tx.send(Event::ConfigChanged);
        }
    })
}

/// A task per live pane process, woken by its pidfd when it exits: even a wrapper killed with
/// SIGKILL is noticed at once, without polling and without tmux hooks running shell strings.
#[derive(Default)]
pub(super) struct PaneWatch {
    tasks: HashMap<u32, tokio::task::JoinHandle<()>>,
}

impl PaneWatch {
    pub(super) fn refresh(&mut self, pids: &[u32], tx: &UnboundedSender<Event>) {
        self.tasks.retain(|pid, task| {
            let keep = pids.contains(pid) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for &pid in pids {
            if self.tasks.contains_key(&pid) {
                continue;
            }
            let Some(fd) = pidfd_open(pid) else {
                continue;
            };
            let tx = tx.clone();
            let task = tokio::spawn(async move {
                // SAFETY: the AsyncFd owns the OwnedFd, which stays open until it is dropped.
                let registered = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        fd,
                        tokio::io::Interest::READABLE,
                    )
                };
                if let Ok(fd) = registered {
                    let _ = fd.readable().await;
                    let _ = tx.send(Event::PaneExited(pid));
                }
            });
            self.tasks.insert(pid, task);
        }
    }
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just handed us this fd and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn pidfd_fires_when_the_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.1")
            .spawn()
            .unwrap();
        let fd = pidfd_open(child.id()).expect("pidfd_open");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // SAFETY: the AsyncFd owns the OwnedFd.
            let fd = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            }
            .unwrap();
            let _ready = tokio::time::timeout(Duration::from_secs(5), fd.readable())
                .await
                .expect("pidfd readable")
                .unwrap();
        });
        child.wait().unwrap();
    }
}
