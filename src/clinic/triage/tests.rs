//! Triage against real files: transcripts of each CLI, ops.jsonl, tool_use.jsonl, state.json
//! and captured panes.

use serde_json::json;

use super::*;

use crate::state::testing::temp_agent as agent_dir;

/// Triage of the latest session of the agent in `dir`.
fn triage_latest(dir: &AgentDir, transcript: Option<PathBuf>, output: Option<&str>) -> Trauma {
    triage(&TriageInput {
        agent: AgentInfo::default(),
        dir,
        exit: None,
        transcript,
        output: output.map(str::to_string),
        session: Session::Latest,
    })
}

/// Ops as ops.jsonl would hold them.
fn lines(ops: &[Value]) -> Vec<op::Line> {
    op::parse(&ops.iter().map(|o| format!("{o}\n")).collect::<String>())
}

#[test]
fn claude_transcript_gives_prompt_errors_and_tools() {
    let records = vec![
        json!({"type": "user", "message": {"role": "user", "content": "Refactor the parser"}}),
        json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "Reading the parser first."},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {}},
        ]}}),
        json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "fn parse() {}"},
        ]}}),
        json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t2", "name": "WebBrowse", "input": {}},
        ]}}),
        json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
             "content": "<tool_use_error>Error: No such tool available: WebBrowse</tool_use_error>"},
        ]}}),
        json!({"type": "assistant", "isApiErrorMessage": true, "message": {"role": "assistant",
            "content": [{"type": "text", "text": "Prompt is too long"}]}}),
    ];
    let facts = transcript_facts(&records);
    assert_eq!(facts.last_prompt.as_deref(), Some("Refactor the parser"));
    assert_eq!(facts.tool_calls.len(), 2);
    assert_eq!(facts.tool_calls[1].tool, "WebBrowse");
    assert!(!facts.tool_calls[1].ok);
    assert_eq!(
        facts.errors.last().unwrap(),
        &("api_error".to_string(), "Prompt is too long".to_string())
    );
}

#[test]
fn codex_and_gemini_errors_are_found() {
    let codex = vec![
        json!({"type": "event_msg", "payload": {"type": "user_message", "message": "fix it"}}),
        json!({"type": "event_msg", "payload": {"type": "error", "message": "stream disconnected: 503"}}),
    ];
    let facts = transcript_facts(&codex);
    assert_eq!(facts.last_prompt.as_deref(), Some("fix it"));
    assert_eq!(facts.errors[0].1, "stream disconnected: 503");
    let full = vec![
        json!({"type": "event_msg", "payload": {"type": "task_complete", "error": {
            "message": "Codex ran out of room in the model's context window.",
            "codex_error_info": "context_window_exceeded"}}}),
        json!({"type": "event_msg", "payload": {"type": "task_complete", "error": null}}),
    ];
    assert_eq!(
        transcript_facts(&full).errors,
        [(
            "api_error".to_string(),
            "context_window_exceeded: Codex ran out of room in the model's context window."
                .to_string()
        )]
    );
    let gemini = vec![json!({"type": "error", "content": "[API Error: 429 quota]"})];
    assert_eq!(transcript_facts(&gemini).errors.len(), 1);
}

/// pi 0.73's session records: the prompt, a bash call that failed, the failed model call.
#[test]
fn pi_records_are_read() {
    let pi = vec![
        json!({"type": "session", "version": 3, "id": "01a2", "cwd": "/w"}),
        json!({"type": "message", "message": {"role": "user",
            "content": [{"type": "text", "text": "Refactor the parser"}]}}),
        json!({"type": "message", "message": {"role": "assistant", "stopReason": "toolUse",
            "content": [{"type": "toolCall", "id": "toolu_1", "name": "bash",
                         "arguments": {"command": "ls /nope"}}]}}),
        json!({"type": "message", "message": {"role": "toolResult", "toolCallId": "toolu_1",
            "toolName": "bash", "isError": true,
            "content": [{"type": "text", "text": "ls: /nope: No such file\n\nCommand exited with code 2"}]}}),
        json!({"type": "message", "message": {"role": "assistant", "stopReason": "error",
            "content": [], "errorMessage": "400 prompt is too long"}}),
    ];
    let facts = transcript_facts(&pi);
    assert_eq!(facts.last_prompt.as_deref(), Some("Refactor the parser"));
    assert_eq!(facts.tool_calls.len(), 1);
    assert_eq!(facts.tool_calls[0].tool, "bash");
    assert!(!facts.tool_calls[0].ok);
    assert_eq!(
        facts.errors.last().unwrap(),
        &(
            "api_error".to_string(),
            "400 prompt is too long".to_string()
        )
    );
}

