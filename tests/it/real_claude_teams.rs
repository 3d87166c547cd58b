//! The real Claude Code's agent teams in tmux mode beside a supervised agent: the agent's
//! model spawns a teammate (the Agent tool with a `name`, `teammateMode: "tmux"`), Claude Code
//! splits the agent's own window and starts a Claude Code of its own in the new pane, in the
//! agent's workdir, running the agent's phoenix hooks. The teammate pane is neither the agent
//! nor an undeclared agent; whatever phoenix types, reads, taps or kills is the agent's pane;
//! the teammate's session, turn and prompt are not the agent's; a kill -9 of the lead resumes
//! the lead's session. Runs with `PHOENIX_TEST_REAL_CLIS=1`, like real_cli.rs; both pinned
//! versions (2.1.197 and 2.1.332) have tmux teammates.

use crate::real_cli::{CLAUDE_CODE_PINNED, claude_agent, claude_bin, enabled, prepared_home};
use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Turn};

/// The words only the teammate's prompt holds: its requests are told from the lead's by them.
const TEAMMATE_TASK: &str = "TEAMMATE-7F3 write teammate.txt";
const KEY: &str = "sk-ant-test-0123456789abcdefghijklmnop";
const WAIT: Duration = Duration::from_secs(90);

/// Is this a request of the teammate: one of its user messages (not a tool result) is the
/// task the lead gave it. The lead's own requests hold it only in its Agent tool call.
fn is_teammate_request(body: &Value) -> bool {
    let Some(messages) = body["messages"].as_array() else {
        return false;
    };
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .any(|m| match &m["content"] {
            Value::String(s) => s.contains(TEAMMATE_TASK),
            Value::Array(blocks) => blocks.iter().any(|b| {
                b["type"] == "text"
                    && b["text"]
                        .as_str()
                        .is_some_and(|t| t.contains(TEAMMATE_TASK))
            }),
            _ => false,
        })
}

