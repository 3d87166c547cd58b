//! The daemon's journal of the fleet's lives: every crash, restart, revival and safe-mode entry
//! of every agent, logged (stderr / the systemd journal) as it lands in its ops.jsonl.
//!
//! Each agent's wrapper restarts it and records the step, not the daemon, so the daemon learns
//! of them by following the ops logs of the state dir — the same follower as
//! `phoenix events --follow`. New agent dirs are picked up as they appear.

use std::time::Duration;

use serde_json::Value;
use tracing::{error, info, warn};

use crate::state::FleetDir;
use crate::state::events::{Filter, Follower};

/// How often the ops logs are read: a crash shows up in the journal within this.
const POLL: Duration = Duration::from_millis(500);

/// The follower of the fleet's ops logs, made before the daemon's first pass so that nothing
/// that pass starts is missed.
pub struct Journal {
    fleet: FleetDir,
    known: Vec<String>,
    follower: Follower,
}

impl Journal {
    pub fn new(fleet: FleetDir) -> Journal {
        let mut follower = Follower::new(&fleet, &filter(&[]));
        let known = fleet.agent_names();
        for agent in &known {
            follower.watch_agent(&fleet, agent, false);
        }
        Journal {
            fleet,
            known,
            follower,
        }
    }

    /// Log the steps a person watching the journal needs, until the task is dropped.
    pub async fn follow(mut self) {
        loop {
            // An agent dir made since (a first start, a config reload): all of it is new.
            for agent in self.fleet.agent_names() {
                if !self.known.contains(&agent) {
                    self.follower.watch_agent(&self.fleet, &agent, true);
                    self.known.push(agent);
                }
            }
            for event in self.follower.poll(&filter(&[])) {
                log(&event);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

fn filter<'a>(agents: &'a [&'a str]) -> Filter<'a> {
    Filter {
        agents,
        all_steps: true,
        ..Filter::default()
    }
}

/// One step as a log line, if it is one of the lives' turning points.
fn log(e: &Value) {
    let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
    let d = |k: &str| e["details"][k].clone();
    let agent = s("agent");
    match s("event").as_str() {
        "agent_exit" if d("reason") == "crash" || d("reason") == "no_life" => warn!(
            agent = %agent, reason = %s("reason"), code = %d("code"), signal = %d("signal"),
            action = %d("action"), "agent crashed"
        ),
        "agent_exit" => {
            info!(agent = %agent, reason = %s("reason"), action = %d("action"), "agent session ended")
        }
        "agent_start" => info!(
            agent = %agent, pid = %d("pid"), mode = %d("mode"),
            "agent (re)started"
        ),
        "spawn_failed" => {
            error!(agent = %agent, details = %e["details"], "agent could not be started")
        }
        "operator_restart" => {
            info!(agent = %agent, fresh = %d("fresh"), "restart asked for by an operator")
        }
        "watchdog_restart" => {
            warn!(agent = %agent, fresh = %d("fresh"), "agent revived by the watchdog")
        }
        "clinic_rehabilitation" => {
            info!(agent = %agent, details = %e["details"], "agent revived by the Clinic")
        }
        "safe_mode" => error!(agent = %agent, why = %d("why"), "agent entered safe mode"),
        "crash_loop" => error!(agent = %agent, reason = %s("reason"), "crash loop: agent stopped"),
        _ => {}
    }
}
