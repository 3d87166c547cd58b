//! `phoenix demo-agent`: a stand-in agent CLI. It prints a prompt, "works" in a loop, calls
//! `phoenix hook …` the way a real CLI calls its hooks, and can be told to crash, hang or go
//! silent — from flags at start, or by typing a word into its pane.
//!
//! What it prints is its pane's screen, as a real CLI's output is: it writes to the `out` the
//! CLI edge hands it (stdout), never prints on its own.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Time between two "tool calls".
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Crash (exit with --exit-code) after this long.
    #[arg(long, value_parser = parse_duration)]
    pub crash_after: Option<Duration>,
    /// Exit code used for crashes.
    #[arg(long, default_value_t = 3)]
    pub exit_code: i32,
    /// On a crash, fail like a CLI whose API call failed: print this error and record it in
    /// the transcript (e.g. "prompt is too long: 215439 tokens > 200000 maximum").
    #[arg(long)]
    pub fail_with: Option<String>,
    /// The task the agent works on (the first prompt of its transcript).
    #[arg(long)]
    pub task: Option<String>,
    /// Stop printing and calling hooks after this long, but stay alive.
    #[arg(long, value_parser = parse_duration)]
    pub silent_after: Option<Duration>,
    /// Every tool call fails.
    #[arg(long)]
    pub fail_tools: bool,
    /// Resume this session id (what a real CLI's `--resume <id>` does).
    #[arg(long)]
    pub resume: Option<String>,
    /// Agent name for hooks (default: $PHOENIX_AGENT).
    #[arg(long, env = "PHOENIX_AGENT")]
    pub agent: Option<String>,
    /// Behave like a CLI without hooks: continuity then goes through the pane only.
    #[arg(long)]
    pub no_hooks: bool,
    /// The model its transcript says answered (the usage ledger prices it; `claude-demo` is in
    /// no price table: unpriced).
    #[arg(long, default_value = "claude-demo")]
    pub model: String,
    /// Be a raw-mode terminal program instead: log every byte received to this file, echo it
    /// back to the terminal as is (as a TUI renders what it is given), ask for bracketed
    /// paste, and answer each Enter outside a paste with a `received N` line.
    #[arg(long)]
    pub raw_log: Option<std::path::PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::spec::duration::parse(s)
}

/// One line on the agent's screen; a screen that is gone is no reason to stop.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Working,
    Silent,
}

