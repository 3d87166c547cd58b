//! validate, plan, apply, status and doctor: the fleet-level commands.

use super::output;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::json;

use super::out;
use crate::apply::Applier;
use crate::context::FleetContext;
use crate::plan::{self, PlanOptions};
use crate::spec::{self, LoadError, Spec};
use crate::state::FleetDir;
use crate::state::lock::{FleetLock, LOCK_WAIT};
use crate::world::{self, Runtime};

/// The fleet of `config`, built once for the command.
fn load(config: &Path) -> anyhow::Result<FleetContext> {
    Ok(FleetContext::new(config, spec::load(config)?))
}

/// [`load`], each `[[agent_set]]`'s source read first (what it says goes to stderr): a plan
/// or an apply acts on the work as it is now.
fn load_refreshed(config: &Path) -> anyhow::Result<FleetContext> {
    let spec = spec::load(config)?;
    let refreshed = crate::intake::refresh(&spec, |_| true);
    for r in &refreshed {
        if let Some(line) = r.describe() {
            eprintln!("{line}");
        }
    }
    if refreshed.iter().any(|r| r.changed()) {
        return load(config);
    }
    Ok(FleetContext::new(config, spec))
}

fn observe(ctx: &FleetContext) -> anyhow::Result<crate::world::World> {
    Ok(crate::status::observe(&ctx.spec, ctx.runtime())?)
}

/// The spec's warnings on stderr, like the errors `validate` shows but not fatal.
fn print_warnings(spec: &Spec) {
    for w in &spec.warnings {
        eprintln!(
            "warning: {}\n  --> {}:{}:{}",
            w.message, w.file, w.line, w.column
        );
        if let Some(hint) = &w.hint {
            eprintln!("  = hint: {hint}");
        }
    }
}

