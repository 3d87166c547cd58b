//! Paths written in phoenix.toml (`~`, relative to the file, `.`/`..` steps) and the fleet
//! identity derived from the file's own path.

use std::path::{Path, PathBuf};

/// A fleet's identity: `<name>-<8 hex digits>` from the config file's canonical path (so a
/// symlinked or relative spelling of the same file is the same fleet). A file that cannot be
/// resolved (a test's made-up path) hashes as given.
pub fn fleet_id(name: &str, file: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = std::fs::canonicalize(file).unwrap_or_else(|_| absolute(file));
    let hash = crate::state::digest(path.as_os_str().as_bytes());
    format!("{name}-{}", &hash[..8])
}

pub(super) fn absolute(path: &Path) -> PathBuf {
    tidy(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// Expand `~` and resolve relative paths against `base`.
pub fn expand_path(text: &str, base: &Path) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    if text == "~" {
        if let Some(h) = home() {
            return h;
        }
    } else if let Some(rest) = text.strip_prefix("~/")
        && let Some(h) = home()
    {
        return h.join(rest);
    }
    let p = PathBuf::from(text);
    tidy(&if p.is_absolute() { p } else { base.join(p) })
}

/// `/srv/./a/b/../c` → `/srv/a/c`, without asking the filesystem to resolve links: `.` goes,
/// and `x/..` goes unless `x` is a symlink (the kernel would then go up from the link's
/// target, so the `..` stays and the path means what it meant).
pub fn tidy(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::RootDir) => {}
                Some(Component::Normal(_))
                    if !out
                        .symlink_metadata()
                        .is_ok_and(|m| m.file_type().is_symlink()) =>
                {
                    out.pop();
                }
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}
