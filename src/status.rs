//! The fleet as an operator sees it: one row per agent — state, health, pid, uptime, last
//! activity, open loops, crashes, how fresh its saved context is, and its tokens and cost
//! today. `phoenix status`, the HTTP API and the dashboard all print these rows. Read-only:
//! nothing here writes a file.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::continuity::handoff;
use crate::error::Error;
use crate::spec::Spec;
use crate::state::{
    self, AgentDir, FleetDir,
    store::{Loaded, read_state_file},
};
use crate::world::{self, Runtime, World};

/// Observe the fleet's world, tiered like every runtime step: retry once, then find out why
/// and say what to do.
pub fn observe(spec: &Spec, runtime: &dyn Runtime) -> crate::error::Result<World> {
    let mut world = observe_by(spec, runtime, world::observe)?;
    // The sandboxes and their last verification, for the plan (world knows no sandbox).
    world.sandboxes = spec
        .agents
        .iter()
        .filter_map(|a| crate::sandbox::report(spec, a).map(|s| (a.name.clone(), s)))
        .collect();
    Ok(world)
}

/// `observe` of only what the rows need (no hook files, no launch specs): for `/metrics`.
pub fn observe_lean(spec: &Spec, runtime: &dyn Runtime) -> crate::error::Result<World> {
    observe_by(spec, runtime, world::observe_status)
}

fn observe_by(
    spec: &Spec,
    runtime: &dyn Runtime,
    look: fn(&Spec, &dyn Runtime) -> Result<World, world::RuntimeError>,
) -> crate::error::Result<World> {
    look(spec, runtime)
        .or_else(|_| {
            std::thread::sleep(Duration::from_millis(200));
            look(spec, runtime)
        })
        .map_err(|e| match runtime.diagnose(&e) {
            Some(why) if matches!(e, world::RuntimeError::NotInstalled) => Error::msg(why),
            Some(why) => Error::msg(format!("cannot observe {}: {why}", runtime.location())),
            None => Error::Context {
                context: format!(
                    "cannot observe {} (retried once; run `phoenix doctor`)",
                    runtime.location()
                ),
                source: Box::new(e),
            },
        })
}

/// The fleet's status as one JSON document: what `phoenix status --json` prints and
/// `GET /api/status` returns, the same shape (one function renders both; the API puts
/// `observed_age_ms` first).
/// `daemon_pid`: the `phoenix run` supervising this fleet, if any.
pub fn document(
    spec: &Spec,
    world: &World,
    rows: &[AgentStatus],
    daemon_pid: Option<u32>,
) -> Value {
    serde_json::json!({
        "format_version": crate::plan::FORMAT_VERSION,
        "fleet": spec.fleet.name,
        "observed_at": jiff::Timestamp::from_second(world.observed_at).ok().map(|t| t.to_string()),
        // How old the observation was when it was served: `phoenix serve` shares one among
        // its readers (`serve::snapshot`); the command line observes now.
        "observed_age_ms": 0,
        "server_running": world.server_running,
        "tmux_socket": spec.fleet.socket,
        "daemon": {"running": daemon_pid.is_some(), "pid": daemon_pid},
        // Set from `phoenix down` until the operator's `phoenix apply`: nothing is revived.
        "taken_down_at": crate::state::down::since(&crate::state::FleetDir::new(&spec.fleet.state_dir)),
        "agents": rows,
    })
}

impl AgentStatus {
    /// In safe mode: its wrapper waits in safe mode, or a crash limit or a diagnosis put it
    /// there while the CLI still runs (then its health is `down`).
    pub fn in_safe_mode(&self) -> bool {
        self.state == "safe-mode" || (self.state == "running" && self.health == "down")
    }

    /// Declared and enabled, yet not running and not on its way back: dead, never started,
    /// in safe mode (a crash limit or a diagnosis stopped it) or stopped.
    pub fn is_down(&self) -> bool {
        self.declared && self.enabled && matches!(self.health, "down" | "stopped")
    }
}

