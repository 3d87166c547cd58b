//! `phoenix schema`: the JSON Schema of phoenix.toml for editors, generated from the raw spec
//! types that `validate` reads, so the schema accepts exactly the keys phoenix does.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::raw::RawSpec;

/// The schema as JSON (draft 2020-12).
pub fn json_schema() -> Value {
    let mut schema = schemars::schema_for!(RawSpec).to_value();
    if let Some(root) = schema.as_object_mut() {
        root.insert("title".into(), "phoenix.toml".into());
        root.insert(
            "description".into(),
            "The fleet phoenix keeps alive: `phoenix validate` checks the values in full.".into(),
        );
    }
    schema
}

/// Every key path the schema (and so `validate`) accepts, e.g. `fleet.name`,
/// `agent.restart.cooldown`. `[defaults]` and `[agent_set.template]` take the keys of
/// `[[agent]]`, so their paths are spelt `agent.…`; free-form tables (`env`, `screen_patterns`) end a path.
pub fn key_paths(schema: &Value) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    if let Some(props) = properties(schema, schema) {
        walk(schema, props, "", &mut paths);
    }
    paths
}

fn walk(root: &Value, props: &Map<String, Value>, prefix: &str, out: &mut BTreeSet<String>) {
    for (key, node) in props {
        let path = key_path(prefix, key);
        match properties(root, node) {
            Some(children) => walk(root, children, &path, out),
            None => {
                out.insert(path);
            }
        }
    }
}

/// `key` below `prefix`, with `[defaults]` spelt as the `[[agent]]` whose keys it takes.
fn key_path(prefix: &str, key: &str) -> String {
    match (prefix, key) {
        ("", "defaults") => "agent".to_string(),
        // `[agent_set.template]` takes the keys of [[agent]] too.
        ("agent_set", "template") => "agent".to_string(),
        ("", key) => key.to_string(),
        (prefix, key) => format!("{prefix}.{key}"),
    }
}

/// The `properties` of the object `node` describes, through `$ref`, `anyOf`/`oneOf` (an
/// optional table) and `items` (an array of tables). `None` for a value or a free-form table.
fn properties<'a>(root: &'a Value, node: &'a Value) -> Option<&'a Map<String, Value>> {
    if let Some(r) = node.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))?;
        return properties(root, target);
    }
    if let Some(p) = node.get("properties").and_then(Value::as_object) {
        return Some(p);
    }
    for alternatives in ["anyOf", "oneOf"] {
        if let Some(list) = node.get(alternatives).and_then(Value::as_array) {
            return list.iter().find_map(|n| properties(root, n));
        }
    }
    node.get("items").and_then(|n| properties(root, n))
}

/// The key paths written in a TOML document, spelt as [`key_paths`] spells them (stopping
/// where the schema has no more keys, inside `env` and the like).
pub fn document_paths(doc: &toml::Table, schema: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(props) = properties(schema, schema) {
        table_paths(schema, props, doc, "", &mut out);
    }
    out
}

fn table_paths(
    root: &Value,
    props: &Map<String, Value>,
    table: &toml::Table,
    prefix: &str,
    out: &mut BTreeSet<String>,
) {
    for (key, value) in table {
        let path = key_path(prefix, key);
        let children = props.get(key).and_then(|n| properties(root, n));
        let tables: Vec<&toml::Table> = match value {
            toml::Value::Table(t) => vec![t],
            toml::Value::Array(items) => items.iter().filter_map(|v| v.as_table()).collect(),
            _ => Vec::new(),
        };
        match children {
            Some(children) if !tables.is_empty() => {
                for t in tables {
                    table_paths(root, children, t, &path, out);
                }
            }
            _ => {
                out.insert(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../phoenix.toml.example");

    /// The example with its commented-out keys (`# workdir = "~/src"`) and tables switched
    /// on: those document keys too. The socket's `<hash>` placeholder is what `phoenix init` fills in.
    fn example_with_every_key() -> String {
        EXAMPLE
            .replace("phoenix-research-<hash>", "phoenix-research-0123abcd")
            .lines()
            .map(|line| {
                let rest = line.strip_prefix("# ").unwrap_or(line);
                let is_key = rest != line
                    && rest.split_once(" = ").is_some_and(|(k, _)| {
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    });
                // A commented-out table (`# [[host]]`) is switched on with its keys.
                let is_table = rest != line && rest.starts_with('[') && rest.ends_with(']');
                if is_key || is_table { rest } else { line }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_example_and_validate_know_the_same_keys() {
        let schema = json_schema();
        let accepted = key_paths(&schema);
        assert!(
            accepted.contains("fleet.reconcile_interval"),
            "{accepted:?}"
        );
        assert!(accepted.contains("agent.restart.cooldown"), "{accepted:?}");
        assert!(accepted.contains("notify.webhook.retries"), "{accepted:?}");
        let doc: toml::Table = toml::from_str(&example_with_every_key()).unwrap();
        let written = document_paths(&doc, &schema);
        let missing: Vec<_> = accepted.difference(&written).collect();
        let unknown: Vec<_> = written.difference(&accepted).collect();
        assert!(
            missing.is_empty(),
            "keys validate accepts but phoenix.toml.example does not show: {missing:?}"
        );
        assert!(
            unknown.is_empty(),
            "keys in phoenix.toml.example that validate does not accept: {unknown:?}"
        );
    }

    #[test]
    fn validate_accepts_the_example_with_every_key_switched_on() {
        for source in [EXAMPLE.to_string(), example_with_every_key()] {
            let spec = super::super::parse(
                &source,
                std::path::Path::new("/srv/fleet/phoenix.toml"),
                super::super::LoadOptions {
                    check_filesystem: false,
                },
            )
            .unwrap_or_else(|e| panic!("{e}"));
            assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
        }
    }

    #[test]
    fn the_example_validates_against_the_schema() {
        let schema = json_schema();
        for source in [EXAMPLE.to_string(), example_with_every_key()] {
            let doc: Value = toml::from_str(&source).unwrap();
            let errors = super::super::schema_check::schema_errors(&schema, &doc);
            assert!(errors.is_empty(), "{errors:#?}");
        }
        // And the schema does catch what validate catches first: a misspelt key, a count
        // written as a string.
        let bad: Value = toml::from_str(
            "[thresholds]\nsilense = \"10m\"\n[defaults.restart]\nmax_crashes = \"5\"\n",
        )
        .unwrap();
        let errors = super::super::schema_check::schema_errors(&schema, &bad);
        assert_eq!(errors.len(), 2, "{errors:#?}");
    }

    #[test]
    fn every_key_is_in_the_configuration_reference() {
        let reference = include_str!("../../docs/configuration.md");
        // Each section's keys are listed under a heading naming the section.
        let mut missing = Vec::new();
        for path in key_paths(&json_schema()) {
            let (section, key) = path.rsplit_once('.').unwrap_or(("", &path));
            let heading = if section.is_empty() {
                "## Top level".to_string()
            } else {
                format!("[{section}]")
            };
            let body = reference.split("\n## ").find(|s| {
                s.lines().next().is_some_and(|h| {
                    h.contains(&heading) || (section.is_empty() && h.starts_with("Top level"))
                })
            });
            if !body.is_some_and(|b| b.contains(&format!("| `{key}` |"))) {
                missing.push(path);
            }
        }
        assert!(
            missing.is_empty(),
            "docs/configuration.md lacks {missing:?}"
        );
    }
}
