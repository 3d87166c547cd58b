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
            Error::Template { source, .. } if source.kind() == ErrorKind::OutOfFuel => format!(
                "{}: the template does more work than one render may ({FUEL} fuel); look for nested loops over large ranges",
                source.kind()
            ),
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

    /// `templates/` next to phoenix.toml.
    pub fn for_spec(spec: &crate::spec::Spec) -> Templates {
        Templates::new(Some(&spec.dir.join("templates")))
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

fn environment<'a>() -> minijinja::Environment<'a> {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(FUEL));
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
            assert!(
                started.elapsed() < std::time::Duration::from_secs(1),
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

    #[test]
    fn unknown_templates_are_named() {
        let e = Templates::new(None)
            .render("nope.j2", &json!({}))
            .unwrap_err();
        assert!(e.to_string().contains("no template `nope.j2`"), "{e}");
    }
}
