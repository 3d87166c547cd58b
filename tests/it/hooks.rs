//! `phoenix hook`, the state commands and hook configuration, driven through the real binary
//! with the payloads captured from Claude Code, Codex CLI and Gemini CLI.

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use support::{Fleet, read_jsonl, wait_until};

/// One agent per CLI (and a custom one), each in its own workdir; `extra` goes into each.
fn three_clis(fleet: &Fleet, extra: &str) {
    three_clis_after(fleet, "", extra);
}

/// `three_clis` with `prefix` (e.g. a `[thresholds]` table) before the agents.
fn three_clis_after(fleet: &Fleet, prefix: &str, extra: &str) {
    for w in ["wc", "wx", "wg", "wd"] {
        std::fs::create_dir_all(fleet.path().join(w)).unwrap();
    }
    fleet.toml(&format!(
        "{prefix}\n[[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\nenabled = false\n{extra}\n\
         [[agent]]\nname = \"x\"\ncli = \"codex\"\ncommand = \"sleep 100000\"\nworkdir = \"wx\"\nenabled = false\n{extra}\n\
         [[agent]]\nname = \"g\"\ncli = \"gemini\"\ncommand = \"sleep 100000\"\nworkdir = \"wg\"\nenabled = false\n{extra}\n\
         [[agent]]\nname = \"d\"\ncommand = \"sleep 100000\"\nworkdir = \"wd\"\nenabled = false\n"
    ));
}

struct HookRun {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl HookRun {
    /// Whatever a hook prints must be valid for its CLI.
    #[track_caller]
    fn valid_for(&self, cli: &str) -> &Self {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        let out = self.stdout.trim();
        if cli == "gemini" {
            let v: Value = serde_json::from_str(out)
                .unwrap_or_else(|e| panic!("gemini needs JSON, got {out:?}: {e}"));
            assert!(v.is_object(), "{out}");
        } else if !out.is_empty() {
            let v: Value = serde_json::from_str(out)
                .unwrap_or_else(|e| panic!("{cli} output is not JSON: {out:?}: {e}"));
            if let Some(h) = v.get("hookSpecificOutput") {
                // Codex parses SessionStart output with deny_unknown_fields.
                let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["hookSpecificOutput"], "{out}");
                let inner: Vec<&String> = h.as_object().unwrap().keys().collect();
                assert_eq!(inner, ["hookEventName", "additionalContext"], "{out}");
            }
        }
        self
    }

    fn context(&self) -> Option<String> {
        let v: Value = serde_json::from_str(self.stdout.trim()).ok()?;
        v.pointer("/hookSpecificOutput/additionalContext")?
            .as_str()
            .map(str::to_string)
    }
}

fn hook_with_env(
    fleet: &Fleet,
    event: &str,
    agent: &str,
    cli: Option<&str>,
    payload: &[u8],
    env: &[(&str, &str)],
) -> HookRun {
    let mut args = vec!["hook", event, "--agent", agent];
    if let Some(cli) = cli {
        args.extend(["--cli", cli]);
    }
    let mut cmd = fleet.command(&args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn phoenix hook");
    let mut stdin = child.stdin.take().unwrap();
    let payload = payload.to_vec();
    // Written from a thread: a huge payload must not deadlock against the hook's stdout.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&payload);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    HookRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn hook(fleet: &Fleet, event: &str, agent: &str, cli: Option<&str>, payload: &str) -> HookRun {
    hook_with_env(fleet, event, agent, cli, payload.as_bytes(), &[])
}

fn state(fleet: &Fleet, agent: &str) -> Value {
    let text = std::fs::read_to_string(fleet.agent_dir(agent).join("state.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The phoenix event each captured CLI hook is wired to (see `hooks show`).
fn phoenix_event(cli: &str, hook: &str) -> Option<&'static str> {
    Some(match (cli, hook) {
        (_, "SessionStart") => "session-start",
        (_, "UserPromptSubmit" | "BeforeAgent") => "prompt",
        (_, "PostToolUse" | "AfterTool") => "heartbeat",
        ("claude", "PostToolUseFailure") => "tool-error",
        ("claude", "StopFailure") => "turn-failed",
        (_, "PreToolUse" | "BeforeTool") => "pre-tool",
        (_, "PreCompact" | "PreCompress") => "pre-compact",
        (_, "Stop" | "AfterAgent") => "stop",
        (_, "SessionEnd") => "session-end",
        (_, "Notification") => "notification",
        _ => return None,
    })
}

fn fixtures(cli: &str) -> Vec<(String, Value)> {
    let path = format!(
        "{}/tests/fixtures/payloads/{cli}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["hook"].as_str().unwrap().to_string(),
                v["payload"].clone(),
            )
        })
        .collect()
}

#[test]
fn captured_payloads_of_all_three_clis_update_state_and_answer_validly() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    for (cli, agent) in [("claude", "c"), ("codex", "x"), ("gemini", "g")] {
        let mut tool_calls = 0;
        let mut last_session = String::new();
        for (name, payload) in fixtures(cli) {
            let Some(event) = phoenix_event(cli, &name) else {
                continue;
            };
            if matches!(event, "heartbeat" | "tool-error") {
                tool_calls += 1;
            }
            last_session = payload["session_id"].as_str().unwrap().to_string();
            hook(&fleet, event, agent, Some(cli), &payload.to_string()).valid_for(cli);
        }
        let s = state(&fleet, agent);
        assert_eq!(s["agent"], agent);
        assert_eq!(s["session_id"], last_session.as_str(), "{cli}");
        let tools = read_jsonl(&fleet.agent_dir(agent).join("tool_use.jsonl"));
        assert_eq!(tools.len(), tool_calls, "{cli}: {tools:?}");
        let ops = fleet.ops(agent);
        assert!(ops.iter().any(|o| o["event"] == "session_start"), "{cli}");
        assert!(ops.iter().any(|o| o["event"] == "session_end"), "{cli}");
        assert!(
            !fleet.agent_dir(agent).join("hook_errors.jsonl").exists(),
            "{cli}: {:?}",
            std::fs::read_to_string(fleet.agent_dir(agent).join("hook_errors.jsonl"))
        );
    }
    // Claude's captured failing Bash call is counted as an error.
    let tools = read_jsonl(&fleet.agent_dir("c").join("tool_use.jsonl"));
    let failed: Vec<&Value> = tools.iter().filter(|t| t["ok"] == false).collect();
    assert_eq!(failed.len(), 1, "{tools:?}");
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("Exit code 2")
    );
    // Claude's StopFailure (the API said the prompt is too long) is a failed turn.
    let failed_turn = fleet
        .ops("c")
        .into_iter()
        .find(|o| o["event"] == "turn_failed")
        .expect("turn_failed op");
    assert_eq!(failed_turn["error"], "invalid_request");
    assert!(
        failed_turn["details"]
            .as_str()
            .unwrap()
            .contains("prompt is too long")
    );
    // Gemini's PreCompress and Claude's PreCompact left snapshots with the transcript path.
    for agent in ["c", "g"] {
        let snaps: Vec<_> = std::fs::read_dir(fleet.agent_dir(agent).join("pre-compact"))
            .unwrap()
            .flatten()
            .collect();
        assert!(!snaps.is_empty(), "{agent}");
        let snap: Value = serde_json::from_slice(&std::fs::read(snaps[0].path()).unwrap()).unwrap();
        assert!(
            snap["transcript_path"]
                .as_str()
                .unwrap()
                .ends_with(".jsonl")
        );
        assert_eq!(snap["state"]["agent"], agent);
        // And a handoff, written by a detached `phoenix handoff save` so the hook returned at
        // once.
        support::wait_until(
            std::time::Duration::from_secs(10),
            "the pre-compact handoff",
            || {
                std::fs::read_dir(fleet.agent_dir(agent).join("handoffs"))
                    .map(|d| {
                        d.flatten().any(|e| {
                            std::fs::read_to_string(e.path())
                                .is_ok_and(|t| t.contains("trigger_reason: \"pre_compact\""))
                        })
                    })
                    .unwrap_or(false)
            },
        );
    }
}

#[test]
fn garbage_empty_and_huge_payloads_never_break_the_agent() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let huge = json!({
        "session_id": "s-huge", "hook_event_name": "PostToolUse", "tool_name": "Read",
        "tool_response": {"content": "x".repeat(20 << 20)},
    })
    .to_string();
    let mut garbage = vec![0xff, 0xfe, b'{', 0];
    garbage.extend(std::iter::repeat_n(b'z', 100_000));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("garbage", garbage),
        ("not an object", b"[1, 2, 3]".to_vec()),
        ("truncated", br#"{"session_id": "s1", "tool_na"#.to_vec()),
        (
            "wrong types",
            br#"{"session_id": 5, "tool_name": [], "source": {}}"#.to_vec(),
        ),
        ("huge", huge.into_bytes()),
    ];
    for (cli, agent) in [("claude", "c"), ("codex", "x"), ("gemini", "g")] {
        for event in [
            "session-start",
            "heartbeat",
            "tool-error",
            "pre-compact",
            "stop",
            "session-end",
        ] {
            for (what, payload) in &cases {
                if *what == "huge" && !matches!(event, "heartbeat" | "session-start") {
                    continue;
                }
                let run = hook_with_env(&fleet, event, agent, Some(cli), payload, &[]);
                run.valid_for(cli);
                assert!(run.code == Some(0), "{cli} {event} {what}: {}", run.stderr);
            }
        }
    }
    let errors = read_jsonl(&fleet.agent_dir("g").join("hook_errors.jsonl"));
    assert!(
        errors
            .iter()
            .any(|e| e["error"].as_str().unwrap().contains("not JSON")),
        "{errors:?}"
    );
    let tools = read_jsonl(&fleet.agent_dir("c").join("tool_use.jsonl"));
    assert!(
        tools.iter().any(|t| t["session_id"] == "s-huge"),
        "huge payloads are read whole"
    );
}

#[test]
fn broken_config_unknown_agent_and_unknown_event_still_answer_validly() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let payload = r#"{"session_id":"s1","source":"startup"}"#;
    hook(&fleet, "session-start", "nobody", Some("gemini"), payload).valid_for("gemini");
    let run = hook(&fleet, "no-such-event", "g", Some("gemini"), payload);
    run.valid_for("gemini");
    assert!(
        run.stderr.contains("unknown hook event `no-such-event`"),
        "{}",
        run.stderr
    );

    fleet.raw_toml("[fleet\nthis is not toml");
    for cli in ["claude", "codex", "gemini"] {
        let run = hook(&fleet, "heartbeat", "g", Some(cli), payload);
        run.valid_for(cli);
        assert!(
            run.stderr.contains("phoenix hook heartbeat"),
            "{}",
            run.stderr
        );
    }
    // Without --cli and without a readable config, a Gemini payload still gets JSON.
    let run = hook(
        &fleet,
        "heartbeat",
        "g",
        None,
        r#"{"hook_event_name":"AfterTool","tool_name":"x"}"#,
    );
    run.valid_for("gemini");
}

