//! The real Claude Code CLI, driven by a scripted model server on loopback (no network).
//! The CLI is installed with npm into `target/real-clis/claude-VERSION/` on first use; if that fails the suite
//! fails loudly rather than passing without having run.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1` (`.ci/run` sets it); plain `cargo test` says it
//! skipped the suite and why.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::model_server::{Messages, ModelServer, Request, Turn};
use support::real::{self, RealCli, Run};

/// The Claude Code version the suite is pinned to.
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code";
/// The version the suite is pinned to (`PHOENIX_TEST_CLI_VERSIONS` picks another).
pub(crate) const CLAUDE_CODE_PINNED: &str = "2.1.332";

pub(crate) fn claude_bin() -> PathBuf {
    // One install at a time, pinned: parallel tests each ran `npm install` when the binary was
    // missing, and one exec'd it while another's install was still writing it (ETXTBSY).
    support::npm_cli("claude", CLAUDE_CODE, CLAUDE_CODE_PINNED, "claude")
}

/// Claude Code in the table of the scenarios every real CLI goes through alike.
const CLAUDE_CLI: RealCli<Messages> = RealCli {
    agent: "cc",
    serve: ModelServer::start,
    start: |fleet, server, extra, prompt| {
        let dir = start_claude(fleet, server, extra, prompt);
        let pane = fleet.agent_status("cc")["pane"]
            .as_str()
            .unwrap()
            .to_string();
        Run {
            dir,
            pane,
            home: fleet.path().join("home"),
            guard: None,
        }
    },
    submit: type_prompt,
    shell: Turn::bash,
    turns: turn_requests,
    // A real PostToolUseFailure hook: Claude Code says the call failed, with its error.
    failed_shell_call: |t| t["tool"] == "Bash" && t["error"].as_str().is_some(),
    outlives_terminal: true,
};

/// The model calls that play a scripted turn: the ones that offer tools (not the title).
pub(crate) fn turn_requests(server: &ModelServer) -> Vec<Request> {
    server
        .message_requests()
        .into_iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect()
}

/// The `[[agent]]` block of a real Claude Code agent `cc` working in `<fleet>/work`, with a
/// HOME prepared for it, talking to `server`.
pub(crate) fn cc_agent(fleet: &support::Fleet, server: &ModelServer) -> String {
    let bin = claude_bin();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    claude_agent("cc", &bin, &home, server, key)
}

/// A HOME in which Claude Code skips onboarding and trusts `workdir`.
pub(crate) fn prepared_home(root: &Path, workdir: &Path, key: &str) -> PathBuf {
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let state = serde_json::json!({
        "hasCompletedOnboarding": true,
        "projects": { workdir.to_string_lossy(): { "hasTrustDialogAccepted": true } },
        "customApiKeyResponses": { "approved": [&key[key.len() - 20..]] },
    });
    std::fs::write(home.join(".claude.json"), state.to_string()).unwrap();
    std::fs::write(
        home.join(".claude/settings.json"),
        r#"{"skipDangerousModePermissionPrompt": true}"#,
    )
    .unwrap();
    home
}

pub(crate) fn claude_command(bin: &Path, home: &Path, server: &ModelServer, key: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", server.base_url())
        .env("ANTHROPIC_API_KEY", key)
        .env("IS_SANDBOX", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1");
    cmd
}

/// The suite runs only when asked for (see `support::opted_in`).
pub(crate) fn enabled() -> bool {
    support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_cli.rs (the real Claude Code CLI)",
        "npm and access to the npm registry",
    )
}

#[test]
fn scripted_server_drives_a_real_bash_call() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(tmp.path(), &work, key);
    let server = ModelServer::start(vec![
        Turn::bash("echo phoenix-smoke > smoke.txt"),
        Turn::text("All done."),
    ]);
    let out = claude_command(&bin, &home, &server, key)
        .current_dir(&work)
        .args([
            "-p",
            "--dangerously-skip-permissions",
            "write the smoke file",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "claude failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(work.join("smoke.txt"))
            .unwrap()
            .trim(),
        "phoenix-smoke"
    );
    let requests = server.message_requests();
    assert!(
        requests.iter().any(|r| r.text().contains("tool_result")),
        "the tool result went back to the model"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("All done."));
}

/// An agent declaration that runs the real Claude Code interactively against `server`.
pub(crate) fn claude_agent(
    name: &str,
    bin: &Path,
    home: &Path,
    server: &ModelServer,
    key: &str,
) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"claude\"\ncommand = \"'{}' --dangerously-skip-permissions\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\", ANTHROPIC_BASE_URL = \"{}\", ANTHROPIC_API_KEY = \"{key}\", IS_SANDBOX = \"1\", \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_TELEMETRY = \"1\", DISABLE_ERROR_REPORTING = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
        bin.display(),
        home.display(),
        server.base_url()
    )
}

/// Wait until the interactive prompt is up, then type `prompt` and press Enter.
pub(crate) fn type_prompt(fleet: &support::Fleet, pane: &str, prompt: &str) {
    support::wait_until(std::time::Duration::from_secs(30), "claude prompt", || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", pane])
            .is_some_and(|s| s.contains("bypass permissions on"))
    });
    fleet
        .tmux(&["send-keys", "-t", pane, "-l", prompt])
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    fleet.tmux(&["send-keys", "-t", pane, "Enter"]).unwrap();
}

#[test]
fn real_claude_runs_interactively_in_a_phoenix_pane() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![
        Turn::bash("echo interactive-ok > out.txt"),
        Turn::text("Wrote it."),
    ]);
    fleet.toml(&claude_agent("cc", &bin, &home, &server, key));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();

    type_prompt(&fleet, &pane, "write the file");
    support::wait_until(std::time::Duration::from_secs(30), "bash call ran", || {
        work.join("out.txt").exists()
    });
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt"))
            .unwrap()
            .trim(),
        "interactive-ok"
    );
    support::wait_until(std::time::Duration::from_secs(15), "answer shown", || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .is_some_and(|s| s.contains("Wrote it."))
    });
}

