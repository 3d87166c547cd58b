//! `/metrics`: the fleet in the Prometheus text format, for `phoenix serve` and
//! `phoenix run --metrics-listen`. Each scrape reads what `phoenix status` reads (one look at
//! the runtime, each agent's state files) and, for the counters, what each agent's append-only
//! logs added since the previous scrape (`tally`): a counter is the count of its whole log, so
//! it goes on from the same number after phoenix restarts, in whichever process serves it.
//! The text is written by the `prometheus` crate's encoder from typed metric families.

pub mod tally;

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::TextEncoder;
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};

use crate::error::{Error, Result};
use crate::spec::Spec;
use crate::state::bounded::Links;
use crate::state::daemon::ReconcileStats;
use crate::state::{self, FleetDir};
use crate::status::AgentStatus;
use crate::watchdog::Check;
use crate::world::{Runtime, World};
use tally::{HookErrors, OpsTally, Tailed, Tokens};

/// The content type of the text format written here (version 0.0.4, which every Prometheus
/// and `promtool check metrics` read).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// At most this much of the agents' logs is read in one scrape: a first scrape of a fleet with
/// long logs catches up over a few scrapes instead of taking seconds (its counters climb to
/// their totals meanwhile; they never go down).
const SCRAPE_READ_BUDGET: u64 = 32 << 20;

/// Who a per-agent series is about. `host` names the machine of a multi-host fleet's agent:
/// `local` for the agents of this machine when the fleet has `[[host]]`s (`None` without),
/// the only ones a scrape here sees so far; once any series has a host, every series of the
/// scrape gets the label (empty for an agent without one),
/// as a metric's series must all have the same label names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLabels {
    pub agent: String,
    pub cli: String,
    pub host: Option<String>,
}

impl AgentLabels {
    /// The label pairs of a series about this agent: `agent`, `cli`, `host` when the scrape
    /// has hosts, then the series' own (`extra`: name and value).
    fn pairs(&self, hosted: bool, extra: &[(&str, &str)]) -> Vec<LabelPair> {
        let mut pairs = vec![pair("agent", &self.agent), pair("cli", &self.cli)];
        if hosted {
            pairs.push(pair("host", self.host.as_deref().unwrap_or("")));
        }
        pairs.extend(extra.iter().map(|(n, v)| pair(n, v)));
        pairs
    }
}

fn pair(name: &str, value: &str) -> LabelPair {
    let mut p = LabelPair::default();
    p.set_name(name.to_string());
    p.set_value(value.to_string());
    p
}

/// One agent as a scrape sees it.
#[derive(Debug, Clone)]
pub struct AgentSample {
    pub labels: AgentLabels,
    pub row: AgentStatus,
    pub ops: OpsTally,
    pub hook_errors: HookErrors,
    pub tokens: Option<u64>,
    /// Today's tokens and their estimated cost, as the usage ledger last saved them.
    pub today: crate::usage::Spent,
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

    /// One scrape of a world observed already (`phoenix serve` shares one among its readers).
    pub fn scrape_world(&self, spec: &Spec, world: &World) -> Result<String> {
        let (fleet, agents) = self.sample_of(spec, world);
        encode(&fleet, &agents)
    }

    /// The facts of one scrape.
    pub fn sample(
        &self,
        spec: &Spec,
        runtime: &dyn Runtime,
    ) -> Result<(FleetSample, Vec<AgentSample>)> {
        let world = crate::status::observe_lean(spec, runtime)?;
        Ok(self.sample_of(spec, &world))
    }

    /// The facts of one scrape of `world`.
    fn sample_of(&self, spec: &Spec, world: &World) -> (FleetSample, Vec<AgentSample>) {
        let rows = crate::status::lean_rows(spec, world);
        let dirs = FleetDir::new(&spec.fleet.state_dir);
        let now = jiff::Timestamp::now();
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        // Agents gone from the fleet are forgotten (counted from their logs again if they
        // come back).
        logs.retain(|name, _| rows.iter().any(|r| &r.agent == name));
        let mut budget = SCRAPE_READ_BUDGET;
        let prices = crate::usage::Prices::new(&spec.prices);
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
                    // A fleet across machines: this machine's agents are `local`'s, as
                    // `plan` labels them (no `[[host]]` may take the name).
                    host: (!spec.hosts.is_empty()).then(|| crate::spec::THIS_MACHINE.into()),
                },
                ops: log.ops.tally.clone(),
                hook_errors: log.hook_errors.tally.clone(),
                tokens,
                today: crate::usage::Spent::of(&crate::usage::ledger::saved_today(&dir), &prices),
                idle_seconds,
                row,
            });
        }
        let fleet = FleetSample {
            reconcile: ReconcileStats::load(&dirs),
            daemon_running: state::daemon::daemon_pid(&dirs).is_some(),
        };
        (fleet, agents)
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