#[test]
fn a_malformed_hook_command_line_never_exits_2() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    for (args, expected) in [
        (
            vec![
                "hook",
                "heartbeat",
                "--agent",
                "g",
                "--cli",
                "gemini",
                "extra",
                "args",
            ],
            "{}",
        ),
        (vec!["hook", "heartbeat", "--cli", "gemini"], "{}"),
        (vec!["hook", "heartbeat", "--agent", "c", "--bogus"], ""),
    ] {
        let out = fleet.command(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            expected,
            "{args:?}"
        );
    }
    // Other commands keep their usage errors (EX_USAGE).
    assert_eq!(
        fleet
            .command(&["plan", "--bogus"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(64)
    );
}

#[test]
fn missing_state_dir_is_created_and_unwritable_one_is_survived() {
    use std::os::unix::fs::PermissionsExt;
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    assert!(!fleet.state_dir().exists());
    hook(&fleet, "heartbeat", "c", Some("claude"), "{}").valid_for("claude");
    assert!(fleet.agent_dir("c").join("tool_use.jsonl").exists());

    // A state dir the hook cannot write to (root ignores modes, so replace it by a file).
    if unsafe { libc::geteuid() } == 0 {
        std::fs::remove_dir_all(fleet.agent_dir("g")).ok();
        std::fs::write(fleet.agent_dir("g"), b"not a dir").unwrap();
    } else {
        std::fs::create_dir_all(fleet.agent_dir("g")).unwrap();
        std::fs::set_permissions(fleet.agent_dir("g"), std::fs::Permissions::from_mode(0o500))
            .unwrap();
    }
    for event in [
        "session-start",
        "heartbeat",
        "tool-error",
        "stop",
        "session-end",
        "pre-compact",
    ] {
        let run = hook(&fleet, event, "g", Some("gemini"), r#"{"session_id":"s"}"#);
        run.valid_for("gemini");
        assert!(!run.stderr.is_empty(), "{event}: the problem is logged");
    }
}

#[test]
fn corrupt_state_is_rolled_back_by_a_hook_and_recorded() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    fleet
        .run(&["loop", "add", "c", "keep-me", "a loop that must survive"])
        .status(0);
    let good = std::fs::read(fleet.agent_dir("c").join("state.json")).unwrap();
    std::fs::write(
        fleet.agent_dir("c").join("state.json"),
        &good[..good.len() - 20],
    )
    .unwrap();

    let run = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        r#"{"session_id":"s2","source":"startup"}"#,
    );
    run.valid_for("claude");
    assert!(
        run.context().unwrap().contains("[keep-me]"),
        "{}",
        run.stdout
    );
    let s = state(&fleet, "c");
    assert_eq!(s["open_loops"][0]["id"], "keep-me");
    assert_eq!(s["session_id"], "s2");

    let critical = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    assert_eq!(critical.len(), 1, "{critical:?}");
    for field in ["ts", "event", "agent", "reason", "action_taken", "details"] {
        assert!(critical[0].get(field).is_some(), "{field}: {critical:?}");
    }
    assert_eq!(critical[0]["agent"], "c");
    assert!(
        fleet
            .ops("c")
            .iter()
            .any(|o| o["event"] == "state_rollback"),
        "{:?}",
        fleet.ops("c")
    );
    // `state show` on a garbage file rolls back too.
    std::fs::write(fleet.agent_dir("c").join("state.json"), b"\0\0garbage").unwrap();
    fleet
        .run(&["state", "show", "c"])
        .status(0)
        .stdout_has("[keep-me]");
}

#[test]
fn recovery_block_after_an_interrupted_turn_then_brief() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    std::fs::create_dir_all(fleet.agent_dir("c")).unwrap();
    std::fs::write(
        fleet.agent_dir("c").join("brief.md"),
        "c — 2026-02-16\n\n**Next:** ship the parser.\n",
    )
    .unwrap();
    fleet
        .run(&["loop", "add", "c", "parser", "finish the parser"])
        .status(0);

    let start = r#"{"session_id":"s1","source":"startup","hook_event_name":"SessionStart"}"#;
    let first = hook(&fleet, "session-start", "c", Some("claude"), start);
    let text = first.valid_for("claude").context().unwrap();
    assert!(!text.contains("RECOVERY"), "{text}");
    assert!(text.contains("[parser] finish the parser"), "{text}");
    assert!(text.contains("ship the parser"), "{text}");

    hook(
        &fleet,
        "prompt",
        "c",
        Some("claude"),
        r#"{"session_id":"s1","prompt":"refactor the lexer\nthoroughly"}"#,
    );
    hook(
        &fleet,
        "heartbeat",
        "c",
        Some("claude"),
        r#"{"session_id":"s1","tool_name":"Edit"}"#,
    );
    assert_eq!(state(&fleet, "c")["status"], "working");
    // The CLI dies here: no Stop, no SessionEnd.
    let again = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        r#"{"session_id":"s2","source":"startup"}"#,
    );
    let text = again.valid_for("claude").context().unwrap();
    assert!(
        text.starts_with("=== PHOENIX: RECOVERY DETECTED ==="),
        "{text}"
    );
    assert!(text.contains("Task: refactor the lexer"), "{text}");
    assert!(text.contains("Edit (ok)"), "{text}");
    assert!(text.contains("[parser]"), "{text}");
    assert!(text.find("RECOVERY").unwrap() < text.find("ship the parser").unwrap());
    // Still `working` until a turn ends: a second crash right away recovers again.
    let third = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        r#"{"session_id":"s3","source":"resume"}"#,
    );
    assert!(third.context().unwrap().contains("RECOVERY"));

    hook(
        &fleet,
        "stop",
        "c",
        Some("claude"),
        r#"{"session_id":"s3"}"#,
    );
    assert_eq!(state(&fleet, "c")["status"], "idle");
    let resumed = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        r#"{"session_id":"s3","source":"resume"}"#,
    );
    assert_eq!(
        resumed.valid_for("claude").stdout,
        "",
        "a clean resume has its transcript"
    );
    let compacted = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        r#"{"session_id":"s3","source":"compact"}"#,
    );
    let text = compacted.context().unwrap();
    assert!(
        text.contains("CONTEXT COMPACTED") && text.contains("[parser]"),
        "{text}"
    );

    let ops = fleet.ops("c");
    let starts: Vec<bool> = ops
        .iter()
        .filter(|o| o["event"] == "session_start")
        .map(|o| o["interrupted"].as_bool().unwrap())
        .collect();
    assert_eq!(starts, [false, true, true, false, false]);
}

/// The Clinic's recovery context is for the next session phoenix starts, never for the CLI
/// process it replaces. Claude Code auto-compacting a prompt that is too long runs its
/// SessionStart `compact` in the dying process while the wrapper stops it for a fresh one (a
/// `/clear` there would run `clear`): a session start in a process started before the
/// context was left leaves it for the fresh session's start.
#[test]
fn the_clinics_context_waits_through_a_compaction_for_the_next_session() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let dying_started = jiff::Timestamp::now().to_string();
    let dying = [("PHOENIX_RUN_STARTED", dying_started.as_str())];
    let start = |source: &str, id: &str, env: &[(&str, &str)]| {
        let payload = format!(r#"{{"session_id":"{id}","source":"{source}"}}"#);
        hook_with_env(
            &fleet,
            "session-start",
            "c",
            Some("claude"),
            payload.as_bytes(),
            env,
        )
    };
    start("startup", "dying", &dying);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let pending = fleet.agent_dir("c").join("clinic_context.md");
    std::fs::write(&pending, "=== PHOENIX: WHAT THE FULL SESSION KNEW ===\n").unwrap();
    for source in ["compact", "clear"] {
        let text = start(source, "dying", &dying).context().unwrap_or_default();
        assert!(
            !text.contains("WHAT THE FULL SESSION KNEW"),
            "{source}: {text}"
        );
        assert!(pending.exists(), "{source}: left for the next session");
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let next_started = jiff::Timestamp::now().to_string();
    let text = start("startup", "next", &[("PHOENIX_RUN_STARTED", &next_started)])
        .context()
        .unwrap();
    assert!(
        text.starts_with("=== PHOENIX: WHAT THE FULL SESSION KNEW"),
        "{text}"
    );
    assert!(!pending.exists(), "given once");
    // A CLI started without the start time (an older wrapper's) takes it as before.
    std::fs::write(&pending, "=== PHOENIX: WHAT THE FULL SESSION KNEW ===\n").unwrap();
    let text = start("startup", "other", &[]).context().unwrap();
    assert!(text.contains("WHAT THE FULL SESSION KNEW"), "{text}");
}

#[test]
fn codex_and_gemini_get_recovery_through_their_own_channel() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    for (cli, agent, tool) in [
        (
            "codex",
            "x",
            json!({"tool_name": "Bash", "tool_response": "Chunk ID: a\nProcess exited with code 0\nOutput:\nok\n"}),
        ),
        (
            "gemini",
            "g",
            json!({"tool_name": "run_shell_command", "tool_response": {"llmContent": "Output: ok", "returnDisplay": ""}}),
        ),
    ] {
        hook(
            &fleet,
            "prompt",
            agent,
            Some(cli),
            r#"{"session_id":"s1","prompt":"migrate the db"}"#,
        )
        .valid_for(cli);
        hook(&fleet, "heartbeat", agent, Some(cli), &tool.to_string()).valid_for(cli);
        let run = hook(
            &fleet,
            "session-start",
            agent,
            Some(cli),
            r#"{"session_id":"s2","source":"startup"}"#,
        );
        run.valid_for(cli);
        let v: Value = serde_json::from_str(run.stdout.trim()).unwrap();
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
        assert!(
            run.context().unwrap().contains("Task: migrate the db"),
            "{cli}"
        );
    }
}