/// phoenix's own hooks, installed by `apply`, running inside the real Claude Code: the open loop
/// reaches the model at session start, and the prompt, the tool call and the end of the turn
/// land in the agent's state.
#[test]
fn real_claude_runs_the_hooks_apply_installed() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![
        Turn::bash("echo hooked > out.txt"),
        Turn::text("Hooked."),
    ]);
    fleet.toml(&claude_agent("cc", &bin, &home, &server, key));
    fleet
        .run(&["loop", "add", "cc", "ship-parser", "ship the parser"])
        .status(0);
    fleet.run(&["apply", "--yes"]).status(0);
    let settings = std::fs::read_to_string(work.join(".claude/settings.json")).unwrap();
    assert!(
        settings.contains("hook session-start --agent cc"),
        "{settings}"
    );
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();

    type_prompt(&fleet, &pane, "write the hooked file");
    let dir = fleet.agent_dir("cc");
    support::wait_until(
        std::time::Duration::from_secs(30),
        "tool call recorded",
        || {
            support::read_jsonl(&dir.join("tool_use.jsonl"))
                .iter()
                .any(|t| t["tool"] == "Bash" && t["ok"] == true)
        },
    );
    let state = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap()
    };
    support::wait_until(std::time::Duration::from_secs(30), "turn finished", || {
        state()["status"] == "idle"
    });
    let s = state();
    assert_eq!(s["current_task"], "write the hooked file");
    assert!(s["session_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(
        server
            .message_requests()
            .iter()
            .any(|r| r.text().contains("[ship-parser] ship the parser")),
        "the open loop was injected at session start"
    );
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// `kill -9` of the real Claude Code mid-turn: the wrapper starts it again with `--resume` and
/// the recorded session id, Claude Code's SessionStart says `resume`, and phoenix's recovery
/// block (and the handoff saved on the crash) reach the model with the next request.
#[test]
fn real_claude_killed_mid_turn_is_resumed_with_the_recovery_block() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![
        // Not a leading `sleep N`: Claude Code 2.1.332 blocks a command that starts with one.
        Turn::bash("echo started; sleep 60"),
        Turn::text("Picked up where I stopped."),
    ]);
    // Cooldown 1 s, as the issue measured it (goal: the resumed session asks the model
    // within 3 s of the kill).
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"1s\"\nbackoff_max = \"1s\"\nlife_deadline = \"30s\"\n\n{}",
        claude_agent("cc", &bin, &home, &server, key)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "refactor the parser module");
    let dir = fleet.agent_dir("cc");
    // The turn is under way: the prompt hook fired and the model asked for the long Bash call.
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the turn started",
        || {
            fleet.ops("cc").iter().any(|o| o["event"] == "prompt")
                && !server.message_requests().is_empty()
        },
    );
    // The Bash call is in flight: the PreToolUse hook phoenix installed noted it, and its
    // `sleep 60` runs in the workdir (a child of bash: the command is `echo started; sleep 60`).
    let work = work.canonicalize().unwrap();
    let sleeping = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x0060\x00")
                && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == work)
        })
    };
    support::wait_until_explained(
        std::time::Duration::from_secs(30),
        "the Bash call in flight",
        || dir.join("in_flight.json").exists() && sleeping(),
        || fleet.explain("cc", &pane),
    );
    let session: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    let id = session["session_id"].as_str().unwrap().to_string();
    assert_eq!(session["status"], "working");

    // And Claude Code has saved the turn: a session killed before its transcript holds a turn
    // cannot be resumed, and phoenix rightly starts that one fresh.
    let transcript = session["transcript_path"].as_str().unwrap().to_string();
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the prompt in the transcript",
        || std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("refactor the parser")),
    );

    let killed_at = std::time::Instant::now();
    support::kill9(pids[0]);
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the resumed run",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "agent_start" && o["mode"] == "resume")
        },
    );
    let ops = fleet.ops("cc");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        argv.windows(2).any(|w| w == ["--resume", id.as_str()]),
        "{argv:?}"
    );
    support::wait_until(
        std::time::Duration::from_secs(30),
        "SessionStart resume",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "session_start" && o["source"] == "resume")
        },
    );
    // Nobody types: phoenix's continuation prompt sends the resumed session on its way.
    let sent = sent_with_the_continue_prompt(&server);
    assert!(sent.contains("PHOENIX: RECOVERY DETECTED"), "{sent}");
    assert!(sent.contains("refactor the parser module"), "{sent}");
    assert!(sent.contains("latest handoff"), "{sent}");
    // Measured, not asserted (the issue's goal is 3 s; a loaded CI machine is slower).
    if let Some(first) = server
        .message_requests()
        .iter()
        .map(|r| r.at)
        .filter(|at| *at > killed_at)
        .min()
    {
        let since_kill = |event: &str| {
            let ops = fleet.ops("cc");
            let at = ops.iter().rfind(|o| o["event"] == event)?["ts"].as_str()?;
            let at: jiff::Timestamp = at.parse().ok()?;
            let killed = jiff::Timestamp::now()
                - jiff::SignedDuration::try_from(killed_at.elapsed()).ok()?;
            Some(format!(
                "{:.2}s",
                (at - killed).total(jiff::Unit::Second).ok()?
            ))
        };
        eprintln!(
            "kill -9 → first model request of the resumed session: {:.2?} (agent_start {:?}, \
             session_start {:?}, continue_prompt_sent {:?})",
            first - killed_at,
            since_kill("agent_start"),
            since_kill("session_start"),
            since_kill("continue_prompt_sent"),
        );
        let sent_op = fleet
            .ops("cc")
            .into_iter()
            .rfind(|o| o["event"] == "continue_prompt_sent");
        eprintln!("continue prompt: {sent_op:?}");
    }
    let handoffs = fleet.run(&["handoff", "list", "cc", "--json"]).json()["handoffs"].clone();
    assert_eq!(handoffs[0]["trigger_reason"], "crash");
}

