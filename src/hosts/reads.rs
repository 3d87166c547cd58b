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
use super::carry::Fenced;
use super::fleet::{Link, each, links};
use super::moves::{Place, Placements};
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
    /// What was left out of the host's document ([`super::admit`]).
    pub warnings: Vec<String>,
    /// The stale copies the host stopped as this call delivered the fences it was owed.
    pub fenced: Vec<Fenced>,
}

/// `args` (a read that prints one `--json` document) on every link at once; each host's rows
/// admitted ([`super::admit::document`]): only of agents the fleet knows, every field bounded.
pub fn ask_json(links: &[Link], args: &[String], timeout: Duration) -> Vec<Answer> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    each(links, |link| {
        let mut warnings = Vec::new();
        let result = link
            .run(&words, timeout)
            .and_then(|ran| document_of(link.name(), &ran))
            .map(|mut doc| {
                warnings = super::admit::document(link.name(), &mut doc, Some(&link.known));
                doc
            });
        Answer {
            host: link.name().to_string(),
            result,
            warnings,
            fenced: link.fenced.lock().map(|f| f.clone()).unwrap_or_default(),
        }
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
    let mut doc = doc;
    if doc.get("ok") == Some(&Value::Bool(false))
        && let Some(error) = doc.get("error")
    {
        let said = |v: &Value| v.as_str().map(|s| crate::text::shorten(s, 1000));
        let message = said(&error["message"]).unwrap_or_else(|| "failed".into());
        let hint = said(&error["hint"]).map(|h| format!(" ({h})"));
        return Err(failed(format!("{message}{}", hint.unwrap_or_default())));
    }
    // Bounded here, whoever reads it (its rows admitted by `ask_json`).
    super::admit::bound_document(&mut doc);
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
pub(crate) fn not_applied(error: &HostError) -> bool {
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
    // A record that cannot be read marks nothing stale: `plan` and `move` say why.
    let placements = super::moves::load(&spec.fleet.state_dir).unwrap_or_default();
    let mut rows = take_rows(&mut local, "agents");
    let (mut rows, _) = placed_rows(spec, &placements, &Place::Local, std::mem::take(&mut rows));
    label(&mut rows, None);
    let mut hosts = Vec::new();
    for answer in answers {
        let host = answer.host.as_str();
        let declared = agents_of(spec, host).filter(|a| agent.is_none_or(|n| n == a.name));
        let stopped: Vec<&String> = answer.fenced.iter().flat_map(|f| &f.stopped).collect();
        let fence_failed: Vec<&String> = answer.fenced.iter().flat_map(|f| &f.failed).collect();
        match answer.result {
            Ok(mut doc) => {
                let (mut theirs, said) = placed_rows(
                    spec,
                    &placements,
                    &Place::Host(host.to_string()),
                    take_rows(&mut doc, "agents"),
                );
                let warnings: Vec<&String> = answer.warnings.iter().chain(&said).collect();
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
                    "warnings": warnings,
                    "stale_stopped": stopped, "stale_stop_failed": fence_failed,
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

/// The rows of `on`'s status that are its to give: those of the agents phoenix.toml or the
/// operator's record place there, and a stale copy's (an agent placed elsewhere whose pane
/// still runs there: its row says `stale`, health `down`, and where it is placed). A host's
/// row of any other agent is left out, said in a warning; this machine's rows all stay.
pub fn placed_rows(
    spec: &Spec,
    placements: &Placements,
    on: &Place,
    rows: Vec<Value>,
) -> (Vec<Value>, Vec<String>) {
    let mut kept = Vec::new();
    let mut foreign = Vec::new();
    for mut row in rows {
        let Some(agent) = row["agent"].as_str().map(str::to_string) else {
            continue;
        };
        let declared_here = match on {
            Place::Local => spec.agent(&agent).is_some(),
            Place::Host(host) => agents_of(spec, host).any(|a| a.name == agent),
        };
        let placed = placements.place_of(spec, &agent);
        if declared_here || placed.as_ref() == Some(on) {
            kept.push(row);
            continue;
        }
        let Some(placed) = placed else {
            // An agent the fleet does not know: a host's row is not its to give; this
            // machine's (a pane nobody declared) shows as it always did.
            match on {
                Place::Local => kept.push(row),
                Place::Host(_) => foreign.push(agent),
            }
            continue;
        };
        if runs(&row) {
            let generation = placements.generation(&agent);
            let fields = row.as_object_mut().expect("a status row is an object");
            fields.insert("state".into(), "stale".into());
            fields.insert("health".into(), "down".into());
            fields.insert(
                "stale".into(),
                json!({"placed": placed.to_string(), "generation": generation}),
            );
            kept.push(row);
        } else if matches!(on, Place::Local) {
            kept.push(row);
        }
        // A host's copy of an agent placed elsewhere that does not run: nothing to show.
    }
    let mut warnings = Vec::new();
    if let (Place::Host(host), false) = (on, foreign.is_empty()) {
        foreign.sort();
        foreign.dedup();
        let shown: Vec<&str> = foreign.iter().map(String::as_str).take(5).collect();
        warnings.push(format!(
            "host `{host}` sent status rows of agents phoenix.toml does not place there ({}{}): left out",
            shown.join(", "),
            if foreign.len() > shown.len() { ", …" } else { "" }
        ));
    }
    (kept, warnings)
}

/// A status row whose pane runs (what a stale copy is).
fn runs(row: &Value) -> bool {
    row["pane"].is_string() && !matches!(row["state"].as_str(), Some("dead" | "moved"))
}

/// A row of a copy of an agent on a machine it was moved away from.
pub fn is_stale(row: &Value) -> bool {
    row["state"] == "stale"
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
/// and enabled, and down, stopped or unknown (its host did not answer); or a stale copy
/// (the fleet does not run as placed until it is gone).
pub fn is_down(row: &Value) -> bool {
    is_stale(row)
        || row["declared"] == true
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
    /// What was left out of the hosts' answers ([`super::admit`]).
    pub warnings: Vec<String>,
}

/// `local` and the array `key` of every answer, labelled, in host order (this machine first).
pub fn merge(mut local: Vec<Value>, answers: Vec<Answer>, key: &str) -> Merged {
    label(&mut local, None);
    let mut merged = Merged {
        rows: local,
        unreachable: Vec::new(),
        warnings: Vec::new(),
    };
    for answer in answers {
        merged.warnings.extend(answer.warnings);
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
    if !merged.warnings.is_empty() {
        doc.insert("warnings".into(), json!(merged.warnings));
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
            warnings: Vec::new(),
            fenced: Vec::new(),
        }
    }

    fn down(host: &str) -> Answer {
        Answer {
            host: host.into(),
            result: Err(HostError::Transport(TransportError::Unreachable {
                host: host.into(),
                detail: "Connection refused".into(),
            })),
            warnings: Vec::new(),
            fenced: Vec::new(),
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
