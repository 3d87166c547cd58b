//! Executing a plan: one step per change, each recorded in the agent's ops.jsonl. One failing
//! step never stops the others; failures of the runtime get the tiered response (retry once,
//! diagnose, report a concrete next step).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::hooks::config as hook_config;
use crate::parallel::parallel_map;
use crate::plan::{Action, Change, Plan};
use crate::recovery::{EndReason, execute};
use crate::spec::{AgentSpec, Spec};
use crate::state::op::Make;
use crate::state::{self, AgentDir, FleetDir, Op};
use crate::world::{Launch, Runtime, RuntimeError, Started};

#[derive(Debug, Clone, Serialize)]
pub struct StepOutcome {
    pub agent: String,
    pub symbol: &'static str,
    pub action: String,
    pub ok: bool,
    /// What happened (pane id, …) or, on failure, the diagnosis and the next step.
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub steps: Vec<StepOutcome>,
}

impl ApplyReport {
    pub fn failed(&self) -> usize {
        self.steps.iter().filter(|s| !s.ok).count()
    }
}

pub struct Applier<'a> {
    pub spec: &'a Spec,
    pub runtime: &'a dyn Runtime,
    /// The phoenix binary that panes run as `phoenix wrap`.
    pub exe: PathBuf,
}

/// Workers that prepare starts side by side: each writes and syncs its agent's launch spec,
/// mostly waiting for the disk.
const PREPARE_WORKERS: usize = 8;

