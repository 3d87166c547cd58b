//! `wait_for`: until an agent's turn ends, it is idle, its CLI exits or starts again.
//!
//! The wait reads what the agent's own ops log records from the moment it starts (its hooks'
//! `turn_complete`, the wrapper's `agent_exit` and `agent_start`), never its pane: the log
//! outlives the CLI, so a wait goes on across a kill -9 and the resume that follows, and ends
//! at the first turn end after it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ToolError;
use crate::spec::Spec;
use crate::state::op::{self, Op};
use crate::state::{FleetDir, OPS_LOG, Status};

/// How often the ops log is looked at: a turn end is seen within this.
pub const POLL: Duration = Duration::from_millis(150);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    TurnEnd,
    Idle,
    Exit,
    Revival,
}

impl Until {
    pub const NAMES: [&'static str; 4] = ["turn_end", "idle", "exit", "revival"];

    pub fn parse(name: &str) -> Option<Until> {
        match name {
            "turn_end" => Some(Until::TurnEnd),
            "idle" => Some(Until::Idle),
            "exit" => Some(Until::Exit),
            "revival" => Some(Until::Revival),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Until::NAMES[self as usize]
    }

    /// Does this op, appended after the wait began, end it?
    fn ended_by(self, op: &Op) -> bool {
        match self {
            Until::TurnEnd | Until::Idle => matches!(op, Op::TurnComplete(_)),
            Until::Exit => matches!(op, Op::AgentExit(_)),
            Until::Revival => matches!(op, Op::AgentStart(_)),
        }
    }
}

/// What a call asks for, read from its arguments.
#[derive(Debug, Clone)]
pub struct WaitRequest {
    pub agent: String,
    pub until: Until,
    pub timeout: Duration,
}

impl WaitRequest {
    pub fn from_call(call: &super::Authorized) -> Result<WaitRequest, ToolError> {
        let until = match super::tools::string_arg(&call.args, "until")? {
            None => Until::TurnEnd,
            Some(word) => Until::parse(&word).ok_or_else(|| {
                ToolError::bad(
                    format!(
                        "`until` = `{}` is not a condition",
                        crate::text::shorten(&word, 40)
                    ),
                    crate::diag::suggest(&word, &Until::NAMES),
                )
            })?,
        };
        let seconds = super::tools::integer_arg(&call.args, "timeout_seconds")?
            .unwrap_or(super::tools::DEFAULT_WAIT_SECONDS);
        if seconds == 0 || seconds > super::tools::MAX_WAIT_SECONDS {
            return Err(ToolError::bad(
                format!("`timeout_seconds` = {seconds} is out of range"),
                format!("1 to {}", super::tools::MAX_WAIT_SECONDS),
            ));
        }
        Ok(WaitRequest {
            agent: call.target.clone().unwrap_or_default(),
            until,
            timeout: Duration::from_secs(seconds),
        })
    }
}

/// Wait as `request` says, until then, the deadline, or `cancel`. Blocking (a thread of the
/// blocking pool): it sleeps between looks.
pub fn wait_for(
    spec: &Spec,
    request: &WaitRequest,
    cancel: &AtomicBool,
) -> Result<Value, ToolError> {
    let agent = request.agent.as_str();
    if let Some(host) = crate::hosts::reads::host_of(spec, agent) {
        return wait_on_host(spec, host, request);
    }
    let started = Instant::now();
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(agent);
    let log = dir.file(OPS_LOG);
    let mut offset = file_len(&log);
    let done = |event: Value, how: &str| {
        Ok(json!({
            "agent": agent,
            "until": request.until.as_str(),
            "reached": true,
            "how": how,
            "event": event,
            "waited_ms": started.elapsed().as_millis() as u64,
        }))
    };
    // The conditions that may hold already.
    match request.until {
        Until::Idle if is_idle(spec, &dir) => return done(Value::Null, "idle when the wait began"),
        Until::Exit if !is_running(spec, agent) => {
            return done(Value::Null, "not running when the wait began");
        }
        _ => {}
    }
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(ToolError::Cancelled);
        }
        let (lines, next) = appended(&log, offset);
        offset = next;
        if let Some(line) = lines.iter().find(|l| request.until.ended_by(&l.op)) {
            return done(line.to_value(), line.op.name());
        }
        if started.elapsed() >= request.timeout {
            return Ok(json!({
                "agent": agent,
                "until": request.until.as_str(),
                "reached": false,
                "how": "timed out",
                "waited_ms": started.elapsed().as_millis() as u64,
            }));
        }
        std::thread::sleep(POLL.min(request.timeout.saturating_sub(started.elapsed())));
    }
}

