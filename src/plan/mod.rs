//! The plan: what `diff(&Spec, &World)` answers (changes, their actions and symbols, the
//! summary, the JSON), for `apply` to carry out and people to read.

mod diff;
mod hooks;
mod render;
#[cfg(test)]
mod tests;
mod worktree;

use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::spec::{Cli, FieldChange};

pub use diff::{STARTUP_GRACE_SECS, diff};
pub use render::{
    attention_line, kept_worktree_line, plural, render_change, summary_line, unmanaged_line,
};

/// Bumped whenever the JSON shape changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Remove agents that run but are no longer declared (and their hook entries).
    pub prune: bool,
    /// The phoenix binary that hook commands call. Hook files are planned only when set.
    pub hooks_exe: Option<PathBuf>,
    /// With `prune`: remove worktrees phoenix made even when they hold uncommitted changes
    /// or commits that are neither on their base nor pushed.
    pub force_remove_worktrees: bool,
}

/// What `--prune` removes: undeclared agents, and the worktrees phoenix made that no agent
/// works in; those holding work only with `--force-remove-worktrees`. Sent to every host of a
/// multi-host fleet as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pruning {
    #[serde(default)]
    pub prune: bool,
    #[serde(default)]
    pub force_remove_worktrees: bool,
}

impl From<bool> for Pruning {
    fn from(prune: bool) -> Pruning {
        Pruning {
            prune,
            force_remove_worktrees: false,
        }
    }
}

impl Pruning {
    /// Plan options of this phoenix binary that prune this way.
    pub fn options(self) -> std::io::Result<PlanOptions> {
        Ok(PlanOptions::for_this_binary(self.prune)?
            .forcing_worktree_removal(self.force_remove_worktrees))
    }
}

impl PlanOptions {
    /// Options for a plan made by this phoenix binary: the hook commands it plans call the
    /// hook binary next to it.
    pub fn for_this_binary(prune: bool) -> std::io::Result<PlanOptions> {
        Ok(PlanOptions {
            prune,
            hooks_exe: Some(crate::hooks::config::hook_binary(
                &crate::process::main_binary()?,
            )),
            force_remove_worktrees: false,
        })
    }

    /// These options, removing worktrees that hold work when `force` (`--force-remove-worktrees`).
    pub fn forcing_worktree_removal(mut self, force: bool) -> PlanOptions {
        self.force_remove_worktrees = force;
        self
    }
}

/// Read back from its JSON too: a host of a multi-host fleet sends the operator its plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub format_version: u32,
    pub changes: Vec<Change>,
    /// Agents running but not declared; removed only with `--prune`.
    #[serde(default)]
    pub unmanaged: Vec<Unmanaged>,
    /// Declared agents whose wrapper holds them back (safe mode, cooldown): not changes, as
    /// an apply would not act on them, but no plan may call such a fleet converged.
    #[serde(default)]
    pub attention: Vec<Attention>,
    /// Worktrees phoenix made that no agent works in any more, and why they stay.
    #[serde(default)]
    pub kept_worktrees: Vec<KeptWorktree>,
    /// The installed version of each declared agent's CLI (those phoenix knows versions of),
    /// the versions phoenix was proven with, and which one its hooks are made for.
    #[serde(default)]
    pub cli_versions: Vec<crate::world::cli_version::Report>,
    /// Each sandboxed agent's sandbox: what it shows and its last verification.
    #[serde(default)]
    pub sandboxes: Vec<SandboxReport>,
}

/// One agent's sandbox in a plan (observed by `status::observe`).
pub use crate::world::SandboxReport;

/// A worktree no agent works in that the plan does not remove, and why: not pruning, or
/// something in it would be lost (a `git status` summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptWorktree {
    pub agent: String,
    pub path: String,
    pub branch: String,
    pub why: String,
    /// What is in it that removing it would lose (uncommitted changes, ignored files,
    /// commits), when that is what keeps it.
    #[serde(default)]
    pub work: Option<crate::workspace::Work>,
}

/// A declared agent that is not running on purpose of its wrapper, and what acts on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attention {
    pub agent: String,
    pub pane: String,
    /// `safe-mode` (a crash limit or a diagnosis stopped it), `cooldown` (restarting),
    /// `restarting` (a person, the daemon or the watchdog restarts it right now), `stopped`
    /// (`phoenix stop`), `moved` (the operator placed it on another machine), `worktree`
    /// (its worktree needs a person first) or `waiting` (its `[[agent_set]]` runs its `max`).
    #[serde(deserialize_with = "attention_state")]
    pub state: Word,
    /// For people: what to run.
    pub hint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The agent this change is about.
    pub agent: String,
    pub action: Action,
    #[serde(deserialize_with = "symbol")]
    pub symbol: Word,
    /// For people only; apply never looks at it.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Its work item left its `[[agent_set]]`'s source: save a handoff, then stop it (its
    /// worktree stays, by the rules of `--prune`).
    Retire {
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
    /// Make the agent's git worktree (`git worktree add`); its branch from `base` when new.
    CreateWorktree {
        repo: PathBuf,
        path: PathBuf,
        branch: String,
        base: String,
        new_branch: bool,
        /// git still lists it: its record is cleared first.
        removed_by_hand: bool,
    },
    /// Put the agent's worktree back on its branch (nothing in it is lost by the switch).
    SwitchWorktree {
        repo: PathBuf,
        path: PathBuf,
        from: Option<String>,
        branch: String,
        base: String,
    },
    /// Remove a worktree phoenix made that no agent works in (`--prune`); the branch stays.
    RemoveWorktree {
        repo: PathBuf,
        path: PathBuf,
        branch: String,
        base: String,
        /// Even with uncommitted changes (`--force-remove-worktrees`).
        force: bool,
    },
}

