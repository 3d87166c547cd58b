//! Fleet-wide reads across hosts: each host's phoenix is asked for its own `--json` document
//! (`status`, `events`, `handoff search`, …) through [`Link::run`], every host at once, and
//! the answers are merged with this machine's into one document whose rows name their host.
//! A host that does not answer within its timeout is reported as such (with what ssh said),
//! its agents as `unknown`; the others are shown all the same.
//!
//! Rows of this machine carry `"host": null` (as an agent without `host` in phoenix.toml runs
//! here); without any `[[host]]`, nothing is added and every document is as it always was.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::HostError;
use super::fleet::{Link, each, links};
use super::protocol::{ErrorKind, Ran};
use crate::spec::{RemoteAgent, Spec};

/// How long `status` waits for a host: a person is looking at the screen, and the slowest
/// host bounds the whole view (the others are asked at the same time).
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(10);
/// How long another read (events, a search, logs) waits for a host.
pub const READ_TIMEOUT: Duration = super::fleet::READ_TIMEOUT;

/// The host `agent` runs on, when phoenix.toml puts it on one; `None` for this machine's
/// agents and for names it does not declare.
pub fn host_of<'a>(spec: &'a Spec, agent: &str) -> Option<&'a str> {
    spec.remote_agents
        .iter()
        .find(|a| a.name == agent)
        .map(|a| a.host.as_str())
}

/// The link to the host named `host`.
pub fn link_to(spec: &Spec, host: &str) -> Option<Link> {
    links(spec).into_iter().find(|l| l.name() == host)
}

/// The agents phoenix.toml puts on `host`.
pub fn agents_of<'a>(spec: &'a Spec, host: &'a str) -> impl Iterator<Item = &'a RemoteAgent> {
    spec.remote_agents.iter().filter(move |a| a.host == host)
}

/// One host's JSON document, or why there is none.
#[derive(Debug)]
pub struct Answer {
    pub host: String,
    pub result: Result<Value, HostError>,
}

/// `args` (a read that prints one `--json` document) on every link at once.
pub fn ask_json(links: &[Link], args: &[String], timeout: Duration) -> Vec<Answer> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    each(links, |link| Answer {
        host: link.name().to_string(),
        result: link
            .run(&words, timeout)
            .and_then(|ran| document_of(link.name(), &ran)),
    })
}

/// The JSON document a host's command printed. Its own error document (`ok: false`) is the
/// host's error; anything that is not JSON is reported with what the command said on stderr.
pub fn document_of(host: &str, ran: &Ran) -> Result<Value, HostError> {
    let failed = |message: String| HostError::Remote {
        host: host.to_string(),
        kind: ErrorKind::Failed,
        message,
    };
    let doc: Value = serde_json::from_str(ran.stdout.trim()).map_err(|_| {
        let said = ran
            .stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no output");
        failed(format!(
            "`phoenix` there did not print a JSON document ({})",
            crate::text::shorten(said, 300)
        ))
    })?;
    if doc.get("ok") == Some(&Value::Bool(false))
        && let Some(error) = doc.get("error")
    {
        let message = error["message"].as_str().unwrap_or("failed").to_string();
        let hint = error["hint"].as_str().map(|h| format!(" ({h})"));
        return Err(failed(format!("{message}{}", hint.unwrap_or_default())));
    }
    Ok(doc)
}

/// A host that did not answer, as the `hosts` list of a merged document shows it:
/// `reachable` is false when ssh did not get through (or the host did not answer in time),
/// true when the host's phoenix answered with an error of its own.
pub fn unreachable(host: &str, error: &HostError) -> Value {
    let reachable = !matches!(error, HostError::Transport(_));
    json!({"host": host, "reachable": reachable, "error": error.to_string(), "hint": error.hint()})
}

/// The host's answer when the operator never applied to it: it has no phoenix.toml yet.
fn not_applied(error: &HostError) -> bool {
    matches!(error, HostError::Remote { message, .. } if message.starts_with("no fleet here yet"))
}

/// Every row of `rows` with `"host": host` (`None`: this machine).
pub fn label(rows: &mut [Value], host: Option<&str>) {
    for row in rows {
        if let Value::Object(fields) = row {
            fields.insert("host".into(), host.map_or(Value::Null, Value::from));
        }
    }
}

/// The array `key` of `doc`, taken out.
fn take_rows(doc: &mut Value, key: &str) -> Vec<Value> {
    match doc.get_mut(key).map(Value::take) {
        Some(Value::Array(rows)) => rows,
        _ => Vec::new(),
    }
}

// ---- status ----

