//! What a host's reply may put before the operator. A host is another machine: its phoenix
//! answers for the agents phoenix.toml gives it, and whatever else it says is input from a
//! stranger. Every document a host's command printed comes through here before it is merged
//! with this machine's: every field bounded (strings, arrays, objects, nesting), every row's
//! agent a valid name of an agent the fleet knows, at most [`MAX_ROWS`] rows; what is left
//! out is said in a warning, never silently. `status` then keeps only the rows of the agents
//! placed on that host, and a stale copy (an agent placed elsewhere that still runs there).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// Rows of one array of a host's document at most (a fleet of thousands of agents fits).
pub const MAX_ROWS: usize = 10_000;
/// Characters of one string of a host's document at most (a handoff's text is read from
/// the host by its own command, printed as it came, never merged).
pub const MAX_TEXT: usize = 4096;
/// Items of a nested array, keys of an object at most.
pub const MAX_ITEMS: usize = 256;
/// Nesting at most: deeper values become `null`.
pub const MAX_DEPTH: usize = 8;

/// Who a host may speak for: the agents the fleet knows (declared here or on any host, or
/// placed by the operator's record).
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub agents: BTreeSet<String>,
}

impl Known {
    pub fn of(spec: &crate::spec::Spec, placements: &super::moves::Placements) -> Known {
        Known {
            agents: spec
                .agents
                .iter()
                .map(|a| a.name.clone())
                .chain(spec.remote_agents.iter().map(|a| a.name.clone()))
                .chain(placements.agents.keys().cloned())
                .collect(),
        }
    }

    pub fn knows(&self, agent: &str) -> bool {
        self.agents.contains(agent)
    }
}

/// `value` with every string cut to [`MAX_TEXT`] characters, every array and object to
/// [`MAX_ITEMS`] entries and anything nested deeper than [`MAX_DEPTH`] replaced by `null`.
pub fn bound(value: &mut Value) {
    bound_at(value, 0);
}

/// A whole document [`bound`]: its top-level arrays (its rows) to [`MAX_ROWS`] entries
/// instead, each entry bounded.
pub fn bound_document(doc: &mut Value) {
    let top = match doc {
        Value::Object(fields) => fields.values_mut().collect::<Vec<_>>(),
        other => vec![other],
    };
    for value in top {
        match value {
            Value::Array(rows) => {
                rows.truncate(MAX_ROWS);
                rows.iter_mut().for_each(|row| bound_at(row, 1));
            }
            other => bound_at(other, 1),
        }
    }
}

fn bound_at(value: &mut Value, depth: usize) {
    if depth >= MAX_DEPTH && (value.is_array() || value.is_object()) {
        *value = Value::Null;
        return;
    }
    match value {
        Value::String(s) => shorten(s),
        Value::Array(items) => {
            items.truncate(MAX_ITEMS);
            items.iter_mut().for_each(|v| bound_at(v, depth + 1));
        }
        Value::Object(fields) => {
            if fields.len() > MAX_ITEMS {
                let kept: Map<String, Value> =
                    std::mem::take(fields).into_iter().take(MAX_ITEMS).collect();
                *fields = kept;
            }
            let long: Vec<String> = fields
                .keys()
                .filter(|k| k.chars().count() > MAX_TEXT)
                .cloned()
                .collect();
            for key in long {
                fields.remove(&key);
            }
            fields.values_mut().for_each(|v| bound_at(v, depth + 1));
        }
        _ => {}
    }
}

fn shorten(s: &mut String) {
    if s.len() > MAX_TEXT && s.chars().count() > MAX_TEXT {
        *s = crate::text::shorten(s, MAX_TEXT);
    }
}

