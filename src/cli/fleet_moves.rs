//! The moves and stale copies of the combined plan and apply, as rows of their machine's
//! group: a move in its target's, a stale copy in the group of the machine it runs on.

use serde_json::{Value, json};

use super::fleet;
use crate::hosts::moves::{Preview, Settled, Stale};
use crate::hosts::replan::{MoveDone, Moves};

/// The plan's rows of `place`: the moves to it, then the stale copies on it.
pub fn plan_rows(moves: &Moves, place: &str) -> Vec<String> {
    let mut rows: Vec<String> = moves
        .moves
        .iter()
        .filter(|m| m.planned.to.to_string() == place)
        .map(move_row)
        .collect();
    rows.extend(
        moves
            .stale
            .iter()
            .filter(|s| s.on.to_string() == place)
            .map(stale_row),
    );
    rows
}

/// The places the moves and stale copies name, for those without a group of their own.
pub fn places(moves: &Moves) -> Vec<String> {
    let mut places: Vec<String> = moves
        .moves
        .iter()
        .map(|m| m.planned.to.to_string())
        .chain(moves.stale.iter().map(|s| s.on.to_string()))
        .collect();
    places.sort();
    places.dedup();
    places
}

/// `~ agent `trades`: move gpu-1 → gpu-2 (latest handoff …, ledger and open loops carried)`,
/// then why it cannot run and what it warns about.
fn move_row(m: &Preview) -> String {
    let mut row = format!("  ~ agent `{}`: {}", m.planned.agent, m.line());
    for problem in &m.problems {
        row.push_str(&format!("\n      ✗ cannot move: {problem}"));
    }
    for warning in &m.warnings {
        row.push_str(&format!("\n      warning: {warning}"));
    }
    row
}

fn stale_row(s: &Stale) -> String {
    let placed = format!("placed on {}, generation {}", s.placed, s.generation);
    match s.running {
        Some(true) => format!("  - agent `{}`: stop stale copy ({placed})", s.agent),
        Some(false) => format!(
            "  ~ agent `{}`: tell it the agent moved ({placed}; no copy runs here)",
            s.agent
        ),
        None => format!(
            "  ? agent `{}`: stale copy not observed ({placed}; told once it answers)",
            s.agent
        ),
    }
}

/// `, 1 to move, 1 stale copy to stop` (nothing when there is none).
pub fn summary(moves: &Moves) -> String {
    let mut text = String::new();
    if !moves.moves.is_empty() {
        text.push_str(&format!(", {} to move", moves.moves.len()));
    }
    let stale = moves.to_settle(|_| true).len();
    if stale > 0 {
        text.push_str(&format!(
            ", {stale} stale cop{} to stop",
            if stale == 1 { "y" } else { "ies" }
        ));
    }
    text
}

/// Why the plan fails for its moves.
pub fn footer(moves: &Moves) -> String {
    let refused: Vec<String> = moves
        .refused()
        .map(|m| format!("`{}`", m.planned.agent))
        .collect();
    if refused.is_empty() {
        return String::new();
    }
    format!(
        "\nCannot move: {} (why is under each move); `apply` moves the others and leaves {} where {} runs.\n",
        refused.join(", "),
        if refused.len() == 1 { "it" } else { "them" },
        if refused.len() == 1 { "it" } else { "each" },
    )
}

/// The plan's `moves` and `stale` arrays.
pub fn plan_json(moves: &Moves) -> (Value, Value) {
    let previews = moves
        .moves
        .iter()
        .map(|m| {
            let mut v = serde_json::to_value(m).expect("a preview serialises");
            v["line"] = Value::String(m.line());
            v
        })
        .collect();
    (
        Value::Array(previews),
        serde_json::to_value(&moves.stale).expect("stale copies serialise"),
    )
}

/// What an apply did of its moves and stale copies.
pub struct Done<'a> {
    pub moves: &'a [MoveDone],
    pub settled: &'a [Settled],
}