/// One agent's row.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentStatus {
    pub agent: String,
    pub declared: bool,
    pub enabled: bool,
    /// declared (not started), running, starting, cooldown, safe-mode, dead, stopped (clean
    /// exit), moved (the operator placed it on another machine), disabled, pruned-pending
    /// (running but no longer declared)
    pub state: &'static str,
    /// healthy, warning (the watchdog's last pass found something), recovering (being
    /// restarted), down (dead, in safe mode, not started), stopped (on purpose), disabled,
    /// unmanaged (no longer declared)
    pub health: &'static str,
    /// What the watchdog's last pass found (`silence`, `error_cascade`, …), confirmed or not.
    pub watchdog: Vec<&'static str>,
    pub pane: Option<String>,
    pub pid: Option<u32>,
    pub uptime_secs: Option<i64>,
    pub last_activity: Option<String>,
    pub cli: Option<String>,
    /// state.json's status: working, idle, stopped.
    pub status: Option<String>,
    pub current_task: Option<String>,
    pub open_loops: usize,
    pub stale_loops: usize,
    /// Crashes within the agent's `crash_window`.
    pub crashes: usize,
    /// Runs of its CLI started again after one ended (a crash, a kill, a restart, a new
    /// pane), as the end of its ops.jsonl records them ([`runs`]).
    pub restarts: usize,
    /// How its last run ended (its last `agent_exit`).
    pub last_exit: Option<LastExit>,
    pub max_crashes: Option<u32>,
    pub context: Context,
    /// Tokens and estimated cost today (the local day), from its usage ledger and what its
    /// session files gained since (read, not written); `None` without a state dir.
    pub usage_today: Option<crate::usage::Today>,
    /// Its git worktree (`workspace`): branch, ahead/behind its base, changed files. Not in
    /// a lean row (a `/metrics` scrape runs no git).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::workspace::WorktreeStatus>,
    /// Messages in its inbox not yet delivered (`phoenix inbox AGENT` lists them).
    pub messages_pending: usize,
    /// What the agent waits for, when it waits for a person: its CLI said so (a permission
    /// prompt), or the watchdog saw it (an approval prompt, idle with open loops). Only for
    /// a running agent.
    pub needs_input: Option<crate::state::NeedsInput>,
    /// Crash history and the last stop reason; only when one agent is asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supervision: Option<crate::recovery::record::Summary>,
    /// Claude Code's background sessions (`claude --bg`) that ran the agent's hooks, newest
    /// first, as each job's own state file says; only when one Claude Code agent is asked
    /// for. Never the agent's own turns: a job's end or failure changes nothing of the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_jobs: Option<Vec<crate::agent_cli::claude::background::BackgroundJob>>,
    /// Its sandbox (`sandbox = "NAME"`): the profile, what it shows, the last `sandbox
    /// verify`; only when one sandboxed agent is asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::Status>,
    /// What its next start will be (a resume of which session, or fresh and why); only
    /// when one declared agent is asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start: Option<crate::supervise::wrap::NextStart>,
    /// The session's transcript as state.json names it: `/metrics` counts its tokens. Not in
    /// the JSON (a path in the user's home is no status).
    #[serde(skip)]
    pub transcript: Option<String>,
}

/// How fresh an agent's saved context is: what a new session would get back, and how much
/// happened since it was written.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Context {
    pub handoffs: usize,
    pub last_handoff: Option<String>,
    pub last_handoff_id: Option<String>,
    /// brief.md's modification time.
    pub last_brief: Option<String>,
    pub has_ledger: bool,
    /// Tool calls since the newer of the last handoff and the last brief (all of them when
    /// there is neither).
    pub tool_calls_since: u64,
    /// True when tool_use.jsonl is larger than what is read: `tool_calls_since` is at least
    /// that many.
    pub tool_calls_capped: bool,
    /// Compactions of the current session (state.json).
    pub compactions: u32,
    /// 0–100: 100 is a context saved just now with nothing done since.
    pub score: u8,
    /// fresh (score ≥ 70), aging (≥ 40), stale, or none (nothing saved at all).
    pub level: &'static str,
}

