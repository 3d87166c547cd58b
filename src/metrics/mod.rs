//! `/metrics`: the fleet in the Prometheus text format, for `phoenix serve` and
//! `phoenix run --metrics-listen`. Each scrape reads what `phoenix status` reads (one look at
//! the runtime, each agent's state files) and, for the counters, what each agent's append-only
//! logs added since the previous scrape (`tally`): a counter is the count of its whole log, so
//! it goes on from the same number after phoenix restarts, in whichever process serves it.
//! The text is written by the `prometheus` crate's encoder from typed metric families.

pub mod tally;

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::core::{Collector as PromCollector, Desc};
use prometheus::proto::{Bucket, Histogram, Metric, MetricFamily, MetricType};
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry, TextEncoder};

use crate::error::{Error, Result};
use crate::spec::Spec;
use crate::state::bounded::Links;
use crate::state::daemon::ReconcileStats;
use crate::state::{self, FleetDir};
use crate::status::AgentStatus;
use crate::watchdog::Check;
use crate::world::Runtime;
use tally::{HookErrors, OpsTally, Tailed, Tokens};

/// The content type of the text format written here (version 0.0.4, which every Prometheus
/// and `promtool check metrics` read).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// At most this much of the agents' logs is read in one scrape: a first scrape of a fleet with
/// long logs catches up over a few scrapes instead of taking seconds (its counters climb to
/// their totals meanwhile; they never go down).
const SCRAPE_READ_BUDGET: u64 = 32 << 20;

/// Who a per-agent series is about. `host` names the machine of a multi-host fleet's agent:
/// `None` for the agents of this machine, the only ones a scrape here sees so far; once any
/// series has a host, every series of the scrape gets the label (empty for this machine's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLabels {
    pub agent: String,
    pub cli: String,
    pub host: Option<String>,
}

impl AgentLabels {
    fn names(hosted: bool) -> Vec<&'static str> {
        let mut names = vec!["agent", "cli"];
        if hosted {
            names.push("host");
        }
        names
    }

    fn values<'a>(&'a self, hosted: bool, extra: &[&'a str]) -> Vec<&'a str> {
        let mut values = vec![self.agent.as_str(), self.cli.as_str()];
        if hosted {
            values.push(self.host.as_deref().unwrap_or(""));
        }
        values.extend_from_slice(extra);
        values
    }
}

/// One agent as a scrape sees it.
#[derive(Debug, Clone)]
pub struct AgentSample {
    pub labels: AgentLabels,
    pub row: AgentStatus,
    pub ops: OpsTally,
    pub hook_errors: HookErrors,
    pub tokens: Option<u64>,
    /// Seconds since the agent last showed activity.
    pub idle_seconds: Option<f64>,
}

/// The fleet-wide part of a scrape.
#[derive(Debug, Clone, Default)]
pub struct FleetSample {
    pub reconcile: ReconcileStats,
    pub daemon_running: bool,
}

/// What one agent's logs have added up to so far.
#[derive(Debug)]
struct Logs {
    ops: Tailed<OpsTally>,
    hook_errors: Tailed<HookErrors>,
    /// The current session's transcript and its tokens (a new session is a new count).
    transcript: Option<(String, Tailed<Tokens>)>,
}

impl Default for Logs {
    fn default() -> Self {
        Logs {
            ops: Tailed::whole(),
            hook_errors: Tailed::whole(),
            transcript: None,
        }
    }
}

/// Scrapes one fleet, remembering between scrapes how far each log has been counted. One per
/// serving process; scrapes take turns.
#[derive(Debug, Default)]
pub struct Collector {
    logs: Mutex<HashMap<String, Logs>>,
}

impl Collector {
    pub fn new() -> Collector {
        Collector::default()
    }

