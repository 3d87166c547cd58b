//! `phoenix events`: the fleet's critical events (crash loops, policy fallbacks, every step of a
//! Clinic recovery, corrupt state rolled back) and each session's end, oldest first, optionally
//! followed; with `--all` every step of the agents' ops.jsonl too.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{out, output};
use crate::spec::{self, LoadOptions};
use crate::state::{FleetDir, events as critical};

pub struct EventsArgs<'a> {
    pub agent: Option<&'a str>,
    pub event: Option<&'a str>,
    pub limit: Option<usize>,
    /// Only events recorded within this long before now.
    pub since: Option<Duration>,
    pub json: bool,
    pub follow: bool,
    /// Every step of the agents' ops.jsonl too.
    pub all: bool,
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
    let declared = spec.agent_names();
    let filter = critical::Filter {
        agent: args.agent,
        event: args.event,
        limit: args.limit,
        since: args.since.and_then(critical::Filter::since_age),
        agents: &declared,
        all_steps: args.all,
    };
    // Made before the read, so nothing recorded in between is missed.
    let mut follower = args
        .follow
        .then(|| critical::Follower::new(&fleet, &filter));
    let (events, skipped) = critical::read(&fleet, &filter);
    if skipped > 0 {
        eprintln!(
            "warning: {skipped} line(s) of {} are not valid JSON and were skipped",
            path.display()
        );
    }
    if args.json && !args.follow {
        output::json(serde_json::json!({"events": events}));
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
    let Some(follower) = follower.as_mut() else {
        return Ok(0);
    };
    let filter = critical::Filter {
        limit: None,
        ..filter
    };
    loop {
        std::thread::sleep(Duration::from_millis(250));
        for e in follower.poll(&filter) {
            out(&line(&e, args.json));
        }
    }
}

/// One event for a person (`ts  agent  event  reason → action`) or as a JSON line.
fn line(e: &Value, json: bool) -> String {
    if json {
        return format!("{}\n", output::document(e));
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
    crate::text::shorten(&flat, 200)
}
