//! The side effects on worktrees, one function per plan action: create (or re-create one
//! removed by hand), switch back to the agent's branch, remove. Each looks again before it
//! acts (the plan may be a minute old) and refuses rather than lose anyone's work.

use std::io::Write as _;
use std::path::Path;

use super::git;
use super::observe::{agent_hook_files, branch_exists, work_at};
use super::{Checkout, Recorded, display, files, record};
use crate::spec::AgentSpec;
use crate::state::AgentDir;

/// What `create` is asked to make.
pub struct Create<'a> {
    pub agent: &'a str,
    pub repo: &'a Path,
    pub path: &'a Path,
    pub branch: &'a str,
    pub base: &'a str,
}

/// Make the worktree (`git worktree add`), the branch from `base` when it does not exist;
/// clear git's record of one removed by hand first. Records it as phoenix's.
pub fn create(dir: &AgentDir, c: &Create) -> Result<String, String> {
    let common = files::common_dir(c.repo)
        .ok_or_else(|| format!("`{}` is not a git repository", display(c.repo)))?;
    match files::checkout_at(c.path, &common) {
        Checkout::Worktree { .. } => {
            return Ok(format!("{} is already there", display(c.path)));
        }
        Checkout::Foreign { what } => {
            return Err(format!(
                "{} exists and is {what}: move it away (phoenix never deletes it), then apply again",
                display(c.path)
            ));
        }
        Checkout::Missing | Checkout::RemovedByHand { .. } => {}
    }
    forget_removed_by_hand(c.repo, c.path)?;
    let fresh = !branch_exists(c.repo, c.branch).map_err(|e| e.to_string())?;
    let path = c.path.as_os_str().to_owned();
    let mut args: Vec<std::ffi::OsString> = vec!["worktree".into(), "add".into()];
    if fresh {
        args.extend(["-b".into(), c.branch.into()]);
    }
    args.extend(["--end-of-options".into(), path]);
    args.push(if fresh { c.base } else { c.branch }.into());
    git::run(c.repo, &args, false).map_err(|e| match e {
        git::GitError::Failed { ref stderr, .. } if stderr.contains("already") => format!(
            "{e} (branch `{}` is checked out in another worktree: switch that one to another branch)",
            c.branch
        ),
        e => e.to_string(),
    })?;
    dir.ensure()
        .map_err(|e| format!("cannot create the state dir: {e}"))?;
    record::add(dir, Recorded::of_parts(c))?;
    let excluded = exclude_worktrees_dir(c.repo, c.path)?;
    Ok(format!(
        "created {} on {} `{}`{}{excluded}",
        display(c.path),
        if fresh { "new branch" } else { "branch" },
        c.branch,
        if fresh {
            format!(" from `{}`", c.base)
        } else {
            String::new()
        },
    ))
}

impl Recorded {
    fn of_parts(c: &Create) -> Recorded {
        Recorded {
            agent: c.agent.to_string(),
            repo: c.repo.to_path_buf(),
            path: c.path.to_path_buf(),
            branch: c.branch.to_string(),
            base: c.base.to_string(),
        }
    }
}

/// git still lists a worktree whose directory was deleted: `git worktree remove` clears
/// that one entry (there is nothing in it to lose; a locked one is left to its owner).
fn forget_removed_by_hand(repo: &Path, path: &Path) -> Result<(), String> {
    if path.exists() {
        return Ok(());
    }
    let listed = git::run(repo, &["worktree", "list", "--porcelain", "-z"], true)
        .map_err(|e| e.to_string())?
        .split('\0')
        .any(|f| {
            f.strip_prefix("worktree ")
                .is_some_and(|p| Path::new(p) == path)
        });
    if !listed {
        return Ok(());
    }
    let args = [
        "worktree".as_ref(),
        "remove".as_ref(),
        "--end-of-options".as_ref(),
        path.as_os_str(),
    ];
    git::run(repo, &args, false).map(|_| ()).map_err(|e| {
        format!("{e} (git still lists the worktree removed by hand; if it is locked, `git worktree unlock` it first)")
    })
}