impl Applier<'_> {
    /// Carry out `plan`: every change but the starts one by one in plan order, then the starts
    /// together (`Runtime::start_many`: a few runtime calls for the whole fleet), each start
    /// that failed retried on its own once. Each step is recorded in its agent's ops.jsonl.
    pub fn apply(&self, plan: &Plan) -> ApplyReport {
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        let changes = &plan.changes;
        let mut results: Vec<Option<Result<String, String>>> = Vec::with_capacity(changes.len());
        let mut starts: Vec<usize> = Vec::new();
        for (i, change) in changes.iter().enumerate() {
            if matches!(change.action, Action::Start) {
                starts.push(i);
                results.push(None);
            } else if pane_to_stop(&change.action).is_some() {
                // The stops are one kind in plan order, side by side: stopped together when
                // the first is reached (`stop_all`), before what comes after them.
                if i == 0 || pane_to_stop(&changes[i - 1].action).is_none() {
                    let run: Vec<&Change> = changes[i..]
                        .iter()
                        .take_while(|c| pane_to_stop(&c.action).is_some())
                        .collect();
                    results.extend(self.stop_all(&fleet, &run).into_iter().map(Some));
                }
            } else {
                results.push(Some(self.step(change, &fleet.agent(&change.agent))));
            }
        }
        let started = self.start_all(&fleet, starts.iter().map(|&i| &changes[i]).collect());
        for (i, result) in starts.into_iter().zip(started) {
            results[i] = Some(result);
        }
        let steps = parallel_map(
            changes.iter().zip(results).collect(),
            PREPARE_WORKERS,
            |(change, result)| {
                let (ok, detail) = match result.expect("every change has a result") {
                    Ok(detail) => (true, detail),
                    Err(e) => (false, e),
                };
                let dir = fleet.agent(&change.agent);
                let action = change.action.name();
                let event: Make = if ok { Op::Apply } else { Op::ApplyFailed };
                if dir.exists() {
                    let _ = dir.record_op(
                        event,
                        json!({"action": action, "reason": change.reason, "detail": detail}),
                    );
                }
                StepOutcome {
                    agent: change.agent.clone(),
                    symbol: change.symbol,
                    action: action.to_string(),
                    ok,
                    detail,
                }
            },
        );
        ApplyReport { steps }
    }

    /// Start the agents of `changes` (all `Start`s): their state dirs and launch specs
    /// written side by side, then one `start_many`; a start that failed there is retried once
    /// on its own, one never tried there gets the whole tiered treatment.
    fn start_all(&self, fleet: &FleetDir, changes: Vec<&Change>) -> Vec<Result<String, String>> {
        let prepared: Vec<Result<(&AgentSpec, Launch), String>> =
            parallel_map(changes, PREPARE_WORKERS, |change| {
                let agent = self
                    .spec
                    .agent(&change.agent)
                    .ok_or_else(|| format!("agent `{}` is not declared", change.agent))?;
                crate::workspace::steps::ready(agent)?;
                let dir = fleet.agent(&change.agent);
                ensure_dir(&dir)?;
                Ok((agent, self.launch(agent, &dir)?))
            });
        // The copy of phoenix.toml hooks fall back to, kept now: otherwise each of the wrappers
        // starting at once finds it missing and validates and writes it again.
        if prepared.iter().any(Result::is_ok) {
            let _ = crate::spec::remember_good(self.spec);
        }
        let launches: Vec<Launch> = prepared
            .iter()
            .filter_map(|p| p.as_ref().ok().map(|(_, l)| l.clone()))
            .collect();
        let mut started = self.runtime.start_many(&launches).into_iter();
        prepared
            .into_iter()
            .map(|p| {
                let (agent, launch) = p?;
                let pane = match started.next().unwrap_or(Started::NotTried) {
                    Started::Pane(pane) => Ok(pane),
                    Started::Failed(_) => {
                        std::thread::sleep(Duration::from_millis(200));
                        self.runtime
                            .start(&launch)
                            .map_err(|e| diagnose(self.runtime, &e, agent))
                    }
                    Started::NotTried => self.tiered(agent, || self.runtime.start(&launch)),
                }?;
                Ok(format!("started in pane {pane}"))
            })
            .collect()
    }

    fn step(&self, change: &Change, dir: &AgentDir) -> Result<String, String> {
        let agent = || {
            self.spec
                .agent(&change.agent)
                .ok_or_else(|| format!("agent `{}` is not declared", change.agent))
        };
        match &change.action {
            Action::InitState => {
                ensure_dir(dir)?;
                Ok(format!("created {}", dir.path.display()))
            }
            Action::Start => {
                let agent = agent()?;
                crate::workspace::steps::ready(agent)?;
                ensure_dir(dir)?;
                let launch = self.launch(agent, dir)?;
                let pane = self.tiered(agent, || self.runtime.start(&launch))?;
                Ok(format!("started in pane {pane}"))
            }
            Action::Restart { pane } | Action::Replace { pane, .. } => {
                let agent = agent()?;
                crate::workspace::steps::ready(agent)?;
                ensure_dir(dir)?;
                if matches!(change.action, Action::Replace { .. }) {
                    // The wrapper being replaced records this as the session's end reason.
                    let _ = execute::request_stop(dir, EndReason::DriftReplacement, false);
                }
                let launch = self.launch(agent, dir)?;
                self.tiered(agent, || self.runtime.respawn(pane, &launch))?;
                Ok(format!("restarted in pane {pane}"))
            }
            Action::Stop { pane } | Action::Prune { pane } | Action::Retire { pane } => {
                let saved = self.before_stop(change, dir);
                self.stop_pane(pane)?;
                Ok(format!("stopped pane {pane}{saved}"))
            }
            // No stop request: the agent's state dir belongs to the pane that stays.
            Action::RemoveExtra { pane, keep } => {
                self.stop_pane(pane)?;
                Ok(format!("removed pane {pane} (the agent runs in {keep})"))
            }
            // Merged again from the file as it is now, not written from the plan: a user's
            // edit between plan and apply is kept.
            Action::InstallHooks { path, .. } => {
                let agent = agent()?;
                crate::workspace::steps::ready(agent)?;
                let hook_exe = hook_config::hook_binary(&self.exe);
                // Made for the CLI version the plan saw (cached: not asked again).
                let version =
                    crate::world::cli_version::installed(agent, &self.spec.fleet.state_dir)
                        .and_then(|v| v.version);
                let desired = hook_config::Target::new(&hook_exe, &self.spec.file, agent, version)
                    .desired_for(path);
                ensure_dir(dir)?;
                let detail =
                    hook_config::write_file(path, &agent.name, desired.as_ref(), Some(&dir.path))?;
                dir.record_installed_hook(path, true)
                    .map_err(|e| format!("{detail}, but {e}"))?;
                Ok(detail)
            }
            Action::RemoveHooks { path, .. } => {
                let backup = dir.exists().then_some(dir.path.as_path());
                let detail = hook_config::write_file(path, &change.agent, None, backup)?;
                if dir.exists() {
                    dir.record_installed_hook(path, false)
                        .map_err(|e| format!("{detail}, but {e}"))?;
                }
                Ok(detail)
            }
            Action::CreateWorktree { .. }
            | Action::SwitchWorktree { .. }
            | Action::RemoveWorktree { .. } => worktree_step(&change.action, &change.agent, dir),
        }
    }

    /// Stop the panes of `changes` (each a `Stop`, `Prune` or `RemoveExtra`): each agent told
    /// why first (as `step` does), then one `stop_many`; a pane it could not stop gets the
    /// retry of `stop_pane`.
    fn stop_all(&self, fleet: &FleetDir, changes: &[&Change]) -> Vec<Result<String, String>> {
        let panes: Vec<&str> = changes
            .iter()
            .map(|c| pane_to_stop(&c.action).expect("only stops are batched"))
            .collect();
        // No stop request for a second pane: the agent's state dir belongs to the pane that
        // stays.
        let saved: Vec<String> = changes
            .iter()
            .map(|change| match change.action {
                Action::RemoveExtra { .. } => String::new(),
                _ => self.before_stop(change, &fleet.agent(&change.agent)),
            })
            .collect();
        let stopped = self.runtime.stop_many(&panes);
        changes
            .iter()
            .zip(panes)
            .zip(stopped)
            .zip(saved)
            .map(|(((change, pane), result), saved)| {
                if result.is_err() {
                    self.stop_pane(pane)?;
                }
                Ok(match &change.action {
                    Action::RemoveExtra { keep, .. } => {
                        format!("removed pane {pane} (the agent runs in {keep})")
                    }
                    _ => format!("stopped pane {pane}{saved}"),
                })
            })
            .collect()
    }

    /// Before an agent's pane is stopped: a retired item's agent saves its handoff, and its
    /// wrapper is told the stop is on purpose. What was saved, for the step's detail.
    fn before_stop(&self, change: &Change, dir: &AgentDir) -> String {
        if !dir.exists() {
            return String::new();
        }
        let mut saved = String::new();
        if matches!(change.action, Action::Retire { .. })
            && let Some(retired) = self.spec.retired.iter().find(|r| r.agent == change.agent)
        {
            saved = match crate::continuity::retire_handoff(
                self.spec,
                &retired.agent,
                retired.cli,
                &change.reason,
            ) {
                Ok(h) => format!(", handoff {} saved", h.id),
                Err(e) => format!(", but no handoff: {e}"),
            };
        }
        let _ = execute::request_stop(dir, EndReason::OperatorStop, false);
        saved
    }

    /// Retry once, like every runtime step; then say how to look closer.
    fn stop_pane(&self, pane: &str) -> Result<(), String> {
        self.runtime
            .stop(pane)
            .or_else(|_| {
                std::thread::sleep(Duration::from_millis(200));
                self.runtime.stop(pane)
            })
            .map_err(|e| {
                format!(
                    "could not stop pane {pane}: {e} (retried once); inspect it with {} and run `phoenix doctor`",
                    self.runtime.inspect_hint()
                )
            })
    }

    /// Record the launch spec (for drift details) and build the runtime's launch.
    fn launch(&self, agent: &AgentSpec, dir: &AgentDir) -> Result<Launch, String> {
        let spec = agent.launch();
        // The agent's own part of phoenix.toml: its wrapper reads that, not the whole fleet's
        // file (and its sandbox shows it in place of phoenix.toml).
        let part = crate::spec::narrow::write_part(&self.spec.file, &agent.name, &dir.path);
        // A sandbox that does not hold is never started: not with holes, not without it.
        crate::sandbox::verify::passed_for_start(self.spec, agent)
            .map_err(|e| format!("not started: {e}"))?;
        // One writer per agent at a time (the apply); the file is a `JsonFile` for its rollback.
        state::JsonFile::new(dir, state::STARTED_SPEC, "started_spec")
            .save_locked(&spec)
            .map_err(|e| e.to_string())?;
        Ok(Launch {
            fleet: self.spec.fleet.id.clone(),
            agent: agent.name.clone(),
            session: agent.session.clone(),
            window: agent.window.clone(),
            workdir: agent.workdir.clone(),
            argv: wrap_argv(&self.exe, &self.spec.file, &agent.name, part.as_deref()),
            fingerprint: spec.fingerprint(),
            tap: agent
                .tap
                .then(|| tap_argv(&self.exe, &self.spec.file, &agent.name)),
        })
    }

    /// Retry once; if it still fails, find out why and say what to do about it.
    fn tiered<T>(
        &self,
        agent: &AgentSpec,
        mut op: impl FnMut() -> Result<T, RuntimeError>,
    ) -> Result<T, String> {
        match op() {
            Ok(v) => Ok(v),
            Err(_) => {
                std::thread::sleep(Duration::from_millis(200));
                op().map_err(|e| diagnose(self.runtime, &e, agent))
            }
        }
    }
}

