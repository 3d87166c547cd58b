//! `phoenix usage` of a fleet with `[[host]]`s: every host's own `usage --json` (its agents'
//! ledgers stay on the host), asked at once, merged with this machine's report: each agent
//! labelled with its host, the total over all of them, the hosts that did not answer listed
//! (and warned about), never waited for beyond their timeout.

use serde_json::{Map, Value, json};

use super::usage::UsageArgs;
use super::{out, output};
use crate::hosts::reads;
use crate::spec::Spec;
use crate::usage::{Spent, short_count, thousands};

/// `local` (this machine's report as JSON, `None` when the agent asked for runs on a host)
/// with every host's agents (only the agent's host with one agent).
pub fn usage(spec: &Spec, args: &UsageArgs, local: Option<Value>) -> anyhow::Result<i32> {
    let mut links = crate::hosts::fleet::links(spec);
    if let Some(agent) = &args.agent {
        links.retain(|l| reads::host_of(spec, agent) == Some(l.name()));
    }
    let mut words = vec!["usage".to_string(), "--json".into()];
    words.extend(args.since.map(|d| format!("--since={}s", d.as_secs())));
    if args.by.is_some() {
        words.push("--by=day".into());
    }
    words.extend(
        args.agent
            .iter()
            .flat_map(|a| ["--".to_string(), a.clone()]),
    );
    let answers = reads::ask_json(&links, &words, reads::READ_TIMEOUT);
    let mut doc = local.unwrap_or_else(|| {
        json!({"since": null, "until": jiff::Timestamp::now().to_string(),
               "by": if args.by.is_some() { "day" } else { "agent" }, "agents": []})
    });
    let local_rows = match doc.get_mut("agents").map(Value::take) {
        Some(Value::Array(rows)) => rows,
        _ => Vec::new(),
    };
    let merged = reads::merge(local_rows, answers, "agents");
    doc["total"] = total(&merged.rows);
    doc["agents"] = Value::Array(merged.rows);
    doc["hosts"] = Value::Array(merged.unreachable);
    if args.json {
        output::json(&doc);
        return Ok(0);
    }
    for host in doc["hosts"].as_array().into_iter().flatten() {
        eprintln!(
            "warning: {}; its agents' usage is not counted",
            host["error"].as_str().unwrap_or("a host did not answer")
        );
    }
    for a in doc["agents"].as_array().into_iter().flatten() {
        for note in a["notes"].as_array().into_iter().flatten() {
            eprintln!(
                "warning: agent `{}`: {}",
                a["agent"].as_str().unwrap_or("?"),
                note.as_str().unwrap_or_default()
            );
        }
    }
    out(&table(&doc));
    Ok(0)
}

/// The sum of every agent's tokens and cost: unpriced models listed, a cost only where some
/// model was priced.
fn total(agents: &[Value]) -> Value {
    let mut tokens = Map::new();
    let mut cost: Option<f64> = None;
    let mut unpriced: Vec<String> = Vec::new();
    for a in agents {
        for (kind, n) in a["tokens"].as_object().into_iter().flatten() {
            let sum = tokens.get(kind).and_then(Value::as_u64).unwrap_or(0);
            tokens.insert(kind.clone(), Value::from(sum + n.as_u64().unwrap_or(0)));
        }
        if let Some(usd) = a["cost_usd"].as_f64() {
            *cost.get_or_insert(0.0) += usd;
        }
        for model in a["unpriced_models"].as_array().into_iter().flatten() {
            if let Some(model) = model.as_str()
                && !unpriced.iter().any(|m| m == model)
            {
                unpriced.push(model.to_string());
            }
        }
    }
    unpriced.sort();
    json!({"tokens": tokens, "cost_usd": cost.map(crate::usage::round_usd),
           "unpriced_models": unpriced})
}

/// The table of `phoenix usage` with a HOST column (`(local)`: this machine).
fn table(doc: &Value) -> String {
    let by_day = doc["by"] == "day";
    let when = match doc["since"].as_str() {
        Some(since) => format!("since {since}"),
        None => "everything recorded".to_string(),
    };
    let mut text = format!(
        "Usage, {when} (until {}):\n",
        doc["until"].as_str().unwrap_or("now")
    );
    let first = if by_day { "DAY        AGENT" } else { "AGENT" };
    text.push_str(&row(
        "HOST",
        first,
        &[
            "TOKENS", "INPUT", "OUTPUT", "CACHE W", "CACHE R", "COST", "MODELS",
        ]
        .map(String::from),
    ));
    for a in doc["agents"].as_array().into_iter().flatten() {
        let host = a["host"].as_str().unwrap_or("(local)");
        let agent = a["agent"].as_str().unwrap_or("?");
        match a["days"].as_array() {
            Some(days) if by_day => {
                for d in days {
                    let label = format!("{} {agent}", d["day"].as_str().unwrap_or("?"));
                    text.push_str(&row(host, &label, &cells(d)));
                }
            }
            _ => text.push_str(&row(host, agent, &cells(a))),
        }
    }
    text.push_str(&row("", "TOTAL", &cells(&doc["total"])));
    if let Some(unpriced) = doc["total"]["unpriced_models"].as_array()
        && !unpriced.is_empty()
    {
        let names: Vec<&str> = unpriced.iter().filter_map(Value::as_str).collect();
        text.push_str(&format!(
            "\nunpriced (tokens counted, cost unknown): {}; give their prices under [prices] in phoenix.toml\n",
            names.join(", ")
        ));
    }
    text
}

/// A row's numbers from its JSON (an agent's, a day's or the total).
fn cells(v: &Value) -> [String; 7] {
    let n = |k: &str| v["tokens"][k].as_u64().unwrap_or(0);
    let spent = Spent {
        cost_usd: v["cost_usd"].as_f64(),
        unpriced_models: v["unpriced_models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect(),
        ..Spent::default()
    };
    let models: Vec<&str> = v["models"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["model"].as_str())
        .collect();
    [
        thousands(n("total")),
        short_count(n("input")),
        short_count(n("output")),
        short_count(n("cache_write")),
        short_count(n("cache_read")),
        spent.cost_text(),
        models.join(","),
    ]
}

fn row(host: &str, first: &str, c: &[String; 7]) -> String {
    format!(
        "{host:<8} {first:<24} {:>14} {:>8} {:>8} {:>8} {:>8}  {:<18} {}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6]
    )
    .trim_end()
    .to_string()
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_adds_every_hosts_agents_and_keeps_unpriced_models_unpriced() {
        let agents = vec![
            json!({"agent": "a", "host": null, "tokens": {"input": 10, "output": 5, "total": 15},
                   "cost_usd": 0.25, "unpriced_models": []}),
            json!({"agent": "b", "host": "gpu-1", "tokens": {"input": 1, "output": 2, "total": 3},
                   "cost_usd": null, "unpriced_models": ["mystery-1"]}),
        ];
        let t = total(&agents);
        assert_eq!(t["tokens"]["total"], 18);
        assert_eq!(t["tokens"]["input"], 11);
        assert_eq!(t["cost_usd"], 0.25);
        assert_eq!(t["unpriced_models"], json!(["mystery-1"]));
        let doc =
            json!({"by": "agent", "since": null, "until": "now", "agents": agents, "total": t});
        let text = table(&doc);
        assert!(
            text.lines()
                .any(|l| l.starts_with("gpu-1") && l.contains(" b ")),
            "{text}"
        );
        assert!(text.contains("$0.2500 + unpriced"), "{text}");
    }
}