/// A pane's format variable.
fn pane_var(fleet: &support::Fleet, pane: &str, var: &str) -> String {
    fleet
        .tmux(&["display-message", "-p", "-t", pane, var])
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The panes of `pane`'s window other than `pane`.
fn others_in_window(fleet: &support::Fleet, pane: &str) -> Vec<String> {
    fleet
        .tmux(&["list-panes", "-t", pane, "-F", "#{pane_id}"])
        .unwrap_or_default()
        .lines()
        .filter(|p| *p != pane)
        .map(str::to_string)
        .collect()
}

fn explain(fleet: &support::Fleet, server: &ModelServer) -> String {
    let panes = fleet
        .tmux(&["list-panes", "-a", "-F", "#{pane_id} #{window_id} active=#{pane_active} pipe=#{pane_pipe} dead=#{pane_dead} #{pane_current_command}"])
        .unwrap_or_default();
    let mut screens = String::new();
    for line in panes.lines() {
        let id = line.split(' ').next().unwrap_or("");
        screens += &format!(
            "--- pane {id}\n{}\n",
            fleet
                .tmux(&["capture-pane", "-p", "-t", id])
                .unwrap_or_default()
        );
    }
    let requests: Vec<String> = server
        .message_requests()
        .iter()
        .map(|r| {
            let last = r.body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .map(|m| m.to_string())
                .unwrap_or_default();
            format!(
                "teammate={} last={}",
                is_teammate_request(&r.body),
                last.chars().take(300).collect::<String>()
            )
        })
        .collect();
    let dir = fleet.agent_dir("cc");
    format!(
        "--- panes\n{panes}{screens}--- ops\n{}\n--- hook errors\n{}\n--- state\n{}\n--- requests\n{}",
        fleet
            .ops("cc")
            .iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        std::fs::read_to_string(dir.join("hook_errors.jsonl")).unwrap_or_default(),
        support::real::state_of(&dir),
        requests.join("\n")
    )
}

/// The lead's model spawns a teammate in tmux mode; the teammate runs a shell command and
/// ends its turn. What a person would notice is checked in order: the teammate's hooks left
/// the agent's session, task and turn alone; `plan` sees nothing to do and `apply --prune`
/// leaves the pane; a message sent while the teammate's pane is the active one reaches the
/// lead; kill -9 of the lead resumes the lead's own session, the teammate pane untouched.
#[test]
fn real_claude_teammate_pane_is_neither_the_agent_nor_a_stranger() {
    if !enabled() {
        return;
    }
    let version = support::cli_version("claude", "@anthropic-ai/claude-code", CLAUDE_CODE_PINNED);
    let fleet = support::Fleet::new();
    let server = ModelServer::start_with_aside(
        vec![
            Turn::ToolUse {
                name: "Agent".into(),
                input: json!({"description": "scripted teammate", "prompt": TEAMMATE_TASK,
                              "name": "helper", "subagent_type": "general-purpose"}),
            },
            Turn::text("The helper is on it."),
        ],
        vec![
            Turn::bash("echo from-teammate > teammate.txt"),
            Turn::text("Teammate done."),
        ],
        is_teammate_request,
    );
    let work = fleet.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let home = prepared_home(fleet.path(), &work, KEY);
    // The user's setting (2.1.197 and 2.1.332 read `teammateMode` from settings.json).
    std::fs::write(
        home.join(".claude/settings.json"),
        r#"{"skipDangerousModePermissionPrompt": true, "teammateMode": "tmux"}"#,
    )
    .unwrap();
    let agent = claude_agent("cc", &claude_bin(), &home, &server, KEY).replace(
        "IS_SANDBOX = \"1\",",
        "IS_SANDBOX = \"1\", CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS = \"1\",",
    );
    assert!(agent.contains("AGENT_TEAMS"), "{agent}");
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n{agent}"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let lead_pid = fleet.wait_running(&["cc"])[0];
    // A teammate's pane starts with the tmux server's environment (Claude Code passes on
    // ANTHROPIC_BASE_URL, not the key): a user's server has the key from their shell.
    for (k, v) in [("ANTHROPIC_API_KEY", KEY), ("IS_SANDBOX", "1")] {
        fleet.tmux(&["set-environment", "-g", k, v]).unwrap();
    }
    let lead = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    crate::real_cli::type_prompt(&fleet, &lead, "start a helper");
    let why = || explain(&fleet, &server);

    support::wait_until_explained(
        WAIT,
        "the teammate's shell call",
        || work.join("teammate.txt").exists(),
        why,
    );
    let teammate = others_in_window(&fleet, &lead);
    assert_eq!(teammate.len(), 1, "{}", why());
    let teammate = teammate[0].clone();
    // The teammate's turn ended (its Stop hook ran) and the lead has had its turns.
    support::wait_until_explained(
        WAIT,
        "the teammate's session and the lead's turn ended",
        || {
            support::real::state_of(&fleet.agent_dir("cc"))["status"] == "idle"
                && server
                    .message_requests()
                    .iter()
                    .any(|r| is_teammate_request(&r.body) && r.text().contains("tool_result"))
        },
        why,
    );
    std::thread::sleep(Duration::from_secs(3));
    let dir = fleet.agent_dir("cc");
    let ops = fleet.ops("cc");
    let lead_session = ops
        .iter()
        .find(|o| o["event"] == "session_start")
        .and_then(|o| o["session_id"].as_str())
        .unwrap_or_else(|| panic!("no session start: {}", why()))
        .to_string();
    // (3) The teammate's hooks are not the agent's session, turn or task.
    let state = support::real::state_of(&dir);
    assert_eq!(state["session_id"], lead_session.as_str(), "{state}");
    assert!(
        state["transcript_path"]
            .as_str()
            .is_some_and(|t| t.contains(&lead_session)),
        "the teammate's transcript became the agent's: {state}"
    );
    let mate_start = ops
        .iter()
        .find(|o| o["event"] == "teammate" && o["hook"] == "session-start")
        .unwrap_or_else(|| panic!("the teammate's start: {}", why()))
        .clone();
    let mate_session = mate_start["session_id"].as_str().unwrap().to_string();
    assert_ne!(mate_session, lead_session, "{}", why());
    assert_eq!(mate_start["name"], "helper", "{mate_start}");
    assert_eq!(
        mate_start["lead_session"],
        lead_session.as_str(),
        "{mate_start}"
    );
    assert!(
        mate_start["agent_id"]
            .as_str()
            .is_some_and(|a| a.starts_with("helper@")),
        "{mate_start}"
    );

    assert_eq!(state["current_task"], "start a helper", "{state}");
    assert!(state["last_error"].is_null(), "{state}");
    let count = |ops: &[Value], event: &str| ops.iter().filter(|o| o["event"] == event).count();
    assert_eq!(count(&ops, "session_start"), 1, "{}", why());
    assert_eq!(count(&ops, "turn_failed"), 0, "{}", why());
    assert_eq!(count(&ops, "agent_start"), 1, "{}", why());
    assert!(
        ops.iter()
            .filter(|o| o["event"] == "turn_complete")
            .all(|o| o["session_id"] == lead_session.as_str()),
        "the teammate's Stop ended the agent's turn: {}",
        why()
    );
    // Its work is seen as the agent's work, marked as the teammate's.
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert!(
        tools.iter().any(|t| t["tool"] == "Bash"
            && t["agent_id"] == mate_start["agent_id"]
            && t["session_id"] == mate_session.as_str()),
        "{tools:?}"
    );

    // (1) Not an undeclared pane, no drift, nothing missing; `apply --prune` leaves it.
    assert_eq!(
        pane_var(&fleet, &teammate, "#{window_id}"),
        pane_var(&fleet, &lead, "#{window_id}")
    );
    let plan = fleet.run(&["plan"]);
    plan.status(0);
    let status = fleet.status();
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["pane"], lead.as_str(), "{status:?}");
    assert_eq!(status[0]["state"], "running", "{status:?}");
    fleet.run(&["apply", "--yes", "--prune"]).status(0);
    assert_eq!(
        pane_var(&fleet, &teammate, "#{pane_dead}"),
        "0",
        "{}",
        why()
    );

    // (2) phoenix's tap is on the lead's pane only, and what it types reaches the lead's pane
    // even while the teammate's is the active one.
    assert_eq!(pane_var(&fleet, &lead, "#{pane_pipe}"), "1", "{}", why());
    assert_eq!(
        pane_var(&fleet, &teammate, "#{pane_pipe}"),
        "0",
        "{}",
        why()
    );
    fleet.tmux(&["select-pane", "-t", &teammate]).unwrap();
    assert_eq!(pane_var(&fleet, &teammate, "#{pane_active}"), "1");
    let teammate_requests = || {
        server
            .message_requests()
            .iter()
            .filter(|r| is_teammate_request(&r.body))
            .count()
    };
    let before = teammate_requests();
    fleet
        .run(&["send", "cc", "lead-only-note", "--from", "ci"])
        .status(0);
    support::wait_until_explained(
        WAIT,
        "the message in the lead's model request",
        || {
            server
                .message_requests()
                .iter()
                .any(|r| !is_teammate_request(&r.body) && r.text().contains("lead-only-note"))
        },
        why,
    );
    support::wait_until_explained(
        WAIT,
        "the lead's turn on the message ended",
        || support::real::state_of(&dir)["status"] == "idle",
        why,
    );
    assert!(
        !server
            .message_requests()
            .iter()
            .any(|r| is_teammate_request(&r.body) && r.text().contains("lead-only-note")),
        "typed into the teammate: {}",
        why()
    );
    assert!(
        !fleet
            .tmux(&["capture-pane", "-p", "-t", &teammate])
            .unwrap_or_default()
            .contains("lead-only-note"),
        "{}",
        why()
    );
    assert_eq!(teammate_requests(), before, "{}", why());

    // (4) kill -9 of the lead: the wrapper resumes the lead's own session in its pane; the
    // teammate's pane (its Claude Code still running) does not pass for the agent.
    let transcript = support::real::state_of(&dir)["transcript_path"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_until(WAIT, "the lead's turn in its transcript", || {
        std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("lead-only-note"))
    });
    support::kill9(lead_pid);
    support::wait_until_explained(
        WAIT,
        "the lead resumed",
        || {
            fleet.ops("cc").iter().any(|o| {
                o["event"] == "session_start"
                    && o["source"] == "resume"
                    && o["session_id"] == lead_session.as_str()
            })
        },
        why,
    );
    let ops = fleet.ops("cc");
    let start = ops
        .iter()
        .rfind(|o| o["event"] == "agent_start")
        .unwrap()
        .clone();
    assert_eq!(start["mode"], "resume", "{}", why());
    let argv: Vec<&str> = start["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        argv.windows(2)
            .any(|w| w == ["--resume", lead_session.as_str()]),
        "{argv:?}"
    );
    let resumed = fleet.wait_running(&["cc"])[0];
    assert_ne!(resumed, lead_pid);
    let status = fleet.agent_status("cc");
    assert_eq!(status["pane"], lead.as_str(), "{status}");
    assert_eq!(
        pane_var(&fleet, &teammate, "#{pane_dead}"),
        "0",
        "{}",
        why()
    );
    assert_eq!(
        support::real::state_of(&dir)["session_id"],
        lead_session.as_str()
    );
    fleet.run(&["plan"]).status(0);

    // A restart replaces the lead in its own pane (`respawn-pane -k` of that pane only).
    fleet.run(&["restart", "cc"]).status(0);
    support::wait_until_explained(
        WAIT,
        "the lead restarted",
        || {
            fleet
                .ops("cc")
                .iter()
                .filter(|o| o["event"] == "agent_start")
                .count()
                == 3
                && fleet.agent_status("cc")["state"] == "running"
        },
        why,
    );
    assert_eq!(fleet.agent_status("cc")["pane"], lead.as_str());
    assert_eq!(
        pane_var(&fleet, &teammate, "#{pane_dead}"),
        "0",
        "{}",
        why()
    );
    assert_eq!(
        pane_var(&fleet, &teammate, "#{pane_pipe}"),
        "0",
        "{}",
        why()
    );
    eprintln!(
        "claude {version}: teammate {} in pane {teammate} beside the lead's {lead}",
        mate_start["agent_id"]
    );
}

