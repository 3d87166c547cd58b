//! Every text phoenix writes for a person or an agent is a minijinja template: built into the
//! binary (templates/*.j2 in the repository) and overridden by a file of the same name in
//! `templates/` next to phoenix.toml.

use std::path::{Path, PathBuf};

use minijinja::ErrorKind;
use serde::Serialize;

/// Templates built into the binary.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("trauma.md.j2", include_str!("../../templates/trauma.md.j2")),
    (
        "clinic_reminder.md.j2",
        include_str!("../../templates/clinic_reminder.md.j2"),
    ),
    (
        "recovery_context.md.j2",
        include_str!("../../templates/recovery_context.md.j2"),
    ),
    (
        "clinic_abort.md.j2",
        include_str!("../../templates/clinic_abort.md.j2"),
    ),
    (
        "investigation.md.j2",
        include_str!("../../templates/investigation.md.j2"),
    ),
    (
        "revival_context.md.j2",
        include_str!("../../templates/revival_context.md.j2"),
    ),
    (
        "failure_message.md.j2",
        include_str!("../../templates/failure_message.md.j2"),
    ),
    (
        "handoff.md.j2",
        include_str!("../../templates/handoff.md.j2"),
    ),
    (
        "startup.md.j2",
        include_str!("../../templates/startup.md.j2"),
    ),
    ("brief.md.j2", include_str!("../../templates/brief.md.j2")),
    (
        "messages.md.j2",
        include_str!("../../templates/messages.md.j2"),
    ),
    (
        "brief_prompt.md.j2",
        include_str!("../../templates/brief_prompt.md.j2"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no template `{name}` (built in: {})", builtin_names().join(", "))]
    NotFound { name: String },
    /// `origin` is the file (`templates/x.md.j2`) or `builtin:templates/x.md.j2`.
    #[error("template `{}`: {source:#}", at(origin, source))]
    Template {
        origin: String,
        #[source]
        source: minijinja::Error,
    },
}

fn at(origin: &str, e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!("{origin}:{line}"),
        None => origin.to_string(),
    }
}

impl Error {
    /// The file and line, for `phoenix validate`.
    pub fn location(&self) -> (String, Option<usize>) {
        match self {
            Error::NotFound { name } => (format!("templates/{name}"), None),
            Error::Template { origin, source } => (origin.clone(), source.line()),
        }
    }

    /// The message without the location.
    pub fn message(&self) -> String {
        match self {
            Error::NotFound { .. } => self.to_string(),
            Error::Template { source, .. }
                if source.kind() == ErrorKind::OutOfFuel && source.detail().is_none() =>
            {
                format!(
                    "{}: the template does more work than one render may ({FUEL} fuel); look for nested loops over large ranges",
                    source.kind()
                )
            }
            Error::Template { source, .. } => match source.detail() {
                Some(detail) => format!("{}: {detail}", source.kind()),
                None => source.kind().to_string(),
            },
        }
    }
}

pub fn builtin_names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|(n, _)| *n).collect()
}

/// The templates of one fleet.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    /// `<dir of phoenix.toml>/templates`, if any.
    dir: Option<PathBuf>,
}

impl Templates {
    pub fn new(dir: Option<&Path>) -> Templates {
        Templates {
            dir: dir.map(Path::to_path_buf),
        }
    }

