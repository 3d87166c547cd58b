//! Work intake: each `[[agent_set]]`'s source read (the side effect `plan`, `apply` and
//! `phoenix run` do; loading a spec only reads what is stored here), the list checked by
//! validating phoenix.toml expanded from it, and stored as the set's last good list in the
//! fleet's state dir. A source that fails or gives garbage changes nothing: the last good list
//! stands and a critical event says why. Items that left the source are recorded as retired:
//! the plan stops their agents with a handoff, and nothing starts them again unless the item
//! comes back.

pub mod hooks;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::spec::intake::{AgentSetSpec, Item, RetiredItem, Source, StoredList, list_file};
use crate::spec::{ItemLists, LoadOptions, Spec};
use crate::state::FleetDir;
use crate::state::file::JsonFile;

/// How long a source command may run.
pub const SOURCE_TIMEOUT: Duration = Duration::from_secs(60);
/// The most a source may give (a command's stdout, a file).
pub const MAX_SOURCE_BYTES: u64 = 8 << 20;
/// Retired items remembered per set (the oldest are forgotten first).
const MAX_RETIRED: usize = 500;

/// What reading one set's source came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The same items as the stored list.
    Unchanged,
    /// A new list stored: the keys that came and the keys that left.
    Updated {
        added: Vec<String>,
        retired: Vec<String>,
    },
    /// The source could not be read (failed, timed out, too large, not a JSON array of
    /// objects): the last good list stands.
    Failed(String),
    /// The list read does not validate (a duplicate or hostile key, a template that does not
    /// render for an item): the last good list stands.
    Rejected(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refreshed {
    pub set: String,
    pub outcome: Outcome,
}

impl Refreshed {
    /// For people: `agent_set `issues`: source failed: exit 1: …; the last good list stands`.
    pub fn describe(&self) -> Option<String> {
        let set = &self.set;
        match &self.outcome {
            Outcome::Unchanged => None,
            Outcome::Updated { added, retired } => Some(format!(
                "agent_set `{set}`: {} new, {} retired",
                words(added),
                words(retired)
            )),
            Outcome::Failed(why) => Some(format!(
                "agent_set `{set}`: cannot read its source: {why}; the last good list stands"
            )),
            Outcome::Rejected(why) => Some(format!(
                "agent_set `{set}`: the list its source gave is refused: {why}; the last good list stands"
            )),
        }
    }

    pub fn changed(&self) -> bool {
        matches!(self.outcome, Outcome::Updated { .. })
    }
}

fn words(keys: &[String]) -> String {
    if keys.is_empty() {
        "none".into()
    } else {
        keys.iter()
            .map(|k| format!("#{k}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The set's stored list file.
pub fn stored(fleet: &FleetDir, set: &str) -> JsonFile<StoredList> {
    JsonFile::fleet(fleet, &list_file(set), "intake_list")
}

/// Read the sources of the sets `due` picks, each checked and stored (see the module doc).
/// Never fails: each set's outcome says what happened, and failures are critical events.
pub fn refresh(spec: &Spec, due: impl Fn(&AgentSetSpec) -> bool) -> Vec<Refreshed> {
    let sets: Vec<&AgentSetSpec> = spec.agent_sets.iter().filter(|s| due(s)).collect();
    if sets.is_empty() {
        return Vec::new();
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    // The text the spec came from: a list is checked against the file as it is now.
    let text = crate::spec::read_config(&spec.file);
    sets.into_iter()
        .map(|set| {
            let outcome = match (&text, read_source(&set.source, &spec.dir)) {
                (_, Err(why)) => Outcome::Failed(why),
                (Err(e), _) => Outcome::Failed(format!("cannot read phoenix.toml: {e}")),
                (Ok(text), Ok(items)) => store(spec, set, text, items, &fleet),
            };
            record(&fleet, set, &outcome);
            Refreshed {
                set: set.name.clone(),
                outcome,
            }
        })
        .collect()
}

/// The items `source` gives: a JSON array of objects, bounded in time and size.
pub fn read_source(source: &Source, dir: &Path) -> Result<Vec<Item>, String> {
    let bytes = match source {
        Source::Command(argv) => run_source(argv, dir)?,
        Source::File(path) => {
            use crate::state::bounded::{Links, ReadError, read_whole};
            read_whole(path, MAX_SOURCE_BYTES, Links::Follow).map_err(|e| match e {
                ReadError::TooLarge { len, .. } => format!(
                    "{} has {len} bytes, more than the {MAX_SOURCE_BYTES} a source may give",
                    path.display()
                ),
                other => other.to_string(),
            })?
        }
    };
    parse_items(&bytes)
}

fn run_source(argv: &[String], dir: &Path) -> Result<Vec<u8>, String> {
    use crate::process::{RunError, run_limited};
    let (program, args) = argv.split_first().ok_or("the command is empty")?;
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    // One byte more than allowed: an output that reaches it was cut, so it is too large.
    match run_limited(command, b"", SOURCE_TIMEOUT, MAX_SOURCE_BYTES + 1) {
        Err(RunError::Timeout) => Err(format!(
            "`{program}` ran longer than {}s and was stopped",
            SOURCE_TIMEOUT.as_secs()
        )),
        Err(RunError::Spawn(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("`{program}` is not on PATH"))
        }
        Err(RunError::Spawn(e)) => Err(format!("cannot start `{program}`: {e}")),
        Ok(done) if done.stdout.len() as u64 > MAX_SOURCE_BYTES => Err(format!(
            "`{program}` printed more than the {MAX_SOURCE_BYTES} bytes a source may give"
        )),
        Ok(done) if !done.status.success() => {
            let said = done.stderr_line();
            Err(if said.is_empty() {
                format!("`{program}` failed ({})", done.describe_status())
            } else {
                format!("`{program}` failed ({}): {said}", done.describe_status())
            })
        }
        Ok(done) => Ok(done.stdout.into_bytes()),
    }
}

/// A JSON array of objects, or why not.
pub fn parse_items(bytes: &[u8]) -> Result<Vec<Item>, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "not JSON ({e}); it starts {:?}",
            crate::text::shorten(&String::from_utf8_lossy(&bytes[..bytes.len().min(80)]), 60)
        )
    })?;
    let Value::Array(list) = value else {
        return Err("not a JSON array (of objects, one per item)".into());
    };
    list.into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Object(item) => Ok(item),
            other => Err(format!(
                "item #{} is not an object but {}",
                i + 1,
                crate::text::json_kind(&other)
            )),
        })
        .collect()
}

