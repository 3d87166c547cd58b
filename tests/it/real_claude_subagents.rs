//! The real Claude Code's subagents (the Agent tool's workers, background by default since
//! 2.1.2xx) beside a supervised main session: their hooks carry `agent_id`, and a subagent's
//! failure is not the main turn's end. Driven by the scripted model server, which tells a
//! subagent's requests from the main thread's (no Agent tool among its tools). Runs with
//! `PHOENIX_TEST_REAL_CLIS=1`, like real_cli.rs.

use crate::real_cli::{enabled, start_claude};
use crate::support;

use std::time::Duration;

use support::model_server::{ModelServer, Turn, is_subagent_request};

/// What the test saw, for a failure message: ops, hook errors, the pane and the requests.
fn explain(fleet: &support::Fleet, server: &ModelServer) -> String {
    let dir = fleet.agent_dir("cc");
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let requests: Vec<String> = server
        .message_requests()
        .iter()
        .map(|r| {
            let tools: Vec<&str> = r.body["tools"]
                .as_array()
                .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
                .unwrap_or_default();
            let last = r.body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .map(|m| m.to_string())
                .unwrap_or_default();
            let last: String = last.chars().take(300).collect();
            format!(
                "subagent={} tools={tools:?} last={last}",
                is_subagent_request(&r.body)
            )
        })
        .collect();
    format!(
        "--- ops\n{}\n--- hook errors\n{}\n--- screen\n{}\n--- requests\n{}",
        fleet
            .ops("cc")
            .iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        std::fs::read_to_string(dir.join("hook_errors.jsonl")).unwrap_or_default(),
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .unwrap_or_default(),
        requests.join("\n")
    )
}

/// Wait for the prompt typed by `start_claude` to be submitted (its prompt hook ran); on a
/// loaded machine the Enter can come before the input box takes keys, and is pressed again.
fn submitted(fleet: &support::Fleet) {
    let prompted = || fleet.ops("cc").iter().any(|o| o["event"] == "prompt");
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap_or("")
        .to_string();
    for _ in 0..3 {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if prompted() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = fleet.tmux(&["send-keys", "-t", &pane, "Enter"]);
    }
    assert!(prompted(), "the prompt was never submitted");
}

/// The model starts a subagent whose own request gets "prompt is too long" while the main
/// thread runs a slow shell command: Claude Code fires StopFailure for the subagent (with
/// `agent_id`), and the main session goes on to write its file and end its turn: no failed
/// turn, no diagnosis, no fresh start.
#[test]
fn real_claude_failing_subagent_leaves_the_main_session_alone() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start_with_subagents(
        vec![
            Turn::agent("look around the repository"),
            Turn::bash("sleep 4; echo after-agent > after.txt"),
            Turn::text("The slow command is done."),
        ],
        vec![Turn::prompt_too_long()],
    );
    let dir = start_claude(
        &fleet,
        &server,
        "",
        "start a helper, then run the slow command",
    );
    submitted(&fleet);
    let work = fleet.path().join("work");
    let why = || explain(&fleet, &server);
    support::wait_until_explained(
        Duration::from_secs(90),
        "the main thread's command wrote after.txt",
        || work.join("after.txt").exists(),
        why,
    );
    support::wait_until_explained(
        Duration::from_secs(60),
        "the subagent's failure recorded as a subagent's",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "subagent_failed")
        },
        why,
    );
    let subagent_failed = fleet
        .ops("cc")
        .into_iter()
        .find(|o| o["event"] == "subagent_failed")
        .unwrap();
    assert!(
        subagent_failed["details"]
            .as_str()
            .unwrap_or("")
            .contains("prompt is too long"),
        "{subagent_failed}"
    );
    assert!(
        server
            .message_requests()
            .iter()
            .any(|r| is_subagent_request(&r.body)),
        "{}",
        why()
    );
    support::wait_until_explained(
        Duration::from_secs(60),
        "the main turn ended",
        || support::real::state_of(&dir)["status"] == "idle",
        why,
    );
    // A little longer: a wrapper acting on a failed turn does so within a second or two.
    std::thread::sleep(Duration::from_secs(3));
    let ops = fleet.ops("cc");
    let count = |event: &str| ops.iter().filter(|o| o["event"] == event).count();
    assert_eq!(count("turn_failed"), 0, "{}", why());
    assert_eq!(count("failed_turn_checked"), 0, "{}", why());
    assert_eq!(count("agent_start"), 1, "one session throughout: {}", why());
    assert_eq!(count("agent_exit"), 0, "{}", why());
    let sessions: std::collections::BTreeSet<&str> = ops
        .iter()
        .filter(|o| o["event"] == "session_start")
        .filter_map(|o| o["session_id"].as_str())
        .collect();
    let state = support::real::state_of(&dir);
    assert!(
        sessions.contains(state["session_id"].as_str().unwrap_or("")),
        "{state}"
    );
    assert_eq!(
        state["current_task"], "start a helper, then run the slow command",
        "a background agent's notification is not a task: {state}"
    );
    assert!(state["last_error"].is_null(), "{state}");
}

/// A person forks the supervised session (`claude --resume <id> --fork-session`): Claude Code
/// 2.1.332 starts it with SessionStart source `fork`, which phoenix's matcher names, so the
/// hook runs and records the new session id.
#[test]
fn real_claude_forked_session_runs_the_session_start_hook() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![Turn::text("Hello."), Turn::text("Forked.")]);
    let dir = start_claude(&fleet, &server, "", "say hello");
    submitted(&fleet);
    let why = || explain(&fleet, &server);
    support::wait_until_explained(
        Duration::from_secs(60),
        "the first turn ended",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "turn_complete")
        },
        why,
    );
    let first = support::real::state_of(&dir)["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let out = crate::real_cli::claude_command(
        &crate::real_cli::claude_bin(),
        &fleet.path().join("home"),
        &server,
        key,
    )
    .current_dir(fleet.path().join("work"))
    .args([
        "-p",
        "--dangerously-skip-permissions",
        "--resume",
        &first,
        "--fork-session",
        "go on in a fork",
    ])
    .output()
    .unwrap();
    let projects: Vec<String> = walk(&fleet.path().join("home/.claude/projects"));
    assert!(
        out.status.success(),
        "{}{}\n--- transcripts\n{projects:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // 2.1.197 starts a fork as a `resume` of the parent's id (the fork's own id comes with its
    // prompt and Stop hooks); later builds say `fork`, with the new id.
    let version = support::cli_version(
        "claude",
        "@anthropic-ai/claude-code",
        crate::real_cli::CLAUDE_CODE_PINNED,
    );
    let says_fork = version != "2.1.197";
    let forked = |o: &serde_json::Value| {
        o["event"] == "session_start"
            && if says_fork {
                o["source"] == "fork" && o["session_id"].as_str().is_some_and(|s| s != first)
            } else {
                o["source"] == "resume"
            }
    };
    support::wait_until_explained(
        Duration::from_secs(30),
        "the fork's session start hook",
        || fleet.ops("cc").iter().any(forked),
        why,
    );
    let start = fleet.ops("cc").into_iter().rfind(forked).unwrap();
    eprintln!("claude {version}: the fork started with {start}");
    assert_eq!(
        start["injected"], false,
        "a fork has its conversation: {start}"
    );
    // The fork is the session phoenix records (and would resume).
    support::wait_until_explained(
        Duration::from_secs(30),
        "the fork's id recorded",
        || {
            support::real::state_of(&dir)["session_id"]
                .as_str()
                .is_some_and(|s| s != first)
        },
        why,
    );
}

/// The files under `dir`, for a failure message.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found
}