/// A resume that worked is kept: Claude Code killed idle at its prompt (its turn done) is
/// resumed and told nothing (issue 32 item 11: nobody's task is typed into it); the resumed
/// session takes a new prompt, is killed mid-turn seconds after it started, and is resumed
/// again (same session, and this time sent on its way), not thrown away for a fresh one.
#[test]
fn real_claude_resumed_session_killed_again_within_seconds_is_resumed_again() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![
        Turn::text("Planned."),
        // Not a leading `sleep N`: Claude Code 2.1.332 blocks a command that starts with one.
        Turn::bash("echo started; sleep 60"),
        Turn::text("Back again."),
    ]);
    let dir = start_claude(&fleet, &server, "", "plan the release");
    let state = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap()
    };
    let count = |event: &str| {
        fleet
            .ops("cc")
            .iter()
            .filter(|o| o["event"] == event)
            .count()
    };
    support::wait_until(std::time::Duration::from_secs(30), "the first turn", || {
        count("turn_complete") == 1
    });
    let id = state()["session_id"].as_str().unwrap().to_string();
    // Claude Code writes its transcript behind the turn: killed before it did, there would be
    // no conversation to resume.
    let transcript = state()["transcript_path"].as_str().unwrap().to_string();
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the turn in the transcript",
        || std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("Planned.")),
    );
    let pid = fleet.wait_running(&["cc"])[0];
    support::kill9(pid);
    // The resumed session comes up as the same conversation, with nothing typed into it.
    support::wait_until(
        std::time::Duration::from_secs(40),
        "the resumed session's start",
        || {
            fleet.ops("cc").iter().any(|o| {
                o["event"] == "session_start"
                    && o["source"] == "resume"
                    && o["session_id"] == id.as_str()
            })
        },
    );
    let resumed = fleet
        .ops("cc")
        .into_iter()
        .rfind(|o| o["event"] == "agent_start")
        .unwrap();
    assert_eq!(resumed["mode"], "resume", "{resumed}");
    let skipped = fleet
        .ops("cc")
        .into_iter()
        .find(|o| o["event"] == "continue_prompt_skipped")
        .expect("no continue prompt after a finished turn");
    assert!(
        skipped["why"]
            .as_str()
            .unwrap()
            .contains("turn had finished"),
        "{skipped}"
    );
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "now write the release notes");
    support::wait_until_explained(
        std::time::Duration::from_secs(30),
        "the new prompt's Bash call in flight",
        || {
            state()["current_task"] == "now write the release notes"
                && dir.join("in_flight.json").exists()
        },
        || fleet.explain("cc", &pane),
    );
    assert_eq!(
        count("continue_prompt_sent"),
        0,
        "typed into an idle session"
    );
    assert!(
        !server
            .message_requests()
            .iter()
            .any(|r| r.text().contains("This session was restarted")),
        "a continue prompt reached the model after a finished turn"
    );
    support::kill9(resumed["pid"].as_u64().unwrap() as u32);
    support::wait_until(std::time::Duration::from_secs(30), "the next start", || {
        count("agent_start") == 3
    });
    let ops = fleet.ops("cc");
    let exit = ops.iter().rfind(|o| o["event"] == "agent_exit").unwrap();
    assert!(exit["runtime_ms"].as_u64().unwrap() < 30_000, "{exit}");
    assert_eq!(exit["action"], "resume", "{exit}");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    assert_eq!(start["session_id"], id.as_str(), "{start}");
    // Killed mid-turn this time: the resumed session is sent on its way.
    let sent = sent_with_the_continue_prompt(&server);
    assert!(sent.contains("now write the release notes"), "{sent}");
}

/// Scenario 3: the model server says the prompt is too long. Claude Code stays at its prompt
/// (StopFailure) → its wrapper, with no daemon and no watchdog pass, has the Clinic diagnose a
/// full context and prescribe a fresh session → the wrapper saves a context-limit handoff and
/// starts fresh → the Clinic's context, the handoff and the continuation prompt reach the
/// model, nobody typing, within 5 s of the failing request.
#[test]
fn real_claude_out_of_context_starts_fresh_with_the_handoff() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![
        Turn::prompt_too_long(),
        Turn::text("Continuing the migration from the handoff."),
    ]);
    let dir = start_claude(&fleet, &server, "", "migrate the billing tables");
    let state = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap()
    };
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the failed turn recorded by the StopFailure hook",
        || fleet.ops("cc").iter().any(|o| o["event"] == "turn_failed"),
    );
    let failed_op = fleet
        .ops("cc")
        .into_iter()
        .find(|o| o["event"] == "turn_failed")
        .unwrap();
    assert!(
        failed_op["details"]
            .as_str()
            .unwrap()
            .contains("prompt is too long"),
        "{failed_op}"
    );
    let old_session = failed_op["session_id"].as_str().unwrap().to_string();

    // Nobody runs the watchdog: the wrapper did.
    support::wait_until(
        std::time::Duration::from_secs(10),
        "the wrapper's check of the failed turn",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "failed_turn_checked")
        },
    );
    let checked = fleet
        .ops("cc")
        .into_iter()
        .find(|o| o["event"] == "failed_turn_checked")
        .unwrap();
    assert_eq!(checked["by"], "wrapper", "{checked}");
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap_or("")
            .contains("started fresh"),
        "{checked}"
    );
    let events = fleet
        .run(&["events", "--agent", "cc", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("context_length_exceeded"), "{events}");

    support::wait_until(
        std::time::Duration::from_secs(30),
        "a fresh session with the continuation prompt",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "continue_prompt_sent")
        },
    );
    let ops = fleet.ops("cc");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "fresh", "{start}");
    let handoffs = fleet.run(&["handoff", "list", "cc", "--json"]).json()["handoffs"].clone();
    assert_eq!(handoffs[0]["trigger_reason"], "context_limit", "{handoffs}");
    let sent = sent_with_the_continue_prompt(&server);
    assert!(
        sent.contains("FRESH SESSION, CONTEXT CARRIED OVER"),
        "{sent}"
    );
    assert!(sent.contains("migrate the billing tables"), "{sent}");
    assert!(sent.contains("latest handoff"), "{sent}");
    // The failing request, then the fresh session's first request and its first turn.
    let requests = server.message_requests();
    let turn = |r: &&Request| r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let failing = requests.iter().find(turn).unwrap().at;
    let first = requests
        .iter()
        .filter(|r| r.at > failing)
        .map(|r| r.at)
        .min()
        .unwrap();
    let continued = requests
        .iter()
        .filter(turn)
        .find(|r| r.text().contains("This session was restarted"))
        .unwrap()
        .at;
    let (to_first, to_turn) = (first - failing, continued - failing);
    eprintln!(
        "prompt is too long → the fresh session's first request after {to_first:?}, \
         its first turn (the continuation prompt) after {to_turn:?}"
    );
    let timeline: Vec<String> = fleet
        .ops("cc")
        .iter()
        .map(|o| format!("{} {} {}", o["ts"], o["event"], o["source"]))
        .collect();
    assert!(
        to_first <= std::time::Duration::from_secs(5),
        "{to_first:?}\n{}",
        timeline.join("\n")
    );
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the new session's turn finished",
        || state()["status"] == "idle",
    );
    assert_ne!(state()["session_id"].as_str().unwrap(), old_session);
    // The prompt phoenix typed did not replace the task.
    assert_eq!(state()["current_task"], "migrate the billing tables");
}