/// With the worktrees inside the repo, their directory goes into `info/exclude`, or the
/// repo's own `git status` would list every agent's files. Returns a note for the step.
fn exclude_worktrees_dir(repo: &Path, path: &Path) -> Result<String, String> {
    let Some(parent) = path.parent() else {
        return Ok(String::new());
    };
    let Ok(inside) = parent.strip_prefix(repo) else {
        return Ok(String::new());
    };
    let line = format!("/{}/", inside.display());
    let exclude = git::run(repo, &["rev-parse", "--git-path", "info/exclude"], true)
        .map_err(|e| e.to_string())?;
    let exclude = repo.join(exclude.trim());
    let text = crate::state::file::read_bounded(&exclude, 1024 * 1024).unwrap_or_default();
    if String::from_utf8_lossy(&text)
        .lines()
        .any(|l| l.trim() == line)
    {
        return Ok(String::new());
    }
    let add = || -> std::io::Result<()> {
        if let Some(dir) = exclude.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&exclude)?;
        let sep = if text.is_empty() || text.ends_with(b"\n") {
            ""
        } else {
            "\n"
        };
        writeln!(f, "{sep}# phoenix: agents' worktrees\n{line}")
    };
    add().map_err(|e| {
        format!(
            "worktree made, but cannot add `{line}` to {}: {e}",
            exclude.display()
        )
    })?;
    Ok(format!("; `{line}` added to {}", display(&exclude)))
}

/// Put the worktree back on the agent's branch, if that loses nothing: no uncommitted
/// changes (they would travel to the agent's branch), no commits that only a detached HEAD
/// holds.
pub fn switch(path: &Path, branch: &str, base: &str, repo: &Path) -> Result<String, String> {
    let common = files::common_dir(repo)
        .ok_or_else(|| format!("`{}` is not a git repository", display(repo)))?;
    let Checkout::Worktree { branch: now } = files::checkout_at(path, &common) else {
        return Err(format!(
            "{} is not a worktree of {} any more",
            display(path),
            display(repo)
        ));
    };
    if now.as_deref() == Some(branch) {
        return Ok(format!("{} is on `{branch}` already", display(path)));
    }
    let work = work_at(path, base, now.is_none(), agent_hook_files());
    let detached_commits = now.is_none() && work.commit_count > 0;
    if !work.changes.is_empty() || detached_commits || work.unknown.is_some() {
        return Err(format!(
            "refusing to switch {} to `{branch}`: {} — commit or stash them first",
            display(path),
            work.summary("any branch")
        ));
    }
    let fresh = !branch_exists(repo, branch).map_err(|e| e.to_string())?;
    // An ignored file stays where it is across a switch, unless the branch tracks a file of
    // that name: then git would overwrite it without a word, and is told to refuse instead.
    let args: Vec<&str> = if fresh {
        vec![
            "switch",
            "--no-guess",
            "--no-overwrite-ignore",
            "-c",
            branch,
            "--end-of-options",
            base,
        ]
    } else {
        vec![
            "switch",
            "--no-guess",
            "--no-overwrite-ignore",
            "--end-of-options",
            branch,
        ]
    };
    git::run(path, &args, false).map_err(|e| e.to_string())?;
    Ok(format!(
        "switched {} from {} to `{branch}`",
        display(path),
        now.map_or("a detached HEAD".to_string(), |b| format!("`{b}`"))
    ))
}

/// Remove a worktree phoenix made. Without `force`, only when nothing would be lost (looked
/// at again now, ignored files included: git's own check of uncommitted files does not count
/// them). The branch stays.
pub fn remove(dir: &AgentDir, rec: &Recorded, force: bool) -> Result<String, String> {
    let gone = !rec.path.exists();
    if !gone && !force {
        // Phoenix's hook entries went out in the plan's step before this one: whatever is
        // still in a hook file now is someone else's, and git would delete it unasked if it
        // is ignored.
        let work = work_at(&rec.path, &rec.base, false, Vec::new());
        if !work.is_safe() {
            return Err(format!(
                "kept {}: {} (`--force-remove-worktrees` removes it anyway)",
                display(&rec.path),
                work.summary(&rec.base)
            ));
        }
    }
    if gone {
        forget_removed_by_hand(&rec.repo, &rec.path)?;
    } else {
        let mut args = vec!["worktree", "remove"];
        if force {
            args.push("--force");
        }
        let path = rec.path.to_string_lossy();
        args.extend(["--end-of-options", &path]);
        git::run(&rec.repo, &args, false).map_err(|e| e.to_string())?;
    }
    if dir.exists() {
        record::forget(dir, &rec.path)?;
    }
    Ok(format!(
        "removed {}{}; branch `{}` kept",
        display(&rec.path),
        if gone {
            " (already gone from disk)"
        } else {
            ""
        },
        rec.branch
    ))
}

/// Before an agent starts (or its hooks are written): its worktree must be there, or the
/// agent would start somewhere else, and a hook file would make a directory git cannot use.
pub fn ready(agent: &AgentSpec) -> Result<(), String> {
    let Some(ws) = &agent.workspace else {
        return Ok(());
    };
    if files::is_worktree_of(&ws.path, &ws.repo) {
        return Ok(());
    }
    Err(format!(
        "its worktree {} is not a worktree of {} (see the worktree step of this plan)",
        display(&ws.path),
        display(&ws.repo)
    ))
}
