//! The plan: what `diff(&Spec, &World)` answers (changes, their actions and symbols, the
//! summary, the JSON), for `apply` to carry out and people to read.

mod diff;
mod hooks;
mod render;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use serde::Serialize;

use crate::spec::{Cli, FieldChange};

pub use diff::{STARTUP_GRACE_SECS, diff};

/// Bumped whenever the JSON shape changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Remove agents that run but are no longer declared (and their hook entries).
    pub prune: bool,
    /// The phoenix binary that hook commands call. Hook files are planned only when set.
    pub hooks_exe: Option<PathBuf>,
}

impl PlanOptions {
    /// Options for a plan made by this phoenix binary: the hook commands it plans call the
    /// hook binary next to it.
    pub fn for_this_binary(prune: bool) -> std::io::Result<PlanOptions> {
        Ok(PlanOptions {
            prune,
            hooks_exe: Some(crate::hooks::config::hook_binary(&std::env::current_exe()?)),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub format_version: u32,
    pub changes: Vec<Change>,
    /// Agents running but not declared; removed only with `--prune`.
    pub unmanaged: Vec<Unmanaged>,
    /// Declared agents whose wrapper holds them back (safe mode, cooldown): not changes, as
    /// an apply would not act on them, but no plan may call such a fleet converged.
    pub attention: Vec<Attention>,
}

/// A declared agent that is not running on purpose of its wrapper, and what acts on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attention {
    pub agent: String,
    pub pane: String,
    /// `safe-mode` (a crash limit or a diagnosis stopped it), `cooldown` (restarting),
    /// `stopped` (`phoenix stop`) or `moved` (the operator placed it on another machine).
    pub state: &'static str,
    /// For people: what to run.
    pub hint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The agent this change is about.
    pub agent: String,
    pub action: Action,
    pub symbol: &'static str,
    /// For people only; apply never looks at it.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// Create the agent's state dir (the agent itself is fine).
    InitState,
    Start,
    Restart {
        pane: String,
    },
    /// The spec changed under a running agent: stop it and start it again.
    Replace {
        pane: String,
        changed: Vec<FieldChange>,
    },
    /// Declared but disabled: stop it.
    Stop {
        pane: String,
    },
    /// Not declared any more (`--prune`).
    Prune {
        pane: String,
    },
    /// A second pane for an agent that already runs in `keep`: kill it, leaving the agent's
    /// state (shared with the pane that stays) alone.
    RemoveExtra {
        pane: String,
        keep: String,
    },
    /// Merge phoenix's hook entries into the CLI's hook file in the agent's workdir.
    InstallHooks {
        path: PathBuf,
        cli: Cli,
        /// The file does not exist yet.
        create: bool,
        /// Unified diff of the file's content (normalised JSON), for people.
        diff: String,
    },
    /// Take phoenix's entries for the agent out of a hook file (another CLI now, or pruned).
    RemoveHooks {
        path: PathBuf,
        diff: String,
    },
}

impl Action {
    pub fn symbol(&self) -> &'static str {
        match self {
            Action::InitState | Action::Start => "+",
            Action::InstallHooks { create: true, .. } => "+",
            Action::Restart { .. } | Action::InstallHooks { .. } => "~",
            Action::Replace { .. } => "-/+",
            Action::Stop { .. }
            | Action::Prune { .. }
            | Action::RemoveExtra { .. }
            | Action::RemoveHooks { .. } => "-",
        }
    }

    /// The action's name (the `type` the plan's JSON tags it with, what apply records for
    /// each step) and its place in the order apply runs changes in: hooks go in before agents
    /// start, as the CLIs read their hook files once, at startup.
    fn kind(&self) -> (&'static str, u8) {
        match self {
            Action::InitState => ("init_state", 0),
            Action::InstallHooks { .. } => ("install_hooks", 1),
            Action::RemoveHooks { .. } => ("remove_hooks", 1),
            Action::Start => ("start", 2),
            Action::Restart { .. } => ("restart", 3),
            Action::Replace { .. } => ("replace", 4),
            Action::Stop { .. } => ("stop", 5),
            Action::Prune { .. } => ("prune", 6),
            Action::RemoveExtra { .. } => ("remove_extra", 7),
        }
    }

    /// `init_state`, `start`, `remove_extra`, …: the `type` of the action in the plan's JSON.
    pub fn name(&self) -> &'static str {
        self.kind().0
    }

    fn order(&self) -> u8 {
        self.kind().1
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmanaged {
    pub agent: String,
    pub pane: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub start: usize,
    pub restart: usize,
    pub replace: usize,
    /// Disabled agents to stop (their state stays): not a removal.
    pub stop: usize,
    pub remove: usize,
    pub init: usize,
    /// Hook files to write or clean.
    pub hooks: usize,
}

impl Plan {
    /// A plan of just these changes (one step of a bigger plan, an operator's restart).
    pub fn of(changes: Vec<Change>) -> Plan {
        Plan {
            format_version: FORMAT_VERSION,
            changes,
            unmanaged: Vec::new(),
            attention: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.changes {
            match c.action {
                Action::InitState => s.init += 1,
                Action::Start => s.start += 1,
                Action::Restart { .. } => s.restart += 1,
                Action::Replace { .. } => s.replace += 1,
                Action::Stop { .. } => s.stop += 1,
                Action::Prune { .. } | Action::RemoveExtra { .. } => s.remove += 1,
                Action::InstallHooks { .. } | Action::RemoveHooks { .. } => s.hooks += 1,
            }
        }
        s
    }

    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("plan serialises");
        v["summary"] = serde_json::to_value(self.summary()).expect("summary serialises");
        v
    }
}

fn change(agent: &str, action: Action, reason: String) -> Change {
    Change {
        agent: agent.to_string(),
        symbol: action.symbol(),
        action,
        reason,
    }
}