impl Action {
    pub fn symbol(&self) -> &'static str {
        match self {
            Action::InitState | Action::Start | Action::CreateWorktree { .. } => "+",
            Action::SwitchWorktree { .. } => "~",
            Action::InstallHooks { create: true, .. } => "+",
            Action::Restart { .. } | Action::InstallHooks { .. } => "~",
            Action::Replace { .. } => "-/+",
            Action::Stop { .. }
            | Action::Prune { .. }
            | Action::Retire { .. }
            | Action::RemoveExtra { .. }
            | Action::RemoveHooks { .. }
            | Action::RemoveWorktree { .. } => "-",
        }
    }

    /// The action's name (the `type` the plan's JSON tags it with, what apply records for
    /// each step) and its place in the order apply runs changes in: hooks go in before agents
    /// start, as the CLIs read their hook files once, at startup.
    fn kind(&self) -> (&'static str, u8) {
        match self {
            Action::InitState => ("init_state", 0),
            // Before the hooks written into it and the agent started in it.
            Action::CreateWorktree { .. } => ("create_worktree", 0),
            Action::SwitchWorktree { .. } => ("switch_worktree", 0),
            Action::InstallHooks { .. } => ("install_hooks", 1),
            Action::RemoveHooks { .. } => ("remove_hooks", 1),
            Action::Start => ("start", 2),
            Action::Restart { .. } => ("restart", 3),
            Action::Replace { .. } => ("replace", 4),
            Action::Stop { .. } => ("stop", 5),
            Action::Prune { .. } => ("prune", 6),
            Action::Retire { .. } => ("retire", 6),
            Action::RemoveExtra { .. } => ("remove_extra", 7),
            // After its agent stopped and its hooks went.
            Action::RemoveWorktree { .. } => ("remove_worktree", 8),
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Worktrees to create, switch back or remove.
    #[serde(default)]
    pub worktrees: usize,
}

impl Plan {
    /// A plan of just these changes (one step of a bigger plan, an operator's restart).
    pub fn of(changes: Vec<Change>) -> Plan {
        Plan {
            format_version: FORMAT_VERSION,
            changes,
            unmanaged: Vec::new(),
            attention: Vec::new(),
            kept_worktrees: Vec::new(),
            cli_versions: Vec::new(),
            sandboxes: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Only what is about `agents` (`apply AGENT…`, Terraform's `-target`): their changes and
    /// what holds them back; nothing undeclared is removed.
    pub fn only(&mut self, agents: &[String]) {
        let agents: std::collections::HashSet<&String> = agents.iter().collect();
        self.changes.retain(|c| agents.contains(&c.agent));
        self.unmanaged.clear();
        self.attention.retain(|a| agents.contains(&a.agent));
        self.kept_worktrees.retain(|k| agents.contains(&k.agent));
        self.cli_versions.retain(|v| agents.contains(&v.agent));
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.changes {
            match c.action {
                Action::InitState => s.init += 1,
                Action::Start => s.start += 1,
                Action::Restart { .. } => s.restart += 1,
                Action::Replace { .. } => s.replace += 1,
                Action::Stop { .. } | Action::Retire { .. } => s.stop += 1,
                Action::Prune { .. } | Action::RemoveExtra { .. } => s.remove += 1,
                Action::InstallHooks { .. } | Action::RemoveHooks { .. } => s.hooks += 1,
                Action::CreateWorktree { .. }
                | Action::SwitchWorktree { .. }
                | Action::RemoveWorktree { .. } => s.worktrees += 1,
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

impl std::ops::AddAssign for Summary {
    fn add_assign(&mut self, other: Summary) {
        self.start += other.start;
        self.restart += other.restart;
        self.replace += other.replace;
        self.stop += other.stop;
        self.remove += other.remove;
        self.init += other.init;
        self.hooks += other.hooks;
        self.worktrees += other.worktrees;
    }
}

/// One of a fixed set of words. Behind an alias because serde's derive would otherwise
/// borrow a `&str` field from the input, which a `'static` one cannot be.
pub type Word = &'static str;

/// A word of a plan read back from JSON as one of the words this phoenix writes (`"?"` or
/// `"held"` for one it does not know), so a plan keeps its `&'static str`s wherever it came from.
fn known<'de, D: Deserializer<'de>>(
    d: D,
    words: &[&'static str],
    unknown: &'static str,
) -> Result<&'static str, D::Error> {
    let word = String::deserialize(d)?;
    Ok(words
        .iter()
        .find(|w| **w == word)
        .copied()
        .unwrap_or(unknown))
}

fn symbol<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    known(d, &["+", "~", "-/+", "-"], "?")
}

fn attention_state<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    known(
        d,
        &[
            "safe-mode",
            "cooldown",
            "restarting",
            "stopped",
            "moved",
            "worktree",
            "waiting",
        ],
        "held",
    )
}

fn change(agent: &str, action: Action, reason: String) -> Change {
    Change {
        agent: agent.to_string(),
        symbol: action.symbol(),
        action,
        reason,
    }
}
