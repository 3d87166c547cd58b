//! The lifecycle verbs: `down`, `stop`, `start`, `restart` of several agents, `attach`,
//! `apply AGENT…`'s targets and `service uninstall|status`.

use std::path::Path;

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::json;

use super::out;
use crate::apply::{Applier, ApplyReport};
use crate::context::FleetContext;
use crate::hosts::actions;
use crate::plan::{self, Action, Change, Plan, PlanOptions};
use crate::spec::{self, Spec};
use crate::state::lock::{FleetLock, LOCK_WAIT};
use crate::state::{self, FleetDir};

fn load(config: &Path) -> anyhow::Result<FleetContext> {
    Ok(FleetContext::new(config, spec::load(config)?))
}

fn tell_waiting(holder: &str) {
    eprintln!(
        "waiting for another phoenix ({holder}) to finish changing the fleet (up to {}s)…",
        LOCK_WAIT.as_secs()
    )
}

fn lock(ctx: &FleetContext, what: &str) -> anyhow::Result<FleetLock> {
    ctx.dir.ensure().with_context(|| {
        format!(
            "cannot create state dir `{}`",
            ctx.spec.fleet.state_dir.display()
        )
    })?;
    Ok(FleetLock::acquire(&ctx.dir, what, LOCK_WAIT, tell_waiting)?)
}

/// The error for a name no agent of `spec` has: what was probably meant, and what there is.
pub(super) fn unknown_agent(spec: &Spec, name: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "no agent `{name}` in `{}` ({})",
        spec.file.display(),
        spec.declared_hint(name)
    )
}

/// The declared agents named on the command line, each once, in the order given; an unknown
/// name is an error that says what was meant.
pub fn declared(spec: &Spec, names: &[String]) -> anyhow::Result<Vec<String>> {
    let mut agents: Vec<String> = Vec::new();
    for name in names {
        if spec.agent(name).is_none() {
            return Err(unknown_agent(spec, name));
        }
        if !agents.contains(name) {
            agents.push(name.clone());
        }
    }
    Ok(agents)
}

/// Every agent `plan`/`apply` (of `targets`, or all) would start can run its command here:
/// else the plan stops before any hook file is written into a workdir, rather than leaving an
/// agent failing to spawn.
pub fn commands_exist(ctx: &FleetContext, targets: &[String]) -> anyhow::Result<()> {
    // Each program looked up once where it is looked up the same way (on the same PATH, or
    // the same path from the same workdir): a thousand agents often run a few programs.
    let mut found: std::collections::HashMap<(&str, &std::ffi::OsStr), bool> = Default::default();
    let problems: Vec<String> = ctx
        .spec
        .agents
        .iter()
        .filter(|a| a.enabled && (targets.is_empty() || targets.contains(&a.name)))
        .filter_map(|a| {
            let program = a.argv.first().map_or("", String::as_str);
            let place: &std::ffi::OsStr = if program.contains('/') {
                a.workdir.as_os_str()
            } else {
                a.env.get("PATH").map_or("".as_ref(), |p| p.as_ref())
            };
            let ok = *found
                .entry((program, place))
                .or_insert_with(|| a.command_problem().is_none());
            // A stopped agent is not started, so its missing program is no problem: asked
            // only of agents whose program is missing (a `stat` each otherwise).
            if ok || ctx.dir.agent(&a.name).has_marker(state::STOPPED) {
                None
            } else {
                a.command_problem()
            }
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    bail!(
        "{}\n  = hint: install the CLI, or fix `command` in {} (a path, or a program on PATH; \
         `phoenix doctor` checks them all); `phoenix apply AGENT…` applies the others",
        problems.join("\n       "),
        ctx.spec.file.display()
    )
}

/// `apply AGENT…`: only these agents' changes (Terraform's `-target`).
pub fn target(plan: &mut Plan, spec: &Spec, names: &[String]) -> anyhow::Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    plan.only(&declared(spec, names)?);
    Ok(())
}

fn stop_change(agent: &str, pane: &str, reason: &str) -> Change {
    let action = Action::Stop {
        pane: pane.to_string(),
    };
    Change {
        agent: agent.to_string(),
        symbol: action.symbol(),
        action,
        reason: reason.to_string(),
    }
}

fn applier(ctx: &FleetContext) -> anyhow::Result<Applier<'_>> {
    Ok(Applier {
        spec: &ctx.spec,
        runtime: ctx.runtime(),
        exe: crate::process::main_binary().context("cannot find the phoenix binary")?,
    })
}