pub fn validate(config: &Path, json: bool) -> anyhow::Result<i32> {
    match spec::load(config) {
        Ok(spec) => {
            if !json {
                print_warnings(&spec);
            }
            if let Some(code) = super::policy::validate_extras(&spec, json) {
                return Ok(code);
            }
            if json {
                output::json(json!({
                    "ok": true,
                    "file": spec.file,
                    "agents": spec.agent_names(),
                    "errors": [],
                    "warnings": spec.warnings
                }));
            } else {
                out(&format!(
                    "{}: ok ({})\n",
                    spec.file.display(),
                    crate::text::counted(spec.agents.len(), "agent")
                ));
            }
            Ok(0)
        }
        Err(LoadError::Invalid(diags)) if json => {
            output::json(json!({"ok": false, "file": diags.file, "errors": diags.located()}));
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}

pub use crate::plan::Pruning;

fn plan_options(pruning: Pruning) -> anyhow::Result<PlanOptions> {
    pruning.options().context("cannot find the phoenix binary")
}

pub fn plan(
    config: &Path,
    json: bool,
    prune: Pruning,
    skip_unreachable: bool,
) -> anyhow::Result<i32> {
    let ctx = load_refreshed(config)?;
    let spec = &ctx.spec;
    print_warnings(spec);
    super::lifecycle::commands_exist(&ctx, &[])?;
    if combined(spec)? {
        return super::fleet_hosts::plan(&ctx, json, prune, skip_unreachable);
    }
    let plan = local_plan(&ctx, prune)?;
    if json {
        output::json(plan.to_json());
    } else {
        out(&output::plan(&plan.to_string()));
        out(&down_line(&ctx));
    }
    Ok(if plan.is_empty() { 0 } else { 2 })
}

/// Whether `plan` and `apply` cover the hosts too: there are `[[host]]`s, or the placement
/// record has an agent on a machine that is not this one (phoenix.toml lost its hosts: the
/// agents declared here again are moves, not plain starts).
fn combined(spec: &Spec) -> anyhow::Result<bool> {
    Ok(!spec.hosts.is_empty() || crate::hosts::replan::record_places_elsewhere(spec)?)
}

/// This machine's plan, read-only.
pub(super) fn local_plan(
    ctx: &FleetContext,
    prune: impl Into<Pruning>,
) -> anyhow::Result<plan::Plan> {
    if let Some(problem) = world::leftover_problem(&ctx.spec) {
        eprintln!("warning: {problem}");
    }
    let world = observe(ctx)?;
    Ok(plan::diff(&ctx.spec, &world, &plan_options(prune.into())?))
}

pub fn apply(
    config: &Path,
    targets: &[String],
    yes: bool,
    prune: Pruning,
    json: bool,
    skip_unreachable: bool,
) -> anyhow::Result<i32> {
    // The edit this apply applies: read before the file is loaded and again after, so that
    // an edit saved meanwhile is not recorded as applied.
    let digest = crate::spec::file_digest(config);
    let ctx = load_refreshed(config)?;
    let digest = digest.filter(|d| crate::spec::file_digest(config).as_ref() == Some(d));
    let spec = &ctx.spec;
    print_warnings(spec);
    if combined(spec)? {
        let options = super::fleet_hosts::ApplyOptions {
            yes,
            prune,
            json,
            skip_unreachable,
        };
        return super::fleet_hosts::apply(&ctx, targets, options);
    }
    super::lifecycle::declared(spec, targets)?;
    super::lifecycle::commands_exist(&ctx, targets)?;
    some_agents_of_an_edit(&ctx, targets, digest.as_deref())?;
    let (lock, plan) = if yes {
        let (lock, mut plan) = lock_and_plan(&ctx, prune)?;
        super::lifecycle::target(&mut plan, spec, targets)?;
        if !plan.is_empty() && !json {
            out(&output::plan(&plan.to_string()));
        }
        (Some(lock), plan)
    } else {
        let mut asking = LocalAsking {
            ctx: &ctx,
            prune,
            targets,
            json,
        };
        match super::ask::ask_then_lock(&mut asking)? {
            super::ask::Answer::Apply { lock, checked, .. } => (Some(lock), checked),
            super::ask::Answer::Nothing(plan) => (None, plan),
            super::ask::Answer::Cancelled => {
                out("Apply cancelled.\n");
                return Ok(1);
            }
            super::ask::Answer::KeptChanging => return Err(super::ask::kept_changing()),
        }
    };
    bring_up(&ctx, targets);
    record_applied(&ctx, targets, digest.as_deref());
    let Some(lock) = lock.filter(|_| !plan.is_empty()) else {
        if json {
            output::json(json!({"steps": [], "failed": 0}));
        } else if yes {
            out(&output::plan(&plan.to_string()));
        }
        return Ok(0);
    };
    let report = apply_locally(&ctx, &plan, lock)?;
    let failed = report.failed();
    if json {
        output::json(json!({"steps": report.steps, "failed": failed}));
    } else {
        let mut text = String::from("\n");
        for s in &report.steps {
            text.push_str(&step_line(s.ok, &s.agent, &s.action, &s.detail));
            text.push('\n');
        }
        text.push_str(&format!(
            "\n{}\n",
            apply_summary(report.steps.len() - failed, failed)
        ));
        out(&text);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// This machine's apply asking the operator: its plan shown and asked about with no lock
/// held, then made again under the lock.
struct LocalAsking<'a> {
    ctx: &'a FleetContext,
    prune: Pruning,
    targets: &'a [String],
    json: bool,
}

impl super::ask::Asking for LocalAsking<'_> {
    type Shown = plan::Plan;
    type Checked = plan::Plan;
    type Lock = FleetLock;

    fn plan(&mut self) -> anyhow::Result<plan::Plan> {
        let mut plan = local_plan(self.ctx, self.prune)?;
        super::lifecycle::target(&mut plan, &self.ctx.spec, self.targets)?;
        Ok(plan)
    }

    fn show(&mut self, plan: &plan::Plan, again: bool) -> anyhow::Result<()> {
        if self.json {
            if again {
                eprintln!("the plan changed while you were asked: asking again");
            }
        } else {
            if again {
                out("\nThe plan changed while you were asked. The plan now:\n");
            }
            out(&output::plan(&plan.to_string()));
        }
        Ok(())
    }

    fn is_empty(&self, plan: &plan::Plan) -> bool {
        plan.is_empty()
    }

    fn ask(&mut self) -> anyhow::Result<bool> {
        confirm()
    }

    fn lock_and_check(&mut self) -> anyhow::Result<(FleetLock, plan::Plan)> {
        let (lock, mut plan) = lock_and_plan(self.ctx, self.prune)?;
        super::lifecycle::target(&mut plan, &self.ctx.spec, self.targets)?;
        Ok((lock, plan))
    }

    fn same(&self, shown: &plan::Plan, checked: &plan::Plan) -> bool {
        same_changes(shown, checked)
    }
}

/// Whether two plans do the same: the same changes of the same agents, in the same order
/// (their reasons are for people, and may say how long ago something happened).
pub(super) fn same_changes(a: &plan::Plan, b: &plan::Plan) -> bool {
    a.changes.len() == b.changes.len()
        && a.changes
            .iter()
            .zip(&b.changes)
            .all(|(a, b)| a.agent == b.agent && a.action == b.action)
}

/// The operator's `apply` of the whole fleet brings it up after `phoenix down`: from now on
/// the daemon and the watchdog look after it again. An apply of some agents leaves the rest
/// of the fleet down, and says so.
pub(super) fn bring_up(ctx: &FleetContext, targets: &[String]) {
    let Some(since) = crate::state::down::since(&ctx.dir) else {
        return;
    };
    if !targets.is_empty() {
        let when = if since.is_empty() {
            String::new()
        } else {
            format!(" since {since}")
        };
        eprintln!(
            "note: the rest of the fleet stays down (`phoenix down`{when}): `phoenix apply` of the whole fleet brings it up; until then the daemon and the watchdog leave it alone"
        );
        return;
    }
    if let Err(e) = crate::state::down::clear(&ctx.dir) {
        eprintln!("warning: the fleet stays marked down: {e}");
    }
}

/// With `[fleet] reload = "plan"` a daemon reconciles toward the file last applied: an
/// apply of some agents of an edit nobody applied yet would be undone by its next pass.
fn some_agents_of_an_edit(
    ctx: &FleetContext,
    targets: &[String],
    digest: Option<&str>,
) -> anyhow::Result<()> {
    if targets.is_empty() || ctx.spec.fleet.reload != crate::spec::Reload::Plan {
        return Ok(());
    }
    match crate::state::applied::digest(&ctx.dir) {
        Some(applied) if Some(applied.as_str()) != digest => Err(crate::Error::with_hint(
            format!(
                "`{}` was edited since the last `phoenix apply`, and `[fleet] reload = \"plan\"`: the daemon reconciles toward the file last applied and would undo an apply of some agents",
                ctx.spec.file.display()
            ),
            "apply the whole fleet (`phoenix apply`), or set `reload = \"apply\"` in [fleet]",
        )
        .into()),
        _ => Ok(()),
    }
}

/// The operator's `apply` of the whole fleet applied this edit of phoenix.toml: a daemon
/// with `reload = "plan"` takes it over (written under the fleet lock when the apply holds
/// it, before any change: the daemon's next pass sees it before it diffs).
fn record_applied(ctx: &FleetContext, targets: &[String], digest: Option<&str>) {
    let Some(digest) = digest.filter(|_| targets.is_empty()) else {
        return;
    };
    if let Err(e) = ctx
        .dir
        .ensure()
        .and_then(|()| crate::state::applied::record(&ctx.dir, digest))
    {
        eprintln!("warning: cannot record which phoenix.toml was applied: {e}");
    }
}

/// `✓ agent `a`: start — pane %1 (running, pid 42)`: one step of an apply.
pub(super) fn step_line(ok: bool, agent: &str, action: &str, detail: &str) -> String {
    let mark = if ok { "✓" } else { "✗" };
    format!("{mark} agent `{agent}`: {action} — {detail}")
}

/// `Apply complete: 2 succeeded, 0 failed.`
pub(super) fn apply_summary(succeeded: usize, failed: usize) -> String {
    format!(
        "Apply {}: {succeeded} succeeded, {failed} failed.",
        if failed == 0 {
            "complete"
        } else {
            "finished with errors"
        },
    )
}

/// This machine's fleet locked (held from the observation to the last step, so that what
/// was planned is still true when it is applied; never across a question to the operator:
/// see `ask`) and its plan.
pub(super) fn lock_and_plan(
    ctx: &FleetContext,
    prune: impl Into<Pruning>,
) -> anyhow::Result<(FleetLock, plan::Plan)> {
    let options = plan_options(prune.into())?;
    let spec = &ctx.spec;
    if let Some(problem) = world::leftover_problem(spec) {
        bail!("{problem}");
    }
    let fleet = &ctx.dir;
    if !fleet.root.exists() {
        // A first apply where the runtime cannot work leaves nothing behind, not even a
        // state dir.
        observe(ctx)?;
    }
    fleet.ensure().with_context(|| {
        format!(
            "cannot create state dir `{}`",
            spec.fleet.state_dir.display()
        )
    })?;
    let lock = lock_fleet(fleet, "apply")?;
    let world = observe(ctx)?;
    let plan = plan::diff(spec, &world, &options);
    Ok((lock, plan))
}

/// Carry out this machine's `plan` under `lock`, then check that what started runs.
pub(super) fn apply_locally(
    ctx: &FleetContext,
    plan: &plan::Plan,
    lock: FleetLock,
) -> anyhow::Result<crate::apply::ApplyReport> {
    let runtime = ctx.runtime();
    let exe = crate::process::main_binary().context("cannot find the phoenix binary")?;
    let applied_at = jiff::Timestamp::now();
    let mut report = Applier {
        spec: &ctx.spec,
        runtime,
        exe,
    }
    .apply(plan);
    drop(lock);
    confirm_started(&ctx.spec, runtime, &mut report, applied_at);
    Ok(report)
}

/// Take the fleet lock, saying on stderr whom we wait for if another phoenix holds it.
fn lock_fleet(fleet: &FleetDir, what: &str) -> anyhow::Result<FleetLock> {
    Ok(FleetLock::acquire(fleet, what, LOCK_WAIT, tell_waiting)?)
}

fn tell_waiting(holder: &str) {
    eprintln!(
        "waiting for another phoenix ({holder}) to finish changing the fleet (up to {}s)…",
        LOCK_WAIT.as_secs()
    )
}

/// How long apply waits for started agents to show a process before reporting, and how much
/// longer for each agent started: a thousand wrappers starting at once share the machine.
const START_CONFIRM: std::time::Duration = std::time::Duration::from_secs(3);
const START_CONFIRM_PER_AGENT: std::time::Duration = std::time::Duration::from_millis(15);

/// Wait briefly until every agent started by this apply has its process, and say so: a step
/// that "worked" but left an empty pane is worth knowing about right away.
pub(super) fn confirm_started(
    spec: &Spec,
    runtime: &dyn Runtime,
    report: &mut crate::apply::ApplyReport,
    since: jiff::Timestamp,
) {
    let started: Vec<usize> = report
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.ok && matches!(s.action.as_str(), "start" | "restart" | "replace"))
        .map(|(i, _)| i)
        .collect();
    if started.is_empty() {
        return;
    }
    let deadline =
        std::time::Instant::now() + START_CONFIRM + START_CONFIRM_PER_AGENT * started.len() as u32;
    let mut pids = vec![None; started.len()];
    // Whether the process seen has become the agent's command: until its exec the child runs
    // the wrapper's program, and an exec that fails is a spawn failure.
    let mut execed = vec![false; started.len()];
    let wrapper = wrapper_comm();
    let mut spawn_errors: Vec<Option<String>> = vec![None; started.len()];
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    loop {
        if let Ok(world) = world::observe(spec, runtime) {
            for ((slot, done), &i) in pids.iter_mut().zip(&mut execed).zip(&started) {
                let agent = world
                    .pane_of(&report.steps[i].agent)
                    .and_then(|p| p.agent_process());
                *slot = agent.map(|p| p.pid);
                *done = agent.is_some_and(|p| Some(&p.comm) != wrapper.as_ref());
            }
        }
        for ((error, pid), &i) in spawn_errors.iter_mut().zip(&pids).zip(&started) {
            if pid.is_none() {
                *error = spawn_failure(&fleet.agent(&report.steps[i].agent), since);
            }
        }
        let settled = pids
            .iter()
            .zip(&spawn_errors)
            .all(|(pid, error)| pid.is_some() || error.is_some());
        if settled || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A command that cannot run still forks for an instant: a process seen under the wrapper
    // that still runs the wrapper's program is believed only if no spawn failure follows it.
    if pids
        .iter()
        .zip(&execed)
        .any(|(pid, done)| pid.is_some() && !done)
    {
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    for ((error, done), &i) in spawn_errors.iter_mut().zip(&execed).zip(&started) {
        if error.is_none() && !done {
            *error = spawn_failure(&fleet.agent(&report.steps[i].agent), since);
        }
    }
    for ((pid, error), &i) in pids.iter().zip(&spawn_errors).zip(&started) {
        let step = &mut report.steps[i];
        match (pid, error) {
            (Some(pid), None) => step.detail.push_str(&format!(" (running, pid {pid})")),
            (_, Some(error)) => {
                // The pane is there but the agent's command cannot run: that is a failed start.
                step.ok = false;
                step.detail = format!(
                    "{}; the agent's command cannot start: {error} (fix `command` in {}, then apply again)",
                    step.detail,
                    spec.file.display()
                );
            }
            (None, None) => step
                .detail
                .push_str(" (no agent process yet: check `phoenix status` and the pane)"),
        }
    }
}

/// The kernel's name (`comm`, 15 bytes at most) of the program wrappers run (`phoenix-wrap`).
fn wrapper_comm() -> Option<String> {
    let exe = crate::apply::wrapper_program(&crate::process::main_binary().ok()?);
    let name = exe.file_name()?.to_string_lossy().into_owned();
    Some(
        name.chars()
            .scan(0, |len, c| {
                *len += c.len_utf8();
                (*len <= 15).then_some(c)
            })
            .collect(),
    )
}

/// The wrapper's `spawn_failed` record since `since`, if the agent's command could not run.
fn spawn_failure(dir: &crate::state::AgentDir, since: jiff::Timestamp) -> Option<String> {
    crate::state::op::tail(&dir.file(crate::state::OPS_LOG))
        .into_iter()
        .rev()
        .take_while(|o| o.time().is_none_or(|t| t >= since))
        .find(|o| matches!(o.op, crate::state::Op::SpawnFailed(_)))
        .map(|o| {
            o.get("error")
                .as_str()
                .unwrap_or("unknown error")
                .to_string()
        })
}

pub(super) fn confirm() -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("refusing to apply without confirmation: not on a terminal (pass --yes)");
    }
    print!("\nApply these changes? Only `yes` will be accepted: ");
    std::io::stdout().flush()?;
    // Only an answer typed after the question counts, not keys (or a paste) sent before it.
    crate::supervise::term::discard_input();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim() == "yes")
}