    /// One scrape of `spec`'s fleet: the text to answer `GET /metrics` with. Fails only when
    /// the runtime cannot be observed at all.
    pub fn scrape(&self, spec: &Spec, runtime: &dyn Runtime) -> Result<String> {
        let (fleet, agents) = self.sample(spec, runtime)?;
        encode(&fleet, &agents)
    }

    /// The facts of one scrape.
    pub fn sample(
        &self,
        spec: &Spec,
        runtime: &dyn Runtime,
    ) -> Result<(FleetSample, Vec<AgentSample>)> {
        let world = crate::status::observe(spec, runtime)?;
        let rows = crate::status::lean_rows(spec, &world);
        let dirs = FleetDir::new(&spec.fleet.state_dir);
        let now = jiff::Timestamp::now();
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        // Agents gone from the fleet are forgotten (counted from their logs again if they
        // come back).
        logs.retain(|name, _| rows.iter().any(|r| &r.agent == name));
        let mut budget = SCRAPE_READ_BUDGET;
        let mut agents = Vec::with_capacity(rows.len());
        for row in rows {
            let dir = dirs.agent(&row.agent);
            let log = logs.entry(row.agent.clone()).or_default();
            log.ops
                .advance(&dir.file(state::OPS_LOG), Links::Refuse, &mut budget);
            log.hook_errors
                .advance(&dir.file(state::HOOK_ERRORS), Links::Refuse, &mut budget);
            let tokens = row.transcript.as_deref().and_then(|path| {
                if log.transcript.as_ref().is_none_or(|(p, _)| p != path) {
                    let tail = crate::watchdog::observe::TRANSCRIPT_TAIL_BYTES;
                    log.transcript = Some((path.to_string(), Tailed::last(tail)));
                }
                let (_, tailed) = log.transcript.as_mut()?;
                tailed.advance(std::path::Path::new(path), Links::Follow, &mut budget);
                tailed.tally.0.total()
            });
            let idle_seconds = world
                .agents
                .get(&row.agent)
                .and_then(|o| o.last_activity)
                .map(|t| (now.as_millisecond() - t.as_millisecond()).max(0) as f64 / 1000.0);
            agents.push(AgentSample {
                labels: AgentLabels {
                    agent: row.agent.clone(),
                    cli: row.cli.clone().unwrap_or_else(|| "unknown".into()),
                    host: None,
                },
                ops: log.ops.tally.clone(),
                hook_errors: log.hook_errors.tally.clone(),
                tokens,
                idle_seconds,
                row,
            });
        }
        let fleet = FleetSample {
            reconcile: ReconcileStats::load(&dirs),
            daemon_running: state::daemon::daemon_pid(&dirs).is_some(),
        };
        Ok((fleet, agents))
    }
}

fn prom(e: prometheus::Error) -> Error {
    Error::msg(format!("cannot build the metrics: {e}"))
}

/// The metric families of one scrape, registered as they are made.
struct Families {
    registry: Registry,
    hosted: bool,
}