/// A per-agent counter: name, help, and its counts for an agent, each with the series' own
/// labels.
type Counter = (
    &'static str,
    &'static str,
    fn(&AgentSample) -> Vec<(Vec<(&'static str, &str)>, u64)>,
);

const COUNTERS: &[Counter] = &[
    (
        "phoenix_agent_restarts_total",
        "Starts of the agent after its first, by why the run before ended (an EndReason, operator_restart, watchdog_restart or unknown).",
        |a| by_one("reason", &a.ops.restarts),
    ),
    (
        "phoenix_agent_watchdog_findings_total",
        "Findings of watchdog passes that acted on the agent, by check.",
        |a| by_one("check", &a.ops.findings),
    ),
    (
        "phoenix_agent_handoffs_saved_total",
        "Handoffs saved, by trigger.",
        |a| by_one("trigger", &a.ops.handoffs),
    ),
    (
        "phoenix_agent_clinic_recoveries_total",
        "Clinic recoveries, by diagnosis (root cause) and outcome (rehabilitated or aborted).",
        |a| {
            a.ops
                .recoveries
                .iter()
                .map(|((d, o), n)| (vec![("diagnosis", d.as_str()), ("outcome", o.as_str())], *n))
                .collect()
        },
    ),
    (
        "phoenix_agent_injections_total",
        "Text given to the running agent, by kind and outcome (delivered or failed).",
        |a| {
            a.ops
                .injections
                .iter()
                .map(|((k, o), n)| (vec![("kind", *k), ("outcome", *o)], *n))
                .collect()
        },
    ),
    (
        "phoenix_hook_errors_total",
        "Problems the agent's hooks ran into, by hook event.",
        |a| by_one("event", &a.hook_errors.0),
    ),
];

/// Counts keyed by the value of one label.
fn by_one<'a>(
    label: &'static str,
    counts: &'a std::collections::BTreeMap<String, u64>,
) -> Vec<(Vec<(&'static str, &'a str)>, u64)> {
    counts
        .iter()
        .map(|(k, n)| (vec![(label, k.as_str())], *n))
        .collect()
}

/// A family of the crate's model; `None` without series (the encoder refuses an empty one).
fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> Option<MetricFamily> {
    if metrics.is_empty() {
        return None;
    }
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    Some(f)
}

fn gauge(labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut g = prometheus::proto::Gauge::default();
    g.set_value(value);
    let mut m = Metric::from_gauge(g);
    m.set_label(labels);
    m
}

/// The text of one scrape. The families are built in the `prometheus` crate's model and
/// written by its encoder (names, escaping, the format's grammar); not through its registry
/// of live metrics, whose per-series locks and hashing would cost a large fleet's scrape
/// several milliseconds for values that are read once.
pub fn encode(fleet: &FleetSample, agents: &[AgentSample]) -> Result<String> {
    let families = families(fleet, agents);
    let mut text = String::with_capacity(families.len() * 4096);
    TextEncoder::new()
        .encode_utf8(&families, &mut text)
        .map_err(|e| Error::msg(format!("cannot write the metrics: {e}")))?;
    Ok(text)
}

/// A metric as declared: what every exporter of these facts needs to know before the first
/// sample (the OTLP exporter creates its instruments from it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Described {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
}

/// Every metric [`families`] can write, whether or not a sample has series for it.
pub fn catalogue() -> Vec<Described> {
    let gauge = |(name, help, _): &Gauge| Described {
        name,
        help,
        kind: MetricType::GAUGE,
    };
    let counter = |(name, help, _): &Counter| Described {
        name,
        help,
        kind: MetricType::COUNTER,
    };
    let mut all: Vec<Described> = GAUGES.iter().map(gauge).collect();
    all.extend(COUNTERS.iter().map(counter));
    for (name, help) in [TOKENS_TODAY, COST_TODAY, HEALTH, DAEMON_RUNNING] {
        all.push(Described {
            name,
            help,
            kind: MetricType::GAUGE,
        });
    }
    all.push(Described {
        name: PASSES.0,
        help: PASSES.1,
        kind: MetricType::COUNTER,
    });
    all.push(Described {
        name: DURATION.0,
        help: DURATION.1,
        kind: MetricType::HISTOGRAM,
    });
    all
}

