//! The worktrees phoenix made for an agent (`worktrees.json` in its state dir): only those are
//! ever removed by phoenix, and only these tell it where an agent that is no longer declared
//! had its worktree. A worktree that was there before phoenix looked is the user's: adopted,
//! never recorded, never removed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::spec::WorkspaceSpec;
use crate::state::{AgentDir, JsonFile};

pub const WORKTREES: &str = "worktrees.json";

/// One worktree phoenix made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub agent: String,
    pub repo: PathBuf,
    pub path: PathBuf,
    pub branch: String,
    /// What the branch was made from (and what "not merged" is measured against).
    pub base: String,
}

impl Recorded {
    pub fn of(agent: &str, ws: &WorkspaceSpec, base: &str) -> Recorded {
        Recorded {
            agent: agent.to_string(),
            repo: ws.repo.clone(),
            path: ws.path.clone(),
            branch: ws.branch.clone(),
            base: base.to_string(),
        }
    }
}

fn file(dir: &AgentDir) -> JsonFile<Vec<Recorded>> {
    JsonFile::new(dir, WORKTREES, "worktrees")
}

/// The worktrees recorded for the agent of `dir` (none when there is no record, or it is
/// unreadable: then nothing is removed).
pub fn load(dir: &AgentDir) -> Vec<Recorded> {
    if !dir.exists() {
        return Vec::new();
    }
    file(dir).load().ok().flatten().unwrap_or_default()
}

/// Remember that phoenix made `made` (replacing an older record of the same path).
pub fn add(dir: &AgentDir, made: Recorded) -> Result<(), String> {
    file(dir)
        .update(|list| {
            let list = list.get_or_insert_with(Vec::new);
            list.retain(|r| r.path != made.path);
            list.push(made);
        })
        .map_err(|e| format!("cannot record the worktree in the state dir: {e}"))
}

/// Forget the worktree at `path` (it was removed).
pub fn forget(dir: &AgentDir, path: &Path) -> Result<(), String> {
    file(dir)
        .update(|list| {
            if let Some(list) = list {
                list.retain(|r| r.path != path);
            }
        })
        .map_err(|e| format!("cannot update the worktree record: {e}"))
}
