//! Recovery that keeps every conversation, with the real Claude Code CLI against the scripted
//! model server: a resume killed before it came up is resumed again, a resume the CLI refuses
//! is given up after one try, a session killed idle at its prompt gets no "continue", and the
//! Clinic's context survives a compaction of the session it replaces.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1`.

use crate::real_cli::{enabled, start_claude, turn_requests, type_prompt};
use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::model_server::{ModelServer, Turn};

const WAIT: Duration = Duration::from_secs(60);

fn count(fleet: &support::Fleet, event: &str) -> usize {
    fleet
        .ops("cc")
        .iter()
        .filter(|o| o["event"] == event)
        .count()
}

fn nth(fleet: &support::Fleet, event: &str, n: usize) -> Value {
    fleet
        .ops("cc")
        .into_iter()
        .filter(|o| o["event"] == event)
        .nth(n)
        .unwrap_or_else(|| panic!("no {event} #{n}"))
}

fn state(dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap()
}

/// The session ids phoenix will never resume.
fn discarded(dir: &std::path::Path) -> Vec<String> {
    let ledger: Value = std::fs::read(dir.join("restarts.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    ledger["discarded_sessions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One finished turn of `plan the release`, in the transcript too (Claude Code writes it
/// behind the turn); the session's id and transcript.
fn one_turn_done(
    fleet: &support::Fleet,
    server: &ModelServer,
) -> (std::path::PathBuf, String, String) {
    let dir = start_claude(fleet, server, "", "plan the release");
    support::wait_until(WAIT, "the first turn", || {
        count(fleet, "turn_complete") == 1
    });
    let id = state(&dir)["session_id"].as_str().unwrap().to_string();
    let transcript = state(&dir)["transcript_path"].as_str().unwrap().to_string();
    support::wait_until(WAIT, "the turn in the transcript", || {
        std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("Planned."))
    });
    (dir, id, transcript)
}

/// Issue 32 items 8 and 11. Claude Code killed while idle at its prompt (its turn done) is
/// resumed with nothing typed into it; that resume, killed before its session-start hook
/// fired, showed no life, and is still the conversation: the next start resumes the same id,
/// which is on no never-resume list.
#[test]
fn real_claude_resume_killed_before_it_came_up_is_resumed_again_and_told_nothing() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![Turn::text("Planned."), Turn::text("Anything else?")]);
    let (dir, id, _) = one_turn_done(&fleet, &server);
    let first = nth(&fleet, "agent_start", 0);
    support::kill9(first["pid"].as_u64().unwrap() as u32);
    // The resume is killed as soon as it is spawned: long before Claude Code, starting on a
    // loaded machine, runs its SessionStart hook.
    support::wait_until(WAIT, "the resume", || count(&fleet, "agent_start") == 2);
    let second = nth(&fleet, "agent_start", 1);
    support::kill9(second["pid"].as_u64().unwrap() as u32);
    assert_eq!(second["mode"], "resume", "{second}");
    assert_eq!(second["session_id"], id.as_str(), "{second}");
    support::wait_until(WAIT, "the start after it", || {
        count(&fleet, "agent_start") == 3
    });
    let ops = fleet.ops("cc");
    let after_second = ops
        .iter()
        .skip_while(|o| !(o["event"] == "agent_start" && o["pid"] == second["pid"]))
        .take_while(|o| o["event"] != "agent_exit");
    assert!(
        !after_second.clone().any(|o| o["event"] == "session_start"),
        "the killed resume never came up: {ops:?}"
    );
    let exit = nth(&fleet, "agent_exit", 1);
    assert_eq!(exit["showed_life"], false, "{exit}");
    assert_eq!(exit["action"], "resume", "{exit}");
    assert!(exit.get("resume_refused").is_none(), "{exit}");
    let third = nth(&fleet, "agent_start", 2);
    assert_eq!(third["mode"], "resume", "{third}");
    assert_eq!(third["session_id"], id.as_str(), "{third}");
    assert!(!discarded(&dir).contains(&id), "{:?}", discarded(&dir));
    // The third run comes up as the same conversation.
    support::wait_until(WAIT, "the resumed session's start", || {
        fleet.ops("cc").iter().any(|o| {
            o["event"] == "session_start"
                && o["source"] == "resume"
                && o["session_id"] == id.as_str()
        })
    });
    // Its turn had finished before the first kill: nothing to continue, nothing typed.
    let skipped = fleet
        .ops("cc")
        .into_iter()
        .find(|o| o["event"] == "continue_prompt_skipped")
        .expect("the continue prompt skipped");
    assert!(
        skipped["why"]
            .as_str()
            .unwrap()
            .contains("turn had finished"),
        "{skipped}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !turn_requests(&server)
            .iter()
            .any(|r| r.text().contains("This session was restarted")),
        "a continue prompt was typed into an idle session"
    );
    assert_eq!(count(&fleet, "continue_prompt_sent"), 0);
}

/// Issue 32 item 9. A transcript Claude Code cannot read: resumed, it says "No conversation
/// found" and exits 1 (its SessionEnd hook running on the way out is no sign of life). One
/// try: the id is given up, the next start is fresh, and `phoenix restart` does not resume
/// it again.
#[test]
fn real_claude_refusing_a_corrupt_transcript_is_tried_once_then_fresh_for_good() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![Turn::text("Planned."), Turn::text("Fresh here.")]);
    let (dir, id, transcript) = one_turn_done(&fleet, &server);
    std::fs::write(&transcript, "this is not a transcript\n{\"broken\n").unwrap();
    let first = nth(&fleet, "agent_start", 0);
    support::kill9(first["pid"].as_u64().unwrap() as u32);
    support::wait_until(WAIT, "the fresh start after the refused resume", || {
        count(&fleet, "agent_start") == 3
    });
    let second = nth(&fleet, "agent_start", 1);
    assert_eq!(second["mode"], "resume", "{second}");
    assert_eq!(second["session_id"], id.as_str(), "{second}");
    let refused = nth(&fleet, "agent_exit", 1);
    assert_eq!(refused["resume_refused"], true, "{refused}");
    assert_eq!(refused["action"], "fresh", "{refused}");
    assert_eq!(refused["code"], 1, "{refused}");
    let third = nth(&fleet, "agent_start", 2);
    assert_eq!(third["mode"], "fresh", "{third}");
    assert!(discarded(&dir).contains(&id), "{:?}", discarded(&dir));
    support::wait_until(WAIT, "the fresh session's start", || {
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "session_start" && o["session_id"] != id.as_str())
    });
    fleet.run(&["restart", "cc"]).status(0);
    support::wait_until(WAIT, "the start after the restart", || {
        count(&fleet, "agent_start") == 4
    });
    let ops = fleet.ops("cc");
    let resumes_of_it = ops
        .iter()
        .filter(|o| o["event"] == "agent_start" && o["session_id"] == id.as_str())
        .count();
    assert_eq!(resumes_of_it, 1, "{ops:?}");
    // Two crashes (the kill, the refusal), far from the crash limit: no loop.
    assert_eq!(
        ops.iter()
            .filter(|o| o["event"] == "agent_exit" && o["counts_as_crash"] == true)
            .count(),
        2,
        "{ops:?}"
    );
}

