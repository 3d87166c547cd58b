//! `[[agent_set]]`: each set checked, and its last good list of items expanded into agents
//! that the rest of validation checks like any `[[agent]]` (see `spec::intake`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use super::Validator;
use crate::diag::Diagnostic;
use crate::spec::intake::{
    AgentSetSpec, DEFAULT_CONTEXT, Expander, Item, Origin, Retired, Source, StoredList, list_file,
};
use crate::spec::raw::{RawAgent, RawAgentSet, RawSpec, Spanned};
use crate::spec::{Fleet, Floor};

/// Item lists to expand instead of the stored ones (set name → items): a list just read from
/// a source is validated this way before it is stored.
pub type ItemLists = BTreeMap<String, Vec<Item>>;

/// The default of `every`.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(120);

const EVERY_FLOOR: Floor = Floor {
    min: Duration::from_secs(10),
    why: "each read of the source runs a program or reads a file (and a `gh` call spends API quota)",
};

/// One item's agent as if written in phoenix.toml, and where it came from.
pub(super) struct Generated {
    pub raw: Spanned<RawAgent>,
    pub origin: Origin,
}

impl Validator<'_> {
    /// The sets, the agents their items make, and the agents of items that left.
    pub(super) fn agent_sets(
        &mut self,
        raw: &RawSpec,
        fleet: &Fleet,
    ) -> (Vec<AgentSetSpec>, Vec<Generated>, Vec<Retired>) {
        let (mut sets, mut generated, mut retired) = (Vec::new(), Vec::new(), Vec::new());
        let mut names: HashMap<String, usize> = HashMap::new();
        for raw_set in &raw.agent_sets {
            let Some(set) = self.agent_set(raw_set) else {
                continue;
            };
            if let Some(first) = names.get(&set.name) {
                let name = raw_set.get_ref().name.as_ref().map(|n| n.span());
                self.error(
                    format!("duplicate agent_set name `{}`", set.name),
                    name,
                    &format!("first defined on line {first}; agent_set names must be unique"),
                );
                continue;
            }
            names.insert(set.name.clone(), set.line);
            let stored = self.stored_list(fleet, &set.name);
            let items = match self.items.and_then(|lists| lists.get(&set.name)) {
                Some(items) => items.clone(),
                None => stored.items.clone(),
            };
            let made = self.expand(raw_set.get_ref(), &set, &items);
            let keys: HashSet<&str> = made.iter().map(|g| g.origin.key.as_str()).collect();
            retired.extend(
                stored
                    .retired
                    .iter()
                    .filter(|r| !keys.contains(r.key.as_str()))
                    .map(|r| Retired {
                        agent: r.agent.clone(),
                        set: set.name.clone(),
                        key: r.key.clone(),
                        cli: r
                            .cli
                            .as_deref()
                            .and_then(crate::spec::Cli::parse)
                            .unwrap_or(crate::spec::Cli::Custom),
                    }),
            );
            generated.extend(made);
            sets.push(set);
        }
        (sets, generated, retired)
    }

    /// What `crate::intake` stored for the set; nothing when it has not read the source yet.
    fn stored_list(&self, fleet: &Fleet, set: &str) -> StoredList {
        use crate::state::file::{JsonFile, Loaded};
        let file = JsonFile::<StoredList>::fleet(
            &crate::state::FleetDir::new(&fleet.state_dir),
            &list_file(set),
            "intake_list",
        );
        // Read without repairing: loading a spec must not write (a corrupt list is repaired,
        // and reported, by the next read of the source).
        match file.read() {
            Ok(Loaded::Valid(list)) => list,
            _ => crate::state::file::read_bounded(
                &file.last_good_path(),
                crate::state::file::STATE_FILE_LIMIT,
            )
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default(),
        }
    }

    fn agent_set(&mut self, raw: &Spanned<RawAgentSet>) -> Option<AgentSetSpec> {
        let errors_before = self.diags.len();
        let span = raw.span();
        let (line, _) = crate::diag::line_col(self.source, span.start);
        let set = raw.get_ref();
        let Some(raw_name) = &set.name else {
            self.error(
                "[[agent_set]] has no `name`".into(),
                Some(span.start..span.start + 1),
                "add `name = \"…\"` (letters, digits, `_`, `-`)",
            );
            return None;
        };
        let name = self.name(raw_name, "agent_set name");
        let at = Some(span.start..span.start + 1);
        let source = match set.source.as_ref().map(|s| (s, s.get_ref())) {
            None => {
                self.error(
                    format!("agent_set `{name}` has no `source`"),
                    at.clone(),
                    "add `source = { command = [\"gh\", \"issue\", \"list\", \"--json\", \"number,title,body,url\"] }` or `source = { file = \"work.json\" }`",
                );
                None
            }
            Some((s, source)) => match (&source.command, &source.file) {
                (Some(_), None) => self
                    .program(
                        &source.command,
                        &format!("agent_set `{name}`: `source.command` is empty"),
                        "name a program and its arguments, e.g. [\"gh\", \"issue\", \"list\", \"--json\", \"number,title,body\"]",
                    )
                    .map(Source::Command),
                (None, Some(file)) if !file.get_ref().trim().is_empty() => {
                    Some(Source::File(self.path(file.get_ref())))
                }
                _ => {
                    self.error(
                        format!("agent_set `{name}`: `source` needs one of `command` or `file`"),
                        Some(s.span()),
                        "a command printing a JSON array of objects, or a file holding one",
                    );
                    None
                }
            },
        };
        if set.key.is_none() {
            self.error(
                format!("agent_set `{name}` has no `key`"),
                at.clone(),
                "add `key = \"{{ item.number }}\"`: each item's key names its agent",
            );
        }
        match set.template.as_ref().map(|t| t.get_ref()) {
            None => self.error(
                format!("agent_set `{name}` has no `template`"),
                at.clone(),
                "add `[agent_set.template]` with the keys of an [[agent]], e.g. `name = \"issue-{{ item.number }}\"`",
            ),
            Some(t) if t.name.is_none() => self.error(
                format!("agent_set `{name}`: the template has no `name`"),
                set.template.as_ref().map(|t| t.span()),
                "add `name = \"issue-{{ item.number }}\"`: each item's agent needs a name of its own",
            ),
            Some(t) if t.host.is_some() => self.error(
                format!("agent_set `{name}`: `host` is not allowed in a template"),
                t.host.as_ref().map(|h| h.span()),
                "the agents of an agent_set run on this machine",
            ),
            Some(_) => {}
        }
        let max = set.max.as_ref().and_then(|m| {
            self.bounded(
                m,
                "max",
                1..=u32::MAX,
                "at least one agent of the set must be able to run; leave `max` out for no limit",
            )
        });
        let every = self.duration_min(&set.every, "every", DEFAULT_EVERY, EVERY_FLOOR);
        let on_failed = self.program(
            &set.on_failed,
            &format!("agent_set `{name}`: `on_failed` is empty"),
            "name a program and its arguments, e.g. [\"gh\", \"issue\", \"edit\", \"{{ item.number }}\", \"--add-label\", \"agent-failed\"]",
        );
        let on_done = self.program(
            &set.on_done,
            &format!("agent_set `{name}`: `on_done` is empty"),
            "name a program and its arguments, e.g. [\"gh\", \"issue\", \"comment\", \"{{ item.number }}\", \"--body\", \"done\"]",
        );
        if self.diags.len() > errors_before {
            return None;
        }
        Some(AgentSetSpec {
            name,
            source: source?,
            max,
            every,
            on_failed,
            on_done,
            line,
        })
    }

    /// Each item's agent; an item that cannot be expanded, or a second item with a key taken,
    /// is an error naming the set and the item.
    fn expand(&mut self, raw: &RawAgentSet, set: &AgentSetSpec, items: &[Item]) -> Vec<Generated> {
        let (Some(key), Some(template)) = (&raw.key, &raw.template) else {
            return Vec::new();
        };
        let context = raw
            .context
            .clone()
            .unwrap_or_else(|| key.with(DEFAULT_CONTEXT.to_string()));
        let expander = Expander::new(&set.name, key, &context, template.get_ref());
        let mut keys: HashSet<String> = HashSet::new();
        let mut generated = Vec::new();
        for result in expander.expand(items) {
            match result {
                Ok(e) if !keys.insert(e.key.clone()) => self.error(
                    format!(
                        "agent_set `{}`: two items have the key `{}`",
                        set.name, e.key
                    ),
                    Some(key.span()),
                    "each item's key must be its own: it names the item's agent",
                ),
                Ok(e) => generated.push(Generated {
                    raw: template.with(e.agent),
                    origin: e.origin,
                }),
                Err(e) => self.diags.push(
                    Diagnostic::new(
                        format!(
                            "agent_set `{}`, item {}: {}",
                            set.name,
                            if e.item.starts_with('#') {
                                e.item.clone()
                            } else {
                                format!("`{}`", e.item)
                            },
                            e.message
                        ),
                        e.span,
                    )
                    .with_hint(
                        "keys and names use only letters, digits, `_` and `-`; check the template against the item the source gave"
                            .to_string(),
                    ),
                ),
            }
        }
        generated
    }
}