#[test]
fn user_exit_is_clean_and_mid_turn_end_is_an_interruption() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    hook(
        &fleet,
        "prompt",
        "c",
        Some("claude"),
        r#"{"prompt":"task one"}"#,
    );
    hook(
        &fleet,
        "session-end",
        "c",
        Some("claude"),
        r#"{"reason":"prompt_input_exit"}"#,
    );
    let s = state(&fleet, "c");
    assert_eq!(s["status"], "stopped");
    assert_eq!(s["last_session_end"]["clean"], true);
    assert!(fleet.agent_dir("c").join(".clean-exit").exists());
    let run = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        r#"{"source":"startup"}"#,
    );
    assert!(!run.stdout.contains("RECOVERY"), "{}", run.stdout);

    // Codex always says `other`; ending in the middle of a turn is an interruption.
    hook(
        &fleet,
        "prompt",
        "x",
        Some("codex"),
        r#"{"prompt":"task two"}"#,
    );
    hook(
        &fleet,
        "session-end",
        "x",
        Some("codex"),
        r#"{"reason":"other"}"#,
    );
    assert_eq!(state(&fleet, "x")["status"], "working");
    let run = hook(
        &fleet,
        "session-start",
        "x",
        Some("codex"),
        r#"{"source":"startup"}"#,
    );
    assert!(
        run.context().unwrap().contains("RECOVERY"),
        "{}",
        run.stdout
    );
    // …but after a finished turn it is just the end.
    hook(&fleet, "stop", "x", Some("codex"), "{}");
    hook(
        &fleet,
        "session-end",
        "x",
        Some("codex"),
        r#"{"reason":"other"}"#,
    );
    assert_eq!(state(&fleet, "x")["status"], "stopped");
}

/// Gemini CLI 0.61 says `exit` from its exit cleanup whatever ended it: a Gemini killed
/// mid-turn (its relaunched process SIGTERMed after the parent's `kill -9`) is interrupted,
/// not cleanly gone, and leaves no clean-exit marker (which would also keep it stopped).
#[test]
fn gemini_exit_reason_mid_turn_is_an_interruption() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        r#"{"prompt":"task three"}"#,
    );
    hook(
        &fleet,
        "session-end",
        "g",
        Some("gemini"),
        r#"{"hook_event_name":"SessionEnd","reason":"exit"}"#,
    );
    let s = state(&fleet, "g");
    assert_eq!(s["status"], "working");
    assert_eq!(s["last_session_end"]["clean"], false);
    assert!(!fleet.agent_dir("g").join(".clean-exit").exists());
    let run = hook(
        &fleet,
        "session-start",
        "g",
        Some("gemini"),
        r#"{"source":"startup"}"#,
    );
    assert!(
        run.context().unwrap().contains("RECOVERY"),
        "{}",
        run.stdout
    );
    // After a finished turn it is just the end.
    hook(&fleet, "stop", "g", Some("gemini"), "{}");
    hook(
        &fleet,
        "session-end",
        "g",
        Some("gemini"),
        r#"{"reason":"exit"}"#,
    );
    assert_eq!(state(&fleet, "g")["status"], "stopped");
}

/// Gemini CLI 0.61 drops SessionStart context on `--resume` (the resumed history replaces the
/// chat the hook's context was added to): for a resumed Gemini session phoenix holds the
/// context back and gives it with the first prompt (BeforeAgent), once, for that session only.
#[test]
fn gemini_resume_context_goes_with_the_first_prompt() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let sid = r#""session_id":"g-1""#;
    hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"BeforeAgent",{sid},"prompt":"port the parser"}}"#),
    );
    let start = hook(
        &fleet,
        "session-start",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"SessionStart",{sid},"source":"resume"}}"#),
    );
    assert_eq!(start.stdout.trim(), "{}");
    let first = hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"BeforeAgent",{sid},"prompt":"go on"}}"#),
    );
    let v: Value = serde_json::from_str(first.stdout.trim()).unwrap();
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "BeforeAgent");
    let context = first.context().unwrap();
    assert!(context.contains("RECOVERY"), "{context}");
    assert!(context.contains("port the parser"), "{context}");
    let second = hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"BeforeAgent",{sid},"prompt":"more"}}"#),
    );
    assert_eq!(second.stdout.trim(), "{}");

    // Held back for a session that never got a prompt: not given to the next one.
    hook(
        &fleet,
        "session-start",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"SessionStart",{sid},"source":"resume"}}"#),
    );
    let other = hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        r#"{"hook_event_name":"BeforeAgent","session_id":"g-2","prompt":"hi"}"#,
    );
    assert_eq!(other.stdout.trim(), "{}");
    // A fresh start is not affected: its context comes with SessionStart.
    let fresh = hook(
        &fleet,
        "session-start",
        "g",
        Some("gemini"),
        r#"{"hook_event_name":"SessionStart","session_id":"g-3","source":"startup"}"#,
    );
    assert!(fresh.context().is_some(), "{}", fresh.stdout);
}

/// Gemini CLI fires PreCompress (`auto`) before every model call and compresses only past its
/// threshold: a small session leaves no compaction, snapshot or handoff per turn; one past the
/// threshold (from its chat file) does.
#[test]
fn gemini_pre_compress_counts_only_when_gemini_will_compress() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let chat = fleet.path().join("chat.jsonl");
    let said = |input: u64| {
        format!(
            "{{\"sessionId\":\"s\",\"kind\":\"main\"}}\n\
             {{\"id\":\"1\",\"type\":\"gemini\",\"content\":\"ok\",\"tokens\":{{\"input\":{input}}},\"model\":\"gemini-3.1-pro-preview\"}}\n"
        )
    };
    let payload = serde_json::json!({"hook_event_name": "PreCompress", "session_id": "s",
        "transcript_path": chat, "trigger": "auto"})
    .to_string();
    std::fs::write(&chat, said(1200)).unwrap();
    hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        r#"{"session_id":"s","prompt":"go"}"#,
    );
    for _ in 0..3 {
        hook(&fleet, "pre-compact", "g", Some("gemini"), &payload).valid_for("gemini");
    }
    let dir = fleet.agent_dir("g");
    assert!(!dir.join("pre-compact").exists());
    assert_eq!(state(&fleet, "g")["compactions"].as_u64().unwrap_or(0), 0);
    assert!(!fleet.ops("g").iter().any(|o| o["event"] == "pre_compact"));

    std::fs::write(&chat, said(600_000)).unwrap();
    hook(&fleet, "pre-compact", "g", Some("gemini"), &payload).valid_for("gemini");
    assert_eq!(state(&fleet, "g")["compactions"], 1);
    assert_eq!(
        std::fs::read_dir(dir.join("pre-compact")).unwrap().count(),
        1
    );
}

/// Gemini CLI 0.61 ends a turn that failed on an API error with AfterAgent like any other; its
/// chat file ends with the `error` message. phoenix's stop hook reads it: status `failed` with
/// the error, for the watchdog to treat. A turn that ended well stays a finished turn.
#[test]
fn gemini_turn_that_ended_in_an_api_error_is_a_failed_turn() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let chat = fleet.path().join("chat.jsonl");
    let user = r#"{"id":"u1","timestamp":"2026-11-23T19:04:54.833Z","type":"user","content":[{"text":"migrate the billing tables"}]}"#;
    let error = r#"{"id":"e1","timestamp":"2026-11-23T19:04:54.933Z","type":"error","content":"[API Error: {\"error\":{\"code\":400,\"status\":\"INVALID_ARGUMENT\",\"message\":\"The input token count (1300000) exceeds the maximum number of tokens allowed (1048576).\"}}]"}"#;
    let info = r#"{"id":"i1","timestamp":"2026-11-23T19:04:54.934Z","type":"info","content":"This request failed."}"#;
    let stop = json!({"hook_event_name": "AfterAgent", "session_id": "g-1",
        "transcript_path": chat, "prompt": "migrate the billing tables",
        "prompt_response": "[no response text]", "stop_hook_active": false})
    .to_string();
    hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        r#"{"hook_event_name":"BeforeAgent","session_id":"g-1","prompt":"migrate the billing tables"}"#,
    );
    std::fs::write(
        &chat,
        format!("{user}\n{error}\n{{\"$set\":{{}}}}\n{info}\n"),
    )
    .unwrap();
    hook(&fleet, "stop", "g", Some("gemini"), &stop).valid_for("gemini");
    let s = state(&fleet, "g");
    assert_eq!(s["status"], "failed");
    assert!(
        s["last_error"]
            .as_str()
            .unwrap()
            .contains("exceeds the maximum number of tokens"),
        "{s}"
    );
    // The error says whose it is: a later session must not take it for its own.
    assert_eq!(s["last_error_session"], "g-1", "{s}");
    assert!(s["last_error_at"].is_string(), "{s}");
    let op = fleet
        .ops("g")
        .into_iter()
        .rfind(|o| o["event"] == "turn_failed")
        .expect("turn_failed op");
    assert_eq!(op["hook"], "AfterAgent");

    // The next turn ends with an answer: an ordinary finished turn.
    let answered = r#"{"id":"g1","type":"gemini","content":"done","tokens":{"input":10}}"#;
    std::fs::write(&chat, format!("{user}\n{error}\n{user}\n{answered}\n")).unwrap();
    hook(&fleet, "stop", "g", Some("gemini"), &stop).valid_for("gemini");
    assert_eq!(state(&fleet, "g")["status"], "idle");
    assert!(!fleet.agent_dir("g").join("hook_errors.jsonl").exists());
}

