//! `phoenix hook <event>`: called by the agent CLIs on session start, on every tool call and at
//! the end of turns and sessions. It keeps the agent's state current without the agent having to
//! remember anything. Whatever happens inside, a hook exits 0 with valid output for its CLI and
//! logs the problem: the agent is never broken by phoenix.
//!
//! This is the fast path: no async runtime, no Lua, and a heartbeat rewrites state.json only
//! when something changed or `last_active` is older than `HEARTBEAT_WRITE_INTERVAL`.

mod args;
mod background;
mod compact;
pub mod config;
pub mod guard;
mod mcp_toml;
pub mod output;
pub mod payload;
mod prompt;
mod session;
mod subagent;
mod teammate;
mod tool;
pub mod trust;
mod turn;
mod waiting;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::spec::{self, AgentSpec, Cli, Spec};
use crate::state::{AgentDir, AgentState, FleetDir, Retention};
pub use args::{HookArgs, fallback_output, is_hook_invocation};
use output::Reply;
use payload::{Outcome, Payload};
pub use prompt::is_phoenix_text;
pub use waiting::{WAITING_TYPES, waiting_reason};

/// Payloads are read whole up to this size (a tool response can be large); the rest is
/// drained so that the CLI never sees a broken pipe, and ignored.
const MAX_PAYLOAD: u64 = 64 << 20;

/// A successful tool call refreshes `last_active` in state.json at most this often;
/// tool_use.jsonl records every call.
pub const HEARTBEAT_WRITE_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    SessionStart,
    Prompt,
    Heartbeat,
    ToolError,
    PreTool,
    PreCompact,
    Stop,
    /// The turn ended in an API error (Claude Code's `StopFailure`: prompt too long, overloaded,
    /// rate limited after its own retries); the CLI waits at its prompt.
    TurnFailed,
    /// Codex's legacy `notify` (`agent-turn-complete`), payload as the last argument.
    TurnComplete,
    SessionEnd,
    /// The CLI tells its user something (Claude Code's `Notification`): a permission prompt,
    /// an idle prompt: the agent may wait for a person.
    Notification,
}

impl Event {
    pub const NAMES: [&'static str; 11] = [
        "session-start",
        "prompt",
        "heartbeat",
        "tool-error",
        "pre-tool",
        "pre-compact",
        "stop",
        "turn-failed",
        "turn-complete",
        "session-end",
        "notification",
    ];

    pub fn parse(s: &str) -> Option<Event> {
        Some(match s {
            "session-start" => Event::SessionStart,
            "prompt" => Event::Prompt,
            "heartbeat" => Event::Heartbeat,
            "tool-error" => Event::ToolError,
            "pre-tool" => Event::PreTool,
            "pre-compact" => Event::PreCompact,
            "stop" => Event::Stop,
            "turn-failed" => Event::TurnFailed,
            "turn-complete" => Event::TurnComplete,
            "session-end" => Event::SessionEnd,
            "notification" => Event::Notification,
            _ => return None,
        })
    }
}

/// Run one hook and return the exit code, which is always 0. The answer for the CLI goes to
/// `out` and the problems to `log`: the edge hands in stdout and stderr (only it prints).
pub fn run(
    config: &Path,
    event: &str,
    agent: &str,
    cli: Option<&str>,
    payload_arg: Option<String>,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> i32 {
    let raw = payload_arg.unwrap_or_else(read_stdin);
    let payload = Payload::parse(&raw);
    let mut hook = Hook {
        event_name: event,
        agent,
        cli: cli.and_then(Cli::parse).or_else(|| payload.guess_cli()),
        payload,
        dir: None,
        pending_problem: None,
        log: std::cell::RefCell::new(log),
    };
    // Even a bug in phoenix must not show up as a failed hook: a panic is a logged problem.
    let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook.handle(config)));
    let reply = match handled {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => {
            hook.problem(&e);
            Reply::Nothing
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            hook.problem(&format!("internal error (a bug in phoenix): {what}"));
            Reply::Nothing
        }
    };
    let text = output::render(hook.cli, &reply);
    // A CLI that stopped listening is not our problem; the exit code stays 0.
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    0
}