#[derive(Debug, Serialize)]
struct AgentResult {
    agent: String,
    ok: bool,
    detail: String,
    /// A restart's report (`fresh`, `via`, `pane`, `pid`), where it restarted.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    restarted: Option<Restarted>,
}

/// What a restart did, in a row of `restart --json` (as the API's restart reports it).
#[derive(Debug, Serialize)]
struct Restarted {
    fresh: bool,
    via: String,
    pane: Option<String>,
    pid: Option<u32>,
}

/// Print per-agent results (text or `--json`); exit 1 if any failed.
fn finish(verb: &str, results: Vec<AgentResult>, extra: serde_json::Value, json: bool) -> i32 {
    let failed = results.iter().filter(|r| !r.ok).count();
    if json {
        let mut v = json!({"command": verb, "agents": results, "failed": failed});
        if let (Some(v), serde_json::Value::Object(extra)) = (v.as_object_mut(), extra) {
            v.extend(extra);
        }
        // Pretty, `format_version` first, as every document (docs/json.md).
        super::output::json(v);
    } else {
        let mut text = String::new();
        for r in &results {
            let mark = if r.ok { "✓" } else { "✗" };
            text.push_str(&format!("{mark} agent `{}`: {}\n", r.agent, r.detail));
        }
        out(&text);
    }
    i32::from(failed > 0)
}

/// Fold an apply report into one result per agent (its failures first).
fn results_of(agents: &[String], report: &ApplyReport, idle: &str) -> Vec<AgentResult> {
    agents
        .iter()
        .map(|agent| {
            let steps: Vec<_> = report.steps.iter().filter(|s| &s.agent == agent).collect();
            let failed: Vec<_> = steps.iter().filter(|s| !s.ok).collect();
            let detail = if let Some(f) = failed.first() {
                f.detail.clone()
            } else if steps.is_empty() {
                idle.to_string()
            } else {
                steps
                    .iter()
                    .map(|s| s.detail.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            AgentResult {
                agent: agent.clone(),
                ok: failed.is_empty(),
                detail,
                restarted: None,
            }
        })
        .collect()
}

/// `phoenix stop AGENT…`: record the stop, then stop the agents' panes. The record comes
/// first, so a daemon reconciling in between already leaves the agent down.
pub fn stop(config: &Path, names: &[String], json: bool) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let (local, targets) = actions::split(&ctx.spec, names);
    if !targets.is_empty() {
        let local = declared(&ctx.spec, &local)?;
        return super::fleetwide::act(
            &ctx.spec,
            "stop",
            &[],
            &targets,
            || hosted(&local, || stop_results(&ctx, &local)),
            json,
        );
    }
    let agents = declared(&ctx.spec, names)?;
    Ok(finish(
        "stop",
        stop_results(&ctx, &agents)?,
        json!({}),
        json,
    ))
}

/// The results of this machine's agents as a fleet with hosts shows them (none asked: none).
fn hosted(
    agents: &[String],
    results: impl FnOnce() -> anyhow::Result<Vec<AgentResult>>,
) -> anyhow::Result<Vec<actions::AgentResult>> {
    if agents.is_empty() {
        return Ok(Vec::new());
    }
    Ok(results()?
        .into_iter()
        .map(|r| actions::AgentResult {
            agent: r.agent,
            host: None,
            ok: r.ok,
            detail: r.detail,
        })
        .collect())
}

fn stop_results(ctx: &FleetContext, agents: &[String]) -> anyhow::Result<Vec<AgentResult>> {
    let _lock = lock(ctx, "stop")?;
    for agent in agents {
        let dir = ctx.dir.agent(agent);
        dir.ensure()
            .and_then(|()| dir.set_marker(state::STOPPED))
            .with_context(|| format!("cannot record the stop in `{}`", dir.path.display()))?;
    }
    let world = crate::status::observe(&ctx.spec, ctx.runtime())?;
    let changes = agents
        .iter()
        .flat_map(|a| {
            world
                .panes
                .iter()
                .filter(move |p| p.agent.as_ref() == Some(a))
        })
        .map(|p| {
            stop_change(
                p.agent.as_deref().unwrap_or_default(),
                &p.id,
                "phoenix stop",
            )
        })
        .collect();
    let report = applier(ctx)?.apply(&Plan::of(changes));
    let mut results = results_of(agents, &report, "was not running");
    for r in results.iter_mut().filter(|r| r.ok) {
        r.detail = format!(
            "{}; it stays down until `phoenix start {}`",
            r.detail, r.agent
        );
    }
    Ok(results)
}

/// `phoenix start AGENT…`: lift a `stop` (and a clean exit's hold, and the crash counts, as a
/// restart by a person does), then apply what the plan holds for these agents.
pub fn start(config: &Path, names: &[String], json: bool) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let (local, targets) = actions::split(&ctx.spec, names);
    if !targets.is_empty() {
        let local = declared(&ctx.spec, &local)?;
        return super::fleetwide::act(
            &ctx.spec,
            "start",
            &[],
            &targets,
            || hosted(&local, || start_results(&ctx, &local)),
            json,
        );
    }
    let agents = declared(&ctx.spec, names)?;
    Ok(finish(
        "start",
        start_results(&ctx, &agents)?,
        json!({}),
        json,
    ))
}