/// Gemini CLI has no SessionStart after it compresses its history: what phoenix gave at session
/// start went into the summary. The compaction block and the handoff saved before it come with
/// the next prompt of that session (BeforeAgent), once.
#[test]
fn gemini_compression_context_comes_back_with_the_next_prompt() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let sid = r#""session_id":"g-1""#;
    hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"BeforeAgent",{sid},"prompt":"tidy the changelog"}}"#),
    );
    hook(
        &fleet,
        "pre-compact",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"PreCompress",{sid},"trigger":"manual"}}"#),
    )
    .valid_for("gemini");
    let op = fleet
        .ops("g")
        .into_iter()
        .rfind(|o| o["event"] == "pre_compact")
        .unwrap();
    assert_eq!(op["context_for_next_prompt"], true);
    // The detached handoff of the pre-compact hook.
    wait_until(
        std::time::Duration::from_secs(10),
        "the pre-compact handoff",
        || fleet.ops("g").iter().any(|o| o["event"] == "handoff_saved"),
    );
    let first = hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"BeforeAgent",{sid},"prompt":"go on"}}"#),
    );
    first.valid_for("gemini");
    let context = first.context().expect("context with the next prompt");
    assert!(context.contains("CONTEXT COMPACTED"), "{context}");
    assert!(context.contains("tidy the changelog"), "{context}");
    let handoff = fleet.run(&["handoff", "list", "g", "--json"]).json()["handoffs"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(context.contains(&handoff), "{context}");
    let second = hook(
        &fleet,
        "prompt",
        "g",
        Some("gemini"),
        &format!(r#"{{"hook_event_name":"BeforeAgent",{sid},"prompt":"more"}}"#),
    );
    assert_eq!(second.stdout.trim(), "{}");
    // Claude and Codex get it with SessionStart `compact` instead: nothing is held back.
    hook(
        &fleet,
        "pre-compact",
        "x",
        Some("codex"),
        r#"{"hook_event_name":"PreCompact","session_id":"x-1","turn_id":"t","trigger":"manual"}"#,
    );
    let op = fleet
        .ops("x")
        .into_iter()
        .rfind(|o| o["event"] == "pre_compact")
        .unwrap();
    assert_eq!(op["context_for_next_prompt"], false);
}

/// Codex 0.169's PostToolUse payload for a shell call is the command's output alone; the exit
/// code is in the rollout Codex wrote before running the hook.
#[test]
fn codex_shell_failures_are_read_from_the_rollout() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let rollout = fleet.path().join("rollout.jsonl");
    std::fs::write(
        &rollout,
        concat!(
            r#"{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_1","status":"failed","exit_code":2}}}"#,
            "\n",
            r#"{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_2","status":"completed","exit_code":0}}}"#,
            "\n"
        ),
    )
    .unwrap();
    let call = |id: &str, output: &str| {
        serde_json::json!({"hook_event_name": "PostToolUse", "session_id": "s", "turn_id": "t",
            "transcript_path": rollout, "tool_name": "Bash", "tool_input": {"command": "ls /nope"},
            "tool_response": output, "tool_use_id": id})
        .to_string()
    };
    hook(
        &fleet,
        "heartbeat",
        "x",
        Some("codex"),
        &call(
            "call_1",
            "ls: cannot access '/nope': No such file or directory\n",
        ),
    )
    .valid_for("codex");
    hook(&fleet, "heartbeat", "x", Some("codex"), &call("call_2", "")).valid_for("codex");
    let tools = read_jsonl(&fleet.agent_dir("x").join("tool_use.jsonl"));
    assert_eq!(tools[0]["ok"], false);
    assert_eq!(
        tools[0]["error"],
        "exit code 2: ls: cannot access '/nope': No such file or directory"
    );
    assert_eq!(tools[1]["ok"], true);
    assert_eq!(
        state(&fleet, "x")["consecutive_errors"]
            .as_u64()
            .unwrap_or(0),
        0
    );
}

#[test]
fn consecutive_errors_count_up_and_reset_interrupts_are_ignored() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let fail = r#"{"hook_event_name":"PostToolUseFailure","tool_name":"Bash","error":"Exit code 1\nboom","is_interrupt":false}"#;
    for _ in 0..3 {
        hook(&fleet, "tool-error", "c", Some("claude"), fail).valid_for("claude");
    }
    hook(
        &fleet,
        "tool-error",
        "c",
        Some("claude"),
        r#"{"tool_name":"Bash","error":"stopped","is_interrupt":true}"#,
    );
    let s = state(&fleet, "c");
    assert_eq!(s["consecutive_errors"], 3);
    assert_eq!(s["last_error"], "Exit code 1: boom");
    let tools = read_jsonl(&fleet.agent_dir("c").join("tool_use.jsonl"));
    assert_eq!(tools[2]["consecutive_errors"], 3);
    assert_eq!(tools[3]["interrupted"], true);
    hook(
        &fleet,
        "heartbeat",
        "c",
        Some("claude"),
        r#"{"tool_name":"Read"}"#,
    );
    assert!(state(&fleet, "c").get("consecutive_errors").is_none());

    // Codex and Gemini failures are read from the tool response.
    hook(
        &fleet,
        "heartbeat",
        "x",
        Some("codex"),
        r#"{"tool_name":"Bash","tool_response":"Process exited with code 7\nOutput:\nno"}"#,
    );
    hook(
        &fleet,
        "heartbeat",
        "g",
        Some("gemini"),
        r#"{"tool_name":"run_shell_command","tool_response":{"llmContent":"Output: x\nExit Code: 101"}}"#,
    );
    assert_eq!(state(&fleet, "x")["consecutive_errors"], 1);
    assert_eq!(state(&fleet, "g")["consecutive_errors"], 1);
}

#[test]
fn another_agents_hook_in_a_shared_workdir_stands_aside() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let run = hook_with_env(
        &fleet,
        "heartbeat",
        "c",
        Some("claude"),
        b"{}",
        &[("PHOENIX_AGENT", "x")],
    );
    run.valid_for("claude");
    assert!(!fleet.agent_dir("c").join("tool_use.jsonl").exists());
}

#[test]
fn loop_resolve_and_state_commands() {
    let fleet = Fleet::new();
    three_clis_after(&fleet, "[thresholds]\nstale_after = \"1d\"\n", "");

    fleet
        .run(&["loop", "add", "c", "new-one", "fresh", "work"])
        .status(0)
        .stdout_has("added loop `new-one`");
    fleet.run(&["loop", "add", "c", "bad id", "x"]).status(1);
    fleet
        .run(&["loop", "add", "nobody", "x", "y"])
        .status(1)
        .stderr_has("no agent `nobody`");
    // An old loop, as a brief generator or the seed's scripts would have written it.
    let mut s = state(&fleet, "c");
    s["open_loops"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "old-one", "text": "ancient", "added": "2020-01-01", "stale": false}));
    std::fs::write(fleet.agent_dir("c").join("state.json"), s.to_string()).unwrap();

    fleet
        .run(&["loop", "list", "c"])
        .status(0)
        .stdout_has("old-one")
        .stdout_has("stale");
    let listed = fleet.run(&["loop", "list", "c", "--json"]);
    let loops = listed.status(0).json()["loops"].clone();
    assert_eq!(loops.as_array().unwrap().len(), 2);
    assert_eq!(loops[0]["id"], "new-one");
    assert_eq!(loops[0]["text"], "fresh work");
    assert_eq!(loops[0]["stale"], false);
    assert_eq!(loops[1]["stale"], true);

    fleet
        .run(&["resolve", "c", "nope", "why"])
        .status(1)
        .stderr_has("agent `c` has no open loop `nope`; open loops: `new-one`, `old-one`");
    fleet
        .run(&["resolve", "c", "old-one", "done", "long", "ago"])
        .status(0);
    let s = state(&fleet, "c");
    assert_eq!(s["open_loops"].as_array().unwrap().len(), 1);
    assert_eq!(s["resolved"][0]["id"], "old-one");
    assert_eq!(s["resolved"][0]["reason"], "done long ago");
    let log = read_jsonl(&fleet.agent_dir("c").join("resolved.jsonl"));
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["id"], "old-one");
    assert_eq!(log[0]["reason"], "done long ago");
    assert!(log[0]["ts"].is_string());

    fleet
        .run(&["state", "show", "c"])
        .status(0)
        .stdout_has("open loops   1 (0 stale)")
        .stdout_has("[old-one] done long ago");
    let shown = fleet
        .run(&["state", "show", "c", "--json"])
        .status(0)
        .json();
    assert_eq!(shown["agent"], "c");
    // The last good copy is the latest write: `old-one` resolved there too, so a rollback
    // never undoes a resolve that resolved.jsonl already records.
    let good: Value = serde_json::from_slice(
        &std::fs::read(fleet.agent_dir("c").join("state.json.last-good")).unwrap(),
    )
    .unwrap();
    assert!(
        !good["open_loops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["id"] == "old-one")
    );
    assert_eq!(good["resolved"][0]["id"], "old-one");
}

