//! Reading the fleet's critical events (`critical_events.jsonl`), filtered: by agent, by event
//! name, by age, the last N. Each session's end (`agent_exit` in the agent's ops.jsonl) is
//! merged in — "why did it stop?" belongs with the events — and with `all_steps` every step of
//! ops.jsonl. `phoenix events` (also followed), `top` and the HTTP API read them through here.

use std::path::PathBuf;
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
    /// Whose ops.jsonl is merged in when no `agent` is asked for (the declared agents): a
    /// session's end belongs among the fleet's events as much as among one agent's.
    pub agents: &'a [&'a str],
    /// Every step of the agents' ops.jsonl, not only the sessions' ends (`events --all`).
    pub all_steps: bool,
}

impl Filter<'_> {
    /// `since` from an age: events of the last `age`.
    pub fn since_age(age: Duration) -> Option<jiff::Timestamp> {
        jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_secs(age.as_secs() as i64))
            .ok()
    }

    /// The agents whose ops.jsonl is read: the one asked for, or all of `agents`.
    fn ops_of(&self) -> Vec<&str> {
        match self.agent {
            Some(a) => vec![a],
            None => self.agents.to_vec(),
        }
    }

    /// The op lines of `agent`'s ops.jsonl that are events under this filter.
    fn ops_events(&self, agent: &str, ops: Vec<super::op::Line>) -> String {
        ops.into_iter()
            .filter(|o| self.all_steps || matches!(o.op, Op::AgentExit(_)))
            .map(|o| format!("{}\n", op_event(agent, &o)))
            .collect()
    }
}

/// The events that pass `filter`, oldest first, and how many lines did not parse.
pub fn read(fleet: &FleetDir, filter: &Filter<'_>) -> (Vec<Value>, usize) {
    let mut text = Vec::new();
    if let Ok(mut f) = super::file::open_read(&fleet.critical_events_path()) {
        let _ = std::io::Read::read_to_end(&mut f, &mut text);
    }
    let (mut events, skipped) = parse(&String::from_utf8_lossy(&text), filter);
    let ops_of = filter.ops_of();
    for agent in &ops_of {
        let ops = super::op::tail(&fleet.agent(agent).file(OPS_LOG));
        events.extend(parse(&filter.ops_events(agent, ops), filter).0);
    }
    if !ops_of.is_empty() {
        sort_by_time(&mut events);
    }
    if let Some(limit) = filter.limit {
        events.drain(..events.len().saturating_sub(limit));
    }
    (events, skipped)
}

fn sort_by_time(events: &mut [Value]) {
    events.sort_by_key(|e| {
        e["ts"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
}

/// A line of ops.jsonl as an event. An `agent_exit` carries the one recorded reason a session
/// ended; other steps (`--all`) their own `reason` when they have one.
fn op_event(agent: &str, op: &super::op::Line) -> Value {
    let reason = op.str("reason").map(str::to_string);
    let explain = op.str("explain").map(str::to_string);
    let action = op.get("action").as_str().map(str::to_string);
    let reason = match (reason, explain) {
        (Some(r), Some(x)) => Some(format!("{r}: {x}")),
        (None, Some(x)) => Some(x),
        (r, None) => r,
    };
    let reason = match (&op.op, reason) {
        (Op::AgentExit(_), None) => Some("unknown".to_string()),
        (_, r) => r,
    };
    serde_json::json!({
        "ts": op.ts, "event": op.op.name(), "agent": agent,
        "reason": reason, "action_taken": action, "details": op.to_value(),
    })
}

/// Follows the fleet's events as they are recorded: critical_events.jsonl and the ops.jsonl
/// of the filter's agents, each from its end when the follower is made. A file that shrank
/// (rotated, truncated) is read again from its start.
pub struct Follower {
    files: Vec<Followed>,
}

struct Followed {
    path: PathBuf,
    /// Whose ops.jsonl this is; `None` for critical_events.jsonl.
    agent: Option<String>,
    offset: u64,
    partial: String,
}

impl Follower {
    pub fn new(fleet: &FleetDir, filter: &Filter<'_>) -> Follower {
        let mut files = vec![(fleet.critical_events_path(), None)];
        for agent in filter.ops_of() {
            files.push((fleet.agent(agent).file(OPS_LOG), Some(agent.to_string())));
        }
        let files = files
            .into_iter()
            .map(|(path, agent)| Followed {
                offset: std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
                path,
                agent,
                partial: String::new(),
            })
            .collect();
        Follower { files }
    }

    /// Also follow `agent`'s ops.jsonl: from its current end, or from its start for an agent
    /// that appeared after the follower was made (all of its lines are new).
    pub fn watch_agent(&mut self, fleet: &FleetDir, agent: &str, from_start: bool) {
        let path = fleet.agent(agent).file(OPS_LOG);
        if self.files.iter().any(|f| f.path == path) {
            return;
        }
        let end = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        self.files.push(Followed {
            offset: if from_start { 0 } else { end },
            path,
            agent: Some(agent.to_string()),
            partial: String::new(),
        });
    }

    /// The events recorded since the last call (or since the follower was made), oldest
    /// first. Lines still being written wait for their newline.
    pub fn poll(&mut self, filter: &Filter<'_>) -> Vec<Value> {
        let mut events = Vec::new();
        for f in &mut self.files {
            let complete = f.read_new();
            if complete.is_empty() {
                continue;
            }
            let text = match &f.agent {
                None => complete,
                Some(agent) => filter.ops_events(agent, super::op::parse(&complete)),
            };
            events.extend(parse(&text, filter).0);
        }
        sort_by_time(&mut events);
        events
    }
}

impl Followed {
    /// The complete lines appended since the last read.
    fn read_new(&mut self) -> String {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut file) = super::file::open_read(&self.path) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        if len == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return String::new();
        }
        // Bounded: at most a megabyte per poll; the rest comes on the next one.
        let mut chunk = Vec::new();
        if file.take(1 << 20).read_to_end(&mut chunk).is_err() {
            return String::new();
        }
        self.offset += chunk.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&chunk));
        match self.partial.rfind('\n') {
            Some(end) => self.partial.drain(..=end).collect(),
            None => String::new(),
        }
    }
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
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
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