fn start_results(ctx: &FleetContext, agents: &[String]) -> anyhow::Result<Vec<AgentResult>> {
    for agent in agents {
        if !ctx.spec.agent(agent).is_some_and(|a| a.enabled) {
            bail!("agent `{agent}` is disabled in phoenix.toml: set `enabled = true` first");
        }
        // Started here, a copy the operator moved away would run twice.
        if let Some(fence) = state::fence::refused(&ctx.dir, agent) {
            bail!(
                "agent `{agent}` was {}: this copy is stale and stays down (`phoenix move` on the operator's machine places it)",
                fence.describe()
            );
        }
    }
    let lock = lock(ctx, "start")?;
    for agent in agents {
        let dir = ctx.dir.agent(agent);
        for marker in [state::STOPPED, state::CLEAN_EXIT] {
            dir.clear_marker(marker)
                .with_context(|| format!("cannot clear `{}`", dir.file(marker).display()))?;
        }
        // A person starts it: a clean slate, as `phoenix restart` gives (else an agent stopped
        // in safe mode would start straight back into it).
        if dir.exists() {
            crate::restart::reset_counts(&dir)?;
        }
    }
    let world = crate::status::observe(&ctx.spec, ctx.runtime())?;
    let mut plan = plan::diff(
        &ctx.spec,
        &world,
        &PlanOptions::for_this_binary(false).context("cannot find the phoenix binary")?,
    );
    target(&mut plan, &ctx.spec, agents)?;
    let applied_at = jiff::Timestamp::now();
    let mut report = applier(ctx)?.apply(&plan);
    drop(lock);
    super::fleet::confirm_started(&ctx.spec, ctx.runtime(), &mut report, applied_at);
    Ok(results_of(agents, &report, "already running"))
}

/// `phoenix restart AGENT… | --all`: each through the one restart (lock, clean slate, resume).
pub fn restart(
    config: &Path,
    names: &[String],
    all: bool,
    fresh: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let (local, targets) = if all {
        (Vec::new(), actions::every_host(&ctx.spec))
    } else {
        actions::split(&ctx.spec, names)
    };
    let agents = if all {
        // Held back on purpose: `--all` restarts what should run, not what a person stopped.
        ctx.spec
            .agents
            .iter()
            .filter(|a| a.enabled && !ctx.dir.agent(&a.name).has_marker(state::STOPPED))
            .map(|a| a.name.clone())
            .collect()
    } else {
        declared(&ctx.spec, &local)?
    };
    if agents.is_empty() && targets.is_empty() {
        bail!("no agent to restart: every agent is disabled or stopped");
    }
    if !targets.is_empty() {
        let flags: &[&str] = if fresh { &["--fresh"] } else { &[] };
        return super::fleetwide::act(
            &ctx.spec,
            "restart",
            flags,
            &targets,
            || hosted(&agents, || Ok(restart_results(&ctx, &agents, fresh))),
            json,
        );
    }
    // One document whatever the number of agents: `--json` of one is the list of one.
    if let [agent] = agents.as_slice()
        && !all
        && !json
    {
        return super::fleet::restart(config, agent, fresh, json);
    }
    let results = restart_results(&ctx, &agents, fresh);
    Ok(finish("restart", results, json!({}), json))
}

