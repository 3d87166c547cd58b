//! The real Gemini CLI, driven by a scripted Gemini API server on loopback (no network),
//! running the hooks phoenix generates. The CLI is installed with npm into
//! `target/real-clis/gemini-VERSION/` on first use; if that fails the suite fails loudly rather than
//! passing without having run.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1` (`.ci/run` sets it); plain `cargo test` says it
//! skipped the suite and why.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::Fleet;
use support::gemini_server::{self, Gemini, GeminiServer, shell};
use support::real::{self, RealCli, Run, state_of};
use support::scripted::Turn;

/// The Gemini CLI version the suite is pinned to.
const GEMINI: &str = "@google/gemini-cli";
/// The version the suite is pinned to (`PHOENIX_TEST_CLI_VERSIONS` picks another).
pub(crate) const GEMINI_PINNED: &str = "0.61.0";
const KEY: &str = "scripted-gemini-key-0123456789";
const WAIT: Duration = Duration::from_secs(30);

fn gemini_bin() -> PathBuf {
    support::npm_cli("gemini", GEMINI, GEMINI_PINNED, "gemini")
}

/// Gemini CLI in the table of the scenarios every real CLI goes through alike.
const GEMINI_CLI: RealCli<Gemini> = RealCli {
    agent: "gm",
    serve: gemini_server::start,
    start: |fleet, server, extra, prompt| {
        let (dir, pane) = start_gemini(fleet, server, extra, prompt);
        Run {
            dir,
            pane,
            home: fleet.path().join("home"),
            guard: None,
        }
    },
    submit: |fleet, pane, text| support::submit(fleet, pane, text, WAIT),
    shell,
    turns: GeminiServer::turn_requests,
    // Gemini's AfterTool sets no error for a failed command: phoenix reads `Exit Code: N`.
    failed_shell_call: |t| t["tool"] == "run_shell_command" && t["error"] == "exit code 2",
    outlives_terminal: false,
};

/// A HOME where Gemini CLI uses an API key, checks for no updates and reports nothing.
/// Nothing is trusted yet.
fn gemini_home(fleet: &Fleet) -> PathBuf {
    let home = fleet.path().join("home");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false},
    });
    std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).unwrap();
    home
}

/// An agent that runs the real Gemini CLI interactively in `work/`.
fn gemini_agent(bin: &Path, home: &Path, server: &GeminiServer) -> String {
    format!(
        "[[agent]]\nname = \"gm\"\ncli = \"gemini\"\ncommand = \"'{}' --yolo\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\", GOOGLE_GEMINI_BASE_URL = \"{}\", GEMINI_API_KEY = \"{KEY}\" }}\n",
        bin.display(),
        home.display(),
        server.base_url()
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

/// The chat file Gemini CLI keeps for session `id` (named after its first 8 characters).
fn chat_file(home: &Path, id: &str) -> Option<PathBuf> {
    let mut dirs = vec![home.join(".gemini/tmp")];
    let suffix = format!("-{}.jsonl", &id[..8]);
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(&suffix) {
                return Some(path);
            }
        }
    }
    None
}

/// What the CLI sent back to the model for the shell call it made.
fn tool_result(request: &support::scripted::Request) -> String {
    request.body["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["parts"].as_array().into_iter().flatten())
        .filter(|p| p.get("functionResponse").is_some())
        .map(|p| p["functionResponse"].to_string())
        .collect()
}

/// The suite runs only when asked for (see `support::opted_in`).
fn enabled() -> bool {
    support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_gemini.rs (the real Gemini CLI)",
        "npm and access to the npm registry",
    )
}

