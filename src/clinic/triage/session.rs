//! Which evidence belongs to the session being diagnosed: its part of a captured pane (after
//! the last start banner), its time window from ops.jsonl, its transcript records, and its
//! output without what a resumed CLI replayed from earlier sessions.

use serde_json::Value;

use super::{Session, str_of};
use crate::state::{Op, op};

/// How the line the wrapper prints just before it starts `agent`'s CLI begins (`[phoenix]
/// starting `NAME`, resuming session …` or `… (fresh session)`).
pub fn start_banner(agent: &str) -> String {
    format!("[phoenix] starting `{agent}`")
}

/// The part of a captured pane that `agent`'s current session wrote: the lines after the
/// last start banner ([`start_banner`]). Scrollback from earlier sessions (an old "529
/// overloaded", an old retry banner) is no evidence about this one. Without a banner in the
/// capture every captured line came after it (it scrolled out of the capture, or the history
/// was cleared): all of it is this session's. A line that only contains the banner, further
/// in, is the agent's own text.
pub fn this_session<'a>(screen: &'a str, agent: &str) -> &'a str {
    let banner = start_banner(agent);
    let mut start = 0;
    let mut at = 0;
    for line in screen.split_inclusive('\n') {
        at += line.len();
        if said_by_phoenix(line, &banner) {
            start = at;
        }
    }
    &screen[start..]
}

/// Does `line` carry `text` as phoenix printed it: at its start, or after what a CLI killed
/// mid-screen left on the line (its prompt `❯ `, a box edge), but not inside the agent's own
/// words (`echo '[phoenix] …'`)?
pub fn said_by_phoenix(line: &str, text: &str) -> bool {
    line.find(text)
        .is_some_and(|i| !line[..i].chars().any(char::is_alphanumeric))
}

/// When `session` ran, as far as ops.jsonl tells: from its `agent_start` to its
/// `agent_exit` (open-ended for the latest, which may still run). `None` where unknown.
pub type Window = (Option<jiff::Timestamp>, Option<jiff::Timestamp>);

/// The window of `session` (see [`Window`]).
pub fn session_window(ops: &[op::Line], session: Session) -> Window {
    let (upto, end) = match session {
        Session::Latest => (ops.len(), None),
        Session::LastExited => match ops.iter().rposition(|o| matches!(o.op, Op::AgentExit(_))) {
            Some(i) => (i, ops[i].time()),
            None => return (None, None),
        },
    };
    // `spawned`: when the wrapper started the CLI, a moment before it recorded the start.
    let start = ops[..upto]
        .iter()
        .rev()
        .find(|o| matches!(o.op, Op::AgentStart(_)))
        .and_then(|o| {
            o.str("spawned")
                .and_then(|t| t.parse().ok())
                .or_else(|| o.time())
        });
    (start, end)
}

/// Was a record stamped `ts` written by the session that ran in `window`? A resumed session
/// appends to the transcript of the one before it, and an old "529" in there is no evidence
/// about this one. Without a readable stamp nothing can be told apart, and the record is kept.
pub fn in_session(ts: Option<&str>, window: Window) -> bool {
    let Some(ts) = ts.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return true;
    };
    within(ts, window)
}

pub(super) fn within(ts: jiff::Timestamp, window: Window) -> bool {
    window.0.is_none_or(|start| ts >= start) && window.1.is_none_or(|end| ts <= end)
}

/// The records of a transcript written in `window` (see [`in_session`]).
pub fn records_in(records: Vec<Value>, window: Window) -> Vec<Value> {
    records
        .into_iter()
        .filter(|r| in_session(str_of(r, "timestamp"), window))
        .collect()
}

/// Every text in `records` (string values at any depth), one per line.
pub(super) fn texts<'a>(records: impl Iterator<Item = &'a Value>) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    records.for_each(|r| walk(r, &mut out));
    out
}

/// `output` without the lines `earlier` holds (the texts of transcript records: the model's
/// and the tools' words, also those a resumed CLI prints again). A line is compared without
/// the marks the CLI puts before it (`● `, `⎿ `); short lines (`ok`) are kept, they could be
/// anyone's.
pub fn without_replay(output: &str, earlier: &str) -> String {
    if earlier.is_empty() {
        return output.to_string();
    }
    output
        .lines()
        .filter(|line| {
            let words = line
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .trim_end();
            words.chars().count() < 12 || !earlier.contains(words)
        })
        .collect::<Vec<_>>()
        .join("\n")
}