/// A host's rows (the array `key` of its document): at most [`MAX_ROWS`], each bounded,
/// each row's `agent` (when it has one) a valid agent name that `admitted` accepts. The
/// rows kept, and a warning per kind of row left out.
pub fn rows(
    host: &str,
    key: &str,
    rows: Vec<Value>,
    admitted: impl Fn(&str) -> bool,
) -> (Vec<Value>, Vec<String>) {
    let total = rows.len();
    let mut kept = Vec::new();
    let mut invalid = 0usize;
    let mut foreign: BTreeSet<String> = BTreeSet::new();
    for mut row in rows.into_iter().take(MAX_ROWS) {
        if !row.is_object() {
            invalid += 1;
            continue;
        }
        match row.get("agent") {
            None | Some(Value::Null) => {}
            Some(Value::String(agent)) if crate::spec::valid_name(agent) => {
                if !admitted(agent) {
                    foreign.insert(agent.clone());
                    continue;
                }
            }
            Some(_) => {
                invalid += 1;
                continue;
            }
        }
        bound(&mut row);
        kept.push(row);
    }
    let mut warnings = Vec::new();
    if total > MAX_ROWS {
        warnings.push(format!(
            "host `{host}` sent {total} {key}: only the first {MAX_ROWS} are shown"
        ));
    }
    if invalid > 0 {
        warnings.push(format!(
            "host `{host}` sent {invalid} {key} rows without a valid agent name: left out"
        ));
    }
    if !foreign.is_empty() {
        let names: Vec<&str> = foreign.iter().map(String::as_str).take(5).collect();
        let more = foreign.len().saturating_sub(names.len());
        warnings.push(format!(
            "host `{host}` sent {key} rows of agents the fleet does not know ({}{}): left out",
            names.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    (kept, warnings)
}

/// Every array of objects at the top of a host's document (`agents`, `events`, `hits`,
/// `handoffs`, …) admitted by [`rows`], the rest of it [`bound`]ed. The warnings.
pub fn document(host: &str, doc: &mut Value, known: Option<&Known>) -> Vec<String> {
    let mut warnings = Vec::new();
    let Value::Object(fields) = doc else {
        bound(doc);
        return warnings;
    };
    for (key, value) in fields.iter_mut() {
        match value {
            Value::Array(items) if items.iter().any(Value::is_object) => {
                let (kept, said) = rows(host, key, std::mem::take(items), |agent| {
                    known.is_none_or(|k| k.knows(agent))
                });
                *items = kept;
                warnings.extend(said);
            }
            other => bound(other),
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hosts_rows_are_bounded_named_and_only_of_agents_the_fleet_knows() {
        let long = "x".repeat(5000);
        let deep = (0..20).fold(json!(1), |v, _| json!([v]));
        let rows = vec![
            json!({"agent": "alpha", "state": long, "deep": deep, "list": vec![1; 1000]}),
            json!({"agent": long}),
            json!({"agent": "../../etc"}),
            json!({"agent": 7}),
            json!("not a row"),
            json!({"agent": "stranger"}),
            json!({"event": "daemon_started"}),
        ];
        let (kept, warnings) = super::rows("gpu-1", "agents", rows, |a| a == "alpha");
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(kept[0]["agent"], "alpha");
        assert!(kept[0]["state"].as_str().unwrap().chars().count() <= MAX_TEXT);
        assert_eq!(kept[0]["list"].as_array().unwrap().len(), MAX_ITEMS);
        assert!(
            kept[0]["deep"].to_string().len() < 100,
            "{}",
            kept[0]["deep"]
        );
        assert_eq!(kept[1]["event"], "daemon_started");
        let said = warnings.join("\n");
        assert!(
            said.contains("4 agents rows without a valid agent name"),
            "{said}"
        );
        assert!(
            said.contains("the fleet does not know (stranger)"),
            "{said}"
        );
        assert!(!said.contains(&long), "{said}");
        // A document's own rows are many more than a row's lists.
        let mut doc = json!({"agents": vec![json!({"agent": "a", "note": long}); 1000]});
        bound_document(&mut doc);
        assert_eq!(doc["agents"].as_array().unwrap().len(), 1000);
        assert!(doc["agents"][999]["note"].as_str().unwrap().chars().count() <= MAX_TEXT);
    }

    #[test]
    fn more_rows_than_the_bound_are_cut_and_said() {
        let rows = (0..MAX_ROWS + 5).map(|_| json!({"agent": "a"})).collect();
        let (kept, warnings) = super::rows("h", "events", rows, |_| true);
        assert_eq!(kept.len(), MAX_ROWS);
        assert!(warnings[0].contains("only the first"), "{warnings:?}");
    }
}
