//! `phoenix hook` with the payloads Claude Code 2.1.332 sends from inside a subagent
//! (`agent_id`), the prompts it submits itself (`<task-notification>`), a forked session's
//! start and its new waits for a person, driven through the real binary.

use crate::support;

use std::io::Write;
use std::process::Stdio;

use serde_json::{Value, json};
use support::{Fleet, read_jsonl};

fn claude_agent(fleet: &Fleet) {
    std::fs::create_dir_all(fleet.path().join("wc")).unwrap();
    fleet.toml(
        "[[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\nenabled = false\n",
    );
}

/// Run `phoenix hook <event>` for agent `c` with `payload`; it always exits 0.
fn hook(fleet: &Fleet, event: &str, payload: Value) {
    let mut child = fleet
        .command(&["hook", event, "--agent", "c", "--cli", "claude"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn phoenix hook");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn state(fleet: &Fleet) -> Value {
    let text = std::fs::read_to_string(fleet.agent_dir("c").join("state.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn count(fleet: &Fleet, event: &str) -> usize {
    fleet
        .ops("c")
        .iter()
        .filter(|o| o["event"] == event)
        .count()
}

/// A subagent's fields, as Claude Code adds them to every hook fired inside one.
fn in_subagent(mut payload: Value) -> Value {
    payload["agent_id"] = json!("a3f9c2e1b7d04a66");
    payload["agent_type"] = json!("general-purpose");
    payload
}

#[test]
fn a_subagents_hooks_are_the_agents_work_never_the_main_turns_end() {
    let fleet = Fleet::new();
    claude_agent(&fleet);
    let session = json!({"session_id": "s1", "transcript_path": "/nonexistent/s1.jsonl"});
    let with = |fields: Value| {
        let mut p = session.clone();
        p.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        p
    };
    hook(
        &fleet,
        "prompt",
        with(json!({"hook_event_name": "UserPromptSubmit", "prompt": "fix the build"})),
    );
    hook(
        &fleet,
        "pre-tool",
        with(json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                    "tool_input": {"command": "sleep 4; echo after-agent > after.txt"}})),
    );
    let dir = fleet.agent_dir("c");
    let in_flight = || std::fs::read_to_string(dir.join("in_flight.json")).unwrap_or_default();
    let main_call = in_flight();
    assert!(main_call.contains("after-agent"), "{main_call}");

    // The subagent's own calls run meanwhile: the main thread's call stays the one in flight.
    hook(
        &fleet,
        "pre-tool",
        in_subagent(with(
            json!({"hook_event_name": "PreToolUse", "tool_name": "Glob",
                                "tool_input": {"pattern": "**/*.rs"}}),
        )),
    );
    hook(
        &fleet,
        "heartbeat",
        in_subagent(with(
            json!({"hook_event_name": "PostToolUse", "tool_name": "Glob",
                                "tool_input": {"pattern": "**/*.rs"}, "tool_response": {}}),
        )),
    );
    hook(
        &fleet,
        "tool-error",
        in_subagent(with(
            json!({"hook_event_name": "PostToolUseFailure", "tool_name": "Read",
                                "error": "File does not exist.", "is_interrupt": false}),
        )),
    );
    assert_eq!(in_flight(), main_call);
    let tools = read_jsonl(&dir.join("tool_use.jsonl"));
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert!(
        tools.iter().all(|t| t["agent_id"] == "a3f9c2e1b7d04a66"),
        "{tools:?}"
    );
    assert_eq!(tools[1]["ok"], false);
    let s = state(&fleet);
    assert_eq!(s["status"], "working");
    assert!(s.get("consecutive_errors").is_none(), "{s}");
    assert!(s.get("last_error").is_none(), "{s}");

    // The subagent's request is too long: the subagent ends, the main turn goes on.
    hook(
        &fleet,
        "turn-failed",
        in_subagent(with(
            json!({"hook_event_name": "StopFailure", "error": "invalid_request",
            "error_details": "prompt is too long: 210000 tokens > 200000 maximum",
            "last_assistant_message": "Prompt is too long"}),
        )),
    );
    let s = state(&fleet);
    assert_eq!(s["status"], "working", "{s}");
    assert!(s.get("last_error").is_none(), "{s}");
    assert!(
        !dir.join(".turn-failed").exists(),
        "the wrapper is not told"
    );
    assert_eq!(count(&fleet, "turn_failed"), 0);
    let failed = fleet
        .ops("c")
        .into_iter()
        .find(|o| o["event"] == "subagent_failed")
        .expect("a subagent_failed op");
    assert_eq!(failed["agent_type"], "general-purpose");
    assert!(
        failed["details"]
            .as_str()
            .unwrap()
            .contains("prompt is too long")
    );
    // A subagent's Stop, compaction, prompt or session end is not the main thread's either.
    for (event, name) in [
        ("stop", "Stop"),
        ("pre-compact", "PreCompact"),
        ("prompt", "UserPromptSubmit"),
        ("session-end", "SessionEnd"),
    ] {
        hook(
            &fleet,
            event,
            in_subagent(with(
                json!({"hook_event_name": name, "prompt": "list the files", "trigger": "auto",
                             "reason": "other"}),
            )),
        );
    }
    let s = state(&fleet);
    assert_eq!(s["status"], "working", "{s}");
    assert_eq!(s["current_task"], "fix the build");
    assert!(s.get("compactions").is_none(), "{s}");
    assert_eq!(count(&fleet, "turn_complete"), 0);
    assert_eq!(count(&fleet, "session_end"), 0);
    assert_eq!(count(&fleet, "pre_compact"), 0);

    // The background agent's result comes back as a prompt Claude Code submits itself: a turn
    // of the same task.
    hook(
        &fleet,
        "prompt",
        with(json!({"hook_event_name": "UserPromptSubmit", "prompt":
            "<task-notification>\n<task-id>a3f9c2e1b7d04a66</task-id>\n<status>failed</status>\n\
             <summary>Agent \"scripted subagent\" failed: prompt is too long</summary>\n</task-notification>"})),
    );
    assert_eq!(state(&fleet)["current_task"], "fix the build");

    // The main thread's own failure still is one.
    hook(
        &fleet,
        "turn-failed",
        with(
            json!({"hook_event_name": "StopFailure", "error": "invalid_request",
                    "error_details": "prompt is too long"}),
        ),
    );
    assert_eq!(state(&fleet)["status"], "failed");
    assert!(dir.join(".turn-failed").exists());
    assert_eq!(count(&fleet, "turn_failed"), 1);
}

#[test]
fn a_forked_session_is_the_session_and_keeps_its_conversation() {
    let fleet = Fleet::new();
    claude_agent(&fleet);
    hook(
        &fleet,
        "session-start",
        json!({"hook_event_name": "SessionStart", "source": "startup", "session_id": "s1",
               "cwd": fleet.path().join("wc")}),
    );
    hook(
        &fleet,
        "session-start",
        json!({"hook_event_name": "SessionStart", "source": "fork", "session_id": "s2",
               "cwd": fleet.path().join("wc")}),
    );
    let s = state(&fleet);
    assert_eq!(s["session_id"], "s2", "{s}");
    assert_eq!(s["session_source"], "fork", "{s}");
    let start = fleet
        .ops("c")
        .into_iter()
        .rfind(|o| o["event"] == "session_start")
        .unwrap();
    assert_eq!(start["source"], "fork", "{start}");
    // The matcher names the source, so Claude Code runs the hook for a fork.
    let shown = fleet
        .run(&["hooks", "show", "--agent", "c"])
        .status(0)
        .stdout();
    assert!(
        shown.contains("startup|resume|clear|compact|fork"),
        "{shown}"
    );
}

#[test]
fn claude_codes_new_waits_for_a_person_raise_needs_input() {
    let fleet = Fleet::new();
    claude_agent(&fleet);
    let shown = fleet
        .run(&["hooks", "show", "--agent", "c"])
        .status(0)
        .stdout();
    for kind in [
        "elicitation_url_dialog",
        "worker_permission_prompt",
        "agent_needs_input",
    ] {
        assert!(shown.contains(kind), "the matcher names {kind}: {shown}");
        hook(
            &fleet,
            "notification",
            json!({"hook_event_name": "Notification", "notification_type": kind,
                   "message": "Claude needs your input", "session_id": "s1"}),
        );
        assert_eq!(state(&fleet)["needs_input"]["reason"], kind);
        // Anything the agent does next ends the wait.
        hook(
            &fleet,
            "prompt",
            json!({"hook_event_name": "UserPromptSubmit", "prompt": "go on", "session_id": "s1"}),
        );
        assert!(state(&fleet).get("needs_input").is_none());
    }
    assert_eq!(count(&fleet, "needs_input"), 3);
    // A notice that asks nothing.
    hook(
        &fleet,
        "notification",
        json!({"hook_event_name": "Notification", "notification_type": "agent_completed",
               "message": "Agent finished", "session_id": "s1"}),
    );
    assert!(state(&fleet).get("needs_input").is_none());
}
