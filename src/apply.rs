//! Executing a plan: one step per change, each recorded in the agent's ops.jsonl. One failing
//! step never stops the others; failures of the runtime get the tiered response (retry once,
//! diagnose, report a concrete next step).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::hooks::config as hook_config;
use crate::plan::{Action, Change, Plan};
use crate::spec::{AgentSpec, Spec};
use crate::state::op::Make;
use crate::state::{self, AgentDir, FleetDir, Op};
use crate::supervise::{EndReason, record};
use crate::world::{Launch, Runtime, RuntimeError, tmux};

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

impl Applier<'_> {
    pub fn apply(&self, plan: &Plan) -> ApplyReport {
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        let steps = plan
            .changes
            .iter()
            .map(|change| {
                let dir = fleet.agent(&change.agent);
                let result = self.step(change, &dir);
                let (ok, detail) = match result {
                    Ok(detail) => (true, detail),
                    Err(e) => (false, e),
                };
                let event: Make = if ok { Op::Apply } else { Op::ApplyFailed };
                if dir.exists() {
                    let _ = dir.record_op(
                        event,
                        json!({"action": action_name(&change.action), "reason": change.reason, "detail": detail}),
                    );
                }
                StepOutcome {
                    agent: change.agent.clone(),
                    symbol: change.symbol,
                    action: action_name(&change.action).to_string(),
                    ok,
                    detail,
                }
            })
            .collect();
        ApplyReport { steps }
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
                ensure_dir(dir)?;
                let launch = self.launch(agent, dir)?;
                let pane = self.tiered(agent, || self.runtime.start(&launch))?;
                Ok(format!("started in pane {pane}"))
            }
            Action::Restart { pane } | Action::Replace { pane, .. } => {
                let agent = agent()?;
                ensure_dir(dir)?;
                if matches!(change.action, Action::Replace { .. }) {
                    // The wrapper being replaced records this as the session's end reason.
                    let _ = record::request_stop(dir, EndReason::DriftReplacement, false);
                }
                let launch = self.launch(agent, dir)?;
                self.tiered(agent, || self.runtime.respawn(pane, &launch))?;
                Ok(format!("restarted in pane {pane}"))
            }
            Action::Stop { pane } | Action::Prune { pane } => {
                if dir.exists() {
                    let _ = record::request_stop(dir, EndReason::OperatorStop, false);
                }
                self.stop_pane(pane)?;
                Ok(format!("stopped pane {pane}"))
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
                let hook_exe = hook_config::hook_binary(&self.exe);
                let desired = hook_config::Target::new(&hook_exe, &self.spec.file, agent).desired();
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
        }
    }

    /// Retry once, like every tmux step; then say how to look closer.
    fn stop_pane(&self, pane: &str) -> Result<(), String> {
        self.runtime
            .stop(pane)
            .or_else(|_| {
                std::thread::sleep(Duration::from_millis(200));
                self.runtime.stop(pane)
            })
            .map_err(|e| {
                format!(
                    "could not stop pane {pane}: {e} (retried once); inspect it with `tmux -L {} list-panes -a` and run `phoenix doctor`",
                    self.spec.fleet.tmux_socket
                )
            })
    }

    /// Record the launch spec (for drift details) and build the runtime's launch.
    fn launch(&self, agent: &AgentSpec, dir: &AgentDir) -> Result<Launch, String> {
        let spec = agent.launch();
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
            argv: wrap_argv(&self.exe, &self.spec.file, &agent.name),
            fingerprint: spec.fingerprint(),
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
                op().map_err(|e| diagnose(&e, agent, &self.spec.fleet.tmux_socket))
            }
        }
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

/// The command a pane runs: this phoenix binary, wrapping the agent.
pub fn wrap_argv(exe: &Path, config: &Path, agent: &str) -> Vec<String> {
    vec![
        exe.to_string_lossy().into_owned(),
        "--config".into(),
        config.to_string_lossy().into_owned(),
        "wrap".into(),
        "--agent".into(),
        agent.into(),
    ]
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::InitState => "init_state",
        Action::Start => "start",
        Action::Restart { .. } => "restart",
        Action::Replace { .. } => "replace",
        Action::Stop { .. } => "stop",
        Action::Prune { .. } => "prune",
        Action::RemoveExtra { .. } => "remove_extra",
        Action::InstallHooks { .. } => "install_hooks",
        Action::RemoveHooks { .. } => "remove_hooks",
    }
}

/// Self-diagnosis after a failed retry: the likely cause and a concrete next step.
fn diagnose(err: &RuntimeError, agent: &AgentSpec, socket: &str) -> String {
    if let Some(why) = diagnose_tmux(err) {
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
        "{err} (retried once); inspect the server with `tmux -L {socket} list-panes -a` and run `phoenix doctor`"
    )
}

/// Agents of this fleet left running on another server (see [`crate::world::elsewhere`]):
/// what to do about them, if there are any.
pub fn legacy_socket_problem(spec: &Spec) -> Option<String> {
    let (socket, agents) = crate::world::elsewhere(spec)?;
    let why = if spec.fleet.legacy_socket.as_deref() == Some(socket.as_str()) {
        "the default socket of earlier phoenix versions"
    } else {
        "this file's default socket under an earlier fleet name"
    };
    Some(format!(
        "agent{} {} of this fleet still run{} on tmux server `{socket}` ({why}); this fleet's server is now `{}`. Keep the old server: set `tmux_socket = \"{socket}\"` under [fleet] in {}; or stop it: `tmux -L {socket} kill-server`. Then run the command again",
        if agents.len() == 1 { "" } else { "s" },
        agents
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", "),
        if agents.len() == 1 { "s" } else { "" },
        spec.fleet.tmux_socket,
        spec.file.display()
    ))
}

/// Why tmux itself cannot work here, with what to do about it: not installed, or no socket
/// directory it can use. `None` when neither explains `err`.
pub fn diagnose_tmux(err: &RuntimeError) -> Option<String> {
    if tmux::on_path().is_none() || matches!(err, RuntimeError::NotInstalled) {
        return Some(format!(
            "{err}; tmux is not installed or not on PATH — install it (e.g. `apt install tmux`) and run `phoenix doctor`"
        ));
    }
    let sockets = tmux::socket_dir();
    let base = sockets.parent().unwrap_or(Path::new("/tmp"));
    if !base.is_dir() {
        return Some(format!(
            "{err}; the tmux socket directory's parent `{}` is not a directory — point TMUX_TMPDIR at a writable directory (or unset it for /tmp)",
            base.display()
        ));
    }
    if !writable(if sockets.exists() { &sockets } else { base }) {
        return Some(format!(
            "{err}; the tmux socket directory `{}` is not writable — fix its permissions or set TMUX_TMPDIR to a writable directory",
            sockets.display()
        ));
    }
    None
}

fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}