/// How much of tool_use.jsonl is read to count the calls since a checkpoint.
const TOOL_TAIL_BYTES: u64 = 256 * 1024;

impl Context {
    /// Score and level from the facts: a day without a checkpoint, 200 tool calls since one or
    /// two compactions each take a large part of the meter.
    fn rate(&mut self, now: jiff::Timestamp) {
        let checkpoint = [self.last_handoff.as_deref(), self.last_brief.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(state::agent::parse_timestamp)
            .max();
        let Some(checkpoint) = checkpoint else {
            self.score = 0;
            self.level = if self.has_ledger { "stale" } else { "none" };
            return;
        };
        let hours = (now.as_second() - checkpoint.as_second()).max(0) as f64 / 3600.0;
        let age = (hours * 40.0 / 24.0).min(40.0);
        let calls = (self.tool_calls_since as f64 * 40.0 / 200.0).min(40.0);
        let compactions = (f64::from(self.compactions) * 10.0).min(20.0);
        self.score = (100.0 - age - calls - compactions)
            .round()
            .clamp(0.0, 100.0) as u8;
        self.level = match self.score {
            70.. => "fresh",
            40.. => "aging",
            _ => "stale",
        };
    }
}

/// The facts about one agent from its state dir, read without repairing anything; a file the
/// dir's listing does not have is not looked for.
fn context(
    dir: &AgentDir,
    listed: &state::Listing,
    state: Option<&state::AgentState>,
    now: jiff::Timestamp,
) -> Context {
    let ids = if listed.may_have(state::handoff::DIR) {
        handoff::list_ids(dir)
    } else {
        Vec::new()
    };
    let last = ids.last().and_then(|id| handoff::load(dir, id));
    let mtime = |name: &str| {
        if !listed.may_have(name) {
            return None;
        }
        std::fs::metadata(dir.file(name))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| jiff::Timestamp::try_from(t).ok())
    };
    let last_brief = mtime(state::BRIEF);
    let last_handoff = last
        .as_ref()
        .and_then(|h| state::agent::parse_timestamp(&h.created_at));
    let since = last_brief.into_iter().chain(last_handoff).max();
    let (tool_calls_since, tool_calls_capped) = if listed.may_have(state::TOOL_USE) {
        tool_calls_after(dir, since)
    } else {
        (0, false)
    };
    let mut context = Context {
        handoffs: ids.len(),
        last_handoff: last_handoff.map(state::rfc3339),
        last_handoff_id: last.map(|h| h.id),
        last_brief: last_brief.map(state::rfc3339),
        has_ledger: listed.may_have(crate::continuity::ledger::LEDGER)
            && dir.file(crate::continuity::ledger::LEDGER).exists(),
        tool_calls_since,
        tool_calls_capped,
        compactions: state.map(|s| s.compactions).unwrap_or(0),
        score: 0,
        level: "none",
    };
    context.rate(now);
    context
}

/// Tool calls recorded after `since` (every readable one when `None`), from the end of
/// tool_use.jsonl, and whether the count stopped at the part read.
fn tool_calls_after(dir: &AgentDir, since: Option<jiff::Timestamp>) -> (u64, bool) {
    let path = dir.file(state::TOOL_USE);
    let Ok(meta) = std::fs::metadata(&path) else {
        return (0, false);
    };
    let text = crate::state::jsonl::tail(&path, TOOL_TAIL_BYTES).unwrap_or_default();
    let mut n = 0;
    for line in text.lines().rev() {
        let ts = serde_json::from_str::<Value>(line).ok().and_then(|v| {
            v.get("ts")
                .and_then(Value::as_str)
                .and_then(state::agent::parse_timestamp)
        });
        match (ts, since) {
            (Some(ts), Some(since)) if ts <= since => return (n, false),
            (None, _) => continue,
            _ => n += 1,
        }
    }
    (n, meta.len() > TOOL_TAIL_BYTES)
}

