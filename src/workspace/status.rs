//! What `status` shows of an agent's worktree: its branch, how far it is ahead of and behind
//! its base, how many files are changed. Kept cheap: the branch comes from files, one
//! `git status` per worktree gives the changes and the HEAD commit, and the ahead/behind
//! count (a walk of history) is only asked of git when HEAD or the base moved since this
//! process last asked (`phoenix serve` and `top` ask every few seconds). The worktrees of a
//! fleet are looked at in parallel.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::Serialize;

use super::observe::agent_hook_files;
use super::{Checkout, display, files, git};
use crate::spec::{Spec, WorkspaceSpec};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorktreeStatus {
    /// The worktree, `~/`-shortened.
    pub path: String,
    /// The branch checked out there (`None`: detached, or no worktree).
    pub branch: Option<String>,
    /// The branch the agent should be on.
    pub expected_branch: String,
    pub base: Option<String>,
    /// Commits on HEAD not on the base, and on the base not on HEAD.
    pub ahead: Option<u32>,
    pub behind: Option<u32>,
    /// Files changed, staged or untracked (phoenix's own hook file left out).
    pub dirty: Option<usize>,
    /// What is wrong with it, if anything: missing, on another branch, git failed.
    pub problem: Option<String>,
}

/// The worktree status of every declared agent with a workspace, by agent, in parallel.
pub fn statuses(spec: &Spec) -> BTreeMap<String, WorktreeStatus> {
    let workspaces: Vec<(&str, &WorkspaceSpec)> = spec
        .agents
        .iter()
        .filter_map(|a| a.workspace.as_ref().map(|w| (a.name.as_str(), w)))
        .collect();
    if workspaces.is_empty() {
        return BTreeMap::new();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = workspaces
            .iter()
            .map(|(name, ws)| (*name, s.spawn(|| of(ws))))
            .collect();
        handles
            .into_iter()
            .map(|(name, h)| {
                let status = h.join().unwrap_or_else(|_| WorktreeStatus {
                    problem: Some("could not be read".into()),
                    ..WorktreeStatus::default()
                });
                (name.to_string(), status)
            })
            .collect()
    })
}

/// One worktree's status.
pub fn of(ws: &WorkspaceSpec) -> WorktreeStatus {
    let mut st = WorktreeStatus {
        path: display(&ws.path),
        expected_branch: ws.branch.clone(),
        base: ws.base.clone(),
        ..WorktreeStatus::default()
    };
    let Some(common) = files::common_dir(&ws.repo) else {
        st.problem = Some(format!("`{}` is not a git repository", display(&ws.repo)));
        return st;
    };
    match files::checkout_at(&ws.path, &common) {
        Checkout::Worktree { branch } => {
            if branch.as_deref() != Some(ws.branch.as_str()) {
                st.problem = Some(match &branch {
                    Some(b) => format!("on branch `{b}`, not `{}`", ws.branch),
                    None => format!("on a detached HEAD, not `{}`", ws.branch),
                });
            }
            st.branch = branch;
        }
        Checkout::Missing | Checkout::RemovedByHand { .. } => {
            st.problem = Some("missing (`phoenix apply` creates it)".into());
            return st;
        }
        Checkout::Foreign { what } => {
            st.problem = Some(format!("not a worktree: {what}"));
            return st;
        }
    }
    let head = match porcelain(&ws.path) {
        Ok((head, dirty)) => {
            st.dirty = Some(dirty);
            head
        }
        Err(e) => {
            st.problem = Some(e.to_string());
            return st;
        }
    };
    let base = ws.base.clone().or_else(|| files::head_branch(&common));
    if let (Some(base), Some(head)) = (&base, head) {
        match ahead_behind(&ws.path, &common, &head, base) {
            Ok((ahead, behind)) => (st.ahead, st.behind) = (Some(ahead), Some(behind)),
            Err(e) => {
                st.problem.get_or_insert(e.to_string());
            }
        }
        st.base = Some(base.clone());
    }
    st
}