#[test]
fn scripted_server_drives_a_real_shell_call_and_phoenix_hooks_fire() {
    if !enabled() {
        return;
    }
    let bin = gemini_bin();
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let home = gemini_home(&fleet);
    let server = gemini_server::start(vec![
        shell("echo phoenix-smoke > smoke.txt"),
        shell("ls /nonexistent-phoenix-dir"),
        Turn::text("All done."),
    ]);
    fleet.toml(&gemini_agent(&bin, &home, &server));
    // phoenix's hooks for the agent, exactly as `apply` installs them.
    let shown = fleet
        .run(&["hooks", "show", "--agent", "gm", "--json"])
        .json();
    let file = &shown["files"][0];
    assert!(
        file["path"]
            .as_str()
            .unwrap()
            .ends_with(".gemini/settings.json")
    );
    std::fs::create_dir_all(work.join(".gemini")).unwrap();
    std::fs::write(
        work.join(".gemini/settings.json"),
        file["content"].to_string(),
    )
    .unwrap();
    // Print mode has no wrapper to record the folder trust.
    std::fs::write(
        home.join(".gemini/trustedFolders.json"),
        json!({ work.to_string_lossy(): "TRUST_FOLDER" }).to_string(),
    )
    .unwrap();

    let out = Command::new(&bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GOOGLE_GEMINI_BASE_URL", server.base_url())
        .env("GEMINI_API_KEY", KEY)
        .current_dir(&work)
        .args(["-p", "write the smoke file", "--yolo"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "gemini -p failed:\n{said}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("All done."),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("smoke.txt"))
            .unwrap()
            .trim(),
        "phoenix-smoke"
    );
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.path.contains(":generateContent") && r.text().contains("complexity")),
        "the routing call was answered"
    );
    let turns = server.turn_requests();
    assert_eq!(turns.len(), 3, "two tool calls, then the answer");
    assert!(turns[0].text().contains("write the smoke file"));
    assert!(
        tool_result(&turns[1]).contains("run_shell_command"),
        "{}",
        turns[1].text()
    );
    assert!(
        tool_result(&turns[2]).contains("Exit Code: 2"),
        "{}",
        turns[2].text()
    );

    // phoenix's hooks ran: session start, the shell call, the end of the turn and session.
    let dir = fleet.agent_dir("gm");
    let state = read_json(&dir.join("state.json"));
    let id = state["session_id"].as_str().unwrap().to_string();
    assert!(chat_file(&home, &id).is_some(), "chat file for {id}");
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert!(tools.iter().all(|t| t["tool"] == "run_shell_command"));
    assert!(tools.iter().all(|t| t["session_id"] == id.as_str()));
    assert_eq!(tools[0]["ok"], true);
    // A failing shell command sets no `error`: the exit code is read from `llmContent`.
    assert_eq!(tools[1]["ok"], false);
    assert_eq!(tools[1]["error"], "exit code 2", "{tools:?}");
    let ops = fleet.ops("gm");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "session_start" && o["source"] == "startup"),
        "{ops:?}"
    );
    assert!(ops.iter().any(|o| o["event"] == "turn_complete"), "{ops:?}");
    assert!(ops.iter().any(|o| o["event"] == "session_end"), "{ops:?}");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// `phoenix apply` with a `cli = "gemini"` agent: the hooks are installed, the wrapper has