impl Done<'_> {
    /// No move and no stale copy.
    pub fn none() -> Done<'static> {
        Done {
            moves: &[],
            settled: &[],
        }
    }

    /// The moves that failed, the machines that could not be told or whose copy could not
    /// be stopped.
    pub fn failed(&self) -> usize {
        self.moves.iter().filter(|m| !m.ok).count()
            + self
                .settled
                .iter()
                .filter(|s| {
                    s.error.is_some() || s.fenced.as_ref().is_some_and(|f| !f.failed.is_empty())
                })
                .count()
    }

    pub fn succeeded(&self) -> usize {
        self.moves.iter().filter(|m| m.ok).count()
            + self.settled.iter().filter(|s| s.error.is_none()).count()
    }

    pub fn json(&self) -> (Value, Value) {
        (json!(self.moves), json!(self.settled))
    }

    /// The apply's rows of `place`: the moves to it, then what telling it did.
    pub fn rows(&self, place: &str) -> Vec<String> {
        let mut rows: Vec<String> = self
            .moves
            .iter()
            .filter(|m| m.planned.to.to_string() == place)
            .map(|m| {
                let Some(r) = &m.report else {
                    let why = m.error.as_deref().unwrap_or("failed");
                    return step(false, m, why.to_string());
                };
                let mut detail = String::new();
                if let Some(h) = &r.handoff {
                    detail.push_str(&format!("handoff {h} saved on {}, ", r.from));
                }
                if let Some(c) = &r.carried {
                    detail.push_str(&format!(
                        "{} files and {} handoffs carried, ",
                        c.files, c.handoffs
                    ));
                }
                detail.push_str(&format!("started fresh here (generation {})", r.generation));
                let mut row = step(true, m, detail);
                for w in &r.warnings {
                    row.push_str(&format!("\n      warning: {w}"));
                }
                row
            })
            .collect();
        for s in self.settled.iter().filter(|s| s.on.to_string() == place) {
            rows.extend(settled_rows(s));
        }
        rows
    }

    pub fn places(&self) -> Vec<String> {
        let mut places: Vec<String> = self
            .moves
            .iter()
            .map(|m| m.planned.to.to_string())
            .chain(self.settled.iter().map(|s| s.on.to_string()))
            .collect();
        places.sort();
        places.dedup();
        places
    }
}

fn step(ok: bool, m: &MoveDone, detail: String) -> String {
    let action = format!("move {} → {}", m.planned.from, m.planned.to);
    format!(
        "  {}",
        fleet::step_line(ok, &m.planned.agent, &action, &detail)
    )
}

fn settled_rows(s: &Settled) -> Vec<String> {
    let Some(fenced) = &s.fenced else {
        let why = s.error.as_deref().unwrap_or("not told");
        return vec![format!(
            "  ✗ stale copies of {}: {why}",
            s.agents.join(", ")
        )];
    };
    let mut rows: Vec<String> = fenced
        .stopped
        .iter()
        .map(|a| format!("  ✓ agent `{a}`: stopped stale copy — refused here from now on"))
        .collect();
    rows.extend(fenced.failed.iter().map(|why| format!("  ✗ {why}")));
    rows.extend(
        s.agents
            .iter()
            .filter(|a| !fenced.stopped.contains(a))
            .map(|a| format!("  ✓ agent `{a}`: told it runs elsewhere now — refused here")),
    );
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::moves::{Move, Place};

    #[test]
    fn a_move_shows_in_its_targets_group_with_its_problems_and_a_stale_copy_where_it_runs() {
        let gpu = |n: &str| Place::Host(n.into());
        let moves = Moves {
            moves: vec![Preview {
                planned: Move {
                    agent: "trades".into(),
                    from: gpu("gpu-1"),
                    to: gpu("gpu-2"),
                },
                source: Some(Default::default()),
                problems: vec!["workdir `/srv/t` missing there".into()],
                warnings: vec!["2 commit(s) no remote has".into()],
            }],
            stale: vec![
                Stale {
                    agent: "tests".into(),
                    on: gpu("gpu-1"),
                    placed: Place::Local,
                    generation: 3,
                    running: Some(true),
                },
                Stale {
                    agent: "old".into(),
                    on: gpu("gpu-3"),
                    placed: Place::Local,
                    generation: 1,
                    running: None,
                },
            ],
        };
        assert_eq!(
            plan_rows(&moves, "gpu-2"),
            [
                "  ~ agent `trades`: move gpu-1 → gpu-2 (ledger and open loops carried)\n      \
               ✗ cannot move: workdir `/srv/t` missing there\n      \
               warning: 2 commit(s) no remote has"
            ]
        );
        assert_eq!(
            plan_rows(&moves, "gpu-1"),
            ["  - agent `tests`: stop stale copy (placed on local, generation 3)"]
        );
        assert_eq!(places(&moves), ["gpu-1", "gpu-2", "gpu-3"]);
        // The copy not observed is shown, but is nothing to do yet.
        assert_eq!(summary(&moves), ", 1 to move, 1 stale copy to stop");
        assert!(footer(&moves).contains("Cannot move: `trades`"));
    }
}