/// A worktree change, carried out by `workspace::steps` (which looks again before it acts).
/// The pane a change stops, for the changes that only stop one.
fn pane_to_stop(action: &Action) -> Option<&str> {
    match action {
        Action::Stop { pane }
        | Action::Prune { pane }
        | Action::Retire { pane }
        | Action::RemoveExtra { pane, .. } => Some(pane),
        _ => None,
    }
}

fn worktree_step(action: &Action, agent: &str, dir: &AgentDir) -> Result<String, String> {
    use crate::workspace::{Recorded, steps};
    match action {
        Action::CreateWorktree {
            repo,
            path,
            branch,
            base,
            ..
        } => steps::create(
            dir,
            &steps::Create {
                agent,
                repo,
                path,
                branch,
                base,
            },
        ),
        Action::SwitchWorktree {
            repo,
            path,
            branch,
            base,
            ..
        } => steps::switch(path, branch, base, repo),
        Action::RemoveWorktree {
            repo,
            path,
            branch,
            base,
            force,
        } => {
            let rec = Recorded {
                agent: agent.to_string(),
                repo: repo.clone(),
                path: path.clone(),
                branch: branch.clone(),
                base: base.clone(),
            };
            steps::remove(dir, &rec, *force)
        }
        _ => Err("not a worktree change".into()),
    }
}