/// Each agent through the one restart, in turn.
fn restart_results(ctx: &FleetContext, agents: &[String], fresh: bool) -> Vec<AgentResult> {
    agents
        .iter()
        .map(|agent| {
            match crate::controller::request::restart_with(ctx, agent, fresh, &tell_waiting) {
                Ok(r) => AgentResult {
                    agent: agent.clone(),
                    ok: true,
                    detail: match (&r.pane, r.pid) {
                        (Some(pane), Some(pid)) => format!("restarted in pane {pane} (pid {pid})"),
                        _ => "restart requested; not running yet".into(),
                    },
                    restarted: Some(Restarted {
                        fresh: r.fresh,
                        via: r.via.clone(),
                        pane: r.pane.clone(),
                        pid: r.pid,
                    }),
                },
                Err(e) => AgentResult {
                    agent: agent.clone(),
                    ok: false,
                    detail: format!("{e:#}"),
                    restarted: None,
                },
            }
        })
        .collect()
}

/// `phoenix down`: stop every agent of this fleet (declared or not), and its tmux server once
/// no other fleet's pane is left on it; with `remove_hooks`, phoenix's entries leave the
/// workdirs' hook files too (the user's own entries stay). With `[[host]]`s, on this machine
/// and every host at once (`--host` limits it); a host that cannot be reached is reported and
/// fails the command, the others still go down.
pub fn down(config: &Path, remove_hooks: bool, only: &[String], json: bool) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let (here, hosts) = down_parts(&ctx.spec, only)?;
    if ctx.spec.hosts.is_empty() {
        // As on one machine: the same output and document.
        let (results, server) = down_here(&ctx, remove_hooks)?;
        let location = ctx.runtime().location();
        return Ok(if json {
            finish("down", results, json!({"server": server}), true)
        } else {
            let code = finish("down", results, json!({}), false);
            out(&format!(
                "{location}: {server}
"
            ));
            code
        });
    }
    let (local, remote) = std::thread::scope(|scope| {
        let remote = scope.spawn(|| actions::down(&ctx.spec, &hosts, remove_hooks));
        let local = here.then(|| down_here(&ctx, remove_hooks));
        (
            local,
            remote.join().expect("asking the hosts does not panic"),
        )
    });
    Ok(down_report(&ctx, local, remote, json))
}

/// What `--host` names: whether this machine goes down, and which hosts (all of them when
/// nothing is named). A name that is neither `local` nor a `[[host]]` is an error before
/// anything stops.
fn down_parts(spec: &Spec, only: &[String]) -> anyhow::Result<(bool, Vec<String>)> {
    let declared: Vec<&str> = spec.hosts.iter().map(|h| h.name.as_str()).collect();
    for name in only {
        if name != crate::hosts::combined::LOCAL && !declared.contains(&name.as_str()) {
            let mut known = vec![crate::hosts::combined::LOCAL];
            known.extend(&declared);
            bail!(
                "no host `{name}` in `{}` ({}; `{}` is this machine)",
                spec.file.display(),
                crate::diag::suggest(name, &known),
                crate::hosts::combined::LOCAL
            );
        }
    }
    let named = |name: &str| only.is_empty() || only.iter().any(|n| n == name);
    Ok((
        named(crate::hosts::combined::LOCAL),
        declared
            .into_iter()
            .filter(|h| named(h))
            .map(str::to_string)
            .collect(),
    ))
}

