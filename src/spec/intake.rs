//! `[[agent_set]]`: agents made from a source of work items (GitHub issues through `gh`, a
//! JSON file). Expansion is a pure step between parsing and validation: the set's template (an
//! `[[agent]]` whose strings are minijinja templates over `item`) is rendered once per item of
//! the set's last good list, and each rendering is validated like any `[[agent]]`. Reading the
//! source is a side effect that `plan`, `apply` and `run` do (`crate::intake`); loading a spec
//! only reads the list they stored.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::raw::{RawAgent, Spanned};

/// One work item: a JSON object as the source printed it.
pub type Item = serde_json::Map<String, Value>;

/// Where a set's items come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A program printing a JSON array of objects, run without a shell.
    Command(Vec<String>),
    /// A file holding that array.
    File(PathBuf),
}

impl Source {
    /// `command gh issue list …` or `file /srv/work.json`, for events and the plan.
    pub fn describe(&self) -> String {
        match self {
            Source::Command(argv) => format!("command `{}`", argv.join(" ")),
            Source::File(path) => format!("file {}", path.display()),
        }
    }
}

/// One `[[agent_set]]` once validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSetSpec {
    pub name: String,
    pub source: Source,
    /// At most this many of its agents at once.
    pub max: Option<u32>,
    /// How often `phoenix run` reads the source again.
    pub every: Duration,
    /// argv templates over `item` and `key`.
    pub on_failed: Option<Vec<String>>,
    pub on_done: Option<Vec<String>>,
    /// The line of phoenix.toml the set is written on (for events about it).
    pub line: usize,
}

/// Where a generated agent came from: its set, its item's key, the item itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub set: String,
    pub key: String,
    pub item: Value,
    /// What the agent is told about its item when a session starts (the set's `context`).
    pub context: String,
}

impl Origin {
    /// `agent_set "issues": #123 "Fix login"`.
    pub fn describe(&self) -> String {
        let title = self
            .item
            .get("title")
            .and_then(Value::as_str)
            .map(|t| format!(" \"{}\"", crate::text::shorten(t, 60)))
            .unwrap_or_default();
        format!("agent_set \"{}\": #{}{title}", self.set, self.key)
    }
}

/// A set's last good list, as `crate::intake` stores it in the fleet's state dir
/// (`intake-<set>.json`), and the items that left the source since.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredList {
    pub items: Vec<Item>,
    /// When the source last gave a good list.
    #[serde(default)]
    pub fetched_at: Option<String>,
    /// Items that left the source: their agents are stopped with a handoff and never started
    /// again unless the item comes back.
    #[serde(default)]
    pub retired: Vec<RetiredItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetiredItem {
    pub key: String,
    pub agent: String,
    pub item: Item,
    pub at: String,
    /// Its agent's CLI (the handoff saved as it retires names it).
    #[serde(default)]
    pub cli: Option<String>,
}

/// A retired agent as the plan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    pub agent: String,
    pub set: String,
    pub key: String,
    pub cli: super::Cli,
}

/// The file of a set's stored list in the fleet's state dir.
pub fn list_file(set: &str) -> String {
    format!("intake-{set}.json")
}

/// The context of a set whose `context` is not written.
pub const DEFAULT_CONTEXT: &str = "Your work item ({{ set }} {{ key }}){% if item.title %}: {{ item.title }}{% endif %}\n{% if item.url %}{{ item.url }}\n{% endif %}{% if item.body %}\n{{ item.body }}\n{% endif %}";

/// One item's rendering of a template: the agent as if written in phoenix.toml (each string
/// keeps the place of the template string it came from), its key and its context.
#[derive(Debug, Clone)]
pub struct Expanded {
    pub key: String,
    pub agent: RawAgent,
    pub origin: Origin,
}

/// What went wrong expanding one item: which (its key once known, else its position), what,
/// and where in phoenix.toml the template string is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpandError {
    pub item: String,
    pub message: String,
    pub span: Option<Range<usize>>,
}

/// The compiled templates of one set: every string of its template compiled once, rendered
/// per item in the bounded environment of `crate::render`.
pub struct Expander {
    set: String,
    snippets: crate::render::Snippets,
    /// Template text → its compiled name, or why it does not compile.
    compiled: HashMap<String, Result<String, String>>,
    key: Spanned<String>,
    context: Spanned<String>,
    template: RawAgent,
}