fn ensure_dir(dir: &AgentDir) -> Result<(), String> {
    dir.ensure().map_err(|e| {
        format!(
            "cannot create state dir {}: {e} (check the permissions of `state_dir`)",
            dir.path.display()
        )
    })
}

/// The program a pane runs to wrap its agent and to tap its output: `phoenix-wrap` beside
/// this phoenix binary (the small one, see `cli::wrapper_main`); `phoenix` itself when it is
/// not there.
pub fn wrapper_program(exe: &Path) -> std::path::PathBuf {
    crate::process::companion(exe, "-wrap")
}

/// The command a pane runs: the [`wrapper_program`], wrapping the agent.
pub fn wrap_argv(exe: &Path, config: &Path, agent: &str, part: Option<&Path>) -> Vec<String> {
    let mut argv = phoenix_argv(&wrapper_program(exe), config, "wrap", agent);
    if let Some(part) = part {
        argv.extend(["--part".into(), part.to_string_lossy().into_owned()]);
    }
    argv
}

/// The tap that reads an agent's pane (`phoenix tap`), to which the runtime appends the pid
/// of the pane's process: the wrapper it hands the pane's output to.
pub fn tap_argv(exe: &Path, config: &Path, agent: &str) -> Vec<String> {
    let mut argv = phoenix_argv(&wrapper_program(exe), config, "tap", agent);
    argv.push("--wrapper".into());
    argv
}

