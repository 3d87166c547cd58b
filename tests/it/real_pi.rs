//! The real pi coding agent (`@mariozechner/pi-coding-agent`), driven by the scripted Anthropic
//! Messages server on loopback (a custom provider in pi's `models.json`, no network), running
//! the extension phoenix writes from its hooks. The CLI is installed with npm into
//! `target/real-clis/pi-VERSION/` on first use; if that fails the suite fails loudly rather
//! than passing without having run.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1` (`.ci/run` sets it); plain `cargo test` says it
//! skipped the suite and why.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::Fleet;
use support::model_server::{Messages, ModelServer, Turn};
use support::real::{self, RealCli, Run, state_of};

const PI: &str = "@mariozechner/pi-coding-agent";
/// The version the suite is pinned to (`PHOENIX_TEST_CLI_VERSIONS` picks another).
pub(crate) const PI_PINNED: &str = "0.73.1";
const WAIT: Duration = Duration::from_secs(30);

fn pi_bin() -> PathBuf {
    support::npm_cli("pi", PI, PI_PINNED, "pi")
}

/// pi's shell tool: `bash` with `{command}`.
fn bash(command: &str) -> Turn {
    Turn::ToolUse {
        name: "bash".into(),
        input: json!({ "command": command }),
    }
}

/// pi in the table of the scenarios every real CLI goes through alike.
const PI_CLI: RealCli<Messages> = RealCli {
    agent: "pi",
    serve: ModelServer::start,
    start: |fleet, server, extra, prompt| {
        let (dir, pane) = start_pi(fleet, server, extra, prompt);
        Run {
            dir,
            pane,
            home: fleet.path().join("home"),
            guard: None,
        }
    },
    submit: |fleet, pane, text| support::submit(fleet, pane, text, WAIT),
    shell: bash,
    turns: turn_requests,
    // The extension reads `Command exited with code N` from pi's bash result.
    failed_shell_call: |t| t["tool"] == "bash" && t["error"] == "exit code 2",
    outlives_terminal: false,
};

/// The requests that played a scripted turn (they offer tools; pi's compaction summary and
/// other side requests do not).
fn turn_requests(server: &ModelServer) -> Vec<support::scripted::Request> {
    server
        .message_requests()
        .into_iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect()
}

/// A HOME where pi talks to `server` as a custom provider, quietly and offline otherwise.
fn pi_home(fleet: &Fleet, server: &ModelServer) -> PathBuf {
    let home = fleet.path().join("home");
    let agent = home.join(".pi/agent");
    std::fs::create_dir_all(&agent).unwrap();
    let models = json!({"providers": {"scripted": {
        "baseUrl": server.base_url(),
        "api": "anthropic-messages",
        "apiKey": "scripted-pi-key-0123456789",
        "models": [{"id": "claude-scripted", "name": "Scripted", "reasoning": false,
                    "contextWindow": 200000, "maxTokens": 8192,
                    "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}}],
    }}});
    std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
    let settings = json!({
        "defaultProvider": "scripted", "defaultModel": "claude-scripted",
        "quietStartup": true, "enableInstallTelemetry": false,
        "lastChangelogVersion": "99.0.0",
    });
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    home
}

fn pi_agent(bin: &Path, home: &Path) -> String {
    format!(
        "[[agent]]\nname = \"pi\"\ncli = \"pi\"\ncommand = \"'{}'\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\", PI_OFFLINE = \"1\", PI_TELEMETRY = \"0\" }}\n",
        bin.display(),
        home.display(),
    )
}

fn workdir(fleet: &Fleet) -> PathBuf {
    let work = fleet.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::canonicalize(work).unwrap()
}

/// The suite runs only when asked for (see `support::opted_in`).
fn enabled() -> bool {
    support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_pi.rs (the real pi coding agent)",
        "npm and access to the npm registry",
    )
}

/// Wait until pi's extension ran its session start (pi is up and reads input), or panic.
fn wait_started(fleet: &Fleet, pane: &str, starts: usize) {
    support::wait_until_explained(
        Duration::from_secs(60),
        "pi's session_start through phoenix's extension",
        || {
            fleet
                .ops("pi")
                .iter()
                .filter(|o| o["event"] == "session_start")
                .count()
                >= starts
        },
        || fleet.explain("pi", pane),
    );
}

/// A real pi agent started by `phoenix apply` (with `extra` phoenix.toml text before its
/// declaration and fast restarts), `prompt` typed into it once it waits for input. Returns the
/// agent's state dir and its pane.
fn start_pi(fleet: &Fleet, server: &ModelServer, extra: &str, prompt: &str) -> (PathBuf, String) {
    declare_pi(fleet, server, extra);
    launch_pi(fleet, prompt)
}

/// phoenix.toml with the pi agent (`extra` before it, fast restarts), nothing started yet.
fn declare_pi(fleet: &Fleet, server: &ModelServer, extra: &str) {
    let bin = pi_bin();
    workdir(fleet);
    let home = pi_home(fleet, server);
    fleet.toml(&format!(
        "{extra}\n[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        pi_agent(&bin, &home)
    ));
}

/// `phoenix apply` the declared pi agent and type `prompt` once it waits for input.
fn launch_pi(fleet: &Fleet, prompt: &str) -> (PathBuf, String) {
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["pi"]);
    let pane = fleet.agent_status("pi")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    wait_started(fleet, &pane, 1);
    support::submit(fleet, &pane, prompt, WAIT);
    (fleet.agent_dir("pi"), pane)
}

