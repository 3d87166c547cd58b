//! The fleet's events (as `phoenix events --follow` reads them: critical_events.jsonl and each
//! agent's ops.jsonl) turned into records: every event a log record with its `agent`, and each
//! recovery — from the end of a run that phoenix restarts to the next start, or to the safe
//! mode that ends the tries — a `recovery` span.

use std::collections::HashMap;
use std::time::SystemTime;

use serde_json::Value;

use super::{Attr, Level, LogRecord, Record, SpanRecord};

/// Ends of a run that phoenix recovers from (crash, no sign of life, killed as stuck).
const RECOVERED: &[&str] = &["crash", "no_life", "watchdog_kill"];

/// Events that end a recovery without a restart.
const GIVEN_UP: &[&str] = &["safe_mode", "crash_loop", "spawn_failed"];

/// A recovery under way: the run's end, waiting for the next start.
struct Open {
    since: SystemTime,
    reason: String,
    action: Option<String>,
}

/// Turns events into records, remembering the recoveries under way between calls.
#[derive(Default)]
pub struct Recorder {
    open: HashMap<String, Open>,
}

impl Recorder {
    /// The records for one event: its log record, and a `recovery` span when it ends one.
    pub fn records(&mut self, event: &Value) -> Vec<Record> {
        let mut out = vec![Record::Log(log_record(event))];
        let name = event["event"].as_str().unwrap_or("");
        let Some(agent) = event["agent"].as_str().filter(|a| !a.is_empty()) else {
            return out;
        };
        let time = time_of(event);
        let details = &event["details"];
        match name {
            "agent_exit" => {
                let reason = details["reason"].as_str().unwrap_or("");
                if RECOVERED.contains(&reason) {
                    self.open.insert(
                        agent.to_string(),
                        Open {
                            since: time,
                            reason: reason.to_string(),
                            action: details["action"].as_str().map(str::to_string),
                        },
                    );
                }
            }
            "agent_start" => {
                if let Some(open) = self.open.remove(agent) {
                    let mut span = recovery(agent, open, time, "restarted");
                    if let Some(mode) = details["mode"].as_str() {
                        span.attributes.push(("mode".into(), mode.into()));
                    }
                    out.push(Record::Span(span));
                }
            }
            n if GIVEN_UP.contains(&n) => {
                if let Some(open) = self.open.remove(agent) {
                    let mut span = recovery(agent, open, time, n);
                    span.error = Some(format!("not restarted: {n}"));
                    out.push(Record::Span(span));
                }
            }
            _ => {}
        }
        out
    }
}

fn recovery(agent: &str, open: Open, end: SystemTime, outcome: &str) -> SpanRecord {
    let mut attributes = vec![
        ("agent".to_string(), Attr::from(agent)),
        ("reason".to_string(), Attr::from(open.reason)),
        ("outcome".to_string(), Attr::from(outcome)),
    ];
    if let Some(action) = open.action {
        attributes.push(("action".into(), action.into()));
    }
    SpanRecord {
        name: "recovery",
        start: open.since,
        end: end.max(open.since),
        attributes,
        error: None,
    }
}

/// One event as a log record: the body says what happened (`agent_exit: crash: exit 1`); the
/// attributes are `agent`, `event`, `reason`, `action` and every plain field of the details
/// under `phoenix.` (`phoenix.code`, `phoenix.pid`).
pub fn log_record(event: &Value) -> LogRecord {
    let name = event["event"].as_str().unwrap_or("event");
    let reason = event["reason"].as_str().filter(|r| !r.is_empty());
    let mut attributes = vec![("event".to_string(), Attr::from(name))];
    if let Some(agent) = event["agent"].as_str().filter(|a| !a.is_empty()) {
        attributes.push(("agent".into(), agent.into()));
    }
    if let Some(reason) = reason {
        attributes.push(("reason".into(), reason.into()));
    }
    if let Some(action) = event["action_taken"].as_str() {
        attributes.push(("action".into(), action.into()));
    }
    // An ops step carries its fields in `details`; a critical event at its top level.
    let fields = match event["details"].as_object() {
        Some(d) => d.iter().collect::<Vec<_>>(),
        None => event
            .as_object()
            .map(|o| o.iter().collect())
            .unwrap_or_default(),
    };
    for (key, value) in fields {
        if matches!(key.as_str(), "ts" | "agent" | "event") {
            continue;
        }
        let value = match value {
            Value::String(s) => Attr::Str(s.clone()),
            Value::Bool(b) => Attr::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Attr::Int(i),
                None => Attr::Float(n.as_f64().unwrap_or(0.0)),
            },
            _ => continue,
        };
        attributes.push((format!("phoenix.{key}"), value));
    }
    LogRecord {
        time: time_of(event),
        level: level(name, event),
        body: match reason {
            Some(r) => format!("{name}: {r}"),
            None => name.to_string(),
        },
        attributes,
    }
}