/// The same rule without the real CLI (runs in every `cargo test`): hooks run by a process
/// started with a teammate's flags (`--agent-id`, `--team-name`, as Claude Code starts a
/// teammate's CLI) leave the agent's session, transcript, task, turn and markers alone, and
/// are recorded as the teammate's; the agent's own hooks still count.
#[test]
fn a_teammates_hooks_leave_the_agents_state_alone() {
    use std::io::Write;
    let fleet = support::Fleet::new();
    std::fs::create_dir_all(fleet.path().join("wc")).unwrap();
    fleet.toml(
        "[[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\nenabled = false\n",
    );
    let lead = "4f9ae1e8-331c-4482-ab96-2c3407d4448e";
    let mate = "36e8ec9c-9779-42c4-9d7b-0ffe8922c3fe";
    // `as_teammate`: the hook runs under a shell whose command line is a teammate's, as
    // phoenix's hook runs under the teammate's Claude Code.
    let hook = |event: &str, as_teammate: bool, payload: Value| {
        let phoenix = fleet.command(&["hook", event, "--agent", "c", "--cli", "claude"]);
        let mut cmd = if as_teammate {
            let mut sh = std::process::Command::new("sh");
            sh.env_clear()
                .envs(phoenix.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .current_dir(fleet.path())
                .args(["-c", "shift 8; \"$@\"; true", "claude"])
                .args(["--agent-id", "helper@session-3f", "--agent-name", "helper"])
                .args(["--team-name", "session-3f", "--parent-session-id", lead])
                .arg(phoenix.get_program())
                .args(phoenix.get_args());
            sh
        } else {
            phoenix
        };
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
    let wc = fleet.path().join("wc");
    let p = |session: &str, fields: Value| {
        let mut v = json!({"session_id": session, "cwd": wc,
                           "transcript_path": format!("/nonexistent/{session}.jsonl")});
        v.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        v
    };
    hook(
        "session-start",
        false,
        p(lead, json!({"source": "startup"})),
    );
    hook("prompt", false, p(lead, json!({"prompt": "fix the build"})));
    // The teammate's own hooks: its session, prompt, tool call, turn end and failure.
    let said = hook(
        "session-start",
        true,
        p(
            mate,
            json!({"source": "startup", "agent_type": "general-purpose"}),
        ),
    );
    assert!(
        !said.contains("phoenix"),
        "context injected into the teammate: {said}"
    );
    hook(
        "prompt",
        true,
        p(mate, json!({"prompt": "the teammate's task"})),
    );
    hook(
        "heartbeat",
        true,
        p(
            mate,
            json!({"tool_name": "Bash", "tool_input": {"command": "true"},
                   "tool_response": {"stdout": "", "stderr": "", "interrupted": false}}),
        ),
    );
    hook(
        "stop",
        true,
        p(mate, json!({"last_assistant_message": "Teammate done."})),
    );
    hook(
        "turn-failed",
        true,
        p(
            mate,
            json!({"error": "invalid_request", "error_details": "prompt is too long"}),
        ),
    );
    hook(
        "notification",
        true,
        p(
            mate,
            json!({"notification_type": "idle_prompt", "message": "Claude is waiting for your input"}),
        ),
    );
    hook("session-end", true, p(mate, json!({"reason": "other"})));

    let dir = fleet.agent_dir("c");
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["session_id"], lead, "{state}");
    assert_eq!(
        state["transcript_path"],
        format!("/nonexistent/{lead}.jsonl"),
        "{state}"
    );
    assert_eq!(state["current_task"], "fix the build", "{state}");
    assert_eq!(
        state["status"], "working",
        "the teammate ended the turn: {state}"
    );
    assert!(state["last_error"].is_null(), "{state}");
    assert!(state["needs_input"].is_null(), "{state}");
    assert!(!dir.join(".turn-failed").exists(), "the wrapper was told");
    let ops = fleet.ops("c");
    let count = |e: &str| ops.iter().filter(|o| o["event"] == e).count();
    assert_eq!(count("turn_failed"), 0, "{ops:?}");
    assert_eq!(count("turn_complete"), 0, "{ops:?}");
    assert_eq!(count("session_end"), 0, "{ops:?}");
    assert_eq!(count("session_start"), 1, "{ops:?}");
    assert_eq!(count("prompt"), 1, "{ops:?}");
    let mate_ops: Vec<&Value> = ops.iter().filter(|o| o["event"] == "teammate").collect();
    let hooks: Vec<&str> = mate_ops.iter().filter_map(|o| o["hook"].as_str()).collect();
    assert_eq!(hooks, ["session-start", "turn-failed", "session-end"]);
    assert_eq!(mate_ops[0]["agent_id"], "helper@session-3f");
    assert_eq!(mate_ops[0]["lead_session"], lead);
    assert_eq!(mate_ops[1]["details"], "prompt is too long");
    let tools = support::read_jsonl(&dir.join("tool_use.jsonl"));
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["agent_id"], "helper@session-3f", "{tools:?}");
    assert!(!Path::new(&dir.join("in_flight.json")).exists());
}