/// `status` when a declared, enabled agent is down, in safe mode or stopped.
pub const EXIT_NOT_RUNNING: i32 = 3;

/// `status -o FORMAT`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StatusOutput {
    // Every column, whatever the width (no doc comment: a described value would lay out
    // `status --help` one line per option and its help below it).
    Wide,
}

/// `text` in at most `width` characters: cut with `…` when longer, padded when shorter.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return format!("{text:<width$}");
    }
    let cut: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{cut}…")
}

pub fn status(config: &Path, agent: Option<&str>, wide: bool, json: bool) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let spec = &ctx.spec;
    if let Some(problem) = world::leftover_problem(spec) {
        eprintln!("warning: {problem}");
    }
    // One agent of a host in text came to its host before (`route`); the rest is merged.
    if !spec.hosts.is_empty() && (agent.is_none() || json) {
        return super::fleetwide::status(&ctx, agent, json);
    }
    let world = observe(&ctx)?;
    let rows = match agent {
        Some(name) => vec![
            crate::status::agent(spec, &world, name)
                .with_context(|| format!("no agent `{name}` ({})", spec.declared_hint(name)))?,
        ],
        None => crate::status::rows(spec, &world),
    };
    // As `systemctl status`: 3 when something declared is not running, so a script or a
    // health check can act on the exit code alone.
    let code = if rows.iter().any(|r| r.is_down()) {
        EXIT_NOT_RUNNING
    } else {
        0
    };
    if json {
        let daemon = crate::state::daemon::daemon_pid(&FleetDir::new(&spec.fleet.state_dir));
        output::json(crate::status::document(spec, &world, &rows, daemon));
        return Ok(code);
    }
    let now = jiff::Timestamp::now();
    if let (Some(r), Some(_)) = (rows.first(), agent) {
        let mut text = describe(spec, r, now);
        text.push_str(&daemon_line(spec));
        out(&text);
        return Ok(code);
    }
    let mut text = if wide {
        format!(
            "{:<20} {:<14} {:<10} {:>8} {:>8} {:<6} {:>8} {:<24} {:>8} {:<18} {}\n",
            "AGENT",
            "STATE",
            "HEALTH",
            "PID",
            "UPTIME",
            "PANE",
            "RESTARTS",
            "LAST EXIT",
            "TOKENS",
            "COST",
            "LAST ACTIVITY"
        )
    } else {
        format!(
            "{:<14} {:<9} {:<10} {:>8} {:<21} {}\n",
            "AGENT", "STATE", "HEALTH", "RESTARTS", "LAST EXIT", "LAST ACTIVITY"
        )
    };
    for r in &rows {
        let last_exit = r
            .last_exit
            .as_ref()
            .map_or_else(|| "-".into(), |e| e.short());
        let ago = r
            .last_activity
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| format!("{} ago", human_secs(now.as_second() - t.as_second())))
            .unwrap_or_else(|| "-".into());
        let (tokens, cost) = r
            .usage_today
            .as_ref()
            .map_or(("-".into(), "-".into()), |u| {
                (
                    crate::usage::short_count(u.spent.tokens.total),
                    u.spent.cost_text(),
                )
            });
        if !wide {
            text.push_str(&format!(
                "{} {} {} {:>8} {} {}\n",
                fit(&r.agent, 14),
                fit(r.state, 9),
                output::paint(output::health(r.health), &fit(r.health, 10)),
                r.restarts,
                fit(&last_exit, 21),
                fit(&ago, 11).trim_end()
            ));
            continue;
        }
        text.push_str(&format!(
            "{:<20} {:<14} {} {:>8} {:>8} {:<6} {:>8} {:<24} {:>8} {:<18} {}\n",
            r.agent,
            r.state,
            output::paint(output::health(r.health), &format!("{:<10}", r.health)),
            r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            r.uptime_secs.map(human_secs).unwrap_or_else(|| "-".into()),
            r.pane.as_deref().unwrap_or("-"),
            r.restarts,
            last_exit,
            tokens,
            cost,
            ago
        ));
    }
    if wide {
        text.push_str("(TOKENS and COST: today, the local day; `phoenix usage` for more)\n");
    }
    text.push_str(&worktree_table(&rows));
    for r in &rows {
        if let Some(wait) = &r.needs_input {
            text.push_str(&output::paint(
                output::health("warning"),
                &format!("needs a human: {} ({})\n", r.agent, waiting_text(wait, now)),
            ));
        }
    }
    if !world.server_running {
        text.push_str(&format!(
            "\n(no {} yet: run `phoenix apply` to start the fleet)\n",
            ctx.runtime.location()
        ));
    }
    text.push_str(&down_line(&ctx));
    text.push_str(&daemon_line(spec));
    out(&text);
    Ok(code)
}

