//! Codex CLI's PostToolUse payload carries no failure signal: for a shell call `tool_response`
//! is the command's output alone (0.169; some builds sent the model-facing text with `Process
//! exited with code N`, which the payload parser reads). The rollout Codex has written by the
//! time the hook runs has the exit code: an `item_completed` event for the call
//! (`CommandExecution` with `exit_code`), or `exec_command_end` in older builds.

use std::path::Path;

use serde_json::Value;

use crate::state::bounded::{self, Links};

/// How much of the rollout's end is read: the call just finished, its events are the last ones.
const TAIL: u64 = 256 * 1024;

/// The exit code of shell call `call_id`, from the end of the rollout at `transcript`.
pub fn exit_code(transcript: &Path, call_id: &str) -> Option<i64> {
    let tail = bounded::read_tail(transcript, TAIL, Links::Follow).ok()?;
    exit_code_in(&tail.lines_text(), call_id)
}

fn exit_code_in(rollout: &str, call_id: &str) -> Option<i64> {
    rollout
        .lines()
        .rev()
        .filter(|l| l.contains(call_id))
        .find_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            let event = v.get("payload")?;
            let item = match event["type"].as_str()? {
                "item_completed" => event.get("item")?,
                "exec_command_end" => event,
                _ => return None,
            };
            let id = item
                .get("id")
                .or_else(|| item.get("call_id"))
                .and_then(Value::as_str)?;
            (id == call_id).then(|| item.get("exit_code")?.as_i64())?
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Codex 0.169.0 wrote them (shortened) for `ls` on a missing directory.
    const ROLLOUT: &str = r#"{"timestamp":"t","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\": \"ls /nope\"}","call_id":"call_1"}}
{"timestamp":"t","type":"event_msg","payload":{"type":"item_completed","thread_id":"x","item":{"type":"CommandExecution","id":"call_1","command":["/bin/bash","-lc","ls /nope"],"status":"failed","aggregated_output":"ls: cannot access '/nope'\n","exit_code":2}}}
{"timestamp":"t","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"Chunk ID: 1\nProcess exited with code 2\nOutput:\nls: cannot access '/nope'\n"}}
{"timestamp":"t","type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_2","status":"completed","exit_code":0}}}
"#;

    #[test]
    fn exit_codes_come_from_the_completed_call() {
        assert_eq!(exit_code_in(ROLLOUT, "call_1"), Some(2));
        assert_eq!(exit_code_in(ROLLOUT, "call_2"), Some(0));
        assert_eq!(exit_code_in(ROLLOUT, "call_3"), None);
        let older = r#"{"type":"event_msg","payload":{"type":"exec_command_end","call_id":"c9","exit_code":127}}"#;
        assert_eq!(exit_code_in(older, "c9"), Some(127));
        assert_eq!(exit_code_in("not json call_1\n", "call_1"), None);
    }

    #[test]
    fn a_missing_rollout_says_nothing() {
        assert_eq!(
            exit_code(Path::new("/nonexistent/rollout.jsonl"), "call_1"),
            None
        );
    }
}
