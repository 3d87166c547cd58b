//! The diff itself: what each declared agent needs, what runs undeclared, who is held back.

use std::collections::{HashMap, HashSet};

use crate::spec::{AgentSpec, Spec};
use crate::world::{AgentObs, PaneObs, World};

use super::{
    Action, Attention, Change, FORMAT_VERSION, Plan, PlanOptions, Unmanaged, change, hooks,
    worktree,
};

/// Compute what must change for `world` to match `spec`. Pure: no I/O.
pub fn diff(spec: &Spec, world: &World, options: &PlanOptions) -> Plan {
    // The agents of an `[[agent_set]]` past its `max` wait: planned as if not declared yet
    // (no worktree, no hooks, no start), and listed as held back.
    let waiting = waiting(spec, world);
    if waiting.is_empty() {
        return diff_active(spec, world, options);
    }
    let mut active = spec.clone();
    active
        .agents
        .retain(|a| !waiting.contains_key(a.name.as_str()));
    let mut plan = diff_active(&active, world, options);
    for agent in &spec.agents {
        if let Some(hint) = waiting.get(agent.name.as_str()) {
            plan.attention.push(Attention {
                agent: agent.name.clone(),
                pane: String::new(),
                state: "waiting",
                hint: hint.clone(),
            });
        }
    }
    plan
}

/// The agents each `[[agent_set]]` with a `max` holds back, and why: those that run keep their
/// places (a new item early in the source's order never displaces one at work), the free
/// places go in the source's order.
fn waiting<'a>(spec: &'a Spec, world: &World) -> HashMap<&'a str, String> {
    let mut waiting = HashMap::new();
    for set in &spec.agent_sets {
        let Some(max) = set.max else {
            continue;
        };
        let members: Vec<&AgentSpec> = spec
            .agents
            .iter()
            .filter(|a| a.enabled && a.origin.as_ref().is_some_and(|o| o.set == set.name))
            .collect();
        let running = |a: &AgentSpec| world.pane_of(&a.name).is_some();
        let mut places =
            (max as usize).saturating_sub(members.iter().filter(|a| running(a)).count());
        for agent in members.into_iter().filter(|a| !running(a)) {
            if places > 0 {
                places -= 1;
                continue;
            }
            waiting.insert(
                agent.name.as_str(),
                format!(
                    "agent_set `{}` runs at most {max} at once: it starts when one of them retires",
                    set.name
                ),
            );
        }
    }
    waiting
}

fn diff_active(spec: &Spec, world: &World, options: &PlanOptions) -> Plan {
    let mut changes = declared_changes(spec, world);
    if let Some(exe) = &options.hooks_exe {
        changes.extend(hooks::fleet_hook_changes(spec, world, exe, options.prune));
    }
    let (pruned, unmanaged) = undeclared(spec, world, options.prune);
    changes.extend(pruned);
    let acted = ActedOn::of(&changes);
    let mut attention: Vec<Attention> = spec
        .agents
        .iter()
        .filter(|a| a.enabled)
        .filter_map(|a| held_back(a, world, &acted))
        .collect();
    let worktrees = worktree::plan(spec, world, options);
    add_worktree_changes(&mut changes, worktrees.changes);
    attention.extend(worktrees.attention);
    sort_for_apply(spec, &mut changes);
    Plan {
        format_version: FORMAT_VERSION,
        changes,
        unmanaged,
        attention,
        kept_worktrees: worktrees.kept,
        cli_versions: spec
            .agents
            .iter()
            .filter_map(|a| {
                let installed = world.cli_versions.get(&a.name)?;
                Some(crate::world::cli_version::report(a, installed))
            })
            .collect(),
        sandboxes: spec
            .agents
            .iter()
            .filter_map(|a| world.sandboxes.get(&a.name).cloned())
            .collect(),
    }
}

/// The worktree changes, less a restart for an agent whose own diff already starts, restarts,
/// replaces or stops it.
fn add_worktree_changes(changes: &mut Vec<Change>, worktree_changes: Vec<Change>) {
    // A set, not a scan of `changes` per worktree change: a plan of 50,000 agents has as many
    // changes (issue 34: the scans made such a plan take minutes).
    let acted_on: HashSet<String> = changes
        .iter()
        .filter(|c| {
            matches!(
                c.action,
                Action::Start
                    | Action::Restart { .. }
                    | Action::Replace { .. }
                    | Action::Stop { .. }
                    | Action::Prune { .. }
            )
        })
        .map(|c| c.agent.clone())
        .collect();
    for c in worktree_changes {
        if matches!(c.action, Action::Restart { .. }) && acted_on.contains(&c.agent) {
            continue;
        }
        changes.push(c);
    }
}