/// The API answers 404 `not_found_error` ("model: claude-nope-4"): the failed turn is
/// diagnosed as a model this account cannot use, and the agent goes to safe mode at once (no
/// revival, no restart) with the model named and the fix (`--model` in phoenix.toml).
#[test]
fn real_claude_model_not_found_goes_to_safe_mode_naming_the_model() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    // Every turn request gets it (Claude Code tries a 404 more than once).
    let not_found = Turn::Error {
        status: 404,
        kind: "not_found_error".into(),
        message: "model: claude-nope-4".into(),
    };
    let server = ModelServer::start(vec![not_found; 12]);
    let agent = cc_agent(&fleet, &server);
    let agent = agent.replace(
        "--dangerously-skip-permissions",
        "--dangerously-skip-permissions --model claude-nope-4",
    );
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{agent}"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "summarise the changelog");
    let dir = fleet.agent_dir("cc");
    // The StopFailure hook records the failed turn, and the wrapper decides at once: no
    // daemon, no watchdog pass.
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the wrapper's check of the failed turn",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "failed_turn_checked")
        },
    );
    let checked = fleet
        .ops("cc")
        .into_iter()
        .find(|o| o["event"] == "failed_turn_checked")
        .unwrap();
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap_or("")
            .contains("safe_mode"),
        "{checked}"
    );
    let events = fleet
        .run(&["events", "--agent", "cc", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("model_unavailable"), "{events}");
    assert!(events.contains("claude-nope-4"), "{events}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("restarts.json")).unwrap()).unwrap();
    let why = record["safe_mode"]["reason"].as_str().unwrap_or("");
    assert!(why.contains("model_unavailable"), "{record}");
    assert!(why.contains("`claude-nope-4`"), "{record}");
    assert!(why.contains("fix `--model`"), "{record}");
    // One start, no revival: a restart cannot fix the model.
    let starts = fleet
        .ops("cc")
        .iter()
        .filter(|o| o["event"] == "agent_start")
        .count();
    assert_eq!(starts, 1);
}

/// The API answers 401 (the key was revoked) and Claude Code gives up on the turn: with no
/// daemon and no watchdog pass, its wrapper has the Clinic diagnose invalid credentials and
/// quarantines the agent at once: one start, no restart, a reason a person can act on.
#[test]
fn real_claude_revoked_key_goes_to_safe_mode_at_once_without_the_daemon() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let revoked = Turn::Error {
        status: 401,
        kind: "authentication_error".into(),
        message: "invalid x-api-key".into(),
    };
    let server = ModelServer::start(vec![revoked; 12]);
    let agent = cc_agent(&fleet, &server);
    // Claude Code retries a 401 ten times over minutes before it gives up on the turn: once
    // here, which changes nothing of what follows.
    let agent = agent.replace(
        "IS_SANDBOX = \"1\"",
        "IS_SANDBOX = \"1\", CLAUDE_CODE_MAX_RETRIES = \"0\"",
    );
    assert!(agent.contains("CLAUDE_CODE_MAX_RETRIES"), "{agent}");
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{agent}"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "summarise the changelog");
    let dir = fleet.agent_dir("cc");
    support::wait_until_explained(
        std::time::Duration::from_secs(30),
        "the wrapper's check of the failed turn",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "failed_turn_checked")
        },
        || fleet.explain("cc", &pane),
    );
    let ops = fleet.ops("cc");
    let failed = ops.iter().find(|o| o["event"] == "turn_failed").unwrap();
    let checked = ops
        .iter()
        .find(|o| o["event"] == "failed_turn_checked")
        .unwrap();
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap_or("")
            .contains("safe_mode"),
        "{checked} after {failed}"
    );
    support::wait_until(std::time::Duration::from_secs(10), "safe mode", || {
        fleet.agent_status("cc")["state"] == "safe-mode"
    });
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("restarts.json")).unwrap()).unwrap();
    let why = record["safe_mode"]["reason"].as_str().unwrap_or("");
    assert!(why.contains("invalid_credentials"), "{record}");
    let starts = fleet
        .ops("cc")
        .iter()
        .filter(|o| o["event"] == "agent_start")
        .count();
    assert_eq!(starts, 1);
}

/// Claude Code started but never given a prompt has a session id and no conversation
/// (`--resume` of it exits 1, "No conversation found"). `phoenix restart` starts it fresh: no
/// failed resume, no crash counted, no continue prompt typed into a session with no task.
#[test]
fn real_claude_restarted_before_any_prompt_starts_fresh_without_a_crash() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![Turn::text("Nothing to do.")]);
    let agent = cc_agent(&fleet, &server);
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        agent
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the session start",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "session_start")
        },
    );
    let first = fleet
        .ops("cc")
        .iter()
        .find(|o| o["event"] == "session_start")
        .unwrap()["session_id"]
        .clone();

    fleet.run(&["restart", "cc"]).status(0);
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the next session start",
        || {
            fleet
                .ops("cc")
                .iter()
                .filter(|o| o["event"] == "session_start")
                .count()
                == 2
        },
    );
    let ops = fleet.ops("cc");
    let starts: Vec<&serde_json::Value> =
        ops.iter().filter(|o| o["event"] == "agent_start").collect();
    assert_eq!(starts.len(), 2, "{ops:?}");
    assert_eq!(starts[1]["mode"], "fresh", "{ops:?}");
    let skipped = ops.iter().find(|o| o["event"] == "resume_skipped").unwrap();
    assert_eq!(skipped["session_id"], first, "{ops:?}");
    let exits: Vec<&serde_json::Value> =
        ops.iter().filter(|o| o["event"] == "agent_exit").collect();
    assert_eq!(exits.len(), 1, "{ops:?}");
    assert_eq!(exits[0]["reason"], "operator_restart", "{ops:?}");
    assert!(
        !ops.iter().any(|o| o["event"] == "continue_prompt_sent"),
        "{ops:?}"
    );
    // Nothing was sent to the model on anybody's behalf.
    assert!(
        server
            .message_requests()
            .iter()
            .all(|r| r.body["tools"].as_array().is_none_or(|t| t.is_empty())),
        "a turn request without a prompt"
    );
}

