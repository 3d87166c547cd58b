//! The real Codex CLI, driven by a scripted Responses API server on loopback (no network),
//! running the hooks phoenix generates. The CLI is installed with npm into
//! `target/real-clis/codex-VERSION/` on first use; if that fails the suite fails loudly rather than
//! passing without having run.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1` (`.ci/run` sets it); plain `cargo test` says it
//! skipped the suite and why.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::Fleet;
use support::openai_server::{self, OpenAiServer, Responses, exec};
use support::real::{self, RealCli, Run, state_of};
use support::scripted::Turn;

/// The Codex CLI version the suite is pinned to.
const CODEX: &str = "@openai/codex";
/// The version the suite is pinned to (`PHOENIX_TEST_CLI_VERSIONS` picks another).
pub(crate) const CODEX_PINNED: &str = "0.171.0";
const KEY: &str = "sk-scripted-0123456789";
const WAIT: Duration = Duration::from_secs(30);

pub(crate) fn codex_bin() -> PathBuf {
    support::npm_cli("codex", CODEX, CODEX_PINNED, "codex")
}

/// Codex in the table of the scenarios every real CLI goes through alike.
const CODEX_CLI: RealCli<Responses> = RealCli {
    agent: "cx",
    serve: openai_server::start,
    start: start_codex,
    submit: |fleet, pane, text| support::submit(fleet, pane, text, WAIT),
    shell: exec,
    turns: OpenAiServer::turn_requests,
    // Codex's payload has no failure flag: the exit code is read from the rollout.
    failed_shell_call: |t| {
        t["tool"] == "Bash"
            && t["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("exit code 2"))
    },
    outlives_terminal: false,
};

/// `$CODEX_HOME` with a model provider that points at `server`, and nothing trusted.
pub(crate) fn codex_home(root: &Path, server: &OpenAiServer) -> PathBuf {
    let home = root.join("home/.codex");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5\"\nmodel_provider = \"scripted\"\ncheck_for_update_on_startup = false\n\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
             env_key = \"SCRIPTED_API_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
            server.base_url()
        ),
    )
    .unwrap();
    home
}

/// Processes whose command line mentions `needle`: a background app server Codex started from
/// this test's `CODEX_HOME` lives outside the pane and its tmux server.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// Kills, on drop, whatever Codex left running from this `CODEX_HOME` (even when the test
/// failed), so no test leaves a server behind.
pub(crate) struct CodexLeftovers(pub(crate) PathBuf);

impl Drop for CodexLeftovers {
    fn drop(&mut self) {
        for pid in processes_mentioning(&self.0.to_string_lossy()) {
            support::kill9(pid);
        }
    }
}

/// An agent that runs the real Codex CLI interactively in `work/`.
pub(crate) fn codex_agent(fleet: &Fleet, bin: &Path, codex_home: &Path) -> String {
    format!(
        "[[agent]]\nname = \"cx\"\ncli = \"codex\"\ncommand = \"'{}' --dangerously-bypass-approvals-and-sandbox\"\n\
         workdir = \"work\"\nenv = {{ HOME = \"{}\", CODEX_HOME = \"{}\", SCRIPTED_API_KEY = \"{KEY}\" }}\n",
        bin.display(),
        fleet.path().join("home").display(),
        codex_home.display()
    )
}

pub(crate) fn workdir(fleet: &Fleet) -> PathBuf {
    let work = fleet.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::canonicalize(work).unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The rollout file Codex wrote for session `id`.
fn rollout(codex_home: &Path, id: &str) -> Option<PathBuf> {
    let mut dirs = vec![codex_home.join("sessions")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(&format!("-{id}.jsonl")) {
                return Some(path);
            }
        }
    }
    None
}

/// The output Codex sent back to the model for the tool call it made.
pub(crate) fn tool_output(request: &support::scripted::Request) -> String {
    request.body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].to_string())
        .collect()
}

/// The suite runs only when asked for (see `support::opted_in`).
pub(crate) fn enabled() -> bool {
    support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_codex.rs (the real Codex CLI)",
        "npm and access to the npm registry",
    )
}