fn is_template(text: &str) -> bool {
    text.contains("{{") || text.contains("{%")
}

impl Expander {
    /// The set's templates compiled; the errors of those that do not compile come with each
    /// item that uses them (and once from [`Expander::compile_errors`]).
    pub fn new(
        set: &str,
        key: &Spanned<String>,
        context: &Spanned<String>,
        template: &RawAgent,
    ) -> Expander {
        let mut expander = Expander {
            set: set.to_string(),
            snippets: crate::render::Snippets::default(),
            compiled: HashMap::new(),
            key: key.clone(),
            context: context.clone(),
            template: template.clone(),
        };
        let mut texts = vec![key.get_ref().clone(), context.get_ref().clone()];
        let _ = map_strings(template, &mut |s: &Spanned<String>| {
            texts.push(s.get_ref().clone());
            Ok(s.get_ref().clone())
        });
        for text in texts {
            expander.compile(&text);
        }
        expander
    }

    fn compile(&mut self, text: &str) {
        if !is_template(text) || self.compiled.contains_key(text) {
            return;
        }
        let name = format!("{}#{}", self.set, self.compiled.len());
        let result = self
            .snippets
            .add(&name, text)
            .map(|()| name)
            .map_err(|e| e.message());
        self.compiled.insert(text.to_string(), result);
    }

    fn render(
        &self,
        text: &Spanned<String>,
        ctx: &Value,
    ) -> Result<String, (String, Range<usize>)> {
        let raw = text.get_ref();
        let Some(compiled) = self.compiled.get(raw) else {
            return Ok(raw.clone());
        };
        let fail = |m: String| (format!("template `{raw}`: {m}"), text.span());
        let name = compiled.as_ref().map_err(|e| fail(e.clone()))?;
        self.snippets
            .render(name, ctx)
            .map_err(|e| fail(e.message()))
    }

    /// Each item's agent, or what is wrong with it.
    pub fn expand(&self, items: &[Item]) -> Vec<Result<Expanded, ExpandError>> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.expand_one(i, item))
            .collect()
    }

    fn expand_one(&self, index: usize, item: &Item) -> Result<Expanded, ExpandError> {
        let position = format!("#{} of the list", index + 1);
        let ctx = serde_json::json!({"item": item, "set": self.set});
        let key = self
            .render(&self.key, &ctx)
            .map_err(|(message, span)| ExpandError {
                item: position.clone(),
                message,
                span: Some(span),
            })?;
        let key = key.trim().to_string();
        if !super::valid_name(&key) {
            return Err(ExpandError {
                item: position,
                message: if key.is_empty() {
                    format!(
                        "the key `{}` renders as nothing for this item",
                        self.key.get_ref()
                    )
                } else {
                    format!("the key `{key}` is not a valid name")
                },
                span: Some(self.key.span()),
            });
        }
        let ctx = serde_json::json!({"item": item, "key": key, "set": self.set});
        let fail = |(message, span): (String, Range<usize>)| ExpandError {
            item: key.clone(),
            message,
            span: Some(span),
        };
        let agent = map_strings(&self.template, &mut |s| self.render(s, &ctx)).map_err(fail)?;
        let context = self.render(&self.context, &ctx).map_err(fail)?;
        Ok(Expanded {
            key: key.clone(),
            agent,
            origin: Origin {
                set: self.set.clone(),
                key,
                item: Value::Object(item.clone()),
                context,
            },
        })
    }
}

type Render<'a> = dyn FnMut(&Spanned<String>) -> Result<String, (String, Range<usize>)> + 'a;

