//! Supervision: `phoenix wrap` runs inside each agent's pane and starts the agent CLI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;

use crate::spec::{self, AgentSpec, Spec};
use crate::state::FleetDir;

/// Run the agent in the foreground of this pane and report how it ended.
pub fn wrap(config: &Path, agent_name: &str) -> anyhow::Result<i32> {
    let spec = spec::load(config)?;
    let agent = spec.agent(agent_name).with_context(|| {
        format!(
            "agent `{agent_name}` is not declared in {} (declared: {})",
            spec.file.display(),
            spec.agent_names().join(", ")
        )
    })?;
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(&agent.name);
    dir.ensure()
        .with_context(|| format!("cannot create state dir {}", dir.path.display()))?;

    let argv = command_argv(agent);
    let mut cmd = agent_command(&spec, agent, &argv, &dir.path)?;
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = dir.record_op(
                "spawn_failed",
                json!({"argv": argv, "error": e.to_string()}),
            );
            anyhow::bail!("cannot start `{}` for agent `{}`: {e}", argv[0], agent.name);
        }
    };
    let _ = dir.record_op("agent_start", json!({"argv": argv, "pid": child.id()}));
    let status = child.wait().context("waiting for the agent")?;
    let runtime_ms = started.elapsed().as_millis() as u64;
    use std::os::unix::process::ExitStatusExt;
    let (code, signal) = (status.code(), status.signal());
    let reason = match (code, signal) {
        (Some(0), _) => "clean_exit".to_string(),
        (Some(c), _) => format!("crash (exit code {c})"),
        (_, Some(s)) => format!("crash (signal {s})"),
        _ => "unknown".to_string(),
    };
    let _ = dir.record_op(
        "agent_exit",
        json!({"code": code, "signal": signal, "runtime_ms": runtime_ms, "reason": reason}),
    );
    Ok(code.unwrap_or_else(|| 128 + signal.unwrap_or(0)))
}

/// The agent's argv, rebuilt from its base command every time. A leading `phoenix` means
/// this very binary, so bundled examples work without phoenix on PATH.
pub fn command_argv(agent: &AgentSpec) -> Vec<String> {
    let mut argv = agent.argv.clone();
    if argv.first().map(String::as_str) == Some("phoenix") {
        if let Ok(exe) = std::env::current_exe() {
            argv[0] = exe.to_string_lossy().into_owned();
        }
    }
    argv
}

fn agent_command(
    spec: &Spec,
    agent: &AgentSpec,
    argv: &[String],
    state_dir: &PathBuf,
) -> anyhow::Result<Command> {
    let (program, args) = argv
        .split_first()
        .with_context(|| format!("agent `{}` has an empty command", agent.name))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&agent.workdir)
        .envs(&agent.env)
        .env("PHOENIX_AGENT", &agent.name)
        .env("PHOENIX_CONFIG", &spec.file)
        .env("PHOENIX_STATE_DIR", state_dir);
    Ok(cmd)
}