/// `fleet: taken down …` after `phoenix down`, until the operator's apply brings it up.
fn down_line(ctx: &FleetContext) -> String {
    crate::state::down::reason(&ctx.dir).map_or(String::new(), |why| {
        format!("\nfleet: {why} (the daemon and the watchdog revive nothing until then)\n")
    })
}

/// `phoenix status AGENT`, as `kubectl describe`: everything known about one agent, one
/// labelled line each, then its supervision record (last stop, crashes, latest crash).
/// The agents' worktrees under the status table, when any agent has one: branch, commits
/// ahead/behind its base, changed files, and what is wrong.
fn worktree_table(rows: &[crate::status::AgentStatus]) -> String {
    let with: Vec<_> = rows
        .iter()
        .filter_map(|r| r.worktree.as_ref().map(|w| (r, w)))
        .collect();
    if with.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "\n{:<20} {:<24} {:<18} {:>7}  {}\n",
        "AGENT", "BRANCH", "AHEAD/BEHIND", "CHANGED", "WORKTREE"
    );
    for (r, w) in with {
        text.push_str(&format!(
            "{:<20} {:<24} {:<18} {:>7}  {}\n",
            r.agent,
            w.branch.as_deref().unwrap_or("-"),
            ahead_behind(w),
            w.dirty.map_or("-".into(), |d| d.to_string()),
            worktree_where(w),
        ));
    }
    text
}