#[test]
fn scripted_server_drives_a_real_exec_command_and_phoenix_hooks_fire() {
    if !enabled() {
        return;
    }
    let bin = codex_bin();
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let server = openai_server::start(vec![
        exec("echo phoenix-smoke > smoke.txt"),
        exec("ls /nonexistent-phoenix-dir"),
        Turn::text("All done."),
    ]);
    let home = codex_home(fleet.path(), &server);
    let _leftovers = CodexLeftovers(home.clone());
    fleet.toml(&codex_agent(&fleet, &bin, &home));
    // phoenix's hooks for the agent, exactly as `apply` installs them.
    let shown = fleet
        .run(&["hooks", "show", "--agent", "cx", "--json"])
        .json();
    let file = &shown["files"][0];
    assert!(
        file["path"]
            .as_str()
            .unwrap()
            .ends_with(".codex/hooks.json")
    );
    std::fs::create_dir_all(work.join(".codex")).unwrap();
    std::fs::write(work.join(".codex/hooks.json"), file["content"].to_string()).unwrap();
    // Print mode has no wrapper to record trust: trust the project here and let the flag stand
    // in for hook trust (the interactive tests run without it).
    let mut config = std::fs::read_to_string(home.join("config.toml")).unwrap();
    config.push_str(&format!(
        "\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        work.display()
    ));
    std::fs::write(home.join("config.toml"), config).unwrap();

    let out = Command::new(&bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", fleet.path().join("home"))
        .env("CODEX_HOME", &home)
        .env("SCRIPTED_API_KEY", KEY)
        .current_dir(&work)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--dangerously-bypass-hook-trust",
            "write the smoke file",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "codex exec failed:\n{said}");
    assert!(said.contains("All done."), "{said}");
    assert_eq!(
        std::fs::read_to_string(work.join("smoke.txt"))
            .unwrap()
            .trim(),
        "phoenix-smoke"
    );
    let turns = server.turn_requests();
    assert_eq!(turns.len(), 3, "two tool calls, then the answer");
    assert!(turns[0].text().contains("write the smoke file"));
    assert!(
        tool_output(&turns[1]).contains("Process exited with code 0"),
        "{}",
        turns[1].text()
    );
    assert!(
        tool_output(&turns[2]).contains("Process exited with code 2"),
        "{}",
        turns[2].text()
    );

    // phoenix's hooks ran: session start, the shell call, the end of the turn.
    let dir = fleet.agent_dir("cx");
    let state = read_json(&dir.join("state.json"));
    let id = state["session_id"].as_str().unwrap().to_string();
    assert!(said.contains(&format!("session id: {id}")), "{said}");
    assert!(rollout(&home, &id).is_some(), "rollout for {id}");
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert!(tools.iter().all(|t| t["tool"] == "Bash"), "{tools:?}");
    assert!(tools.iter().all(|t| t["session_id"] == id.as_str()));
    assert_eq!(tools[0]["ok"], true);
    // Codex's payload has no failure flag: the exit code is read from the tool's output.
    assert_eq!(tools[1]["ok"], false);
    assert!(
        tools[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("exit code 2"),
        "{tools:?}"
    );
    let ops = fleet.ops("cx");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "session_start" && o["source"] == "startup"),
        "{ops:?}"
    );
    assert!(ops.iter().any(|o| o["event"] == "turn_complete"), "{ops:?}");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// `phoenix apply` with a `cli = "codex"` agent: the hooks are installed, the wrapper has Codex
