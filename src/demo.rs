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
    let agent = args.agent.clone().unwrap_or_else(|| "demo".into());
    if args.no_hooks {
        NO_HOOKS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let (session_id, source) = match &args.resume {
        Some(id) => (id.clone(), "resume"),
        None => (new_session_id(), "startup"),
    };
    let transcript = Transcript::open(&session_id);
    // As Claude Code does: a session it never wrote (no prompt, no turn) cannot be resumed.
    if source == "resume" && transcript.path.as_ref().is_some_and(|p| !p.exists()) {
        say!(out, "No conversation found with session ID: {session_id}");
        return Ok(1);
    }
    say!(out, "demo-agent `{agent}` session {session_id} ({source})");
    if source == "startup"
        && let Some(task) = &args.task
    {
        transcript.record(json!({"type": "user", "message": {"role": "user", "content": task}}));
    }
    let context = hook(
        &agent,
        "session-start",
        json!({
            "hook_event_name": "SessionStart", "session_id": session_id, "source": source,
            "cwd": cwd(), "transcript_path": transcript.path_str(),
        }),
    );
    if let Some(text) = context.as_deref().and_then(additional_context) {
        say!(
            out,
            "[context injected by phoenix]\n{text}\n[end of context]"
        );
    }
    say!(
        out,
        "type: crash | exit | silent | work | fail | ok | turn CMD | tool CMD"
    );
    // Bracketed paste on, as real agent CLIs have it: a pasted block (phoenix's injections)
    // arrives between ESC[200~ and ESC[201~ and is one prompt, not one per line.
    let _ = write!(out, "\x1b[?2004h> ");
    let _ = out.flush();

    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut pasted: Option<String> = None;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let (start, end) = (line.contains("\x1b[200~"), line.contains("\x1b[201~"));
            let text = line.replace("\x1b[200~", "").replace("\x1b[201~", "");
            let whole = match (pasted.take(), start, end) {
                (None, true, false) => {
                    pasted = Some(text);
                    continue;
                }
                (Some(mut block), _, false) => {
                    block.push('\n');
                    block.push_str(&text);
                    pasted = Some(block);
                    continue;
                }
                (Some(mut block), _, true) => {
                    block.push('\n');
                    block.push_str(&text);
                    block
                }
                (None, _, _) => text,
            };
            if tx.send(whole.trim().to_string()).is_err() {
                break;
            }
        }
    });

    let started = Instant::now();
    let mut mode = Mode::Working;
    let mut failing = args.fail_tools;
    let mut step = 0u64;
    loop {
        if args.crash_after.is_some_and(|d| started.elapsed() >= d) {
            say!(out, "\ndemo-agent: simulated crash");
            fail(out, &transcript, args.fail_with.as_deref());
            return Ok(args.exit_code);
        }
        if args.silent_after.is_some_and(|d| started.elapsed() >= d) {
            mode = Mode::Silent;
        }
        match rx.recv_timeout(args.interval) {
            Ok(word) => match word.as_str() {
                "crash" => {
                    say!(out, "demo-agent: crashing as asked");
                    fail(out, &transcript, args.fail_with.as_deref());
                    return Ok(args.exit_code);
                }
                "exit" | "quit" => {
                    hook(
                        &agent,
                        "session-end",
                        json!({
                            "hook_event_name": "SessionEnd", "session_id": session_id,
                            "reason": "prompt_input_exit", "cwd": cwd(),
                        }),
                    );
                    say!(out, "demo-agent: bye");
                    return Ok(0);
                }
                "silent" | "hang" => mode = Mode::Silent,
                "work" => mode = Mode::Working,
                "fail" => failing = true,
                "ok" => failing = false,
                "" => {}
                // `say TEXT` prints TEXT (`\n` for a new line, `{}` for nothing): how a test
                // makes the agent write `->continuity:` commands that its typed, echoed input
                // does not contain (`->conti{}nuity:load`).
                say if say.starts_with("say ") => {
                    say!(out, "{}", say[4..].replace("\\n", "\n").replace("{}", ""))
                }
                // `tool CMD`: one Bash tool call that runs CMD through `sh -c`, as Claude Code's
                // Bash tool does, announced before (PreToolUse) and reported after; the agent
                // does nothing else meanwhile. The agent here is the model: a test types CMD.
                t if t.starts_with("tool ") => {
                    let command = &t[5..];
                    let call = json!({
                        "session_id": session_id, "cwd": cwd(),
                        "tool_name": "Bash", "tool_input": {"command": command},
                    });
                    let mut pre = call.clone();
                    pre["hook_event_name"] = json!("PreToolUse");
                    hook(&agent, "pre-tool", pre);
                    say!(out, "demo-agent: tool running `{command}`");
                    let ok = Command::new("sh")
                        .arg("-c")
                        .arg(command)
                        .status()
                        .is_ok_and(|s| s.success());
                    step += 1;
                    transcript.tool_call(step, command, !ok);
                    let mut post = call;
                    post["hook_event_name"] = json!("PostToolUse");
                    post["tool_response"] =
                        json!({"stdout": "", "stderr": "", "interrupted": false});
                    hook(&agent, "heartbeat", post);
                    say!(out, "demo-agent: tool done");
                    continue;
                }
                // `turn CMD`: one whole turn, as a model that runs CMD and is done: its prompt,
                // one successful tool call running CMD, the end of the turn; then idle at the
                // prompt.
                t if t.starts_with("turn ") => {
                    let command = &t[5..];
                    say!(out, "demo-agent: turn running `{command}`");
                    hook(
                        &agent,
                        "prompt",
                        json!({
                            "hook_event_name": "UserPromptSubmit", "session_id": session_id,
                            "cwd": cwd(), "prompt": format!("please run {command}"),
                        }),
                    );
                    step += 1;
                    transcript.tool_call(step, command, false);
                    tool_ok(&agent, &session_id, command);
                    hook(
                        &agent,
                        "stop",
                        json!({"hook_event_name": "Stop", "session_id": session_id, "cwd": cwd()}),
                    );
                    say!(out, "demo-agent: turn done");
                    mode = Mode::Silent;
                    continue;
                }
                // Several words are a prompt, as a person (or phoenix) would type it.
                prompt if prompt.contains(' ') => {
                    say!(out, "demo-agent: prompt received: {prompt}");
                    hook(
                        &agent,
                        "prompt",
                        json!({
                            "hook_event_name": "UserPromptSubmit", "session_id": session_id,
                            "cwd": cwd(), "prompt": prompt,
                        }),
                    );
                }
                other => say!(out, "demo-agent: unknown word `{other}`"),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // stdin closed: keep working, like a CLI left running without a terminal.
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(args.interval),
        }
        if mode == Mode::Silent {
            continue;
        }
        step += 1;
        let command = format!("demo step {step}");
        transcript.tool_call(step, &command, failing);
        if failing {
            say!(out, "working: step {step} (tool failed)");
            hook(
                &agent,
                "tool-error",
                json!({
                    "hook_event_name": "PostToolUseFailure", "session_id": session_id, "cwd": cwd(),
                    "tool_name": "Bash", "tool_input": {"command": command},
                    "error": "Exit code 1\ndemo failure", "is_interrupt": false,
                }),
            );
        } else {
            say!(out, "working: step {step}");
            tool_ok(&agent, &session_id, &command);
        }
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

/// A Claude Code-shaped transcript, written under `$PHOENIX_STATE_DIR/transcripts/` when
/// phoenix runs the demo agent (nowhere otherwise), so triage has one to read.
struct Transcript {
    path: Option<std::path::PathBuf>,
}

impl Transcript {
    fn open(session_id: &str) -> Transcript {
        let path = std::env::var_os("PHOENIX_STATE_DIR").map(|dir| {
            let dir = std::path::PathBuf::from(dir).join("transcripts");
            let _ = crate::state::create_private_dir(&dir);
            dir.join(format!("{session_id}.jsonl"))
        });
        Transcript { path }
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

    fn tool_call(&self, step: u64, command: &str, failing: bool) {
        let id = format!("toolu_demo_{step}");
        self.record(
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "text", "text": format!("Step {step}: running `{command}`.")},
                {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command}},
            ]}}),
        );
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

/// Call `phoenix hook EVENT --agent NAME` with the payload on stdin, like a CLI does.
/// Returns the hook's stdout. Without PHOENIX_CONFIG (run by hand) there is nothing to call.
static NO_HOOKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A Bash call that succeeded, as Claude Code's PostToolUse reports it.
fn tool_ok(agent: &str, session_id: &str, command: &str) {
    hook(
        agent,
        "heartbeat",
        json!({
            "hook_event_name": "PostToolUse", "session_id": session_id, "cwd": cwd(),
            "tool_name": "Bash", "tool_input": {"command": command},
            "tool_response": {"stdout": "ok", "stderr": "", "interrupted": false},
        }),
    );
}

fn hook(agent: &str, event: &str, payload: serde_json::Value) -> Option<String> {
    if NO_HOOKS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    std::env::var_os("PHOENIX_CONFIG")?;
    let exe = std::env::current_exe().ok()?;
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