const TOKENS_TODAY: (&str, &str) = (
    "phoenix_agent_tokens_today",
    "Tokens the agent used today (local day), by kind, from its usage ledger as the daemon last updated it.",
);
const COST_TODAY: (&str, &str) = (
    "phoenix_agent_cost_usd_today",
    "Estimated cost in USD of the agent's priced usage today (built-in prices or [prices]); unpriced=\"true\" when some of its models have no price.",
);
const HEALTH: (&str, &str) = (
    "phoenix_agent_health_check_failing",
    "1 when the watchdog's last pass found this check failing for the running agent, else 0.",
);
const DAEMON_RUNNING: (&str, &str) = (
    "phoenix_daemon_running",
    "1 when a `phoenix run` supervises this fleet's state dir, else 0.",
);
const PASSES: (&str, &str) = (
    "phoenix_reconcile_passes_total",
    "Reconcile passes of the daemon, by outcome (ok or error), across its restarts.",
);
/// The reconcile histogram's name and help.
pub const DURATION: (&str, &str) = (
    "phoenix_reconcile_duration_seconds",
    "How long the daemon's reconcile passes took.",
);

/// The families of one sample in the `prometheus` crate's model, sorted by name; a metric
/// without series has no family.
pub fn families(fleet: &FleetSample, agents: &[AgentSample]) -> Vec<MetricFamily> {
    let hosted = agents.iter().any(|a| a.labels.host.is_some());
    let mut families = Vec::new();
    for (name, help, value) in GAUGES {
        let metrics = agents
            .iter()
            .filter_map(|a| Some(gauge(a.labels.pairs(hosted, &[]), value(a)?)))
            .collect();
        families.extend(family(name, help, MetricType::GAUGE, metrics));
    }
    let tokens_today = agents
        .iter()
        .flat_map(|a| {
            let t = &a.today.tokens.tokens;
            [
                ("input", t.input),
                ("output", t.output),
                ("cache_write", t.cache_write),
                ("cache_read", t.cache_read),
            ]
            .map(|(kind, n)| gauge(a.labels.pairs(hosted, &[("kind", kind)]), n as f64))
        })
        .collect();
    families.extend(family(
        TOKENS_TODAY.0,
        TOKENS_TODAY.1,
        MetricType::GAUGE,
        tokens_today,
    ));
    // Only priced usage has a cost: an agent whose models are all unpriced has no series
    // (never a 0 that reads as free), and `unpriced` says when a cost leaves some out.
    let cost_today = agents
        .iter()
        .filter_map(|a| {
            let usd = a.today.cost_usd?;
            let unpriced = if a.today.unpriced_models.is_empty() {
                "false"
            } else {
                "true"
            };
            Some(gauge(
                a.labels.pairs(hosted, &[("unpriced", unpriced)]),
                usd,
            ))
        })
        .collect();
    families.extend(family(
        COST_TODAY.0,
        COST_TODAY.1,
        MetricType::GAUGE,
        cost_today,
    ));
    let health = agents
        .iter()
        .flat_map(|a| {
            Check::ALL.iter().map(move |check| {
                let failing = a.row.watchdog.contains(&check.as_str());
                let labels = a.labels.pairs(hosted, &[("check", check.as_str())]);
                gauge(labels, if failing { 1.0 } else { 0.0 })
            })
        })
        .collect();
    families.extend(family(HEALTH.0, HEALTH.1, MetricType::GAUGE, health));
    for (name, help, counts) in COUNTERS {
        let metrics = agents
            .iter()
            .flat_map(|a| {
                counts(a).into_iter().map(|(extra, n)| {
                    let mut c = prometheus::proto::Counter::default();
                    c.set_value(n as f64);
                    let mut m = Metric::default();
                    m.set_counter(c);
                    m.set_label(a.labels.pairs(hosted, &extra));
                    m
                })
            })
            .collect();
        families.extend(family(name, help, MetricType::COUNTER, metrics));
    }
    families.extend(fleet_families(fleet));
    families.sort_by(|a, b| a.name().cmp(b.name()));
    families
}

/// The daemon and its reconcile passes, from the counts it keeps in the state dir (a
/// histogram of this process's own would count only the passes it ran).
fn fleet_families(fleet: &FleetSample) -> Vec<MetricFamily> {
    let stats = &fleet.reconcile;
    let passes = [("ok", stats.ok), ("error", stats.failed)]
        .into_iter()
        .map(|(outcome, n)| {
            let mut c = prometheus::proto::Counter::default();
            c.set_value(n as f64);
            let mut m = Metric::default();
            m.set_counter(c);
            m.set_label(vec![pair("outcome", outcome)]);
            m
        })
        .collect();
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
    let mut histogram = Metric::default();
    histogram.set_histogram(h);
    [
        family(
            DAEMON_RUNNING.0,
            DAEMON_RUNNING.1,
            MetricType::GAUGE,
            vec![gauge(
                Vec::new(),
                if fleet.daemon_running { 1.0 } else { 0.0 },
            )],
        ),
        family(PASSES.0, PASSES.1, MetricType::COUNTER, passes),
        family(
            DURATION.0,
            DURATION.1,
            MetricType::HISTOGRAM,
            vec![histogram],
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests;
