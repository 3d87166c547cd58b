//! Observing worktrees for a plan. A worktree that is where it should be, on its branch, is
//! seen from its files alone; git is asked only when something is to be done: what to make
//! a missing worktree from, what a switch of branch or a removal would touch.

use std::path::{Path, PathBuf};

use super::git::{self, GitError};
use super::{Checkout, Observed, Recorded, Work, WorktreeObs, files, record};
use crate::spec::{Spec, WorkspaceSpec};
use crate::state::FleetDir;

/// The worktrees of the declared agents, and those phoenix made that none has any more
/// (recorded in the state dirs of `names`).
pub fn observe<'a>(
    spec: &Spec,
    fleet: &FleetDir,
    names: impl Iterator<Item = &'a str>,
) -> Observed {
    let mut observed = Observed::default();
    for agent in &spec.agents {
        if let Some(ws) = &agent.workspace {
            observed.declared.insert(agent.name.clone(), declared(ws));
        }
    }
    for name in names {
        let current = spec
            .agent(name)
            .and_then(|a| a.workspace.as_ref())
            .map(|ws| ws.path.as_path());
        for rec in record::load(&fleet.agent(name)) {
            if Some(rec.path.as_path()) != current {
                let obs = leftover(&rec);
                observed.leftover.push((rec, obs));
            }
        }
    }
    observed
}

/// A worktree as `git worktree list` shows it.
struct Listed {
    path: PathBuf,
    branch: Option<String>,
    locked: bool,
}

fn worktree_list(repo: &Path) -> Result<Vec<Listed>, GitError> {
    let text = git::run(repo, &["worktree", "list", "--porcelain", "-z"], true)?;
    let mut list = Vec::new();
    let mut current: Option<Listed> = None;
    for field in text.split('\0') {
        if let Some(path) = field.strip_prefix("worktree ") {
            list.extend(current.take());
            current = Some(Listed {
                path: PathBuf::from(path),
                branch: None,
                locked: false,
            });
        } else if let Some(c) = current.as_mut() {
            if let Some(b) = field.strip_prefix("branch refs/heads/") {
                c.branch = Some(b.to_string());
            } else if field == "locked" || field.starts_with("locked ") {
                c.locked = true;
            }
        }
    }
    list.extend(current);
    Ok(list)
}

/// The same directory, however it is spelt.
fn same_path(a: &Path, b: &Path) -> bool {
    a == b
        || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
}

fn declared(ws: &WorkspaceSpec) -> WorktreeObs {
    let mut obs = WorktreeObs {
        path: ws.path.clone(),
        checkout: Checkout::Missing,
        base: ws.base.clone().unwrap_or_default(),
        branch_exists: true,
        branch_elsewhere: None,
        work: None,
        problem: None,
    };
    let Some(common) = files::common_dir(&ws.repo) else {
        obs.problem = Some(format!(
            "`{}` is not a git repository",
            super::display(&ws.repo)
        ));
        return obs;
    };
    obs.checkout = files::checkout_at(&ws.path, &common);
    if matches!(&obs.checkout, Checkout::Worktree { branch } if branch.as_deref() == Some(ws.branch.as_str()))
    {
        return obs; // Converged: not one git process.
    }
    if let Err(e) = look_closer(ws, &mut obs) {
        obs.problem = Some(e.to_string());
    }
    obs
}

/// What git says of a worktree that is missing, or on another branch.
fn look_closer(ws: &WorkspaceSpec, obs: &mut WorktreeObs) -> Result<(), GitError> {
    let list = worktree_list(&ws.repo)?;
    obs.branch_elsewhere = list
        .iter()
        .find(|l| l.branch.as_deref() == Some(ws.branch.as_str()) && !same_path(&l.path, &ws.path))
        .map(|l| l.path.clone());
    if obs.base.is_empty() {
        obs.base = repo_branch(&ws.repo)?;
    }
    match &obs.checkout {
        Checkout::Missing => {
            // Checkout says nothing is at the path: a worktree git lists there was removed.
            if let Some(l) = list.iter().find(|l| same_path(&l.path, &ws.path)) {
                obs.checkout = Checkout::RemovedByHand { locked: l.locked };
            }
            obs.branch_exists = branch_exists(&ws.repo, &ws.branch)?;
        }
        Checkout::Worktree { branch } => {
            // A switch must not carry someone's changes onto the agent's branch, nor leave
            // commits of a detached HEAD behind on no branch at all.
            let detached = branch.is_none();
            obs.work = Some(work_at(&ws.path, &obs.base, detached, agent_hook_files()));
            obs.branch_exists = branch_exists(&ws.repo, &ws.branch)?;
        }
        _ => {}
    }
    Ok(())
}

