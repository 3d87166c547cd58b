//! Every file under the state dir goes through here: one atomic write (a private temp file named
//! after its writer's pid, fsync, rename), one append, one bounded read, one lock open and one
//! private-dir create, none of which follows a symbolic link; the sweep of temp files killed
//! writers left behind; and `JsonFile`, the one path of every JSON state file (state.json,
//! ledger, crashes, clinic, watchdog, stop request…): a corrupt file is kept aside, rolled back
//! to its last good copy and recorded as a critical event, and a last good copy is only ever
//! written from bytes that parse.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::bounded::{self, Links, ReadError};
use super::{AgentDir, FleetDir, StateError};

/// State files are small (crash history and ledgers are capped); anything larger was not
/// written by phoenix and is refused rather than read into memory.
pub const STATE_FILE_LIMIT: u64 = 64 << 20;
/// A temp file older than this whose writer is gone is left over from a killed write.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(60);
/// Corrupt copies kept per file: enough to inspect, bounded if something keeps corrupting it.
const KEEP_CORRUPT: usize = 5;
/// What marks a temp file: `.<name>.tmp.<pid>.<n>`.
const TMP_MARK: &str = ".tmp.";

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// `O_NOFOLLOW`: a link planted in the state dir is never followed. `O_NONBLOCK`: opening a
/// FIFO planted there cannot hang (regular files ignore it).
const SAFE_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;

/// The temp file a write of `path` goes through: hidden, in the same dir, named after this
/// process (so a sweep can tell a dead writer's leftovers) and unique within it.
pub fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}{TMP_MARK}{}.{seq}", std::process::id()))
}

/// Replace `path` with `bytes` atomically: a new temp file (never through a link), its mode
/// set, written, synced when `sync`, renamed over `path` (a link at `path` is replaced, not
/// followed) and the dir synced. On any failure (a full disk…) the temp file is removed.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> io::Result<()> {
    let tmp = temp_path(path);
    let result = (|| {
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(SAFE_FLAGS)
                .open(&tmp)
        };
        let mut file = match create() {
            // Named after this pid and a number this process has not used yet: left by a
            // killed process that had the same pid (or planted). Never written through.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(&tmp)?;
                create()?
            }
            other => other?,
        };
        // The umask may have narrowed `mode`; a user's settings file keeps the mode it had.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        if sync {
            file.sync_all()?;
        }
        drop(file);
        fs::rename(&tmp, path)?;
        if sync {
            File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Open `path` for appending (created 0600), never through a link and only if it is a
/// regular file; a file left looser by an older version is made private. A link or anything
/// else planted where the file should be is moved aside (`<name>.refused-<time>`, the link
/// itself, never its target) and a new file started; the path it was moved to is returned so
/// that the caller records the refusal.
pub fn open_append(path: &Path) -> io::Result<(File, Option<PathBuf>)> {
    match open_append_regular(path) {
        Ok(file) => Ok((file, None)),
        Err(e) if is_refusal(&e) => {
            let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.3fZ");
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let aside = path.with_file_name(format!("{name}.refused-{stamp}"));
            fs::rename(path, &aside).map_err(|_| e)?;
            Ok((open_append_regular(path)?, Some(aside)))
        }
        Err(e) => Err(e),
    }
}

/// Append `bytes` in one `write` (see `open_append`), recording a refusal if there was one.
pub fn append(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (mut file, refused) = open_append(path)?;
    file.write_all(bytes)?;
    if let Some(aside) = refused {
        report_refused(path, &aside);
    }
    Ok(())
}

fn open_append_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(SAFE_FLAGS)
        .open(path)
        .map_err(|e| explain_link(e, path))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// Record that something planted at `path` (a link…) was moved aside to `aside`: a critical
/// event of the fleet whose state dir holds it (`<root>/<file>` or `<root>/agents/<a>/<file>`).
pub fn report_refused(path: &Path, aside: &Path) {
    let Some(dir) = path.parent() else { return };
    let (root, agent) = match dir.parent() {
        Some(agents) if agents.file_name().is_some_and(|n| n == "agents") => (
            agents.parent().unwrap_or(agents),
            dir.file_name().map(|n| n.to_string_lossy().into_owned()),
        ),
        _ => (dir, None),
    };
    let _ = FleetDir::new(root).record_critical(
        "state_file_refused",
        agent.as_deref().unwrap_or(""),
        &format!(
            "`{}` was not a regular file of phoenix's own (a symbolic link?); it was not followed",
            path.display()
        ),
        &format!(
            "moved it aside to `{}` and started a new file",
            aside.display()
        ),
        json!({"file": path, "moved_to": aside}),
    );
}

/// Open a state file for reading: never through a link, regular files only (a FIFO cannot
/// make the open hang). The one bounded reader (`state::bounded`) does the opening.
pub fn open_read(path: &Path) -> io::Result<File> {
    bounded::open_regular(path, Links::Refuse)
        .map(|(file, _)| file)
        .map_err(|e| from_read_error(e, path))
}

/// Read a whole state file: never through a link, regular files only, at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    bounded::read_whole(path, limit, Links::Refuse).map_err(|e| from_read_error(e, path))
}

