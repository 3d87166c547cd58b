//! Reading the fleet's critical events (`critical_events.jsonl`), filtered: by agent, by event
//! name, by age, the last N. For one agent each session's end (`agent_exit` in its ops.jsonl)
//! is merged in: "why did it stop?" belongs with its events. `phoenix events` and the HTTP
//! API read them through here.

use std::time::Duration;

use serde_json::Value;

use super::{FleetDir, OPS_LOG, Op};

#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    pub agent: Option<&'a str>,
    /// Events whose name starts with this.
    pub event: Option<&'a str>,
    /// Only the last N (after the other filters).
    pub limit: Option<usize>,
    /// Only events recorded at or after this time.
    pub since: Option<jiff::Timestamp>,
}

impl Filter<'_> {
    /// `since` from an age: events of the last `age`.
    pub fn since_age(age: Duration) -> Option<jiff::Timestamp> {
        jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_secs(age.as_secs() as i64))
            .ok()
    }
}

/// The events that pass `filter`, oldest first, and how many lines did not parse.
pub fn read(fleet: &FleetDir, filter: &Filter<'_>) -> (Vec<Value>, usize) {
    let mut text = Vec::new();
    if let Ok(mut f) = super::file::open_read(&fleet.critical_events_path()) {
        let _ = std::io::Read::read_to_end(&mut f, &mut text);
    }
    let (mut events, skipped) = parse(&String::from_utf8_lossy(&text), filter);
    if let Some(agent) = filter.agent {
        let ops = fleet.agent(agent).file(OPS_LOG);
        let ends: String = super::op::tail(&ops)
            .into_iter()
            .filter(|o| matches!(o.op, Op::AgentExit(_)))
            .map(|o| format!("{}\n", session_end(agent, &o)))
            .collect();
        events.extend(parse(&ends, filter).0);
        events.sort_by_key(|e| {
            e["ts"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        });
    }
    if let Some(limit) = filter.limit {
        events.drain(..events.len().saturating_sub(limit));
    }
    (events, skipped)
}

/// An `agent_exit` line of ops.jsonl as an event: the one recorded reason a session ended.
fn session_end(agent: &str, op: &super::op::Line) -> Value {
    let reason = op.get("reason").as_str().unwrap_or("unknown").to_string();
    let explain = op.get("explain").as_str().map(str::to_string);
    let action = op.get("action").as_str().map(str::to_string);
    serde_json::json!({
        "ts": op.ts, "event": op.op.name(), "agent": agent,
        "reason": match explain { Some(x) => format!("{reason}: {x}"), None => reason },
        "action_taken": action, "details": op.to_value(),
    })
}

/// The events of `text` (JSON lines) that pass the filters — `limit` aside — and how many
/// lines did not parse.
pub fn parse(text: &str, filter: &Filter<'_>) -> (Vec<Value>, usize) {
    let mut skipped = 0;
    let events = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match serde_json::from_str::<Value>(l) {
            Ok(v) if v.is_object() => Some(v),
            _ => {
                skipped += 1;
                None
            }
        })
        .filter(|e| filter.agent.is_none_or(|a| e["agent"].as_str() == Some(a)))
        .filter(|e| {
            filter
                .event
                .is_none_or(|want| e["event"].as_str().is_some_and(|ev| ev.starts_with(want)))
        })
        .filter(|e| {
            let Some(since) = filter.since else {
                return true;
            };
            // An event without a readable time is shown: better too much than a lost one.
            e["ts"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|t| t >= since)
        })
        .collect();
    (events, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_ends_are_read_among_names_this_build_does_not_write() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let ops = "{\"ts\":\"2026-01-01T00:00:00Z\",\"agent\":\"a\",\"event\":\"from_the_future\",\"x\":1}\n\
                   {\"ts\":\"2026-01-01T00:00:01Z\",\"event\":3}\n\
                   {\"ts\":\"2026-01-01T00:00:02Z\",\"agent\":\"a\",\"event\":\"agent_exit\",\"reason\":\"crash\",\"explain\":\"exit 1\",\"older_field\":true}\n\
                   not json\n";
        std::fs::write(dir.file(OPS_LOG), ops).unwrap();
        let filter = Filter {
            agent: Some("a"),
            ..Filter::default()
        };
        let (events, _) = read(&fleet, &filter);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["event"], "agent_exit");
        assert_eq!(events[0]["reason"], "crash: exit 1");
        assert_eq!(events[0]["details"]["older_field"], true);
        assert_eq!(events[0]["ts"], "2026-01-01T00:00:02Z");
    }

    #[test]
    fn filters_apply_and_bad_lines_are_counted() {
        let now = jiff::Timestamp::now();
        let old = now - jiff::SignedDuration::from_hours(5);
        let text = format!(
            "{{\"ts\":\"{old}\",\"event\":\"crash_loop\",\"agent\":\"a\"}}\nnot json\n\
             {{\"ts\":\"{now}\",\"event\":\"clinic_diagnosis\",\"agent\":\"b\"}}\n\
             {{\"event\":\"clinic_undated\",\"agent\":\"b\"}}\n"
        );
        let all = parse(&text, &Filter::default());
        assert_eq!((all.0.len(), all.1), (3, 1));
        let recent = Filter {
            since: Filter::since_age(Duration::from_secs(3600)),
            ..Filter::default()
        };
        assert_eq!(parse(&text, &recent).0.len(), 2, "the undated one is kept");
        let clinic_b = Filter {
            agent: Some("b"),
            event: Some("clinic"),
            ..Filter::default()
        };
        assert_eq!(parse(&text, &clinic_b).0.len(), 2);
    }
}
