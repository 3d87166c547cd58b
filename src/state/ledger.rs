//! The ledger (`ledger.json`): the current state of an agent's work — task, completed, in
//! progress, blocked, key decisions, uncertain items, files — and the parser for the text an
//! agent writes inside `->continuity:save <<< … >>>` (or pipes to `phoenix handoff save`).

use std::io;

use serde::{Deserialize, Serialize};

use crate::state::{self, AgentDir, JsonFile};

pub const LEDGER: &str = "ledger.json";
/// Items kept per list: a ledger is a summary, not a log.
const KEEP: usize = 50;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ledger {
    pub agent: String,
    pub current_task: Option<String>,
    pub completed: Vec<String>,
    pub in_progress: Vec<String>,
    /// The next steps the agent named last.
    pub next: Vec<String>,
    pub blocked: Vec<String>,
    pub decisions: Vec<Decision>,
    pub uncertain: Vec<String>,
    pub files: Vec<String>,
    /// The agent's own words from its last save, beyond the fields.
    pub notes: Vec<String>,
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Decision {
    pub text: String,
    pub ts: Option<String>,
}

/// The fields of a save text. Every line `Key: value` starts a field; `- item` lines and
/// further lines belong to the field above; commas split short lists.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SaveText {
    pub task: Option<String>,
    pub completed: Vec<String>,
    pub in_progress: Vec<String>,
    pub next: Vec<String>,
    pub blocked: Vec<String>,
    pub decisions: Vec<String>,
    pub uncertain: Vec<String>,
    pub files: Vec<String>,
    /// Lines under no known key.
    pub notes: Vec<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Field {
    Task,
    Completed,
    InProgress,
    Next,
    Blocked,
    Decisions,
    Uncertain,
    Files,
    Notes,
}

fn field_of(key: &str) -> Option<Field> {
    let k: String = key
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphabetic() || *c == ' ')
        .collect();
    Some(match k.trim() {
        "current task" | "task" | "working on" => Field::Task,
        "completed" | "done" | "completed work" => Field::Completed,
        "in progress" | "progress" | "partially done" => Field::InProgress,
        "next" | "next steps" | "next step" | "todo" => Field::Next,
        "blocked" | "blockers" | "blocked on" => Field::Blocked,
        "key decision" | "key decisions" | "decision" | "decisions" => Field::Decisions,
        "uncertain" | "uncertainty" | "uncertain items" | "to verify" => Field::Uncertain,
        "files" | "file" | "key files" | "file references" => Field::Files,
        "notes" | "summary" => Field::Notes,
        _ => return None,
    })
}

impl SaveText {
    pub fn parse(text: &str) -> SaveText {
        let mut out = SaveText::default();
        let mut current = Field::Notes;
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            if let Some((key, value)) = line.split_once(':') {
                if let Some(field) = field_of(key) {
                    current = field;
                    let value = value.trim();
                    if !value.is_empty() {
                        out.push(field, value, true);
                    }
                    continue;
                }
                // Another `Key: value` line ends the field above.
                if key.len() < 30 && key.split_whitespace().count() <= 3 && !key.contains("//") {
                    current = Field::Notes;
                    out.notes.push(line.to_string());
                    continue;
                }
            }
            let item = line
                .strip_prefix("- ")
                .or_else(|| line.strip_prefix("* "))
                .unwrap_or(line)
                .trim();
            out.push(current, item, false);
        }
        out
    }

    fn push(&mut self, field: Field, value: &str, split_commas: bool) {
        let items: Vec<String> = if split_commas
            && !matches!(
                field,
                Field::Task | Field::Notes | Field::Decisions | Field::Uncertain
            ) {
            value
                .split([',', ';'])
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        } else {
            vec![value.to_string()]
        };
        match field {
            Field::Task => {
                self.task = Some(match self.task.take() {
                    Some(t) => format!("{t} {value}"),
                    None => value.to_string(),
                })
            }
            Field::Completed => self.completed.extend(items),
            Field::InProgress => self.in_progress.extend(items),
            Field::Next => self.next.extend(items),
            Field::Blocked => self.blocked.extend(items),
            Field::Decisions => self.decisions.extend(items),
            Field::Uncertain => self.uncertain.extend(items),
            Field::Files => self.files.extend(items),
            Field::Notes => self.notes.extend(items),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == SaveText::default()
    }
}

fn add_unique(list: &mut Vec<String>, items: &[String]) {
    for i in items {
        if !list.contains(i) {
            list.push(i.clone());
        }
    }
    let excess = list.len().saturating_sub(KEEP);
    list.drain(..excess);
}