/// Run the stand-in agent, its screen going to `out`.
pub fn run(args: DemoArgs, out: &mut dyn Write) -> crate::error::Result<i32> {
    if let Some(log) = &args.raw_log {
        return raw_log(log, out);
    }
    if args.no_hooks {
        NO_HOOKS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let Some(session) = Session::start(&args, out) else {
        return Ok(1);
    };
    let agent = Agent {
        failing: args.fail_tools,
        args,
        session,
        mode: Mode::Working,
        step: 0,
    };
    Ok(agent.live(typed_words(), out))
}

/// The session the agent runs: its name for hooks, its id and its transcript.
struct Session {
    agent: String,
    id: String,
    transcript: Transcript,
}

impl Session {
    /// Open (or resume) the session and show its first screen: the banner, what phoenix
    /// injected at SessionStart, the words it understands and the prompt. `None` when asked to
    /// resume a session that cannot be resumed (it says so on the screen).
    fn start(args: &DemoArgs, out: &mut dyn Write) -> Option<Session> {
        let agent = args.agent.clone().unwrap_or_else(|| "demo".into());
        let (id, source) = match &args.resume {
            Some(id) => (id.clone(), "resume"),
            None => (new_session_id(), "startup"),
        };
        let transcript = Transcript::open(&id, &args.model);
        // As Claude Code does: a session it never wrote (no prompt, no turn) cannot be resumed.
        if source == "resume" && transcript.path.as_ref().is_some_and(|p| !p.exists()) {
            say!(out, "No conversation found with session ID: {id}");
            return None;
        }
        say!(out, "demo-agent `{agent}` session {id} ({source})");
        if source == "startup"
            && let Some(task) = &args.task
        {
            transcript
                .record(json!({"type": "user", "message": {"role": "user", "content": task}}));
        }
        let session = Session {
            agent,
            id,
            transcript,
        };
        let transcript_path = session.transcript.path_str();
        let context = session.hook(
            "session-start",
            "SessionStart",
            json!({"source": source, "transcript_path": transcript_path}),
        );
        if let Some(text) = context.as_deref().and_then(additional_context) {
            say!(
                out,
                "[context injected by phoenix]\n{text}\n[end of context]"
            );
        }
        say!(
            out,
            "type: crash | exit | silent | work | fail | ok | turn CMD | tool CMD | reply TEXT"
        );
        // Bracketed paste on, as real agent CLIs have it: a pasted block (phoenix's injections)
        // arrives between ESC[200~ and ESC[201~ and is one prompt, not one per line.
        let _ = write!(out, "\x1b[?2004h> ");
        let _ = out.flush();
        Some(session)
    }

    /// Call hook `name` with a payload of `event` for this session: `fields` plus the
    /// event's name, the session id and the working directory every payload carries.
    fn hook(&self, name: &str, event: &str, fields: serde_json::Value) -> Option<String> {
        let mut payload = json!({"hook_event_name": event, "session_id": self.id, "cwd": cwd()});
        if let (Some(payload), serde_json::Value::Object(fields)) =
            (payload.as_object_mut(), fields)
        {
            payload.extend(fields);
        }
        hook(&self.agent, name, payload)
    }

    /// A prompt submitted, as UserPromptSubmit reports it.
    fn prompt(&self, prompt: &str) {
        self.hook("prompt", "UserPromptSubmit", json!({"prompt": prompt}));
    }

    /// A Bash call that succeeded, as Claude Code's PostToolUse reports it.
    fn tool_ok(&self, command: &str) {
        self.tool_done(command, "ok");
    }

    /// A Bash call that ran, as PostToolUse reports it, with `stdout` as its output.
    fn tool_done(&self, command: &str, stdout: &str) {
        self.hook(
            "heartbeat",
            "PostToolUse",
            json!({
                "tool_name": "Bash", "tool_input": {"command": command},
                "tool_response": {"stdout": stdout, "stderr": "", "interrupted": false},
            }),
        );
    }
}

/// The lines typed (or pasted) into the pane, one prompt each, trimmed. A bracketed paste is
/// one prompt however many lines it has.
fn typed_words() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut pasted: Option<String> = None;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            // Escape is the interrupt key of the CLIs it stands in for.
            let (line, interrupted) = escape_keys(&line);
            if interrupted && tx.send(INTERRUPT.to_string()).is_err() {
                break;
            }
            let Some(whole) = unpaste(&mut pasted, &line) else {
                continue;
            };
            if tx.send(whole.trim().to_string()).is_err() {
                break;
            }
        }
    });
    rx
}

/// The word an Escape key press becomes.
const INTERRUPT: &str = "\x1b";

/// `line` without the Escape key presses in it (an ESC that starts no paste marker), and
/// whether there was one.
fn escape_keys(line: &str) -> (String, bool) {
    let mut out = String::with_capacity(line.len());
    let mut pressed = false;
    let mut rest = line;
    while let Some(at) = rest.find('\x1b') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if after.starts_with("\x1b[200~") || after.starts_with("\x1b[201~") {
            out.push('\x1b');
        } else {
            pressed = true;
        }
        rest = &after[1..];
    }
    out.push_str(rest);
    (out, pressed)
}

/// One line read: the whole prompt it completes, or `None` while a paste is still open
/// (kept in `pasted`).
fn unpaste(pasted: &mut Option<String>, line: &str) -> Option<String> {
    let (start, end) = (line.contains("\x1b[200~"), line.contains("\x1b[201~"));
    let text = line.replace("\x1b[200~", "").replace("\x1b[201~", "");
    match (pasted.take(), start, end) {
        (None, true, false) => {
            *pasted = Some(text);
            None
        }
        (Some(mut block), _, end) => {
            block.push('\n');
            block.push_str(&text);
            if end {
                return Some(block);
            }
            *pasted = Some(block);
            None
        }
        (None, _, _) => Some(text),
    }
}

