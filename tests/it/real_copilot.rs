//! The real GitHub Copilot CLI, driven by a scripted chat-completions server on loopback (no
//! network, no GitHub account: its BYOK provider, `COPILOT_PROVIDER_BASE_URL`, with
//! `COPILOT_OFFLINE=true`), running the hooks phoenix generates. The CLI is installed with npm
//! into `target/real-clis/copilot-VERSION/` on first use; if that fails the suite fails loudly
//! rather than passing without having run.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1` (`.ci/run` sets it); plain `cargo test` says it
//! skipped the suite and why.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::Fleet;
use support::chat_server::{self, ChatCompletions, ChatServer};
use support::real::{self, RealCli, Run, state_of};
use support::scripted::Turn;

const COPILOT: &str = "@github/copilot";
/// The version the suite is pinned to (`PHOENIX_TEST_CLI_VERSIONS` picks another).
pub(crate) const COPILOT_PINNED: &str = "1.0.102";
const KEY: &str = "sk-scripted-copilot-0123456789";
const WAIT: Duration = Duration::from_secs(30);
/// What Copilot's footer shows once it waits for input.
const READY: &str = "? help";

/// The `copilot` launcher, with its bundle unpacked once into a cache beside the install that
/// every test shares (each new HOME would unpack its 235 MB again).
pub(crate) fn copilot_bin() -> PathBuf {
    let bin = support::npm_cli("copilot", COPILOT, COPILOT_PINNED, "copilot");
    static UNPACK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = UNPACK.lock().unwrap_or_else(|e| e.into_inner());
    let cache = pkg_cache(&bin);
    if !cache.join("pkg").exists() {
        let status = std::process::Command::new(&bin)
            .arg("--version")
            .env("COPILOT_PKG_CACHE_HOME", &cache)
            .env("COPILOT_SEA_EXTRACT_ONLY", "1")
            .status()
            .unwrap();
        assert!(status.success(), "copilot could not unpack its bundle");
    }
    bin
}

/// `target/real-clis/copilot-VERSION/pkg-cache` for the launcher at `.../node_modules/.bin`.
pub(crate) fn pkg_cache(bin: &Path) -> PathBuf {
    bin.ancestors().nth(3).unwrap().join("pkg-cache")
}