/// Copilot CLI 1.0.102 ends a turn that failed for good with `session.error` in its
/// events.jsonl (no Stop hook): the Clinic reads the error there, as for Codex.
#[test]
fn copilot_session_errors_are_found() {
    let copilot = vec![
        json!({"type": "user.message", "data": {"content": "migrate the tables"}}),
        json!({"type": "hook.start", "data": {"hookType": "errorOccurred"}}),
        json!({"type": "session.error", "data": {"errorType": "query", "statusCode": 400,
            "message": "400 This model's maximum context length is 128000 tokens."}}),
    ];
    let facts = transcript_facts(&copilot);
    assert_eq!(facts.last_prompt.as_deref(), Some("migrate the tables"));
    assert_eq!(
        facts.errors,
        [(
            "api_error".to_string(),
            "400 This model's maximum context length is 128000 tokens.".to_string()
        )]
    );
}

#[test]
fn triage_without_any_file_still_says_something() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
    let trauma = triage_latest(&dir, Some(tmp.path().join("missing.jsonl")), None);
    assert_eq!(trauma.error_type, "unknown");
    assert!(trauma.tool_calls.is_empty());
}

#[test]
fn exits_are_read_from_ops_and_crashes_counted() {
    let now = crate::state::now_rfc3339();
    let ops = vec![
        json!({"event": "agent_exit", "ts": now, "code": 1, "runtime_ms": 5}),
        json!({"event": "agent_start", "ts": now}),
        json!({"event": "agent_exit", "ts": now, "code": 2, "runtime_ms": 7}),
    ];
    let exit = exit_from_ops(&lines(&ops), &AgentInfo::default()).unwrap();
    assert_eq!(exit.code, Some(2));
    assert_eq!(exit.crashes_in_window, 2);
    assert_eq!(exit.runtime_ms, 7);
}

#[test]
fn pane_evidence_is_only_what_the_current_session_wrote() {
    let fresh = "[phoenix] starting `a` (fresh session)";
    let resumed = "[phoenix] starting `a`, resuming session s1";
    // An old overload from an earlier session, then a new start: the second session
    // printed nothing yet.
    let screen =
        format!("{fresh}\nAPI Error: 529 overloaded\n[phoenix] `a` ended (crash)\n{resumed}\n");
    assert_eq!(this_session(&screen, "a"), "");
    let screen = format!("old 429\n{resumed}\nSegmentation fault\n");
    assert_eq!(this_session(&screen, "a"), "Segmentation fault\n");
    // The banner scrolled out of the capture: every captured line is this session's.
    assert_eq!(this_session("line 1\nline 2", "a"), "line 1\nline 2");
    // Padding tmux may add does not hide the banner.
    let screen = format!("old 529\n  {fresh}   \nnew");
    assert_eq!(this_session(&screen, "a"), "new");
    // A CLI killed mid-screen leaves its prompt on the line the wrapper prints on.
    let screen = format!("old 529\n❯ {resumed}\nnew");
    assert_eq!(this_session(&screen, "a"), "new");
    // Another agent's banner, or text that merely quotes one, is no start of this one.
    let screen = "[phoenix] starting `ab` (fresh session)\nout";
    assert_eq!(this_session(screen, "a"), screen);
    let screen = format!("echo '{fresh}'\nout");
    assert_eq!(this_session(&screen, "a"), screen);
}