/// A leftover worktree: where it stands, and what removing it would lose.
fn leftover(rec: &Recorded) -> WorktreeObs {
    let mut obs = WorktreeObs {
        path: rec.path.clone(),
        checkout: Checkout::Missing,
        base: rec.base.clone(),
        branch_exists: true,
        branch_elsewhere: None,
        work: None,
        problem: None,
    };
    let Some(common) = files::common_dir(&rec.repo) else {
        obs.problem = Some(format!(
            "`{}` is not a git repository",
            super::display(&rec.repo)
        ));
        return obs;
    };
    obs.checkout = files::checkout_at(&rec.path, &common);
    match &obs.checkout {
        Checkout::Worktree { .. } => {
            obs.work = Some(work_at(&rec.path, &rec.base, false, agent_hook_files()));
        }
        Checkout::Missing => match worktree_list(&rec.repo) {
            Ok(list) => {
                if let Some(l) = list.iter().find(|l| l.path == rec.path) {
                    obs.checkout = Checkout::RemovedByHand { locked: l.locked };
                }
            }
            Err(e) => obs.problem = Some(e.to_string()),
        },
        _ => {}
    }
    obs
}

/// The branch the repo has checked out (`HEAD` when it is detached).
fn repo_branch(repo: &Path) -> Result<String, GitError> {
    Ok(
        match git::run(repo, &["symbolic-ref", "--short", "-q", "HEAD"], true) {
            Ok(b) if !b.trim().is_empty() => b.trim().to_string(),
            Ok(_) | Err(GitError::Failed { .. }) => "HEAD".to_string(),
            Err(e) => return Err(e),
        },
    )
}

pub(super) fn branch_exists(repo: &Path, branch: &str) -> Result<bool, GitError> {
    git::succeeds(
        repo,
        &[
            "show-ref".to_string(),
            "--verify".into(),
            "--quiet".into(),
            format!("refs/heads/{branch}"),
        ],
    )
}

/// The files phoenix writes into a workdir (relative; hook files, pi's extension): phoenix's
/// own, not the agent's work, when it made them.
pub(super) fn agent_hook_files() -> Vec<&'static str> {
    crate::agent_cli::HOOKED
        .into_iter()
        .flat_map(|cli| cli.adapter().own_files())
        .collect()
}

/// What a worktree holds that is not elsewhere: uncommitted changes, ignored files, and
/// commits not on `base` and not pushed (`detached`: not on any branch either).
pub(super) fn work_at(path: &Path, base: &str, detached: bool, ours: Vec<&str>) -> Work {
    let mut work = Work::default();
    match changes(path, &ours) {
        Ok(listed) => (work.changes, work.ignored) = listed,
        Err(e) => work.unknown = Some(e.to_string()),
    }
    let mut args = vec!["log", "--format=%h %s", "HEAD", "--not", "--remotes"];
    if detached {
        args.push("--branches");
    } else {
        args.extend(["--end-of-options", base]);
    }
    args.push("--");
    match git::run(path, &args, true) {
        Ok(log) => {
            let lines: Vec<String> = log.lines().map(str::to_string).collect();
            work.commit_count = lines.len();
            work.commits = lines.into_iter().take(5).collect();
        }
        Err(e) => work.unknown = Some(e.to_string()),
    }
    work
}

/// `git status --short` lines of the worktree, and its ignored files (an ignored directory
/// as one entry: `--ignored=matching` never lists what is inside one), without phoenix's hook
/// files.
pub(super) fn changes(path: &Path, ours: &[&str]) -> Result<(Vec<String>, Vec<String>), GitError> {
    let text = git::run(
        path,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignored=matching",
        ],
        true,
    )?;
    let mut changed = Vec::new();
    let mut ignored = Vec::new();
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    while let Some(entry) = fields.next() {
        let (xy, file) = entry.split_at(entry.len().min(3));
        // A rename or copy is followed by the path it came from.
        if xy.starts_with('R') || xy.starts_with('C') {
            fields.next();
        }
        // phoenix's own hook file is not the agent's work: `--prune` takes phoenix's entries
        // out before the removal, and the removal looks again after that.
        if ours.contains(&file) {
            continue;
        }
        if xy.starts_with("!!") {
            if !only_ours(path, file, ours) {
                ignored.push(file.to_string());
            }
        } else {
            changed.push(format!("{} {file}", xy.trim()));
        }
    }
    Ok((changed, ignored))
}

/// Whether the ignored directory `dir` (`.claude/`) of the worktree at `root` holds no file
/// but phoenix's hook files (git lists an ignored directory even when it is empty): a few
/// entries are looked at, anything more counts as work.
fn only_ours(root: &Path, dir: &str, ours: &[&str]) -> bool {
    const MOST: usize = 64;
    let Some(dir) = dir.strip_suffix('/') else {
        return false;
    };
    let mut seen = 0;
    let mut pending = vec![dir.to_string()];
    while let Some(rel) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            return false;
        };
        for entry in entries {
            seen += 1;
            let Ok(entry) = entry else { return false };
            let Some(name) = entry.file_name().to_str().map(|n| format!("{rel}/{n}")) else {
                return false;
            };
            match entry.file_type() {
                _ if seen > MOST => return false,
                Ok(t) if t.is_dir() => pending.push(name),
                Ok(t) if t.is_file() && ours.contains(&name.as_str()) => {}
                _ => return false,
            }
        }
    }
    true
}