/// This machine's part of `down`: its results and what became of its tmux server.
fn down_here(ctx: &FleetContext, remove_hooks: bool) -> anyhow::Result<(Vec<AgentResult>, String)> {
    if let Some(pid) = crate::state::daemon::daemon_pid(&ctx.dir) {
        eprintln!(
            "note: `phoenix run` (pid {pid}) supervises this fleet: it leaves the fleet down until `phoenix apply` brings it up"
        );
    }
    // The operator's word goes to disk first, under the lock the daemon's reconcile takes:
    // from here on no reconcile, watchdog pass or revival brings an agent back.
    let _lock = self::lock(ctx, "down")?;
    crate::state::down::set(&ctx.dir).with_context(|| {
        format!(
            "cannot record that the fleet is down in `{}`",
            ctx.dir.root.display()
        )
    })?;
    let mut world = crate::status::observe(&ctx.spec, ctx.runtime())?;
    // `down` stops agents; their worktrees stay (only `apply --prune` removes one).
    world.workspaces = Default::default();
    // Nothing declared, everything pruned: the plan's own machinery for undeclared agents
    // stops every pane and cleans every hook file phoenix wrote.
    let mut nothing = ctx.spec.clone();
    nothing.agents.clear();
    let options = PlanOptions {
        prune: true,
        force_remove_worktrees: false,
        hooks_exe: if remove_hooks {
            PlanOptions::for_this_binary(true)
                .context("cannot find the phoenix binary")?
                .hooks_exe
        } else {
            None
        },
    };
    let plan = plan::diff(&nothing, &world, &options);
    let report = applier(ctx)?.apply(&plan);
    let mut agents: Vec<String> = Vec::new();
    for s in &report.steps {
        if !agents.contains(&s.agent) {
            agents.push(s.agent.clone());
        }
    }
    let results = results_of(&agents, &report, "");
    let runtime = ctx.runtime();
    // Other fleets may share the server (an explicit `tmux_socket`): it stays for them.
    let others = runtime
        .list()
        .ok()
        .flatten()
        .is_some_and(|panes| !panes.is_empty());
    let server = if !world.server_running {
        "not running"
    } else if others {
        "kept: panes of another fleet run on it"
    } else {
        match runtime.kill_server() {
            Ok(()) => "stopped",
            Err(e) => bail!("cannot stop {}: {e}", runtime.location()),
        }
    };
    Ok((results, server.to_string()))
}

/// `down` of a fleet with hosts: one row per agent (with its host) and one entry per part
/// asked (`local` first) in `hosts`, the same document whichever parts were asked or
/// answered; exit 1 when an agent or a part failed.
fn down_report(
    ctx: &FleetContext,
    local: Option<anyhow::Result<(Vec<AgentResult>, String)>>,
    remote: Vec<actions::HostDown>,
    json: bool,
) -> i32 {
    let mut rows: Vec<actions::AgentResult> = Vec::new();
    let mut parts: Vec<serde_json::Value> = Vec::new();
    let mut text = String::new();
    let mut local_server = None;
    let row_text = |r: &actions::AgentResult| {
        let mark = if r.ok { "✓" } else { "✗" };
        let on = r
            .host
            .as_deref()
            .map(|h| format!(" on {h}"))
            .unwrap_or_default();
        format!("{mark} agent `{}`{on}: {}\n", r.agent, r.detail)
    };
    match local {
        Some(Ok((results, server))) => {
            for r in results {
                let r = actions::AgentResult {
                    agent: r.agent,
                    host: None,
                    ok: r.ok,
                    detail: r.detail,
                };
                text.push_str(&row_text(&r));
                rows.push(r);
            }
            text.push_str(&format!("{}: {server}\n", ctx.runtime().location()));
            parts.push(json!({"host": crate::hosts::combined::LOCAL, "ok": true,
                "server": server, "error": null, "hint": null}));
            local_server = Some(server);
        }
        Some(Err(e)) => {
            text.push_str(&format!("✗ {}: {e:#}\n", crate::hosts::combined::LOCAL));
            parts.push(json!({"host": crate::hosts::combined::LOCAL, "ok": false,
                "server": null, "error": format!("{e:#}"), "hint": null}));
        }
        None => {}
    }
    for host in remote {
        match &host.error {
            None => {
                for r in &host.agents {
                    text.push_str(&row_text(r));
                }
                let server = host.server.as_deref().unwrap_or("unknown");
                text.push_str(&format!("{}: its server {server}\n", host.host));
            }
            Some(error) => {
                text.push_str(&format!(
                    "✗ {}: {error}; nothing was stopped there\n",
                    host.host
                ));
                if let Some(hint) = error.hint() {
                    text.push_str(&format!("  hint: {hint}\n"));
                }
            }
        }
        parts.push(
            json!({"host": host.host, "ok": host.error.is_none(), "server": host.server,
            "error": host.error.as_ref().map(ToString::to_string),
            "hint": host.error.as_ref().and_then(crate::hosts::HostError::hint)}),
        );
        rows.extend(host.agents);
    }
    let failed = rows.iter().filter(|r| !r.ok).count();
    let parts_failed = parts.iter().filter(|p| p["ok"] == false).count();
    if json {
        super::output::json(json!({"command": "down", "agents": rows, "failed": failed,
            "server": local_server, "hosts": parts}));
    } else {
        if parts_failed > 0 {
            text.push_str(&format!(
                "\nNot down: {parts_failed} part(s) of the fleet (see above); the others are down.\n"
            ));
        }
        out(&text);
    }
    i32::from(failed > 0 || parts_failed > 0)
}

