//! The daemon's journal of the fleet's lives: every crash, restart, revival and safe-mode entry
//! of every agent, logged (stderr / the systemd journal) as it lands in its ops.jsonl.
//!
//! Each agent's wrapper restarts it and records the step, not the daemon, so the daemon learns
//! of them by following the ops logs of the state dir — the same follower as
//! `phoenix events --follow`. New agent dirs are picked up as they appear.
//!
//! With `[telemetry]` on, the same follower feeds the OTLP exporter: every event a log record,
//! every recovery a span (telemetry/records.rs). That is why the hooks need not export.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::{error, info, warn};

use crate::state::FleetDir;
use crate::state::events::{Filter, Follower};
use crate::telemetry::Telemetry;
use crate::telemetry::records::Recorder;

/// Dropped telemetry records are logged at most this often.
const DROPS_REPORTED_EVERY: Duration = Duration::from_secs(60);

/// How often the ops logs are read where the agents' dirs cannot be watched: a crash shows
/// up in the journal within this.
const POLL: Duration = Duration::from_millis(500);
/// How often they are read anyway while watched: a missed file event costs a late line,
/// never a lost one (the follower reads from where it stopped).
const WATCHED_POLL: Duration = Duration::from_secs(30);

/// The follower of the fleet's ops logs, made before the daemon's first pass so that nothing
/// that pass starts is missed.
pub struct Journal {
    fleet: FleetDir,
    known: Vec<String>,
    follower: Follower,
    export: Option<Export>,
}

/// The exporter the events also go to, and what the log said of it last.
struct Export {
    telemetry: Arc<Telemetry>,
    recorder: Recorder,
    dropped_logged: u64,
    failed_logged: u64,
    logged_at: Option<Instant>,
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
            export: None,
        }
    }

    /// Also hand every event to `telemetry`.
    pub fn exporting(mut self, telemetry: Option<Arc<Telemetry>>) -> Journal {
        self.export = telemetry.map(|telemetry| Export {
            telemetry,
            recorder: Recorder::default(),
            dropped_logged: 0,
            failed_logged: 0,
            logged_at: None,
        });
        self
    }

    /// Log the steps a person watching the journal needs, until the task is dropped. The
    /// ops logs are read when one is written (inotify on the agents' dirs), not every half
    /// second: an idle fleet's daemon sleeps.
    pub async fn follow(mut self) {
        let written = Arc::new(tokio::sync::Notify::new());
        let watcher = watch_ops_logs(&self.fleet.root.join("agents"), written.clone());
        let every = match &watcher {
            Ok(_) => WATCHED_POLL,
            Err(e) => {
                warn!(error = %e, "cannot watch the agents' ops logs; reading them every 500 ms");
                POLL
            }
        };
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
                if let Some(export) = &mut self.export {
                    for record in export.recorder.records(&event) {
                        export.telemetry.send(record);
                    }
                }
            }
            if let Some(export) = &mut self.export {
                export.report();
            }
            tokio::select! {
                _ = written.notified() => {}
                _ = tokio::time::sleep(every) => {}
            }
        }
    }
}

/// Wake `written` whenever an `ops.jsonl` under `agents` is written, or an agent's dir is made.
fn watch_ops_logs(
    agents: &std::path::Path,
    written: Arc<tokio::sync::Notify>,
) -> std::io::Result<crate::state::tree_watch::TreeWatch> {
    std::fs::create_dir_all(agents)?;
    crate::state::tree_watch::watch_tree(
        agents,
        crate::state::tree_watch::STATE_DIR_DEPTH,
        move |change| {
            // An overflow: read everything now. A new agent's dir: all of it is new.
            if change.overflow
                || change.dir_created
                || change.name.is_some_and(|n| n == crate::state::OPS_LOG)
            {
                written.notify_one();
            }
        },
    )
}

impl Export {
    /// Say in the log how many records were dropped or refused since it last did, at most
    /// once a minute: the counts a person needs to trust (or distrust) the collector's view.
    fn report(&mut self) {
        if self
            .logged_at
            .is_some_and(|at| at.elapsed() < DROPS_REPORTED_EVERY)
        {
            return;
        }
        let (queued, dropped, failed) = self.telemetry.counts().snapshot();
        if dropped == self.dropped_logged && failed == self.failed_logged {
            return;
        }
        warn!(
            endpoint = %self.telemetry.endpoint(), queued, dropped, failed_posts = failed,
            "telemetry: records dropped (queue full) or posts refused by the collector"
        );
        self.dropped_logged = dropped;
        self.failed_logged = failed;
        self.logged_at = Some(Instant::now());
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