/// Issue 32 item 10. The Clinic leaves its recovery context for the next session while the
/// running Claude Code is still up (as when its prompt was too long and the wrapper stops it
/// for a fresh one), and that process compacts before it goes (Claude Code's auto-compaction,
/// here `/compact`): its SessionStart `compact` leaves the context, and the fresh session
/// phoenix starts next brings it to the model.
#[test]
fn real_claude_compacting_before_it_is_replaced_leaves_the_clinics_context_to_the_fresh_session() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    // A tool call first, as `real_claude_compaction_saves_a_handoff_that_comes_back` has:
    // after a single answer Claude Code 2.1.197's `/compact` ran no SessionStart here.
    let server = ModelServer::start(vec![
        Turn::bash("echo 'release planned' > plan.txt"),
        Turn::text("Planned."),
        Turn::text("Carrying on after the compaction."),
        Turn::text("Fresh, with the context."),
    ]);
    let (dir, id, _) = one_turn_done(&fleet, &server);
    // The Clinic reads the CLI's last words (a full context) and leaves its context for the
    // next start, fresh.
    let output = fleet.path().join("output.txt");
    std::fs::write(
        &output,
        "API Error: 400 prompt is too long: 210000 tokens > 200000 maximum\n",
    )
    .unwrap();
    fleet
        .run(&["clinic", "cc", "--output", output.to_str().unwrap()])
        .status(0);
    let pending = dir.join("clinic_context.md");
    assert!(pending.exists(), "the Clinic left its context");
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "/compact");
    support::wait_until(WAIT, "SessionStart compact", || {
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "session_start" && o["source"] == "compact")
    });
    assert!(
        pending.exists(),
        "the compaction of the session being replaced took the Clinic's context"
    );
    assert_eq!(count(&fleet, "clinic_context_injected"), 0);
    fleet.run(&["restart", "cc"]).status(0);
    support::wait_until(WAIT, "the fresh session's start", || {
        fleet.ops("cc").iter().any(|o| {
            o["event"] == "session_start"
                && o["source"] == "startup"
                && o["session_id"] != id.as_str()
        })
    });
    assert!(!pending.exists(), "given to the fresh session");
    assert_eq!(count(&fleet, "clinic_context_injected"), 1);
    type_prompt(&fleet, &pane, "go on with the release");
    support::wait_until(WAIT, "the fresh session's first turn", || {
        turn_requests(&server)
            .iter()
            .any(|r| r.text().contains("go on with the release"))
    });
    let sent = turn_requests(&server)
        .into_iter()
        .find(|r| r.text().contains("go on with the release"))
        .unwrap()
        .text();
    assert!(
        sent.contains("FRESH SESSION, CONTEXT CARRIED OVER"),
        "{sent}"
    );
}