/// The bounded reader's refusal as the `io::Error` state files speak, saying what to do.
fn from_read_error(e: ReadError, path: &Path) -> io::Error {
    match e {
        ReadError::NotRegular {
            kind: "a symlink", ..
        } => is_a_link(path),
        ReadError::NotRegular { .. } => not_regular(path),
        ReadError::TooLarge { .. } => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        ReadError::Io { source, .. } => explain_link(source, path),
    }
}

/// A small text file of the state dir (brief, marker…): never through a link, regular files
/// only, at most `STATE_FILE_LIMIT` bytes; `None` when it cannot be read.
pub fn read_text(path: &Path) -> Option<String> {
    let bytes = read_bounded(path, STATE_FILE_LIMIT).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Open (creating 0600) a lock file, never through a link.
pub fn open_lock(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(SAFE_FLAGS)
        .open(path)
        .map_err(|e| explain_link(e, path))
}

/// Take an exclusive `flock` on `path` (see `open_lock`), blocking until it is free.
pub fn lock(path: &Path) -> io::Result<Flock<File>> {
    Flock::lock(open_lock(path)?, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io::Error::from(errno))
}

fn not_regular(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "`{}` is not a regular file; phoenix only uses its own files in the state dir",
            path.display()
        ),
    )
}

/// `ELOOP` from `O_NOFOLLOW` means a link: say so, with what to do.
fn explain_link(e: io::Error, path: &Path) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return is_a_link(path);
    }
    e
}

fn is_a_link(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "`{}` is a symbolic link; phoenix does not follow links in its state dir (remove it)",
            path.display()
        ),
    )
}

/// Is this error a refusal of a link or of something that is not a regular file?
pub fn is_refusal(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidInput
        || e.kind() == io::ErrorKind::InvalidData
        || e.raw_os_error() == Some(libc::ELOOP)
        || e.raw_os_error() == Some(libc::ENXIO)
}

