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
    /// Each event's time in UTC (RFC 3339) instead of its age.
    #[arg(long)]
    pub utc: bool,
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
    // A host's agent has its events there (the merged read below asks its host).
    let remote = args
        .agent
        .as_deref()
        .and_then(|a| crate::hosts::reads::host_of(&spec, a));
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
    // Followed, the columns are as wide as the declared agents' names: later events line up.
    let names: &[&str] = if args.follow { &declared } else { &[] };
    let layout = Layout::new(&events, None, names, args.utc);
    if !args.json {
        let mut text = layout.header();
        for e in &events {
            text.push_str(&layout.line(e, None));
        }
        out(&text);
    } else {
        for e in &events {
            out(&json_line(e));
        }
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
            match args.json {
                true => out(&json_line(&e)),
                false => out(&layout.line(&e, None)),
            }
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

/// One event as a JSON line (`--json --follow`).
pub(super) fn json_line(e: &Value) -> String {
    output::json_line(&output::document(e))
}

/// Widest an AGENT or EVENT column grows: a longer name is shown whole, out of line.
const MAX_COLUMN: usize = 28;

/// How a person's lines of events are laid out: `AGE  [HOST]  AGENT  EVENT  WHAT`, each
/// column as wide as what it shows (or, when following, as the fleet's names), and the time
/// as an age (`5m`) or, with `--utc`, as RFC 3339.
pub(super) struct Layout {
    host: Option<usize>,
    agent: usize,
    event: usize,
    utc: bool,
    now: jiff::Timestamp,
}

impl Layout {
    /// For `rows`; `host`: the HOST column's width, when the fleet has hosts; `names`: more
    /// agent names the AGENT column must fit (the declared ones, for lines still to come).
    pub(super) fn new(rows: &[Value], host: Option<usize>, names: &[&str], utc: bool) -> Layout {
        let width = |key: &str, least: usize| {
            rows.iter()
                .map(|e| e[key].as_str().map_or(1, |s| s.chars().count()))
                .chain([least])
                .max()
                .unwrap_or(least)
                .min(MAX_COLUMN)
        };
        let named = names.iter().map(|s| s.chars().count()).max().unwrap_or(0);
        Layout {
            host,
            agent: width("agent", "AGENT".len()).max(named.min(MAX_COLUMN)),
            event: width("event", if named > 0 { 22 } else { "EVENT".len() }),
            utc,
            now: jiff::Timestamp::now(),
        }
    }

    fn time_width(&self) -> usize {
        if self.utc { 20 } else { 4 }
    }

    pub(super) fn header(&self) -> String {
        let host = self
            .host
            .map(|w| format!("{:<w$}  ", "HOST"))
            .unwrap_or_default();
        format!(
            "{:<t$}  {host}{:<a$}  {:<e$}  WHAT\n",
            if self.utc { "TIME (UTC)" } else { "AGE" },
            "AGENT",
            "EVENT",
            t = self.time_width(),
            a = self.agent,
            e = self.event,
        )
    }

    /// One event: its time, host (when the fleet has hosts), agent, event, and what it was
    /// and what was done (`reason → action`), on one line.
    pub(super) fn line(&self, e: &Value, host: Option<&str>) -> String {
        let field = |k: &str| e[k].as_str().unwrap_or("-").to_string();
        let action = field("action_taken");
        let host = match (self.host, host) {
            (Some(w), Some(name)) => format!("{name:<w$}  "),
            (Some(w), None) => format!("{:<w$}  ", "-"),
            _ => String::new(),
        };
        format!(
            "{:<t$}  {host}{:<a$}  {:<ev$}  {}{}\n",
            self.when(e["ts"].as_str()),
            field("agent"),
            field("event"),
            one_line(&field("reason")),
            if action == "-" {
                String::new()
            } else {
                format!(" → {action}")
            },
            t = self.time_width(),
            a = self.agent,
            ev = self.event,
        )
    }

    /// `5m`, `3h`, `2d` ago (`--utc`: the time itself, to the second).
    fn when(&self, ts: Option<&str>) -> String {
        let Some(at) = ts.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
            return ts.unwrap_or("-").to_string();
        };
        if self.utc {
            return at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        }
        let secs = self.now.duration_since(at).as_secs().max(0);
        match secs {
            s if s < 60 => format!("{s}s"),
            s if s < 3600 => format!("{}m", s / 60),
            s if s < 86_400 => format!("{}h", s / 3600),
            s => format!("{}d", s / 86_400),
        }
    }
}

fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::text::shorten(&flat, 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(ago_secs: i64, agent: &str, event: &str) -> Value {
        let ts = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(ago_secs);
        json!({"ts": ts.to_string(), "agent": agent, "event": event,
               "reason": "why\non two lines", "action_taken": "safe_mode"})
    }

    #[test]
    fn a_header_aligned_columns_and_ages() {
        let rows = [
            event(30, "a", "crash_loop"),
            event(3 * 3600 + 5, "long-agent-name", "clinic_prescription"),
        ];
        let layout = Layout::new(&rows, None, &[], false);
        let text: String = std::iter::once(layout.header())
            .chain(rows.iter().map(|e| layout.line(e, None)))
            .collect();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("AGE   AGENT"), "{text}");
        assert!(lines[1].starts_with("30s   a  "), "{text}");
        assert!(
            lines[2].starts_with(
                "3h    long-agent-name  clinic_prescription  why on two lines → safe_mode"
            ),
            "{text}"
        );
        // Every EVENT starts in the same column.
        let at = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(at(lines[0], "EVENT"), at(lines[1], "crash_loop"));
        assert_eq!(at(lines[0], "EVENT"), at(lines[2], "clinic_prescription"));
    }

    #[test]
    fn utc_shows_the_time_and_following_fits_the_declared_names() {
        let rows = [event(0, "a", "x")];
        let layout = Layout::new(&rows, Some(6), &["a-much-longer-name"], true);
        assert!(
            layout
                .header()
                .starts_with("TIME (UTC)            HOST    AGENT"),
            "{}",
            layout.header()
        );
        let line = layout.line(&rows[0], Some("gpu-1"));
        let ts: String = line.chars().take(20).collect();
        assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{line}");
        assert!(line.contains("gpu-1   a                   "), "{line}");
    }
}