    fn builtin(name: &str) -> Option<(String, String)> {
        EMBEDDED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, text)| (format!("builtin:templates/{n}"), text.to_string()))
    }

    /// The override's text if there is one, else the built-in one.
    fn source(&self, name: &str) -> Result<(String, String), Error> {
        if let Some(dir) = &self.dir
            && let Ok(text) = read_override(&dir.join(name))
        {
            return Ok((format!("templates/{name}"), text));
        }
        Self::builtin(name).ok_or_else(|| Error::NotFound {
            name: name.to_string(),
        })
    }

    pub fn render<S: Serialize>(&self, name: &str, ctx: &S) -> Result<String, Error> {
        let (origin, text) = self.source(name)?;
        render_text(&origin, &text, ctx)
    }

    /// Render, and when an override is broken use the built-in template instead: a bad
    /// template must not stop a recovery. The error says what was wrong with the override.
    pub fn render_or_builtin<S: Serialize>(
        &self,
        name: &str,
        ctx: &S,
    ) -> (Result<String, Error>, Option<Error>) {
        match self.render(name, ctx) {
            Ok(text) => (Ok(text), None),
            Err(e) => match Self::builtin(name) {
                Some((origin, text)) => (render_text(&origin, &text, ctx), Some(e)),
                None => (Err(e), None),
            },
        }
    }

    /// Every override in templates/ that does not compile, or that runs out of fuel rendered
    /// with an empty context (cheap: the fuel bounds it). Unknown files are left alone: other
    /// parts of phoenix own them.
    pub fn check(&self) -> Vec<Error> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".j2"))
            .collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|name| {
                let text = read_override(&dir.join(&name)).ok()?;
                let origin = format!("templates/{name}");
                let env = environment();
                let fail = |source| {
                    Some(Error::Template {
                        origin: origin.clone(),
                        source,
                    })
                };
                match env.template_from_named_str(&origin, &text) {
                    Err(source) => fail(source),
                    Ok(template) => match template.render(minijinja::context! {}) {
                        Err(source) if source.kind() == ErrorKind::OutOfFuel => fail(source),
                        _ => None,
                    },
                }
            })
            .collect()
    }
}

/// Render `name` from `templates/` under `spec_dir`, else the built-in one.
pub fn render<S: Serialize>(spec_dir: &Path, name: &str, ctx: &S) -> Result<String, Error> {
    Templates::new(Some(&spec_dir.join("templates"))).render(name, ctx)
}

/// The work one render may do (minijinja's fuel: about one per instruction and per 64 bytes
/// of data), so that a template override with nested loops cannot hang a hook or the
/// watchdog: rendering fails with `OutOfFuel` and the built-in template is used. Far more
/// than the built-in templates need (their output is capped well below 64 MiB).
pub const FUEL: u64 = 1_000_000;

/// A template override larger than this is not read.
const MAX_TEMPLATE_BYTES: u64 = 1024 * 1024;

/// An override's text, read through the bounded reader (a FIFO is refused, not waited on).
fn read_override(path: &Path) -> Result<String, crate::state::bounded::ReadError> {
    use crate::state::bounded::{self, Links};
    bounded::read_string(path, MAX_TEMPLATE_BYTES, Links::Follow)
}

/// The widest indent `tojson` takes. minijinja writes the indent for every line and level
/// before it counts the output against the fuel, so `tojson(indent=100000000)` allocated
/// without bound and aborted the process (a hook, `handoff save`, `validate`).
pub const MAX_JSON_INDENT: usize = 16;

/// `tojson`, its indent bounded and its output's size checked before it is written: the
/// built-in filter counts the output only once it exists.
fn tojson(
    state: &minijinja::State,
    value: &minijinja::Value,
    indent: Option<minijinja::Value>,
    kwargs: minijinja::value::Kwargs,
) -> Result<minijinja::Value, minijinja::Error> {
    // Out of fuel, with what was too large: `validate` reports it, a render falls back.
    let invalid = |detail: String| minijinja::Error::new(ErrorKind::OutOfFuel, detail);
    let given = match &indent {
        Some(v) => Some(v.clone()),
        None => kwargs.get::<Option<minijinja::Value>>("indent")?,
    };
    let width = match &given {
        None => 0,
        Some(v) => match bool::try_from(v.clone()) {
            Ok(true) => 2,
            Ok(false) => 0,
            Err(_) => usize::try_from(v.clone())?,
        },
    };
    if width > MAX_JSON_INDENT {
        return Err(invalid(format!(
            "tojson: an indent of {width} is more than the {MAX_JSON_INDENT} a template may use"
        )));
    }
    // Written compact first, into a buffer that stops at what the render may still write
    // (the built-in serialises all of a value, however long, before anything counts it).
    let room = state
        .fuel_levels()
        .map_or(MAX_OUTPUT_BYTES, |(_, left)| {
            usize::try_from(left.saturating_mul(64)).unwrap_or(usize::MAX)
        })
        .min(MAX_OUTPUT_BYTES);
    let mut compact = Bounded {
        bytes: Vec::new(),
        room,
        state,
        out_of_fuel: false,
    };
    if let Err(e) = serde_json::to_writer(&mut compact, value) {
        return Err(match (e.is_io(), compact.out_of_fuel) {
            (true, true) => minijinja::Error::from(ErrorKind::OutOfFuel),
            (true, false) => invalid(format!(
                "tojson: the output would be more than the {room} bytes this render may still write"
            )),
            _ => invalid(format!("tojson: {e}")),
        });
    }
    // Pretty output is at most the compact one with each of its bytes starting a line
    // indented once per level.
    let depth = json_depth(&String::from_utf8_lossy(&compact.bytes));
    let bound = compact
        .bytes
        .len()
        .saturating_mul(2 + width.saturating_mul(depth));
    if width > 0 && bound > room {
        return Err(invalid(format!(
            "tojson: the output could reach {bound} bytes, more than the {room} this render may still write"
        )));
    }
    // (The engine charges the fuel for the string returned.)
    minijinja::filters::tojson(value, indent, kwargs)
}

