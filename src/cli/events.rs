//! `phoenix events`: the fleet's critical events (crash loops, policy fallbacks, every step of a
//! Clinic recovery, corrupt state rolled back), oldest first, optionally followed.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::out;
use crate::spec::{self, LoadOptions};
use crate::state::FleetDir;

pub struct EventsArgs<'a> {
    pub agent: Option<&'a str>,
    pub event: Option<&'a str>,
    pub limit: Option<usize>,
    /// Only events recorded within this long before now.
    pub since: Option<Duration>,
    pub json: bool,
    pub follow: bool,
}

pub fn events(config: &Path, args: EventsArgs<'_>) -> anyhow::Result<i32> {
    let spec = spec::load_with(
        config,
        LoadOptions {
            check_filesystem: false,
        },
    )?;
    if let Some(agent) = args.agent {
        // An agent that was pruned from the spec may still have events: warn, do not refuse.
        if spec.agent(agent).is_none() {
            eprintln!(
                "warning: agent `{agent}` is not declared in {}; showing its recorded events anyway",
                spec.file.display()
            );
        }
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let path = fleet.critical_events_path();
    let text = std::fs::read(&path).unwrap_or_default();
    let mut offset = text.len() as u64;
    let (mut events, skipped) = parse(&String::from_utf8_lossy(&text), &args);
    if let Some(agent) = args.agent {
        // For one agent, "why did it stop?" belongs here too: each session's end.
        let ops = fleet.agent(agent).file(crate::state::OPS_LOG);
        let ends: Vec<Value> = crate::clinic::triage::tail_jsonl(&ops)
            .into_iter()
            .filter(|o| o["event"] == "agent_exit")
            .map(|o| session_end(agent, o))
            .collect();
        let text: String = ends.iter().map(|e| format!("{e}\n")).collect();
        events.extend(parse(&text, &args).0);
        events.sort_by_key(|e| {
            e["ts"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        });
    }
    if let Some(limit) = args.limit {
        events.drain(..events.len().saturating_sub(limit));
    }
    if skipped > 0 {
        eprintln!(
            "warning: {skipped} line(s) of {} are not valid JSON and were skipped",
            path.display()
        );
    }
    if args.json && !args.follow {
        out(&format!("{}\n", serde_json::to_string_pretty(&events)?));
        return Ok(0);
    }
    if events.is_empty() && !args.follow && !args.json {
        let whose = args
            .agent
            .map(|a| format!(" for agent `{a}`"))
            .unwrap_or_default();
        out(&format!(
            "no critical events{whose} in {}\n",
            path.display()
        ));
        return Ok(0);
    }
    for e in &events {
        out(&line(e, args.json));
    }
    if !args.follow {
        return Ok(0);
    }
    // Follow: poll for appended lines (a rotated or truncated file is read from its start).
    let mut partial = String::new();
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let Ok(mut file) = std::fs::File::open(&path) else {
            continue;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < offset {
            offset = 0;
            partial.clear();
        }
        if len == offset || file.seek(SeekFrom::Start(offset)).is_err() {
            continue;
        }
        let mut chunk = Vec::new();
        if file.read_to_end(&mut chunk).is_err() {
            continue;
        }
        offset += chunk.len() as u64;
        partial.push_str(&String::from_utf8_lossy(&chunk));
        let Some(end) = partial.rfind('\n') else {
            continue;
        };
        let complete: String = partial.drain(..=end).collect();
        for e in parse(&complete, &args).0 {
            out(&line(&e, args.json));
        }
    }
}

/// An `agent_exit` line of ops.jsonl as an event: the one recorded reason a session ended.
fn session_end(agent: &str, op: Value) -> Value {
    let reason = op["reason"].as_str().unwrap_or("unknown").to_string();
    let explain = op["explain"].as_str().map(str::to_string);
    let action = op["action"].as_str().map(str::to_string);
    serde_json::json!({
        "ts": op["ts"], "event": "agent_exit", "agent": agent,
        "reason": match explain { Some(x) => format!("{reason}: {x}"), None => reason },
        "action_taken": action, "details": op,
    })
}

/// The events of `text` that pass the filters, and how many lines did not parse.
fn parse(text: &str, args: &EventsArgs<'_>) -> (Vec<Value>, usize) {
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
        .filter(|e| args.agent.is_none_or(|a| e["agent"].as_str() == Some(a)))
        .filter(|e| {
            args.event
                .is_none_or(|want| e["event"].as_str().is_some_and(|ev| ev.starts_with(want)))
        })
        .filter(|e| {
            let Some(since) = args.since else {
                return true;
            };
            let cutoff = jiff::Timestamp::now().as_second() - since.as_secs() as i64;
            // An event without a readable time is shown: better too much than a lost one.
            e["ts"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|t| t.as_second() >= cutoff)
        })
        .collect();
    (events, skipped)
}

/// One event for a person (`ts  agent  event  reason → action`) or as a JSON line.
fn line(e: &Value, json: bool) -> String {
    if json {
        return format!("{e}\n");
    }
    let field = |k: &str| e[k].as_str().unwrap_or("-").to_string();
    let action = field("action_taken");
    format!(
        "{}  {:<12} {:<22} {}{}\n",
        field("ts"),
        field("agent"),
        field("event"),
        one_line(&field("reason")),
        if action == "-" {
            String::new()
        } else {
            format!(" → {action}")
        }
    )
}

fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::clinic::triage::shorten(&flat, 200)
}