/// trust the project and phoenix's hooks (no dialog stops it), the real Codex runs
/// interactively, its session id is recorded at session start, its shell call lands in
/// tool_use.jsonl, and the open loop reaches the model.
#[test]
fn real_codex_in_a_phoenix_pane_runs_the_hooks_apply_installed() {
    if !enabled() {
        return;
    }
    let bin = codex_bin();
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let server = openai_server::start(vec![
        exec("echo interactive-ok > out.txt"),
        Turn::text("Wrote it."),
    ]);
    let home = codex_home(fleet.path(), &server);
    let _leftovers = CodexLeftovers(home.clone());
    fleet.toml(&codex_agent(&fleet, &bin, &home));
    fleet
        .run(&["loop", "add", "cx", "ship-parser", "ship the parser"])
        .status(0);
    fleet.run(&["apply", "--yes"]).status(0);
    let hooks = std::fs::read_to_string(work.join(".codex/hooks.json")).unwrap();
    assert!(hooks.contains("hook session-start --agent cx"), "{hooks}");
    fleet.wait_running(&["cx"]);
    let pane = fleet.agent_status("cx")["pane"]
        .as_str()
        .unwrap()
        .to_string();

    // Straight to the prompt: no folder-trust or hook-review dialog.
    support::wait_for_screen(&fleet, &pane, "for shortcuts", WAIT);
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(home.join("config.toml")).unwrap()).unwrap();
    let project = work.to_string_lossy();
    assert_eq!(
        config["projects"][project.as_ref()]["trust_level"].as_str(),
        Some("trusted")
    );
    let trusted = config["hooks"]["state"].as_table().unwrap();
    assert_eq!(trusted.len(), 7, "one per phoenix hook: {trusted:?}");
    assert!(
        trusted
            .keys()
            .all(|k| k.starts_with(&format!("{project}/.codex/hooks.json:")))
    );

    support::submit(&fleet, &pane, "write the file", WAIT);
    let dir = fleet.agent_dir("cx");
    support::wait_until(WAIT, "tool call recorded", || {
        support::read_jsonl(&dir.join("tool_use.jsonl"))
            .iter()
            .any(|t| t["tool"] == "Bash" && t["ok"] == true)
    });
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
    assert!(rollout(&home, id).is_some(), "rollout for {id}");
    let ops = fleet.ops("cx");
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
    assert!(tool_output(&turns[1]).contains("Process exited with code 0"));
    support::wait_for_screen(&fleet, &pane, "Wrote it.", WAIT);
    assert!(!dir.join("hook_errors.jsonl").exists());
    // The session ran in the process phoenix supervises, not in a background server.
    assert_eq!(
        processes_mentioning(&home.to_string_lossy()),
        Vec::<u32>::new()
    );
}