/// A buffer that refuses to grow past `room` bytes, and pays a fuel for each piece written
/// (about one per value: a long sequence costs what iterating it in the template would).
struct Bounded<'s, 'e> {
    bytes: Vec<u8>,
    room: usize,
    state: &'s minijinja::State<'s, 'e>,
    out_of_fuel: bool,
}

impl std::io::Write for Bounded<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.room {
            return Err(std::io::Error::other("too large"));
        }
        if self.state.consume_fuel(1).is_err() {
            self.out_of_fuel = true;
            return Err(std::io::Error::other("out of fuel"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How deeply the compact JSON `text` nests (brackets outside strings).
fn json_depth(text: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// What one render may write at most: what its fuel pays for (one fuel per 64 bytes).
pub const MAX_OUTPUT_BYTES: usize = FUEL as usize * 64;

fn environment<'a>() -> minijinja::Environment<'a> {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(FUEL));
    env.add_filter("tojson", tojson);
    // A field missing from a template's context renders as nothing, as Jinja users expect.
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build();
    if let Ok(syntax) = syntax {
        env.set_syntax(syntax);
    }
    env
}

fn render_text<S: Serialize>(origin: &str, text: &str, ctx: &S) -> Result<String, Error> {
    let env = environment();
    let fail = |source| Error::Template {
        origin: origin.to_string(),
        source,
    };
    let template = env.template_from_named_str(origin, text).map_err(fail)?;
    let out = template
        .render(minijinja::value::Serde(ctx))
        .map_err(fail)?;
    Ok(tidy(&out))
}

/// Short templates written in phoenix.toml (an `[[agent_set]]`'s strings, its argv hooks):
/// compiled once, rendered many times, in the same bounded environment as every template
/// (fuel, `tojson`'s limits), output as rendered (no blank lines collapsed).
pub struct Snippets {
    env: minijinja::Environment<'static>,
}

impl Default for Snippets {
    fn default() -> Self {
        Snippets { env: environment() }
    }
}

impl Snippets {
    pub fn add(&mut self, name: &str, text: &str) -> Result<(), Error> {
        self.env
            .add_template_owned(name.to_string(), text.to_string())
            .map_err(|source| Error::Template {
                origin: name.to_string(),
                source,
            })
    }

    pub fn render<S: Serialize>(&self, name: &str, ctx: &S) -> Result<String, Error> {
        let fail = |source| Error::Template {
            origin: name.to_string(),
            source,
        };
        self.env
            .get_template(name)
            .and_then(|t| t.render(minijinja::value::Serde(ctx)))
            .map_err(fail)
    }
}

/// Collapse the runs of blank lines that conditionals leave behind.
pub fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.trim().lines() {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_templates_render_with_an_empty_context() {
        let t = Templates::new(None);
        for name in builtin_names() {
            t.render(name, &json!({}))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// Nested loops (10^15 iterations), a 100 GB string, output that never ends.
    const ENDLESS: &[&str] = &[
        "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x{% endfor %}{% endfor %}{% endfor %}",
        "{{ 'x' * 100000000000 }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'many bytes of output' }}{% endfor %}{% endfor %}",
    ];

    #[test]
    fn an_endless_override_runs_out_of_fuel_and_the_builtin_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let t = Templates::new(Some(dir.path()));
        for endless in ENDLESS {
            std::fs::write(dir.path().join("clinic_abort.md.j2"), endless).unwrap();
            let started = std::time::Instant::now();
            let (text, err) = t.render_or_builtin("clinic_abort.md.j2", &json!({"agent": "a"}));
            // Unbounded, these take hours; a debug build on a loaded machine takes up to a
            // second or two for the fuel's million steps.
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
            let builtin = Templates::new(None)
                .render("clinic_abort.md.j2", &json!({"agent": "a"}))
                .unwrap();
            assert_eq!(text.unwrap(), builtin);
            let err = err.unwrap();
            assert!(
                err.message().contains("ran out of fuel"),
                "{}",
                err.message()
            );
            let found = t.check();
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].message().contains("nested loops"));
        }
    }

    /// Sizes the fuel never saw: `tojson` wrote its indent for every line and level before
    /// counting the output, and a huge indent aborted the process.
    #[test]
    fn a_huge_indent_is_an_error_not_an_abort() {
        let dir = tempfile::tempdir().unwrap();
        let t = Templates::new(Some(dir.path()));
        // Wide and deep: each of its numbers would sit on a line of its own, indented 200 times.
        let mut wide_deep = json!((0..5000).collect::<Vec<u32>>());
        for _ in 0..200 {
            wide_deep = json!([wide_deep]);
        }
        let ctx = json!({"agent": "a", "deep": [[[[{"k": [1, 2, 3]}]]]], "wide_deep": wide_deep});
        for huge in [
            "{{ deep|tojson(indent=100000000) }}",
            "{{ deep|tojson(100000000) }}",
            "{{ agent|indent(1000000000000) }}",
            "{{ wide_deep|tojson(indent=16) }}",
        ] {
            std::fs::write(dir.path().join("clinic_abort.md.j2"), huge).unwrap();
            let started = std::time::Instant::now();
            let err = t.render("clinic_abort.md.j2", &ctx).unwrap_err();
            assert!(
                started.elapsed() < std::time::Duration::from_secs(2),
                "{huge}"
            );
            assert_eq!(
                err.location().0,
                "templates/clinic_abort.md.j2",
                "{huge}: {err}"
            );
            let (text, broken) = t.render_or_builtin("clinic_abort.md.j2", &ctx);
            assert!(text.is_ok() && broken.is_some(), "{huge}");
            // (`validate` renders with an empty context: only what needs none fails there.)
            if !huge.contains("wide_deep") {
                let found = t.check();
                assert_eq!(found.len(), 1, "{huge}: {found:?}");
            }
        }
        let err = t
            .render("clinic_abort.md.j2", &ctx)
            .map(|_| ())
            .unwrap_err();
        assert!(
            err.message().contains("this render may still write"),
            "{}",
            err.message()
        );
        std::fs::write(
            dir.path().join("clinic_abort.md.j2"),
            "{{ deep|tojson(indent=100000000) }}",
        )
        .unwrap();
        let err = t.render("clinic_abort.md.j2", &ctx).unwrap_err();
        assert!(
            err.message()
                .contains("an indent of 100000000 is more than the 16"),
            "{}",
            err.message()
        );
        // Sensible indents still work.
        std::fs::write(
            dir.path().join("clinic_abort.md.j2"),
            "{{ deep|tojson(indent=2) }} {{ agent|tojson }} {{ deep|tojson(true) }}",
        )
        .unwrap();
        let text = t.render("clinic_abort.md.j2", &ctx).unwrap();
        assert!(text.contains("\n        {\n          \"k\": ["), "{text}");
        assert!(text.contains("\"a\""), "{text}");
    }

    /// Every built-in filter, function and operator that takes a size, at sizes far beyond
    /// any real template: each one answers (an error, or a bounded output) within the fuel.
    #[test]
    fn every_size_argument_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let t = Templates::new(Some(dir.path()));
        for template in [
            "{{ 'x' * 99999999 ~ 'y' * 99999999 }}",
            "{{ ('x' * 99999999)|upper|lower|title }}",
            "{{ ([1] * 100000000)|list|length }}",
            "{{ range(100000)|batch(1000000000000, 'x')|list|length }}",
            "{{ range(100000)|slice(1000000000000)|list|length }}",
            "{{ range(100000)|join('x' * 99999999)|length }}",
            "{{ '%1000000000d'|format(1) }}",
            "{{ 'x'|indent(1000000000000, true) }}",
            "{{ ('a\n' * 10000000)|indent(100) }}",
            "{{ ('x' * 99999999)|replace('x', 'yyyyyyyy') }}",
            "{{ range(1000000000000) }}",
            "{{ range(100000)|pprint }}",
            "{{ ([[1, 2]] * 1000000)|tojson(indent=16) }}",
            "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
            "{{ ('x' * 99999999)|reverse }}",
            "{{ ('x' * 99999999)|list|length }}",
            "{{ 'x' * 99999999 in 'y' * 99999999 }}",
            "{{ ('x' * 99999999)|split('')|list|length }}",
            "{{ dict(a=1)|items|list }}{{ ('x ' * 49999999)|split|list|length }}",
        ] {
            std::fs::write(dir.path().join("clinic_abort.md.j2"), template).unwrap();
            let started = std::time::Instant::now();
            let out = t.render("clinic_abort.md.j2", &json!({}));
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "{template}: {:?}",
                started.elapsed()
            );
            if let Ok(text) = out {
                assert!(text.len() <= MAX_OUTPUT_BYTES, "{template}: {}", text.len());
            }
        }
    }

    #[test]
    fn an_override_wins_and_a_broken_one_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let t = Templates::new(Some(dir.path()));
        std::fs::write(dir.path().join("clinic_abort.md.j2"), "custom {{ agent }}").unwrap();
        assert_eq!(
            t.render("clinic_abort.md.j2", &json!({"agent": "a"}))
                .unwrap(),
            "custom a\n"
        );
        std::fs::write(dir.path().join("clinic_abort.md.j2"), "line\n{% if %}").unwrap();
        let (text, err) = t.render_or_builtin("clinic_abort.md.j2", &json!({"agent": "a"}));
        assert!(text.is_ok());
        let err = err.unwrap();
        assert_eq!(
            err.location(),
            ("templates/clinic_abort.md.j2".into(), Some(2))
        );
        assert_eq!(t.check().len(), 1);
    }

    /// A context for every built-in template at once (a missing field renders as nothing),
    /// with `n` items in every list. Item `i`'s fields all carry the marker `⟨i⟩`, so a line
    /// that holds two markers holds two items.
    fn every_list_with(n: usize) -> serde_json::Value {
        let items = |f: &dyn Fn(usize) -> serde_json::Value| -> Vec<serde_json::Value> {
            (1..=n).map(f).collect()
        };
        let words = |what: &str| items(&|i| json!(format!("{what} ⟨{i}⟩")));
        let loops = items(&|i| {
            json!({"id": format!("id⟨{i}⟩"), "text": format!("loop ⟨{i}⟩"),
                   "added": format!("day ⟨{i}⟩"), "stale": i % 2 == 0})
        });
        let calls = items(&|i| {
            json!({"tool": format!("Bash⟨{i}⟩"), "ok": i % 2 == 1, "ts": format!("t⟨{i}⟩"),
                   "error": format!("boom ⟨{i}⟩"), "input": format!("ls ⟨{i}⟩")})
        });
        let numbers: serde_json::Map<String, serde_json::Value> = (1..=n)
            .map(|i| (format!("k⟨{i}⟩"), json!(format!("v⟨{i}⟩"))))
            .collect();
        let ledger = json!({
            "current_task": "the task", "completed": words("done"),
            "in_progress": words("doing"), "next": words("next"), "blocked": words("blocked"),
            "decisions": items(&|i| json!({"text": format!("decided ⟨{i}⟩"), "ts": "t"})),
            "uncertain": words("unsure"), "files": words("file"), "notes": words("note"),
        });
        let ctx = json!({
            "agent": "a", "cli": "claude", "fleet": "f", "date": "2026-11-25",
            "trigger": "crash", "created_at": "now", "ts": "now", "task": "the task",
            "previous": "h0", "last_prompt": "the last prompt", "reason": "why",
            "marker": "===STATE_JSON===", "start": "recovery", "resolve_command": "resolve",
            "state": {"current_task": "the task", "open_loops": loops, "numbers": numbers,
                      "consecutive_errors": n, "last_error": "the error"},
            "ledger": ledger, "text": {},
            "resolved": items(&|i| json!({"id": format!("id⟨{i}⟩"), "reason": format!("why ⟨{i}⟩")})),
            "last_words": words("said"), "events": items(&|i| json!({"event": format!("ev⟨{i}⟩"), "reason": format!("r ⟨{i}⟩"), "ts": "t"})),
        });
        let more = json!({
            "open_loops": loops, "tool_calls": calls, "recent_tools": calls,
            "recent_calls": calls, "findings": items(&|i| json!({"check": format!("c⟨{i}⟩"), "reason": format!("r⟨{i}⟩"), "summary": format!("finding ⟨{i}⟩")})),
            "decision": {"action": "revive", "reason": "stuck"}, "decided_by": "builtin",
            "revivals": 1, "max_revivals": 2, "tool_count": n, "notes": words("note"),
            "numbers": items(&|i| json!({"name": format!("k⟨{i}⟩"), "value": format!("v⟨{i}⟩")})),
            "related": items(&|i| json!({"kind": "handoff", "reference": format!("h⟨{i}⟩"), "snippet": format!("s ⟨{i}⟩")})),
            "handoff": {"id": "h1", "trigger": "crash", "body": "body"},
            "brief": {"text": "brief"},
            "diagnosis": {"root_cause": "unknown", "explanation": "e"},
            "prescription": {"reminder": "remember"}, "attempt": 1, "max_recoveries": 3,
            "trauma": {"agent": {"name": "a", "cli": "claude"}, "original_prompt": "the task",
                       "error_type": "crash", "error_message": "m", "tool_calls": calls,
                       "available_tools": words("tool"), "history_summary": "h"},
            "root_causes": ["a", "b"],
        });
        let mut ctx = ctx;
        ctx.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        ctx
    }

    /// Lines that join items on purpose (`a; b; c`), by their start.
    const INLINE_LISTS: &[&str] = &[
        "Next (from the ledger):",
        "Blocked:",
        "Uncertain:",
        "Numbers:",
        "- latest calls",
        "What went wrong:",
        "Tools that worked:",
        "{",
    ];

    fn markers(line: &str) -> std::collections::BTreeSet<&str> {
        line.match_indices('⟨')
            .filter_map(|(at, _)| Some(&line[at..at + line[at..].find('⟩')?]))
            .collect()
    }

    /// The model reads these texts: every list item on a line of its own whatever the
    /// number of items, no heading glued to the line before, no item lost.
    #[test]
    fn every_builtin_template_puts_each_item_on_its_own_line() {
        let t = Templates::new(None);
        for name in builtin_names() {
            for n in [0, 1, 3] {
                let text = t.render(name, &every_list_with(n)).unwrap();
                let mut seen = std::collections::BTreeSet::new();
                for line in text.lines() {
                    let found = markers(line);
                    seen.extend(found.iter().map(|m| m.to_string()));
                    if found.len() > 1 {
                        assert!(
                            INLINE_LISTS.iter().any(|p| line.starts_with(p)),
                            "{name} with {n} items: two items on one line: {line:?}\n{text}"
                        );
                    }
                    assert!(
                        line.find("##").is_none_or(|at| at == 0),
                        "{name} with {n} items: a heading inside a line: {line:?}\n{text}"
                    );
                }
                if n == 0 {
                    assert!(seen.is_empty(), "{name}: {seen:?}");
                }
                if n == 3 && !seen.is_empty() {
                    for i in 1..=3 {
                        assert!(
                            seen.contains(&format!("⟨{i}")),
                            "{name}: item {i} lost\n{text}"
                        );
                    }
                }
            }
        }
    }

    /// The handoff exactly, as the next session reads it, with 0, 1 and 3 items per list.
    #[test]
    fn the_handoff_renders_lists_of_zero_one_and_three_items_line_by_line() {
        let t = Templates::new(None);
        let render = |n| t.render("handoff.md.j2", &every_list_with(n)).unwrap();
        assert_eq!(
            render(0),
            "# Handoff: the task\n\nagent `a` (claude), crash, now; follows h0\n\n\
             ## Last request\nthe last prompt\n"
        );
        assert_eq!(
            render(1),
            "# Handoff: the task\n\nagent `a` (claude), crash, now; follows h0\n\n\
             ## Summary\nnote ⟨1⟩\n\n## Completed\n- done ⟨1⟩\n\n## In progress\n- doing ⟨1⟩\n\n\
             ## Next steps\n- next ⟨1⟩\n\n## Blocked\n- blocked ⟨1⟩\n\n\
             ## Key decisions\n- decided ⟨1⟩\n\n## Uncertain (verify)\n- unsure ⟨1⟩\n\n\
             ## Files\n- file ⟨1⟩\n\n## Open loops\n- [id⟨1⟩] loop ⟨1⟩\n\n\
             ## Last request\nthe last prompt\n\n## Last words of the session\n> said ⟨1⟩\n\n\
             ## Last tool calls\n- Bash⟨1⟩: ok\n"
        );
        assert_eq!(
            render(3),
            "# Handoff: the task\n\nagent `a` (claude), crash, now; follows h0\n\n\
             ## Summary\nnote ⟨1⟩\nnote ⟨2⟩\nnote ⟨3⟩\n\n\
             ## Completed\n- done ⟨1⟩\n- done ⟨2⟩\n- done ⟨3⟩\n\n\
             ## In progress\n- doing ⟨1⟩\n- doing ⟨2⟩\n- doing ⟨3⟩\n\n\
             ## Next steps\n- next ⟨1⟩\n- next ⟨2⟩\n- next ⟨3⟩\n\n\
             ## Blocked\n- blocked ⟨1⟩\n- blocked ⟨2⟩\n- blocked ⟨3⟩\n\n\
             ## Key decisions\n- decided ⟨1⟩\n- decided ⟨2⟩\n- decided ⟨3⟩\n\n\
             ## Uncertain (verify)\n- unsure ⟨1⟩\n- unsure ⟨2⟩\n- unsure ⟨3⟩\n\n\
             ## Files\n- file ⟨1⟩\n- file ⟨2⟩\n- file ⟨3⟩\n\n\
             ## Open loops\n- [id⟨1⟩] loop ⟨1⟩\n- [id⟨2⟩] loop ⟨2⟩ (stale)\n- [id⟨3⟩] loop ⟨3⟩\n\n\
             ## Last request\nthe last prompt\n\n\
             ## Last words of the session\n> said ⟨1⟩\n\n> said ⟨2⟩\n\n> said ⟨3⟩\n\n\
             ## Last tool calls\n- Bash⟨1⟩: ok\n- Bash⟨2⟩: failed (boom ⟨2⟩)\n- Bash⟨3⟩: ok\n"
        );
    }

    /// With trim_blocks a block tag eats the newline after it, so a line of text that ends
    /// in `{% endif %}` runs into the next line; such a tag needs `+%}`.
    #[test]
    fn no_builtin_template_line_of_text_ends_in_a_newline_eating_tag() {
        for (name, text) in EMBEDDED {
            for (at, line) in text.lines().enumerate() {
                let line = line.trim_end();
                if !line.ends_with("%}") || line.ends_with("+%}") || line.ends_with("-%}") {
                    continue;
                }
                let mut rest = line.to_string();
                while let Some(start) = rest.find("{%") {
                    let end = rest[start..]
                        .find("%}")
                        .map_or(rest.len(), |e| start + e + 2);
                    rest.replace_range(start..end, "");
                }
                assert!(
                    rest.trim().is_empty(),
                    "templates/{name}:{}: a line of text ends in a block tag without `+%}}`: {line}",
                    at + 1
                );
            }
        }
    }

    #[test]
    fn unknown_templates_are_named() {
        let e = Templates::new(None)
            .render("nope.j2", &json!({}))
            .unwrap_err();
        assert!(e.to_string().contains("no template `nope.j2`"), "{e}");
    }
}
