//! The hosts' part of `phoenix top`: one thread per `[[host]]` asks it for its status and its
//! events, again and again, each within its own timeout. The view reads what every host last
//! said and never waits for one: a slow or dead host costs its own rows' freshness, never the
//! input loop or the other hosts' rows. A host that stops answering keeps its last rows,
//! marked stale, with its error and the age of its last answer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hosts::fleet::{Link, links};
use crate::hosts::reads::{self, STATUS_TIMEOUT};
use crate::spec::Spec;
use crate::status::{AgentStatus, Context};

/// Events asked of each host for the view.
const HOST_EVENTS: &str = "--limit=100";

/// What one host said last.
#[derive(Debug, Clone, Default)]
pub struct HostView {
    pub host: String,
    /// Its last status document's agent rows, and when they came.
    pub rows: Option<(Vec<Value>, jiff::Timestamp)>,
    /// Its last critical events, each labelled with the host.
    pub events: Vec<Value>,
    /// Why its last answer did not come (`None`: it answered).
    pub error: Option<String>,
    /// Not answered yet at all.
    pub pending: bool,
}

/// The threads asking the hosts; they end when this is dropped.
pub struct Watcher {
    views: Arc<Mutex<Vec<HostView>>>,
    stop: Arc<AtomicBool>,
    /// Bumped to ask every host again at once (after an action).
    wake: Arc<AtomicU64>,
}