/// What the agent does after hearing a word.
enum Heard {
    /// Carry on: one step of work unless silent.
    Carry,
    /// A tool call or a turn took the time of a step: no step this time.
    Busy,
    /// Exit with this code.
    Exit(i32),
}

/// The agent at work: its flags, its session and what the words typed so far have made it.
struct Agent {
    args: DemoArgs,
    session: Session,
    mode: Mode,
    failing: bool,
    step: u64,
}

impl Agent {
    /// Work in a loop, one step per interval, hearing the words typed meanwhile, until a crash
    /// or an exit; returns the exit code.
    fn live(mut self, words: mpsc::Receiver<String>, out: &mut dyn Write) -> i32 {
        let started = Instant::now();
        loop {
            if self
                .args
                .crash_after
                .is_some_and(|d| started.elapsed() >= d)
            {
                say!(out, "\ndemo-agent: simulated crash");
                return self.crash(out);
            }
            if self
                .args
                .silent_after
                .is_some_and(|d| started.elapsed() >= d)
            {
                self.mode = Mode::Silent;
            }
            match words.recv_timeout(self.args.interval) {
                Ok(word) => match self.hear(&word, out) {
                    Heard::Exit(code) => return code,
                    Heard::Busy => continue,
                    Heard::Carry => {}
                },
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // stdin closed: keep working, like a CLI left running without a terminal.
                Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(self.args.interval),
            }
            if self.mode == Mode::Working {
                self.work_step(out);
            }
        }
    }

    fn crash(&self, out: &mut dyn Write) -> i32 {
        fail(
            out,
            &self.session.transcript,
            self.args.fail_with.as_deref(),
        );
        self.args.exit_code
    }

    fn hear(&mut self, word: &str, out: &mut dyn Write) -> Heard {
        match word {
            "crash" => {
                say!(out, "demo-agent: crashing as asked");
                return Heard::Exit(self.crash(out));
            }
            "exit" | "quit" => {
                self.session.hook(
                    "session-end",
                    "SessionEnd",
                    json!({"reason": "prompt_input_exit"}),
                );
                say!(out, "demo-agent: bye");
                return Heard::Exit(0);
            }
            "silent" | "hang" => self.mode = Mode::Silent,
            INTERRUPT => {
                say!(out, "demo-agent: interrupted");
                self.mode = Mode::Silent;
            }
            "work" => self.mode = Mode::Working,
            "fail" => self.failing = true,
            "ok" => self.failing = false,
            "" => {}
            // `say TEXT` prints TEXT (`\n` for a new line, `{}` for nothing): how a test
            // makes the agent write `->continuity:` commands that its typed, echoed input
            // does not contain (`->conti{}nuity:load`).
            say if say.starts_with("say ") => {
                say!(out, "{}", say[4..].replace("\\n", "\n").replace("{}", ""))
            }
            t if t.starts_with("tool ") => {
                self.tool(&t[5..], out);
                return Heard::Busy;
            }
            t if t.starts_with("turn ") => {
                self.turn(&t[5..], false, out);
                return Heard::Busy;
            }
            t if t.starts_with("run-turn ") => {
                self.turn(&t[9..], true, out);
                return Heard::Busy;
            }
            t if t.starts_with("reply ") => {
                self.reply(&t[6..], out);
                return Heard::Busy;
            }
            // Several words are a prompt, as a person (or phoenix) would type it.
            prompt if prompt.contains(' ') => {
                say!(out, "demo-agent: prompt received: {prompt}");
                self.session.prompt(prompt);
            }
            other => say!(out, "demo-agent: unknown word `{other}`"),
        }
        Heard::Carry
    }

    /// `tool CMD`: one Bash tool call that runs CMD through `sh -c`, as Claude Code's Bash tool
    /// does, announced before (PreToolUse) and reported after; the agent does nothing else
    /// meanwhile. The agent here is the model: a test types CMD.
    fn tool(&mut self, command: &str, out: &mut dyn Write) {
        self.session.hook(
            "pre-tool",
            "PreToolUse",
            json!({"tool_name": "Bash", "tool_input": {"command": command}}),
        );
        say!(out, "demo-agent: tool running `{command}`");
        let ok = Command::new("sh")
            .arg("-c")
            .arg(command)
            .status()
            .is_ok_and(|s| s.success());
        self.step += 1;
        self.session.transcript.tool_call(self.step, command, !ok);
        self.session.tool_done(command, "");
        say!(out, "demo-agent: tool done");
    }