/// `phoenix apply` with a `cli = "pi"` agent: the hooks go to `.pi/phoenix-hooks.json`, the
/// wrapper writes the extension that runs them, the real pi runs interactively against the
/// scripted model, and its session, shell calls (one failing), turn end and usage reach phoenix.
#[test]
fn real_pi_in_a_phoenix_pane_runs_the_extension_phoenix_wrote() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![
        bash("echo interactive-ok > out.txt"),
        bash("ls /nonexistent-phoenix-dir"),
        Turn::text("Wrote it."),
    ]);
    declare_pi(&fleet, &server, "");
    fleet
        .run(&["loop", "add", "pi", "ship-parser", "ship the parser"])
        .status(0);
    let (dir, pane) = launch_pi(&fleet, "write the file");
    let work = workdir(&fleet);
    let hooks = std::fs::read_to_string(work.join(".pi/phoenix-hooks.json")).unwrap();
    assert!(hooks.contains("hook session-start --agent pi"), "{hooks}");
    let extension = std::fs::read_to_string(work.join(".pi/extensions/phoenix.ts")).unwrap();
    assert!(extension.contains("\"session-start\""), "{extension}");
    support::wait_for_screen(&fleet, &pane, "Wrote it.", WAIT);
    support::wait_until_explained(
        WAIT,
        "the turn's end through agent_end",
        || state_of(&dir)["status"] == "idle",
        || fleet.explain("pi", &pane),
    );
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt"))
            .unwrap()
            .trim(),
        "interactive-ok"
    );
    let state = state_of(&dir);
    let id = state["session_id"].as_str().unwrap().to_string();
    let transcript = PathBuf::from(state["transcript_path"].as_str().unwrap());
    assert!(
        transcript.starts_with(fleet.path().join("home/.pi/agent/sessions")),
        "{state}"
    );
    assert!(
        transcript
            .to_string_lossy()
            .ends_with(&format!("_{id}.jsonl")),
        "{state}"
    );
    // Both shell calls, in pi's words, the failing one with its exit code.
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert!(tools.iter().all(|t| t["tool"] == "bash"), "{tools:?}");
    assert!(tools.iter().all(|t| t["session_id"] == id.as_str()));
    assert_eq!(tools[0]["ok"], true, "{tools:?}");
    assert_eq!(tools[1]["ok"], false, "{tools:?}");
    assert_eq!(tools[1]["error"], "exit code 2", "{tools:?}");
    // The open loop went to the model with the prompt (pi adds context only there).
    let first = &turn_requests(&server)[0];
    assert!(first.text().contains("ship the parser"), "{}", first.text());
    assert!(first.text().contains("write the file"), "{}", first.text());
    let ops = fleet.ops("pi");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "session_start" && o["source"] == "startup"),
        "{ops:?}"
    );
    assert!(ops.iter().any(|o| o["event"] == "turn_complete"), "{ops:?}");
    // The session file's usage is counted: three responses of 10 in, 5 out.
    let usage = fleet.run(&["usage", "pi", "--json"]).status(0).json();
    let counted = &usage["agents"][0];
    assert!(
        counted["tokens"]["total"].as_u64().unwrap_or(0) >= 45,
        "{usage}"
    );
    assert_eq!(counted["models"][0]["model"], "claude-scripted", "{usage}");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// kill -9 of pi mid-turn: the wrapper resumes the same session (`--session <id>`), the