/// `kill -9` of the real Codex mid-turn (its model call after a finished shell call is hanging):
/// the wrapper starts `codex resume <id> --no-daemon` with the recorded session, types its
/// continuation prompt, Codex's SessionStart says `resume`, and phoenix's recovery block reaches
/// the model with that request; nobody types.
#[test]
fn real_codex_killed_mid_turn_is_resumed_with_the_recovery_block() {
    if !enabled() {
        return;
    }
    let bin = codex_bin();
    let fleet = Fleet::new();
    let work = workdir(&fleet);
    let server = openai_server::start(vec![exec("echo step-one > one.txt"), Turn::Hang]);
    let home = codex_home(fleet.path(), &server);
    let _leftovers = CodexLeftovers(home.clone());
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        codex_agent(&fleet, &bin, &home)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["cx"]);
    let pane = fleet.agent_status("cx")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &pane, "for shortcuts", WAIT);
    support::submit(&fleet, &pane, "refactor the parser module", WAIT);
    let dir = fleet.agent_dir("cx");
    // Mid-turn: the shell call ran and the model call after it hangs.
    support::wait_until(WAIT, "the turn under way", || {
        work.join("one.txt").exists()
            && server.turn_requests().len() == 2
            && support::read_jsonl(&dir.join("tool_use.jsonl")).len() == 1
    });
    let state = read_json(&dir.join("state.json"));
    assert_eq!(state["status"], "working");
    let id = state["session_id"].as_str().unwrap().to_string();
    let rollout_before = rollout(&home, &id).expect("rollout of the first run");

    server.push([Turn::text("Picked up where I stopped.")]);
    support::kill9(pids[0]);
    support::wait_until(WAIT, "the resumed run", || {
        fleet
            .ops("cx")
            .iter()
            .any(|o| o["event"] == "agent_start" && o["mode"] == "resume")
    });
    let ops = fleet.ops("cx");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        argv,
        [
            bin.to_str().unwrap(),
            "resume",
            id.as_str(),
            "--no-daemon",
            "--dangerously-bypass-approvals-and-sandbox"
        ]
    );
    // Nobody types: phoenix's continuation prompt sends the resumed session on its way, and
    // Codex runs SessionStart (lazily, with that first prompt of the session) before it.
    support::wait_until_explained(
        WAIT,
        "the resumed session's request",
        || {
            server
                .turn_requests()
                .iter()
                .any(|r| r.text().contains("This session was restarted"))
        },
        || fleet.explain("cx", &pane),
    );
    assert!(
        fleet.ops("cx").iter().any(|o| o["event"] == "session_start"
            && o["source"] == "resume"
            && o["session_id"] == id),
        "SessionStart resume: {:?}",
        fleet.ops("cx")
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
    assert_eq!(
        rollout(&home, &id),
        Some(rollout_before),
        "same session file"
    );
    // The handoff saved on the crash is the one that came with the recovery block; no turn
    // left one of its own.
    assert!(sent.contains(", crash) ---"), "{sent}");
    let handoffs = fleet.run(&["handoff", "list", "cx", "--json"]).json()["handoffs"].clone();
    let triggers: Vec<&str> = handoffs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["trigger_reason"].as_str())
        .collect();
    assert_eq!(triggers, ["crash"]);
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// A real Codex agent started by `phoenix apply` (with `extra` phoenix.toml text before its
/// declaration and fast restarts), `prompt` typed into it once it waits for input. Its home is
/// `CODEX_HOME`; what Codex leaves running is killed when the run is dropped.
fn start_codex(fleet: &Fleet, server: &OpenAiServer, extra: &str, prompt: &str) -> Run {
    let bin = codex_bin();
    workdir(fleet);
    let home = codex_home(fleet.path(), server);
    let leftovers = CodexLeftovers(home.clone());
    fleet.toml(&format!(
        "{extra}\n[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{}",
        codex_agent(fleet, &bin, &home)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cx"]);
    let pane = fleet.agent_status("cx")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(fleet, &pane, "for shortcuts", WAIT);
    support::submit(fleet, &pane, prompt, WAIT);
    Run {
        dir: fleet.agent_dir("cx"),
        pane,
        home,
        guard: Some(Box::new(leftovers)),
    }
}

/// The request phoenix's continuation prompt made (it says the session was restarted), once it
/// came: what a restarted session sent to the model without anybody typing.
fn sent_with_the_continue_prompt(fleet: &Fleet, server: &OpenAiServer, pane: &str) -> String {
    CODEX_CLI.sent_with_the_continue_prompt(fleet, server, pane)
}

/// Scenario 3: the Responses API answers `context_length_exceeded`. Codex shows "ran out of room
/// in the model's context window" and waits at its prompt without running any hook (no Stop);
/// its rollout ends the turn with the error → the watchdog reads it there, the Clinic diagnoses
/// a full context → the wrapper saves a context-limit handoff and starts a fresh session → the
/// Clinic's context, the handoff and the continuation prompt reach the model, nobody typing.
#[test]
fn real_codex_out_of_context_starts_fresh_with_the_handoff() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = openai_server::start(vec![
        openai_server::context_length_exceeded(),
        Turn::text("Continuing the migration from the handoff."),
    ]);
    let run = start_codex(&fleet, &server, "", "migrate the billing tables");
    support::wait_for_screen(&fleet, &run.pane, "ran out of room", WAIT);
    let state = || state_of(&run.dir);
    // No hook said the turn ended: only the rollout knows.
    assert_eq!(state()["status"], "working");
    let old_session = state()["session_id"].as_str().unwrap().to_string();
    let rollout_text = std::fs::read_to_string(rollout(&run.home, &old_session).unwrap()).unwrap();
    assert!(
        rollout_text.contains("\"codex_error_info\":\"context_window_exceeded\""),
        "{rollout_text}"
    );

    let report = fleet
        .run(&["watchdog", "--once", "--json"])
        .status(1)
        .json();
    let cx = &report["agents"][0];
    assert_eq!(cx["findings"][0]["check"], "turn_failed", "{report}");
    assert!(
        cx["findings"][0]["summary"]
            .as_str()
            .unwrap()
            .contains("context_window_exceeded"),
        "{report}"
    );
    assert!(
        cx["action_taken"]
            .as_str()
            .unwrap_or("")
            .contains("started fresh"),
        "{report}"
    );
    let events = fleet
        .run(&["events", "--agent", "cx", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("context_length_exceeded"), "{events}");

    let sent = sent_with_the_continue_prompt(&fleet, &server, &run.pane);
    let ops = fleet.ops("cx");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "fresh", "{start}");
    let handoffs = fleet.run(&["handoff", "list", "cx", "--json"]).json()["handoffs"].clone();
    assert_eq!(handoffs[0]["trigger_reason"], "context_limit", "{handoffs}");
    assert!(
        sent.contains("FRESH SESSION, CONTEXT CARRIED OVER"),
        "{sent}"
    );
    assert!(sent.contains("migrate the billing tables"), "{sent}");
    assert!(sent.contains("latest handoff"), "{sent}");
    support::wait_for_screen(
        &fleet,
        &run.pane,
        "Continuing the migration from the handoff.",
        WAIT,
    );
    support::wait_until(WAIT, "the new session's turn finished", || {
        state()["status"] == "idle"
    });
    assert_ne!(state()["session_id"].as_str().unwrap(), old_session);
    // The prompt phoenix typed did not replace the task.
    assert_eq!(state()["current_task"], "migrate the billing tables");
    assert!(!run.dir.join("hook_errors.jsonl").exists());
}

/// Scenario 4, first half: the model hangs mid-turn. Codex waits on the stream, no tool call
/// comes → the watchdog reports silence, records it, and revives the session (`codex resume`),
/// which is told why and sent on its way.
#[test]
fn real_codex_hanging_on_the_model_is_found_silent_and_revived() {
    if !enabled() {
        return;
    }
    real::hanging_model_is_found_silent_and_revived(&CODEX_CLI);
}

/// Scenario 4, second half: six shell calls fail in a row (Codex's PostToolUse says nothing of
/// it; phoenix reads each exit code from the rollout) → the watchdog finds an error cascade and
/// records it as a critical event.
#[test]
fn real_codex_six_failing_shell_calls_are_an_error_cascade() {
    if !enabled() {
        return;
    }
    real::failing_shell_calls_are_an_error_cascade(&CODEX_CLI);
}

/// Scenario 5: `/compact` typed into the real Codex → its PreCompact hook has phoenix save a
/// handoff; with the next prompt Codex runs SessionStart `compact`, and that request carries
/// Codex's own summary and phoenix's compaction block with the handoff.
#[test]
fn real_codex_compaction_saves_a_handoff_that_comes_back() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = openai_server::start(vec![
        exec("echo 'release notes drafted' > notes.txt"),
        Turn::text("Drafted the notes."),
        Turn::text("Carrying on after the compaction."),
    ]);
    let run = start_codex(&fleet, &server, "", "tidy the changelog");
    let state = || state_of(&run.dir);
    support::wait_until(WAIT, "the first turn finished", || {
        state()["status"] == "idle" && run.dir.join("tool_use.jsonl").exists()
    });
    support::submit(&fleet, &run.pane, "/compact", WAIT);
    support::wait_until_explained(
        WAIT,
        "the pre-compact handoff",
        || {
            fleet.run(&["handoff", "list", "cx", "--json"]).json()["handoffs"]
                .clone()
                .as_array()
                .is_some_and(|h| h.iter().any(|h| h["trigger_reason"] == "pre_compact"))
        },
        || fleet.explain("cx", &run.pane),
    );
    support::wait_for_screen(&fleet, &run.pane, "Context compacted", WAIT);
    let handoffs = fleet.run(&["handoff", "list", "cx", "--json"]).json()["handoffs"].clone();
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
        .run(&["handoff", "show", &saved, "--agent", "cx"])
        .status(0)
        .stdout();
    assert!(shown.contains("tidy the changelog"), "{shown}");

    let before = server.turn_requests().len();
    support::submit(&fleet, &run.pane, "go on with the changelog", WAIT);
    let turn_request = || {
        server.turn_requests()[before..]
            .iter()
            .find(|r| r.text().contains("go on with the changelog"))
            .map(|r| r.text())
    };
    support::wait_until_explained(
        WAIT,
        "the request after the compaction",
        || turn_request().is_some(),
        || fleet.explain("cx", &run.pane),
    );
    // SessionStart `compact` runs lazily, with the first prompt after the compaction.
    assert!(
        fleet
            .ops("cx")
            .iter()
            .any(|o| o["event"] == "session_start" && o["source"] == "compact"),
        "{:?}",
        fleet.ops("cx")
    );
    let sent = turn_request().unwrap();
    assert!(
        sent.contains("Another language model started to solve this problem"),
        "Codex's compacted history: {sent}"
    );
    assert!(sent.contains("CONTEXT COMPACTED"), "{sent}");
    assert!(sent.contains(&saved), "the handoff id in {sent}");
    support::wait_for_screen(&fleet, &run.pane, "Carrying on after the compaction.", WAIT);
    assert!(!run.dir.join("hook_errors.jsonl").exists());
}