impl Ledger {
    /// Fold a save text in: a new task replaces the old one, the lists describe the present
    /// (what the agent says is in progress, next or blocked now), completed work and decisions
    /// accumulate.
    pub fn merge(&mut self, text: &SaveText) {
        if let Some(task) = &text.task {
            self.current_task = Some(task.clone());
        }
        add_unique(&mut self.completed, &text.completed);
        if !text.in_progress.is_empty() || !text.completed.is_empty() {
            self.in_progress = text.in_progress.clone();
        }
        if !text.blocked.is_empty() {
            self.blocked = text.blocked.clone();
        }
        if !text.next.is_empty() {
            self.next = text.next.clone();
        }
        if !text.notes.is_empty() {
            self.notes = text.notes.clone();
        }
        let now = state::now_rfc3339();
        for d in &text.decisions {
            if !self.decisions.iter().any(|x| &x.text == d) {
                self.decisions.push(Decision {
                    text: d.clone(),
                    ts: Some(now.clone()),
                });
            }
        }
        let excess = self.decisions.len().saturating_sub(KEEP);
        self.decisions.drain(..excess);
        add_unique(&mut self.uncertain, &text.uncertain);
        add_unique(&mut self.files, &text.files);
    }
}

/// `ledger.json` as a `JsonFile`: a corrupt ledger is rolled back to its last good copy and
/// recorded, never read as empty and overwritten.
pub fn file(dir: &AgentDir) -> JsonFile<Ledger> {
    JsonFile::new(dir, LEDGER, "ledger")
}

pub fn load(dir: &AgentDir) -> Ledger {
    let mut ledger = file(dir).load_or_default();
    ledger.agent = dir.name.clone();
    ledger
}

/// Change the ledger under its lock, atomically, keeping the last good one.
pub fn update(dir: &AgentDir, f: impl FnOnce(&mut Ledger)) -> io::Result<Ledger> {
    dir.ensure()?;
    file(dir)
        .update(|slot| {
            let ledger = slot.get_or_insert_with(Ledger::default);
            ledger.agent = dir.name.clone();
            f(ledger);
            ledger.updated_at = Some(state::now_rfc3339());
            ledger.clone()
        })
        .map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_example_parses_into_fields() {
        let t = SaveText::parse(
            "Current task: Implementing auth module\nCompleted: User model, JWT utils\n\
             Next: Login endpoint\nKey decision: Using refresh tokens\n",
        );
        assert_eq!(t.task.as_deref(), Some("Implementing auth module"));
        assert_eq!(t.completed, ["User model", "JWT utils"]);
        assert_eq!(t.next, ["Login endpoint"]);
        assert_eq!(t.decisions, ["Using refresh tokens"]);
    }

    #[test]
    fn bullets_and_free_lines_belong_to_the_field_above() {
        let t = SaveText::parse(
            "Some context first.\nIn progress:\n- parser rewrite\n- tests\nUncertain: API rate limit handling unclear\nFiles: src/a.rs:12, src/b.rs\nNote: the http: prefix stays",
        );
        assert_eq!(
            t.notes,
            ["Some context first.", "Note: the http: prefix stays"]
        );
        assert_eq!(t.in_progress, ["parser rewrite", "tests"]);
        assert_eq!(t.uncertain, ["API rate limit handling unclear"]);
        assert_eq!(t.files, ["src/a.rs:12", "src/b.rs"]);
    }

    #[test]
    fn merging_accumulates_completed_and_decisions() {
        let mut l = Ledger::default();
        l.merge(&SaveText::parse("Task: a\nCompleted: x\nKey decision: d1"));
        l.merge(&SaveText::parse(
            "Completed: y, x\nKey decision: d1\nBlocked: review",
        ));
        assert_eq!(l.current_task.as_deref(), Some("a"));
        assert_eq!(l.completed, ["x", "y"]);
        assert_eq!(l.decisions.len(), 1);
        assert_eq!(l.blocked, ["review"]);
    }

    #[test]
    fn a_corrupt_ledger_keeps_its_decisions_and_never_reaches_last_good() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = crate::state::FleetDir::new(tmp.path().join(".phoenix"));
        let dir = fleet.agent("a");
        update(&dir, |l| {
            l.merge(&SaveText::parse("Key decision: Use refresh tokens"))
        })
        .unwrap();
        let path = dir.file(LEDGER);
        let good = std::fs::read(&path).unwrap();
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();

        // Read: the decisions come back (not an empty ledger), and the repair is recorded.
        assert_eq!(load(&dir).decisions[0].text, "Use refresh tokens");
        let critical = std::fs::read_to_string(fleet.critical_events_path()).unwrap();
        assert!(critical.contains("ledger_corrupt"), "{critical}");

        // Corrupt again, then update: the corrupt bytes never reach the last good copy.
        std::fs::write(&path, b"\0garbage").unwrap();
        let ledger = update(&dir, |l| {
            l.merge(&SaveText::parse("Key decision: Keep JWT"))
        })
        .unwrap();
        let texts: Vec<&str> = ledger.decisions.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(texts, ["Use refresh tokens", "Keep JWT"]);
        let last_good: Ledger =
            serde_json::from_slice(&std::fs::read(dir.file("ledger.json.last-good")).unwrap())
                .unwrap();
        assert_eq!(last_good.decisions.len(), 2);
        let copies = std::fs::read_dir(&dir.path)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("ledger.json.corrupt-")
            })
            .count();
        assert_eq!(copies, 2);
    }
}