#[test]
fn the_session_diagnosed_is_the_latest_or_the_last_exited() {
    let at = |m: u8| format!("2026-01-01T10:{m:02}:00Z");
    let ops = vec![
        json!({"event": "agent_start", "ts": at(1), "spawned": "2026-01-01T10:00:59Z"}),
        json!({"event": "agent_exit", "ts": at(2)}),
        json!({"event": "agent_start", "ts": at(3)}),
        json!({"event": "prompt", "ts": at(4)}),
    ];
    let ops = lines(&ops);
    let ts = |s: Option<jiff::Timestamp>| s.map(|t| t.to_string());
    let (start, end) = session_window(&ops, Session::Latest);
    assert_eq!((ts(start), ts(end)), (Some(at(3)), None));
    let (start, end) = session_window(&ops, Session::LastExited);
    assert_eq!(
        (ts(start), ts(end)),
        (Some("2026-01-01T10:00:59Z".into()), Some(at(2)))
    );
    assert_eq!(session_window(&ops[..1], Session::LastExited), (None, None));
    assert_eq!(session_window(&[], Session::Latest), (None, None));
    // The last exited session's records: neither before its start nor after its end.
    let window = session_window(&ops, Session::LastExited);
    assert!(!in_session(Some("2026-01-01T10:00:30Z"), window));
    assert!(in_session(Some("2026-01-01T10:01:30Z"), window));
    assert!(!in_session(Some("2026-01-01T10:03:30Z"), window));
    assert!(in_session(None, window));
    assert!(in_session(Some("not a time"), window));
}

#[test]
fn a_resumed_clis_replay_of_its_conversation_is_not_its_output() {
    let earlier = texts(
        [
            json!({"type": "assistant", "message": {"content": [{"type": "text",
            "text": "API Error: 529 {\"type\":\"overloaded_error\"}"}]}}),
        ]
        .iter(),
    );
    let screen = "● API Error: 529 {\"type\":\"overloaded_error\"}\n  ⎿  ok\nSegmentation fault (core dumped)";
    assert_eq!(
        without_replay(screen, &earlier),
        "  ⎿  ok\nSegmentation fault (core dumped)"
    );
    assert_eq!(without_replay(screen, ""), screen);
}