/// The text of the last user message `request` carries.
fn last_user_text(request: &support::scripted::Request) -> String {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Issue 32 item 11. An urgent message interrupts Claude Code before any answer came; whatever
/// Claude leaves in its input line (the prompt it was on, as the run saw), the message
/// block pasted after the Escape starts on a line of its own. Against this scripted server
/// (an unanswered request) neither 2.1.197 nor 2.1.332 put the prompt back, so this passes
/// without the separator too: it guards the delivery, `an_urgent_block_starts_apart_...`
/// (continuity::messages) the separator.
#[test]
fn real_claude_urgent_message_is_not_glued_to_the_interrupted_prompt() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![Turn::Hang, Turn::text("Stopped, as asked.")]);
    let _dir = start_claude(&fleet, &server, "", "run the slow job");
    support::wait_until(WAIT, "the prompt's request, unanswered", || {
        turn_requests(&server)
            .iter()
            .any(|r| r.text().contains("run the slow job"))
    });
    fleet
        .run(&["send", "cc", "stop: the release is frozen", "--urgent"])
        .status(0);
    support::wait_until(WAIT, "the urgent message in a request", || {
        turn_requests(&server)
            .iter()
            .any(|r| r.text().contains("stop: the release is frozen"))
    });
    let request = turn_requests(&server)
        .into_iter()
        .find(|r| r.text().contains("stop: the release is frozen"))
        .unwrap();
    let text = last_user_text(&request);
    assert!(text.contains("stop: the release is frozen"), "{text}");
    let at = text
        .find("[phoenix] 1 message")
        .expect("the block's header");
    assert!(
        at == 0 || text[..at].ends_with('\n'),
        "the block is glued to what came before it: {text:?}"
    );
}