/// resumed session's start is `resume`, and phoenix's continuation prompt with the recovery
/// block reaches the model, nobody typing.
#[test]
fn real_pi_killed_mid_turn_resumes_the_same_session() {
    if !enabled() {
        return;
    }
    let bin = pi_bin();
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![bash("echo step-one > one.txt"), Turn::Hang]);
    let (dir, pane) = start_pi(&fleet, &server, "", "refactor the parser module");
    let work = workdir(&fleet);
    support::wait_until_explained(
        WAIT,
        "the turn under way",
        || {
            work.join("one.txt").exists()
                && turn_requests(&server).len() == 2
                && support::read_jsonl(&dir.join("tool_use.jsonl")).len() == 1
        },
        || fleet.explain("pi", &pane),
    );
    let state = state_of(&dir);
    assert_eq!(state["status"], "working", "{state}");
    let id = state["session_id"].as_str().unwrap().to_string();
    let transcript = PathBuf::from(state["transcript_path"].as_str().unwrap());
    server.push([Turn::text("Picked up where I stopped.")]);
    let pids = fleet.wait_running(&["pi"]);
    support::kill9(pids[0]);
    let killed_at = std::time::Instant::now();
    support::wait_until_explained(
        Duration::from_secs(60),
        "session_start resume of the same session",
        || {
            fleet.ops("pi").iter().any(|o| {
                o["event"] == "session_start" && o["source"] == "resume" && o["session_id"] == id
            })
        },
        || fleet.explain("pi", &pane),
    );
    let ops = fleet.ops("pi");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(argv, [bin.to_str().unwrap(), "--session", id.as_str()]);
    let sent = PI_CLI.sent_with_the_continue_prompt(&fleet, &server, &pane);
    eprintln!(
        "kill -9 → the resumed session's continuation request after {:?}",
        killed_at.elapsed()
    );
    assert!(sent.contains("PHOENIX: RECOVERY DETECTED"), "{sent}");
    assert!(sent.contains("refactor the parser module"), "{sent}");
    // The resumed request carries the first run's conversation: the same session.
    assert!(sent.contains("step-one"), "{sent}");
    support::wait_for_screen(&fleet, &pane, "Picked up where I stopped.", WAIT);
    assert!(
        std::fs::read_to_string(&transcript)
            .unwrap()
            .contains("Picked up where I stopped."),
        "the resumed session wrote elsewhere"
    );
    assert_eq!(state_of(&dir)["session_id"], id.as_str());
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// A model call that fails for good (a 400 pi does not retry or compact for) ends pi's turn
/// with an error message in its session file and `agent_end` as usual: phoenix's stop hook
/// reads it (turn_failed) and the wrapper has the Clinic decide, without a daemon.
#[test]
fn real_pi_failed_turn_is_read_from_its_session_file() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![
        Turn::Error {
            status: 400,
            kind: "invalid_request_error".into(),
            message: "messages.0.content: tool_use ids must be unique".into(),
        },
        Turn::text("Back on track."),
    ]);
    let (_dir, pane) = start_pi(&fleet, &server, "", "migrate the billing tables");
    let failed_op = || {
        fleet
            .ops("pi")
            .into_iter()
            .find(|o| o["event"] == "turn_failed")
    };
    support::wait_until_explained(
        WAIT,
        "the failed turn recorded by the stop hook",
        || failed_op().is_some(),
        || fleet.explain("pi", &pane),
    );
    let failed = failed_op().unwrap();
    assert!(
        failed["details"]
            .as_str()
            .unwrap()
            .contains("tool_use ids must be unique"),
        "{failed}"
    );
    assert_eq!(failed["hook"], "Stop", "{failed}");
    support::wait_until_explained(
        WAIT,
        "the wrapper's check of the failed turn",
        || {
            fleet
                .ops("pi")
                .iter()
                .any(|o| o["event"] == "failed_turn_checked")
        },
        || fleet.explain("pi", &pane),
    );
}