/// `+2 -0 main`: commits ahead of and behind the base.
fn ahead_behind(w: &crate::workspace::WorktreeStatus) -> String {
    match (w.ahead, w.behind, &w.base) {
        (Some(a), Some(b), Some(base)) => format!("+{a} -{b} {base}"),
        _ => "-".into(),
    }
}

fn worktree_where(w: &crate::workspace::WorktreeStatus) -> String {
    match &w.problem {
        Some(p) => format!("{} ({p})", w.path),
        None => w.path.clone(),
    }
}

fn describe(spec: &Spec, r: &crate::status::AgentStatus, now: jiff::Timestamp) -> String {
    let dash = || "-".to_string();
    let declared = spec.agent(&r.agent);
    let ago = |t: Option<&str>| {
        t.and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| format!("{t} ({} ago)", human_secs(now.as_second() - t.as_second())))
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("Agent", r.agent.clone()),
        ("CLI", r.cli.clone().unwrap_or_else(dash)),
        (
            "Command",
            declared.map(|a| a.command.clone()).unwrap_or_else(dash),
        ),
        (
            "Workdir",
            declared
                .map(|a| a.workdir.display().to_string())
                .unwrap_or_else(dash),
        ),
        (
            "Worktree",
            r.worktree.as_ref().map_or_else(dash, |w| {
                format!(
                    "branch {}, {} ahead/behind, {} changed file(s){}",
                    w.branch.as_deref().unwrap_or("-"),
                    ahead_behind(w),
                    w.dirty.map_or("?".into(), |d| d.to_string()),
                    w.problem
                        .as_ref()
                        .map_or(String::new(), |p| format!(" — {p}"))
                )
            }),
        ),
        ("State", r.state.to_string()),
        (
            "Health",
            output::paint(output::health(r.health), r.health)
                + &if r.watchdog.is_empty() {
                    String::new()
                } else {
                    format!(" (watchdog: {})", r.watchdog.join(", "))
                },
        ),
        ("Pid", r.pid.map(|p| p.to_string()).unwrap_or_else(dash)),
        ("Uptime", r.uptime_secs.map(human_secs).unwrap_or_else(dash)),
        ("Pane", r.pane.clone().unwrap_or_else(dash)),
        ("Restarts", r.restarts.to_string()),
        (
            "Last exit",
            r.last_exit
                .as_ref()
                .map(|e| match e.ts.as_deref() {
                    Some(at) => format!("{} at {at}", e.short()),
                    None => e.short(),
                })
                .unwrap_or_else(dash),
        ),
        (
            "Last activity",
            ago(r.last_activity.as_deref()).unwrap_or_else(dash),
        ),
        ("Session", r.status.clone().unwrap_or_else(dash)),
        ("Current task", r.current_task.clone().unwrap_or_else(dash)),
        (
            "Open loops",
            format!("{} ({} stale)", r.open_loops, r.stale_loops),
        ),
        (
            "Needs input",
            r.needs_input
                .as_ref()
                .map(|w| waiting_text(w, now))
                .unwrap_or_else(|| "no".into()),
        ),
    ];
    if let Some(a) = declared {
        let next = r.next_start.as_ref().map_or_else(dash, next_start_text);
        rows.push((
            "Restart",
            format!(
                "cooldown {}, backoff up to {}, safe mode after {} crashes in {}; next start: {next}",
                crate::spec::duration::format(a.restart.cooldown),
                crate::spec::duration::format(a.restart.backoff_max),
                a.restart.max_crashes,
                crate::spec::duration::format(a.restart.crash_window),
            ),
        ));
    }
    let handoff = match (
        &r.context.last_handoff_id,
        ago(r.context.last_handoff.as_deref()),
    ) {
        (Some(id), Some(when)) => format!("{id}, {when} (`phoenix handoff show {id}`)"),
        (Some(id), None) => id.clone(),
        _ => "none yet".to_string(),
    };
    rows.push(("Latest handoff", handoff));
    rows.push((
        "Context",
        format!(
            "{} (score {}, {} tool calls since the last checkpoint)",
            r.context.level, r.context.score, r.context.tool_calls_since
        ),
    ));
    rows.push(("Today", today(r, declared)));
    if let Some(jobs) = &r.background_jobs {
        rows.push(("Background jobs", background_jobs_text(jobs, now)));
    }
    if let Some(sandbox) = &r.sandbox {
        rows.push(("Sandbox", sandbox_text(sandbox)));
    }
    let mut text: String = rows
        .into_iter()
        .map(|(k, v)| format!("{:<15} {v}\n", format!("{k}:")))
        .collect();
    if let Some(summary) = &r.supervision {
        text.push('\n');
        text.push_str(&summary.to_string());
    }
    text
}