#[test]
fn concurrent_heartbeats_resolves_and_loop_adds_lose_nothing() {
    const WORKERS: usize = 3;
    const CALLS: usize = 1000;
    const LOOPS: usize = 40;
    let fleet = Arc::new(Fleet::new());
    three_clis(&fleet, "");
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));

    let checker = {
        let (fleet, done, reads) = (fleet.clone(), done.clone(), reads.clone());
        std::thread::spawn(move || {
            let path = fleet.agent_dir("c").join("state.json");
            while !done.load(Ordering::SeqCst) {
                if let Ok(bytes) = std::fs::read(&path) {
                    let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                        panic!(
                            "state.json invalid mid-run: {e}: {}",
                            String::from_utf8_lossy(&bytes)
                        )
                    });
                    assert!(v["open_loops"].is_array());
                    reads.fetch_add(1, Ordering::SeqCst);
                }
                // Thousands of reads still race the writers; a spinning reader would take a
                // whole core from the hooks it checks.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let fleet = fleet.clone();
            std::thread::spawn(move || {
                for i in 0..CALLS {
                    // Every tenth call fails (a locked write); new sessions force writes too.
                    let (event, payload) = if i % 10 == 9 {
                        ("tool-error", json!({"session_id": format!("w{w}"), "tool_name": "Bash", "error": "Exit code 1"}))
                    } else {
                        ("heartbeat", json!({"session_id": format!("w{w}-{}", i / 100), "tool_name": "Read", "n": i}))
                    };
                    let run = hook(&fleet, event, "c", Some("claude"), &payload.to_string());
                    assert_eq!(run.code, Some(0), "{}", run.stderr);
                }
            })
        })
        .collect();
    let editor = {
        let fleet = fleet.clone();
        std::thread::spawn(move || {
            for n in 0..LOOPS {
                fleet
                    .run(&[
                        "loop",
                        "add",
                        "c",
                        &format!("loop-{n}"),
                        "text",
                        &n.to_string(),
                    ])
                    .status(0);
                if n % 2 == 1 {
                    fleet
                        .run(&["resolve", "c", &format!("loop-{}", n - 1), "done"])
                        .status(0);
                }
            }
        })
    };
    editor.join().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    checker.join().unwrap();
    assert!(reads.load(Ordering::SeqCst) > 10);

    let s = state(&fleet, "c");
    let open: Vec<&str> = s["open_loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..LOOPS)
        .filter(|n| n % 2 == 1)
        .map(|n| format!("loop-{n}"))
        .collect();
    assert_eq!(open, expected);
    let resolved: Vec<&str> = s["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..LOOPS)
        .filter(|n| n % 2 == 0)
        .map(|n| format!("loop-{n}"))
        .collect();
    assert_eq!(resolved, expected);
    assert_eq!(
        read_jsonl(&fleet.agent_dir("c").join("resolved.jsonl")).len(),
        LOOPS / 2
    );
    let tools = read_jsonl(&fleet.agent_dir("c").join("tool_use.jsonl"));
    assert_eq!(tools.len(), WORKERS * CALLS);
    assert_eq!(
        tools.iter().filter(|t| t["ok"] == false).count(),
        WORKERS * CALLS / 10
    );
    assert!(!fleet.agent_dir("c").join("hook_errors.jsonl").exists());
    assert!(!fleet.state_dir().join("critical_events.jsonl").exists());
}

fn settings(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn phoenix_commands(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for groups in v["hooks"].as_object().unwrap().values() {
        for g in groups.as_array().unwrap() {
            for h in g["hooks"].as_array().unwrap() {
                let c = h["command"].as_str().unwrap();
                if c.contains(" hook ") {
                    out.push(c.to_string());
                }
            }
        }
    }
    out
}

#[test]
fn apply_merges_hook_files_keeping_user_settings_and_a_second_apply_changes_nothing() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let claude = fleet.path().join("wc/.claude/settings.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    let user = json!({
        "model": "opus",
        "hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo user-hook"}]}]},
        "permissions": {"allow": ["Bash(ls:*)"]},
    });
    std::fs::write(&claude, serde_json::to_string_pretty(&user).unwrap()).unwrap();

    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("~ agent `c`: install hooks in")
        .stdout_has("+ agent `g`: install hooks in")
        .stdout_has("+ agent `x`: install hooks in")
        .stdout_has("+        \"matcher\": \"startup|resume|clear|compact\"")
        // Claude Code's `.mcp.json` and Codex's `.codex/config.toml`, with phoenix's MCP
        // server, are the fourth and fifth.
        .stdout_has("5 hook files to update");
    let plan = fleet.run(&["plan", "--json"]).json();
    let install = plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["agent"] == "c" && c["action"]["type"] == "install_hooks")
        .unwrap();
    assert_eq!(install["symbol"], "~");
    assert!(install["action"]["diff"].as_str().unwrap().contains("@@"));
    assert!(
        !fleet.path().join("wd/.claude").exists(),
        "custom gets no hook file"
    );

    fleet.run(&["apply", "--yes"]).status(0);
    let merged = settings(&claude);
    assert_eq!(merged["model"], "opus");
    assert_eq!(merged["permissions"], user["permissions"]);
    assert_eq!(
        merged["hooks"]["PostToolUse"][0],
        user["hooks"]["PostToolUse"][0]
    );
    assert_eq!(merged["hooks"]["PostToolUse"].as_array().unwrap().len(), 2);
    let gemini = settings(&fleet.path().join("wg/.gemini/settings.json"));
    assert_eq!(gemini["hooks"]["AfterTool"][0]["hooks"][0]["timeout"], 5000);
    assert_eq!(
        gemini["hooks"]["AfterTool"][0]["hooks"][0]["name"],
        "phoenix-heartbeat"
    );
    let codex = settings(&fleet.path().join("wx/.codex/hooks.json"));
    assert!(
        codex["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"]
            .as_u64()
            .unwrap()
            <= 3
    );
    // The hook files call phoenix-hook, built next to phoenix, with phoenix's arguments.
    let hook_exe = Path::new(support::PHOENIX).with_file_name("phoenix-hook");
    for command in phoenix_commands(&merged) {
        let argv = shlex::split(&command).unwrap();
        assert_eq!(Path::new(&argv[0]), hook_exe);
        assert_eq!(Path::new(&argv[2]), fleet.config());
    }
    let before = std::fs::read(&claude).unwrap();
    let backups: Vec<_> = std::fs::read_dir(fleet.agent_dir("c").join("hook-backups"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(
        backups.len(),
        1,
        "the user's file before phoenix touched it"
    );
    assert_eq!(settings(&backups[0].path()), user);

    fleet.run(&["plan"]).status(0).stdout_has("No changes");
    fleet.run(&["apply", "--yes"]).status(0);
    assert_eq!(
        std::fs::read(&claude).unwrap(),
        before,
        "second apply changes nothing"
    );

    // The installed command really runs through a shell.
    let command = phoenix_commands(&merged)
        .into_iter()
        .find(|c| c.contains("hook heartbeat"))
        .unwrap();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env_remove("PHOENIX_AGENT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"session_id":"via-sh","tool_name":"Bash"}"#)
        .unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    assert_eq!(state(&fleet, "c")["session_id"], "via-sh");

    // Dropping agent `c` from the spec: only --prune takes its entries out, and only them.
    let body = std::fs::read_to_string(fleet.config()).unwrap();
    let start = body.find("[[agent]]\nname = \"c\"").unwrap();
    let end = body[start + 1..].find("[[agent]]").unwrap() + start + 1;
    std::fs::write(
        fleet.config(),
        format!("{}{}", &body[..start], &body[end..]),
    )
    .unwrap();
    fleet.run(&["plan"]).status(0);
    fleet
        .run(&["plan", "--prune"])
        .status(2)
        .stdout_has("- agent `c`: remove phoenix hooks from")
        .stdout_has("not declared in phoenix.toml");
    fleet.run(&["apply", "--yes", "--prune"]).status(0);
    assert_eq!(settings(&claude), user);
    fleet.run(&["plan", "--prune"]).status(0);
}

/// Codex's MCP servers are TOML in its project config: phoenix's goes in beside the user's
/// (their file as they wrote it, comments too), shown by the plan, and `down --remove-hooks`
/// takes out phoenix's entry alone.
#[test]
fn codexs_mcp_server_is_merged_into_its_project_config_toml_and_removed_alone() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let config = fleet.path().join("wx/.codex/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let user = "# the team's Codex settings\nmodel = \"o4-mini\"\n\n[mcp_servers.db]\ncommand = \"db-mcp\"  # local\n";
    std::fs::write(&config, user).unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("+++ .codex/config.toml")
        .stdout_has("+[mcp_servers.phoenix]")
        .stdout_has(&format!("+command = \"{}\"", support::PHOENIX));
    fleet.run(&["apply", "--yes"]).status(0);
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.starts_with(user),
        "the user's lines stay:\n{written}"
    );
    let table: toml::Table = toml::from_str(&written).unwrap();
    let ours = &table["mcp_servers"]["phoenix"];
    assert_eq!(
        ours["command"].as_str(),
        Some(support::PHOENIX),
        "{written}"
    );
    let args: Vec<&str> = ours["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        ["--config", &fleet.config().to_string_lossy(), "mcp"],
        "{written}"
    );
    fleet.run(&["plan"]).status(0).stdout_has("No changes");

    // Not TOML any more: reported with the file, and left as it is.
    std::fs::write(&config, "model = [\n").unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("cannot merge into `.codex/config.toml`: it is not valid TOML");
    let run = fleet.run(&["apply", "--yes"]);
    assert_ne!(run.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "model = [\n");
    std::fs::write(&config, &written).unwrap();

    fleet.run(&["down", "--remove-hooks"]).status(0);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), user);
}

#[test]
fn changing_an_agents_cli_moves_its_hooks() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    fleet.run(&["apply", "--yes"]).status(0);
    let claude = fleet.path().join("wc/.claude/settings.json");
    assert!(claude.exists());
    let body = std::fs::read_to_string(fleet.config()).unwrap().replacen(
        "cli = \"claude\"",
        "cli = \"gemini\"",
        1,
    );
    std::fs::write(fleet.config(), body).unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("- agent `c`: remove phoenix hooks from")
        .stdout_has("+ agent `c`: install hooks in");
    fleet.run(&["apply", "--yes"]).status(0);
    assert!(
        !claude.exists(),
        "a file holding only phoenix's entries goes away"
    );
    assert!(fleet.path().join("wc/.gemini/settings.json").exists());
    fleet.run(&["plan"]).status(0);
}

#[test]
fn unmergeable_hook_file_is_reported_and_left_alone() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let claude = fleet.path().join("wc/.claude/settings.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    std::fs::write(&claude, "{ \"model\": \"opus\", oops }").unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("cannot merge into `.claude/settings.json`: it is not valid JSON");
    fleet.run(&["apply", "--yes"]).status(1);
    assert_eq!(
        std::fs::read_to_string(&claude).unwrap(),
        "{ \"model\": \"opus\", oops }"
    );
}

#[test]
fn hooks_show_prints_what_apply_installs() {
    let fleet = Fleet::new();
    three_clis(&fleet, "guard_structured_files = true");
    let shown = fleet
        .run(&["hooks", "show", "--agent", "g", "--json"])
        .status(0)
        .json();
    let content = &shown["files"][0]["content"];
    assert!(
        shown["files"][0]["path"]
            .as_str()
            .unwrap()
            .ends_with("wg/.gemini/settings.json")
    );
    assert_eq!(
        content["hooks"]["BeforeTool"][0]["hooks"][0]["name"],
        "phoenix-pre-tool"
    );
    assert_eq!(
        content["hooks"]["SessionStart"][0]["hooks"][0]["timeout"],
        10000
    );

    fleet
        .run(&["hooks", "show", "--agent", "x"])
        .status(0)
        .stdout_has(".codex/hooks.json")
        .stdout_has("notify = [")
        .stdout_has("\"turn-complete\"")
        .stdout_has("trust hashes in $CODEX_HOME/config.toml");
    // Each CLI's own notes: the trust the wrapper records, and Codex's optional notify line.
    assert!(shown["codex_notify"].is_null(), "{shown}");
    let gemini = fleet
        .run(&["hooks", "show", "--agent", "g"])
        .status(0)
        .stdout();
    assert!(
        gemini.contains(
            "\n# Before each start the wrapper has Gemini CLI trust this workdir\n\
             # (~/.gemini/trustedFolders.json): it runs project hooks only in trusted folders.\n"
        ),
        "{gemini}"
    );
    assert!(!gemini.contains("notify ="), "{gemini}");
    let claude = fleet
        .run(&["hooks", "show", "--agent", "c"])
        .status(0)
        .stdout();
    // Claude Code is trusted the way its own dialog would (a first start in an untrusted
    // folder stopped at it).
    assert!(
        claude.contains("# Before each start the wrapper has Claude Code trust this workdir")
            && !claude.contains("notify ="),
        "{claude}"
    );
    let codex = fleet
        .run(&["hooks", "show", "--agent", "x", "--json"])
        .status(0)
        .json();
    assert_eq!(codex["codex_notify"][4], "turn-complete", "{codex}");
    assert_eq!(codex["codex_notify"][8], "codex", "{codex}");
    // And the MCP server entry apply writes in a file of its own: Codex's TOML, Claude's JSON.
    assert!(
        codex["files"][1]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with(".codex/config.toml")),
        "{codex}"
    );
    assert_eq!(
        codex["files"][1]["content"]["mcpServers"]["phoenix"]["args"][2], "mcp",
        "{codex}"
    );
    fleet
        .run(&["hooks", "show", "--agent", "x"])
        .status(0)
        .stdout_has(".codex/config.toml — phoenix's MCP server entry")
        .stdout_has("[mcp_servers.phoenix]");
    assert!(
        claude.contains(".mcp.json — phoenix's MCP server entry")
            && claude.contains("\"mcpServers\""),
        "{claude}"
    );
    let gemini_files = shown["files"].as_array().unwrap();
    assert_eq!(
        gemini_files.len(),
        1,
        "Gemini's server is in its settings file: {shown}"
    );
    assert!(content["mcpServers"]["phoenix"].is_object(), "{shown}");
    fleet
        .run(&["hooks", "show", "--agent", "d"])
        .status(0)
        .stdout_has("installs no hook file");

    fleet.run(&["apply", "--yes"]).status(0);
    let installed = settings(&fleet.path().join("wg/.gemini/settings.json"));
    assert_eq!(&installed, content);
}