/// `<exe> --config <config> <verb> --agent <agent>`.
fn phoenix_argv(exe: &Path, config: &Path, verb: &str, agent: &str) -> Vec<String> {
    vec![
        exe.to_string_lossy().into_owned(),
        "--config".into(),
        config.to_string_lossy().into_owned(),
        verb.into(),
        "--agent".into(),
        agent.into(),
    ]
}

/// Self-diagnosis after a failed retry: the likely cause and a concrete next step.
fn diagnose(runtime: &dyn Runtime, err: &RuntimeError, agent: &AgentSpec) -> String {
    if let Some(why) = runtime.diagnose(err) {
        return why;
    }
    if !agent.workdir.is_dir() {
        return format!(
            "{err}; workdir `{}` does not exist — create it or fix `workdir` for agent `{}`",
            agent.workdir.display(),
            agent.name
        );
    }
    format!(
        "{err} (retried once); inspect the server with {} and run `phoenix doctor`",
        runtime.inspect_hint()
    )
}

/// Observe, plan and apply on a test runtime, as `phoenix apply --yes` does: for the unit tests
/// of apply and of what builds on it (the watchdog).
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::plan::{self, PlanOptions};
    use crate::world;

    /// The plan `phoenix apply` makes of `runtime` as it is now (no hook files).
    pub(crate) fn plan_now(spec: &Spec, runtime: &dyn Runtime, prune: bool) -> Plan {
        let world = world::observe(spec, runtime).unwrap();
        let options = PlanOptions {
            prune,
            hooks_exe: None,
            force_remove_worktrees: false,
        };
        plan::diff(spec, &world, &options)
    }

    /// Carry `plan` out with panes that run `/usr/bin/phoenix wrap`.
    pub(crate) fn apply_plan(spec: &Spec, runtime: &dyn Runtime, plan: &Plan) -> ApplyReport {
        Applier {
            spec,
            runtime,
            exe: "/usr/bin/phoenix".into(),
        }
        .apply(plan)
    }

    /// Observe, plan and apply once.
    pub(crate) fn apply_once(spec: &Spec, runtime: &dyn Runtime, prune: bool) -> ApplyReport {
        apply_plan(spec, runtime, &plan_now(spec, runtime, prune))
    }
}

/// Apply on the fake runtime: which panes a plan starts, stops and leaves alone, in
/// milliseconds and without a server.
#[cfg(test)]
mod tests {
    use super::testing::{apply_once, apply_plan, plan_now};
    use super::*;
    use crate::world::Tag;
    use crate::world::fake::{Call, FakeRuntime};

    use crate::world::fake::unit_fleet as fleet_spec;

