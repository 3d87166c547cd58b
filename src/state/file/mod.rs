//! Every file under the state dir goes through here: one atomic write (a private temp file named
//! after its writer's pid, fsync, rename), one append, one bounded read, one lock open and one
//! private-dir create, none of which follows a symbolic link. The sweep of temp files killed
//! writers left behind is in `sweep`; `JsonFile`, the one path of every JSON state file, in
//! `json`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde_json::json;

use super::FleetDir;
use super::bounded::{self, Links, ReadError};

mod json;
mod sweep;

pub use json::{JsonFile, Loaded, parse};
pub use sweep::sweep_temp_files;

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
            let aside = move_aside(path).map_err(|_| e)?;
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

/// Cut the regular file at `path` back to `len` bytes (an append-only log whose last writes
/// are to be undone), never through a link.
pub fn truncate(path: &Path, len: u64) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(SAFE_FLAGS)
        .open(path)
        .map_err(|e| explain_link(e, path))?;
    if !file.metadata()?.is_file() {
        return Err(not_regular(path));
    }
    file.set_len(len)
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
    let _ = FleetDir::new(root).append_event(&refusal_event(
        path,
        aside,
        agent.as_deref().unwrap_or(""),
    ));
}

/// The critical event recording that what was at `path` was moved aside to `aside`.
pub fn refusal_event(path: &Path, aside: &Path, agent: &str) -> serde_json::Value {
    json!({
        "ts": super::now_rfc3339(), "event": "state_file_refused", "agent": agent,
        "reason": format!(
            "`{}` was not a regular file of phoenix's own (a symbolic link, a FIFO?); it was not followed",
            path.display()
        ),
        "action_taken": format!("moved it aside to `{}` and started a new file", aside.display()),
        "details": {"file": path, "moved_to": aside},
    })
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

/// Open (creating 0600) a lock file, never through a link and only if it is a regular file
/// (a FIFO, a device or a directory planted in its place is refused, never waited on);
/// readable, since a lock file may name its holder for whoever waits (`state::lock`).
pub fn open_lock(path: &Path) -> io::Result<File> {
    // Checked before opening too: a device planted here is never opened at all.
    if let Ok(meta) = fs::symlink_metadata(path)
        && !meta.is_file()
    {
        return Err(if meta.file_type().is_symlink() {
            is_a_link(path)
        } else {
            not_regular(path)
        });
    }
    let file = OpenOptions::new()
        .read(true)
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(SAFE_FLAGS)
        .open(path)
        .map_err(|e| explain_link(e, path))?;
    if !file.metadata()?.is_file() {
        return Err(not_regular(path));
    }
    Ok(file)
}

/// Take an exclusive `flock` on `path` (see `open_lock`), blocking until it is free. A lock
/// this thread holds already is refused at once (see `flock`).
pub fn lock(path: &Path) -> io::Result<Held> {
    flock(open_lock(path)?, true).map_err(|(_, errno)| match errno {
        nix::errno::Errno::EDEADLK => taken_twice(path),
        errno => io::Error::from(errno),
    })
}

/// The error of a lock taken a second time by the thread that holds it.
pub fn taken_twice(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Deadlock,
        format!(
            "`{}` is held already by this thread: a lock is never taken twice (it would wait for itself)",
            path.display()
        ),
    )
}

/// The locks this process holds: the lock file's (device, inode) and the thread that took it.
static HELD: std::sync::Mutex<Vec<((u64, u64), std::thread::ThreadId)>> =
    std::sync::Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<((u64, u64), std::thread::ThreadId)>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// An exclusive `flock` held until dropped (the kernel releases it when the process dies).
#[derive(Debug)]
pub struct Held {
    flock: Flock<File>,
    key: (u64, u64),
}

impl std::ops::Deref for Held {
    type Target = File;
    fn deref(&self) -> &File {
        &self.flock
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut File {
        &mut self.flock
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = held();
        if let Some(i) = held.iter().position(|(key, _)| *key == self.key) {
            held.swap_remove(i);
        }
    }
}

/// Take an exclusive `flock` on `file` (a lock file `open_lock` opened): waiting for it when
/// `wait`, else failing with `EWOULDBLOCK` at once. A lock the calling thread holds already is
/// refused with `EDEADLK`: a second open of the same file is a second open file description,
/// and its `flock` would wait for the first one, held by the same thread, forever.
pub fn flock(file: File, wait: bool) -> Result<Held, (File, nix::errno::Errno)> {
    let key = match file.metadata() {
        Ok(meta) => (meta.dev(), meta.ino()),
        Err(e) => {
            let errno = nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
            return Err((file, errno));
        }
    };
    let me = std::thread::current().id();
    if held().iter().any(|(k, thread)| *k == key && *thread == me) {
        return Err((file, nix::errno::Errno::EDEADLK));
    }
    let arg = if wait {
        FlockArg::LockExclusive
    } else {
        FlockArg::LockExclusiveNonblock
    };
    let flock = Flock::lock(file, arg)?;
    held().push((key, me));
    Ok(Held { flock, key })
}

/// Move what is at `path` aside (`<name>.refused-<time>`: the link or FIFO itself, never a
/// link's target) so that a regular file can take its place; the path it went to.
pub fn move_aside(path: &Path) -> io::Result<PathBuf> {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.3fZ");
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let aside = path.with_file_name(format!("{name}.refused-{stamp}"));
    fs::rename(path, &aside)?;
    Ok(aside)
}

fn not_regular(path: &Path) -> io::Error {
    refused(
        path,
        "is not a regular file; phoenix only uses its own files in the state dir",
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
    refused(
        path,
        "is a symbolic link; phoenix does not follow links in its state dir (remove it)",
    )
}

/// The refusal of what is at `path`, saying `why` (see `is_refusal`).
fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("`{}` {why}", path.display()),
    )
}

/// Is this error a refusal of a link or of something that is not a regular file?
pub fn is_refusal(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidInput
        || e.kind() == io::ErrorKind::InvalidData
        || e.raw_os_error() == Some(libc::ELOOP)
        || e.raw_os_error() == Some(libc::ENXIO)
        || e.raw_os_error() == Some(libc::EISDIR)
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

#[cfg(test)]
mod tests;