#[test]
fn codex_notify_payload_as_argument_ends_the_turn() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    hook(&fleet, "prompt", "x", Some("codex"), r#"{"prompt":"go"}"#);
    let payload = r#"{"type":"agent-turn-complete","thread-id":"t-1","turn-id":"1","cwd":"/r","input-messages":["go"],"last-assistant-message":"done"}"#;
    let out = fleet
        .command(&[
            "hook",
            "turn-complete",
            "--agent",
            "x",
            "--cli",
            "codex",
            payload,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = state(&fleet, "x");
    assert_eq!(s["status"], "idle");
    assert_eq!(s["session_id"], "t-1");
}

#[test]
fn structured_file_guard_restores_a_broken_edit_and_tells_the_agent() {
    let fleet = Fleet::new();
    three_clis(&fleet, "guard_structured_files = true");
    let file = fleet.path().join("wc/config.toml");
    std::fs::write(&file, "name = \"ok\"\n").unwrap();
    let cwd = fleet.path().join("wc").display().to_string();
    let edit = json!({"session_id": "s", "cwd": cwd, "hook_event_name": "PreToolUse", "tool_name": "Edit",
                      "tool_input": {"file_path": file, "old_string": "\"ok\"", "new_string": "\"ok"}});
    hook(&fleet, "pre-tool", "c", Some("claude"), &edit.to_string()).valid_for("claude");
    std::fs::write(&file, "name = \"ok\n").unwrap();
    let mut post = edit.clone();
    post["hook_event_name"] = json!("PostToolUse");
    let run = hook(&fleet, "heartbeat", "c", Some("claude"), &post.to_string());
    run.valid_for("claude");
    let v: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(v["decision"], "block");
    assert!(
        v["reason"].as_str().unwrap().contains("invalid TOML"),
        "{v}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "name = \"ok\"\n");
    assert!(
        fleet
            .ops("c")
            .iter()
            .any(|o| o["event"] == "guard_restored")
    );

    // Gemini: relative path from the payload's cwd, feedback as appended context.
    let gfile = fleet.path().join("wg/data.json");
    std::fs::write(&gfile, "{\"a\": 1}").unwrap();
    let gcwd = fleet.path().join("wg").display().to_string();
    let write = json!({"cwd": gcwd, "hook_event_name": "BeforeTool", "tool_name": "write_file",
                       "tool_input": {"file_path": "data.json", "content": "{\"a\": "}});
    hook(&fleet, "pre-tool", "g", Some("gemini"), &write.to_string()).valid_for("gemini");
    std::fs::write(&gfile, "{\"a\": ").unwrap();
    let mut after = write.clone();
    after["hook_event_name"] = json!("AfterTool");
    after["tool_response"] = json!({"llmContent": "ok", "returnDisplay": ""});
    let run = hook(&fleet, "heartbeat", "g", Some("gemini"), &after.to_string());
    let v: Value = serde_json::from_str(run.valid_for("gemini").stdout.trim()).unwrap();
    assert!(
        v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .contains("restored")
    );
    assert_eq!(std::fs::read_to_string(&gfile).unwrap(), "{\"a\": 1}");
}

#[test]
fn demo_agent_gets_the_recovery_block_injected() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("demo", ""));
    hook(
        &fleet,
        "prompt",
        "demo",
        None,
        r#"{"prompt":"count the stars"}"#,
    );
    let mut child = fleet
        .command(&["demo-agent", "--interval", "100ms", "--agent", "demo"])
        .env("PHOENIX_CONFIG", fleet.config())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first step's heartbeat comes after it printed the context the hook gave it.
    wait_until(std::time::Duration::from_secs(10), "a tool call", || {
        !read_jsonl(&fleet.agent_dir("demo").join("tool_use.jsonl")).is_empty()
    });
    child.stdin.take().unwrap().write_all(b"exit\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[context injected by phoenix]"), "{stdout}");
    assert!(stdout.contains("Task: count the stars"), "{stdout}");
    let s = state(&fleet, "demo");
    assert_eq!(s["status"], "stopped", "demo's `exit` is a user exit");
    assert!(!read_jsonl(&fleet.agent_dir("demo").join("tool_use.jsonl")).is_empty());
}

/// `phoenix-hook`, what hook files call: the same arguments as `phoenix hook`, with or without
/// the `hook` word, and garbage on its command line still exits 0 with valid output.
#[test]
fn phoenix_hook_binary_takes_the_same_arguments_and_never_fails() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let hook_exe = Path::new(support::PHOENIX).with_file_name("phoenix-hook");
    let run = |args: &[&str], stdin: &str| {
        let mut child = std::process::Command::new(&hook_exe)
            .args(args)
            .current_dir(fleet.path())
            .env_remove("PHOENIX_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A hook that rejects its command line exits without reading: a closed pipe is fine.
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        child.wait_with_output().unwrap()
    };
    let config = fleet.config().display().to_string();
    let payload = r#"{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#;
    for args in [
        vec![
            "--config",
            config.as_str(),
            "hook",
            "heartbeat",
            "--agent",
            "c",
            "--cli",
            "claude",
        ],
        vec!["--config", config.as_str(), "heartbeat", "--agent", "c"],
    ] {
        let out = run(&args, payload);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
    }
    let calls = read_jsonl(&fleet.agent_dir("c").join("tool_use.jsonl"));
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0]["input_digest"].is_string());
    // A person asking for help gets it, on stdout.
    for ask in ["--help", "-h"] {
        let out = run(&[ask], "");
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("usage: phoenix-hook") && text.contains("heartbeat"),
            "{text}"
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run(&["--bogus", "x", "--agent"], "garbage");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot understand"));

    // A session start with a search index: handed to `phoenix` (SQLite is not in this
    // binary), it finds the earlier decision that matches the task.
    let mut save = fleet
        .command(&["handoff", "save", "c", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    save.stdin
        .take()
        .unwrap()
        .write_all(b"Current task: tune the ingest pipeline\nKey decision: the ingest queue stays on Redis\n")
        .unwrap();
    assert!(save.wait_with_output().unwrap().status.success());
    assert!(fleet.state_dir().join("index.db").exists());
    let start = r#"{"session_id":"s2","hook_event_name":"SessionStart","source":"startup"}"#;
    let out = run(
        &[
            "--config",
            config.as_str(),
            "session-start",
            "--agent",
            "c",
            "--cli",
            "claude",
        ],
        start,
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("relevant earlier decisions"), "{text}");
    assert!(text.contains("stays on Redis"), "{text}");

    // Under its wrapper (the agent and its state dir in the environment) the index is found
    // from the state dir, without reading phoenix.toml first: handed over all the same.
    let under_wrapper = |stdout: Stdio| {
        let mut child = std::process::Command::new(&hook_exe)
            .args(["--config", config.as_str(), "session-start", "--agent", "c"])
            .current_dir(fleet.path())
            .env_remove("PHOENIX_CONFIG")
            .env("PHOENIX_AGENT", "c")
            .env("PHOENIX_STATE_DIR", fleet.agent_dir("c"))
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(start.as_bytes())
            .unwrap();
        child
    };
    let out = under_wrapper(Stdio::piped()).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stays on Redis"), "{text}");

    // A CLI that closed its end before the answer: the hook still exits 0 (not killed by
    // SIGPIPE), with the session start recorded. Both binaries, with and without the index.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    for index in [true, false] {
        if !index {
            std::fs::remove_file(fleet.state_dir().join("index.db")).unwrap();
        }
        let ops_before = read_jsonl(&fleet.agent_dir("c").join("ops.jsonl")).len();
        let out = under_wrapper(Stdio::from(writer.try_clone().unwrap()))
            .wait_with_output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "index {index}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let ops = read_jsonl(&fleet.agent_dir("c").join("ops.jsonl"));
        assert!(
            ops[ops_before..]
                .iter()
                .any(|o| o["event"] == "session_start"),
            "index {index}: {ops:?}"
        );
    }
}

/// Someone's edit leaves phoenix.toml invalid while agents run: their hooks keep recording
/// (from the last valid copy the wrapper kept) and say why in hook_errors.jsonl.
#[test]
fn hooks_keep_recording_while_the_config_is_broken() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("d", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["d"]);
    let log = fleet.agent_dir("d").join("tool_use.jsonl");
    support::wait_until(std::time::Duration::from_secs(10), "tool calls", || {
        read_jsonl(&log).len() >= 2
    });
    assert!(fleet.state_dir().join("phoenix.toml.last-good").exists());
    std::fs::write(fleet.config(), "[fleet\nthis is not toml").unwrap();
    let before = read_jsonl(&log).len();
    support::wait_until(
        std::time::Duration::from_secs(10),
        "tool calls after the bad edit",
        || read_jsonl(&log).len() >= before + 3,
    );
    let errors = std::fs::read_to_string(fleet.agent_dir("d").join("hook_errors.jsonl")).unwrap();
    assert!(errors.contains("used the last valid copy"), "{errors}");
}

