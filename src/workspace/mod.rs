//! Agents' git worktrees (`workspace = { repo, branch, base }`): what is observed of them
//! for a plan (`observe`), the steps that create, repair and remove them (`steps`), what
//! `status` shows of them (`status`), and the record of the worktrees phoenix made (`record`).
//! Everything git is asked goes through `git` (argv, `git -C`, never a shell).

pub mod files;
pub mod git;
mod observe;
pub mod record;
pub mod status;
pub mod steps;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use observe::observe;
pub use record::Recorded;
pub use status::{WorktreeStatus, statuses};

/// What is at a worktree's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Checkout {
    /// Nothing there, and git knows of no worktree there.
    Missing,
    /// Removed by hand: the directory is gone but git still lists the worktree.
    RemovedByHand { locked: bool },
    /// A worktree of the repo, on `branch` (`None`: a detached HEAD).
    Worktree { branch: Option<String> },
    /// Something else is there (a plain directory, another repository's worktree).
    Foreign { what: String },
}

/// What would be lost with a worktree, or changed under it by a switch of branch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// Uncommitted changes as `git status --short` shows them (`M src/a.rs`, `?? notes.md`),
    /// phoenix's own hook files left out.
    pub changes: Vec<String>,
    /// Files git ignores (`secret.env`; an ignored directory as one entry, `target/`): git
    /// keeps no copy of them and `git worktree remove` deletes them without a word, so they
    /// are work like any other.
    #[serde(default)]
    pub ignored: Vec<String>,
    /// Commits (`abc1234 subject`) on the worktree's HEAD that are neither on `base` nor
    /// pushed (on a remote-tracking branch): the first few.
    pub commits: Vec<String>,
    /// How many such commits there are in all.
    pub commit_count: usize,
    /// Why it could not be told (then nothing counts as safe).
    pub unknown: Option<String>,
}

impl Work {
    /// Nothing would be lost.
    pub fn is_safe(&self) -> bool {
        self.changes.is_empty()
            && self.ignored.is_empty()
            && self.commit_count == 0
            && self.unknown.is_none()
    }

    /// For people: `2 uncommitted changes (M src/a.rs, ?? notes.md); 1 ignored file
    /// (secret.env); 1 commit not on main and not pushed (abc1234 wip)`.
    pub fn summary(&self, base: &str) -> String {
        let mut parts = Vec::new();
        if let Some(why) = &self.unknown {
            parts.push(format!("cannot tell what it holds ({why})"));
        }
        if !self.changes.is_empty() {
            parts.push(format!(
                "{} ({})",
                crate::text::counted(self.changes.len(), "uncommitted change"),
                shown(&self.changes, self.changes.len())
            ));
        }
        if !self.ignored.is_empty() {
            parts.push(format!(
                "{} ({})",
                crate::text::counted(self.ignored.len(), "ignored file"),
                shown(&self.ignored, self.ignored.len())
            ));
        }
        if self.commit_count > 0 {
            parts.push(format!(
                "{} not on `{base}` and not pushed ({})",
                crate::text::counted(self.commit_count, "commit"),
                shown(&self.commits, self.commit_count)
            ));
        }
        parts.join("; ")
    }
}

/// The first few items, and how many more.
fn shown(items: &[String], total: usize) -> String {
    const FIRST: usize = 5;
    let mut text = items
        .iter()
        .take(FIRST)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if total > FIRST {
        text.push_str(&format!(", … {} more", total - FIRST));
    }
    text
}

/// One worktree as observed for a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorktreeObs {
    pub path: PathBuf,
    pub checkout: Checkout,
    /// What a new branch starts from: the declared base, else the repo's checked-out branch.
    pub base: String,
    /// Whether the agent's branch exists (looked up only when the worktree is to be made).
    pub branch_exists: bool,
    /// Another worktree that has the agent's branch checked out, if one has.
    pub branch_elsewhere: Option<PathBuf>,
    /// What a switch or a removal would touch (looked up only then).
    pub work: Option<Work>,
    /// Why git could not be asked (not a repository, git missing).
    pub problem: Option<String>,
}

/// Every worktree a plan needs to know about.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Observed {
    /// The worktrees of declared agents, by agent.
    pub declared: std::collections::BTreeMap<String, WorktreeObs>,
    /// Worktrees phoenix made that no declared agent has any more (the agent is gone, or
    /// its workspace moved): what `--prune` may remove.
    pub leftover: Vec<(Recorded, WorktreeObs)>,
}

/// `/home/me/src/app` → `~/src/app`, for plans and status lines.
pub fn display(path: &std::path::Path) -> String {
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && !home.as_os_str().is_empty()
        && home != std::path::Path::new("/")
        && let Ok(rest) = path.strip_prefix(&home)
    {
        return format!("~/{}", rest.display());
    }
    path.display().to_string()
}