#[test]
fn evidence_from_before_the_session_started_is_not_its_error() {
    let (tmp, dir) = agent_dir();
    let old = "2026-01-01T10:00:00.000Z";
    let new = "2026-01-01T10:05:00.000Z";
    // The resumed session appended to the transcript of the one that was overloaded.
    let transcript = tmp.path().join("t.jsonl");
    let lines = [
        json!({"type": "assistant", "timestamp": old, "isApiErrorMessage": true,
               "message": {"role": "assistant", "content": [{"type": "text",
               "text": "API Error: 529 {\"type\":\"overloaded_error\"}"}]}}),
        json!({"type": "user", "timestamp": new,
               "message": {"role": "user", "content": "go on"}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&transcript, text).unwrap();
    std::fs::write(
        dir.file("tool_use.jsonl"),
        format!(
            "{}\n",
            json!({"tool": "Bash", "ok": false, "ts": old, "error": "429"})
        ),
    )
    .unwrap();
    let input = |start: &str| {
        std::fs::write(
            dir.file(OPS_LOG),
            format!(
                "{}\n{}\n",
                json!({"event": "agent_start", "ts": start}),
                json!({"event": "agent_exit", "ts": new, "code": 1}),
            ),
        )
        .unwrap();
        triage_latest(&dir, Some(transcript.clone()), None)
    };
    let trauma = input("2026-01-01T10:04:00.000Z");
    assert_eq!(trauma.error_type, "crash", "{trauma:?}");
    assert!(!trauma.error_message.contains("529"), "{trauma:?}");
    // The same files, read for the session that did write them, still show the error.
    let trauma = input("2026-01-01T09:59:00.000Z");
    assert_eq!(trauma.error_type, "api_error");
    assert!(trauma.error_message.contains("529"));
}

#[test]
fn a_failed_turn_of_another_session_is_not_the_crashs_error() {
    let (_tmp, dir) = agent_dir();
    let failed = "2026-01-01T10:00:00.000Z";
    std::fs::write(
        dir.file(OPS_LOG),
        format!(
            "{}\n{}\n",
            json!({"event": "agent_start", "ts": "2026-01-01T10:04:00.000Z"}),
            json!({"event": "agent_exit", "ts": "2026-01-01T10:05:00.000Z", "code": 1}),
        ),
    )
    .unwrap();
    let diagnose = |state: Value| {
        std::fs::write(dir.file(crate::state::STATE), state.to_string()).unwrap();
        triage_latest(&dir, None, None)
    };
    let error = "invalid_request: prompt is too long";
    // The fresh session `s2` crashed; `s1` had run out of context before it.
    let t = diagnose(json!({"session_id": "s2", "last_error": error,
        "last_error_session": "s1", "last_error_at": failed}));
    assert_eq!(t.error_type, "crash", "{t:?}");
    // The same session resumed (same id), crashing after the error was recorded.
    let t = diagnose(json!({"session_id": "s1", "last_error": error,
        "last_error_session": "s1", "last_error_at": failed}));
    assert_eq!(t.error_type, "crash", "{t:?}");
    // Written before errors carried their session: nothing tells whose it was.
    let t = diagnose(json!({"session_id": "s1", "last_error": error}));
    assert_eq!(t.error_type, "crash", "{t:?}");
    // The session that failed is the one diagnosed: its error is the evidence.
    let t = diagnose(json!({"session_id": "s1", "last_error": error,
        "last_error_session": "s1", "last_error_at": "2026-01-01T10:04:30.000Z"}));
    assert_eq!(t.error_type, "tool_error", "{t:?}");
    assert!(t.error_message.contains("prompt is too long"), "{t:?}");
}

#[test]
fn gemini_model_not_found_dialog_on_screen_is_the_error() {
    let (_tmp, dir) = agent_dir();
    let screen = " > migrate the billing tables\n\
        │ It seems like you don't have access to gemini-3.8-flash.                 │\n\
        │ Your admin might have disabled the access. Contact them to enable the    │\n\
        │ ● 1. Keep trying                                                         │\n\
        │   2. Stop                                                                │\n";
    let t = triage_latest(&dir, None, Some(screen));
    assert!(
        t.error_message.contains("have access to gemini-3.8-flash"),
        "{t:?}"
    );
    let d = crate::policy::builtin::diagnose(&t);
    assert_eq!(d.root_cause, crate::policy::RootCause::ModelUnavailable);
    assert!(d.explanation.contains("`gemini-3.8-flash`"), "{d:?}");
}

/// The model's words on the screen are no error its CLI reported: "prompt is too long" in an
/// answer (the transcript holds it) does not make a crash a full context; the CLI's own line
/// after it is the evidence.
#[test]
fn the_models_words_on_the_pane_are_not_the_error() {
    let (tmp, dir) = agent_dir();
    let transcript = tmp.path().join("t.jsonl");
    let said = "I fixed the error: the parser failed when the prompt is too long.";
    std::fs::write(
        &transcript,
        format!(
            "{}\n",
            json!({"type": "assistant", "message": {"role": "assistant",
                   "content": [{"type": "text", "text": said}]}})
        ),
    )
    .unwrap();
    let pane = format!("● {said}\nSegmentation fault (core dumped)\n");
    let t = triage_latest(&dir, Some(transcript.clone()), Some(&pane));
    assert!(!t.error_message.contains("too long"), "{t:?}");
    let d = crate::policy::builtin::diagnose(&t);
    assert_ne!(
        d.root_cause,
        crate::policy::RootCause::ContextLengthExceeded
    );
    // Without a transcript that holds it, the line is the CLI's.
    let t = triage_latest(&dir, None, Some(&pane));
    assert!(t.error_message.contains("too long"), "{t:?}");
}