/// The first request phoenix's continuation prompt made (it says the session was restarted),
/// once it came: what a revived session sent to the model without anybody typing.
fn sent_with_the_continue_prompt(server: &ModelServer) -> String {
    let find = || {
        server
            .message_requests()
            .into_iter()
            // The turn's own request (with tools), not a side request such as the title.
            .find(|r| {
                r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
                    && r.text().contains("This session was restarted")
            })
            .map(|r| r.text())
    };
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the request of phoenix's continuation prompt",
        || find().is_some(),
    );
    find().unwrap()
}

/// Start a real Claude Code agent with `extra` phoenix.toml text before its declaration, and
/// type `prompt` into it.
pub(crate) fn start_claude(
    fleet: &support::Fleet,
    server: &ModelServer,
    extra: &str,
    prompt: &str,
) -> std::path::PathBuf {
    let agent = cc_agent(fleet, server);
    fleet.toml(&format!(
        "{extra}\n[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        agent
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(fleet, &pane, prompt);
    fleet.agent_dir("cc")
}

/// Hook drift under the daemon: phoenix's Stop hook taken out of settings.json (the user's own
/// hook left in) is written back by `phoenix run`, and the Claude Code it starts next ends its
/// turn through that hook (status `idle`).
#[test]
fn real_claude_daemon_restores_a_removed_stop_hook() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir_all(work.join(".claude")).unwrap();
    let settings = work.join(".claude/settings.json");
    let user_stop = "true # the user's own";
    std::fs::write(
        &settings,
        serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": user_stop}]}]}})
            .to_string(),
    )
    .unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![Turn::text("Done.")]);
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n{}",
        fleet.socket,
        claude_agent("cc", &bin, &home, &server, key)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let read = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap()
    };
    let stop_commands = |v: &serde_json::Value| -> Vec<String> {
        v["hooks"]["Stop"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
            .filter_map(|h| h["command"].as_str().map(str::to_string))
            .collect()
    };
    // Phoenix's Stop hook is taken out; the user's stays.
    let mut edited = read();
    edited["hooks"]["Stop"] =
        serde_json::json!([{"hooks": [{"type": "command", "command": user_stop}]}]);
    std::fs::write(&settings, edited.to_string()).unwrap();
    fleet.run(&["plan"]).status(2);

    let log = fleet.path().join("daemon.log");
    let mut daemon = fleet
        .command(&["run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    support::wait_until(
        std::time::Duration::from_secs(15),
        "the Stop hook back",
        || {
            stop_commands(&read())
                .iter()
                .any(|c| c.contains("hook stop"))
        },
    );
    assert!(stop_commands(&read()).contains(&user_stop.to_string()));

    // The next Claude Code (its pane gone, the daemon starts it) has the hook.
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let first = fleet.wait_running(&["cc"])[0];
    fleet.tmux(&["kill-pane", "-t", &pane]);
    // The last pane of the server: the daemon rebuilds it (the pane id may come back as is).
    support::wait_until(
        std::time::Duration::from_secs(20),
        "a new Claude Code",
        || {
            fleet.agent_status("cc")["pid"]
                .as_u64()
                .is_some_and(|p| p != u64::from(first))
        },
    );
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "say done");
    let dir = fleet.agent_dir("cc");
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the turn ended through the Stop hook",
        || {
            serde_json::from_slice::<serde_json::Value>(
                &std::fs::read(dir.join("state.json")).unwrap_or_default(),
            )
            .is_ok_and(|s| s["status"] == "idle" && s["current_task"] == "say done")
        },
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("applied") && l.contains("install_hooks"))
            .count(),
        1,
        "{text}"
    );
}