/// Check `items` by validating phoenix.toml expanded from them, then store them as the set's
/// last good list with the items that left recorded as retired.
fn store(
    spec: &Spec,
    set: &AgentSetSpec,
    text: &str,
    items: Vec<Item>,
    fleet: &FleetDir,
) -> Outcome {
    let mut lists = ItemLists::new();
    lists.insert(set.name.clone(), items.clone());
    let checked = match crate::spec::parse_with_items(
        text,
        &spec.file,
        LoadOptions::default(),
        &lists,
    ) {
        Ok(checked) => checked,
        Err(diags) => {
            let located = diags.located();
            let first = located
                .first()
                .map(|d| format!("{} ({}:{})", d.message, d.file, d.line))
                .unwrap_or_else(|| "phoenix.toml does not validate".into());
            let more = located.len().saturating_sub(1);
            return Outcome::Rejected(if more > 0 {
                format!(
                    "{first}, and {more} more (`phoenix validate` after fixing the source shows them)"
                )
            } else {
                first
            });
        }
    };
    // Which agent each key has now, and had before.
    let agents_of = |s: &Spec| -> Vec<(String, String, Value, &'static str)> {
        s.agents
            .iter()
            .filter_map(|a| {
                let o = a.origin.as_ref().filter(|o| o.set == set.name)?;
                Some((
                    o.key.clone(),
                    a.name.clone(),
                    o.item.clone(),
                    a.cli.as_str(),
                ))
            })
            .collect()
    };
    let now: Vec<_> = agents_of(&checked);
    let before: Vec<_> = agents_of(spec);
    let now_keys: HashSet<&str> = now.iter().map(|(k, ..)| k.as_str()).collect();
    let before_keys: HashSet<&str> = before.iter().map(|(k, ..)| k.as_str()).collect();
    if let Err(e) = fleet.ensure() {
        return Outcome::Failed(format!(
            "cannot create the state dir to store the list: {e}"
        ));
    }
    let file = stored(fleet, &set.name);
    let result = file.update(|list| {
        let old = list.take().unwrap_or_default();
        if old.items == items {
            *list = Some(old);
            return Outcome::Unchanged;
        }
        let at = crate::state::now_rfc3339();
        let mut retired: Vec<RetiredItem> = old
            .retired
            .into_iter()
            .filter(|r| !now_keys.contains(r.key.as_str()))
            .collect();
        let mut left = Vec::new();
        for (key, agent, item, cli) in &before {
            if now_keys.contains(key.as_str()) {
                continue;
            }
            left.push(key.clone());
            retired.retain(|r| &r.key != key);
            retired.push(RetiredItem {
                key: key.clone(),
                agent: agent.clone(),
                item: item.as_object().cloned().unwrap_or_default(),
                at: at.clone(),
                cli: Some(cli.to_string()),
            });
        }
        let overflow = retired.len().saturating_sub(MAX_RETIRED);
        retired.drain(..overflow);
        let added = now
            .iter()
            .filter(|(k, ..)| !before_keys.contains(k.as_str()))
            .map(|(k, ..)| k.clone())
            .collect();
        *list = Some(StoredList {
            items: items.clone(),
            fetched_at: Some(at),
            retired,
        });
        Outcome::Updated {
            added,
            retired: left,
        }
    });
    result.unwrap_or_else(|e| Outcome::Failed(format!("cannot store the list: {e}")))
}