/// Gemini CLI trust the workdir (no dialog stops it), the real Gemini CLI runs interactively,
/// its session id is recorded at session start, its shell call lands in tool_use.jsonl, and
/// the open loop reaches the model.
#[test]
fn real_gemini_in_a_phoenix_pane_runs_the_hooks_apply_installed() {
    if !enabled() {
        return;
    }
    let bin = gemini_bin();
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let home = gemini_home(&fleet);
    let server = gemini_server::start(vec![
        shell("echo interactive-ok > out.txt"),
        Turn::text("Wrote it."),
    ]);
    fleet.toml(&gemini_agent(&bin, &home, &server));
    fleet
        .run(&["loop", "add", "gm", "ship-parser", "ship the parser"])
        .status(0);
    fleet.run(&["apply", "--yes"]).status(0);
    let hooks = std::fs::read_to_string(work.join(".gemini/settings.json")).unwrap();
    assert!(hooks.contains("hook session-start --agent gm"), "{hooks}");
    fleet.wait_running(&["gm"]);
    let pane = fleet.agent_status("gm")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = fleet.agent_dir("gm");

    // Straight to the prompt: no folder-trust dialog; Gemini fires SessionStart at startup.
    support::wait_for_screen(&fleet, &pane, "Type your message", WAIT);
    let folders = read_json(&home.join(".gemini/trustedFolders.json"));
    assert_eq!(folders[work.to_string_lossy().as_ref()], "TRUST_FOLDER");
    support::wait_until_explained(
        WAIT,
        "SessionStart",
        || {
            fleet
                .ops("gm")
                .iter()
                .any(|o| o["event"] == "session_start" && o["source"] == "startup")
        },
        || fleet.explain("gm", &pane),
    );

    support::submit(&fleet, &pane, "write the file", WAIT);
    support::wait_until_explained(
        WAIT,
        "tool call recorded",
        || {
            support::read_jsonl(&dir.join("tool_use.jsonl"))
                .iter()
                .any(|t| t["tool"] == "run_shell_command" && t["ok"] == true)
        },
        || fleet.explain("gm", &pane),
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
    assert!(chat_file(&home, id).is_some(), "chat file for {id}");
    let ops = fleet.ops("gm");
    assert!(
        ops.iter().any(|o| o["event"] == "session_start"
            && o["source"] == "startup"
            && o["session_id"] == id),
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
    assert!(tool_result(&turns[1]).contains("run_shell_command"));
    support::wait_for_screen(&fleet, &pane, "Wrote it.", WAIT);
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// `kill -9` of the real Gemini CLI mid-turn (its model call after a finished shell call is
/// hanging): the wrapper starts it with `--resume <id>`, SessionStart says `resume`, the wrapper
/// types its continuation prompt, and phoenix's recovery block reaches the model with that
/// request; nobody types.
#[test]
fn real_gemini_killed_mid_turn_is_resumed_with_the_recovery_block() {
    if !enabled() {
        return;
    }
    let bin = gemini_bin();
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let home = gemini_home(&fleet);
    let server = gemini_server::start(vec![shell("echo step-one > one.txt"), Turn::Hang]);
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        gemini_agent(&bin, &home, &server)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["gm"]);
    let pane = fleet.agent_status("gm")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &pane, "Type your message", WAIT);
    support::submit(&fleet, &pane, "refactor the parser module", WAIT);
    let dir = fleet.agent_dir("gm");
    // Mid-turn: the shell call ran and the model call after it hangs.
    support::wait_until_explained(
        WAIT,
        "the turn under way",
        || {
            work.join("one.txt").exists()
                && server.turn_requests().len() == 2
                && support::read_jsonl(&dir.join("tool_use.jsonl")).len() == 1
        },
        || fleet.explain("gm", &pane),
    );
    let state = read_json(&dir.join("state.json"));
    assert_eq!(state["status"], "working");
    let id = state["session_id"].as_str().unwrap().to_string();
    let chat_before = chat_file(&home, &id).expect("chat file of the first run");

    server.push([Turn::text("Picked up where I stopped.")]);
    support::kill9(pids[0]);
    support::wait_until_explained(
        WAIT,
        "SessionStart resume",
        || {
            fleet.ops("gm").iter().any(|o| {
                o["event"] == "session_start" && o["source"] == "resume" && o["session_id"] == id
            })
        },
        || fleet.explain("gm", &pane),
    );
    let ops = fleet.ops("gm");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume");
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        argv,
        [bin.to_str().unwrap(), "--yolo", "--resume", id.as_str()]
    );
    // Nobody types: phoenix's continuation prompt sends the resumed session on its way, and
    // the context held back at session start goes with it.
    support::wait_until_explained(
        WAIT,
        "the resumed session's request",
        || {
            server
                .turn_requests()
                .iter()
                .any(|r| r.text().contains("This session was restarted"))
        },
        || fleet.explain("gm", &pane),
    );
    let sent = server
        .turn_requests()
        .iter()
        .rfind(|r| r.text().contains("This session was restarted"))
        .unwrap()
        .text();
    assert!(sent.contains("PHOENIX: RECOVERY DETECTED"), "{sent}");
    assert!(sent.contains("refactor the parser module"), "{sent}");
    assert!(sent.contains("latest handoff"), "{sent}");
    support::wait_for_screen(&fleet, &pane, "Picked up where I stopped.", WAIT);
    // The resumed session goes on in its own chat file, and phoenix reads that one (Gemini
    // CLI reports a new, near-empty file to SessionStart once a minute has turned since the
    // session began: the "same session file" check failed 1 run in 5).
    assert!(
        std::fs::read_to_string(&chat_before)
            .unwrap()
            .contains("Picked up where I stopped."),
        "the resumed session wrote elsewhere"
    );
    let resumed = fleet
        .ops("gm")
        .into_iter()
        .rfind(|o| o["event"] == "session_start" && o["source"] == "resume")
        .unwrap();
    assert_eq!(
        resumed["transcript_path"].as_str().map(PathBuf::from),
        Some(chat_before.clone()),
        "{resumed}"
    );
    assert_eq!(
        state_of(&dir)["transcript_path"]
            .as_str()
            .map(PathBuf::from),
        Some(chat_before.clone())
    );
    // The handoff saved on the crash is the one that came with the recovery block; no turn
    // left one of its own.
    assert!(sent.contains(", crash) ---"), "{sent}");
    let handoffs = fleet.run(&["handoff", "list", "gm", "--json"]).json()["handoffs"].clone();
    let triggers: Vec<&str> = handoffs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["trigger_reason"].as_str())
        .collect();
    assert_eq!(
        triggers,
        ["crash"],
        "{:?}\n{}",
        fleet.ops("gm"),
        std::fs::read_to_string(&chat_before).unwrap()
    );
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// A real Gemini CLI agent started by `phoenix apply` (with `extra` phoenix.toml text before its
/// declaration and fast restarts), `prompt` typed into it once it waits for input. Returns the
/// agent's state dir and its pane.
fn start_gemini(
    fleet: &Fleet,
    server: &GeminiServer,
    extra: &str,
    prompt: &str,
) -> (PathBuf, String) {
    let bin = gemini_bin();
    workdir(fleet);
    let home = gemini_home(fleet);
    fleet.toml(&format!(
        "{extra}\n[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        gemini_agent(&bin, &home, server)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["gm"]);
    let pane = fleet.agent_status("gm")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(fleet, &pane, "Type your message", WAIT);
    support::submit(fleet, &pane, prompt, WAIT);
    (fleet.agent_dir("gm"), pane)
}

/// The request phoenix's continuation prompt made (it says the session was restarted), once it
/// came: what a restarted session sent to the model without anybody typing.
fn sent_with_the_continue_prompt(fleet: &Fleet, server: &GeminiServer, pane: &str) -> String {
    GEMINI_CLI.sent_with_the_continue_prompt(fleet, server, pane)
}

/// Scenario 3: the Gemini API answers that the input has more tokens than the model allows.
/// Gemini CLI shows the API error, records it in its chat file and ends the turn with AfterAgent
/// as usual → phoenix's stop hook reads the error there (status `failed`) and signals the
/// wrapper, which (no daemon, no watchdog pass) has the Clinic diagnose a full context → the
/// wrapper saves a context-limit handoff and starts a fresh session → the Clinic's context,
/// the handoff and the continuation prompt reach the model, nobody typing.
#[test]
fn real_gemini_out_of_context_starts_fresh_with_the_handoff() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = gemini_server::start(vec![
        gemini_server::token_limit_exceeded(),
        Turn::text("Continuing the migration from the handoff."),
    ]);
    let (dir, pane) = start_gemini(&fleet, &server, "", "migrate the billing tables");
    let state = || state_of(&dir);
    // The wrapper acts on the failed turn within a second: the op stays, the status and the
    // screen may already belong to the next session.
    let failed_op = || {
        fleet
            .ops("gm")
            .into_iter()
            .find(|o| o["event"] == "turn_failed")
    };
    support::wait_until_explained(
        WAIT,
        "the failed turn recorded by the AfterAgent hook",
        || failed_op().is_some(),
        || fleet.explain("gm", &pane),
    );
    let failed = failed_op().unwrap();
    let old_session = failed["session_id"].as_str().unwrap().to_string();
    assert!(
        failed["details"]
            .as_str()
            .unwrap()
            .contains("exceeds the maximum number of tokens"),
        "{failed}"
    );
    assert_eq!(failed["hook"], "AfterAgent", "{failed}");

    // Nobody runs the watchdog: the wrapper acts on the hook's signal.
    support::wait_until_explained(
        WAIT,
        "the wrapper's check of the failed turn",
        || {
            fleet
                .ops("gm")
                .iter()
                .any(|o| o["event"] == "failed_turn_checked")
        },
        || fleet.explain("gm", &pane),
    );
    let checked = fleet
        .ops("gm")
        .into_iter()
        .find(|o| o["event"] == "failed_turn_checked")
        .unwrap();
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap_or("")
            .contains("started fresh"),
        "{checked}"
    );
    let events = fleet
        .run(&["events", "--agent", "gm", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("context_length_exceeded"), "{events}");

    let sent = sent_with_the_continue_prompt(&fleet, &server, &pane);
    let turns = server.turn_requests();
    let continued = turns
        .iter()
        .find(|r| r.text().contains("This session was restarted"))
        .unwrap()
        .at;
    eprintln!(
        "token limit → the fresh session's continuation turn after {:?}",
        continued - turns[0].at
    );
    let ops = fleet.ops("gm");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "fresh", "{start}");
    let handoffs = fleet.run(&["handoff", "list", "gm", "--json"]).json()["handoffs"].clone();
    assert_eq!(handoffs[0]["trigger_reason"], "context_limit", "{handoffs}");
    assert!(
        sent.contains("FRESH SESSION, CONTEXT CARRIED OVER"),
        "{sent}"
    );
    assert!(sent.contains("migrate the billing tables"), "{sent}");
    assert!(sent.contains("latest handoff"), "{sent}");
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
    // The prompt phoenix typed did not replace the task.
    assert_eq!(state()["current_task"], "migrate the billing tables");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// Scenario 4, first half: the model hangs mid-turn. Gemini CLI waits on the stream, no tool
/// call comes → the watchdog reports silence, records it, and revives the session (`--resume`),
/// which is told why (with the first prompt) and sent on its way.
#[test]
fn real_gemini_hanging_on_the_model_is_found_silent_and_revived() {
    if !enabled() {
        return;
    }
    real::hanging_model_is_found_silent_and_revived(&GEMINI_CLI);
}

/// Scenario 4, second half: six shell calls fail in a row (Gemini's AfterTool sets no error for
/// them; phoenix reads `Exit Code: N`) → the watchdog finds an error cascade and records it as a
/// critical event.
#[test]
fn real_gemini_six_failing_shell_calls_are_an_error_cascade() {
    if !enabled() {
        return;
    }
    real::failing_shell_calls_are_an_error_cascade(&GEMINI_CLI);
}

/// Scenario 5: `/compress` typed into the real Gemini CLI → its PreCompress hook (`manual`) has
/// phoenix save a handoff; Gemini replaces the history with the model's summary and has no
/// SessionStart after it, so phoenix gives its compaction block with that handoff with the next
/// prompt (BeforeAgent), and that request carries both.
#[test]
fn real_gemini_compression_saves_a_handoff_that_comes_back() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = gemini_server::start(vec![
        shell("echo 'release notes drafted' > notes.txt"),
        Turn::text("Drafted the notes."),
        Turn::text("Carrying on after the compression."),
    ]);
    let (dir, pane) = start_gemini(&fleet, &server, "", "tidy the changelog");
    support::wait_until_explained(
        WAIT,
        "the first turn finished",
        || state_of(&dir)["status"] == "idle" && dir.join("tool_use.jsonl").exists(),
        || fleet.explain("gm", &pane),
    );
    support::submit(&fleet, &pane, "/compress", WAIT);
    support::wait_for_screen(&fleet, &pane, "Chat history compressed", WAIT);
    let pre_compact = fleet
        .ops("gm")
        .into_iter()
        .find(|o| o["event"] == "pre_compact")
        .expect("pre_compact op");
    assert_eq!(pre_compact["trigger"], "manual");
    assert_eq!(pre_compact["context_for_next_prompt"], true);
    support::wait_until(WAIT, "the pre-compact handoff", || {
        fleet.run(&["handoff", "list", "gm", "--json"]).json()["handoffs"]
            .clone()
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h["trigger_reason"] == "pre_compact"))
    });
    let handoffs = fleet.run(&["handoff", "list", "gm", "--json"]).json()["handoffs"].clone();
    let saved = handoffs
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["trigger_reason"] == "pre_compact")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = fleet
        .run(&["handoff", "show", &saved, "--agent", "gm"])
        .status(0)
        .stdout();
    assert!(shown.contains("tidy the changelog"), "{shown}");

    let before = server.turn_requests().len();
    support::submit(&fleet, &pane, "go on with the changelog", WAIT);
    let turn_request = || {
        server.turn_requests()[before..]
            .iter()
            .find(|r| r.text().contains("go on with the changelog"))
            .map(|r| r.text())
    };
    support::wait_until_explained(
        WAIT,
        "the request after the compression",
        || turn_request().is_some(),
        || fleet.explain("gm", &pane),
    );
    let sent = turn_request().unwrap();
    assert!(
        sent.contains(gemini_server::SUMMARY),
        "the compressed history: {sent}"
    );
    assert!(sent.contains("CONTEXT COMPACTED"), "{sent}");
    assert!(sent.contains(&saved), "the handoff id in {sent}");
    support::wait_for_screen(&fleet, &pane, "Carrying on after the compression.", WAIT);
    // Given once: the compaction counted once, and no later prompt carries the block again.
    assert_eq!(state_of(&dir)["compactions"], 1);
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// An agent idle for longer than the silence threshold gets a prompt whose answer is slow:
/// its last tool call is from the turn before, and the watchdog must not call the new turn
/// silent.
#[test]
fn real_gemini_idle_past_silence_then_a_slow_answer_is_not_silent() {
    if !enabled() {
        return;
    }
    real::idle_past_silence_then_a_slow_answer_is_not_silent(&GEMINI_CLI);
}