impl Families {
    fn names(&self, extra: &[&'static str]) -> Vec<&'static str> {
        let mut names = AgentLabels::names(self.hosted);
        names.extend_from_slice(extra);
        names
    }

    fn gauge(&self, name: &str, help: &str, extra: &[&'static str]) -> Result<GaugeVec> {
        let vec = GaugeVec::new(Opts::new(name, help), &self.names(extra)).map_err(prom)?;
        self.registry
            .register(Box::new(vec.clone()))
            .map_err(prom)?;
        Ok(vec)
    }

    fn counter(&self, name: &str, help: &str, extra: &[&'static str]) -> Result<IntCounterVec> {
        let vec = IntCounterVec::new(Opts::new(name, help), &self.names(extra)).map_err(prom)?;
        self.registry
            .register(Box::new(vec.clone()))
            .map_err(prom)?;
        Ok(vec)
    }
}

fn flag(b: bool) -> Option<f64> {
    Some(if b { 1.0 } else { 0.0 })
}

/// A per-agent gauge: name, help, and its value for an agent (none: no series for it).
type Gauge = (&'static str, &'static str, fn(&AgentSample) -> Option<f64>);

const GAUGES: &[Gauge] = &[
    (
        "phoenix_agent_up",
        "1 when the agent's CLI runs under its wrapper, else 0.",
        |a| flag(a.row.state == "running"),
    ),
    (
        "phoenix_agent_safe_mode",
        "1 when the agent is in safe mode (a crash limit or a diagnosis stopped it).",
        |a| flag(a.row.in_safe_mode()),
    ),
    (
        "phoenix_agent_crashes_in_window",
        "Crashes within the agent's crash_window.",
        |a| Some(a.row.crashes as f64),
    ),
    (
        "phoenix_agent_last_activity_age_seconds",
        "Seconds since the agent last showed activity (state.json, tool_use.jsonl, ops.jsonl).",
        |a| a.idle_seconds,
    ),
    (
        "phoenix_agent_open_loops",
        "Open loops in state.json.",
        |a| Some(a.row.open_loops as f64),
    ),
    (
        "phoenix_agent_stale_loops",
        "Open loops older than thresholds.stale_after.",
        |a| Some(a.row.stale_loops as f64),
    ),
    (
        "phoenix_agent_session_tokens",
        "Tokens the current session's transcript reports (Codex: its cumulative count; Claude Code and Gemini: summed over its last 32 MiB).",
        |a| a.tokens.map(|t| t as f64),
    ),
];

/// A per-agent counter: name, help, its own labels, and its counts for an agent by the
/// values of those labels.
type Counter = (
    &'static str,
    &'static str,
    &'static [&'static str],
    fn(&AgentSample) -> Vec<(Vec<&str>, u64)>,
);

const COUNTERS: &[Counter] = &[
    (
        "phoenix_agent_restarts_total",
        "Starts of the agent after its first, by why the run before ended (an EndReason, operator_restart, watchdog_restart or unknown).",
        &["reason"],
        |a| by_one(&a.ops.restarts),
    ),
    (
        "phoenix_agent_watchdog_findings_total",
        "Findings of watchdog passes that acted on the agent, by check.",
        &["check"],
        |a| by_one(&a.ops.findings),
    ),
    (
        "phoenix_agent_handoffs_saved_total",
        "Handoffs saved, by trigger.",
        &["trigger"],
        |a| by_one(&a.ops.handoffs),
    ),
    (
        "phoenix_agent_clinic_recoveries_total",
        "Clinic recoveries, by diagnosis (root cause) and outcome (rehabilitated or aborted).",
        &["diagnosis", "outcome"],
        |a| {
            a.ops
                .recoveries
                .iter()
                .map(|(k, n)| (vec![k.0.as_str(), k.1.as_str()], *n))
                .collect()
        },
    ),
    (
        "phoenix_agent_injections_total",
        "Text given to the running agent, by kind and outcome (delivered or failed).",
        &["kind", "outcome"],
        |a| {
            a.ops
                .injections
                .iter()
                .map(|(k, n)| (vec![k.0, k.1], *n))
                .collect()
        },
    ),
    (
        "phoenix_hook_errors_total",
        "Problems the agent's hooks ran into, by hook event.",
        &["event"],
        |a| by_one(&a.hook_errors.0),
    ),
];

/// Counts keyed by one label value.
fn by_one(counts: &std::collections::BTreeMap<String, u64>) -> Vec<(Vec<&str>, u64)> {
    counts.iter().map(|(k, n)| (vec![k.as_str()], *n)).collect()
}

/// The text of one scrape.
pub fn encode(fleet: &FleetSample, agents: &[AgentSample]) -> Result<String> {
    let f = Families {
        registry: Registry::new(),
        hosted: agents.iter().any(|a| a.labels.host.is_some()),
    };
    for (name, help, value) in GAUGES {
        let gauge = f.gauge(name, help, &[])?;
        for a in agents {
            if let Some(v) = value(a) {
                gauge
                    .with_label_values(&a.labels.values(f.hosted, &[]))
                    .set(v);
            }
        }
    }
    let health = f.gauge(
        "phoenix_agent_health_check_failing",
        "1 when the watchdog's last pass found this check failing for the running agent, else 0.",
        &["check"],
    )?;
    for a in agents {
        for check in Check::ALL {
            let failing = a.row.watchdog.contains(&check.as_str());
            health
                .with_label_values(&a.labels.values(f.hosted, &[check.as_str()]))
                .set(if failing { 1.0 } else { 0.0 });
        }
    }
    for (name, help, extra, counts) in COUNTERS {
        let counter = f.counter(name, help, extra)?;
        for a in agents {
            for (keys, n) in counts(a) {
                counter
                    .with_label_values(&a.labels.values(f.hosted, &keys))
                    .inc_by(n);
            }
        }
    }
    fleet_families(&f, fleet)?;
    let mut text = String::new();
    TextEncoder::new()
        .encode_utf8(&f.registry.gather(), &mut text)
        .map_err(prom)?;
    Ok(text)
}

fn fleet_families(f: &Families, fleet: &FleetSample) -> Result<()> {
    let daemon = prometheus::IntGauge::new(
        "phoenix_daemon_running",
        "1 when a `phoenix run` supervises this fleet's state dir, else 0.",
    )
    .map_err(prom)?;
    daemon.set(i64::from(fleet.daemon_running));
    f.registry.register(Box::new(daemon)).map_err(prom)?;
    let passes = IntCounterVec::new(
        Opts::new(
            "phoenix_reconcile_passes_total",
            "Reconcile passes of the daemon, by outcome (ok or error), across its restarts.",
        ),
        &["outcome"],
    )
    .map_err(prom)?;
    passes.with_label_values(&["ok"]).inc_by(fleet.reconcile.ok);
    passes
        .with_label_values(&["error"])
        .inc_by(fleet.reconcile.failed);
    f.registry.register(Box::new(passes)).map_err(prom)?;
    f.registry
        .register(Box::new(ReconcileHistogram::new(&fleet.reconcile)?))
        .map_err(prom)
}

/// The reconcile duration histogram, from the counts the daemon keeps in the state dir (a
/// histogram made here would count only this process's observations).
struct ReconcileHistogram {
    desc: Desc,
    family: MetricFamily,
}

impl ReconcileHistogram {
    const NAME: &str = "phoenix_reconcile_duration_seconds";
    const HELP: &str = "How long the daemon's reconcile passes took.";

    fn new(stats: &ReconcileStats) -> Result<Self> {
        let desc = Desc::new(
            Self::NAME.into(),
            Self::HELP.into(),
            Vec::new(),
            HashMap::new(),
        )
        .map_err(prom)?;
        let mut cumulative = 0;
        let buckets = stats
            .bounds
            .iter()
            .zip(&stats.buckets)
            .map(|(bound, n)| {
                cumulative += n;
                let mut b = Bucket::default();
                b.set_upper_bound(*bound);
                b.set_cumulative_count(cumulative);
                b
            })
            .collect();
        let mut h = Histogram::default();
        h.set_sample_count(stats.buckets.iter().sum());
        h.set_sample_sum(stats.sum_seconds);
        h.set_bucket(buckets);
        let mut m = Metric::default();
        m.set_histogram(h);
        let mut family = MetricFamily::default();
        family.set_name(Self::NAME.into());
        family.set_help(Self::HELP.into());
        family.set_field_type(MetricType::HISTOGRAM);
        family.set_metric(vec![m]);
        Ok(ReconcileHistogram { desc, family })
    }
}

impl PromCollector for ReconcileHistogram {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        vec![self.family.clone()]
    }
}

#[cfg(test)]
mod tests;
