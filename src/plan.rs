//! The pure diff: `diff(&Spec, &World) -> Plan`, rendered for people and as JSON.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::hooks::config::{self as hook_config, FileChange, Target};
use crate::spec::{AgentSpec, Cli, FieldChange, Spec};
use crate::world::{AgentObs, FileObs, PaneObs, World};

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
    /// `safe-mode` (a crash limit or a diagnosis stopped it), `cooldown` (restarting) or
    /// `stopped` (`phoenix stop`).
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

    /// Hooks go in before agents start: the CLIs read their hook files once, at startup.
    fn order(&self) -> u8 {
        match self {
            Action::InitState => 0,
            Action::InstallHooks { .. } | Action::RemoveHooks { .. } => 1,
            Action::Start => 2,
            Action::Restart { .. } => 3,
            Action::Replace { .. } => 4,
            Action::Stop { .. } => 5,
            Action::Prune { .. } => 6,
            Action::RemoveExtra { .. } => 7,
        }
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

/// Compute what must change for `world` to match `spec`. Pure: no I/O.
pub fn diff(spec: &Spec, world: &World, options: &PlanOptions) -> Plan {
    let mut changes = Vec::new();
    for agent in &spec.agents {
        changes.extend(extra_panes(&agent.name, world));
        if let Some(c) = diff_agent(agent, world) {
            changes.push(c);
        } else if !world.agents.get(&agent.name).is_some_and(|a| a.state_dir) {
            changes.push(change(
                &agent.name,
                Action::InitState,
                "state directory is missing".into(),
            ));
        }
    }

    if let Some(exe) = &options.hooks_exe {
        for agent in &spec.agents {
            let paths = hook_paths(Some(&agent.workdir), world.agents.get(&agent.name));
            changes.extend(hook_changes(
                spec,
                &agent.name,
                Some(agent),
                &paths,
                exe,
                world,
            ));
        }
        if options.prune {
            for (name, obs) in &world.agents {
                if spec.agent(name).is_none() {
                    let workdir = obs.started.as_ref().map(|s| s.workdir.as_path());
                    let paths = hook_paths(workdir, Some(obs));
                    changes.extend(hook_changes(spec, name, None, &paths, exe, world));
                }
            }
        }
    }

    let mut unmanaged = Vec::new();
    for (name, pane) in world.running_agents() {
        if spec.agent(name).is_some() {
            continue;
        }
        if options.prune {
            changes.push(change(
                name,
                Action::Prune {
                    pane: pane.id.clone(),
                },
                "not declared in phoenix.toml".into(),
            ));
        } else {
            unmanaged.push(Unmanaged {
                agent: name.to_string(),
                pane: pane.id.clone(),
            });
        }
    }

    let attention = spec
        .agents
        .iter()
        .filter(|a| a.enabled)
        .filter_map(|a| {
            let changed = |stop_only: bool| {
                changes.iter().any(|c| {
                    c.agent == a.name && (!stop_only || matches!(c.action, Action::Stop { .. }))
                })
            };
            // A stopped agent is held back even while its hook files change under it.
            if world.agents.get(&a.name).is_some_and(|o| o.stopped) {
                if changed(true) {
                    return None;
                }
                return Some(Attention {
                    agent: a.name.clone(),
                    pane: world.pane_of(&a.name).map(|p| p.id.clone()).unwrap_or_default(),
                    state: "stopped",
                    hint: format!(
                        "stopped on purpose with `phoenix stop`: start it again with `phoenix start {}`",
                        a.name
                    ),
                });
            }
            if changed(false) {
                return None;
            }
            let pane = world.pane_of(&a.name).filter(|p| !p.dead)?;
            let (state, hint) = match pane.phase.as_deref()? {
                "safe" => (
                    "safe-mode",
                    format!(
                        "stopped until a person acts: see why with `phoenix status {0}`, start it again with `phoenix restart {0}`",
                        a.name
                    ),
                ),
                "cooldown" => (
                    "cooldown",
                    "restarting after a crash: its wrapper starts it again when the cooldown ends"
                        .to_string(),
                ),
                _ => return None,
            };
            Some(Attention {
                agent: a.name.clone(),
                pane: pane.id.clone(),
                state,
                hint,
            })
        })
        .collect();

    let position = |name: &str| {
        spec.agents
            .iter()
            .position(|a| a.name == name)
            .unwrap_or(usize::MAX)
    };
    changes.sort_by(|a, b| {
        (a.action.order(), position(&a.agent), &a.agent).cmp(&(
            b.action.order(),
            position(&b.agent),
            &b.agent,
        ))
    });
    Plan {
        format_version: FORMAT_VERSION,
        changes,
        unmanaged,
        attention,
    }
}

/// Every hook file that may hold phoenix entries for an agent: the three CLIs' files in its
/// workdir and the files `apply` recorded installing (an old workdir, another CLI).
fn hook_paths(workdir: Option<&Path>, obs: Option<&AgentObs>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = workdir
        .into_iter()
        .flat_map(|w| {
            hook_config::HOOKED
                .into_iter()
                .filter_map(move |cli| hook_config::path_in(cli, w))
        })
        .collect();
    for p in obs.into_iter().flat_map(|o| &o.installed_hooks) {
        if !paths.contains(p) {
            paths.push(p.clone());
        }
    }
    paths
}

/// Hook files that differ from what they should hold for agent `name`: the file of its own
/// CLI in its workdir gets phoenix's entries, every other file loses them (`agent` is `None`
/// for an agent being pruned).
fn hook_changes(
    spec: &Spec,
    name: &str,
    agent: Option<&AgentSpec>,
    paths: &[PathBuf],
    exe: &Path,
    world: &World,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for path in paths {
        let Some(cli) = hook_config::cli_of(path) else {
            continue;
        };
        let label = hook_config::relative_path(cli).unwrap_or_default();
        let own = agent.filter(|a| {
            a.cli == cli && hook_config::path_in(cli, &a.workdir).as_ref() == Some(path)
        });
        let desired = own.and_then(|a| Target::new(exe, &spec.file, a).desired());
        let existing = match world.hook_files.get(path) {
            Some(FileObs::Text(text)) => Some(text.as_str()),
            Some(FileObs::Unreadable(e)) => {
                if desired.is_some() {
                    changes.push(change(
                        name,
                        Action::InstallHooks {
                            path: path.clone(),
                            cli,
                            create: false,
                            diff: String::new(),
                        },
                        format!("cannot read `{label}` ({e}); fix its permissions"),
                    ));
                }
                continue;
            }
            Some(FileObs::Missing) | None => None,
        };
        let Some(file_change) = hook_config::plan_file(label, existing, name, desired.as_ref())
        else {
            continue;
        };
        let had_entries = existing.is_some_and(|t| hook_config::has_agent_entries(t, name));
        let path = path.clone();
        let (action, reason) = match file_change {
            FileChange::Write { create, diff } if desired.is_some() => (
                Action::InstallHooks {
                    path,
                    cli,
                    create,
                    diff,
                },
                if create {
                    format!("`{label}` does not exist yet")
                } else if had_entries {
                    format!("phoenix's hooks in `{label}` are out of date")
                } else {
                    format!("`{label}` has no phoenix hooks yet")
                },
            ),
            FileChange::Write { diff, .. } | FileChange::Delete { diff } => (
                Action::RemoveHooks { path, diff },
                match agent {
                    None => "not declared in phoenix.toml".to_string(),
                    Some(a) if a.cli != cli => format!("the agent uses cli `{}` now", a.cli),
                    Some(_) => "the agent's workdir moved".to_string(),
                },
            ),
            FileChange::Unmergeable { problem } => (
                Action::InstallHooks {
                    path,
                    cli,
                    create: false,
                    diff: String::new(),
                },
                format!("cannot merge into `{label}`: it {problem}"),
            ),
        };
        changes.push(change(name, action, reason));
    }
    changes
}

/// One agent, one pane: any other pane tagged for it goes (the oldest live one stays).
fn extra_panes(name: &str, world: &World) -> Vec<Change> {
    let Some(keep) = world.pane_of(name) else {
        return Vec::new();
    };
    world
        .extra_panes(name)
        .map(|extra| {
            change(
                name,
                Action::RemoveExtra {
                    pane: extra.id.clone(),
                    keep: keep.id.clone(),
                },
                format!(
                    "a second pane for the agent, which runs in {}{}",
                    keep.id,
                    if extra.dead {
                        " (this one is dead)"
                    } else {
                        ""
                    }
                ),
            )
        })
        .collect()
}

fn diff_agent(agent: &AgentSpec, world: &World) -> Option<Change> {
    let name = agent.name.as_str();
    let pane = world.pane_of(name);
    let obs = world.agents.get(name);
    let clean_exit = obs.is_some_and(|o| o.clean_exit);

    if !agent.enabled {
        return pane.map(|p| {
            change(
                name,
                Action::Stop { pane: p.id.clone() },
                "disabled in phoenix.toml".into(),
            )
        });
    }
    if obs.is_some_and(|o| o.stopped) {
        return pane.map(|p| {
            change(
                name,
                Action::Stop { pane: p.id.clone() },
                format!("stopped with `phoenix stop` (`phoenix start {name}` starts it again)"),
            )
        });
    }

    let Some(pane) = pane else {
        if clean_exit {
            return None; // It stopped on purpose; `phoenix restart` clears the marker.
        }
        let reason = if world.server_running {
            format!(
                "not running (no window `{}:{}`)",
                agent.session, agent.window
            )
        } else {
            format!("not running (no {} yet)", world.location())
        };
        return Some(change(name, Action::Start, reason));
    };

    let launch = agent.launch();
    let started = obs.and_then(|o| o.started.as_ref());
    // An agent an older phoenix started with `./` in its workdir runs where it should.
    let started_untidy = started.is_some_and(|before| {
        pane.fingerprint.as_deref() == Some(before.fingerprint().as_str())
            && before.tidied() == launch
    });
    if pane.fingerprint.as_deref() != Some(launch.fingerprint().as_str()) && !started_untidy {
        let changed = started
            .map(|before| before.diff(&launch))
            .unwrap_or_default();
        let fields: Vec<&str> = changed.iter().map(|c| c.field.as_str()).collect();
        let reason = if fields.is_empty() {
            "started with a different spec".to_string()
        } else {
            format!("spec changed: {}", fields.join(", "))
        };
        return Some(change(
            name,
            Action::Replace {
                pane: pane.id.clone(),
                changed,
            },
            reason,
        ));
    }

    if clean_exit {
        return None;
    }
    if pane.dead {
        let status = match (pane.dead_signal, pane.dead_status) {
            (Some(sig), _) => format!(" (killed by signal {sig})"),
            (None, Some(code)) => format!(" (exit status {code})"),
            (None, None) => String::new(),
        };
        return Some(change(
            name,
            Action::Restart {
                pane: pane.id.clone(),
            },
            format!("pane {} is dead{status}", pane.id),
        ));
    }
    if pane.agent_process().is_none() && !wrapper_is_waiting(pane, world.observed_at) {
        return Some(change(
            name,
            Action::Restart {
                pane: pane.id.clone(),
            },
            format!(
                "pane {} exists but no `{}` process under it",
                pane.id,
                agent.program()
            ),
        ));
    }
    None
}

/// How long a freshly started pane may take to start its agent before it counts as missing.
pub const STARTUP_GRACE_SECS: i64 = 10;

/// The wrapper deliberately has no child while it starts, cools down or sits in safe mode.
fn wrapper_is_waiting(pane: &PaneObs, now: i64) -> bool {
    let just_started = pane.started.is_some_and(|t| now - t < STARTUP_GRACE_SECS);
    just_started || matches!(pane.phase.as_deref(), Some("cooldown" | "safe"))
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() && self.unmanaged.is_empty() && self.attention.is_empty() {
            writeln!(f, "No changes. The fleet matches phoenix.toml.")?;
        } else if self.changes.is_empty() {
            writeln!(f, "No changes to apply.")?;
        } else {
            writeln!(f, "phoenix will perform these actions:\n")?;
            for c in &self.changes {
                writeln!(f, "{}", render_change(c))?;
            }
            let s = self.summary();
            let mut line = format!(
                "\nPlan: {} to start, {} to restart, {} to replace, {} to remove",
                s.start, s.restart, s.replace, s.remove
            );
            if s.stop > 0 {
                let _ = write!(line, ", {} to stop", s.stop);
            }
            if s.init > 0 {
                let _ = write!(line, ", {} state dir{} to create", s.init, plural(s.init));
            }
            if s.hooks > 0 {
                let _ = write!(line, ", {} hook file{} to update", s.hooks, plural(s.hooks));
            }
            writeln!(f, "{line}.")?;
        }
        if !self.unmanaged.is_empty() {
            writeln!(
                f,
                "\nRunning but not in phoenix.toml (use --prune to remove):"
            )?;
            for u in &self.unmanaged {
                writeln!(f, "  ? agent `{}` in pane {}", u.agent, u.pane)?;
            }
        }
        if !self.attention.is_empty() {
            writeln!(f, "\nDeclared but held back by phoenix (not changes):")?;
            for a in &self.attention {
                let pane = if a.pane.is_empty() {
                    String::new()
                } else {
                    format!(" in pane {}", a.pane)
                };
                writeln!(f, "  ! agent `{}`{pane}: {}; {}", a.agent, a.state, a.hint)?;
            }
        }
        Ok(())
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn render_change(c: &Change) -> String {
    let what = match &c.action {
        Action::InitState => "create state dir".to_string(),
        Action::Start => "start".to_string(),
        Action::Restart { pane } => format!("restart in {pane}"),
        Action::Replace { pane, .. } => format!("replace in {pane}"),
        Action::Stop { pane } => format!("stop {pane}"),
        Action::Prune { pane } | Action::RemoveExtra { pane, .. } => format!("remove {pane}"),
        Action::InstallHooks { path, .. } => format!("install hooks in {}", path.display()),
        Action::RemoveHooks { path, .. } => {
            format!("remove phoenix hooks from {}", path.display())
        }
    };
    let mut out = format!("{:>5} agent `{}`: {what} — {}", c.symbol, c.agent, c.reason);
    if let Action::InstallHooks { diff, .. } | Action::RemoveHooks { diff, .. } = &c.action {
        for line in diff.lines() {
            let _ = write!(out, "\n          {line}");
        }
    }
    if let Action::Replace { changed, .. } = &c.action {
        for fc in changed {
            let _ = write!(
                out,
                "\n          {}: {} → {}",
                fc.field, fc.before, fc.after
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{LoadOptions, parse};
    use crate::world::{AgentObs, ProcInfo};

    fn spec(src: &str) -> Spec {
        parse(
            src,
            std::path::Path::new("/fleet/phoenix.toml"),
            LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap()
    }

    fn two_agents() -> Spec {
        spec(
            "[[agent]]\nname = \"a\"\ncommand = \"claude\"\n[[agent]]\nname = \"b\"\ncommand = \"x\"\n",
        )
    }

    fn pane(agent: &str, fp: &str, alive_child: bool) -> PaneObs {
        PaneObs {
            id: format!("%{}", agent.len()),
            session: "phoenix".into(),
            window: agent.into(),
            pid: 100,
            dead: false,
            dead_status: None,
            dead_signal: None,
            agent: Some(agent.into()),
            fleet: None,
            fingerprint: Some(fp.into()),
            phase: None,
            started: Some(0),
            processes: if alive_child {
                vec![ProcInfo {
                    pid: 101,
                    ppid: 100,
                    comm: "claude".into(),
                    started: 0,
                    pgid: 101,
                }]
            } else {
                vec![]
            },
        }
    }

    fn world_with(spec: &Spec, panes: Vec<PaneObs>) -> World {
        World {
            observed_at: 1_000_000,
            server_running: true,
            location: String::new(),
            hook_files: Default::default(),
            panes,
            agents: spec
                .agents
                .iter()
                .map(|a| {
                    (
                        a.name.clone(),
                        AgentObs {
                            state_dir: true,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn empty_world_starts_everything() {
        let s = two_agents();
        let plan = diff(&s, &World::default(), &PlanOptions::default());
        assert_eq!(plan.summary().start, 2);
        assert!(plan.to_string().contains("Plan: 2 to start, 0 to restart"));
    }

    #[test]
    fn converged_world_has_nothing_to_do() {
        let s = two_agents();
        let panes = s
            .agents
            .iter()
            .map(|a| pane(&a.name, &a.launch().fingerprint(), true))
            .collect();
        let plan = diff(&s, &world_with(&s, panes), &PlanOptions::default());
        assert!(plan.is_empty(), "{plan}");
    }

    #[test]
    fn missing_process_is_a_restart_with_reason() {
        let s = two_agents();
        let a = &s.agents[0];
        let plan = diff(
            &s,
            &world_with(&s, vec![pane("a", &a.launch().fingerprint(), false)]),
            &PlanOptions::default(),
        );
        let c = plan.changes.iter().find(|c| c.agent == "a").unwrap();
        assert_eq!(c.symbol, "~");
        assert!(
            c.reason.contains("no `claude` process under it"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn a_second_pane_for_an_agent_is_removed_and_the_oldest_live_one_stays() {
        let s = two_agents();
        let fp = |i: usize| s.agents[i].launch().fingerprint();
        let with_id = |mut p: PaneObs, id: &str| {
            p.id = id.into();
            p
        };
        let mut dead_first = with_id(pane("a", &fp(0), true), "%1");
        dead_first.dead = true;
        let panes = vec![
            with_id(pane("a", &fp(0), true), "%9"),
            dead_first,
            with_id(pane("a", &fp(0), true), "%4"),
            with_id(pane("b", &fp(1), true), "%2"),
        ];
        let world = world_with(&s, panes);
        assert_eq!(world.pane_of("a").unwrap().id, "%4");
        let plan = diff(&s, &world, &PlanOptions::default());
        let removed: Vec<(&str, &str)> = plan
            .changes
            .iter()
            .map(|c| match &c.action {
                Action::RemoveExtra { pane, keep } => (pane.as_str(), keep.as_str()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(removed, [("%9", "%4"), ("%1", "%4")]);
        assert_eq!(plan.summary().remove, 2);
        let text = plan.to_string();
        assert!(
            text.contains("- agent `a`: remove %9 — a second pane for the agent, which runs in %4"),
            "{text}"
        );
    }

    #[test]
    fn a_stopped_agent_is_neither_started_nor_left_running() {
        let s = two_agents();
        let fp = |i: usize| s.agents[i].launch().fingerprint();
        let mut world = world_with(&s, vec![pane("b", &fp(1), false)]);
        for name in ["a", "b"] {
            let obs = world.agents.entry(name.into()).or_default();
            obs.state_dir = true;
            obs.stopped = true;
        }
        let plan = diff(&s, &world, &PlanOptions::default());
        let actions: Vec<_> = plan
            .changes
            .iter()
            .map(|c| (&*c.agent, c.action.symbol()))
            .collect();
        assert_eq!(actions, [("b", "-")], "{plan}");
        let held: Vec<_> = plan
            .attention
            .iter()
            .map(|a| (&*a.agent, a.state))
            .collect();
        assert_eq!(held, [("a", "stopped")]);
        let text = plan.to_string();
        assert!(text.contains("`phoenix start a`"), "{text}");
        assert!(text.contains("stopped with `phoenix stop`"), "{text}");
    }

    #[test]
    fn held_back_agents_are_listed_but_not_counted_as_changes() {
        let s = two_agents();
        let fp = |i: usize| s.agents[i].launch().fingerprint();
        let mut a = pane("a", &fp(0), false);
        a.phase = Some("safe".into());
        let mut b = pane("b", &fp(1), false);
        b.phase = Some("cooldown".into());
        let plan = diff(&s, &world_with(&s, vec![a, b]), &PlanOptions::default());
        assert!(plan.is_empty(), "{plan}");
        let states: Vec<_> = plan
            .attention
            .iter()
            .map(|a| (&*a.agent, a.state))
            .collect();
        assert_eq!(states, [("a", "safe-mode"), ("b", "cooldown")]);
        let text = plan.to_string();
        assert!(text.starts_with("No changes to apply."), "{text}");
        assert!(text.contains("`phoenix restart a`"), "{text}");
        assert!(!text.contains("matches phoenix.toml"), "{text}");
        // Undeclared panes are no converged fleet either.
        let plan = diff(
            &s,
            &world_with(
                &s,
                vec![
                    pane("a", &fp(0), true),
                    pane("b", &fp(1), true),
                    pane("old", "x", true),
                ],
            ),
            &PlanOptions::default(),
        );
        assert!(plan.is_empty() && plan.attention.is_empty());
        assert!(
            plan.to_string().starts_with("No changes to apply."),
            "{plan}"
        );
    }

    #[test]
    fn waiting_wrapper_is_left_alone() {
        let s = two_agents();
        let mut p = pane("a", &s.agents[0].launch().fingerprint(), false);
        p.phase = Some("cooldown".into());
        let plan = diff(&s, &world_with(&s, vec![p]), &PlanOptions::default());
        assert!(plan.changes.iter().all(|c| c.agent != "a"));
    }

    #[test]
    fn dead_pane_with_clean_exit_is_left_alone() {
        let s = two_agents();
        let mut p = pane("a", &s.agents[0].launch().fingerprint(), false);
        p.dead = true;
        let mut w = world_with(&s, vec![p]);
        w.agents.get_mut("a").unwrap().clean_exit = true;
        let plan = diff(&s, &w, &PlanOptions::default());
        assert!(plan.changes.iter().all(|c| c.agent != "a"), "{plan}");
    }

    #[test]
    fn drift_is_a_replacement_listing_fields() {
        let s = two_agents();
        let mut old = s.agents[0].launch();
        old.command = "claude --model opus".into();
        let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
        w.agents.get_mut("a").unwrap().started = Some(old);
        let plan = diff(&s, &w, &PlanOptions::default());
        let c = plan.changes.iter().find(|c| c.agent == "a").unwrap();
        assert_eq!(c.symbol, "-/+");
        assert!(c.reason.contains("command"));
        assert!(
            plan.to_string()
                .contains("command: \"claude --model opus\" → \"claude\"")
        );
    }

    #[test]
    fn a_workdir_recorded_with_dot_steps_is_not_drift() {
        let s = two_agents();
        let mut old = s.agents[0].launch();
        old.workdir = old.workdir.join("sub/..").join(".");
        assert_ne!(old.fingerprint(), s.agents[0].launch().fingerprint());
        let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
        w.agents.get_mut("a").unwrap().started = Some(old.clone());
        let plan = diff(&s, &w, &PlanOptions::default());
        assert!(plan.changes.iter().all(|c| c.agent != "a"), "{plan}");
        // A real change of workdir still is.
        old.workdir = old.workdir.join("elsewhere");
        let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
        w.agents.get_mut("a").unwrap().started = Some(old);
        let plan = diff(&s, &w, &PlanOptions::default());
        assert!(
            plan.changes
                .iter()
                .any(|c| c.agent == "a" && c.symbol == "-/+"),
            "{plan}"
        );
    }

    #[test]
    fn drift_in_env_shows_which_variable_changed_but_not_its_value() {
        let s = two_agents();
        let mut old = s.agents[0].launch();
        old.env.insert("API_TOKEN".into(), "sk-old-secret".into());
        let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
        w.agents.get_mut("a").unwrap().started = Some(old);
        let text = diff(&s, &w, &PlanOptions::default()).to_string();
        assert!(text.contains("env: {\"API_TOKEN\":\"(hidden #"), "{text}");
        assert!(!text.contains("sk-old-secret"), "{text}");
    }

    #[test]
    fn undeclared_agents_are_only_removed_with_prune() {
        let s = two_agents();
        let w = world_with(&s, vec![pane("old", "x", true)]);
        let plan = diff(&s, &w, &PlanOptions::default());
        assert!(plan.changes.iter().all(|c| c.agent != "old"));
        assert_eq!(plan.unmanaged.len(), 1);
        let plan = diff(
            &s,
            &w,
            &PlanOptions {
                prune: true,
                ..Default::default()
            },
        );
        let c = plan.changes.iter().find(|c| c.agent == "old").unwrap();
        assert!(matches!(c.action, Action::Prune { .. }));
    }

    #[test]
    fn json_has_format_version_and_summary() {
        let s = two_agents();
        let v = diff(&s, &World::default(), &PlanOptions::default()).to_json();
        assert_eq!(v["format_version"], 1);
        assert_eq!(v["summary"]["start"], 2);
        assert_eq!(v["changes"][0]["action"]["type"], "start");
    }

    fn with_hooks(prune: bool) -> PlanOptions {
        PlanOptions {
            prune,
            hooks_exe: Some("/bin/phoenix".into()),
        }
    }

    fn claude_agent() -> Spec {
        spec("[[agent]]\nname = \"a\"\ncli = \"claude\"\nworkdir = \"/w\"\n")
    }

    #[test]
    fn hook_files_are_planned_before_starts_and_only_with_an_exe() {
        let s = claude_agent();
        let plan = diff(&s, &World::default(), &PlanOptions::default());
        assert_eq!(plan.summary().hooks, 0);
        let plan = diff(&s, &World::default(), &with_hooks(false));
        assert_eq!(plan.summary().hooks, 1);
        let first = &plan.changes[0];
        assert_eq!(first.symbol, "+");
        let Action::InstallHooks {
            path,
            cli,
            create,
            diff,
        } = &first.action
        else {
            panic!("{plan}");
        };
        assert_eq!(path, Path::new("/w/.claude/settings.json"));
        assert_eq!((*cli, *create), (Cli::Claude, true));
        assert!(diff.contains("--agent a --cli claude"), "{diff}");
        assert!(matches!(plan.changes[1].action, Action::Start));
        assert!(plan.to_string().contains("1 hook file to update"), "{plan}");
    }

    #[test]
    fn installed_hooks_are_converged() {
        let s = claude_agent();
        let desired = Target::new(Path::new("/bin/phoenix"), &s.file, &s.agents[0])
            .desired()
            .unwrap();
        let mut w = World::default();
        w.hook_files.insert(
            "/w/.claude/settings.json".into(),
            FileObs::Text(hook_config::pretty(&desired)),
        );
        let plan = diff(&s, &w, &with_hooks(false));
        assert_eq!(plan.summary().hooks, 0, "{plan}");
    }

    #[test]
    fn a_pruned_agent_loses_only_its_hook_entries() {
        let s = claude_agent();
        let old = spec("[[agent]]\nname = \"old\"\ncli = \"claude\"\nworkdir = \"/o\"\n");
        let theirs = Target::new(Path::new("/bin/phoenix"), &old.file, &old.agents[0])
            .desired()
            .unwrap();
        let path = PathBuf::from("/o/.claude/settings.json");
        let mut text = hook_config::merge(
            Some(r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}}"#),
            "old",
            Some(&theirs),
        )
        .unwrap()
        .unwrap();
        text["model"] = "opus".into();
        let mut w = World::default();
        w.hook_files
            .insert(path.clone(), FileObs::Text(hook_config::pretty(&text)));
        w.agents.insert(
            "old".into(),
            AgentObs {
                state_dir: true,
                installed_hooks: vec![path.clone()],
                ..Default::default()
            },
        );
        let plan = diff(&s, &w, &with_hooks(false));
        assert!(plan.changes.iter().all(|c| c.agent != "old"), "{plan}");
        let plan = diff(&s, &w, &with_hooks(true));
        let c = plan.changes.iter().find(|c| c.agent == "old").unwrap();
        assert_eq!(c.symbol, "-");
        let Action::RemoveHooks { diff, .. } = &c.action else {
            panic!("{plan}");
        };
        assert!(
            diff.contains("-            \"command\": \"/bin/phoenix"),
            "{diff}"
        );
        assert!(
            !diff.contains("-            \"command\": \"echo mine"),
            "{diff}"
        );
    }
}