/// `raw` with every string it holds replaced by what `f` makes of it (each in its place).
pub fn map_strings(raw: &RawAgent, f: &mut Render<'_>) -> Result<RawAgent, (String, Range<usize>)> {
    let mut out = raw.clone();
    let one = |v: &mut Option<Spanned<String>>, f: &mut Render<'_>| {
        if let Some(s) = v {
            *s = s.with(f(s)?);
        }
        Ok::<(), (String, Range<usize>)>(())
    };
    for field in [
        &mut out.name,
        &mut out.cli,
        &mut out.command,
        &mut out.resume_command,
        &mut out.workdir,
        &mut out.policy,
        &mut out.host,
        &mut out.sandbox,
    ] {
        one(field, f)?;
    }
    if let Some(ws) = &mut out.workspace {
        let mut w = ws.get_ref().clone();
        for field in [&mut w.repo, &mut w.branch, &mut w.base, &mut w.worktrees] {
            one(field, f)?;
        }
        *ws = ws.with(w);
    }
    if let Some(tmux) = &mut out.tmux {
        for field in [&mut tmux.session, &mut tmux.window] {
            one(field, f)?;
        }
    }
    if let Some(r) = &mut out.restart {
        for field in [
            &mut r.when,
            &mut r.cooldown,
            &mut r.backoff_max,
            &mut r.crash_window,
            &mut r.life_deadline,
            &mut r.continue_prompt,
        ] {
            one(field, f)?;
        }
    }
    if let Some(env) = &out.env {
        let mut rendered = std::collections::BTreeMap::new();
        for (k, v) in env {
            rendered.insert(k.with(f(k)?), v.with(f(v)?));
        }
        out.env = Some(rendered);
    }
    if let Some(list) = &out.notify {
        let span = list.span();
        let mut rendered = Vec::new();
        for s in list.get_ref() {
            rendered.push(f(&Spanned::from_parts(span.clone(), s.clone()))?);
        }
        out.notify = Some(list.with(rendered));
    }
    Ok(out)
}