fn read_stdin() -> String {
    let mut buf = Vec::new();
    let mut stdin = std::io::stdin().lock();
    let _ = (&mut stdin).take(MAX_PAYLOAD).read_to_end(&mut buf);
    let _ = std::io::copy(&mut stdin, &mut std::io::sink());
    String::from_utf8_lossy(&buf).into_owned()
}

struct Hook<'a> {
    event_name: &'a str,
    agent: &'a str,
    cli: Option<Cli>,
    payload: Payload,
    dir: Option<AgentDir>,
    /// A problem found before the state dir was known, logged once it is.
    pending_problem: Option<String>,
    /// Where problems are said (stderr, handed in by the edge); a cell because the handlers
    /// report problems through `&self`.
    log: std::cell::RefCell<&'a mut dyn Write>,
}

/// What the event handlers need once the spec is loaded.
struct Ctx<'a> {
    spec: &'a Spec,
    agent: &'a AgentSpec,
    dir: &'a AgentDir,
    retention: Retention,
    now: jiff::Timestamp,
}

impl Hook<'_> {
    /// Log a problem to stderr and, when the state dir is known, to hook_errors.jsonl.
    fn problem(&self, message: &str) {
        let _ = writeln!(
            self.log.borrow_mut(),
            "phoenix hook {}: {message}",
            self.event_name
        );
        match &self.dir {
            Some(dir) => dir.record_hook_error(self.event_name, message),
            None => {
                // The wrapper tells its agent where its state lives; use it when the config
                // itself could not be read.
                if let Some(path) = std::env::var_os("PHOENIX_STATE_DIR") {
                    let dir = AgentDir {
                        name: self.agent.to_string(),
                        path: PathBuf::from(path),
                    };
                    // Not into a dir that is not the user's own (nor through a link).
                    if dir.check_usable().is_ok() {
                        dir.record_hook_error(self.event_name, message);
                    }
                }
            }
        }
    }

    /// The fleet's spec; when it does not load, under a wrapper, the last valid copy (which
    /// keeps the state current meanwhile, the problem noted for the log).
    fn load_spec(&mut self, config: &Path) -> Result<Spec, String> {
        // Under its wrapper, the agent's own part of the config (`spec::narrow`) while it is
        // current: a fleet of a thousand agents has a phoenix.toml of a hundred kilobytes,
        // and this runs on every tool call.
        let part = std::env::var_os("PHOENIX_STATE_DIR")
            .filter(|_| std::env::var("PHOENIX_AGENT").is_ok_and(|a| a == self.agent))
            .map(|dir| Path::new(&dir).join(spec::narrow::AGENT_CONFIG));
        if let Some(spec) =
            part.and_then(|part| spec::narrow::load_part_for_hook(config, self.agent, &part))
        {
            return Ok(spec);
        }
        let e = match spec::load_for_hook(config) {
            Ok(spec) => return Ok(spec),
            Err(e) => e,
        };
        let why = format!(
            "{} (run `phoenix validate` for details)",
            first_line(&e.to_string())
        );
        let fallback = std::env::var_os("PHOENIX_STATE_DIR")
            .map(std::path::PathBuf::from)
            .and_then(|d| d.parent()?.parent().map(Path::to_path_buf))
            .and_then(|root| spec::load_last_good_for_hook(config, &root));
        let spec = fallback.ok_or_else(|| why.clone())?;
        self.pending_problem = Some(format!("{why}; used the last valid copy of the config"));
        Ok(spec)
    }

    fn handle(&mut self, config: &Path) -> Result<Reply, String> {
        let Some(event) = Event::parse(self.event_name) else {
            return Err(format!(
                "unknown hook event `{}` (known: {})",
                self.event_name,
                Event::NAMES.join(", ")
            ));
        };
        // Two agents sharing a workdir both have hooks there; each agent's CLI runs with
        // PHOENIX_AGENT set by its wrapper, so the other agent's hooks stand aside.
        if let Ok(running) = std::env::var("PHOENIX_AGENT")
            && !running.is_empty()
            && running != self.agent
        {
            return Ok(Reply::Nothing);
        }
        let spec = self.load_spec(config)?;
        let agent = spec.agent(self.agent).ok_or_else(|| {
            format!(
                "agent `{}` is not declared in `{}`",
                self.agent,
                spec.file.display()
            )
        })?;
        self.cli = self.cli.or(Some(agent.cli));
        let dir = FleetDir::new(&spec.fleet.state_dir).agent(&agent.name);
        // Two stats on the hot path (a real dir, the user's own, in a state dir of theirs);
        // creating it (0700, parents too) only when missing.
        dir.ensure_usable()
            .map_err(|e| format!("cannot use state dir `{}`: {e}", dir.path.display()))?;
        self.dir = Some(dir.clone());
        if let Some(problem) = &self.payload.problem {
            self.problem(problem);
        }
        if let Some(problem) = self.pending_problem.take() {
            self.problem(&problem);
        }
        let ctx = Ctx {
            spec: &spec,
            agent,
            dir: &dir,
            retention: Retention::from(&spec.thresholds),
            now: jiff::Timestamp::now(),
        };
        // A hook from inside one of Claude Code's background sessions (`claude --bg` run in
        // the agent's workdir) is the job's, never the agent's (hooks/background.rs).
        let env = |key: &str| std::env::var(key).ok();
        if let Some(job) = self.cli.and_then(|cli| {
            cli.adapter()
                .background_job_of_hook(&env, self.payload.session_id())
        }) {
            return Ok(self.in_background_job(&ctx, event, &job));
        }
        // A hook of a teammate (Claude Code's agent teams: a Claude Code of its own in a pane
        // the lead split off, in the agent's workdir) is the agent's work, never its session,
        // turn or prompt (hooks/teammate.rs); its own subagents' hooks are the teammate's.
        // The processes above this hook, read only as far as the adapter asks.
        let mut above = crate::world::procs::ancestors(std::os::unix::process::parent_id());
        if let Some(mate) = self
            .cli
            .and_then(|cli| cli.adapter().teammate_of_hook(&env, &mut above))
        {
            return self
                .in_teammate(&ctx, event, &mate)
                .map_err(|e| e.to_string());
        }
        // A hook from inside a subagent is the agent's work, never the main thread's turn,
        // session or prompt (hooks/subagent.rs has the rules).
        if let Some(sub) = self.payload.subagent() {
            return self
                .in_subagent(&ctx, event, sub)
                .map_err(|e| e.to_string());
        }
        match event {
            Event::SessionStart => Ok(self.session_start(&ctx)),
            Event::Prompt => self.prompt(&ctx),
            Event::Heartbeat => self.tool_done(&ctx, self.tool_outcome()),
            Event::ToolError => {
                let outcome = match self.payload.outcome() {
                    Outcome::Ok => Outcome::Failed("tool failed".into()),
                    other => other,
                };
                self.tool_done(&ctx, outcome)
            }
            Event::PreTool => self.pre_tool(&ctx),
            Event::PreCompact => self.pre_compact(&ctx),
            Event::Stop | Event::TurnComplete => self.stop(&ctx),
            Event::TurnFailed => self.turn_failed(&ctx),
            Event::SessionEnd => self.session_end(&ctx),
            Event::Notification => self.notification(&ctx),
        }
        .map_err(|e| e.to_string())
    }

    /// The agent's state, or a new one (and the problem logged) when it cannot be read.
    fn state_or_new(&self, ctx: &Ctx<'_>) -> AgentState {
        ctx.dir.read_state().unwrap_or_else(|e| {
            self.problem(&e.to_string());
            AgentState::new(&ctx.agent.name)
        })
    }

    fn cwd(&self, ctx: &Ctx<'_>) -> PathBuf {
        self.payload
            .str("cwd")
            .filter(|c| !c.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.agent.workdir.clone())
    }

    /// The payload's transcript: the file that does hold the session, which is not always
    /// the one reported (Gemini after a resume), or where the CLI keeps its session when the
    /// payload names none (Copilot's SessionStart).
    fn transcript(&self) -> Option<String> {
        let Some(path) = self.payload.transcript_path() else {
            let id = self.payload.session_id()?;
            let file = self.cli?.adapter().session_file_of(id)?;
            return Some(file.to_string_lossy().into_owned());
        };
        Some(match self.cli {
            Some(cli) => cli
                .adapter()
                .session_file(Path::new(path))
                .to_string_lossy()
                .into_owned(),
            None => path.to_string(),
        })
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_name_parses() {
        for name in Event::NAMES {
            assert!(Event::parse(name).is_some(), "{name}");
        }
    }
}