/// The status document of the whole fleet, what `status --json` prints and `GET /api/status`
/// returns: this machine observed while every host is asked (see [`status_document`]). With
/// `agent`, that agent's row alone (with its supervision record), from wherever it runs.
pub fn fleet_status(
    spec: &Spec,
    runtime: &dyn crate::world::Runtime,
    agent: Option<&str>,
) -> crate::error::Result<Value> {
    let remote = agent.is_some_and(|a| host_of(spec, a).is_some());
    let (world, answers) = std::thread::scope(|scope| {
        let hosts = scope.spawn(|| statuses(spec, agent));
        let world = crate::status::observe(spec, runtime);
        (
            world,
            hosts.join().expect("asking the hosts does not panic"),
        )
    });
    let world = match world {
        Ok(world) => world,
        // All the agents run on hosts: this machine needs no tmux to show them.
        Err(_) if spec.agents.is_empty() => crate::world::World {
            observed_at: jiff::Timestamp::now().as_second(),
            ..Default::default()
        },
        Err(e) => return Err(e),
    };
    let rows = match agent {
        Some(_) if remote => Vec::new(),
        Some(name) => vec![crate::status::agent(spec, &world, name).ok_or_else(|| {
            crate::error::Error::msg(format!("no agent `{name}` ({})", spec.declared_hint(name)))
        })?],
        None => crate::status::rows(spec, &world),
    };
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    let daemon = crate::state::daemon::daemon_pid(&fleet);
    let local = crate::status::document(spec, &world, &rows, daemon);
    Ok(status_document(spec, local, answers, agent))
}

/// `status --json` of every host (only `agent`'s host when one agent is asked for).
pub fn statuses(spec: &Spec, agent: Option<&str>) -> Vec<Answer> {
    let mut asked = links(spec);
    let mut args = vec!["status".to_string(), "--json".into()];
    if let Some(agent) = agent {
        asked.retain(|l| host_of(spec, agent) == Some(l.name()));
        args.extend(["--".into(), agent.to_string()]);
    }
    ask_json(&asked, &args, STATUS_TIMEOUT)
}

/// This machine's status document with every host's rows after its own, each labelled, and
/// `hosts`: per host whether it answered, and its tmux server and daemon if it did. A host
/// that did not answer has its agents (as phoenix.toml declares them) as `unknown` rows; an
/// agent phoenix.toml puts on a host that does not know it yet (or on a host never applied
/// to) is `declared` (not started), as a local agent that was never applied. Without
/// `[[host]]`s, `local` as it is.
pub fn status_document(
    spec: &Spec,
    mut local: Value,
    answers: Vec<Answer>,
    agent: Option<&str>,
) -> Value {
    if spec.hosts.is_empty() {
        return local;
    }
    let mut rows = take_rows(&mut local, "agents");
    label(&mut rows, None);
    let mut hosts = Vec::new();
    for answer in answers {
        let host = answer.host.as_str();
        let declared = agents_of(spec, host).filter(|a| agent.is_none_or(|n| n == a.name));
        match answer.result {
            Ok(mut doc) => {
                let mut theirs = take_rows(&mut doc, "agents");
                let missing: Vec<Value> = declared
                    .filter(|a| !theirs.iter().any(|r| r["agent"] == a.name))
                    .map(|a| placeholder(a, "declared", "down"))
                    .collect();
                theirs.extend(missing);
                label(&mut theirs, Some(host));
                rows.extend(theirs);
                hosts.push(json!({
                    "host": host, "reachable": true,
                    "server_running": doc["server_running"], "daemon": doc["daemon"],
                    "observed_at": doc["observed_at"],
                }));
            }
            Err(error) => {
                // A host never applied to runs none of them: declared, as a local agent
                // never applied; otherwise nobody knows.
                let (state, health) = match not_applied(&error) {
                    true => ("declared", "down"),
                    false => ("unknown", "unknown"),
                };
                let mut unknown: Vec<Value> =
                    declared.map(|a| placeholder(a, state, health)).collect();
                label(&mut unknown, Some(host));
                rows.extend(unknown);
                hosts.push(unreachable(host, &error));
            }
        }
    }
    local["agents"] = Value::Array(rows);
    local["hosts"] = Value::Array(hosts);
    local
}

/// The row of an agent of a host that its host did not describe: every field a row has, so a
/// script reads it as any other.
fn placeholder(agent: &RemoteAgent, state: &'static str, health: &'static str) -> Value {
    let row = crate::status::AgentStatus {
        agent: agent.name.clone(),
        declared: true,
        enabled: agent.enabled,
        state: if agent.enabled { state } else { "disabled" },
        health: if agent.enabled { health } else { "disabled" },
        context: crate::status::Context {
            level: "unknown",
            ..Default::default()
        },
        ..Default::default()
    };
    serde_json::to_value(row).unwrap_or_default()
}

/// A row of a merged status that `status` counts as not running (its exit code 3): declared
/// and enabled, and down, stopped or unknown (its host did not answer).
pub fn is_down(row: &Value) -> bool {
    row["declared"] == true
        && row["enabled"] == true
        && matches!(row["health"].as_str(), Some("down" | "stopped" | "unknown"))
}

// ---- events, search, handoff lists ----

/// This machine's rows and every host's, merged.
#[derive(Debug, Default)]
pub struct Merged {
    /// Each with its `host` (`null`: this machine).
    pub rows: Vec<Value>,
    /// The hosts that did not answer ([`unreachable`]).
    pub unreachable: Vec<Value>,
}

