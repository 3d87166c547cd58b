//! `phoenix events`: the fleet's critical events (crash loops, policy fallbacks, every step of a
//! Clinic recovery, corrupt state rolled back) and each session's end, oldest first, optionally
//! followed; with `--all` every step of the agents' ops.jsonl too.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{out, output};
use crate::state::{FleetDir, events as critical};

// `phoenix events`' arguments (their help is the variant's, in `Command`).
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// Only this agent's events.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only events whose name starts with this (e.g. `clinic`, `policy_error`).
    #[arg(long)]
    pub event: Option<String>,
    /// Only the last N events.
    #[arg(long, short = 'n')]
    pub limit: Option<usize>,
    /// Only events of the last DURATION (e.g. `1h`, `30m`, `7d`).
    #[arg(long, value_parser = super::parse_duration_arg)]
    pub since: Option<Duration>,
    /// A JSON document `{format_version, events: […]}` (with --follow: one JSON object per
    /// line, each with `format_version`).
    #[arg(long)]
    pub json: bool,
    /// Keep printing events as they are recorded.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Every step of the agents' ops.jsonl too (hooks, spawns, restarts), not only the
    /// critical events and each session's end.
    #[arg(long)]
    pub all: bool,
}

pub fn events(config: &Path, args: EventsArgs) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    if let Some(agent) = args.agent.as_deref() {
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
        agent: args.agent.as_deref(),
        event: args.event.as_deref(),
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
            .as_deref()
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
