//! What a worktree's own files say, without running git: whether a path is a worktree of a
//! repository, and which branch it has checked out. A plan of a converged fleet and every
//! status start here, so these are a few small bounded reads, never a process.

use std::path::{Path, PathBuf};

use super::Checkout;

/// Small files only (`.git`, `HEAD`, `commondir` are one line each).
const SMALL: u64 = 4096;

fn read_line(path: &Path) -> Option<String> {
    use crate::state::bounded::{self, Links};
    let text = bounded::read_string(path, SMALL, Links::Follow).ok()?;
    Some(text.lines().next().unwrap_or("").trim().to_string())
}

/// `gitdir: <dir>` of a `.git` file, resolved against the directory holding it.
fn gitdir_of(dot_git: &Path) -> Option<PathBuf> {
    let line = read_line(dot_git)?;
    let dir = line.strip_prefix("gitdir:")?.trim();
    let base = dot_git.parent()?;
    Some(base.join(dir))
}

/// The common git directory of the repository whose top directory is `repo` (its `.git`
/// directory; for a repo that is itself a linked worktree, the common one), canonical.
pub fn common_dir(repo: &Path) -> Option<PathBuf> {
    let dot_git = repo.join(".git");
    let dir = if dot_git.is_dir() {
        dot_git
    } else {
        let own = gitdir_of(&dot_git)?;
        match read_line(&own.join("commondir")) {
            Some(common) => own.join(common),
            None => own,
        }
    };
    std::fs::canonicalize(dir).ok()
}

/// The git directory of the linked worktree at `path` (`<common>/worktrees/<id>`) and its
/// common directory, when `path` is one.
fn linked(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let dot_git = path.join(".git");
    if !dot_git.is_file() {
        return None;
    }
    let own = gitdir_of(&dot_git)?;
    let common = own.join(read_line(&own.join("commondir"))?);
    Some((own, std::fs::canonicalize(common).ok()?))
}

/// The branch `HEAD` names in a git directory (`None`: detached, or unreadable).
pub fn head_branch(gitdir: &Path) -> Option<String> {
    read_line(&gitdir.join("HEAD"))?
        .strip_prefix("ref: refs/heads/")
        .map(str::to_string)
}

/// What is at `path` for the repository whose common directory is `common`, from files.
/// `Missing` covers "removed by hand" too: only git's list tells those apart.
pub fn checkout_at(path: &Path, common: &Path) -> Checkout {
    match std::fs::symlink_metadata(path) {
        Err(_) => return Checkout::Missing,
        Ok(m) if !m.is_dir() => {
            return Checkout::Foreign {
                what: "a file, not a directory".into(),
            };
        }
        Ok(_) => {}
    }
    match linked(path) {
        Some((own, theirs)) if theirs == common => Checkout::Worktree {
            branch: head_branch(&own),
        },
        Some(_) => Checkout::Foreign {
            what: "a worktree of another repository".into(),
        },
        None if path.join(".git").is_dir() => Checkout::Foreign {
            what: "a repository of its own".into(),
        },
        None => Checkout::Foreign {
            what: "a directory that is not a git worktree".into(),
        },
    }
}

/// Whether `path` is a worktree of `repo` (the check made before an agent starts there).
pub fn is_worktree_of(path: &Path, repo: &Path) -> bool {
    common_dir(repo)
        .is_some_and(|common| matches!(checkout_at(path, &common), Checkout::Worktree { .. }))
}