    /// `turn CMD`: one whole turn, as a model that runs CMD and is done: its prompt, one
    /// successful tool call running CMD, the end of the turn; then idle at the prompt.
    /// `run-turn CMD` runs CMD for real, through `sh -c` (the agent does nothing else
    /// meanwhile): a turn that takes as long as CMD.
    fn turn(&mut self, command: &str, run: bool, out: &mut dyn Write) {
        say!(out, "demo-agent: turn running `{command}`");
        self.session.prompt(&format!("please run {command}"));
        self.step += 1;
        let ok = !run
            || Command::new("sh")
                .arg("-c")
                .arg(command)
                .status()
                .is_ok_and(|s| s.success());
        self.session.transcript.tool_call(self.step, command, !ok);
        self.session.tool_ok(command);
        self.session.hook("stop", "Stop", json!({}));
        say!(out, "demo-agent: turn done");
        self.mode = Mode::Silent;
    }

    /// `reply TEXT`: one turn in which the model answers TEXT (`\n` a new line, `{}` nothing,
    /// as for `say`): in the transcript as its text, on the screen after Claude Code's `⏺`,
    /// and as the Stop hook's `last_assistant_message`; then idle at the prompt. How a test
    /// makes the model itself say `->continuity:` markers.
    fn reply(&mut self, text: &str, out: &mut dyn Write) {
        let text = text.replace("\\n", "\n").replace("{}", "");
        // The prompt in the transcript too: where the turn's text begins.
        self.session.transcript.record(
            json!({"type": "user", "message": {"role": "user", "content": "please answer"}}),
        );
        self.session.prompt("please answer");
        self.session.transcript.said(&text);
        for (k, line) in text.lines().enumerate() {
            say!(out, "{} {line}", if k == 0 { "⏺" } else { " " });
        }
        let transcript_path = self.session.transcript.path_str();
        self.session.hook(
            "stop",
            "Stop",
            json!({"transcript_path": transcript_path, "last_assistant_message": text}),
        );
        say!(out, "demo-agent: turn done");
        self.mode = Mode::Silent;
    }

    /// One step of work: a Bash call that succeeds, or fails when told to.
    fn work_step(&mut self, out: &mut dyn Write) {
        self.step += 1;
        let step = self.step;
        let command = format!("demo step {step}");
        self.session
            .transcript
            .tool_call(step, &command, self.failing);
        if !self.failing {
            say!(out, "working: step {step}");
            self.session.tool_ok(&command);
            return;
        }
        say!(out, "working: step {step} (tool failed)");
        self.session.hook(
            "tool-error",
            "PostToolUseFailure",
            json!({
                "tool_name": "Bash", "tool_input": {"command": command},
                "error": "Exit code 1\ndemo failure", "is_interrupt": false,
            }),
        );
    }
}

/// `--raw-log`: what a pane's program really receives, byte for byte.
fn raw_log(path: &std::path::Path, out: &mut dyn Write) -> crate::error::Result<i32> {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    use std::io::Read;
    let stdin = std::io::stdin();
    let mut attrs = tcgetattr(&stdin)?;
    cfmakeraw(&mut attrs);
    tcsetattr(&stdin, SetArg::TCSANOW, &attrs)?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    write!(out, "\x1b[?2004hraw> ")?;
    out.flush()?;
    let (mut in_paste, mut tail, mut enters) = (false, Vec::<u8>::new(), 0u32);
    let mut buf = [0u8; 4096];
    let mut input = stdin.lock();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) | Err(_) => return Ok(0),
            Ok(n) => n,
        };
        log.write_all(&buf[..n])?;
        log.flush()?;
        out.write_all(&buf[..n])?;
        for &b in &buf[..n] {
            tail.push(b);
            if tail.len() > 6 {
                tail.remove(0);
            }
            if tail.ends_with(b"\x1b[200~") {
                in_paste = true;
            } else if tail.ends_with(b"\x1b[201~") {
                in_paste = false;
            } else if b == b'\r' && !in_paste {
                enters += 1;
                write!(out, "\r\nreceived {enters}\r\nraw> ")?;
            }
        }
        out.flush()?;
    }
}

