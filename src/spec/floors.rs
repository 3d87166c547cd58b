//! Floors of the duration keys. None has an "off": a value of zero switched its protection
//! off (`crash_window = "0s"` never counted a crash: 1,282 restarts a minute) or made phoenix
//! spin (`reconcile_interval = "0s"`). Each floor is the least that still does the key's job.

use std::time::Duration;

/// The smallest value a duration key accepts, and what the key protects (for the hint).
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub min: Duration,
    pub why: &'static str,
}

const fn floor(millis: u64, why: &'static str) -> Floor {
    Floor {
        min: Duration::from_millis(millis),
        why,
    }
}

pub const RECONCILE_INTERVAL: Floor = floor(
    1000,
    "how often `phoenix run` reconciles the fleet; a shorter interval keeps the daemon busy",
);
pub const COOLDOWN: Floor = floor(
    100,
    "the wait before restarting a crashed agent (doubled per crash up to `backoff_max`)",
);
pub const BACKOFF_MAX: Floor = floor(100, "the longest wait between restarts");
pub const CRASH_WINDOW: Floor = floor(
    60_000,
    "crashes within this long count towards `max_crashes`; a shorter window never stops a crash loop",
);
pub const LIFE_DEADLINE: Floor = floor(
    1000,
    "how long a started agent has to show life before the start counts as failed",
);
pub const SILENCE: Floor = floor(
    1000,
    "no sign of life (tool call, prompt, transcript write, screen change) for this long in a working turn is unhealthy; for a very patient watchdog use a long value like \"1d\"",
);
pub const RUNAWAY: Floor = floor(
    1000,
    "working this long without finishing a turn is reported; for no report in practice use a long value like \"7d\"",
);
pub const STALE_AFTER: Floor = floor(60_000, "open loops older than this are flagged stale");
pub const RESOLVED_RETENTION: Floor = floor(
    60_000,
    "resolved items are kept this long; zero would drop them at once",
);
pub const EVENTS_RETENTION: Floor = floor(
    3_600_000,
    "critical_events.jsonl keeps this long; zero would delete the record of every failure",
);
pub const ISSUE_COOLDOWN: Floor = floor(
    1000,
    "at most one new GitHub issue per fleet within this long; zero would open one per report",
);
pub const WAITING: Floor = floor(
    1000,
    "idle at its prompt with open loops for this long, an agent needs a person; zero would call every finished turn a wait",
);
pub const INPUT_COOLDOWN: Floor = floor(
    0,
    "at most one \"needs a human\" notification per agent within this long; \"0s\" sends one per wait",
);
pub const TIMEOUT: Floor = floor(
    1000,
    "how long the command or request may take; zero would fail every time",
);
pub const METRICS_INTERVAL: Floor = floor(
    1000,
    "how often the daemon samples the fleet (tmux, each agent's state files) and exports its metrics over OTLP",
);
