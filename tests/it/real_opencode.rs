//! The real opencode (npm `opencode-ai`), driven by the scripted Anthropic Messages server on
//! loopback through a custom provider (`@ai-sdk/anthropic` with `options.baseURL`, bundled in
//! opencode: nothing fetched for it), running the hooks phoenix installs through its plugin.
//! Installed with npm into `target/real-clis/opencode-VERSION/` on first use. opencode installs
//! `@opencode-ai/plugin` into the workdir's `.opencode/` at first start (npm).
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1`; plain `cargo test` says it skipped the suite.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::Fleet;
use support::model_server::{ModelServer, Turn};
use support::real::state_of;

const OPENCODE: &str = "opencode-ai";
/// The version the suite is pinned to (`PHOENIX_TEST_CLI_VERSIONS` picks another).
pub(crate) const OPENCODE_PINNED: &str = "1.18.33";
/// opencode starts slowly (a 185 MB binary; 60 s to its prompt at a load of 14 on 2 cores).
const WAIT: Duration = Duration::from_secs(300);

fn opencode_bin() -> PathBuf {
    support::npm_cli("opencode", OPENCODE, OPENCODE_PINNED, "opencode")
}

/// The suite runs only when asked for (see `support::opted_in`).
fn enabled() -> bool {
    support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_opencode.rs (the real opencode)",
        "npm and access to the npm registry",
    )
}

/// A HOME whose opencode talks to `server` only: a `scripted` provider on the Anthropic
/// Messages API at the server's address, every tool allowed (no approval dialog).
fn opencode_home(fleet: &Fleet, server: &ModelServer) -> PathBuf {
    let home = fleet.path().join("home");
    std::fs::create_dir_all(home.join(".config/opencode")).unwrap();
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": {
            "npm": "@ai-sdk/anthropic",
            "name": "Scripted",
            "options": {"baseURL": format!("{}/v1", server.base_url()), "apiKey": "scripted-key"},
            "models": {"claude-scripted": {"name": "Claude Scripted"}},
        }},
        "model": "scripted/claude-scripted",
        "small_model": "scripted/claude-scripted",
        "autoupdate": false,
        "share": "disabled",
        "permission": {"bash": "allow", "edit": "allow"},
    });
    std::fs::write(
        home.join(".config/opencode/opencode.json"),
        config.to_string(),
    )
    .unwrap();
    home
}

/// A workdir whose `.opencode/` already holds the `@opencode-ai/plugin` opencode installs
/// there at first start (100 s on this machine, from npm): installed once beside the CLI
/// (`target/real-clis/opencode-VERSION-plugin-deps`), linked into each test's workdir.
fn workdir(fleet: &Fleet, bin: &Path) -> PathBuf {
    let work = fleet.path().join("work");
    std::fs::create_dir_all(work.join(".opencode")).unwrap();
    let cli_dir = bin
        .ancestors()
        .nth(3)
        .expect("target/real-clis/opencode-VERSION");
    let version = cli_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("opencode-")
        .to_string();
    let deps = cli_dir.with_file_name(format!("opencode-{version}-plugin-deps"));
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    {
        let _one_at_a_time = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        if !deps
            .join("node_modules/@opencode-ai/plugin/package.json")
            .exists()
        {
            std::fs::create_dir_all(&deps).unwrap();
            let status = std::process::Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    "--prefix",
                ])
                .arg(&deps)
                .arg(format!("@opencode-ai/plugin@{version}"))
                .status()
                .unwrap();
            assert!(
                status.success(),
                "npm install @opencode-ai/plugin@{version} failed"
            );
        }
    }
    std::os::unix::fs::symlink(
        deps.join("node_modules"),
        work.join(".opencode/node_modules"),
    )
    .unwrap();
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(deps.join(file), work.join(".opencode").join(file)).unwrap();
    }
    std::fs::canonicalize(work).unwrap()
}

/// An agent that runs the real opencode TUI in `work/`, with fast restarts.
fn start(fleet: &Fleet, server: &ModelServer, prompt: &str) -> (PathBuf, String, PathBuf, u32) {
    let bin = opencode_bin();
    workdir(fleet, &bin);
    let home = opencode_home(fleet, server);
    // At each start opencode checks `.opencode/`'s packages with npm; in a fresh HOME that
    // fetches 31 MB into `~/.npm` first (about 30 s of a start here). One npm cache beside
    // the CLI serves every test's HOME.
    let cli_dir = bin
        .ancestors()
        .nth(3)
        .expect("target/real-clis/opencode-VERSION");
    let npm_cache = cli_dir.with_file_name(format!(
        "{}-npm-cache",
        cli_dir.file_name().unwrap().to_string_lossy()
    ));
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"300s\"\n\n\
         [[agent]]\nname = \"oc\"\ncli = \"opencode\"\ncommand = \"'{}'\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\", npm_config_cache = \"{}\", npm_config_prefer_offline = \"true\", OPENCODE_DISABLE_MODELS_FETCH = \"1\", OPENCODE_DISABLE_AUTOUPDATE = \"1\" }}\n",
        bin.display(),
        home.display(),
        npm_cache.display(),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["oc"]);
    let pane = fleet.agent_status("oc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let screen = || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .unwrap_or_default()
    };
    support::wait_until_explained(
        WAIT,
        "opencode's prompt",
        || screen().contains("Ask anything"),
        || {
            let log = fleet.path().join("home/.local/share/opencode/log");
            let logs: Vec<String> = std::fs::read_dir(log)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect();
            format!(
                "{}\n--- opencode logs\n{}",
                fleet.explain("oc", &pane),
                logs.join("\n")
            )
        },
    );
    support::submit(fleet, &pane, prompt, WAIT);
    (fleet.agent_dir("oc"), pane, home, pids[0])
}

/// The requests of scripted turns (those that offer tools; titles and the like do not).
fn turns(server: &ModelServer) -> Vec<support::scripted::Request> {
    server
        .message_requests()
        .into_iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `phoenix apply` installs the hooks, the wrapper writes the plugin that runs them, opencode
/// runs a shell call that succeeds and one that fails (both in tool_use.jsonl, the failure by
/// its exit code), its usage is read into the ledger; then kill -9 mid-turn → the wrapper
/// resumes the same session (`--session <id>`) and phoenix's continue prompt reaches the model.
/// The killed TUI's last frame (its footer included) is gone before the resume (issue 32): the
/// continue prompt waits for the footer the resumed opencode draws, and is taken.
#[test]
fn real_opencode_runs_phoenix_hooks_and_a_killed_session_is_resumed() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![
        Turn::bash("echo step-one > one.txt"),
        Turn::bash("ls /nonexistent-phoenix-dir"),
        Turn::Hang,
    ]);
    let (dir, pane, home, pid) = start(&fleet, &server, "refactor the parser module");
    let work = fleet.path().join("work");
    let hooks = std::fs::read_to_string(work.join(".opencode/phoenix-hooks.json")).unwrap();
    assert!(hooks.contains("hook session-start --agent oc"), "{hooks}");
    // The plugin runs phoenix's binary with an argv, never a shell (issue 32).
    let plugin = std::fs::read_to_string(work.join(".opencode/plugins/phoenix.js")).unwrap();
    assert!(!plugin.contains("/bin/sh"), "{plugin}");
    assert!(plugin.contains("\"--agent\",\n"), "{plugin}");
    support::wait_until_explained(
        WAIT,
        "two shell calls recorded and the model call after them under way",
        || {
            work.join("one.txt").exists()
                && turns(&server).len() == 3
                && support::read_jsonl(&dir.join("tool_use.jsonl")).len() == 2
        },
        || fleet.explain("oc", &pane),
    );
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert!(tools.iter().all(|t| t["tool"] == "bash"), "{tools:?}");
    assert_eq!(tools[0]["ok"], true, "{tools:?}");
    assert_eq!(tools[1]["ok"], false, "{tools:?}");
    assert!(
        tools[1]["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("exit code 2"),
        "{tools:?}"
    );
    let state = read_json(&dir.join("state.json"));
    assert_eq!(state["status"], "working", "{state}");
    let id = state["session_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("ses_"), "{state}");
    assert_eq!(state["current_task"], "refactor the parser module");
    let ops = fleet.ops("oc");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "session_start" && o["source"] == "startup"),
        "{ops:?}"
    );
    // The plugin's record of the session is its transcript, and its usage is counted.
    let record = home.join(format!(".local/share/opencode/phoenix/{id}.jsonl"));
    assert_eq!(
        state["transcript_path"].as_str().map(PathBuf::from),
        Some(record.clone()),
        "{state}"
    );
    let usage = fleet.run(&["usage", "oc", "--json"]).status(0).json();
    let counted = &usage["agents"][0];
    assert!(
        counted["tokens"]["total"].as_u64().unwrap_or(0) >= 30,
        "{usage}"
    );
    let models = counted["models"].as_array().unwrap();
    assert!(
        models.iter().any(|m| m["model"] == "claude-scripted"),
        "{usage}"
    );

    // kill -9 while the model call hangs: the same session is resumed.
    server.push([Turn::text("Picked up where I stopped.")]);
    support::kill9(pid);
    // The resumed opencode takes as long to start as the first (minutes under load).
    support::wait_until_explained(
        WAIT,
        "the continue prompt typed into the resumed opencode",
        || {
            fleet.ops("oc").iter().any(|o| {
                o["event"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("continue_prompt"))
            })
        },
        || fleet.explain("oc", &pane),
    );
    let sent = support::real::RealCli::<support::model_server::Messages> {
        agent: "oc",
        serve: ModelServer::start,
        start: |_, _, _, _| unreachable!(),
        submit: |_, _, _| unreachable!(),
        shell: Turn::bash,
        turns,
        failed_shell_call: |_| true,
        outlives_terminal: false,
    }
    .sent_with_the_continue_prompt(&fleet, &server, &pane);
    assert!(sent.contains("refactor the parser module"), "{sent}");
    let ops = fleet.ops("oc");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        &argv[argv.len() - 2..],
        ["--session", id.as_str()],
        "{start}"
    );
    support::wait_for_screen(&fleet, &pane, "Picked up where I stopped.", WAIT);
    support::wait_until_explained(
        WAIT,
        "the resumed session's start hook",
        || {
            fleet.ops("oc").iter().any(|o| {
                o["event"] == "session_start" && o["source"] == "resume" && o["session_id"] == id
            })
        },
        || fleet.explain("oc", &pane),
    );
    assert_eq!(state_of(&dir)["session_id"], id.as_str());
    let sent_op = fleet
        .ops("oc")
        .into_iter()
        .find(|o| o["event"] == "continue_prompt_sent")
        .unwrap();
    assert_eq!(sent_op["ready_sign"], true, "{sent_op}");
    assert!(!dir.join("hook_errors.jsonl").exists());
}

/// A turn that ends in an API error opencode does not recover from (a 400 other than a
/// prompt too long): opencode shows it and waits; the stop hook reads it from the plugin's
/// record and the turn is recorded failed.
#[test]
fn real_opencode_failed_turn_is_recorded_from_its_session_record() {
    if !enabled() {
        return;
    }
    let fleet = Fleet::new();
    let server = ModelServer::start(vec![
        Turn::Error {
            status: 400,
            kind: "invalid_request_error".into(),
            message: "messages.0: scripted bad request".into(),
        },
        Turn::text("Fine again."),
    ]);
    let (_dir, pane, _home, _pid) = start(&fleet, &server, "migrate the billing tables");
    support::wait_until_explained(
        WAIT,
        "the failed turn recorded by the stop hook",
        || fleet.ops("oc").iter().any(|o| o["event"] == "turn_failed"),
        || fleet.explain("oc", &pane),
    );
    let ops = fleet.ops("oc");
    let failed = ops.iter().find(|o| o["event"] == "turn_failed").unwrap();
    assert!(
        failed.to_string().contains("scripted bad request"),
        "{failed}"
    );
}