/// `local` and the array `key` of every answer, labelled, in host order (this machine first).
pub fn merge(mut local: Vec<Value>, answers: Vec<Answer>, key: &str) -> Merged {
    label(&mut local, None);
    let mut merged = Merged {
        rows: local,
        unreachable: Vec::new(),
    };
    for answer in answers {
        match answer.result {
            Ok(mut doc) => {
                let mut rows = take_rows(&mut doc, key);
                label(&mut rows, Some(&answer.host));
                merged.rows.extend(rows);
            }
            Err(error) => merged.unreachable.push(unreachable(&answer.host, &error)),
        }
    }
    merged
}

/// Events of every host merged into one timeline, oldest first (events without a time
/// first, as one host's own `events` sorts them), the last `limit` kept.
pub fn merge_events(local: Vec<Value>, answers: Vec<Answer>, limit: Option<usize>) -> Merged {
    let mut merged = merge(local, answers, "events");
    // Stable: two events of one instant keep their host's order.
    merged.rows.sort_by_key(|e| {
        e["ts"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
    if let Some(limit) = limit {
        let extra = merged.rows.len().saturating_sub(limit);
        merged.rows.drain(..extra);
    }
    merged
}

/// Search hits of every host merged by rank (bm25, lower is better; every host's index
/// weighs titles and bodies alike), the best `limit` kept.
pub fn merge_hits(local: Vec<Value>, answers: Vec<Answer>, limit: usize) -> Merged {
    let mut merged = merge(local, answers, "hits");
    let rank = |hit: &Value| hit["rank"].as_f64().unwrap_or(f64::INFINITY);
    merged.rows.sort_by(|a, b| rank(a).total_cmp(&rank(b)));
    merged.rows.truncate(limit);
    merged
}

/// A merged document: `fields` (the rows under `key`) and `hosts` when one did not answer.
pub fn merged_document(key: &str, merged: Merged) -> Value {
    let mut doc = Map::new();
    doc.insert(key.into(), Value::Array(merged.rows));
    if !merged.unreachable.is_empty() {
        doc.insert("hosts".into(), Value::Array(merged.unreachable));
    }
    Value::Object(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::TransportError;

    fn answer(host: &str, doc: Value) -> Answer {
        Answer {
            host: host.into(),
            result: Ok(doc),
        }
    }

    fn down(host: &str) -> Answer {
        Answer {
            host: host.into(),
            result: Err(HostError::Transport(TransportError::Unreachable {
                host: host.into(),
                detail: "Connection refused".into(),
            })),
        }
    }

    #[test]
    fn events_of_every_host_form_one_timeline_labelled_by_host() {
        let local = vec![json!({"ts": "2026-01-01T00:00:02Z", "event": "b"})];
        let gpu = json!({"events": [
            {"ts": "2026-01-01T00:00:01Z", "event": "a"},
            {"ts": "2026-01-01T00:00:03Z", "event": "c"},
        ]});
        let merged = merge_events(local, vec![answer("gpu-1", gpu), down("gpu-2")], Some(2));
        let names: Vec<_> = merged.rows.iter().map(|e| e["event"].clone()).collect();
        assert_eq!(names, [json!("b"), json!("c")]);
        assert_eq!(merged.rows[0]["host"], Value::Null);
        assert_eq!(merged.rows[1]["host"], "gpu-1");
        assert_eq!(merged.unreachable[0]["host"], "gpu-2");
        assert_eq!(merged.unreachable[0]["reachable"], false);
        assert!(
            merged.unreachable[0]["error"]
                .as_str()
                .unwrap()
                .contains("refused")
        );
    }

    #[test]
    fn hits_of_every_host_are_merged_by_rank() {
        let local = vec![json!({"title": "here", "rank": -1.0})];
        let far =
            json!({"hits": [{"title": "best", "rank": -3.5}, {"title": "worst", "rank": -0.2}]});
        let merged = merge_hits(local, vec![answer("gpu-1", far)], 2);
        let titles: Vec<_> = merged.rows.iter().map(|h| h["title"].clone()).collect();
        assert_eq!(titles, [json!("best"), json!("here")]);
        assert_eq!(merged.rows[0]["host"], "gpu-1");
    }

    #[test]
    fn a_hosts_error_document_is_its_error_and_garbage_says_what_stderr_said() {
        let ran = |stdout: &str, stderr: &str| Ran {
            code: Some(1),
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        let err = document_of(
            "gpu-1",
            &ran(
                r#"{"format_version":1,"ok":false,"error":{"message":"no agent `x`","hint":"declared: a"}}"#,
                "",
            ),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "host `gpu-1`: no agent `x` (declared: a)");
        let err = document_of("gpu-1", &ran("oops", "\nerror: boom\n")).unwrap_err();
        assert!(err.to_string().contains("error: boom"), "{err}");
    }

    #[test]
    fn a_row_for_every_kind_of_down_counts_and_unknown_too() {
        let row = |health: &str| json!({"declared": true, "enabled": true, "health": health});
        assert!(is_down(&row("down")));
        assert!(is_down(&row("unknown")));
        assert!(!is_down(&row("healthy")));
        assert!(!is_down(
            &json!({"declared": true, "enabled": false, "health": "unknown"})
        ));
    }
}