impl Watcher {
    /// One thread per host of `spec`, asking every `interval` (or at once after [`Watcher::poke`]).
    pub fn start(spec: &Spec, interval: Duration) -> Watcher {
        let links = links(spec);
        let views = Arc::new(Mutex::new(
            links
                .iter()
                .map(|l| HostView {
                    host: l.name().to_string(),
                    pending: true,
                    ..HostView::default()
                })
                .collect::<Vec<_>>(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(AtomicU64::new(0));
        for (index, link) in links.into_iter().enumerate() {
            let (views, stop, wake) = (views.clone(), stop.clone(), wake.clone());
            std::thread::spawn(move || watch(link, index, interval, &views, &stop, &wake));
        }
        Watcher { views, stop, wake }
    }

    /// What every host said last, in the order phoenix.toml lists them.
    pub fn views(&self) -> Vec<HostView> {
        self.views.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Ask every host again now (an action changed something there).
    pub fn poke(&self) {
        self.wake.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One host's loop: ask, publish, wait for the interval or a poke.
fn watch(
    link: Link,
    index: usize,
    interval: Duration,
    views: &Mutex<Vec<HostView>>,
    stop: &AtomicBool,
    wake: &AtomicU64,
) {
    while !stop.load(Ordering::Relaxed) {
        let seen = wake.load(Ordering::Relaxed);
        let (status, events) = std::thread::scope(|scope| {
            let events = scope.spawn(|| {
                link.run(&["events", "--json", HOST_EVENTS], STATUS_TIMEOUT)
                    .and_then(|ran| reads::document_of(link.name(), &ran))
            });
            let status = link
                .run(&["status", "--json"], STATUS_TIMEOUT)
                .and_then(|ran| reads::document_of(link.name(), &ran));
            (status, events.join().ok())
        });
        if let Ok(mut views) = views.lock()
            && let Some(view) = views.get_mut(index)
        {
            view.pending = false;
            match status {
                Ok(mut doc) => {
                    let rows = match doc.get_mut("agents").map(Value::take) {
                        Some(Value::Array(rows)) => rows,
                        _ => Vec::new(),
                    };
                    view.rows = Some((rows, jiff::Timestamp::now()));
                    view.error = None;
                }
                Err(e) => view.error = Some(e.to_string()),
            }
            if let Some(Ok(mut doc)) = events {
                let mut list = match doc.get_mut("events").map(Value::take) {
                    Some(Value::Array(list)) => list,
                    _ => Vec::new(),
                };
                reads::label(&mut list, Some(link.name()));
                view.events = list;
            }
        }
        let until = Instant::now() + interval;
        while Instant::now() < until
            && !stop.load(Ordering::Relaxed)
            && wake.load(Ordering::Relaxed) == seen
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// How a host shows in the view: a line for the title of the events when it is not fine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    pub host: String,
    /// Why it did not answer last time.
    pub error: Option<String>,
    /// Seconds since its last answer (`None`: never answered).
    pub age: Option<i64>,
    /// Not asked to the end yet since top started.
    pub pending: bool,
}

/// The hosts' rows for the view: every host's last rows (stale ones with health `unknown`),
/// placeholders for the agents of a host that never answered, which host each agent is on,
/// and one line per host.
pub fn rows(
    spec: &Spec,
    views: &[HostView],
    now: jiff::Timestamp,
) -> (Vec<AgentStatus>, BTreeMap<String, String>, Vec<HostLine>) {
    let mut rows = Vec::new();
    let mut placed = BTreeMap::new();
    let mut lines = Vec::new();
    for view in views {
        let stale = view.error.is_some();
        let mut theirs: Vec<AgentStatus> = match &view.rows {
            Some((list, _)) => list.iter().map(|r| row_of(r, stale)).collect(),
            None => Vec::new(),
        };
        // The agents phoenix.toml puts there that the host did not describe.
        let missing: Vec<AgentStatus> = reads::agents_of(spec, &view.host)
            .filter(|a| !theirs.iter().any(|r| r.agent == a.name))
            .map(|a| placeholder(&a.name, a.enabled, view.pending || stale))
            .collect();
        theirs.extend(missing);
        for r in &theirs {
            placed.insert(r.agent.clone(), view.host.clone());
        }
        rows.extend(theirs);
        lines.push(HostLine {
            host: view.host.clone(),
            error: view.error.clone(),
            age: view
                .rows
                .as_ref()
                .map(|(_, at)| now.as_second() - at.as_second()),
            pending: view.pending,
        });
    }
    (rows, placed, lines)
}

/// A row of a host's `status --json` as the view's row. Values the view does not know
/// become `unknown`; a stale row (its host did not answer last time) keeps what it was but
/// its health is `unknown`.
pub fn row_of(row: &Value, stale: bool) -> AgentStatus {
    let text = |k: &str| row[k].as_str().map(str::to_string);
    let count = |k: &str| row[k].as_u64().unwrap_or(0) as usize;
    let context = &row["context"];
    AgentStatus {
        agent: text("agent").unwrap_or_else(|| "?".into()),
        declared: row["declared"] == true,
        enabled: row["enabled"] == true,
        state: known(&row["state"], STATES),
        health: if stale {
            "unknown"
        } else {
            known(&row["health"], HEALTHS)
        },
        watchdog: Vec::new(),
        pane: text("pane"),
        pid: row["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
        uptime_secs: row["uptime_secs"].as_i64(),
        last_activity: text("last_activity"),
        cli: text("cli"),
        status: text("status"),
        current_task: text("current_task"),
        open_loops: count("open_loops"),
        stale_loops: count("stale_loops"),
        crashes: count("crashes"),
        restarts: count("restarts"),
        max_crashes: row["max_crashes"]
            .as_u64()
            .and_then(|m| u32::try_from(m).ok()),
        context: Context {
            score: context["score"].as_u64().unwrap_or(0).min(100) as u8,
            level: known(&context["level"], LEVELS),
            ..Context::default()
        },
        ..AgentStatus::default()
    }
}

/// An agent of a host with no row from it: `unknown` while the host has not answered.
fn placeholder(agent: &str, enabled: bool, unknown: bool) -> AgentStatus {
    let (state, health) = match (enabled, unknown) {
        (false, _) => ("disabled", "disabled"),
        (true, true) => ("unknown", "unknown"),
        (true, false) => ("declared", "down"),
    };
    AgentStatus {
        agent: agent.to_string(),
        declared: true,
        enabled,
        state,
        health,
        context: Context {
            level: "unknown",
            ..Context::default()
        },
        ..AgentStatus::default()
    }
}

const STATES: &[&str] = &[
    "declared",
    "running",
    "starting",
    "cooldown",
    "safe-mode",
    "dead",
    "stopped",
    "moved",
    "disabled",
    "pruned-pending",
];
const HEALTHS: &[&str] = &[
    "healthy",
    "warning",
    "recovering",
    "down",
    "stopped",
    "disabled",
    "unmanaged",
];
const LEVELS: &[&str] = &["fresh", "aging", "stale", "none"];

/// `value` as one of `known`, or `unknown`.
fn known(value: &Value, known: &[&'static str]) -> &'static str {
    value
        .as_str()
        .and_then(|v| known.iter().find(|k| **k == v).copied())
        .unwrap_or("unknown")
}

/// This machine's events and every host's, one timeline, the newest `limit` kept.
pub fn events(local: Vec<Value>, views: &[HostView], limit: usize) -> Vec<Value> {
    let mut all = local;
    for view in views {
        all.extend(view.events.iter().cloned());
    }
    all.sort_by_key(|e| {
        e["ts"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
    let extra = all.len().saturating_sub(limit);
    all.drain(..extra);
    all
}

/// The title of the events block's problem: the hosts that did not answer last time.
pub fn problems(lines: &[HostLine]) -> Option<String> {
    let said: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            let error = l.error.as_deref()?;
            let age = match l.age {
                Some(secs) => format!("last answer {} ago", super::view::short_secs(secs)),
                None => "no answer yet".to_string(),
            };
            Some(format!("{error} ({age})"))
        })
        .collect();
    (!said.is_empty()).then(|| said.join(" · "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_with(hosts: &str) -> Spec {
        let tmp = std::env::temp_dir();
        crate::spec::parse(
            hosts,
            &tmp.join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap()
    }

    #[test]
    fn a_dead_host_keeps_its_last_rows_as_stale_and_an_unasked_one_shows_its_agents_unknown() {
        let spec = spec_with(
            "[[host]]\nname = \"gpu-1\"\nssh = \"gpu-1\"\n\n[[host]]\nname = \"gpu-2\"\nssh = \"gpu-2\"\n\n\
             [[agent]]\nname = \"a\"\nhost = \"gpu-1\"\ncommand = \"x\"\n\n\
             [[agent]]\nname = \"b\"\nhost = \"gpu-2\"\ncommand = \"x\"\n",
        );
        let now = jiff::Timestamp::now();
        let views = vec![
            HostView {
                host: "gpu-1".into(),
                rows: Some((
                    vec![
                        json!({"agent": "a", "state": "running", "health": "healthy",
                                "pid": 7, "declared": true, "enabled": true,
                                "context": {"score": 80, "level": "fresh"}}),
                    ],
                    now - jiff::SignedDuration::from_secs(30),
                )),
                error: Some("host `gpu-1` is unreachable: refused".into()),
                ..HostView::default()
            },
            HostView {
                host: "gpu-2".into(),
                pending: true,
                ..HostView::default()
            },
        ];
        let (rows, placed, lines) = rows(&spec, &views, now);
        assert_eq!(rows[0].agent, "a");
        assert_eq!(rows[0].state, "running");
        assert_eq!(rows[0].health, "unknown");
        assert_eq!(rows[0].pid, Some(7));
        assert_eq!(rows[0].context.level, "fresh");
        assert_eq!(rows[1].state, "unknown");
        assert_eq!(placed["b"], "gpu-2");
        assert_eq!(lines[0].age, Some(30));
        let said = problems(&lines).unwrap();
        assert!(
            said.contains("unreachable") && said.contains("30s ago"),
            "{said}"
        );
    }
}