/// Failures and refusals are critical events; a new list is one too (what came, what left).
fn record(fleet: &FleetDir, set: &AgentSetSpec, outcome: &Outcome) {
    let (event, reason, action) = match outcome {
        Outcome::Unchanged => return,
        Outcome::Updated { added, retired } => (
            "intake_list_updated",
            format!("{} new, {} retired", words(added), words(retired)),
            "stored the new list",
        ),
        Outcome::Failed(why) => (
            "intake_source_failed",
            why.clone(),
            "kept the last good list",
        ),
        Outcome::Rejected(why) => (
            "intake_list_rejected",
            why.clone(),
            "kept the last good list",
        ),
    };
    let _ = fleet.record_critical(
        event,
        "",
        &reason,
        action,
        json!({"agent_set": set.name, "source": set.source.describe(), "line": set.line}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_a_json_array_of_objects() {
        assert_eq!(parse_items(br#"[{"a": 1}]"#).unwrap().len(), 1);
        assert!(parse_items(b"oops").unwrap_err().starts_with("not JSON"));
        assert!(
            parse_items(br#"{"a": 1}"#)
                .unwrap_err()
                .contains("not a JSON array")
        );
        assert!(
            parse_items(br#"[{"a": 1}, 3]"#)
                .unwrap_err()
                .contains("item #2 is not an object but a number")
        );
    }

    #[test]
    fn a_command_source_is_bounded_and_runs_without_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let ok = read_source(
            &Source::Command(vec!["echo".into(), r#"[{"n": 1}]"#.into()]),
            dir.path(),
        )
        .unwrap();
        assert_eq!(ok[0]["n"], 1);
        // `;` is an argument, not a shell's separator.
        let err = read_source(
            &Source::Command(vec!["echo".into(), "[];".into(), "false".into()]),
            dir.path(),
        )
        .unwrap_err();
        assert!(err.starts_with("not JSON"), "{err}");
        let failed = read_source(
            &Source::Command(vec![
                "sh".into(),
                "-c".into(),
                "echo nope >&2; exit 3".into(),
            ]),
            dir.path(),
        )
        .unwrap_err();
        assert_eq!(failed, "`sh` failed (exit 3): nope");
        let big = read_source(
            &Source::Command(vec![
                "sh".into(),
                "-c".into(),
                "head -c 50000000 /dev/zero".into(),
            ]),
            dir.path(),
        )
        .unwrap_err();
        assert!(big.contains("printed more than"), "{big}");
        let missing = read_source(
            &Source::Command(vec!["no-such-program-phoenix".into()]),
            dir.path(),
        )
        .unwrap_err();
        assert!(missing.contains("is not on PATH"), "{missing}");
    }
}