/// What each step's model response used, as Claude Code records it (`message.usage`):
/// input, cache writes, cache reads, output. 2,150 tokens a step.
const STEP_USAGE: (u64, u64, u64, u64) = (1200, 0, 800, 150);

/// A Claude Code-shaped transcript, written under `$PHOENIX_STATE_DIR/transcripts/` when
/// phoenix runs the demo agent (nowhere otherwise), so triage has one to read and the usage
/// ledger counts its tokens.
struct Transcript {
    path: Option<std::path::PathBuf>,
    model: String,
}

impl Transcript {
    fn open(session_id: &str, model: &str) -> Transcript {
        let path = std::env::var_os("PHOENIX_STATE_DIR").map(|dir| {
            let dir = std::path::PathBuf::from(dir).join("transcripts");
            let _ = crate::state::create_private_dir(&dir);
            dir.join(format!("{session_id}.jsonl"))
        });
        Transcript {
            path,
            model: model.to_string(),
        }
    }

    fn path_str(&self) -> String {
        self.path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    fn record(&self, mut record: serde_json::Value) {
        let Some(path) = &self.path else { return };
        record["timestamp"] = json!(crate::state::now_rfc3339());
        let _ = crate::state::append_jsonl(path, &record);
    }

    /// The model's text answer, without a tool call or usage.
    fn said(&self, text: &str) {
        self.record(json!({"type": "assistant", "message": {
            "id": format!("msg_demo_{}", new_session_id().replace('-', "")), "type": "message",
            "role": "assistant", "model": self.model,
            "content": [{"type": "text", "text": text}],
        }}));
    }

    fn tool_call(&self, step: u64, command: &str, failing: bool) {
        let id = format!("toolu_demo_{step}");
        let (input, cache_write, cache_read, output) = STEP_USAGE;
        self.record(json!({"type": "assistant", "message": {
            // Unique, as a real message id is: a resumed session counts its steps afresh.
            "id": format!("msg_demo_{}", new_session_id().replace('-', "")), "type": "message",
            "role": "assistant", "model": self.model,
            "content": [
                {"type": "text", "text": format!("Step {step}: running `{command}`.")},
                {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command}},
            ],
            "usage": {"input_tokens": input, "cache_creation_input_tokens": cache_write,
                      "cache_read_input_tokens": cache_read, "output_tokens": output},
        }}));
        let result = if failing {
            "Exit code 1\ndemo failure"
        } else {
            "ok"
        };
        self.record(
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "is_error": failing, "content": result},
            ]}}),
        );
    }
}

/// What a CLI does when its API call fails for good: show the error, record it, exit.
fn fail(out: &mut dyn Write, transcript: &Transcript, error: Option<&str>) {
    let Some(error) = error else { return };
    say!(out, "API Error: {error}");
    transcript.record(json!({"type": "assistant", "isApiErrorMessage": true,
        "message": {"role": "assistant", "content": [{"type": "text", "text": format!("API Error: {error}")}]}}));
}

fn cwd() -> String {
    std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn additional_context(stdout: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).ok()?;
    v.pointer("/hookSpecificOutput/additionalContext")
        .and_then(|c| c.as_str())
        .map(str::to_string)
}

/// `--no-hooks`: the agent calls no hook at all.
static NO_HOOKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Call `phoenix hook EVENT --agent NAME` with the payload on stdin, like a CLI does.
/// Returns the hook's stdout. Without PHOENIX_CONFIG (run by hand) there is nothing to call.
fn hook(agent: &str, event: &str, payload: serde_json::Value) -> Option<String> {
    if NO_HOOKS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    std::env::var_os("PHOENIX_CONFIG")?;
    let exe = crate::process::main_binary().ok()?;
    let mut child = Command::new(exe)
        .args(["hook", event, "--agent", agent])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(payload.to_string().as_bytes());
    }
    let out = child.wait_with_output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
