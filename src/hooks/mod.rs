//! `phoenix hook <event>`: called by the agent CLIs on session start, on every tool call and at
//! the end of turns and sessions. It keeps the agent's state current without the agent having to
//! remember anything. Whatever happens inside, a hook exits 0 with valid output for its CLI and
//! logs the problem: the agent is never broken by phoenix.
//!
//! This is the fast path: no async runtime, no Lua, and a heartbeat rewrites state.json only
//! when something changed or `last_active` is older than `HEARTBEAT_WRITE_INTERVAL`.

pub mod config;
pub mod guard;
pub mod output;
pub mod payload;
pub mod trust;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::spec::{self, AgentSpec, Cli, Spec};
use crate::state::Op;
use crate::state::bounded::{self, Links};
use crate::state::{self, AgentDir, AgentState, FleetDir, Retention, StateError, Status};
use output::Reply;
use payload::{Outcome, Payload};

/// Payloads are read whole up to this size (a tool response can be large); the rest is
/// drained so that the CLI never sees a broken pipe, and ignored.
const MAX_PAYLOAD: u64 = 64 << 20;

/// A successful tool call refreshes `last_active` in state.json at most this often;
/// tool_use.jsonl records every call.
pub const HEARTBEAT_WRITE_INTERVAL: Duration = Duration::from_secs(10);

/// How many recent tool calls a recovery block lists.
const RECENT_TOOLS: usize = 5;
/// How much of an in-flight call's input is kept to name it.
const IN_FLIGHT_INPUT_CHARS: usize = 500;

/// Startup context held back for the first prompt, for a CLI that drops it on resume or has no
/// SessionStart after a compaction (`AgentCli::resume_drops_session_start_context`,
/// `compaction_skips_session_start`): `{"session_id": …, "text": …}` or
/// `{"session_id": …, "start": "compacted"}`. Context a prompt hook returns is appended to
/// the prompt itself.
const PROMPT_CONTEXT: &str = "prompt_context.json";

/// The context held back for the next prompt, as a `JsonFile` (never through a link).
fn prompt_context(dir: &AgentDir) -> state::JsonFile<Value> {
    state::JsonFile::new(dir, PROMPT_CONTEXT, "prompt_context")
}

/// Session-end reasons that mean the user chose to leave: a clean exit, not a crash. Gemini
/// CLI's `exit` is not one: it fires it from its exit cleanup whatever ended it (`/quit`, but
/// also SIGTERM or a hangup, as when its relaunched process outlives a killed parent). A
/// Gemini `/quit` still ends in safe mode: the wrapper sees its exit code 0.
const USER_EXITS: [&str; 2] = ["prompt_input_exit", "logout"];

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
}

impl Event {
    pub const NAMES: [&'static str; 10] = [
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

/// A `phoenix hook …` command line in exactly the shape phoenix writes into hook files,
/// understood without building the whole command-line parser: hooks run on every tool call.
#[derive(Debug, PartialEq, Eq)]
pub struct HookArgs {
    pub config: Option<std::path::PathBuf>,
    pub event: String,
    pub agent: String,
    pub cli: Option<String>,
    pub payload: Option<String>,
}

impl HookArgs {
    /// `None` for anything else (help, unknown flags, a missing `--agent`): the full parser
    /// then handles it, errors included.
    pub fn parse(args: &[String]) -> Option<HookArgs> {
        let mut config = None;
        let mut rest = args.iter();
        loop {
            match rest.next()?.as_str() {
                "-c" | "--config" => config = Some(rest.next()?.into()),
                a if a.starts_with("--config=") => config = Some(a["--config=".len()..].into()),
                "hook" => break,
                _ => return None,
            }
        }
        let (mut event, mut agent, mut cli, mut payload) = (None, None, None, None);
        while let Some(arg) = rest.next() {
            match arg.as_str() {
                "--agent" => agent = Some(rest.next()?.clone()),
                "--cli" => cli = Some(rest.next()?.clone()),
                "-c" | "--config" => config = Some(rest.next()?.into()),
                a if a.starts_with("--agent=") => agent = Some(a["--agent=".len()..].to_string()),
                a if a.starts_with("--cli=") => cli = Some(a["--cli=".len()..].to_string()),
                a if a.starts_with("--config=") => config = Some(a["--config=".len()..].into()),
                a if a.starts_with('-') => return None,
                a if event.is_none() => event = Some(a.to_string()),
                a if payload.is_none() => payload = Some(a.to_string()),
                _ => return None,
            }
        }
        Some(HookArgs {
            config,
            event: event?,
            agent: agent?,
            cli,
            payload,
        })
    }
}

/// Is this command line (without the program name) a `phoenix hook …` call?
pub fn is_hook_invocation(args: &[String]) -> bool {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-c" | "--config" => {
                rest.next();
            }
            a if a.starts_with("--config=") || a.starts_with('-') => {}
            a => return a == "hook",
        }
    }
    false
}