/// Create a directory (and missing parents) mode 0700 and check it: a real directory (a link
/// is allowed only when `allow_link`, for the state dir itself) owned by the running user.
pub fn create_private_dir_checked(path: &Path, allow_link: bool) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    let meta = if allow_link {
        fs::metadata(path)?
    } else {
        let meta = fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Err(is_a_link(path));
        }
        meta
    };
    check_owner(path, &meta)?;
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Refuse a state dir (or a dir in it) someone else owns: their links and files could make
/// this user's phoenix write where they choose.
pub fn check_owner(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "state dir `{}` is owned by uid {}, not by the user running phoenix (uid {me}); \
                 hint: run phoenix as that user, or point `state_dir` in phoenix.toml at a \
                 directory of your own",
                path.display(),
                meta.uid()
            ),
        ));
    }
    Ok(())
}

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
    pub fn lock(&self) -> Result<Flock<File>, StateError> {
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
        let kept = self.file(&format!("{}.corrupt-{stamp}", self.name));
        let kept = fs::rename(&path, &kept).ok().map(|_| {
            // Kept as private as the file it was (a link's target is not touched).
            if fs::symlink_metadata(&kept).is_ok_and(|m| m.is_file()) {
                let _ = fs::set_permissions(&kept, fs::Permissions::from_mode(0o600));
            }
            kept
        });
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
            let _ = agent.record(super::Op::named(&format!("{}_rollback", self.what), fields));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[derive(Debug, Default, PartialEq, Serialize, serde::Deserialize)]
    struct Doc {
        items: Vec<String>,
    }

    fn agent() -> (tempfile::TempDir, AgentDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path().join(".phoenix")).agent("a");
        dir.ensure().unwrap();
        (tmp, dir)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_corrupt_file_never_reaches_its_last_good_copy_and_is_rolled_back() {
        let (_tmp, dir) = agent();
        let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
        file.update(|d| d.get_or_insert_with(Doc::default).items.push("one".into()))
            .unwrap();
        fs::write(file.path(), b"{\"items\": [\"on").unwrap();
        // The next update starts from the last good copy, and its result becomes the new one.
        file.update(|d| d.get_or_insert_with(Doc::default).items.push("two".into()))
            .unwrap();
        let good: Doc = serde_json::from_slice(&fs::read(file.last_good_path()).unwrap()).unwrap();
        assert_eq!(good.items, ["one", "two"]);
        assert_eq!(file.load().unwrap().unwrap(), good);
        let kept: Vec<String> = names(&dir.path)
            .into_iter()
            .filter(|n| n.starts_with("doc.json.corrupt-"))
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(
            fs::read(dir.file(&kept[0])).unwrap(),
            b"{\"items\": [\"on",
            "the corrupt bytes are kept for inspection"
        );
        let critical =
            fs::read_to_string(FleetDir::new(dir.fleet_root()).critical_events_path()).unwrap();
        let event: serde_json::Value =
            serde_json::from_str(critical.lines().next().unwrap()).unwrap();
        assert_eq!(event["event"], "doc_corrupt");
        assert_eq!(event["agent"], "a");
        let ops = fs::read_to_string(dir.file(super::super::OPS_LOG)).unwrap();
        assert!(ops.contains("doc_rollback"), "{ops}");
    }

    #[test]
    fn corrupt_copies_are_bounded() {
        let (_tmp, dir) = agent();
        let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
        for i in 0..(KEEP_CORRUPT + 3) {
            fs::write(file.path(), format!("garbage {i}")).unwrap();
            assert_eq!(file.load().unwrap(), None);
            std::thread::sleep(Duration::from_millis(2));
        }
        let kept = names(&dir.path)
            .into_iter()
            .filter(|n| n.starts_with("doc.json.corrupt-"))
            .count();
        assert_eq!(kept, KEEP_CORRUPT);
    }

    #[test]
    fn a_link_or_a_fifo_in_place_of_a_state_file_is_not_followed() {
        let (tmp, dir) = agent();
        let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
        file.update(|d| {
            *d = Some(Doc {
                items: vec!["mine".into()],
            })
        })
        .unwrap();
        let target = tmp.path().join("someone-elses.json");
        fs::write(&target, b"{\"items\": [\"theirs\"]}").unwrap();
        fs::remove_file(file.path()).unwrap();
        symlink(&target, file.path()).unwrap();
        assert_eq!(file.load().unwrap().unwrap().items, ["mine"]);
        file.update(|d| d.as_mut().unwrap().items.push("more".into()))
            .unwrap();
        assert_eq!(
            fs::read(&target).unwrap(),
            b"{\"items\": [\"theirs\"]}",
            "the link's target is untouched"
        );
        // Appends refuse a link too.
        let log = dir.file("log.jsonl");
        symlink(&target, &log).unwrap();
        super::super::append_jsonl(&log, &"x").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"{\"items\": [\"theirs\"]}");
        assert_eq!(fs::read(&log).unwrap(), b"\"x\"\n");
        assert!(!fs::symlink_metadata(&log).unwrap().file_type().is_symlink());
        let critical =
            fs::read_to_string(FleetDir::new(dir.fleet_root()).critical_events_path()).unwrap();
        assert!(critical.contains("state_file_refused"), "{critical}");
        // A FIFO is refused without hanging.
        fs::remove_file(file.path()).unwrap();
        nix::unistd::mkfifo(&file.path(), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(file.read().unwrap(), Loaded::Corrupt(_)));
    }

    #[test]
    fn a_dead_namesakes_temp_file_or_a_link_in_its_place_is_not_in_the_way() {
        let (tmp, dir) = agent();
        let path = dir.file("x.json");
        let target = tmp.path().join("target");
        fs::write(&target, b"theirs").unwrap();
        // The next temp names this process will use: one left over, one a planted link.
        let next = TEMP_SEQ.load(Ordering::Relaxed);
        let me = std::process::id();
        for (i, seq) in (next..next + 64).enumerate() {
            let t = dir.file(&format!(".x.json{TMP_MARK}{me}.{seq}"));
            if i % 2 == 0 {
                fs::write(&t, b"stale").unwrap();
            } else {
                symlink(&target, &t).unwrap();
            }
        }
        write_atomic(&path, b"mine", 0o600, true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"mine");
        assert_eq!(fs::read(&target).unwrap(), b"theirs");
    }

    #[test]
    fn a_failed_write_leaves_no_temp_file() {
        let (_tmp, dir) = agent();
        // A rename onto a non-empty directory fails after the temp file was written.
        let path = dir.file("busy");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("x"), b"").unwrap();
        assert!(write_atomic(&path, b"data", 0o600, true).is_err());
        assert!(
            names(&dir.path).iter().all(|n| !n.contains(TMP_MARK)),
            "{:?}",
            names(&dir.path)
        );
    }

    #[test]
    fn stale_temp_files_of_dead_writers_are_swept_and_live_ones_kept() {
        let (_tmp, dir) = agent();
        let fleet = FleetDir::new(dir.fleet_root());
        // A pid that is surely not running: a child that has been reaped.
        let dead = {
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id();
            child.wait().unwrap();
            pid
        };
        let me = std::process::id();
        let old = std::time::SystemTime::now() - Duration::from_secs(120);
        let make = |path: PathBuf, age: std::time::SystemTime| {
            fs::write(&path, b"partial").unwrap();
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(age)
                .unwrap();
            path
        };
        create_private_dir_checked(&dir.file("handoffs"), false).unwrap();
        let swept = [
            make(dir.file(&format!(".state.json.tmp.{dead}.0")), old),
            make(dir.file(&format!(".ledger.json.tmp.{dead}")), old),
            make(dir.file(".crashes.json.last-good.tmp"), old),
            make(dir.file(&format!("handoffs/.h.md.tmp.{dead}.3")), old),
            make(fleet.root.join(format!(".notify.json.tmp.{dead}.1")), old),
        ];
        let kept = [
            make(dir.file(&format!(".state.json.tmp.{me}.0")), old),
            make(
                dir.file(&format!(".state.json.tmp.{dead}.9")),
                std::time::SystemTime::now(),
            ),
            make(dir.file("notes.tmp.1"), old),
        ];
        assert_eq!(fleet.sweep_temp_files(), swept.len());
        for p in &swept {
            assert!(!p.exists(), "{}", p.display());
        }
        for p in &kept {
            assert!(p.exists(), "{}", p.display());
        }
    }

    #[test]
    fn a_state_dir_of_another_user_or_a_linked_agent_dir_is_refused() {
        let (tmp, dir) = agent();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let linked = dir.fleet_root().join("agents").join("b");
        symlink(&elsewhere, &linked).unwrap();
        let err = FleetDir::new(dir.fleet_root())
            .agent("b")
            .ensure_usable()
            .unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        // The state dir itself may be a link to a dir of the user's own.
        let real = tmp.path().join("real-state");
        fs::create_dir(&real).unwrap();
        let link = tmp.path().join("linked-state");
        symlink(&real, &link).unwrap();
        FleetDir::new(&link).agent("z").ensure_usable().unwrap();
        assert!(real.join("agents/z").is_dir());
        // A state dir another user owns: as root, hand one to `nobody`; otherwise `/` is one.
        let foreign = if nix::unistd::geteuid().is_root() {
            let root = tmp.path().join("theirs");
            fs::create_dir(&root).unwrap();
            std::os::unix::fs::chown(&root, Some(65534), Some(65534)).unwrap();
            root
        } else {
            PathBuf::from("/")
        };
        let err = FleetDir::new(&foreign).agent("x").ensure().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(
            err.to_string().contains(&foreign.display().to_string()),
            "{err}"
        );
        assert!(err.to_string().contains("hint:"), "{err}");
        assert!(!foreign.join("agents").exists());
    }
}
