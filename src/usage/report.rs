//! `phoenix usage`: each agent's ledger brought up to date, then its tokens and estimated cost
//! since a time, per model and (`--by day`) per local day. The document is the `--json`
//! output (docs/json.md); the CLI prints its table from the same value.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::prices::PriceSource;
use super::{Counted, Prices, Spent, Tokens, ledger};
use crate::spec::{Cli, Spec};
use crate::state::FleetDir;

/// What to report.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// One agent; `None`: every declared agent.
    pub agent: Option<String>,
    /// This long back from now (rounded down to the hour); `None`: everything recorded.
    pub since: Option<Duration>,
    pub by_day: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The first hour counted (RFC 3339); `null`: from the first record.
    pub since: Option<String>,
    pub until: String,
    /// `agent`, or `day` with `--by day`.
    pub by: &'static str,
    pub agents: Vec<AgentUsage>,
    pub total: Spent,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentUsage {
    pub agent: String,
    pub cli: String,
    #[serde(flatten)]
    pub spent: Spent,
    pub models: Vec<ModelUsage>,
    /// Per local day, oldest first (`--by day` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub days: Option<Vec<DayUsage>>,
    /// Why some usage may be missing (a session file that cannot be read…).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DayUsage {
    pub day: String,
    #[serde(flatten)]
    pub spent: Spent,
    pub models: Vec<ModelUsage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelUsage {
    pub model: String,
    pub tokens: Counted,
    /// `None`: the model is unpriced.
    pub cost_usd: Option<f64>,
    /// `config` (`[prices]`) or `built_in`; `null` when unpriced.
    pub price: Option<PriceSource>,
}

/// The report for `query`, each agent's ledger updated first. An agent that is not declared
/// is an error with the declared names as its hint.
pub fn report(spec: &Spec, query: &Query) -> crate::error::Result<Report> {
    let agents: Vec<(String, Cli)> = match &query.agent {
        Some(name) => {
            let a = spec
                .agent(name)
                .ok_or_else(|| crate::error::Error::Failed {
                    message: format!("no agent `{name}`"),
                    hint: Some(spec.declared_hint(name)),
                })?;
            vec![(a.name.clone(), a.cli)]
        }
        None => spec
            .agents
            .iter()
            .map(|a| (a.name.clone(), a.cli))
            .collect(),
    };
    let now = jiff::Timestamp::now().as_second();
    let since = query
        .since
        .map(|d| super::hour_start(now - d.as_secs().min(i64::MAX as u64) as i64));
    let prices = Prices::new(&spec.prices);
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let mut all = BTreeMap::new();
    let mut rows = Vec::new();
    for (name, cli) in agents {
        let dir = fleet.agent(&name);
        let mut notes = Vec::new();
        match ledger::update(&dir, cli, true) {
            Ok(u) => notes.extend(u.notes),
            Err(e) => notes.push(format!("the ledger was not brought up to date: {e}")),
        }
        let (lines, unreadable) = ledger::lines(&dir);
        notes.extend(unreadable);
        let mut by_model: BTreeMap<String, Tokens> = BTreeMap::new();
        let mut by_day: BTreeMap<String, BTreeMap<String, Tokens>> = BTreeMap::new();
        for line in lines {
            let Some(hour) = super::seconds(&line.hour) else {
                continue;
            };
            if since.is_some_and(|s| hour < s) {
                continue;
            }
            by_model
                .entry(line.model.clone())
                .or_default()
                .add(&line.tokens);
            by_day
                .entry(super::local_day(hour))
                .or_default()
                .entry(line.model)
                .or_default()
                .add(&line.tokens);
        }
        for (model, t) in &by_model {
            all.entry(model.clone())
                .or_insert_with(Tokens::default)
                .add(t);
        }
        rows.push(AgentUsage {
            agent: name,
            cli: cli.to_string(),
            spent: Spent::of(&by_model, &prices),
            models: models(&by_model, &prices),
            days: query.by_day.then(|| {
                by_day
                    .iter()
                    .map(|(day, m)| DayUsage {
                        day: day.clone(),
                        spent: Spent::of(m, &prices),
                        models: models(m, &prices),
                    })
                    .collect()
            }),
            notes,
        });
    }
    Ok(Report {
        since: since.map(super::timestamp),
        until: super::timestamp(now),
        by: if query.by_day { "day" } else { "agent" },
        agents: rows,
        total: Spent::of(&all, &prices),
    })
}

fn models(by_model: &BTreeMap<String, Tokens>, prices: &Prices) -> Vec<ModelUsage> {
    by_model
        .iter()
        .map(|(model, t)| {
            let price = prices.of(model);
            ModelUsage {
                model: model.clone(),
                tokens: (*t).into(),
                cost_usd: price.map(|(p, _)| super::round_usd(super::prices::cost(&p, t))),
                price: price.map(|(_, source)| source),
            }
        })
        .collect()
}

/// One agent's day so far: its tokens and estimated cost per local hour since midnight (its
/// ledger, updated first) and its crashes today (its restart ledger), for the dashboard's and
/// `top`'s chart of the day.
#[derive(Debug, Clone, Serialize)]
pub struct Day {
    /// The local midnight it starts at (RFC 3339).
    pub since: String,
    /// Hours with usage, oldest first.
    pub hours: Vec<HourUsage>,
    /// Today's crashes, oldest first.
    pub crashes: Vec<DayCrash>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HourUsage {
    pub hour: String,
    pub tokens: u64,
    pub cost_usd: f64,
    /// Some of the hour's tokens are of a model without a price (not in `cost_usd`).
    pub unpriced: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct DayCrash {
    pub ts: String,
    pub reason: crate::recovery::decide::EndReason,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Day {
    /// The tokens of each of the day's 24 local hours (index 0: from midnight).
    pub fn tokens_by_hour(&self) -> [u64; 24] {
        let start = seconds(&self.since).unwrap_or(0);
        let mut slots = [0; 24];
        for h in &self.hours {
            let i = (seconds(&h.hour).unwrap_or(0) - start).div_euclid(3600);
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| slots.get_mut(i)) {
                *slot += h.tokens;
            }
        }
        slots
    }

    /// The hour (0–23 from midnight) each crash happened in.
    pub fn crash_hours(&self) -> Vec<usize> {
        let start = seconds(&self.since).unwrap_or(0);
        self.crashes
            .iter()
            .filter_map(|c| usize::try_from((seconds(&c.ts)? - start).div_euclid(3600)).ok())
            .filter(|h| *h < 24)
            .collect()
    }
}

fn seconds(ts: &str) -> Option<i64> {
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

fn rfc3339(at: i64) -> String {
    jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// `agent`'s [`Day`]. The ledger is brought up to date first, as `phoenix usage` does; a
/// failed update leaves what it already holds (and says why in `notes`).
pub fn day(spec: &Spec, agent: &str, cli: Cli, notes: &mut Vec<String>) -> Day {
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(agent);
    if let Err(e) = ledger::update(&dir, cli, true) {
        notes.push(format!("the ledger was not brought up to date: {e}"));
    }
    let now = jiff::Timestamp::now().as_second();
    let since = super::day_start(now);
    let prices = Prices::new(&spec.prices);
    let mut hours: BTreeMap<i64, HourUsage> = BTreeMap::new();
    for line in ledger::lines(&dir).0 {
        let Some(at) = seconds(&line.hour).filter(|at| *at >= since) else {
            continue;
        };
        let hour = hours.entry(at).or_insert_with(|| HourUsage {
            hour: rfc3339(at),
            tokens: 0,
            cost_usd: 0.0,
            unpriced: false,
        });
        hour.tokens += line.tokens.total();
        match prices.cost(&line.model, &line.tokens) {
            Some(usd) => hour.cost_usd += usd,
            None => hour.unpriced = true,
        }
    }
    let crashes = crate::recovery::record::load(&dir)
        .crashes
        .into_iter()
        .filter(|c| c.ts >= since)
        .map(|c| DayCrash {
            ts: rfc3339(c.ts),
            reason: c.reason,
            code: c.code,
            signal: c.signal,
        })
        .collect();
    Day {
        since: rfc3339(since),
        hours: hours
            .into_values()
            .map(|mut h| {
                h.cost_usd = super::round_usd(h.cost_usd);
                h
            })
            .collect(),
        crashes,
    }
}
