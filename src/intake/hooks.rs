//! `on_failed` and `on_done`: an `[[agent_set]]`'s argv templates, run once per event for one
//! of its agents (say, `gh issue edit 7 --add-label agent-failed`), each argument rendered on
//! its own over the agent's item, never through a shell, bounded in time. Each run is a
//! critical event; a marker in the agent's state dir makes it once: claimed before the run
//! (two callers never both run it), cleared when the agent leaves that state.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::spec::{AgentSpec, Spec};
use crate::state::{AgentDir, FleetDir};

/// How long one hook may run.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// The agent entered safe mode.
    Failed,
    /// Its session reported the task done.
    Done,
}

impl Hook {
    fn key(self) -> &'static str {
        match self {
            Hook::Failed => "on_failed",
            Hook::Done => "on_done",
        }
    }

    /// The marker that makes it once (until `reset`).
    pub fn marker(self) -> &'static str {
        match self {
            Hook::Failed => ".intake-on-failed-ran",
            Hook::Done => ".intake-on-done-ran",
        }
    }
}

/// The hook's argv for `agent`, rendered over its item; `None` when the agent is not an
/// agent_set's or its set has no such hook.
pub fn argv(spec: &Spec, agent: &AgentSpec, hook: Hook) -> Option<Result<Vec<String>, String>> {
    let origin = agent.origin.as_ref()?;
    let set = spec.agent_sets.iter().find(|s| s.name == origin.set)?;
    let template = match hook {
        Hook::Failed => set.on_failed.as_ref(),
        Hook::Done => set.on_done.as_ref(),
    }?;
    Some(crate::spec::intake::render_argv(template, origin))
}

/// Run the hook for `agent` unless it already ran since the last [`reset`]. What happened,
/// for the caller to log: `None` when there was nothing to run or it already ran.
pub fn run_once(spec: &Spec, agent: &AgentSpec, hook: Hook) -> Option<Result<String, String>> {
    let argv = argv(spec, agent, hook)?;
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(&agent.name);
    if !claim(&dir, hook) {
        return None;
    }
    let result = argv.and_then(|argv| run(&argv, spec));
    let (reason, action) = match &result {
        Ok(done) => (done.clone(), "ran"),
        Err(e) => (e.clone(), "failed"),
    };
    let origin = agent.origin.as_ref();
    let _ = fleet.record_critical(
        &format!("intake_{}", hook.key()),
        &agent.name,
        &reason,
        action,
        json!({
            "agent_set": origin.map(|o| o.set.as_str()),
            "key": origin.map(|o| o.key.as_str()),
        }),
    );
    Some(result)
}

/// The agent left the state the hook is about (it runs again, its task is a new one): the
/// hook may run again the next time.
pub fn reset(dir: &AgentDir, hook: Hook) {
    let _ = dir.clear_marker(hook.marker());
}

/// Take the marker; false when it is there already (the hook ran, or runs right now).
fn claim(dir: &AgentDir, hook: Hook) -> bool {
    if dir.ensure().is_err() {
        return false;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.file(hook.marker()))
    {
        Ok(mut file) => {
            let _ = file.write_all(jiff::Timestamp::now().to_string().as_bytes());
            true
        }
        Err(_) => false,
    }
}

fn run(argv: &[String], spec: &Spec) -> Result<String, String> {
    use crate::process::RunError;
    let (program, args) = argv.split_first().ok_or("the command is empty")?;
    let mut command = Command::new(program);
    command.args(args).current_dir(&spec.dir);
    let shown = crate::text::shorten(&argv.join(" "), 200);
    match crate::process::run(command, b"", HOOK_TIMEOUT) {
        Ok(done) if done.status.success() => Ok(format!("`{shown}` ran")),
        Ok(done) => Err(format!(
            "`{shown}` failed ({}){}",
            done.describe_status(),
            match done.stderr_line() {
                s if s.is_empty() => String::new(),
                s => format!(": {s}"),
            }
        )),
        Err(RunError::Timeout) => Err(format!(
            "`{shown}` ran longer than {}s and was stopped",
            HOOK_TIMEOUT.as_secs()
        )),
        Err(RunError::Spawn(e)) => Err(format!("cannot start `{program}`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_runs_once_until_reset_with_the_items_fields() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let source = format!(
            "[fleet]\nstate_dir = \"state\"\n[[agent_set]]\nname = \"s\"\nsource = {{ file = \"w.json\" }}\nkey = \"{{{{ item.n }}}}\"\non_done = [\"sh\", \"-c\", \"echo \\\"$0\\\" >> {}\", \"{{{{ item.t }}}}\"]\n[agent_set.template]\nname = \"a-{{{{ item.n }}}}\"\ncommand = \"x\"\n",
            log.display()
        );
        let mut lists = crate::spec::ItemLists::new();
        lists.insert(
            "s".into(),
            serde_json::from_str(r#"[{"n": 1, "t": "$(touch pwned)"}]"#).unwrap(),
        );
        let spec = crate::spec::parse_with_items(
            &source,
            &dir.path().join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
            &lists,
        )
        .unwrap();
        let agent = spec.agent("a-1").unwrap();
        assert!(
            run_once(&spec, agent, Hook::Failed).is_none(),
            "no on_failed"
        );
        assert!(run_once(&spec, agent, Hook::Done).unwrap().is_ok());
        assert!(run_once(&spec, agent, Hook::Done).is_none(), "once");
        reset(
            &FleetDir::new(&spec.fleet.state_dir).agent("a-1"),
            Hook::Done,
        );
        assert!(run_once(&spec, agent, Hook::Done).unwrap().is_ok());
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "$(touch pwned)\n$(touch pwned)\n"
        );
        assert!(!dir.path().join("pwned").exists());
    }
}