/// An argv template (`on_failed`, `on_done`) rendered for one agent's item: each argument
/// its own template, never joined into a shell line.
pub fn render_argv(argv: &[String], origin: &Origin) -> Result<Vec<String>, String> {
    let ctx = serde_json::json!({"item": origin.item, "key": origin.key, "set": origin.set});
    argv.iter()
        .map(|arg| {
            if !is_template(arg) {
                return Ok(arg.clone());
            }
            let mut snippets = crate::render::Snippets::default();
            snippets
                .add("arg", arg)
                .and_then(|()| snippets.render("arg", &ctx))
                .map_err(|e| format!("template `{arg}`: {}", e.message()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spanned(text: &str) -> Spanned<String> {
        Spanned::from_parts(0..1, text.to_string())
    }

    fn template() -> RawAgent {
        RawAgent {
            name: Some(spanned("issue-{{ item.number }}")),
            command: Some(spanned("demo-agent")),
            ..Default::default()
        }
    }

    fn items(json: &str) -> Vec<Item> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn each_item_gets_its_own_agent_and_context() {
        let ex = Expander::new(
            "issues",
            &spanned("{{ item.number }}"),
            &spanned(DEFAULT_CONTEXT),
            &template(),
        );
        let out = ex.expand(&items(
            r#"[{"number": 7, "title": "Fix login", "body": "It fails."}, {"number": 8}]"#,
        ));
        let first = out[0].as_ref().unwrap();
        assert_eq!(first.key, "7");
        assert_eq!(first.agent.name.as_ref().unwrap().get_ref(), "issue-7");
        assert_eq!(
            first.agent.command.as_ref().unwrap().get_ref(),
            "demo-agent"
        );
        assert!(
            first.origin.context.contains("It fails."),
            "{}",
            first.origin.context
        );
        assert_eq!(
            first.origin.describe(),
            "agent_set \"issues\": #7 \"Fix login\""
        );
        assert_eq!(out[1].as_ref().unwrap().key, "8");
    }

    #[test]
    fn a_hostile_or_missing_key_is_refused_with_its_position() {
        let ex = Expander::new(
            "issues",
            &spanned("{{ item.id }}"),
            &spanned(""),
            &template(),
        );
        let out = ex.expand(&items(r#"[{"id": "../x"}, {"id": ";rm"}, {"number": 1}]"#));
        let errors: Vec<_> = out.iter().map(|r| r.as_ref().unwrap_err()).collect();
        assert!(errors[0].message.contains("`../x` is not a valid name"));
        assert!(errors[1].message.contains("`;rm` is not a valid name"));
        assert!(errors[2].message.contains("renders as nothing"));
        assert_eq!(errors[2].item, "#3 of the list");
    }

    #[test]
    fn argv_templates_render_each_argument_alone() {
        let origin = Origin {
            set: "issues".into(),
            key: "7".into(),
            item: serde_json::json!({"number": 7, "title": "a; rm -rf /"}),
            context: String::new(),
        };
        let argv = render_argv(
            &[
                "gh".into(),
                "issue".into(),
                "edit".into(),
                "{{ item.number }}".into(),
                "{{ item.title }}".into(),
            ],
            &origin,
        )
        .unwrap();
        assert_eq!(argv, ["gh", "issue", "edit", "7", "a; rm -rf /"]);
    }

    const SET: &str = r#"
[fleet]
name = "f"

[[agent]]
name = "static"
command = "demo-agent"

[[agent_set]]
name = "issues"
source = { file = "work.json" }
key = "{{ item.number }}"
max = 2

[agent_set.template]
name = "issue-{{ item.number }}"
command = "demo-agent --issue {{ item.number }}"
"#;

    fn parse_items(source: &str, json: &str) -> Result<crate::spec::Spec, String> {
        let mut lists = crate::spec::ItemLists::new();
        lists.insert("issues".into(), items(json));
        crate::spec::parse_with_items(
            source,
            std::path::Path::new("/srv/fleet/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
            &lists,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_set_expands_into_agents_that_say_where_they_came_from() {
        let spec = parse_items(
            SET,
            r#"[{"number": 7, "title": "Fix login"}, {"number": 9}]"#,
        )
        .unwrap();
        assert_eq!(spec.agent_names(), ["static", "issue-7", "issue-9"]);
        let agent = spec.agent("issue-7").unwrap();
        assert_eq!(agent.argv, ["demo-agent", "--issue", "7"]);
        assert_eq!(
            agent.origin.as_ref().unwrap().describe(),
            "agent_set \"issues\": #7 \"Fix login\""
        );
        assert_eq!(spec.agent_sets[0].max, Some(2));
        assert_eq!(
            spec.agent_sets[0].source,
            Source::File("/srv/fleet/work.json".into())
        );
        // No list stored yet: the set makes no agents.
        let spec = crate::spec::parse(
            SET,
            std::path::Path::new("/nonexistent/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        assert_eq!(spec.agent_names(), ["static"]);
    }

    #[test]
    fn bad_items_are_errors_naming_the_set_the_item_and_the_line() {
        let dup = parse_items(SET, r#"[{"number": 7}, {"number": 7}]"#).unwrap_err();
        assert!(
            dup.contains("agent_set `issues`: two items have the key `7`"),
            "{dup}"
        );
        assert!(dup.contains("phoenix.toml:12"), "{dup}");
        let hostile = parse_items(SET, r#"[{"number": "../x"}]"#).unwrap_err();
        assert!(
            hostile.contains(
                "agent_set `issues`, item #1 of the list: the key `../x` is not a valid name"
            ),
            "{hostile}"
        );
        // A key that is fine but a name that is not.
        let long = "x".repeat(70);
        let name = parse_items(SET, &format!(r#"[{{"number": "{long}"}}]"#)).unwrap_err();
        assert!(name.contains("is not a valid name"), "{name}");
        // An item's agent that clashes with a written one.
        let clash = SET.replace("name = \"static\"", "name = \"issue-7\"");
        let err = parse_items(&clash, r#"[{"number": 7}]"#).unwrap_err();
        assert!(
            err.contains("agent_set `issues`, item `7`: duplicate agent name `issue-7`"),
            "{err}"
        );
    }

    #[test]
    fn a_set_without_its_parts_is_refused_with_hints() {
        let err = parse_items(
            "[[agent_set]]\nname = \"s\"\n[agent_set.template]\ncli = \"claude\"\nnmae = \"x\"\n",
            "[]",
        )
        .unwrap_err();
        for wanted in [
            "agent_set `s` has no `source`",
            "agent_set `s` has no `key`",
            "the template has no `name`",
            "unknown key `nmae` in [agent_set.template]",
            "did you mean `name`?",
        ] {
            assert!(err.contains(wanted), "{wanted}: {err}");
        }
    }
}