/// The agent's sandbox: the profile's summary, then its last verification.
fn sandbox_text(s: &crate::sandbox::Status) -> String {
    let verified = match &s.verified {
        None => "never verified (`phoenix sandbox verify`)".to_string(),
        Some(v) => {
            let failed = v.failed();
            let what = if failed.is_empty() {
                format!("all {} canaries held", v.checks.len())
            } else {
                let names: Vec<&str> = failed.iter().map(|c| c.name.as_str()).collect();
                format!("FAILED: {}", names.join("; "))
            };
            let stale = if s.verified_current {
                ""
            } else {
                " (of an earlier layout)"
            };
            format!("verified {}{stale}: {what}", v.at)
        }
    };
    let limits = s
        .limits
        .as_ref()
        .map(|l| format!("; limits: {l}"))
        .unwrap_or_default();
    let own = s
        .own_sandbox
        .as_ref()
        .map(|n| format!("; {n}"))
        .unwrap_or_default();
    format!("{}{limits}; {verified}{own}", s.summary)
}

/// Claude Code's background jobs of the agent: how many, then per job its id, state, name,
/// when it started and was last updated, why it is the agent's and what it last said. Every
/// text of a job's is one short line already (`agent_cli::claude::background`).
fn background_jobs_text(
    jobs: &[crate::agent_cli::claude::background::BackgroundJob],
    now: jiff::Timestamp,
) -> String {
    if jobs.is_empty() {
        return "none".into();
    }
    let ago = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map_or("-".into(), |t| {
                format!("{t} ({} ago)", human_secs(now.as_second() - t.as_second()))
            })
    };
    let mut text = format!(
        "{} of Claude Code's (`claude --bg`; `claude agents` manages them); their ends and \
         failures are not the agent's",
        crate::text::counted(jobs.len(), "job")
    );
    for job in jobs {
        let state = match &job.tempo {
            Some(tempo) if *tempo != job.state => format!("{} ({tempo})", job.state),
            _ => job.state.clone(),
        };
        text.push_str(&format!(
            "\n  {}  {state}  {}\n            started {}, updated {}; {}",
            job.id,
            job.name
                .as_deref()
                .map_or("-".into(), |n| format!("\"{n}\"")),
            ago(&job.started),
            ago(&job.updated),
            job.belongs,
        ));
        if let Some(detail) = &job.detail {
            text.push_str(&format!("\n            {detail}"));
        }
    }
    text
}