/// An agent idle for longer than the silence threshold gets a prompt whose answer is slow:
/// its last tool call is from the turn before, and the watchdog must not call the new turn
/// silent.
#[test]
fn real_codex_idle_past_silence_then_a_slow_answer_is_not_silent() {
    if !enabled() {
        return;
    }
    real::idle_past_silence_then_a_slow_answer_is_not_silent(&CODEX_CLI);
}

/// The Responses API answers 404 `model_not_found`: Codex prints "The model `gpt-5` does not
/// exist or you do not have access to it." and waits at its prompt (no hook, the rollout ends
/// the turn with the error). One watchdog pass finds the failed turn, the Clinic diagnoses a
/// model this account cannot use, and the agent goes to safe mode at once (no revival, no
/// restart) with the model named and the fix.
#[test]
fn real_codex_model_not_found_goes_to_safe_mode_naming_the_model() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let not_found = Turn::Error {
        status: 404,
        kind: "model_not_found".into(),
        message: "The model `gpt-5` does not exist or you do not have access to it.".into(),
    };
    let server = openai_server::start(vec![not_found; 12]);
    let s = start_codex(&fleet, &server, "", "summarise the changelog");
    support::wait_for_screen(&fleet, &s.pane, "does not exist", WAIT);
    // A failed turn is unambiguous: the first pass that sees it acts.
    let mut cx = Value::Null;
    support::wait_until(WAIT, "a pass that finds the failed turn", || {
        cx = fleet.run(&["watchdog", "--once", "--json"]).json()["agents"][0].clone();
        cx["verdict"] != "healthy"
    });
    assert_eq!(cx["verdict"], "unhealthy", "{cx}");
    assert_eq!(cx["findings"][0]["check"], "turn_failed", "{cx}");
    assert_eq!(cx["action_taken"], "safe_mode (clinic)", "{cx}");
    let events = fleet
        .run(&["events", "--agent", "cx", "--json"])
        .status(0)
        .stdout();
    assert!(events.contains("model_unavailable"), "{events}");
    let record = read_json(&s.dir.join("restarts.json"));
    let why = record["safe_mode"]["reason"].as_str().unwrap_or("");
    assert!(why.contains("model_unavailable"), "{record}");
    assert!(why.contains("`gpt-5`"), "{record}");
    // The agent's command gives no `--model`: the hint names where the model came from.
    assert!(
        why.contains("Codex's config") && why.contains("`--model`"),
        "{record}"
    );
    let starts = fleet
        .ops("cx")
        .iter()
        .filter(|o| o["event"] == "agent_start")
        .count();
    assert_eq!(starts, 1);
}

/// Issue 15 item 6 with the real Codex: killed in the middle of a shell call whose job left
/// its process group; the job is stopped and recorded before the resume, never acts, and the
/// resumed session is told which command was stopped.
#[test]
fn real_codex_killed_mid_tool_leaves_no_orphan_and_is_told_what_was_stopped() {
    if !enabled() {
        return;
    }
    real::killed_mid_tool(&CODEX_CLI);
}

/// Issue 15 item 7 with the real Codex: its wrapper is killed with Codex still running; the
/// wrapper that replaces it stops that Codex (recorded) before it starts one of its own.
#[test]
fn real_codex_left_by_a_killed_wrapper_is_stopped_before_the_next_start() {
    if !enabled() {
        return;
    }
    real::killed_wrapper(&CODEX_CLI);
}