fn level(name: &str, event: &Value) -> Level {
    let reason = event["details"]["reason"].as_str().unwrap_or("");
    match name {
        "safe_mode" | "crash_loop" | "spawn_failed" => Level::Error,
        "agent_exit" if RECOVERED.contains(&reason) => Level::Warn,
        n if n.ends_with("_failed") || n.starts_with("watchdog") || n == "unhealthy" => Level::Warn,
        _ => Level::Info,
    }
}

/// When the event happened (`ts`); now when it has none that reads.
fn time_of(event: &Value) -> SystemTime {
    event["ts"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(SystemTime::from)
        .unwrap_or_else(SystemTime::now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exit(ts: &str, reason: &str) -> Value {
        json!({"ts": ts, "event": "agent_exit", "agent": "alpha", "reason": format!("{reason}: exit 1"),
               "action_taken": "resume", "details": {"reason": reason, "code": 1, "action": "resume"}})
    }

    fn spans(records: &[Record]) -> Vec<&SpanRecord> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::Span(s) => Some(s),
                Record::Log(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_crash_is_a_warning_log_record_with_its_agent_and_details() {
        let Record::Log(log) =
            &Recorder::default().records(&exit("2026-01-01T00:00:00Z", "crash"))[0]
        else {
            panic!("a log record first");
        };
        assert_eq!(log.level, Level::Warn);
        assert_eq!(log.body, "agent_exit: crash: exit 1");
        let attr = |k: &str| {
            log.attributes
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(attr("agent"), Some(Attr::from("alpha")));
        assert_eq!(attr("phoenix.code"), Some(Attr::Int(1)));
        assert_eq!(attr("action"), Some(Attr::from("resume")));
    }

    #[test]
    fn a_crash_then_a_start_is_one_recovery_span_and_a_clean_exit_is_none() {
        let mut r = Recorder::default();
        assert!(spans(&r.records(&exit("2026-01-01T00:00:00Z", "crash"))).is_empty());
        let start = json!({"ts": "2026-01-01T00:00:02Z", "event": "agent_start", "agent": "alpha",
                           "details": {"mode": "resume", "pid": 7}});
        let done = r.records(&start);
        let s = spans(&done);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "recovery");
        assert_eq!(s[0].end.duration_since(s[0].start).unwrap().as_secs(), 2);
        assert!(
            s[0].attributes
                .contains(&("mode".into(), Attr::from("resume")))
        );
        // A second start without a crash before it is no recovery.
        assert!(spans(&r.records(&start)).is_empty());
        r.records(&exit("2026-01-01T00:00:03Z", "clean_exit"));
        assert!(spans(&r.records(&start)).is_empty());
    }

    #[test]
    fn safe_mode_ends_a_recovery_as_failed() {
        let mut r = Recorder::default();
        r.records(&exit("2026-01-01T00:00:00Z", "no_life"));
        let safe = json!({"ts": "2026-01-01T00:00:01Z", "event": "safe_mode", "agent": "alpha"});
        let done = r.records(&safe);
        let s = spans(&done);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].error.as_deref(), Some("not restarted: safe_mode"));
    }
}