/// The Clinic's evidence is what the dying session wrote: a resumed Claude Code killed with
/// nothing wrong is not diagnosed from the "API Error: 529" its predecessor left on screen.
#[test]
fn real_claude_crash_is_not_diagnosed_from_an_earlier_sessions_error() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![
        Turn::text("API Error: 529 {\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}"),
        Turn::text("Carrying on with the summary."),
        Turn::text("Still carrying on."),
    ]);
    start_claude(&fleet, &server, "", "summarize the notes");
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let screen = || {
        fleet
            .tmux(&["capture-pane", "-p", "-S", "-200", "-t", &pane])
            .unwrap_or_default()
    };
    support::wait_until(std::time::Duration::from_secs(30), "the 529 text", || {
        screen().contains("overloaded_error")
    });
    // Killed before Claude wrote the turn to its transcript, there would be no conversation to
    // resume (Claude refuses the id and phoenix rightly starts fresh): kill once it is written.
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the turn in the transcript",
        || {
            fleet
                .ops("cc")
                .iter()
                .find(|o| o["event"] == "session_start")
                .and_then(|o| o["transcript_path"].as_str().map(String::from))
                .and_then(|path| std::fs::read_to_string(path).ok())
                .is_some_and(|t| t.contains("overloaded_error"))
        },
    );
    // And killed once the turn is over (its Stop hook ran): Claude Code writes the turn to
    // its transcript a moment before it ends it, and a session killed in that moment was
    // mid-turn, rightly told to go on.
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the first turn complete",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "turn_complete")
        },
    );
    let first = fleet.wait_running(&["cc"])[0];
    support::kill9(first);
    // Its turn had ended (the 529 was the model's text): the resumed session is told nothing
    // and waits; a person's next prompt gets an answer: it is well.
    support::wait_until_explained(
        std::time::Duration::from_secs(60),
        "the resumed session's start",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "session_start" && o["source"] == "resume")
        },
        || fleet.explain("cc", &pane),
    );
    assert!(
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "continue_prompt_skipped"),
        "no continue prompt after a finished turn: {:?}",
        fleet
            .ops("cc")
            .iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
    );
    type_prompt(&fleet, &pane, "go on with the summary");
    support::wait_until_explained(
        std::time::Duration::from_secs(60),
        "the resumed session answered",
        || screen().contains("Carrying on with the summary."),
        || fleet.explain("cc", &pane),
    );
    let second = fleet.wait_running(&["cc"])[0];
    assert_ne!(first, second);
    // The resumed session's turn is over (its Stop hook ran): a well session, killed.
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the resumed session's turn complete",
        || {
            let ops = fleet.ops("cc");
            let start = ops
                .iter()
                .rposition(|o| o["event"] == "agent_start" && o["pid"] == second);
            start.is_some_and(|s| ops[s..].iter().any(|o| o["event"] == "turn_complete"))
        },
    );
    support::kill9(second);
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the second crash handled",
        || {
            fleet
                .ops("cc")
                .iter()
                .filter(|o| o["event"] == "agent_exit" && o["reason"] == "crash")
                .count()
                >= 2
        },
    );
    let ops = fleet.ops("cc");
    let second_start = ops
        .iter()
        .rposition(|o| o["event"] == "agent_start" && o["pid"] == second)
        .unwrap();
    let after: Vec<&serde_json::Value> = ops[second_start..]
        .iter()
        .filter(|o| o["event"].as_str().is_some_and(|e| e.starts_with("clinic")))
        .collect();
    let text = serde_json::to_string(&after).unwrap();
    assert!(!text.contains("transient_error"), "{text}\n{}", screen());
    assert!(!text.contains("529"), "{text}\n{}", screen());
}

/// Scenario 4, first half: the model server hangs mid-turn. Claude Code waits on the stream,
/// no tool call comes → the watchdog reports silence, records it, and revives the session,
/// which is told why and sent on its way.
#[test]
fn real_claude_hanging_on_the_model_is_found_silent_and_revived() {
    if !enabled() {
        return;
    }
    real::hanging_model_is_found_silent_and_revived(&CLAUDE_CLI);
}

/// An agent idle for longer than the silence threshold gets a prompt whose answer is slow:
/// its last tool call is from the turn before, and the watchdog must not call the new turn
/// silent (it once revived such an agent 2 s into the turn).
#[test]
fn real_claude_idle_past_silence_then_a_slow_answer_is_not_silent() {
    if !enabled() {
        return;
    }
    real::idle_past_silence_then_a_slow_answer_is_not_silent(&CLAUDE_CLI);
}

/// Claude Code retrying an overloaded API by itself ("API error · Retrying in 5s · attempt
/// 4/10", no hook, no transcript write for 18 s) is busy, not silent, for as long as it
/// retries.
#[test]
fn real_claude_retrying_an_overloaded_api_is_not_silent() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let mut script: Vec<Turn> = (0..5).map(|_| Turn::overloaded()).collect();
    script.push(Turn::text("Finally through."));
    let server = ModelServer::start(script);
    start_claude(
        &fleet,
        &server,
        "[thresholds]\nsilence = \"3s\"\n",
        "check the mail",
    );
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the first retry",
        || server.message_requests().len() >= 2,
    );
    let retrying_since = std::time::Instant::now();
    let screen = || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .unwrap_or_default()
    };
    let (mut passes, mut saw_banner) = (0, false);
    while !screen().contains("Finally through.") {
        let report = fleet.run(&["watchdog", "--once", "--json"]).json();
        let shown = screen();
        // 2.1.197: "Retrying in 4 seconds… (attempt 2/10)"; 2.1.332 words it otherwise.
        saw_banner |= shown.contains("Retrying");
        let a = &report["agents"][0];
        assert_eq!(
            a["verdict"],
            "healthy",
            "after {:?}: {a}\n{shown}",
            retrying_since.elapsed()
        );
        passes += 1;
        assert!(passes < 60, "never got through:\n{shown}");
        std::thread::sleep(std::time::Duration::from_millis(1000));
    }
    // 2.1.332 retries without a banner (a still screen for the whole retry, a harder case
    // for silence); the passes above ran through it and every one said healthy.
    let version = support::cli_version("claude", CLAUDE_CODE, CLAUDE_CODE_PINNED);
    if version == "2.1.197" {
        assert!(saw_banner, "no pass saw the retry banner:\n{}", screen());
    }
    assert!(
        server.message_requests().len() >= 6,
        "the five overloaded answers and the last"
    );
    assert!(
        passes >= 3,
        "only {passes} watchdog passes ran while it retried"
    );
    assert!(
        retrying_since.elapsed() > std::time::Duration::from_secs(6),
        "the retries were over before silence could be found: {:?}",
        retrying_since.elapsed()
    );
    assert_eq!(
        fleet
            .unhealthy_events("cc")
            .matches("session_unhealthy")
            .count(),
        0
    );
}