/// Copilot CLI in the table of the scenarios every real CLI goes through alike.
const COPILOT_CLI: RealCli<ChatCompletions> = RealCli {
    agent: "cp",
    serve: chat_server::start,
    start: |fleet, server, extra, prompt| {
        let (dir, pane) = start_copilot(fleet, server, extra, prompt);
        Run {
            dir,
            pane,
            home: fleet.path().join("home"),
            guard: None,
        }
    },
    submit: |fleet, pane, text| support::submit(fleet, pane, text, WAIT),
    shell: bash,
    turns: ChatServer::turn_requests,
    // A failed command is a `success` whose text ends `<shellId: N completed with exit code 2>`.
    failed_shell_call: |t| {
        t["tool"] == "Bash"
            && t["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("exit code 2"))
    },
    outlives_terminal: false,
};

/// Copilot's shell tool.
pub(crate) fn bash(command: &str) -> Turn {
    chat_server::tool("bash", json!({"command": command, "description": "run it"}))
}

/// An agent that runs the real Copilot CLI interactively in `work/`, its model the scripted
/// server, nothing trusted yet.
fn copilot_agent(fleet: &Fleet, bin: &Path, server: &ChatServer) -> String {
    format!(
        "[[agent]]\nname = \"cp\"\ncli = \"copilot\"\ncommand = \"'{}' --allow-all-tools\"\n\
         workdir = \"work\"\nenv = {{ HOME = \"{}\", COPILOT_OFFLINE = \"true\", \
         COPILOT_AUTO_UPDATE = \"false\", COPILOT_PROVIDER_BASE_URL = \"{}/v1\", \
         COPILOT_PROVIDER_API_KEY = \"{KEY}\", COPILOT_MODEL = \"{}\", \
         COPILOT_PKG_CACHE_HOME = \"{}\" }}\n",
        bin.display(),
        fleet.path().join("home").display(),
        server.base_url(),
        chat_server::MODEL,
        pkg_cache(bin).display(),
    )
}

fn workdir(fleet: &Fleet) -> PathBuf {
    let work = fleet.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::canonicalize(work).unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The events file Copilot keeps for session `id`.
fn events_file(fleet: &Fleet, id: &str) -> PathBuf {
    fleet
        .path()
        .join("home/.copilot/session-state")
        .join(id)
        .join("events.jsonl")
}

/// What the CLI sent back to the model for the tool calls it made.
pub(crate) fn tool_results(request: &support::scripted::Request) -> String {
    request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect()
}

/// The suite runs only when asked for (see `support::opted_in`).
fn enabled() -> bool {
    support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_copilot.rs (the real Copilot CLI)",
        "npm and access to the npm registry",
    )
}

/// A real Copilot agent started by `phoenix apply` (with `extra` phoenix.toml text before its
/// declaration and fast restarts), `prompt` typed into it once it waits for input. Returns the
/// agent's state dir and its pane.
fn start_copilot(
    fleet: &Fleet,
    server: &ChatServer,
    extra: &str,
    prompt: &str,
) -> (PathBuf, String) {
    declare_copilot(fleet, server, extra);
    launch_copilot(fleet, prompt)
}

/// phoenix.toml with the Copilot agent (`extra` text before it, fast restarts).
fn declare_copilot(fleet: &Fleet, server: &ChatServer, extra: &str) {
    let bin = copilot_bin();
    workdir(fleet);
    fleet.toml(&format!(
        "{extra}\n[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"60s\"\n\n{}",
        copilot_agent(fleet, &bin, server)
    ));
}

/// `phoenix apply` the declared agent and type `prompt` once it waits for input.
fn launch_copilot(fleet: &Fleet, prompt: &str) -> (PathBuf, String) {
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cp"]);
    let pane = fleet.agent_status("cp")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(fleet, &pane, READY, WAIT);
    support::submit(fleet, &pane, prompt, WAIT);
    (fleet.agent_dir("cp"), pane)
}

/// `phoenix apply` writes `.github/hooks/phoenix.json` and trusts the folder in Copilot's
/// config.json, so Copilot starts with no trust dialog and runs phoenix's hooks: the open loop
/// reaches the model with the session's start, the shell call lands in tool_use.jsonl, the turn
/// ends idle with the session id and its events file recorded.
#[test]
fn real_copilot_in_a_phoenix_pane_runs_the_hooks_apply_installed() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let server = chat_server::start(vec![
        bash("echo interactive-ok > out.txt"),
        Turn::text("Wrote it."),
    ]);
    declare_copilot(&fleet, &server, "");
    fleet
        .run(&["loop", "add", "cp", "ship-parser", "ship the parser"])
        .status(0);
    let (dir, pane) = launch_copilot(&fleet, "write the file");
    let hooks = std::fs::read_to_string(work.join(".github/hooks/phoenix.json")).unwrap();
    assert!(hooks.contains("hook session-start --agent cp"), "{hooks}");
    let config = std::fs::read_to_string(fleet.path().join("home/.copilot/config.json")).unwrap();
    assert!(
        config.contains(&format!("\"{}\"", work.display())),
        "{config}"
    );
    support::wait_until_explained(
        WAIT,
        "the tool call recorded",
        || {
            support::read_jsonl(&dir.join("tool_use.jsonl"))
                .iter()
                .any(|t| t["tool"] == "Bash" && t["ok"] == true)
        },
        || fleet.explain("cp", &pane),
    );
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt"))
            .unwrap()
            .trim(),
        "interactive-ok"
    );
    support::wait_until(WAIT, "turn finished", || {
        read_json(&dir.join("state.json"))["status"] == "idle"
    });
    let state = read_json(&dir.join("state.json"));
    assert_eq!(state["current_task"], "write the file");
    let id = state["session_id"].as_str().unwrap();
    let events = events_file(&fleet, id);
    assert!(events.exists(), "{}", events.display());
    assert_eq!(
        state["transcript_path"].as_str().map(PathBuf::from),
        Some(events.clone())
    );
    let ops = fleet.ops("cp");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "session_start" && o["session_id"] == id),
        "{ops:?}"
    );
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert!(tools.iter().all(|t| t["session_id"] == id), "{tools:?}");
    let turns = server.turn_requests();
    assert!(
        turns[0].text().contains("[ship-parser] ship the parser"),
        "the open loop was injected at session start: {}",
        turns[0].text()
    );
    assert!(
        tool_results(&turns[1]).contains("exit code 0"),
        "{}",
        turns[1].text()
    );
    support::wait_for_screen(&fleet, &pane, "Wrote it.", WAIT);
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// `kill -9` of the real Copilot mid-turn (its model call after a finished shell call hangs):
/// the wrapper starts `copilot --resume=<id>` with the recorded session, types its
/// continuation prompt, Copilot's SessionStart says `resume`, and phoenix's recovery block
/// reaches the model with that request; nobody types. The same events file goes on.
#[test]
fn real_copilot_killed_mid_turn_is_resumed_with_the_recovery_block() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let server = chat_server::start(vec![bash("echo step-one > one.txt"), Turn::Hang]);
    let (dir, pane) = start_copilot(&fleet, &server, "", "refactor the parser module");
    let bin = copilot_bin();
    support::wait_until_explained(
        WAIT,
        "the turn under way",
        || {
            // Copilot writes its events file on its own schedule, a moment after the
            // model call can already be seen: a kill before it is a session with nothing
            // to resume, which is not what this test is about.
            let state = std::fs::read(dir.join("state.json")).unwrap_or_default();
            let state: Value = serde_json::from_slice(&state).unwrap_or_default();
            let session = state["session_id"].as_str().map(str::to_string);
            work.join("one.txt").exists()
                && server.turn_requests().len() == 2
                && support::read_jsonl(&dir.join("tool_use.jsonl")).len() == 1
                && session.is_some_and(|id| events_file(&fleet, &id).exists())
        },
        || fleet.explain("cp", &pane),
    );
    let state = read_json(&dir.join("state.json"));
    assert_eq!(state["status"], "working");
    let id = state["session_id"].as_str().unwrap().to_string();
    let events = events_file(&fleet, &id);

    server.push([Turn::text("Picked up where I stopped.")]);
    let pid = fleet.agent_status("cp")["pid"].as_u64().unwrap() as u32;
    support::kill9(pid);
    support::wait_until_explained(
        Duration::from_secs(60),
        "SessionStart resume",
        || {
            fleet.ops("cp").iter().any(|o| {
                o["event"] == "session_start" && o["source"] == "resume" && o["session_id"] == id
            })
        },
        || fleet.explain("cp", &pane),
    );
    let ops = fleet.ops("cp");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume");
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let resume = format!("--resume={id}");
    assert_eq!(
        argv,
        [bin.to_str().unwrap(), "--allow-all-tools", resume.as_str()]
    );
    let sent = COPILOT_CLI.sent_with_the_continue_prompt(&fleet, &server, &pane);
    assert!(sent.contains("PHOENIX: RECOVERY DETECTED"), "{sent}");
    assert!(sent.contains("refactor the parser module"), "{sent}");
    assert!(sent.contains("latest handoff"), "{sent}");
    support::wait_for_screen(&fleet, &pane, "Picked up where I stopped.", WAIT);
    assert!(
        std::fs::read_to_string(&events)
            .unwrap()
            .contains("Picked up where I stopped."),
        "the resumed session wrote elsewhere"
    );
    assert_eq!(
        state_of(&dir)["session_id"].as_str(),
        Some(id.as_str()),
        "same session"
    );
    assert!(sent.contains(", crash) ---"), "{sent}");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// The chat-completions API answers 400 `context_length_exceeded`. Copilot shows the error,
