//! `phoenix usage`: tokens and estimated cost per agent (and per day), as a table or the
//! `--json` document (docs/json.md). The numbers come from `crate::usage::report`.

use std::path::Path;

use crate::usage::report::{AgentUsage, Query, Report};
use crate::usage::{Spent, short_count, thousands};

use super::{load_without_fs_checks, output};

/// How `--by` splits the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// One row per agent and local day.
    Day,
}

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// One agent (default: every declared agent).
    pub agent: Option<String>,
    /// Only this far back, e.g. 24h or 7d (rounded down to the hour; default: everything
    /// recorded).
    #[arg(long, value_parser = super::parse_duration_arg)]
    pub since: Option<std::time::Duration>,
    /// One row per agent and day (the local calendar day).
    #[arg(long, value_enum)]
    pub by: Option<By>,
    /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
    #[arg(long)]
    pub json: bool,
}

pub fn usage(config: &Path, args: UsageArgs) -> anyhow::Result<i32> {
    let spec = load_without_fs_checks(config)?;
    let query = Query {
        agent: args.agent.clone(),
        since: args.since,
        by_day: args.by == Some(By::Day),
    };
    if !spec.hosts.is_empty() {
        // Every host's agents too (an agent of a host: its host's report alone).
        let remote = args
            .agent
            .as_deref()
            .is_some_and(|a| crate::hosts::reads::host_of(&spec, a).is_some());
        let local = match remote {
            true => None,
            false => Some(serde_json::to_value(crate::usage::report::report(
                &spec, &query,
            )?)?),
        };
        return super::fleet_usage::usage(&spec, &args, local);
    }
    let report = crate::usage::report::report(&spec, &query)?;
    if args.json {
        output::json(&report);
        return Ok(0);
    }
    for a in &report.agents {
        for note in &a.notes {
            eprintln!("warning: agent `{}`: {note}", a.agent);
        }
    }
    output::out(&table(&report));
    Ok(0)
}

const HEADER: [&str; 7] = [
    "TOKENS", "INPUT", "OUTPUT", "CACHE W", "CACHE R", "COST", "MODELS",
];

fn table(report: &Report) -> String {
    let by_day = report.by == "day";
    let when = match &report.since {
        Some(since) => format!("since {since}"),
        None => "everything recorded".to_string(),
    };
    let mut text = format!("Usage, {when} (until {}):\n", report.until);
    let first = if by_day { "DAY        AGENT" } else { "AGENT" };
    text.push_str(&row(first, &HEADER.map(String::from)));
    for a in &report.agents {
        match &a.days {
            Some(days) if by_day => {
                for d in days {
                    let models: Vec<&str> = d.models.iter().map(|m| m.model.as_str()).collect();
                    let label = format!("{} {}", d.day, a.agent);
                    text.push_str(&row(&label, &cells(&d.spent, &models)));
                }
            }
            _ => text.push_str(&row(&a.agent, &cells(&a.spent, &model_names(a)))),
        }
    }
    text.push_str(&row("TOTAL", &cells(&report.total, &[])));
    if !report.total.unpriced_models.is_empty() {
        text.push_str(&format!(
            "\nunpriced (tokens counted, cost unknown): {}; give their prices under [prices] in phoenix.toml\n",
            report.total.unpriced_models.join(", ")
        ));
    }
    text
}

fn model_names(a: &AgentUsage) -> Vec<&str> {
    a.models.iter().map(|m| m.model.as_str()).collect()
}

fn cells(spent: &Spent, models: &[&str]) -> [String; 7] {
    let t = &spent.tokens;
    [
        thousands(t.total),
        short_count(t.tokens.input),
        short_count(t.tokens.output),
        short_count(t.tokens.cache_write),
        short_count(t.tokens.cache_read),
        spent.cost_text(),
        models.join(","),
    ]
}

fn row(first: &str, c: &[String; 7]) -> String {
    format!(
        "{first:<24} {:>14} {:>8} {:>8} {:>8} {:>8}  {:<18} {}\n",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6]
    )
    .trim_end()
    .to_string()
        + "\n"
}