/// Running the same command at the end of each turn (real Bash calls, identical inputs) is
/// a habit, not a repetition loop: neither idle after the turns nor working on the next one.
#[test]
fn real_claude_the_same_command_in_every_turn_is_not_a_loop() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let mut script = Vec::new();
    for _ in 0..3 {
        script.push(Turn::bash("echo tests pass"));
        script.push(Turn::text("Tests pass."));
    }
    script.push(Turn::text("Next task noted."));
    let server = ModelServer::start(script);
    let dir = start_claude(
        &fleet,
        &server,
        "[thresholds]\nrepeat = 3\n",
        "run the tests",
    );
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let state = || -> serde_json::Value {
        std::fs::read(dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    };
    let calls = || support::read_jsonl(&dir.join("tool_use.jsonl"));
    for turn in 1..=3 {
        if turn > 1 {
            type_prompt(&fleet, &pane, "run the tests again");
        }
        support::wait_until(
            std::time::Duration::from_secs(60),
            "the turn's test run",
            || calls().len() == turn && state()["status"] == "idle",
        );
    }
    let digests: Vec<serde_json::Value> =
        calls().iter().map(|c| c["input_digest"].clone()).collect();
    assert!(
        digests.iter().all(|d| *d == digests[0] && d.is_string()),
        "{digests:?}"
    );
    for pass in 0..2 {
        let report = fleet.run(&["watchdog", "--once", "--json"]).json();
        assert_eq!(
            report["agents"][0]["verdict"], "healthy",
            "idle, pass {pass}: {report}"
        );
    }
    let asked = server.message_requests().len();
    server.delay_next(std::time::Duration::from_secs(4));
    type_prompt(&fleet, &pane, "note the next task");
    support::wait_until(std::time::Duration::from_secs(30), "the next turn", || {
        server.message_requests().len() > asked && state()["status"] == "working"
    });
    for pass in 0..2 {
        let report = fleet.run(&["watchdog", "--once", "--json"]).json();
        assert_eq!(
            report["agents"][0]["verdict"], "healthy",
            "working, pass {pass}: {report}"
        );
    }
    assert_eq!(
        fleet
            .unhealthy_events("cc")
            .matches("session_unhealthy")
            .count(),
        0
    );
}

/// Scenario 4, second half: six Bash calls fail in a row (real PostToolUseFailure hooks) →
/// the watchdog finds an error cascade and records it as a critical event.
#[test]
fn real_claude_six_failing_tools_are_an_error_cascade() {
    if !enabled() {
        return;
    }
    real::failing_shell_calls_are_an_error_cascade(&CLAUDE_CLI);
}

/// Scenario 5: `/compact` typed into the real Claude Code → its PreCompact hook has phoenix
/// save a handoff, SessionStart says `compact`, and the next request carries phoenix's
/// compaction block with that handoff.
#[test]
fn real_claude_compaction_saves_a_handoff_that_comes_back() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![
        Turn::bash("echo 'release notes drafted' > notes.txt"),
        Turn::text("Drafted the notes."),
        Turn::text("Carrying on after the compaction."),
    ]);
    let dir = start_claude(&fleet, &server, "", "tidy the changelog");
    let state = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap()
    };
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the first turn finished",
        || state()["status"] == "idle" && dir.join("tool_use.jsonl").exists(),
    );
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "/compact");
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the pre-compact handoff",
        || {
            fleet.run(&["handoff", "list", "cc", "--json"]).json()["handoffs"]
                .clone()
                .as_array()
                .is_some_and(|h| h.iter().any(|h| h["trigger_reason"] == "pre_compact"))
        },
    );
    support::wait_until(
        std::time::Duration::from_secs(30),
        "SessionStart compact",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "session_start" && o["source"] == "compact")
        },
    );
    let handoffs = fleet.run(&["handoff", "list", "cc", "--json"]).json()["handoffs"].clone();
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
        .run(&["handoff", "show", &saved, "--agent", "cc"])
        .status(0)
        .stdout();
    assert!(shown.contains("tidy the changelog"), "{shown}");

    let before = server.message_requests().len();
    type_prompt(&fleet, &pane, "go on with the changelog");
    // The turn's own request (with tools), not a side request such as the session title.
    let turn_request = || {
        server.message_requests()[before..]
            .iter()
            .find(|r| {
                r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
                    && r.text().contains("go on with the changelog")
            })
            .map(|r| r.text())
    };
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the request after the compaction",
        || turn_request().is_some(),
    );
    let sent = turn_request().unwrap();
    assert!(sent.contains("CONTEXT COMPACTED"), "{sent}");
    assert!(sent.contains(&saved), "the handoff id in {sent}");
}

/// Issue 15 item 6 with the real CLI: Claude Code runs a Bash call that leaves a job in a
/// session of its own, and is killed mid-call. The job is stopped before the session is
/// resumed (the file it would append to never gets the line), it is recorded, and the resumed
/// session is told which command was stopped.
#[test]
fn real_claude_killed_mid_tool_leaves_no_orphan_and_is_told_what_was_stopped() {
    if !enabled() {
        return;
    }
    real::killed_mid_tool(&CLAUDE_CLI);
}

/// Issue 15 item 7 with the real CLI: the wrapper is killed with Claude Code still running
/// in its pane; the wrapper that replaces it stops that Claude Code (recorded) before it
/// starts one of its own, so one session never runs in two processes.
#[test]
fn real_claude_left_by_a_killed_wrapper_is_stopped_before_the_next_start() {
    if !enabled() {
        return;
    }
    real::killed_wrapper(&CLAUDE_CLI);
}

/// Watchdog passes (`phoenix watchdog --once --json`) on a thread of their own, one after the
/// other with `gap` between them, for as long as it lives: every report, with when it came.
struct Passes {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(std::time::Duration, serde_json::Value)>>>,
}