/// Do no harm: a prompt too long for the model is pi's to heal (it compacts and retries once,
/// by itself, after `agent_end`); phoenix records no failed turn and starts nothing.
#[test]
fn real_pi_context_overflow_is_left_to_pi_s_own_compaction() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![
        Turn::prompt_too_long(),
        Turn::text("Compacted and carried on."),
    ]);
    let (dir, pane) = start_pi(&fleet, &server, "", "index the archive");
    support::wait_for_screen(
        &fleet,
        &pane,
        "Compacted and carried on.",
        Duration::from_secs(60),
    );
    support::wait_until_explained(
        WAIT,
        "the retried turn's end",
        || state_of(&dir)["status"] == "idle",
        || fleet.explain("pi", &pane),
    );
    let ops = fleet.ops("pi");
    assert!(!ops.iter().any(|o| o["event"] == "turn_failed"), "{ops:?}");
    let starts = ops.iter().filter(|o| o["event"] == "agent_start").count();
    assert_eq!(starts, 1, "{ops:?}");
}

/// Scenario 4, first half, as pi keeps its sessions: the model hangs mid-turn, after a first
/// answer (pi writes its session file only once an answer is there; a hang on the very first
/// request leaves nothing to resume, and the revival starts fresh) → the watchdog reports
/// silence and revives the same session with `--session <id>`, told why.
#[test]
fn real_pi_hanging_on_the_model_is_found_silent_and_revived() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![
        bash("echo one > one.txt"),
        Turn::Hang,
        Turn::text("Back after the hang."),
    ]);
    let (dir, pane) = start_pi(
        &fleet,
        &server,
        "[thresholds]\nsilence = \"3s\"\n",
        "index the archive",
    );
    wait_until_hung(&fleet, &server, &dir, &pane);
    let id = state_of(&dir)["session_id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(4));
    let found = fleet.watchdog_until_confirmed();
    assert_eq!(found["verdict"], "unhealthy", "{found}");
    assert_eq!(found["findings"][0]["check"], "silence", "{found}");
    assert_eq!(found["action"], "revive", "{found}");
    let sent = PI_CLI.sent_with_the_continue_prompt(&fleet, &server, &pane);
    assert!(sent.contains("YOU WERE REVIVED"), "{sent}");
    assert!(sent.contains("index the archive"), "{sent}");
    let ops = fleet.ops("pi");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    support::wait_for_screen(&fleet, &pane, "Back after the hang.", WAIT);
    assert_eq!(state_of(&dir)["session_id"], id.as_str());
    assert_eq!(state_of(&dir)["current_task"], "index the archive");
}

/// The first shell call ran and the model call after it hangs.
fn wait_until_hung(fleet: &Fleet, server: &ModelServer, dir: &Path, pane: &str) {
    support::wait_until_explained(
        WAIT,
        "the turn under way, its second model call hanging",
        || {
            turn_requests(server).len() == 2
                && support::read_jsonl(&dir.join("tool_use.jsonl")).len() == 1
        },
        || fleet.explain("pi", pane),
    );
}

/// Scenario 4, second half: six failing shell calls are an error cascade, and usage counted.
#[test]
fn real_pi_six_failing_shell_calls_are_an_error_cascade() {
    if !enabled() {
        return;
    }
    real::failing_shell_calls_are_an_error_cascade(&PI_CLI);
}