/// How a run of the agent's CLI ended: its exit code or the signal that ended it, and why
/// (`crash`, `clean_exit`, `operator_restart`, …; see docs/recovery.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastExit {
    pub ts: Option<String>,
    pub code: Option<i64>,
    /// The signal's name (`SIGKILL`), when a signal ended it.
    pub signal: Option<String>,
    pub reason: Option<String>,
}

impl LastExit {
    /// `SIGKILL (crash)`, `exit 0 (clean_exit)`.
    pub fn short(&self) -> String {
        let how = match (&self.signal, self.code) {
            (Some(sig), _) => sig.clone(),
            (None, Some(code)) => format!("exit {code}"),
            (None, None) => "-".into(),
        };
        match &self.reason {
            Some(reason) => format!("{how} ({reason})"),
            None => how,
        }
    }
}

/// How much of the end of ops.jsonl a status row reads for its runs.
const RUNS_TAIL_BYTES: u64 = 256 * 1024;

/// The restarts and the last exit that the end of the agent's ops.jsonl records: one bounded
/// read, never through a link.
pub fn runs(dir: &AgentDir) -> (usize, Option<LastExit>) {
    let Ok(tail) = crate::state::bounded::read_tail(
        &dir.file(state::OPS_LOG),
        RUNS_TAIL_BYTES,
        crate::state::bounded::Links::Refuse,
    ) else {
        return (0, None);
    };
    let mut restarts = 0;
    let mut ended = false;
    let mut last = None;
    for line in state::op::parse(&tail.lines_text()) {
        match &line.op {
            state::Op::AgentStart(_) if std::mem::take(&mut ended) => restarts += 1,
            state::Op::AgentExit(_) => {
                ended = true;
                let signal = line.get("signal").as_i64().map(|n| {
                    i32::try_from(n)
                        .ok()
                        .and_then(|n| nix::sys::signal::Signal::try_from(n).ok())
                        .map_or_else(|| format!("signal {n}"), |s| s.as_str().to_string())
                });
                last = Some(LastExit {
                    ts: line.ts.clone(),
                    code: line.get("code").as_i64(),
                    signal,
                    reason: line.get("reason").as_str().map(str::to_string),
                });
            }
            _ => {}
        }
    }
    (restarts, last)
}

/// One row per declared agent, then one per agent that runs but is no longer declared.
pub fn rows(spec: &Spec, world: &World) -> Vec<AgentStatus> {
    rows_with(spec, world, true)
}

/// `rows` without the context meter (the handoffs dir and the tail of tool_use.jsonl of every
/// agent): what a `/metrics` scrape needs, at a fraction of the reads.
pub fn lean_rows(spec: &Spec, world: &World) -> Vec<AgentStatus> {
    rows_with(spec, world, false)
}