/// fires no Stop, and waits at its prompt; its events file ends the turn with `session.error`
/// → the watchdog reads it there, the Clinic diagnoses a full context → a context-limit handoff
/// and a fresh session, to which the handoff and the continuation prompt go, nobody typing.
#[test]
fn real_copilot_out_of_context_starts_fresh_with_the_handoff() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = chat_server::start(vec![
        chat_server::context_length_exceeded(),
        Turn::text("Continuing the migration from the handoff."),
    ]);
    let (dir, pane) = start_copilot(&fleet, &server, "", "migrate the billing tables");
    support::wait_for_screen(&fleet, &pane, "maximum context length", WAIT);
    let state = || state_of(&dir);
    // No hook said the turn ended: only the events file knows.
    assert_eq!(state()["status"], "working");
    let old_session = state()["session_id"].as_str().unwrap().to_string();
    support::wait_until(WAIT, "session.error in the events file", || {
        std::fs::read_to_string(events_file(&fleet, &old_session))
            .is_ok_and(|t| t.contains("\"session.error\""))
    });

    let report = fleet
        .run(&["watchdog", "--once", "--json"])
        .status(1)
        .json();
    let cp = &report["agents"][0];
    assert_eq!(cp["findings"][0]["check"], "turn_failed", "{report}");
    assert!(
        cp["findings"][0]["summary"]
            .as_str()
            .unwrap()
            .contains("maximum context length"),
        "{report}"
    );
    assert!(
        cp["action_taken"]
            .as_str()
            .unwrap_or("")
            .contains("started fresh"),
        "{report}"
    );
    let events = fleet
        .run(&["events", "--agent", "cp", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("context_length_exceeded"), "{events}");

    let sent = COPILOT_CLI.sent_with_the_continue_prompt(&fleet, &server, &pane);
    let ops = fleet.ops("cp");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "fresh", "{start}");
    let handoffs = fleet.run(&["handoff", "list", "cp", "--json"]).json()["handoffs"].clone();
    assert_eq!(handoffs[0]["trigger_reason"], "context_limit", "{handoffs}");
    assert!(
        sent.contains("FRESH SESSION, CONTEXT CARRIED OVER"),
        "{sent}"
    );
    assert!(sent.contains("migrate the billing tables"), "{sent}");
    support::wait_for_screen(
        &fleet,
        &pane,
        "Continuing the migration from the handoff.",
        WAIT,
    );
    support::wait_until(WAIT, "the new session's turn finished", || {
        state()["status"] == "idle"
    });
    assert_ne!(state()["session_id"].as_str().unwrap(), old_session);
    assert_eq!(state()["current_task"], "migrate the billing tables");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// A model call that fails and is retried is no failed turn: Copilot fires ErrorOccurred on