/// `phoenix attach AGENT`: the private tmux server, at the agent's pane.
pub fn attach(config: &Path, name: &str) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let agent = declared(&ctx.spec, &[name.to_string()])?.remove(0);
    let world = crate::status::observe(&ctx.spec, ctx.runtime())?;
    let Some(pane) = world.pane_of(&agent) else {
        let why = if ctx.dir.agent(&agent).has_marker(state::STOPPED) {
            format!("it is stopped: `phoenix start {agent}`")
        } else {
            "start it with `phoenix apply`".to_string()
        };
        bail!("agent `{agent}` has no pane: {why}");
    };
    ctx.runtime()
        .show(&pane.id)
        .with_context(|| format!("cannot attach to pane {} of agent `{agent}`", pane.id))?;
    Ok(0)
}

/// `phoenix service install|uninstall|status`.
pub fn service(config: &Path, command: super::ServiceCommand) -> anyhow::Result<i32> {
    match command {
        super::ServiceCommand::Install { print } => super::fleet::service_install(config, print),
        super::ServiceCommand::Uninstall => service_uninstall(config),
        super::ServiceCommand::Status { json } => service_status(config, json),
    }
}

fn service_uninstall(config: &Path) -> anyhow::Result<i32> {
    use crate::supervise::service;
    let spec = spec::load(config)?;
    match service::uninstall(&spec)? {
        Some(path) => out(&format!(
            "removed {}\nif it was enabled, also run:\n  systemctl --user disable --now {}\n  systemctl --user daemon-reload\n",
            path.display(),
            service::unit_name(&spec)
        )),
        None => out(&format!(
            "no unit installed for this fleet ({} does not exist)\n",
            service::unit_path(&spec)?.display()
        )),
    }
    Ok(0)
}

/// `phoenix service status`: whether the unit is installed and whether a daemon supervises
/// this fleet (exit 3, as `systemctl status`, when none does).
fn service_status(config: &Path, json: bool) -> anyhow::Result<i32> {
    use crate::supervise::service;
    let spec = spec::load(config)?;
    let unit = service::unit_path(&spec)?;
    let installed = unit.is_file();
    let daemon = crate::state::daemon::daemon_pid(&FleetDir::new(&spec.fleet.state_dir));
    if json {
        super::output::json(json!({"unit": unit, "installed": installed, "daemon_pid": daemon}));
    } else {
        let mut text = format!(
            "unit:   {} ({})\n",
            unit.display(),
            if installed {
                "installed"
            } else {
                "not installed: `phoenix service install`"
            }
        );
        text.push_str(&match daemon {
            Some(pid) => format!("daemon: `phoenix run` supervises this fleet (pid {pid})\n"),
            None => "daemon: not running\n".to_string(),
        });
        out(&text);
    }
    Ok(if daemon.is_some() {
        0
    } else {
        super::fleet::EXIT_NOT_RUNNING
    })
}
