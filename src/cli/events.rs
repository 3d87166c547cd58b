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
        let remote = crate::hosts::reads::host_of(&spec, agent).is_some();
        if spec.agent(agent).is_none() && !remote {
            eprintln!(
                "warning: agent `{agent}` is not declared in {}; showing its recorded events anyway",
                spec.file.display()
            );
        }
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let path = fleet.critical_events_path();
    let remote = args
        .agent
        .as_deref()
        .and_then(|a| crate::hosts::reads::host_of(&spec, a));
    if let (Some(host), true) = (remote, args.follow) {
        // One agent of a host, followed: its host's own `events --follow`, over ssh -t.
        let mut words = vec!["events".to_string(), "--follow".into()];
        words.extend(host_args(&args));
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        return super::fleetwide::exec_on_host(&spec, host, &words);
    }
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
    // Every host followed too, from now on (their past comes with the merged read below).
    let hosts = (args.follow && !spec.hosts.is_empty())
        .then(|| crate::hosts::follow::start(&spec, &follow_args(&args)));
    let (events, skipped) = match remote {
        Some(_) => (Vec::new(), 0),
        None => critical::read(&fleet, &filter),
    };
    if skipped > 0 {
        eprintln!(
            "warning: {skipped} line(s) of {} are not valid JSON and were skipped",
            path.display()
        );
    }
    if !spec.hosts.is_empty() {
        let mut words = vec!["events".to_string(), "--json".into()];
        words.extend(host_args(&args));
        let (Some(hosts), Some(mut follower)) = (hosts, follower) else {
            return super::fleetwide::events(&spec, &args, &words, events);
        };
        let filter = critical::Filter {
            limit: None,
            ..filter
        };
        return super::fleetwide::follow(&spec, &args, &words, events, hosts, || {
            follower.poll(&filter)
        });
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
        if reader_gone() {
            return Ok(0);
        }
    }
}

/// Nobody reads stdout any more (the ssh session of an operator following this host's events
/// ended): `--follow` ends now instead of lingering until its next line meets a closed pipe.
fn reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// The options of `args` that a host's `events` is given (its values glued to their option,
/// so none can be read as another option).
fn host_args(args: &EventsArgs) -> Vec<String> {
    let mut words = Vec::new();
    words.extend(args.agent.as_ref().map(|a| format!("--agent={a}")));
    words.extend(args.event.as_ref().map(|e| format!("--event={e}")));
    words.extend(args.limit.map(|n| format!("--limit={n}")));
    words.extend(args.since.map(|d| format!("--since={}s", d.as_secs())));
    if args.all {
        words.push("--all".into());
    }
    words
}

/// The options of `args` that a host's `events --follow` is given: which events, not how
/// many or since when (it follows from now on).
fn follow_args(args: &EventsArgs) -> Vec<String> {
    let mut words = Vec::new();
    words.extend(args.agent.as_ref().map(|a| format!("--agent={a}")));
    words.extend(args.event.as_ref().map(|e| format!("--event={e}")));
    if args.all {
        words.push("--all".into());
    }
    words
}

/// One event for a person (`ts  agent  event  reason → action`) or as a JSON line.
pub(super) fn line(e: &Value, json: bool) -> String {
    if json {
        return output::json_line(&output::document(e));
    }
    line_on(e, None)
}

/// One event for a person, with its host (and the host column's width) when the fleet has
/// hosts: `ts  host  agent  event  reason → action`.
pub(super) fn line_on(e: &Value, host: Option<(&str, usize)>) -> String {
    let field = |k: &str| e[k].as_str().unwrap_or("-").to_string();
    let action = field("action_taken");
    let host = host
        .map(|(name, width)| format!("{name:<width$} "))
        .unwrap_or_default();
    format!(
        "{}  {host}{:<12} {:<22} {}{}\n",
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