/// `hook`, failing the test unless the hook exits within `timeout` (it is killed then).
/// Output goes through files: a handoff process the hook leaves behind cannot hold a pipe.
#[track_caller]
fn hook_within(
    fleet: &Fleet,
    event: &str,
    agent: &str,
    cli: &str,
    payload: &str,
    timeout: std::time::Duration,
) -> HookRun {
    let out_path = fleet.path().join("hook.out");
    let err_path = fleet.path().join("hook.err");
    let mut child = fleet
        .command(&["hook", event, "--agent", agent, "--cli", cli])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hook {event} ({cli}) did not return within {timeout:?}: {payload}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    HookRun {
        code: status.code(),
        stdout: std::fs::read_to_string(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
    }
}

/// A payload naming a FIFO or `/dev/zero` as the transcript: every hook that reads it (Codex's
/// exit code after a shell call, Gemini's compression check, the failed-turn check at a stop)
/// returns at once, and the session start says why it did not record it.
#[test]
fn a_fifo_or_dev_zero_as_transcript_never_hangs_a_hook() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let fifo = fleet.path().join("transcript.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let quick = std::time::Duration::from_secs(3);
    for path in [fifo.display().to_string(), "/dev/zero".to_string()] {
        let shell = json!({"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                           "tool_use_id": "call_1", "tool_input": {"command": "ls"}, "tool_response": "ok",
                           "transcript_path": path, "cwd": fleet.path()});
        hook_within(&fleet, "heartbeat", "x", "codex", &shell.to_string(), quick)
            .valid_for("codex");
        let compress = json!({"session_id": "s1", "hook_event_name": "PreCompress", "trigger": "auto",
                              "transcript_path": path, "cwd": fleet.path()});
        hook_within(
            &fleet,
            "pre-compact",
            "g",
            "gemini",
            &compress.to_string(),
            quick,
        )
        .valid_for("gemini");
        for (cli, agent, name) in [("gemini", "g", "AfterAgent"), ("codex", "x", "Stop")] {
            let stop = json!({"session_id": "s1", "hook_event_name": name, "transcript_path": path,
                              "cwd": fleet.path()});
            hook_within(&fleet, "stop", agent, cli, &stop.to_string(), quick).valid_for(cli);
        }
        for (cli, agent) in [("claude", "c"), ("codex", "x"), ("gemini", "g")] {
            let start = json!({"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup",
                               "transcript_path": path, "cwd": fleet.path()});
            hook_within(
                &fleet,
                "session-start",
                agent,
                cli,
                &start.to_string(),
                quick,
            )
            .valid_for(cli);
            assert_eq!(state(&fleet, agent)["transcript_path"], Value::Null);
            let errors =
                std::fs::read_to_string(fleet.agent_dir(agent).join("hook_errors.jsonl")).unwrap();
            assert!(
                errors.contains(&format!("transcript_path `{path}` is not a regular file")),
                "{errors}"
            );
        }
    }
}

/// Nine levels of nine aliases (583 bytes): expanded, 9^9 nodes.
const ALIAS_BOMB: &str =
    "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
";

/// With the structured-file guard, an edit that writes a YAML alias bomb is checked without
/// expanding it (the heartbeat exits 0 at once, nothing to restore: it is valid YAML), one
/// nested deeper than the parsers go is kept (too deep to check), and a FIFO named `*.json` is neither snapshotted nor read.
#[test]
fn the_guard_survives_an_alias_bomb_deep_nesting_and_a_fifo() {
    let fleet = Fleet::new();
    three_clis(&fleet, "guard_structured_files = true");
    let quick = std::time::Duration::from_secs(3);
    let cwd = fleet.path().join("wc");
    let file = cwd.join("conf.yaml");
    let edit = |file: &Path| {
        json!({"session_id": "s", "cwd": cwd, "hook_event_name": "PreToolUse", "tool_name": "Write",
               "tool_input": {"file_path": file, "content": "…"}})
    };
    let post = |file: &Path| {
        let mut post = edit(file);
        post["hook_event_name"] = json!("PostToolUse");
        post.to_string()
    };
    std::fs::write(&file, "name: ok\n").unwrap();
    hook_within(
        &fleet,
        "pre-tool",
        "c",
        "claude",
        &edit(&file).to_string(),
        quick,
    )
    .valid_for("claude");
    std::fs::write(&file, ALIAS_BOMB).unwrap();
    let run = hook_within(&fleet, "heartbeat", "c", "claude", &post(&file), quick);
    run.valid_for("claude");
    assert_eq!(run.stdout.trim(), "", "nothing to report: {}", run.stdout);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), ALIAS_BOMB);

    std::fs::write(&file, "name: ok\n").unwrap();
    hook_within(
        &fleet,
        "pre-tool",
        "c",
        "claude",
        &edit(&file).to_string(),
        quick,
    )
    .valid_for("claude");
    // Valid YAML nested deeper than any parser goes is the agent's work: it is kept, and the
    // agent told it could not be checked (issue 31: it was reverted).
    let deep = "- ".repeat(200_000) + "x\n";
    std::fs::write(&file, &deep).unwrap();
    let run = hook_within(&fleet, "heartbeat", "c", "claude", &post(&file), quick);
    run.valid_for("claude");
    assert!(
        run.stdout.contains("nested too deeply to check"),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), deep);

    let fifo = cwd.join("pipe.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    hook_within(
        &fleet,
        "pre-tool",
        "c",
        "claude",
        &edit(&fifo).to_string(),
        quick,
    )
    .valid_for("claude");
    hook_within(&fleet, "heartbeat", "c", "claude", &post(&fifo), quick).valid_for("claude");
}

/// A startup template override with nested loops: the session start returns well within a
/// second with the built-in context, hook_errors.jsonl says why, and `validate` names it.
#[test]
fn an_endless_template_override_falls_back_to_the_builtin_at_once() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    fleet
        .run(&["loop", "add", "c", "oauth", "Schwab OAuth not set up"])
        .status(0);
    let start = json!({"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup",
                       "cwd": fleet.path()});
    let builtin = hook(
        &fleet,
        "session-start",
        "c",
        Some("claude"),
        &start.to_string(),
    );
    let expected = builtin.context().expect("a startup context");
    assert!(expected.contains("Schwab OAuth"), "{expected}");
    std::fs::create_dir_all(fleet.path().join("templates")).unwrap();
    std::fs::write(
        fleet.path().join("templates/startup.md.j2"),
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{{ b }}{% endfor %}{% endfor %}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let run = hook_within(
        &fleet,
        "session-start",
        "c",
        "claude",
        &start.to_string(),
        std::time::Duration::from_secs(5),
    );
    let took = started.elapsed();
    run.valid_for("claude");
    assert!(took < std::time::Duration::from_secs(1), "took {took:?}");
    assert_eq!(run.context().as_deref(), Some(expected.as_str()));
    let errors = std::fs::read_to_string(fleet.agent_dir("c").join("hook_errors.jsonl")).unwrap();
    assert!(errors.contains("templates/startup.md.j2"), "{errors}");
    assert!(errors.contains("ran out of fuel"), "{errors}");
    fleet
        .run_within(&["validate"], std::time::Duration::from_secs(5))
        .status(1)
        .stderr_has("templates/startup.md.j2")
        .stderr_has("ran out of fuel");
}