/// Which agents the plan's changes act on, and which of them it stops: asked once per
/// declared agent, so looked up rather than scanned.
struct ActedOn<'a> {
    any: HashSet<&'a str>,
    stopped: HashSet<&'a str>,
}

impl<'a> ActedOn<'a> {
    fn of(changes: &'a [Change]) -> Self {
        let mut acted = ActedOn {
            any: HashSet::new(),
            stopped: HashSet::new(),
        };
        for c in changes {
            acted.any.insert(&c.agent);
            if matches!(c.action, Action::Stop { .. }) {
                acted.stopped.insert(&c.agent);
            }
        }
        acted
    }
}

/// Per declared agent: its extra panes, then what it needs itself (or only its state dir).
fn declared_changes(spec: &Spec, world: &World) -> Vec<Change> {
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
    changes
}

/// Agents that run but are not declared: pruned with `--prune`, otherwise only listed.
fn undeclared(spec: &Spec, world: &World, prune: bool) -> (Vec<Change>, Vec<Unmanaged>) {
    let mut pruned = Vec::new();
    let mut unmanaged = Vec::new();
    let declared: HashSet<&str> = spec.agents.iter().map(|a| a.name.as_str()).collect();
    let retired: HashMap<&str, &crate::spec::intake::Retired> =
        spec.retired.iter().map(|r| (r.agent.as_str(), r)).collect();
    for (name, pane) in world.running_agents() {
        if declared.contains(name) {
            continue;
        }
        // Its item left the source: stopped whether pruning or not, never started again.
        if let Some(r) = retired.get(name) {
            pruned.push(change(
                name,
                Action::Retire {
                    pane: pane.id.clone(),
                },
                format!(
                    "item #{} left the source of agent_set \"{}\": retired (a handoff is saved, its worktree kept)",
                    r.key, r.set
                ),
            ));
            continue;
        }
        // A stale copy of an agent the operator moved away stops whether pruning or not.
        if let Some(fence) = world.agents.get(name).and_then(|o| o.fenced.as_ref()) {
            pruned.push(change(
                name,
                Action::Stop {
                    pane: pane.id.clone(),
                },
                format!("{}: this copy is stale", fence.describe()),
            ));
        } else if prune {
            pruned.push(change(
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
    (pruned, unmanaged)
}

/// A declared, enabled agent that no change acts on but that is not running on purpose: stopped
/// by `phoenix stop`, being restarted by someone, or its wrapper holds it in safe mode or
/// cooldown.
fn held_back(a: &AgentSpec, world: &World, acted: &ActedOn) -> Option<Attention> {
    let changed = |stop_only: bool| {
        let name = a.name.as_str();
        if stop_only {
            acted.stopped.contains(name)
        } else {
            acted.any.contains(name)
        }
    };
    if let Some(fence) = world.agents.get(&a.name).and_then(|o| o.fenced.as_ref()) {
        if changed(true) {
            return None;
        }
        return Some(Attention {
            agent: a.name.clone(),
            pane: String::new(),
            state: "moved",
            hint: format!(
                "{}: it runs there, not here (`phoenix move` on the operator's machine places it)",
                fence.describe()
            ),
        });
    }
    let pane_id = || {
        world
            .pane_of(&a.name)
            .map(|p| p.id.clone())
            .unwrap_or_default()
    };
    // A stopped agent is held back even while its hook files change under it.
    if world.agents.get(&a.name).is_some_and(|o| o.stopped) {
        if changed(true) {
            return None;
        }
        return Some(Attention {
            agent: a.name.clone(),
            pane: pane_id(),
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
    if let Some(claim) = world
        .agents
        .get(&a.name)
        .and_then(|o| o.restarting.as_ref())
    {
        return Some(Attention {
            agent: a.name.clone(),
            pane: pane_id(),
            state: "restarting",
            hint: format!("{}: left to it until its new CLI runs", claim.describe()),
        });
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
}

/// The order apply runs changes in: by kind (hooks before starts), then as declared. The sort
/// is stable, so changes of one kind for one agent keep the order they were found in.
fn sort_for_apply(spec: &Spec, changes: &mut [Change]) {
    let declared: HashMap<&str, usize> = spec
        .agents
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name.as_str(), i))
        .collect();
    let position = |name: &str| declared.get(name).copied().unwrap_or(usize::MAX);
    changes.sort_by(|a, b| {
        (a.action.order(), position(&a.agent), &a.agent).cmp(&(
            b.action.order(),
            position(&b.agent),
            &b.agent,
        ))
    });
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

/// What one declared agent needs: stop, start, replace or restart (or nothing).
fn diff_agent(agent: &AgentSpec, world: &World) -> Option<Change> {
    let name = agent.name.as_str();
    let pane = world.pane_of(name);
    let obs = world.agents.get(name);
    let clean_exit = obs.is_some_and(|o| o.clean_exit);
    let stop =
        |reason: String| pane.map(|p| change(name, Action::Stop { pane: p.id.clone() }, reason));

    if !agent.enabled {
        return stop("disabled in phoenix.toml".into());
    }
    if let Some(fence) = obs.and_then(|o| o.fenced.as_ref()) {
        return stop(format!("{}: this copy is stale", fence.describe()));
    }
    if obs.is_some_and(|o| o.stopped) {
        return stop(format!(
            "stopped with `phoenix stop` (`phoenix start {name}` starts it again)"
        ));
    }
    // Someone restarts it right now (a person, the daemon, the watchdog): its pane without a
    // CLI, or no pane yet, is that restart under way. Whatever else it needs waits for it.
    // Only a pane that died once its owner was done is a start that failed.
    if let Some(claim) = obs.and_then(|o| o.restarting.as_ref())
        && (claim.acting || !pane.is_some_and(|p| p.dead))
    {
        return None;
    }
    let Some(pane) = pane else {
        if clean_exit {
            return None; // It stopped on purpose; `phoenix restart` clears the marker.
        }
        let mut reason = not_running(agent, world);
        if let Some(origin) = &agent.origin {
            reason = format!("{reason} (from {})", origin.describe());
        }
        return Some(change(name, Action::Start, reason));
    };
    if let Some(replace) = drift(agent, pane, obs) {
        return Some(replace);
    }
    if clean_exit {
        return None;
    }
    let reason = why_restart(agent, pane, world.observed_at)?;
    Some(change(
        name,
        Action::Restart {
            pane: pane.id.clone(),
        },
        reason,
    ))
}

fn not_running(agent: &AgentSpec, world: &World) -> String {
    if world.server_running {
        format!(
            "not running (no window `{}:{}`)",
            agent.session, agent.window
        )
    } else {
        format!("not running (no {} yet)", world.location())
    }
}

/// A pane started from another spec than the declared one is replaced, listing the fields.
fn drift(agent: &AgentSpec, pane: &PaneObs, obs: Option<&AgentObs>) -> Option<Change> {
    let launch = agent.launch();
    let started = obs.and_then(|o| o.started.as_ref());
    // An agent an older phoenix started with `./` in its workdir runs where it should.
    let started_untidy = started.is_some_and(|before| {
        pane.fingerprint.as_deref() == Some(before.fingerprint().as_str())
            && before.tidied() == launch
    });
    if pane.fingerprint.as_deref() == Some(launch.fingerprint().as_str()) || started_untidy {
        return None;
    }
    let changed = started
        .map(|before| before.diff(&launch))
        .unwrap_or_default();
    let fields: Vec<&str> = changed.iter().map(|c| c.field.as_str()).collect();
    let reason = if fields.is_empty() {
        "started with a different spec".to_string()
    } else {
        format!("spec changed: {}", fields.join(", "))
    };
    Some(change(
        &agent.name,
        Action::Replace {
            pane: pane.id.clone(),
            changed,
        },
        reason,
    ))
}

/// Why a pane of the right spec needs a restart: it is dead, or its agent process is gone.
fn why_restart(agent: &AgentSpec, pane: &PaneObs, now: i64) -> Option<String> {
    if pane.dead {
        let status = match (pane.dead_signal, pane.dead_status) {
            (Some(sig), _) => format!(" (killed by signal {sig})"),
            (None, Some(code)) => format!(" (exit status {code})"),
            (None, None) => String::new(),
        };
        return Some(format!("pane {} is dead{status}", pane.id));
    }
    if pane.agent_process().is_none() && !wrapper_is_waiting(pane, now) {
        return Some(format!(
            "pane {} exists but no `{}` process under it",
            pane.id,
            agent.program()
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