/// The next start in a few words: `resumes session s1 (claude --resume s1)`, or `a fresh
/// session: no session recorded yet`.
fn next_start_text(next: &crate::supervise::wrap::NextStart) -> String {
    let command: Vec<String> = next.argv.iter().map(|a| crate::text::sh_quote(a)).collect();
    match (&next.session_id, &next.why) {
        (Some(id), _) => format!("resumes session {id} (`{}`)", command.join(" ")),
        (None, why) => format!(
            "a fresh session (`{}`): {}",
            command.join(" "),
            why.as_deref().unwrap_or("fresh")
        ),
    }
}

/// A wait for a person in a few words: `permission_prompt for 3m: Claude needs your
/// permission to use Bash`.
fn waiting_text(wait: &crate::state::NeedsInput, now: jiff::Timestamp) -> String {
    let since = wait
        .since
        .parse::<jiff::Timestamp>()
        .map(|t| format!(" for {}", human_secs(now.as_second() - t.as_second())))
        .unwrap_or_default();
    if wait.message.is_empty() {
        format!("{}{since}", wait.reason)
    } else {
        format!("{}{since}: {}", wait.reason, wait.message)
    }
}

/// `status AGENT`'s line on today's usage: tokens by kind, cost, and the budget.
fn today(r: &crate::status::AgentStatus, declared: Option<&crate::spec::AgentSpec>) -> String {
    use crate::usage::{short_count, thousands, usd_text};
    let Some(u) = &r.usage_today else {
        return "-".into();
    };
    let t = &u.spent.tokens;
    let mut line = format!(
        "{} tokens (input {}, output {}, cache write {}, cache read {}), {}",
        thousands(t.total),
        short_count(t.tokens.input),
        short_count(t.tokens.output),
        short_count(t.tokens.cache_write),
        short_count(t.tokens.cache_read),
        u.spent.cost_text()
    );
    if !u.spent.unpriced_models.is_empty() {
        line.push_str(&format!(
            " (unpriced: {})",
            u.spent.unpriced_models.join(", ")
        ));
    }
    if let Some(b) = declared.and_then(|a| a.budget) {
        let limits: Vec<String> = [
            b.tokens_per_day.map(|n| format!("{} tokens", thousands(n))),
            b.usd_per_day.map(usd_text),
        ]
        .into_iter()
        .flatten()
        .collect();
        line.push_str(&format!("; budget {} a day", limits.join(", ")));
    }
    line
}