/// every attempt, so phoenix must leave a session whose retry worked alone.
#[test]
fn real_copilot_retried_model_error_is_not_a_failed_turn() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = chat_server::start(vec![
        Turn::Error {
            status: 500,
            kind: "server_error".into(),
            message: "The server had an error while processing your request.".into(),
        },
        Turn::text("Answered on the retry."),
    ]);
    let (dir, pane) = start_copilot(&fleet, &server, "", "answer after a retry");
    support::wait_for_screen(
        &fleet,
        &pane,
        "Answered on the retry.",
        Duration::from_secs(60),
    );
    support::wait_until(WAIT, "turn finished", || state_of(&dir)["status"] == "idle");
    let report = fleet.run(&["watchdog", "--once", "--json"]).json();
    assert_eq!(report["agents"][0]["verdict"], "healthy", "{report}");
    let ops = fleet.ops("cp");
    assert!(!ops.iter().any(|o| o["event"] == "turn_failed"), "{ops:?}");
    assert_eq!(
        ops.iter().filter(|o| o["event"] == "agent_start").count(),
        1,
        "{ops:?}"
    );
}

/// Six shell calls fail in a row (each a `success` whose text ends in exit code 2) → an error
/// cascade; the events file's usage records are read into the usage ledger.
#[test]
fn real_copilot_six_failing_shell_calls_are_an_error_cascade() {
    if !enabled() {
        return;
    }
    real::failing_shell_calls_are_an_error_cascade(&COPILOT_CLI);
}