/// The HEAD commit and the number of changed files, from one `git status`.
fn porcelain(path: &Path) -> Result<(Option<String>, usize), git::GitError> {
    let text = git::run(
        path,
        &[
            "status",
            "--porcelain=v2",
            "-z",
            "--branch",
            "--untracked-files=all",
        ],
        true,
    )?;
    let ours = agent_hook_files();
    let mut head = None;
    let mut dirty = 0;
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    while let Some(f) = fields.next() {
        if let Some(oid) = f.strip_prefix("# branch.oid ") {
            head = (oid != "(initial)").then(|| oid.to_string());
        } else if f.starts_with("# ") {
        } else {
            // The path is the last of a fixed number of fields per kind of entry; a rename or
            // copy (`2 …`) is followed by the path it came from.
            let fixed = match f.as_bytes().first() {
                Some(b'1') => 8,
                Some(b'2') => 9,
                Some(b'u') => 10,
                _ => 1,
            };
            if f.starts_with("2 ") {
                fields.next();
            }
            let file = f.splitn(fixed + 1, ' ').nth(fixed).unwrap_or("");
            if !ours.contains(&file) {
                dirty += 1;
            }
        }
    }
    Ok((head, dirty))
}

type Memo = HashMap<(PathBuf, String, String), (u32, u32)>;

fn memo() -> &'static Mutex<Memo> {
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    MEMO.get_or_init(Mutex::default)
}

/// Commits of `head` not on `base` and of `base` not on `head`: remembered per (HEAD commit,
/// base commit) when the base's commit can be read from the repository's files.
fn ahead_behind(
    path: &Path,
    common: &Path,
    head: &str,
    base: &str,
) -> Result<(u32, u32), git::GitError> {
    let base_oid = resolve(common, base);
    let key = base_oid
        .as_ref()
        .map(|b| (path.to_path_buf(), head.to_string(), b.clone()));
    if let Some(k) = &key
        && let Some(hit) = memo().lock().ok().and_then(|m| m.get(k).copied())
    {
        return Ok(hit);
    }
    let range = format!("{}...{head}", base_oid.as_deref().unwrap_or(base));
    let out = git::run(
        path,
        &[
            "rev-list",
            "--left-right",
            "--count",
            "--end-of-options",
            &range,
        ],
        true,
    )?;
    let mut n = out
        .split_whitespace()
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (behind, ahead) = (n.next().unwrap_or(0), n.next().unwrap_or(0));
    if let (Some(k), Ok(mut m)) = (key, memo().lock()) {
        if m.len() > 1024 {
            m.clear();
        }
        m.insert(k, (ahead, behind));
    }
    Ok((ahead, behind))
}

/// The commit a branch, remote branch or tag names, read from the repository's files (loose
/// refs, then packed-refs); `None` when it cannot be read so (then git is asked).
fn resolve(common: &Path, name: &str) -> Option<String> {
    let hex = |s: &str| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if hex(name) {
        return Some(name.to_string());
    }
    let candidates = [
        format!("refs/heads/{name}"),
        format!("refs/remotes/{name}"),
        format!("refs/tags/{name}"),
    ];
    for full in &candidates {
        if let Some(line) = small(&common.join(full))
            && hex(line.trim())
        {
            return Some(line.trim().to_string());
        }
    }
    let packed = small(&common.join("packed-refs"))?;
    for full in &candidates {
        let found = packed.lines().find_map(|l| {
            let (oid, r) = l.split_once(' ')?;
            (r == full && hex(oid)).then(|| oid.to_string())
        });
        if found.is_some() {
            // An annotated tag's line names the tag object; the `^` line after it the commit.
            return if full.starts_with("refs/tags/") {
                None
            } else {
                found
            };
        }
    }
    None
}

fn small(path: &Path) -> Option<String> {
    use crate::state::bounded::{self, Links};
    bounded::read_string(path, 8 * 1024 * 1024, Links::Follow).ok()
}