/// The same wait, by the phoenix of the host the agent lives on (`phoenix wait --json` there,
/// which reads that agent's ops log): the ssh call is bounded by the wait's own deadline and a
/// margin for the link. A cancel ends the call's wait here; the host's ends at its deadline.
fn wait_on_host(spec: &Spec, host: &str, request: &WaitRequest) -> Result<Value, ToolError> {
    let timeout = format!("{}s", request.timeout.as_secs().max(1));
    let words = [
        "wait",
        request.agent.as_str(),
        "--until",
        request.until.as_str(),
        "--timeout",
        timeout.as_str(),
        "--json",
    ];
    let link_timeout = crate::hosts::protocol::run_timeout(&words, Duration::ZERO);
    let mut doc = super::tools::on_host(spec, host, &words, link_timeout)?;
    if let Some(doc) = doc.as_object_mut() {
        doc.remove("format_version");
        doc.insert("host".into(), json!(host));
    }
    Ok(doc)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The whole lines appended to `path` after `offset`, and the offset after the last of them.
/// A file that shrank (rotated) is read again from its start.
fn appended(path: &Path, offset: u64) -> (Vec<op::Line>, u64) {
    let len = file_len(path);
    let offset = if len < offset { 0 } else { offset };
    if len == offset {
        return (Vec::new(), offset);
    }
    let Ok(mut file) = std::fs::File::open(path) else {
        return (Vec::new(), offset);
    };
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err()
        || file.take(len - offset).read_to_end(&mut bytes).is_err()
    {
        return (Vec::new(), offset);
    }
    // A line still being written waits for the next look.
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let text = String::from_utf8_lossy(&bytes[..whole]);
    (op::parse(&text), offset + whole as u64)
}

/// Idle at its prompt: its hooks say its last turn ended, and its CLI runs.
fn is_idle(spec: &Spec, dir: &crate::state::AgentDir) -> bool {
    dir.read_state().is_ok_and(|s| s.status == Status::Idle) && is_running(spec, &dir.name)
}

/// Its CLI runs in its pane now.
fn is_running(spec: &Spec, agent: &str) -> bool {
    let runtime = crate::world::runtime_for(spec);
    crate::status::observe_lean(spec, &*runtime).is_ok_and(|world| {
        world
            .pane_of(agent)
            .is_some_and(|p| !p.dead && p.agent_process().is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_appended_lines_are_read_and_a_rotated_log_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ops.jsonl");
        std::fs::write(&log, "{\"event\":\"agent_start\"}\n").unwrap();
        let start = file_len(&log);
        let (lines, at) = appended(&log, start);
        assert!(lines.is_empty());
        assert_eq!(at, start);
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("{\"event\":\"turn_complete\"}\n{\"event\":\"agent_ex");
        std::fs::write(&log, &text).unwrap();
        let (lines, at) = appended(&log, start);
        assert_eq!(lines.len(), 1);
        assert!(Until::TurnEnd.ended_by(&lines[0].op));
        assert!(!Until::Exit.ended_by(&lines[0].op));
        text.push_str("it\"}\n");
        std::fs::write(&log, &text).unwrap();
        let (lines, _) = appended(&log, at);
        assert!(Until::Exit.ended_by(&lines[0].op));
        std::fs::write(&log, "{\"event\":\"agent_start\"}\n").unwrap();
        let (lines, _) = appended(&log, 1000);
        assert!(Until::Revival.ended_by(&lines[0].op));
    }

    #[test]
    fn conditions_parse_by_name() {
        for name in Until::NAMES {
            assert_eq!(Until::parse(name).unwrap().as_str(), name);
        }
        assert_eq!(Until::parse("done"), None);
    }
}