/// What a hook prints when even its command line could not be understood: the CLI's empty
/// reply, if `--cli` names one (Gemini's is `{}`: it parses stderr when stdout is empty).
pub fn fallback_output(args: &[String]) -> String {
    let named = args
        .windows(2)
        .find_map(|w| (w[0] == "--cli").then_some(w[1].as_str()));
    let cli = named
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--cli=")))
        .and_then(Cli::parse);
    output::render(cli, &Reply::Nothing)
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
        let spec = match spec::load_for_hook(config) {
            Ok(spec) => spec,
            Err(e) => {
                let why = format!(
                    "{} (run `phoenix validate` for details)",
                    first_line(&e.to_string())
                );
                // Under a wrapper, the last valid config keeps the state current meanwhile.
                let fallback = std::env::var_os("PHOENIX_STATE_DIR")
                    .map(std::path::PathBuf::from)
                    .and_then(|d| d.parent()?.parent().map(Path::to_path_buf))
                    .and_then(|root| spec::load_last_good_for_hook(config, &root));
                match fallback {
                    Some(spec) => {
                        self.pending_problem =
                            Some(format!("{why}; used the last valid copy of the config"));
                        spec
                    }
                    None => return Err(why),
                }
            }
        };
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
        }
        .map_err(|e| e.to_string())
    }

    fn session_start(&self, ctx: &Ctx<'_>) -> Reply {
        use crate::continuity::startup::{self, Start};
        let dir = ctx.dir;
        let source = self.payload.str("source").unwrap_or("startup").to_string();
        // Whatever an earlier session held back for its first prompt is not for this one.
        prompt_context(dir).remove_locked();
        let state = dir.read_state().unwrap_or_else(|e| {
            self.problem(&e.to_string());
            AgentState::new(&ctx.agent.name)
        });
        let interrupted = source != "compact" && startup::was_interrupted(dir, &state);
        let start = match (interrupted, source.as_str()) {
            (true, _) => Start::Recovery,
            (false, "compact") => Start::Compacted,
            (false, "resume") => Start::Resumed,
            (false, _) => Start::Fresh,
        };
        let text = self.startup_context(ctx, start, &state);
        // Context the Clinic left for this session (a reminder, or what a session that ran out
        // of context knew) comes first: it says why this session exists.
        let text = match (crate::clinic::take_pending_context(dir), text) {
            (Some(pending), rest) => {
                let _ = dir.record_op(Op::ClinicContextInjected, json!({"chars": pending.len()}));
                Some(match rest {
                    Some(rest) => format!("{pending}\n\n{rest}"),
                    None => pending,
                })
            }
            (None, rest) => rest,
        };

        let session_id = self.payload.session_id().map(str::to_string);
        let session_cwd = self.payload.str("cwd").map(str::to_string);
        // A transcript that exists but is not a regular file (a FIFO, `/dev/zero`) is not
        // recorded: brief generation, handoffs and the watchdog would refuse it anyway.
        let transcript = self.transcript();
        let transcript = transcript.as_deref().filter(|path| {
            match bounded::open_regular(Path::new(path), Links::Follow) {
                Err(e @ bounded::ReadError::NotRegular { .. }) => {
                    self.problem(&format!("transcript_path {e}"));
                    false
                }
                _ => true,
            }
        });
        let transcript = transcript.map(str::to_string);
        let now = state::rfc3339(ctx.now);
        let update = dir.update_state(ctx.retention, |s| {
            if session_id.is_some() {
                s.session_id = session_id.clone();
                s.session_cwd = session_cwd.clone();
                s.transcript_path = transcript.clone();
            }
            s.session_source = Some(source.clone());
            s.last_active = Some(now.clone());
            // An interrupted task stays `working` until a turn finishes, so that a crash
            // before the agent got going is still detected next time.
            if !interrupted && source != "compact" {
                s.status = Status::Idle;
            }
            Ok(())
        });
        if let Err(e) = update {
            self.problem(&e.to_string());
        }
        let deferred = self
            .cli
            .is_some_and(|c| c.adapter().resume_drops_session_start_context())
            && source == "resume"
            && text.as_ref().is_some_and(|t| {
                let held = json!({"session_id": session_id, "text": t});
                prompt_context(dir)
                    .save_locked(&held)
                    .map_err(|e| self.problem(&format!("cannot hold the context back: {e}")))
                    .is_ok()
            });
        let _ = dir.record_op(
            Op::SessionStart,
            json!({"source": source, "session_id": session_id, "interrupted": interrupted,
                   "transcript_path": transcript, "injected": text.is_some(),
                   "deferred_to_prompt": deferred}),
        );
        match text {
            Some(text) if !deferred => Reply::Context {
                event: "SessionStart".into(),
                text,
            },
            _ => Reply::Nothing,
        }
    }

    /// The startup context for `start`, from the agent's state, ledger, latest handoff, related
    /// decisions and brief (`None` when there is nothing worth giving).
    fn startup_context(
        &self,
        ctx: &Ctx<'_>,
        start: crate::continuity::startup::Start,
        state: &AgentState,
    ) -> Option<String> {
        use crate::continuity::startup::{self, Start};
        let dir = ctx.dir;
        let recent = if start == Start::Recovery {
            state::jsonl::last(&dir.file(state::TOOL_USE), RECENT_TOOLS)
        } else {
            Vec::new()
        };
        let resolve_command = crate::continuity::resolve_command(ctx.spec, &ctx.agent.name);
        let mut shown = state.clone();
        shown.normalize(ctx.now, ctx.retention);
        let fleet = crate::state::FleetDir::new(&ctx.spec.fleet.state_dir);
        // A resumed transcript has it all already; a new context gets the latest handoff and
        // the earlier decisions that match its task.
        let gathered = startup::Gathered::read(&fleet, dir, shown, start);
        let (text, template_problem) = startup::render(
            &crate::render::Templates::for_spec(ctx.spec),
            start,
            &gathered.inputs(&recent, &resolve_command),
        );
        if let Some(problem) = template_problem {
            self.problem(&problem);
        }
        if text.is_some() && gathered.interrupted_tool.is_some() {
            // Named once, to the session that follows the interruption.
            let _ = std::fs::remove_file(dir.file(state::INTERRUPTED_TOOL));
        }
        text
    }

    /// The context held back for this session's first prompt, taken once: text a session start
    /// held back, or, after a Gemini compression, the compacted context rendered now (the
    /// handoff saved before the compression is there by then).
    fn take_prompt_context(&self, ctx: &Ctx<'_>) -> Option<String> {
        let file = prompt_context(ctx.dir);
        if !file.exists() {
            return None;
        }
        let held: Value = file.update(Option::take).ok()??;
        let same_session = match (held["session_id"].as_str(), self.payload.session_id()) {
            (Some(held), Some(now)) => held == now,
            _ => true,
        };
        if !same_session {
            return None;
        }
        if held["start"] == "compacted" {
            let state = ctx.dir.read_state().unwrap_or_else(|e| {
                self.problem(&e.to_string());
                AgentState::new(&ctx.agent.name)
            });
            return self.startup_context(ctx, crate::continuity::startup::Start::Compacted, &state);
        }
        held["text"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    }

    fn prompt(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        // Text phoenix typed (a continuation nudge, an injected handoff) is not a new task.
        let task = self
            .payload
            .prompt()
            .filter(|p| !is_phoenix_text(p) && p.trim() != ctx.agent.restart.continue_prompt)
            .map(task_line);
        let session_id = self.payload.session_id().map(str::to_string);
        let now = state::rfc3339(ctx.now);
        ctx.dir.update_state(ctx.retention, |s| {
            if task.is_some() {
                s.current_task = task;
            }
            if session_id.is_some() {
                s.session_id = session_id;
            }
            s.status = Status::Working;
            s.turn_started = Some(now.clone());
            s.last_active = Some(now);
            Ok(())
        })?;
        let held = self.take_prompt_context(ctx);
        // Once per prompt: confirms that text phoenix injected was submitted.
        let _ = ctx.dir.record_op(
            Op::Prompt,
            json!({"chars": self.payload.prompt().map_or(0, str::len),
                   "context_chars": held.as_ref().map(String::len)}),
        );
        Ok(match held {
            Some(text) => Reply::Context {
                event: self
                    .payload
                    .event_name()
                    .unwrap_or("BeforeAgent")
                    .to_string(),
                text,
            },
            None => Reply::Nothing,
        })
    }

    /// How the tool call ended. Some CLIs' payloads have no failure flag (Codex): for a call
    /// that looks fine, the exit code comes from the session file the CLI wrote before running
    /// the hook.
    fn tool_outcome(&self) -> Outcome {
        let outcome = self.payload.outcome();
        let Some(cli) = self.cli.filter(|_| outcome == Outcome::Ok) else {
            return outcome;
        };
        let (Some(rollout), Some(call)) = (
            self.payload.transcript_path(),
            self.payload.str("tool_use_id"),
        ) else {
            return outcome;
        };
        match cli.adapter().shell_exit_code(Path::new(rollout), call) {
            Some(code) if code != 0 => {
                let output = self
                    .payload
                    .get("tool_response")
                    .and_then(Value::as_str)
                    .map(payload::short)
                    .filter(|l| !l.is_empty());
                Outcome::Failed(match output {
                    Some(line) => format!("exit code {code}: {line}"),
                    None => format!("exit code {code}"),
                })
            }
            _ => outcome,
        }
    }

    /// After a tool call: one line in tool_use.jsonl, and state.json only when it changes.
    fn tool_done(&self, ctx: &Ctx<'_>, outcome: Outcome) -> Result<Reply, StateError> {
        let dir = ctx.dir;
        // The call finished: nothing is in flight (a missing file is the common case).
        let _ = std::fs::remove_file(dir.file(state::IN_FLIGHT));
        let session_id = self.payload.session_id().map(str::to_string);
        let now = state::rfc3339(ctx.now);
        let mut line = json!({"ts": state::now_rfc3339(), "tool": self.payload.tool_name(), "ok": outcome == Outcome::Ok});
        if let Some(digest) = self.payload.tool_input_digest() {
            line["input_digest"] = json!(digest);
        }
        if let Some(id) = &session_id {
            line["session_id"] = json!(id);
        }
        let mut result = Ok(());
        match &outcome {
            Outcome::Ok => {
                let needs_write = match dir.read_state() {
                    Ok(current) => heartbeat_needs_write(&current, session_id.as_deref(), ctx.now),
                    Err(e) => {
                        result = Err(e);
                        false
                    }
                };
                if needs_write {
                    result = dir.update_state(ctx.retention, |s| {
                        s.status = Status::Working;
                        s.consecutive_errors = 0;
                        s.last_active = Some(now);
                        if session_id.is_some() {
                            s.session_id = session_id.clone();
                        }
                        Ok(())
                    });
                }
            }
            Outcome::Failed(error) => {
                line["error"] = json!(error);
                let count = dir.update_state(ctx.retention, |s| {
                    s.status = Status::Working;
                    s.consecutive_errors += 1;
                    if session_id.is_some() {
                        s.session_id = session_id.clone();
                    }
                    s.record_error(error.clone(), &now);
                    s.last_active = Some(now);
                    Ok(s.consecutive_errors)
                });
                match count {
                    Ok(n) => line["consecutive_errors"] = json!(n),
                    Err(e) => result = Err(e),
                }
            }
            Outcome::Interrupted => line["interrupted"] = json!(true),
        }
        dir.append_tool_use(&line)?;
        result?;
        if ctx.agent.guard_structured_files {
            let messages = guard::check(dir, &self.cwd(ctx), &self.payload.edited_files());
            if !messages.is_empty() {
                return Ok(Reply::Feedback {
                    event: self
                        .payload
                        .event_name()
                        .unwrap_or("PostToolUse")
                        .to_string(),
                    reason: messages.join("\n"),
                });
            }
        }
        Ok(Reply::Nothing)
    }

    /// The call about to run, so that an exit while it runs can be named to the next session.
    /// One small unsynced write: a lost one only costs that note.
    fn note_in_flight(&self, dir: &AgentDir) {
        let tool = self.payload.tool_name();
        if tool.is_empty() {
            return;
        }
        let input = self
            .payload
            .get("tool_input")
            .or(self.payload.get("tool_args"));
        // A shell call is named by its command; anything else by its input, cut short.
        let text = match input.and_then(|i| i.get("command")) {
            Some(Value::String(c)) => c.clone(),
            Some(other) => other.to_string(),
            None => input.map(Value::to_string).unwrap_or_default(),
        };
        let text: String = text.chars().take(IN_FLIGHT_INPUT_CHARS).collect();
        let line = json!({
            "ts": state::now_rfc3339(), "tool": tool, "input": text,
            "session_id": self.payload.session_id(),
        });
        let _ = state::file::write_atomic(
            &dir.file(state::IN_FLIGHT),
            line.to_string().as_bytes(),
            0o600,
            false,
        );
    }

    fn cwd(&self, ctx: &Ctx<'_>) -> PathBuf {
        self.payload
            .str("cwd")
            .filter(|c| !c.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.agent.workdir.clone())
    }

    fn pre_tool(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        self.note_in_flight(ctx.dir);
        if ctx.agent.guard_structured_files {
            guard::snapshot(ctx.dir, &self.cwd(ctx), &self.payload.edited_files())?;
        }
        Ok(Reply::Nothing)
    }

    /// Save what the continuity layer turns into a handoff: the state and where the transcript
    /// is. Never blocks the compaction, whatever happens.
    fn pre_compact(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let dir = ctx.dir;
        let trigger = self.payload.str("trigger").unwrap_or("auto").to_string();
        // Gemini CLI asks before every model call; most of the time nothing is compressed.
        if let Some(cli) = self.cli
            && !cli.adapter().compacts_now(
                &trigger,
                self.transcript().as_deref().map(Path::new),
                &self.cwd(ctx),
            )
        {
            return Ok(Reply::Nothing);
        }
        let now = state::rfc3339(ctx.now);
        let snapshot_state = dir.update_state(ctx.retention, |s| {
            s.compactions += 1;
            s.last_compaction = Some(now.clone());
            Ok(s.clone())
        })?;
        let snapshots = dir.file("pre-compact");
        state::create_private_dir(&snapshots).map_err(|source| StateError::Io {
            action: "create",
            path: snapshots.clone(),
            source,
        })?;
        let stamp = ctx.now.strftime("%Y%m%dT%H%M%S%.3fZ").to_string();
        let path = snapshots.join(format!("{stamp}-{trigger}.json"));
        let snapshot = json!({
            "ts": now, "agent": ctx.agent.name, "trigger": trigger,
            "session_id": self.payload.session_id(),
            "transcript_path": self.payload.transcript_path(),
            "custom_instructions": self.payload.get("custom_instructions"),
            "state": snapshot_state,
        });
        let bytes = serde_json::to_vec_pretty(&snapshot).expect("snapshot serialises");
        state::atomic_write(&path, &bytes).map_err(|source| StateError::Io {
            action: "write",
            path: path.clone(),
            source,
        })?;
        // A CLI without a SessionStart after a compression (Gemini): the context phoenix gave at
        // session start went into the summary with the rest. It is given again with the next
        // prompt, rendered then, with this handoff.
        let held_for_prompt = self
            .cli
            .is_some_and(|c| c.adapter().compaction_skips_session_start())
            && {
                let held = json!({"session_id": self.payload.session_id(), "start": "compacted"});
                prompt_context(dir)
                    .save_locked(&held)
                    .map_err(|e| self.problem(&format!("cannot hold the context back: {e}")))
                    .is_ok()
            };
        let _ = dir.record_op(
            Op::PreCompact,
            json!({"trigger": trigger, "transcript_path": self.payload.transcript_path(),
                   "snapshot": path, "context_for_next_prompt": held_for_prompt}),
        );
        self.spawn_handoff(ctx);
        Ok(Reply::Nothing)
    }

    /// A handoff of what the session knew before its compaction, written by a detached
    /// `phoenix handoff save`: the hook returns at once (it must never hold the compaction
    /// up), and the hook binary stays free of the template engine.
    fn spawn_handoff(&self, ctx: &Ctx<'_>) {
        use std::os::unix::process::CommandExt;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let phoenix = exe.with_file_name("phoenix");
        let program = if phoenix.is_file() { phoenix } else { exe };
        let mut cmd = std::process::Command::new(program);
        cmd.arg("--config")
            .arg(&ctx.spec.file)
            .args([
                "handoff",
                "save",
                &ctx.agent.name,
                "--reason",
                "pre_compact",
                "--no-input",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        if let Err(e) = cmd.spawn() {
            self.problem(&format!("cannot start the pre-compact handoff: {e}"));
        }
    }

    /// The payload's transcript: the file that does hold the session, which is not always
    /// the one reported (Gemini after a resume).
    fn transcript(&self) -> Option<String> {
        let path = self.payload.transcript_path()?;
        Some(match self.cli {
            Some(cli) => cli
                .adapter()
                .session_file(Path::new(path))
                .to_string_lossy()
                .into_owned(),
            None => path.to_string(),
        })
    }

    fn stop(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        // The turn is over: a call that never reported back (denied, say) is not running.
        let _ = std::fs::remove_file(ctx.dir.file(state::IN_FLIGHT));
        let hook = self.payload.event_name().or(self.payload.str("type"));
        // A CLI that ends a turn failed on an API error like any other (Gemini's AfterAgent):
        // only its session file says it failed.
        if let Some(cli) = self.cli
            && let Some(path) = self.transcript()
            && let Some(error) = cli.adapter().last_turn_error(Path::new(&path))
        {
            return self.record_failed_turn(ctx, &error.kind, &error.message, hook);
        }
        self.end_turn(
            ctx,
            Status::Idle,
            None,
            Op::TurnComplete,
            json!({"hook": hook}),
        )
    }

    /// The end of a turn: the status it leaves, the error if it failed, and one op.
    fn end_turn(
        &self,
        ctx: &Ctx<'_>,
        status: Status,
        error: Option<String>,
        op: state::op::Make,
        mut fields: Value,
    ) -> Result<Reply, StateError> {
        let session_id = self.payload.session_id().map(str::to_string);
        let now = state::rfc3339(ctx.now);
        ctx.dir.update_state(ctx.retention, |s| {
            s.status = status.clone();
            if session_id.is_some() {
                s.session_id = session_id.clone();
            }
            if let Some(error) = &error {
                s.record_error(error.clone(), &now);
            }
            s.last_active = Some(now);
            Ok(())
        })?;
        fields["session_id"] = json!(session_id);
        let _ = ctx.dir.record_op(op, fields);
        Ok(Reply::Nothing)
    }

    /// The turn ended in an API error and the CLI sits at its prompt: nobody will type the
    /// next one. Recorded as status `failed` with the error, which the wrapper has the watchdog
    /// heal at once (the Clinic decides how: a full context starts fresh with a handoff, an
    /// overload resumes).
    fn turn_failed(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let kind = self.payload.str("error").unwrap_or("unknown");
        let details = self
            .payload
            .str("error_details")
            .or(self.payload.str("last_assistant_message"))
            .unwrap_or("");
        let hook = self.payload.event_name();
        self.record_failed_turn(ctx, kind, details, hook)
    }

    /// Status `failed` with the error (bounded), and one `turn_failed` op.
    fn record_failed_turn(
        &self,
        ctx: &Ctx<'_>,
        kind: &str,
        details: &str,
        hook: Option<&str>,
    ) -> Result<Reply, StateError> {
        let error: String = format!("{kind}: {details}").chars().take(500).collect();
        let reply = self.end_turn(
            ctx,
            Status::Failed,
            Some(error.clone()),
            Op::TurnFailed,
            json!({"error": kind, "details": error, "hook": hook}),
        )?;
        // Only a signal: the wrapper (always there, daemon or not) sees it within a second and
        // runs the decision itself, so this hook never waits for a recovery.
        if let Err(e) = ctx.dir.set_marker(state::TURN_FAILED) {
            self.problem(&format!("cannot tell the wrapper the turn failed: {e}"));
        }
        Ok(reply)
    }

    fn session_end(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let dir = ctx.dir;
        let reason = self.payload.str("reason").unwrap_or("other").to_string();
        let clean = USER_EXITS.contains(&reason.as_str());
        let now = state::rfc3339(ctx.now);
        dir.update_state(ctx.retention, |s| {
            s.last_session_end = Some(state::agent::SessionEnd {
                ts: now.clone(),
                reason: reason.clone(),
                clean,
            });
            // Ending mid-turn (no Stop since the last prompt or tool call) is an interruption:
            // `working` stays so that the next session start recovers.
            if clean || s.status != Status::Working {
                s.status = Status::Stopped;
            }
            Ok(())
        })?;
        if clean {
            dir.set_marker(state::CLEAN_EXIT)
                .map_err(|source| StateError::Io {
                    action: "write",
                    path: dir.file(state::CLEAN_EXIT),
                    source,
                })?;
        }
        let _ = dir.record_op(
            Op::SessionEnd,
            json!({"reason": reason, "clean": clean, "session_id": self.payload.session_id()}),
        );
        Ok(Reply::Nothing)
    }
}

/// Recovery detection: the last status was `working` and no clean exit was recorded after the
/// agent was last active.
fn heartbeat_needs_write(
    state: &AgentState,
    session_id: Option<&str>,
    now: jiff::Timestamp,
) -> bool {
    let fresh = state.last_active_at().is_some_and(|t| {
        let age = now.as_second() - t.as_second();
        (0..HEARTBEAT_WRITE_INTERVAL.as_secs() as i64).contains(&age)
    });
    state.status != Status::Working
        || state.consecutive_errors != 0
        || !fresh
        || session_id.is_some_and(|id| state.session_id.as_deref() != Some(id))
}

/// The first line of a prompt, bounded, as the current task.
/// Does a prompt come from phoenix itself? Its texts start with `[phoenix]` or a
/// `=== PHOENIX` banner.
pub fn is_phoenix_text(prompt: &str) -> bool {
    let p = prompt.trim_start();
    p.starts_with("[phoenix]") || p.starts_with("=== PHOENIX")
}

fn task_line(prompt: &str) -> String {
    crate::text::shorten(prompt.trim().lines().next().unwrap_or(""), 200)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_skips_the_write_when_nothing_changed() {
        let now: jiff::Timestamp = "2026-02-17T02:12:53Z".parse().unwrap();
        let mut s = AgentState::new("a");
        s.status = Status::Working;
        s.session_id = Some("s1".into());
        s.last_active = Some("2026-02-17T02:12:50Z".into());
        assert!(!heartbeat_needs_write(&s, Some("s1"), now));
        assert!(heartbeat_needs_write(&s, Some("s2"), now));
        s.last_active = Some("2026-02-17T02:12:00Z".into());
        assert!(heartbeat_needs_write(&s, Some("s1"), now));
        s.last_active = Some("2026-02-17T02:12:50Z".into());
        s.consecutive_errors = 1;
        assert!(heartbeat_needs_write(&s, None, now));
    }

    #[test]
    fn interrupted_unless_a_clean_exit_came_after_the_last_activity() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        let mut s = AgentState::new("a");
        s.status = Status::Working;
        s.last_active = Some("2026-02-17T02:12:50Z".into());
        assert!(crate::continuity::startup::was_interrupted(&dir, &s));
        std::fs::write(dir.file(state::CLEAN_EXIT), "2026-02-17T02:13:00Z").unwrap();
        assert!(!crate::continuity::startup::was_interrupted(&dir, &s));
        std::fs::write(dir.file(state::CLEAN_EXIT), "2026-02-16T00:00:00Z").unwrap();
        assert!(
            crate::continuity::startup::was_interrupted(&dir, &s),
            "an old marker does not count"
        );
        s.status = Status::Idle;
        assert!(!crate::continuity::startup::was_interrupted(&dir, &s));
    }

    #[test]
    fn task_is_the_first_line_of_the_prompt() {
        assert_eq!(task_line("\n fix the build \nthen more"), "fix the build");
        assert_eq!(task_line(&"x".repeat(300)).chars().count(), 200);
    }

    #[test]
    fn hook_invocations_are_recognised() {
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert!(is_hook_invocation(&args("--config /x hook heartbeat")));
        assert!(is_hook_invocation(&args("hook")));
        assert!(!is_hook_invocation(&args("-c hook plan")));
        assert!(!is_hook_invocation(&args("hooks show")));
        assert_eq!(fallback_output(&args("hook x --cli gemini")), "{}\n");
        assert_eq!(fallback_output(&args("hook x --cli codex")), "");
        assert_eq!(fallback_output(&args("hook x --cli=gemini")), "{}\n");
        assert_eq!(fallback_output(&args("hook x --cli nope")), "");
        assert_eq!(fallback_output(&args("hook x")), "");
    }

    #[test]
    fn every_event_name_parses() {
        for name in Event::NAMES {
            assert!(Event::parse(name).is_some(), "{name}");
        }
    }
}

#[cfg(test)]
mod fast_args_tests {
    use super::HookArgs;

    fn parse(line: &str) -> Option<HookArgs> {
        HookArgs::parse(&line.split(' ').map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn the_shapes_phoenix_writes_are_understood() {
        let h = parse("--config /x/phoenix.toml hook heartbeat --agent a --cli claude").unwrap();
        assert_eq!(
            h.config.as_deref(),
            Some(std::path::Path::new("/x/phoenix.toml"))
        );
        assert_eq!((h.event.as_str(), h.agent.as_str()), ("heartbeat", "a"));
        assert_eq!(h.cli.as_deref(), Some("claude"));
        let h = parse("hook session-start --agent=b {\"x\":1}").unwrap();
        assert_eq!(h.payload.as_deref(), Some("{\"x\":1}"));
        assert!(h.config.is_none());
    }

    #[test]
    fn anything_else_goes_to_the_full_parser() {
        for line in [
            "hook heartbeat",
            "hook --help",
            "hook heartbeat --agent",
            "hook heartbeat --agent a --verbose",
            "status",
            "-v hook heartbeat --agent a",
            "hook a b c --agent x",
        ] {
            assert_eq!(parse(line), None, "{line}");
        }
    }
}