fn rows_with(spec: &Spec, world: &World, with_context: bool) -> Vec<AgentStatus> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let now = jiff::Timestamp::now();
    let prices = crate::usage::Prices::new(&spec.prices);
    let mut names: Vec<String> = spec.agent_names().into_iter().map(String::from).collect();
    let mut seen: std::collections::HashSet<String> = names.iter().cloned().collect();
    for (name, _) in world.running_agents() {
        if seen.insert(name.to_string()) {
            names.push(name.to_string());
        }
    }
    // All worktrees at once, in parallel (a `git status` each).
    let mut worktrees = if with_context {
        crate::workspace::statuses(spec)
    } else {
        Default::default()
    };
    let named: Vec<(String, Option<_>)> = names
        .into_iter()
        .map(|name| {
            let worktree = worktrees.remove(&name);
            (name, worktree)
        })
        .collect();
    // A few files per agent: a thousand rows are read on every core.
    let workers = crate::parallel::workers_for(named.len());
    crate::parallel::parallel_map(named, workers, |(name, worktree)| {
        let declared = spec.agent(&name);
        let pane = world.pane_of(&name);
        let obs = world.agents.get(&name);
        let process = pane.and_then(|p| p.agent_process());
        let dir = fleet.agent(&name);
        // One listing of the dir answers which of the files below are there: most agents
        // have few of them, and each missing one cost a stat (issue 34, goal 6).
        let listed = dir.listing_or_unknown();
        let record = {
            use crate::recovery::record::{LEDGER, OLD_CRASHES, OLD_RECOVERIES, OLD_WATCHDOG};
            if [LEDGER, OLD_CRASHES, OLD_RECOVERIES, OLD_WATCHDOG]
                .iter()
                .any(|f| listed.may_have(f))
            {
                crate::recovery::record::load(&dir)
            } else {
                Default::default()
            }
        };
        let state = match (declared, pane) {
            (None, _) => "pruned-pending",
            (Some(a), _) if !a.enabled => "disabled",
            (Some(_), _) if obs.is_some_and(|o| o.fenced.is_some()) && process.is_none() => "moved",
            (Some(_), _) if obs.is_some_and(|o| o.stopped) && process.is_none() => "stopped",
            (Some(_), _) if obs.is_some_and(|o| o.clean_exit) && process.is_none() => "stopped",
            (Some(_), None) => "declared",
            (Some(_), Some(p)) if p.dead => "dead",
            (Some(_), Some(p)) => match (process, p.phase.as_deref()) {
                (Some(_), _) => "running",
                (None, Some("safe")) => "safe-mode",
                (None, Some("cooldown")) => "cooldown",
                (None, _) => "starting",
            },
        };
        let memory = (state == "running").then(|| {
            if listed.may_have(crate::watchdog::MEMORY) {
                crate::watchdog::Memory::load(&dir)
            } else {
                Default::default()
            }
        });
        let watchdog: Vec<&'static str> = memory
            .iter()
            .flat_map(|m| m.pending.iter().map(|c| c.as_str()))
            .collect();
        let health = match state {
            "running" if record.safe_mode.is_some() => "down",
            "running" if watchdog.is_empty() => "healthy",
            "running" => "warning",
            "starting" | "cooldown" => "recovering",
            "stopped" | "moved" => "stopped",
            "disabled" => "disabled",
            "pruned-pending" => "unmanaged",
            _ => "down",
        };
        let agent_state = match listed
            .may_have(state::STATE)
            .then(|| read_state_file(&dir.file(state::STATE)))
        {
            Some(Ok(Loaded::Valid(mut s))) => {
                s.normalize(now, state::Retention::from(&spec.thresholds));
                Some(s)
            }
            _ => None,
        };
        let window = declared.map(|a| a.restart.crash_window.as_secs() as i64);
        let crashes = record
            .crashes
            .iter()
            .filter(|c| window.is_none_or(|w| now.as_second().saturating_sub(c.ts) < w))
            .count();
        let (restarts, last_exit) = if with_context { runs(&dir) } else { (0, None) };
        // A CLI without hooks shows its life only in its pane: what it printed last counts.
        let mut last_activity = obs.and_then(|o| o.last_activity);
        if declared.is_some_and(|a| a.cli == crate::spec::Cli::Custom && a.tap)
            && let Some(printed) = std::fs::symlink_metadata(dir.file(state::pane_log::PANE_LOG))
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
        {
            last_activity = last_activity.max(Some(printed));
        }
        AgentStatus {
            declared: declared.is_some(),
            enabled: declared.is_some_and(|a| a.enabled),
            state,
            health,
            watchdog,
            pane: pane.map(|p| p.id.clone()),
            pid: process.map(|p| p.pid),
            uptime_secs: process.map(|p| (world.observed_at - p.started).max(0)),
            last_activity: last_activity.map(|t| t.to_string()),
            cli: declared.map(|a| a.cli.to_string()),
            status: agent_state.as_ref().map(|s| s.status.to_string()),
            current_task: agent_state.as_ref().and_then(|s| s.current_task.clone()),
            open_loops: agent_state.as_ref().map_or(0, |s| s.open_loops.len()),
            stale_loops: agent_state
                .as_ref()
                .map_or(0, |s| s.open_loops.iter().filter(|l| l.stale).count()),
            crashes,
            restarts,
            last_exit,
            max_crashes: declared.map(|a| a.restart.max_crashes),
            context: if with_context {
                context(&dir, &listed, agent_state.as_ref(), now)
            } else {
                Context::default()
            },
            // A lean row (a `/metrics` scrape) reads no ledger.
            usage_today: if with_context {
                usage_today(&dir, declared.map(|a| a.cli), &prices)
            } else {
                None
            },
            worktree,
            // One stat for an empty inbox.
            messages_pending: if listed.may_have(state::inbox::PENDING) {
                state::inbox::pending(&dir).len()
            } else {
                0
            },
            needs_input: memory.and_then(|m| {
                agent_state
                    .as_ref()
                    .and_then(|s| s.needs_input.clone())
                    .or(m.needs_input)
            }),
            supervision: None,
            background_jobs: None,
            sandbox: None,
            next_start: None,
            transcript: agent_state.as_ref().and_then(|s| s.transcript_path.clone()),
            agent: name,
        }
    })
}