    fn started(fake: &FakeRuntime) -> Vec<String> {
        fake.changes()
            .into_iter()
            .filter_map(|c| match c {
                Call::Start { agent, .. } => Some(agent),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn apply_starts_each_declared_agent_once_tagged_for_its_fleet() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = fleet_spec(tmp.path(), &["one", "two"]);
        let fake = FakeRuntime::new();
        let report = apply_once(&spec, &fake, false);
        assert_eq!(report.failed(), 0, "{report:?}");
        assert_eq!(started(&fake), ["one", "two"]);
        for pane in fake.panes() {
            assert_eq!(pane.tags.get(&Tag::Fleet), Some(&spec.fleet.id));
            let part = FleetDir::new(&spec.fleet.state_dir)
                .agent(&pane.window)
                .file(crate::spec::narrow::AGENT_CONFIG);
            assert_eq!(
                pane.argv[1..],
                [
                    "--config",
                    &spec.file.to_string_lossy(),
                    "wrap",
                    "--agent",
                    &pane.window,
                    "--part",
                    &part.to_string_lossy(),
                ]
                .map(String::from)[..],
                "{pane:?}"
            );
            // The wrapper reads its own part of phoenix.toml, which reads as its agent.
            let own =
                crate::spec::narrow::load_for_agent(&spec.file, &pane.window, Some(&part)).unwrap();
            assert_eq!(own.agents.len(), 1, "{pane:?}");
            assert_eq!(own.agents[0].name, pane.window);
        }
        // The launch spec is on disk for drift details.
        let dir = FleetDir::new(&spec.fleet.state_dir).agent("one");
        assert!(dir.file(state::STARTED_SPEC).is_file());
    }

    #[test]
    fn a_second_apply_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = fleet_spec(tmp.path(), &["one", "two"]);
        let fake = FakeRuntime::new();
        apply_once(&spec, &fake, false);
        fake.clear_calls();
        let report = apply_once(&spec, &fake, false);
        assert!(report.steps.is_empty(), "{report:?}");
        assert_eq!(fake.changes(), []);
    }

    #[test]
    fn a_dead_pane_is_restarted_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = fleet_spec(tmp.path(), &["one"]);
        let fake = FakeRuntime::new();
        apply_once(&spec, &fake, false);
        let pane = fake.panes()[0].id.clone();
        fake.kill(&pane, 9);
        fake.clear_calls();
        let report = apply_once(&spec, &fake, false);
        assert_eq!(report.failed(), 0, "{report:?}");
        assert_eq!(
            fake.changes(),
            [Call::Respawn {
                agent: "one".into(),
                pane: pane.clone()
            }]
        );
        assert!(!fake.pane(&pane).unwrap().dead);
    }

    #[test]
    fn prune_removes_only_this_fleets_undeclared_panes() {
        let tmp = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::new();
        apply_once(&fleet_spec(tmp.path(), &["keep", "gone"]), &fake, false);
        // Another fleet on the same server, with an agent of the same name, and a pane made
        // by hand.
        let theirs = fake.add_pane(
            "phoenix",
            "gone",
            &[(Tag::Fleet, "other-0123abcd"), (Tag::Agent, "gone")],
        );
        let by_hand = fake.add_pane("mine", "shell", &[]);
        let spec = fleet_spec(tmp.path(), &["keep"]);
        let ours = fake
            .panes()
            .into_iter()
            .find(|p| p.tags.get(&Tag::Agent).map(String::as_str) == Some("gone"))
            .unwrap()
            .id;
        fake.clear_calls();
        // Without --prune nothing goes.
        apply_once(&spec, &fake, false);
        assert_eq!(fake.changes(), []);
        let report = apply_once(&spec, &fake, true);
        assert_eq!(report.failed(), 0, "{report:?}");
        assert_eq!(fake.changes(), [Call::Stop { pane: ours }]);
        let left: Vec<String> = fake.panes().into_iter().map(|p| p.id).collect();
        assert!(
            left.contains(&theirs) && left.contains(&by_hand),
            "{left:?}"
        );
    }

    #[test]
    fn a_failing_runtime_is_retried_once_and_the_step_says_where_to_look() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = fleet_spec(tmp.path(), &["one"]);
        let fake = FakeRuntime::new();
        // Observed fine, then every call fails.
        let plan = plan_now(&spec, &fake, false);
        fake.set_failing(Some("server exited unexpectedly"));
        let report = apply_plan(&spec, &fake, &plan);
        let step = report.steps.iter().find(|s| s.action == "start").unwrap();
        assert!(!step.ok);
        assert!(step.detail.contains("retried once"), "{}", step.detail);
        assert!(
            step.detail.contains(&fake.inspect_hint()),
            "{}",
            step.detail
        );
        assert_eq!(started(&fake), ["one", "one"]);
    }
}