/// Copilot's spinner (`◉ Working`, its circle glyphs cycling) is no sign of life: a model call
/// that hangs leaves the screen still but for it, and is found silent (issue 32).
#[test]
fn real_copilot_hanging_on_the_model_is_found_silent_and_revived() {
    if !enabled() {
        return;
    }
    real::hanging_model_is_found_silent_and_revived(&COPILOT_CLI);
}

#[test]
fn real_copilot_idle_past_silence_then_a_slow_answer_is_not_silent() {
    if !enabled() {
        return;
    }
    real::idle_past_silence_then_a_slow_answer_is_not_silent(&COPILOT_CLI);
}

#[test]
fn real_copilot_killed_mid_tool_leaves_no_orphan_and_is_told_what_was_stopped() {
    if !enabled() {
        return;
    }
    real::killed_mid_tool(&COPILOT_CLI);
}

#[test]
fn real_copilot_left_by_a_killed_wrapper_is_stopped_before_the_next_start() {
    if !enabled() {
        return;
    }
    real::killed_wrapper(&COPILOT_CLI);
}

/// The healthy side of the spinner fix (issue 32): a Copilot turn longer than the silence
/// threshold that works all along (a shell call printing nothing for over three times the threshold, then an answer
/// streamed a word every 0.5 s, longer than it too) is never found silent. Copilot's events
/// file holds neither the streamed words nor the shell call's progress: the pane and the
/// hooks are what show it working. Watchdog passes run back to back the whole turn.
#[test]
fn real_copilot_long_shell_call_and_slow_answer_are_not_silent() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let slow = "The archive is indexed: every volume, every chapter, every page and every \
                footnote is in the catalogue now.";
    let server = chat_server::start(vec![bash("sleep 10; echo indexed"), Turn::text(slow)]);
    let (dir, pane) = start_copilot(
        &fleet,
        &server,
        "[thresholds]\nsilence = \"3s\"\n",
        "index the archive",
    );
    let started = std::time::Instant::now();
    let mut reports = Vec::new();
    let mut paced = false;
    while !(state_of(&dir)["status"] == "idle" && dir.join("tool_use.jsonl").exists()) {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the turn did not end: {}",
            fleet.explain("cp", &pane)
        );
        // The answer after the shell call streams slowly.
        if !paced && !server.turn_requests().is_empty() {
            server.pace_next(Duration::from_millis(500));
            paced = true;
        }
        reports.push(fleet.run(&["watchdog", "--once", "--json"]).json());
        std::thread::sleep(Duration::from_millis(300));
    }
    let took = started.elapsed();
    for report in &reports {
        assert_eq!(report["agents"][0]["verdict"], "healthy", "{report}");
    }
    // The turn was longer than the silence threshold twice over, and passes saw all of it.
    assert!(took > Duration::from_secs(12), "{took:?}");
    assert!(reports.len() >= 8, "{} passes", reports.len());
    support::wait_for_screen(&fleet, &pane, "footnote is in the catalogue", WAIT);
    let ops = fleet.ops("cp");
    assert_eq!(
        ops.iter().filter(|o| o["event"] == "agent_start").count(),
        1,
        "{ops:?}"
    );
    assert!(!fleet.unhealthy_events("cp").contains("session_unhealthy"));
}
