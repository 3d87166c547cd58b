//! `JsonFile`, the one path of every JSON state file (state.json, ledger, crashes, clinic,
//! watchdog, stop request…): a corrupt file is kept aside, rolled back to its last good copy
//! and recorded as a critical event, and a last good copy is only ever written from bytes
//! that parse.

use std::fs;
use std::io;
use std::marker::PhantomData;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{KEEP_CORRUPT, STATE_FILE_LIMIT, is_refusal, lock, read_bounded, write_atomic};
use crate::state::{AgentDir, FleetDir, StateError};

/// What a JSON state file holds, read without repairing anything.
#[derive(Debug)]
pub enum Loaded<T> {
    Missing,
    Valid(T),
    /// Why it cannot be used (does not parse, is empty, is a link, is too large…).
    Corrupt(String),
}

/// Parse a JSON state document; an empty (whitespace-only) file is a truncated write.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Loaded<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Loaded::Corrupt("the file is empty (truncated write?)".into());
    }
    match serde_json::from_slice::<T>(bytes) {
        Ok(v) => Loaded::Valid(v),
        Err(e) => Loaded::Corrupt(format!("not a valid document: {e}")),
    }
}

/// One JSON state file of an agent or of the fleet, with its last good copy
/// (`<name>.last-good`), its lock and its rollback. Every JSON state file phoenix keeps is read
/// and written through this.
pub struct JsonFile<T> {
    /// The dir the file is in.
    dir: PathBuf,
    /// The agent it belongs to (its ops.jsonl records a rollback), none for a fleet file.
    agent: Option<AgentDir>,
    fleet_root: PathBuf,
    name: String,
    lock: String,
    /// The event names of a rollback: `<what>_rollback` in ops.jsonl, `<what>_corrupt` in
    /// critical_events.jsonl.
    what: String,
    /// Sync the file to disk on each write (durable state) or not (a cache-like memory).
    sync: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> JsonFile<T> {
    /// `name` in the agent's dir, locked by `.<name>.lock`, reported as `<what>_corrupt`.
    pub fn new(dir: &AgentDir, name: &str, what: &str) -> Self {
        JsonFile {
            dir: dir.path.clone(),
            agent: Some(dir.clone()),
            fleet_root: dir.fleet_root(),
            name: name.to_string(),
            lock: format!(".{name}.lock"),
            what: what.to_string(),
            sync: true,
            _t: PhantomData,
        }
    }

    /// A file of the whole fleet, in its state dir.
    pub fn fleet(fleet: &FleetDir, name: &str, what: &str) -> Self {
        JsonFile {
            dir: fleet.root.clone(),
            agent: None,
            fleet_root: fleet.root.clone(),
            name: name.to_string(),
            lock: format!(".{name}.lock"),
            what: what.to_string(),
            sync: true,
            _t: PhantomData,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Use another lock file (one the file shared with other writers before).
    pub fn lock_file(mut self, lock: &str) -> Self {
        self.lock = lock.to_string();
        self
    }

    /// Do not sync writes: losing the latest write to a power cut costs little.
    pub fn unsynced(mut self) -> Self {
        self.sync = false;
        self
    }

    pub fn path(&self) -> PathBuf {
        self.file(&self.name)
    }

    pub fn last_good_path(&self) -> PathBuf {
        self.file(&format!("{}.last-good", self.name))
    }

    pub fn exists(&self) -> bool {
        fs::symlink_metadata(self.path()).is_ok()
    }

    /// Take the file's exclusive lock (held until dropped). Killed holders release it.
    pub fn lock(&self) -> Result<super::Held, StateError> {
        let path = self.file(&self.lock);
        lock(&path).map_err(|source| StateError::Io {
            action: "lock",
            path,
            source,
        })
    }

    /// What is on disk, without repairing it. A link, a FIFO, a file too large count as corrupt.
    pub fn read(&self) -> Result<Loaded<T>, StateError> {
        let path = self.path();
        match read_bounded(&path, STATE_FILE_LIMIT) {
            Ok(bytes) => Ok(parse(&bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Loaded::Missing),
            Err(e) if is_refusal(&e) => Ok(Loaded::Corrupt(e.to_string())),
            Err(source) => Err(StateError::Io {
                action: "read",
                path,
                source,
            }),
        }
    }

    /// The content (`None` when there is none). A corrupt file is repaired under the lock
    /// first (see `load_locked`); only then is anything returned.
    pub fn load(&self) -> Result<Option<T>, StateError> {
        match self.read()? {
            Loaded::Valid(v) => Ok(Some(v)),
            Loaded::Missing => Ok(None),
            Loaded::Corrupt(_) => {
                let _lock = self.lock()?;
                self.load_locked()
            }
        }
    }

    /// `load` for callers that go on without the file: a problem is recorded, never returned.
    pub fn load_or_default(&self) -> T
    where
        T: Default,
    {
        match self.load() {
            Ok(v) => v.unwrap_or_default(),
            Err(e) => {
                let _ = FleetDir::new(&self.fleet_root).record_critical(
                    &format!("{}_unreadable", self.what),
                    self.agent.as_ref().map_or("", |a| a.name.as_str()),
                    &e.to_string(),
                    "went on without it",
                    json!({"file": self.path()}),
                );
                T::default()
            }
        }
    }

    /// Load with the lock held: a corrupt file is rolled back (see `roll_back`).
    pub fn load_locked(&self) -> Result<Option<T>, StateError> {
        match self.read()? {
            Loaded::Valid(v) => Ok(Some(v)),
            Loaded::Missing => Ok(None),
            Loaded::Corrupt(reason) => Ok(self.roll_back(&reason)),
        }
    }

    /// Read-modify-write under the lock; `None` is a file that does not exist yet.
    pub fn update<R>(&self, f: impl FnOnce(&mut Option<T>) -> R) -> Result<R, StateError> {
        let _lock = self.lock()?;
        let mut value = self.load_locked()?;
        let out = f(&mut value);
        match &value {
            Some(v) => self.save_locked(v)?,
            None => self.remove_locked(),
        }
        Ok(out)
    }

    /// Write a value without taking the lock (one writer, or the caller holds it).
    pub fn save_locked(&self, value: &T) -> Result<(), StateError> {
        let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| StateError::Io {
            action: "serialise",
            path: self.path(),
            source: io::Error::other(e),
        })?;
        bytes.push(b'\n');
        self.write_bytes_locked(&bytes)
    }

    /// Write `bytes` (which must parse as `T`) atomically, read them back and compare (a
    /// mismatch rolls back), then make them the last good copy: a file of its own (never a
    /// hard link: a tool that rewrites the file in place would corrupt both), through a temp
    /// file and a rename but not synced. After a power cut it may be stale or empty, which a
    /// rollback detects; the synced file is what survives.
    pub fn write_bytes_locked(&self, bytes: &[u8]) -> Result<(), StateError> {
        let path = self.path();
        write_atomic(&path, bytes, 0o600, self.sync).map_err(|source| StateError::Io {
            action: "write",
            path: path.clone(),
            source,
        })?;
        // Never a last good copy that does not parse (checked once: on what was read back
        // when it is, which equals `bytes`).
        let parses = if self.sync {
            let back = read_bounded(&path, STATE_FILE_LIMIT).map_err(|source| StateError::Io {
                action: "read back",
                path: path.clone(),
                source,
            })?;
            if back != bytes || !matches!(parse::<T>(&back), Loaded::Valid(_)) {
                self.roll_back("what was read back differs from what was written");
                return Err(StateError::ReadBack { path });
            }
            true
        } else {
            matches!(parse::<T>(bytes), Loaded::Valid(_))
        };
        if parses {
            let good = self.last_good_path();
            write_atomic(&good, bytes, 0o600, false).map_err(|source| StateError::Io {
                action: "write",
                path: good,
                source,
            })?;
        }
        Ok(())
    }

    /// Remove the file and its last good copy (a one-shot request that was taken).
    pub fn remove_locked(&self) {
        let _ = fs::remove_file(self.path());
        let _ = fs::remove_file(self.last_good_path());
    }

    /// Keep the corrupt file aside as `<name>.corrupt-<time>`, put the last good copy back
    /// (else leave no file: the caller's empty value), and record what happened in ops.jsonl
    /// and critical_events.jsonl. Returns what the file now holds.
    fn roll_back(&self, reason: &str) -> Option<T> {
        let path = self.path();
        let stamp = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%S%.3fZ")
            .to_string();
        let kept = self.set_aside(&path, &format!("{}.corrupt-{stamp}", self.name));
        if let Some(kept) = &kept
            // Kept as private as the file it was (a link's target is not touched).
            && fs::symlink_metadata(kept).is_ok_and(|m| m.is_file())
        {
            let _ = fs::set_permissions(kept, fs::Permissions::from_mode(0o600));
        }
        self.prune_corrupt_copies();
        let good = self.last_good_path();
        let restored = match read_bounded(&good, STATE_FILE_LIMIT) {
            Ok(bytes) => match parse::<T>(&bytes) {
                Loaded::Valid(v) => write_atomic(&path, &bytes, 0o600, true).ok().map(|_| v),
                _ => None,
            },
            Err(_) => None,
        };
        let action = match &restored {
            Some(_) => format!(
                "rolled back to the last good copy `{}.last-good`",
                self.name
            ),
            None => format!("no usable last good copy: `{}` starts empty", self.name),
        };
        let details = json!({"file": path, "corrupt_copy": kept, "last_good": good});
        if let Some(agent) = &self.agent {
            let fields = json!({"reason": reason, "action_taken": action, "details": details});
            let _ = agent.record(crate::state::Op::named(
                &format!("{}_rollback", self.what),
                fields,
            ));
        }
        let _ = FleetDir::new(&self.fleet_root).record_critical(
            &format!("{}_corrupt", self.what),
            self.agent.as_ref().map_or("", |a| a.name.as_str()),
            &format!("`{}` is corrupt: {reason}", self.name),
            &action,
            details,
        );
        restored
    }

    /// Move `path` to `name` in this directory, or to `name-01`, `name-02`, … when that is
    /// taken: two corruptions within one millisecond each keep their own copy (a plain rename
    /// would replace the first copy's evidence with the second).
    pub(super) fn set_aside(&self, path: &std::path::Path, name: &str) -> Option<PathBuf> {
        (0..100).find_map(|n| {
            let kept = if n == 0 {
                self.file(name)
            } else {
                self.file(&format!("{name}-{n:02}"))
            };
            match rename_no_replace(path, &kept) {
                Ok(()) => Some(Some(kept)),
                Err(nix::errno::Errno::EEXIST) => None,
                Err(_) => Some(None),
            }
        })?
    }

    fn prune_corrupt_copies(&self) {
        let prefix = format!("{}.corrupt-", self.name);
        let mut copies: Vec<PathBuf> = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        // The stamp sorts in time order.
        copies.sort();
        let excess = copies.len().saturating_sub(KEEP_CORRUPT);
        for old in copies.drain(..excess) {
            let _ = fs::remove_file(old);
        }
    }
}

/// `rename(from, to)` unless `to` exists (`EEXIST` then). The system call itself: glibc's
/// wrapper (which nix binds) is missing from musl, and a static build must do the same.
fn rename_no_replace(from: &std::path::Path, to: &std::path::Path) -> nix::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| nix::errno::Errno::EINVAL)
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that outlive the call; renameat2 reads nothing else.
    let done = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(nix::errno::Errno::last()),
    }
}