/// Whether `phoenix run` supervises this fleet: without it, each agent's wrapper still
/// restarts it, but drift, the watchdog and schedules wait for a person.
pub(super) fn daemon_line(spec: &Spec) -> String {
    match crate::state::daemon::daemon_pid(&FleetDir::new(&spec.fleet.state_dir)) {
        Some(pid) => format!("\ndaemon: `phoenix run` supervises this fleet (pid {pid})\n"),
        // Two lines: `status` fits 80 columns.
        None => "\ndaemon: not running (crashes are still restarted by each agent's wrapper;\n\
                 `phoenix run` or `phoenix service install` also keeps the fleet converged)\n"
            .to_string(),
    }
}

pub(super) fn human_secs(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h{}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

pub fn restart(config: &Path, agent: &str, fresh: bool, json: bool) -> anyhow::Result<i32> {
    let ctx = load(config)?;
    let report = crate::controller::request::restart_with(&ctx, agent, fresh, &tell_waiting)?;
    if json {
        output::json(&report);
        return Ok(0);
    }
    let how = if fresh {
        "with a fresh session"
    } else {
        "resuming its session"
    };
    let text = match (&report.pane, report.pid) {
        (Some(pane), Some(pid)) => {
            format!("agent `{agent}` restarted {how} in pane {pane} (pid {pid})\n")
        }
        _ => format!(
            "agent `{agent}`: restart requested {how}; not running yet — check `phoenix status {agent}`\n"
        ),
    };
    out(&text);
    Ok(0)
}

pub fn service_install(config: &Path, print: bool) -> anyhow::Result<i32> {
    use crate::supervise::service;
    let spec = spec::load(config)?;
    let exe = crate::process::main_binary().context("cannot find the phoenix binary")?;
    if print {
        let path = std::env::var("PATH").ok();
        out(&service::render_unit(&spec, &exe, path.as_deref()));
        return Ok(0);
    }
    let path = service::install(&spec, &exe)?;
    let name = service::unit_name(&spec);
    out(&format!(
        "wrote {}\nenable and start it with:\n  systemctl --user daemon-reload\n  systemctl --user enable --now {name}\n(to keep it running after you log out: `loginctl enable-linger $USER`)\n",
        path.display()
    ));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human_secs(5), "5s");
        assert_eq!(human_secs(125), "2m");
        assert_eq!(human_secs(3700), "1h1m");
    }
}