impl Passes {
    fn start(fleet: &support::Fleet, gap: std::time::Duration) -> Passes {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (root, config, flag) = (fleet.path().to_owned(), fleet.config(), stop.clone());
        let thread = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let mut reports = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                // As `Fleet::command` runs it.
                let out = Command::new(env!("CARGO_BIN_EXE_phoenix"))
                    .env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .env("HOME", root.join("home"))
                    .env("TERM", "xterm")
                    .current_dir(&root)
                    .arg("--config")
                    .arg(&config)
                    .args(["watchdog", "--once", "--json"])
                    .stdin(std::process::Stdio::null())
                    .output()
                    .unwrap();
                let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
                    serde_json::json!({"unreadable": String::from_utf8_lossy(&out.stdout),
                                       "stderr": String::from_utf8_lossy(&out.stderr)})
                });
                reports.push((started.elapsed(), report));
                std::thread::sleep(gap);
            }
            reports
        });
        Passes {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop, and every report.
    fn finish(mut self) -> Vec<(std::time::Duration, serde_json::Value)> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Passes {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Issue 15's "0 false verdicts over a 30-minute run of a real agent doing slow turns with
/// idle gaps", time-compressed: thresholds at 1/150 (silence 4 s for the default 10 min,
/// runaway 48 s for 2 h), so the ~60–90 s this test runs stand for 2.5–3.75 hours. Watchdog
/// passes run back to back the whole time (one about every second: every 2.5 min at real
/// scale) while real Claude Code streams slow answers (a word every 0.5 s, longer than the
/// silence in all), retries an overloaded API by itself before a long Bash call (longer than
/// the silence), runs the same command in three turns (`repeat = 3`), waits at its prompt for
/// longer than the silence between turns, and starts a new session (`/clear`) after such a
/// gap. Not one pass may find anything: no verdict, no revival, no restart, one process, and
/// the same session until the `/clear`.
#[test]
fn real_claude_slow_turns_and_idle_gaps_get_no_verdict_in_a_compressed_half_hour() {
    if !enabled() {
        return;
    }
    let silence = std::time::Duration::from_secs(4);
    let pace = std::time::Duration::from_millis(500);
    let slow = "All the tests pass: the parser, the lexer, the printer, the checker, the \
                linker and the runner are green.";
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![
        // Turn 1: the habitual command, then a slow answer.
        Turn::bash("echo tests pass"),
        Turn::text(slow),
        // Turn 2: the API is overloaded twice (Claude Code retries by itself), then a long
        // Bash call.
        Turn::overloaded(),
        Turn::overloaded(),
        Turn::bash("sleep 7; echo built"),
        Turn::text("Built."),
        // Turn 3 and, after /clear, turn 4: the same command again.
        Turn::bash("echo tests pass"),
        Turn::text("Tests pass."),
        Turn::bash("echo tests pass"),
        Turn::text(slow),
    ]);
    let dir = start_claude_waiting(
        &fleet,
        &server,
        "[thresholds]\nsilence = \"4s\"\nrunaway = \"48s\"\nrepeat = 3\n",
    );
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let state = || -> serde_json::Value {
        std::fs::read(dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    };
    let calls = || support::read_jsonl(&dir.join("tool_use.jsonl")).len();
    let turn_done = |n: usize| {
        support::wait_until_explained(
            std::time::Duration::from_secs(60),
            &format!("turn {n}'s tool call and its end"),
            || calls() == n && state()["status"] == "idle",
            || format!("{}\n{}", state(), fleet.explain("cc", &pane)),
        );
    };
    // Idle at the prompt for longer than the silence threshold.
    let idle_gap = || {
        support::wait_until(
            std::time::Duration::from_secs(30),
            "an idle gap past the silence threshold",
            || fleet.quiet_for("cc") > silence.as_secs_f64() + 2.0,
        );
    };
    let passes = Passes::start(&fleet, std::time::Duration::from_millis(500));
    let started = std::time::Instant::now();

    server.pace_next(pace);
    type_prompt(&fleet, &pane, "run the tests");
    turn_done(1);
    let session = state()["session_id"].clone();
    idle_gap();
    type_prompt(&fleet, &pane, "build the release");
    turn_done(2);
    idle_gap();
    type_prompt(&fleet, &pane, "run the tests again");
    turn_done(3);
    assert_eq!(state()["session_id"], session, "{}", state());
    idle_gap();
    // A new session after the long idle.
    type_prompt(&fleet, &pane, "/clear");
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the new session",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "session_start" && o["source"] == "clear")
        },
    );
    let session = state()["session_id"].clone();
    server.pace_next(pace);
    type_prompt(&fleet, &pane, "run the tests once more");
    turn_done(4);
    idle_gap();
    let took = started.elapsed();
    let reports = passes.finish();

    eprintln!(
        "{} watchdog passes over {took:.0?} (≈ {} min at real thresholds)",
        reports.len(),
        took.as_secs() * 150 / 60
    );
    assert!(
        took.as_secs() * 150 >= 30 * 60,
        "the run must stand for at least 30 minutes: {took:?}"
    );
    for (at, report) in &reports {
        let cc = &report["agents"][0];
        assert_eq!(cc["verdict"], "healthy", "pass at {at:.1?}: {report}");
        assert!(
            cc["findings"].as_array().is_some_and(|f| f.is_empty()),
            "pass at {at:.1?}: {report}"
        );
    }
    // The script was played to its end: the retries and every turn happened.
    assert_eq!(server.remaining(), 0);
    // Each turn took longer than the silence threshold: the slow answers, the retries and
    // the long call were not over between two passes.
    let ts = |o: &serde_json::Value| {
        o["ts"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    let ops = fleet.ops("cc");
    let prompts: Vec<_> = ops
        .iter()
        .filter(|o| o["event"] == "prompt")
        .map(ts)
        .collect();
    let ends: Vec<_> = ops
        .iter()
        .filter(|o| o["event"] == "turn_complete")
        .map(ts)
        .collect();
    let turns: Vec<f64> = prompts
        .iter()
        .zip(&ends)
        .map(|(p, e)| (*e - *p).total(jiff::Unit::Second).unwrap())
        .collect();
    eprintln!("turns took {turns:.1?} s");
    for n in [0, 1, 3] {
        assert!(
            turns[n] > silence.as_secs_f64(),
            "turn {}: {turns:?}",
            n + 1
        );
    }
    assert_eq!(
        fleet
            .unhealthy_events("cc")
            .matches("session_unhealthy")
            .count(),
        0
    );
    let ops = fleet.ops("cc");
    let count = |event: &str| ops.iter().filter(|o| o["event"] == event).count();
    assert_eq!(count("agent_start"), 1, "one process throughout");
    assert_eq!(count("agent_exit"), 0, "never stopped");
    assert_eq!(count("watchdog"), 0, "no pass acted");
    assert_eq!(state()["session_id"], session, "{}", state());
    assert_eq!(state()["status"], "idle");
}

/// A real Claude Code agent started by `phoenix apply` with `extra` phoenix.toml text, its
/// prompt up: the agent's state dir.
fn start_claude_waiting(
    fleet: &support::Fleet,
    server: &ModelServer,
    extra: &str,
) -> std::path::PathBuf {
    let agent = cc_agent(fleet, server);
    fleet.toml(&format!(
        "{extra}\n[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{agent}"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    fleet.agent_dir("cc")
}