/// Today's usage from the agent's usage ledger and what its session files gained since
/// (read, not written). Without a ledger yet, one is made first, as `phoenix usage` makes
/// it: status and usage read the same ledger (a look without one followed only the current
/// session, and showed 0 tokens after a restart while `usage` counted the earlier ones).
fn usage_today(
    dir: &AgentDir,
    cli: Option<crate::spec::Cli>,
    prices: &crate::usage::Prices,
) -> Option<crate::usage::Today> {
    if !dir.exists() {
        return None;
    }
    let cli = cli.unwrap_or(crate::spec::Cli::Custom);
    let first = !crate::usage::ledger::exists(dir);
    let update = crate::usage::update(dir, cli, first)
        .or_else(|_| crate::usage::update(dir, cli, false))
        .ok()?;
    Some(crate::usage::Today::of(&update, prices))
}

/// One agent's row with its supervision summary (crash history, last stop), or `None` when
/// the agent is neither declared nor running.
pub fn agent(spec: &Spec, world: &World, name: &str) -> Option<AgentStatus> {
    let mut row = rows(spec, world).into_iter().find(|r| r.agent == name)?;
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(name);
    let restart = spec.agent(name).map(|a| &a.restart);
    row.supervision = Some(crate::recovery::record::summary(&dir, restart));
    row.next_start = spec
        .agent(name)
        .map(|a| crate::supervise::wrap::next_start(&dir, a));
    row.background_jobs = spec
        .agent(name)
        .and_then(|a| a.cli.adapter().background_jobs(&dir));
    row.sandbox = spec
        .agent(name)
        .and_then(|a| crate::sandbox::status(spec, a));
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rated(hours_ago: i64, calls: u64, compactions: u32) -> Context {
        let now = jiff::Timestamp::now();
        let mut c = Context {
            last_handoff: Some((now - jiff::SignedDuration::from_hours(hours_ago)).to_string()),
            tool_calls_since: calls,
            compactions,
            ..Context::default()
        };
        c.rate(now);
        c
    }

    #[test]
    fn the_context_meter_falls_with_age_calls_and_compactions() {
        assert_eq!(rated(0, 0, 0).score, 100);
        assert_eq!(rated(0, 0, 0).level, "fresh");
        assert_eq!(rated(24, 0, 0).score, 60);
        assert_eq!(rated(0, 200, 0).level, "aging");
        assert_eq!(rated(48, 400, 2).score, 0);
        assert_eq!(rated(48, 400, 2).level, "stale");
        let mut nothing = Context::default();
        nothing.rate(jiff::Timestamp::now());
        assert_eq!((nothing.score, nothing.level), (0, "none"));
    }
}