/// Save a handoff for `agent` through the CLI; returns its id.
fn save_handoff(fleet: &Fleet, agent: &str, text: &str) -> String {
    let mut save = fleet
        .command(&["handoff", "save", agent, "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    save.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = save.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["id"]
        .as_str()
        .or_else(|| v["handoff"]["id"].as_str())
        .unwrap_or_else(|| panic!("no id in {v}"))
        .to_string()
}

/// Links another user planted in the state dir (as ops.jsonl, state.json, a handoff) are
/// never followed: their targets stay as they were, every hook still answers and exits 0, and
/// the refusal is recorded.
#[test]
fn links_planted_in_the_state_dir_are_not_followed() {
    use std::os::unix::fs::symlink;
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    fleet
        .run(&["loop", "add", "c", "keep-me", "a loop that must survive"])
        .status(0);
    let id = save_handoff(&fleet, "c", "Current task: the real task\n");
    let dir = fleet.agent_dir("c");
    let victims = tempfile::tempdir().unwrap();
    let target = |name: &str| {
        let p = victims.path().join(name);
        std::fs::write(&p, format!("root-only {name}\n")).unwrap();
        p
    };
    let planted = [
        (dir.join("ops.jsonl"), target("ops")),
        (dir.join("state.json"), target("state")),
        (dir.join("tool_use.jsonl"), target("tool_use")),
        (
            dir.join("handoffs").join(format!("{id}.md")),
            target("handoff"),
        ),
    ];
    for (link, to) in &planted {
        let _ = std::fs::remove_file(link);
        symlink(to, link).unwrap();
    }
    let start = r#"{"session_id":"s9","source":"startup"}"#;
    for (event, payload) in [
        ("session-start", start),
        ("heartbeat", r#"{"session_id":"s9","tool_name":"Bash"}"#),
        ("stop", r#"{"session_id":"s9"}"#),
    ] {
        let run = hook(&fleet, event, "c", Some("claude"), payload);
        run.valid_for("claude");
        assert!(
            !run.stdout.contains("root-only"),
            "{event}: a target's content reached the agent: {}",
            run.stdout
        );
    }
    for (_, to) in &planted {
        let name = to.file_name().unwrap().to_string_lossy();
        assert_eq!(
            std::fs::read_to_string(to).unwrap(),
            format!("root-only {name}\n"),
            "{} was written through a link",
            to.display()
        );
    }
    // The state came back from its last good copy, in a regular file.
    let s = state(&fleet, "c");
    assert_eq!(s["open_loops"][0]["id"], "keep-me");
    for f in ["state.json", "ops.jsonl", "tool_use.jsonl"] {
        let meta = std::fs::symlink_metadata(dir.join(f)).unwrap();
        assert!(meta.file_type().is_file(), "{f}");
    }
    let critical = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let events: Vec<&str> = critical
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(events.contains(&"state_corrupt"), "{events:?}");
    assert!(events.contains(&"state_file_refused"), "{events:?}");
    assert!(
        critical
            .iter()
            .any(|e| e["reason"].as_str().unwrap_or("").contains("symbolic link")),
        "{critical:?}"
    );
}

/// Every file phoenix writes under the state dir is 0600 and every directory 0700, after a
/// realistic run: a demo fleet applied, hooks, handoffs saved, a search, a reindex, a
/// watchdog pass, a stop.
#[test]
fn every_state_file_is_private_after_a_realistic_run() {
    use std::os::unix::fs::PermissionsExt;
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        Fleet::demo_agent("a", ""),
        Fleet::demo_agent("b", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["a", "b"]);
    // A crash: the wrapper records it (restarts.json, its lock, a crash record).
    support::kill9(pids[1]);
    wait_until(
        std::time::Duration::from_secs(20),
        "the crash is recorded",
        || fleet.agent_dir("b").join("restarts.json").exists(),
    );
    // A corrupt ledger: rolled back, kept aside, a critical event.
    save_handoff(&fleet, "b", "Current task: first\n");
    std::fs::write(fleet.agent_dir("b").join("ledger.json"), b"{garbage").unwrap();
    for (event, payload) in [
        ("session-start", r#"{"session_id":"s1","source":"startup"}"#),
        ("heartbeat", r#"{"session_id":"s1","tool_name":"Bash"}"#),
        (
            "tool-error",
            r#"{"session_id":"s1","tool_name":"Bash","error":"x"}"#,
        ),
        ("pre-compact", r#"{"session_id":"s1"}"#),
        ("stop", r#"{"session_id":"s1"}"#),
    ] {
        hook(&fleet, event, "a", Some("claude"), payload);
    }
    fleet.run(&["loop", "add", "a", "l1", "a loop"]).status(0);
    fleet.run(&["resolve", "a", "l1", "done"]).status(0);
    fleet.run(&["resolve", "a", "l1", "done"]).status(0);
    save_handoff(
        &fleet,
        "a",
        "Current task: modes\nKey decision: private files\n",
    );
    save_handoff(&fleet, "b", "Current task: more\n");
    fleet
        .run(&["handoff", "search", "modes", "--json"])
        .status(0);
    fleet.run(&["reindex"]).status(0);
    fleet.run(&["watchdog", "--once"]);
    fleet.run(&["restart", "b", "--yes"]);
    fleet.run(&["stop", "a"]);

    let mut loose = Vec::new();
    let mut seen = 0;
    let mut stack = vec![fleet.state_dir()];
    while let Some(dir) = stack.pop() {
        let mode = std::fs::symlink_metadata(&dir)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        if mode != 0o700 {
            loose.push(format!("{:o} {}/", mode, dir.display()));
        }
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
                continue;
            }
            seen += 1;
            let mode = meta.permissions().mode() & 0o777;
            if mode != 0o600 {
                loose.push(format!("{:o} {}", mode, entry.path().display()));
            }
        }
    }
    assert!(seen > 20, "a realistic run writes many files: {seen}");
    assert!(loose.is_empty(), "not private:\n{}", loose.join("\n"));
}

/// A resolve retried (the operator saw no answer) logs the loop once; a resolve interrupted
/// between its writes (journaled in `resolve.pending.json`) is finished by the next hook.
#[test]
fn a_retried_or_interrupted_resolve_logs_the_loop_once() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    fleet.run(&["loop", "add", "c", "l1", "first"]).status(0);
    fleet.run(&["loop", "add", "c", "l2", "second"]).status(0);
    fleet.run(&["resolve", "c", "l1", "done"]).status(0);
    fleet.run(&["resolve", "c", "l1", "done"]).status(0);
    let resolved = || read_jsonl(&fleet.agent_dir("c").join("resolved.jsonl"));
    assert_eq!(resolved().len(), 1, "{:?}", resolved());

    // Killed after its first write: the journal and the log line are there, state.json still
    // has the loop open (what `kill -9` between the writes left, 43 times in the storm).
    let dir = fleet.agent_dir("c");
    // Now: resolved items older than the retention are dropped from state.json (a fixed
    // date made this test fail a week after it was written).
    let ts = jiff::Timestamp::now().to_string();
    let ts = ts.as_str();
    std::fs::write(
        dir.join("resolve.pending.json"),
        json!({"id": "l2", "reason": "shipped", "ts": ts, "text": "second"}).to_string(),
    )
    .unwrap();
    let line = json!({"id": "l2", "reason": "shipped", "ts": ts, "agent": "c", "text": "second"});
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("resolved.jsonl"))
        .unwrap();
    writeln!(log, "{line}").unwrap();
    assert_eq!(state(&fleet, "c")["open_loops"][0]["id"], "l2");

    hook(&fleet, "heartbeat", "c", Some("claude"), "{}").valid_for("claude");
    let s = state(&fleet, "c");
    assert_eq!(s["open_loops"], json!([]), "{s}");
    assert!(
        s["resolved"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "l2")
    );
    fleet.run(&["resolve", "c", "l2", "shipped"]).status(0);
    let lines = resolved();
    assert_eq!(
        lines.iter().filter(|l| l["id"] == "l2").count(),
        1,
        "{lines:?}"
    );
    assert!(!dir.join("resolve.pending.json").exists());
}

/// A state dir another user owns is refused, with its path and a hint: the hook answers and
/// exits 0 without writing there, and commands fail with the same clear error. (Run as root:
/// the dir is handed to `nobody`; otherwise there is no second user to hand it to.)
#[test]
fn a_state_dir_owned_by_another_user_is_refused() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    hook(&fleet, "heartbeat", "c", Some("claude"), "{}").valid_for("claude");
    let root = fleet.state_dir();
    let listing = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = walk(dir)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect();
        v.sort();
        v
    };
    let before = listing(&root);
    std::os::unix::fs::chown(&root, Some(65534), Some(65534)).unwrap();
    for event in ["session-start", "heartbeat", "stop"] {
        let run = hook_with_env(
            &fleet,
            event,
            "c",
            Some("claude"),
            br#"{"session_id":"s"}"#,
            &[("PHOENIX_STATE_DIR", fleet.agent_dir("c").to_str().unwrap())],
        );
        run.valid_for("claude");
        assert!(run.stderr.contains("owned by uid 65534"), "{}", run.stderr);
        assert!(
            run.stderr.contains(&root.display().to_string()),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    }
    assert_eq!(listing(&root), before, "nothing was written into it");
    fleet
        .run(&["loop", "add", "c", "x", "y"])
        .status(1)
        .stderr_has("owned by uid 65534");
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// A FIFO where a CLI's settings file goes (the agent can write its workdir): `plan` and
/// `apply` say so at once instead of waiting on it forever.
#[test]
fn a_fifo_as_a_settings_file_is_reported_not_waited_on() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let settings = fleet.path().join("wc/.claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    nix::unistd::mkfifo(&settings, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let quick = std::time::Duration::from_secs(5);
    let plan = fleet.run_within(&["plan"], quick);
    assert!(
        plan.stdout().contains("is not a regular file (a FIFO)"),
        "{}\n{}",
        plan.stdout(),
        plan.stderr()
    );
    fleet.run_within(&["apply", "--yes"], quick).status(1);
}

/// An agent that can write the config's directory puts a FIFO in place of phoenix.toml: every
/// hook loads the config, and reading a FIFO waits for a writer for ever. The hook answers at
/// once (exit 0, valid output) and `validate` says what the file is.
#[test]
fn a_fifo_in_place_of_the_config_never_hangs_a_hook_or_a_command() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let config = fleet.path().join("phoenix.toml");
    std::fs::remove_file(&config).unwrap();
    nix::unistd::mkfifo(&config, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    fleet
        .run_within_input(
            &["hook", "heartbeat", "--agent", "c", "--cli", "claude"],
            br#"{"session_id":"s","tool_name":"Bash"}"#,
            std::time::Duration::from_secs(5),
        )
        .status(0);
    fleet
        .run_within(&["validate"], std::time::Duration::from_secs(5))
        .status(1)
        .stderr_has("is not a regular file (a FIFO)");
}

#[test]
fn the_call_in_flight_is_noted_before_it_runs_and_forgotten_when_it_ends_or_the_turn_does() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let in_flight = fleet.agent_dir("c").join("in_flight.json");
    let pre = r#"{"session_id":"s1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"make deploy"}}"#;
    hook(&fleet, "pre-tool", "c", Some("claude"), pre).valid_for("claude");
    let noted: Value = serde_json::from_slice(&std::fs::read(&in_flight).unwrap()).unwrap();
    assert_eq!(noted["tool"], "Bash");
    assert_eq!(noted["input"], "make deploy");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&in_flight).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let post = r#"{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"make deploy"},"tool_response":{"stdout":"ok"}}"#;
    hook(&fleet, "heartbeat", "c", Some("claude"), post).valid_for("claude");
    assert!(!in_flight.exists(), "the call ended");
    // A call that never reports back (denied, say) ends with the turn.
    hook(&fleet, "pre-tool", "c", Some("claude"), pre).valid_for("claude");
    assert!(in_flight.exists());
    let stop = r#"{"session_id":"s1","hook_event_name":"Stop"}"#;
    hook(&fleet, "stop", "c", Some("claude"), stop).valid_for("claude");
    assert!(!in_flight.exists(), "the turn ended");
}

/// `status AGENT` says what the next start really is: all three CLIs resume their recorded
/// session with their own resume form (it said "a fresh session (no `resume_command`)" for
/// each of them), and a fresh start says why it is fresh.
#[test]
fn status_says_what_the_next_start_of_each_cli_really_is() {
    let fleet = Fleet::new();
    three_clis(&fleet, "");
    let next = |agent: &str| -> String {
        let out = fleet.run(&["status", agent]).status(0).stdout();
        let line = out
            .lines()
            .find(|l| l.starts_with("Restart:"))
            .unwrap_or_else(|| panic!("no Restart line in {out}"))
            .to_string();
        line.split_once("next start: ").unwrap().1.to_string()
    };
    let json_next = |agent: &str| -> Value {
        fleet.run(&["status", agent, "--json"]).status(0).json()["agents"][0]["next_start"].clone()
    };
    for (cli, agent, workdir, resume) in [
        ("claude", "c", "wc", "sleep 100000 --resume s-c"),
        ("codex", "x", "wx", "s-x"),
        ("gemini", "g", "wg", "sleep 100000 --resume s-g"),
    ] {
        assert_eq!(
            next(agent),
            "a fresh session (`sleep 100000`): no session recorded yet",
            "{cli}"
        );
        let cwd = fleet.path().join(workdir);
        let transcript = cwd.join("transcript.jsonl");
        std::fs::write(
            &transcript,
            "{\"type\": \"user\", \"message\": {\"role\": \"user\", \"content\": \"fix it\"}}\n",
        )
        .unwrap();
        let id = format!("s-{agent}");
        let payload = json!({
            "session_id": id, "cwd": cwd, "hook_event_name": "SessionStart",
            "source": "startup", "transcript_path": transcript,
        });
        hook(
            &fleet,
            "session-start",
            agent,
            Some(cli),
            &payload.to_string(),
        )
        .valid_for(cli);
        let said = next(agent);
        assert!(
            said.starts_with(&format!("resumes session {id} (`")),
            "{cli}: {said}"
        );
        assert!(said.contains(resume), "{cli}: {said}");
        let j = json_next(agent);
        assert_eq!(j["mode"], "resume", "{cli}: {j}");
        assert_eq!(j["session_id"], id.as_str(), "{cli}: {j}");
        // Its transcript deleted: nothing to resume, and status says so (not "no turn").
        std::fs::remove_file(&transcript).unwrap();
        let said = next(agent);
        assert_eq!(
            said,
            format!(
                "a fresh session (`sleep 100000`): session {id}: its transcript `{}` is gone",
                transcript.display()
            ),
            "{cli}"
        );
        assert_eq!(json_next(agent)["mode"], "fresh", "{cli}");
    }
    // A custom CLI without `resume_command` has no resume form: said so once it has a session.
    let payload = json!({"session_id": "s-d", "cwd": fleet.path().join("wd")});
    hook(&fleet, "session-start", "d", None, &payload.to_string());
    assert_eq!(
        next("d"),
        "a fresh session (`sleep 100000`): `custom` has no known resume form (set `resume_command`)"
    );
}
