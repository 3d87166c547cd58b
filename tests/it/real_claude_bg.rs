//! The real Claude Code's background sessions (`claude --bg`) beside a supervised agent: the
//! agent's model starts one from its shell; the job runs in the agent's workdir, so it runs
//! the agent's phoenix hooks too. Its failure is not the agent's turn failure (no restart, no
//! diagnosis), its session is not the one to resume, its prompt not the task; `status AGENT`
//! lists it. Runs with `PHOENIX_TEST_REAL_CLIS=1`, like real_cli.rs.

use crate::real_cli::{claude_bin, enabled, start_claude};
use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::model_server::{ModelServer, Turn};

/// Claude Code's own daemon, which a `claude --bg` starts on demand and which outlives the
/// test's tmux server: stopped with Claude's own command when the test ends, however it ends.
struct ClaudeDaemon {
    home: PathBuf,
}

impl Drop for ClaudeDaemon {
    fn drop(&mut self) {
        let _ = std::process::Command::new(claude_bin())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .args(["daemon", "stop", "--any"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The job's state.json as Claude wrote it, once there is one.
fn job_state(home: &Path) -> Option<serde_json::Value> {
    let jobs = std::fs::read_dir(home.join(".claude/jobs")).ok()?;
    jobs.flatten()
        .map(|e| e.path().join("state.json"))
        .find_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
}

fn explain(fleet: &support::Fleet, server: &ModelServer) -> String {
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap_or("")
        .to_string();
    format!(
        "--- ops\n{}\n--- job\n{:?}\n--- screen\n{}\n--- requests\n{}",
        fleet
            .ops("cc")
            .iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        job_state(&fleet.path().join("home")),
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .unwrap_or_default(),
        server.message_requests().len()
    )
}

/// The agent's model runs `claude --bg` and waits until the job has had its turn; the job's
/// only request fails ("prompt is too long"), which Claude Code reports through the job's
/// StopFailure hook, the agent's own. The agent goes on untouched: one session, its task, no
/// failed turn; the job's failure is recorded as the job's, and `status cc` shows the job.
#[test]
fn real_claude_background_job_failure_is_not_the_agents_and_status_shows_it() {
    if !enabled() {
        return;
    }
    let version = support::cli_version(
        "claude",
        "@anthropic-ai/claude-code",
        crate::real_cli::CLAUDE_CODE_PINNED,
    );
    // 2.1.197's daemon waits for a claude.ai login (an API key is not handed to its jobs):
    // the job never gets past `starting…`, never asks the model, never runs a hook.
    let job_runs = version != "2.1.197";
    let fleet = support::Fleet::new();
    let home = fleet.path().join("home");
    let _daemon = ClaudeDaemon { home: home.clone() };
    let bin = claude_bin();
    // The shell call returns once the job's turn ended (its state.json left `starting`):
    // the job's request is the script's second turn, the agent's next one its third.
    let launch = format!(
        "'{}' --bg 'fail-bg: index the archive' && for i in $(seq 1 {}); do \
         grep -qs '\"tempo\": \"active\"' \"$HOME\"/.claude/jobs/*/state.json || \
         {{ grep -qs '\"state\"' \"$HOME\"/.claude/jobs/*/state.json && break; }}; \
         sleep 0.2; done; echo launched",
        bin.display(),
        if job_runs { 150 } else { 1 }
    );
    let mut script = vec![Turn::bash(&launch)];
    if job_runs {
        script.push(Turn::prompt_too_long());
    }
    script.push(Turn::text("The background job is on its way."));
    let server = ModelServer::start(script);
    let dir = start_claude(&fleet, &server, "", "start the indexing job");
    let why = || explain(&fleet, &server);
    if !job_runs {
        return stays_starting_and_changes_nothing(&fleet, &dir, &home, &version, why);
    }
    support::wait_until_explained(
        Duration::from_secs(90),
        "the job's failure recorded as the job's",
        || {
            fleet
                .ops("cc")
                .iter()
                .any(|o| o["event"] == "background_job" && o["hook"] == "turn-failed")
        },
        why,
    );
    support::wait_until_explained(
        Duration::from_secs(60),
        "the agent's turn ended",
        || {
            let state = support::real::state_of(&dir);
            state["status"] == "idle"
                && fleet
                    .ops("cc")
                    .iter()
                    .any(|o| o["event"] == "turn_complete")
        },
        why,
    );
    // A wrapper acting on a failed turn does so within a second or two.
    std::thread::sleep(Duration::from_secs(2));
    let ops = fleet.ops("cc");
    let count = |event: &str| ops.iter().filter(|o| o["event"] == event).count();
    assert_eq!(count("turn_failed"), 0, "{}", why());
    assert_eq!(count("failed_turn_checked"), 0, "{}", why());
    assert_eq!(count("agent_start"), 1, "one session throughout: {}", why());
    assert_eq!(count("agent_exit"), 0, "{}", why());
    let job_session = ops
        .iter()
        .find(|o| o["event"] == "background_job" && o["hook"] == "session-start")
        .and_then(|o| o["session_id"].as_str())
        .unwrap_or_else(|| panic!("the job's start: {}", why()))
        .to_string();
    let job_id = &job_session[..8];
    let state = support::real::state_of(&dir);
    assert_ne!(state["session_id"], job_session.as_str(), "{state}");
    assert!(
        ops.iter()
            .filter(|o| o["event"] == "session_start")
            .all(|o| o["session_id"] != job_session.as_str()),
        "{}",
        why()
    );
    assert_eq!(state["current_task"], "start the indexing job", "{state}");
    assert!(state["last_error"].is_null(), "{state}");
    assert!(!dir.join(".turn-failed").exists());

    let status = fleet.run(&["status", "cc", "--json"]).status(0).json();
    let jobs = status["agents"][0]["background_jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{status}");
    assert_eq!(jobs[0]["id"], job_id, "{status}");
    assert_eq!(jobs[0]["session_id"], job_session.as_str(), "{status}");
    assert_eq!(jobs[0]["name"], "fail-bg: index the archive", "{status}");
    assert!(jobs[0]["started"].is_string(), "{status}");
    let written = job_state(&home).unwrap();
    assert_eq!(jobs[0]["state"], written["state"], "{status}");
    assert_eq!(status["agents"][0]["health"], "healthy", "{status}");
    let text = fleet.run(&["status", "cc"]).status(0).stdout();
    assert!(text.contains("Background jobs: 1 job"), "{text}");
    assert!(text.contains(job_id), "{text}");
    assert!(text.contains("ran this agent's hooks"), "{text}");
    eprintln!("claude {version}: the job as status shows it: {}", jobs[0]);
}

/// 2.1.197: the job waits at `starting…` for a login; the agent's turn ends as usual, nothing
/// of the job's reached the agent, and `status` lists no job (none ran the agent's hooks).
fn stays_starting_and_changes_nothing(
    fleet: &support::Fleet,
    dir: &Path,
    home: &Path,
    version: &str,
    why: impl Fn() -> String,
) {
    support::wait_until_explained(
        Duration::from_secs(90),
        "the agent's turn ended",
        || {
            support::real::state_of(dir)["status"] == "idle"
                && fleet
                    .ops("cc")
                    .iter()
                    .any(|o| o["event"] == "turn_complete")
        },
        &why,
    );
    let written = job_state(home).unwrap_or_else(|| panic!("no job: {}", why()));
    assert_eq!(written["tempo"], "active", "{written}");
    let ops = fleet.ops("cc");
    let count = |event: &str| ops.iter().filter(|o| o["event"] == event).count();
    assert_eq!(count("turn_failed"), 0, "{}", why());
    assert_eq!(count("agent_start"), 1, "{}", why());
    assert_eq!(count("background_job"), 0, "{}", why());
    let status = fleet.run(&["status", "cc", "--json"]).status(0).json();
    assert_eq!(
        status["agents"][0]["background_jobs"],
        serde_json::json!([]),
        "{status}"
    );
    let text = fleet.run(&["status", "cc"]).status(0).stdout();
    assert!(text.contains("Background jobs: none"), "{text}");
    eprintln!("claude {version}: the job stays `{}`", written["detail"]);
}

/// The same rule without the real CLI (runs in every `cargo test`): the hooks of a job
/// (`CLAUDE_JOB_DIR` naming the job of the payload's session) leave the agent's session,
/// task, error and markers alone; the agent's own hooks under a `CLAUDE_JOB_DIR` it inherited
/// (another session's job) are still the agent's.
#[test]
fn a_background_jobs_hooks_leave_the_agents_state_alone() {
    use std::io::Write;
    let fleet = support::Fleet::new();
    std::fs::create_dir_all(fleet.path().join("wc")).unwrap();
    fleet.toml(
        "[[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\nenabled = false\n",
    );
    let jobs = fleet.path().join("home/.claude/jobs");
    let job_dir = jobs.join("a4cd397e");
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::write(
        job_dir.join("state.json"),
        serde_json::json!({"state": "blocked", "tempo": "blocked", "intent": "the job's task",
                           "createdAt": "2026-12-02T03:33:58.927Z"})
        .to_string(),
    )
    .unwrap();
    let hook = |event: &str, job: Option<&Path>, payload: serde_json::Value| {
        let mut cmd = fleet.command(&["hook", event, "--agent", "c", "--cli", "claude"]);
        if let Some(job) = job {
            cmd.env("CLAUDE_JOB_DIR", job);
        }
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(payload.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let agent = "4f9ae1e8-331c-4482-ab96-2c3407d4448e";
    let job = "a4cd397e-86cd-4dc0-b365-abc3a3a349f4";
    let p = |session: &str, fields: serde_json::Value| {
        let mut v = serde_json::json!({"session_id": session, "cwd": fleet.path().join("wc")});
        v.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        v
    };
    use serde_json::json;
    // The agent's own session, under an inherited variable naming another session's job.
    hook(
        "session-start",
        Some(&job_dir),
        p(agent, json!({"source": "startup"})),
    );
    hook(
        "prompt",
        Some(&job_dir),
        p(agent, json!({"prompt": "fix the build"})),
    );
    // The job's own hooks.
    let said = hook(
        "session-start",
        Some(&job_dir),
        p(job, json!({"source": "startup"})),
    );
    assert!(
        !said.contains("phoenix"),
        "context injected into the job: {said}"
    );
    hook(
        "prompt",
        Some(&job_dir),
        p(job, json!({"prompt": "the job's task"})),
    );
    hook(
        "turn-failed",
        Some(&job_dir),
        p(
            job,
            json!({"error": "invalid_request", "error_details": "prompt is too long"}),
        ),
    );
    hook(
        "session-end",
        Some(&job_dir),
        p(job, json!({"reason": "other"})),
    );

    let dir = fleet.agent_dir("c");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["session_id"], agent, "{state}");
    assert_eq!(state["current_task"], "fix the build", "{state}");
    assert!(state["last_error"].is_null(), "{state}");
    assert!(!dir.join(".turn-failed").exists(), "the wrapper was told");
    let ops = fleet.ops("c");
    let count = |e: &str| ops.iter().filter(|o| o["event"] == e).count();
    assert_eq!(count("turn_failed"), 0, "{ops:?}");
    assert_eq!(count("session_end"), 0, "{ops:?}");
    assert_eq!(count("session_start"), 1, "{ops:?}");
    let hooks: Vec<&str> = ops
        .iter()
        .filter(|o| o["event"] == "background_job")
        .filter_map(|o| o["hook"].as_str())
        .collect();
    assert_eq!(hooks, ["session-start", "turn-failed", "session-end"]);

    let status = fleet.run(&["status", "c", "--json"]).json();
    let jobs = &status["agents"][0]["background_jobs"];
    assert_eq!(jobs[0]["id"], "a4cd397e", "{status}");
    assert_eq!(jobs[0]["state"], "blocked", "{status}");
    assert_eq!(jobs[0]["name"], "the job's task", "{status}");
    let text = fleet.run(&["status", "c"]).stdout();
    assert!(text.contains("a4cd397e  blocked"), "{text}");
}