/// The Gemini API answers 404 for the model: Gemini CLI fires no hook and shows a dialog ("It
/// seems like you don't have access to gemini-x", "1. Keep trying / 2. Stop") that waits for a
/// person. The watchdog finds the wedged screen, the Clinic reads model-not-found from it, and
/// the agent goes to safe mode at once (no revival, no restart) with the model named and the
/// fix.
#[test]
fn real_gemini_model_not_found_dialog_goes_to_safe_mode_naming_the_model() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let not_found = Turn::Error {
        status: 404,
        kind: "NOT_FOUND".into(),
        message: "models/gemini-3.8-flash is not found for API version v1beta, or is not supported for generateContent.".into(),
    };
    let server = gemini_server::start(vec![not_found; 12]);
    let (dir, pane) = start_gemini(&fleet, &server, "", "summarise the changelog");
    support::wait_for_screen(&fleet, &pane, "Keep trying", WAIT);
    // Passes until one acts: the screen unchanged over two passes, or (when Gemini CLI has
    // written the error to its chat file by then) the failed turn, which needs one.
    let mut gm = Value::Null;
    support::wait_until(WAIT, "a pass that acts", || {
        gm = fleet.run(&["watchdog", "--once", "--json"]).json()["agents"][0].clone();
        std::thread::sleep(Duration::from_millis(500));
        !matches!(gm["verdict"].as_str(), Some("healthy" | "suspect"))
    });
    assert_eq!(gm["verdict"], "unhealthy", "{gm}");
    let check = gm["findings"][0]["check"].as_str().unwrap_or("");
    assert!(["screen", "turn_failed"].contains(&check), "{gm}");
    let events = fleet
        .run(&["events", "--agent", "gm", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("model_unavailable"), "{events}");
    assert!(events.contains("gemini-3.8-flash"), "{events}");
    let record = read_json(&dir.join("restarts.json"));
    let why = record["safe_mode"]["reason"].as_str().unwrap_or("");
    assert!(why.contains("model_unavailable"), "{record}");
    assert!(why.contains("`gemini-3.8-flash`"), "{record}");
    // The agent's command gives no `--model`: the hint names where the model came from.
    assert!(
        why.contains("Gemini CLI's settings") && why.contains("`--model`"),
        "{record}"
    );
    // One start, no revival: a restart cannot fix the model.
    let starts = fleet
        .ops("gm")
        .iter()
        .filter(|o| o["event"] == "agent_start")
        .count();
    assert_eq!(starts, 1);
    assert_eq!(fleet.unhealthy_events("gm").matches("\"revive").count(), 0);
}

/// Issue 15 item 6 with the real Gemini CLI: killed in the middle of a shell call whose job
/// left its process group; the job is stopped and recorded before the resume, never acts,
/// and the resumed session is told which command was stopped.
#[test]
fn real_gemini_killed_mid_tool_leaves_no_orphan_and_is_told_what_was_stopped() {
    if !enabled() {
        return;
    }
    real::killed_mid_tool(&GEMINI_CLI);
}

/// Issue 15 item 7 with the real Gemini CLI: its wrapper is killed with Gemini still running;
/// the wrapper that replaces it stops that Gemini (recorded) before it starts one of its own.
#[test]
fn real_gemini_left_by_a_killed_wrapper_is_stopped_before_the_next_start() {
    if !enabled() {
        return;
    }
    real::killed_wrapper(&GEMINI_CLI);
}
