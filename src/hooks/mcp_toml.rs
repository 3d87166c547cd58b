//! phoenix's MCP server entry in a CLI config that is TOML (Codex CLI's project
//! `<workdir>/.codex/config.toml`: `[mcp_servers.phoenix]`), merged into the user's file and
//! removed again. The text is edited as a document, never rewritten: the user's servers, other
//! settings, comments and layout stay. Pure.

use serde_json::Value;

use super::config::MCP_SERVER;
use crate::agent_cli::first_line;

/// The table of MCP servers in Codex's config.
pub const SERVERS: &str = "mcp_servers";

/// phoenix's entry (`desired`'s `mcpServers.phoenix`: `command` and `args`) merged into
/// `existing`, or removed from it when `desired` has none. Keys the user added to phoenix's
/// table (`tool_timeout_sec`, `env`) stay while it is installed and go with it. Returns the
/// new text; `None` when nothing is left in the file (it can go). The result is parsed back and
/// must equal the old config with exactly this change, or the user is asked to make it.
pub fn merge(existing: Option<&str>, desired: Option<&Value>) -> Result<Option<String>, String> {
    let text = existing.unwrap_or("");
    let before: toml::Table = toml::from_str(text).map_err(|e| invalid(&e))?;
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| invalid(&e))?;
    let wanted = desired
        .and_then(|d| d.get("mcpServers"))
        .and_then(|s| s.get(MCP_SERVER));
    let mut expected = before.clone();
    match wanted {
        Some(entry) => {
            let fields = fields_of(entry)?;
            set(&mut doc, &fields)?;
            let servers = expected
                .entry(SERVERS)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let ours = servers
                .as_table_mut()
                .ok_or_else(not_a_table)?
                .entry(MCP_SERVER)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .ok_or_else(|| format!("has `{SERVERS}.{MCP_SERVER}` that is not a table"))?;
            for (key, value) in &fields {
                ours.insert((*key).to_string(), toml_value(value));
            }
        }
        None => {
            remove(&mut doc);
            if let Some(toml::Value::Table(servers)) = expected.get_mut(SERVERS)
                && servers.remove(MCP_SERVER).is_some()
                && servers.is_empty()
            {
                expected.remove(SERVERS);
            }
        }
    }
    let after_text = doc.to_string();
    let after: Result<toml::Table, _> = toml::from_str(&after_text);
    if after.as_ref().ok() != Some(&expected) {
        let entry = wanted.map(fields_of).transpose()?.unwrap_or_default();
        return Err(format!(
            "cannot take phoenix's `[{SERVERS}.{MCP_SERVER}]` {} without rewriting the file; {}",
            if wanted.is_some() { "in" } else { "out" },
            if wanted.is_some() {
                format!("add it yourself:\n{}", shown(&entry))
            } else {
                format!("remove `[{SERVERS}.{MCP_SERVER}]` yourself")
            }
        ));
    }
    if expected.is_empty() && after_text.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(after_text))
}

fn invalid(e: &impl std::fmt::Display) -> String {
    format!(
        "is not valid TOML ({}); fix it and phoenix will merge into it",
        first_line(e)
    )
}

fn not_a_table() -> String {
    format!("has a `{SERVERS}` key that is not a table")
}

/// The entry's keys as TOML values: strings and lists of strings (`command`, `args`).
fn fields_of(entry: &Value) -> Result<Vec<(&str, toml_edit::Value)>, String> {
    let obj = entry
        .as_object()
        .ok_or("phoenix's MCP server entry is not an object")?;
    obj.iter()
        .map(|(key, value)| {
            let value = match value {
                Value::String(s) => toml_edit::Value::from(s.as_str()),
                Value::Array(list) => list
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<toml_edit::Array>>()
                    .map(toml_edit::Value::Array)
                    .ok_or_else(|| format!("`{key}` of phoenix's MCP server is not strings"))?,
                other => return Err(format!("`{key}` of phoenix's MCP server is {other}")),
            };
            Ok((key.as_str(), value))
        })
        .collect()
}

/// The same value for the `toml` crate's tables (what the result is checked against).
fn toml_value(value: &toml_edit::Value) -> toml::Value {
    match value {
        toml_edit::Value::Array(list) => toml::Value::Array(list.iter().map(toml_value).collect()),
        other => toml::Value::String(other.as_str().unwrap_or_default().to_string()),
    }
}

/// `[mcp_servers.phoenix]` with these fields: a value already equal is left as it is written,
/// one that differs is replaced in place with its comments, a missing one is added.
fn set(
    doc: &mut toml_edit::DocumentMut,
    fields: &[(&str, toml_edit::Value)],
) -> Result<(), String> {
    let root = doc.as_table_mut();
    if !root.contains_key(SERVERS) {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        root.insert(SERVERS, toml_edit::Item::Table(t));
    }
    let servers = root
        .get_mut(SERVERS)
        .and_then(toml_edit::Item::as_table_like_mut)
        .ok_or_else(not_a_table)?;
    if !servers.contains_key(MCP_SERVER) {
        servers.insert(MCP_SERVER, toml_edit::Item::Table(toml_edit::Table::new()));
    }
    let ours = servers
        .get_mut(MCP_SERVER)
        .and_then(toml_edit::Item::as_table_like_mut)
        .ok_or_else(|| format!("has `{SERVERS}.{MCP_SERVER}` that is not a table"))?;
    for (key, value) in fields {
        match ours.get_mut(key).and_then(toml_edit::Item::as_value_mut) {
            Some(old) if toml_value(old) == toml_value(value) => {}
            Some(old) => {
                let decor = old.decor().clone();
                *old = value.clone();
                *old.decor_mut() = decor;
            }
            None => {
                ours.insert(key, toml_edit::Item::Value(value.clone()));
            }
        }
    }
    Ok(())
}

/// `[mcp_servers.phoenix]` out, and `mcp_servers` with it when nothing else is in it.
fn remove(doc: &mut toml_edit::DocumentMut) {
    let root = doc.as_table_mut();
    let Some(servers) = root
        .get_mut(SERVERS)
        .and_then(toml_edit::Item::as_table_like_mut)
    else {
        return;
    };
    if servers.remove(MCP_SERVER).is_some() && servers.is_empty() {
        root.remove(SERVERS);
    }
}

/// The entry as the user would write it.
fn shown(fields: &[(&str, toml_edit::Value)]) -> String {
    let mut text = format!("[{SERVERS}.{MCP_SERVER}]\n");
    for (key, value) in fields {
        text.push_str(&format!("{key} = {}\n", value.to_string().trim()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn desired() -> Value {
        json!({"mcpServers": {"phoenix": {
            "command": "/opt/phoenix bin/phoenix",
            "args": ["--config", "/srv/it's/phoenix.toml", "mcp"],
        }}})
    }

    const USER: &str = r#"# my Codex settings
model = "o4-mini"   # the cheap one

[mcp_servers.db]
command = "db-mcp"
args = ["--port", "5432"]

[profiles.fast]
model = "gpt-5"
"#;

    #[test]
    fn merge_keeps_the_users_file_as_written_and_is_idempotent() {
        let once = merge(Some(USER), Some(&desired())).unwrap().unwrap();
        // Beside the user's servers, the user's text untouched around it.
        let ours = "[mcp_servers.phoenix]\ncommand = \"/opt/phoenix bin/phoenix\"\n\
                    args = [\"--config\", \"/srv/it's/phoenix.toml\", \"mcp\"]\n\n";
        assert_eq!(
            once,
            USER.replace("[profiles.fast]", &format!("{ours}[profiles.fast]"))
        );
        let table: toml::Table = toml::from_str(&once).unwrap();
        let ours = &table["mcp_servers"]["phoenix"];
        assert_eq!(ours["command"].as_str(), Some("/opt/phoenix bin/phoenix"));
        assert_eq!(ours["args"].as_array().unwrap().len(), 3, "{once}");
        assert_eq!(
            table["mcp_servers"]["db"]["command"].as_str(),
            Some("db-mcp")
        );
        let twice = merge(Some(&once), Some(&desired())).unwrap().unwrap();
        assert_eq!(twice, once);
    }

    #[test]
    fn a_new_file_holds_only_phoenixs_table_and_goes_on_removal() {
        let created = merge(None, Some(&desired())).unwrap().unwrap();
        assert!(created.starts_with("[mcp_servers.phoenix]\n"), "{created}");
        assert!(!created.contains("[mcp_servers]\n"), "{created}");
        assert_eq!(merge(Some(&created), None).unwrap(), None);
        assert_eq!(merge(None, None).unwrap(), None);
    }

    #[test]
    fn removal_takes_out_phoenixs_entry_alone() {
        let installed = merge(Some(USER), Some(&desired())).unwrap().unwrap();
        let removed = merge(Some(&installed), None).unwrap().unwrap();
        assert_eq!(removed, USER);
        // Only phoenix's server: `mcp_servers` goes with it, the rest stays.
        let alone = "model = \"o4-mini\"\n\n[mcp_servers.phoenix]\ncommand = \"phoenix\"\n";
        assert_eq!(
            merge(Some(alone), None).unwrap().unwrap(),
            "model = \"o4-mini\"\n"
        );
        // Nothing of phoenix's: nothing changes.
        assert_eq!(merge(Some(USER), None).unwrap().unwrap(), USER);
    }

    #[test]
    fn a_moved_binary_is_replaced_in_place_and_the_users_keys_in_our_table_stay() {
        let old = "[mcp_servers.phoenix]\ncommand = \"/old/phoenix\" # moved\nargs = [\"--config\", \"/srv/it's/phoenix.toml\", \"mcp\"]\ntool_timeout_sec = 3600\n\n[mcp_servers.db]\ncommand = \"db-mcp\"\n";
        let new = merge(Some(old), Some(&desired())).unwrap().unwrap();
        assert_eq!(
            new,
            old.replace("\"/old/phoenix\"", "\"/opt/phoenix bin/phoenix\""),
            "only the command changed"
        );
    }

    #[test]
    fn inline_and_dotted_servers_are_merged_too() {
        let inline = "mcp_servers = { db = { command = \"db-mcp\" } }\n";
        let merged = merge(Some(inline), Some(&desired())).unwrap().unwrap();
        let table: toml::Table = toml::from_str(&merged).unwrap();
        assert!(
            table["mcp_servers"]["phoenix"]["command"].is_str(),
            "{merged}"
        );
        assert_eq!(merge(Some(&merged), None).unwrap().unwrap(), inline);
        let dotted = "mcp_servers.db.command = \"db-mcp\"\n";
        let merged = merge(Some(dotted), Some(&desired())).unwrap().unwrap();
        let table: toml::Table = toml::from_str(&merged).unwrap();
        assert!(
            table["mcp_servers"]["phoenix"]["command"].is_str(),
            "{merged}"
        );
    }

    #[test]
    fn a_file_phoenix_cannot_merge_into_is_reported() {
        for (text, says) in [
            ("model = ", "is not valid TOML"),
            ("mcp_servers = 5\n", "not a table"),
            ("[mcp_servers]\nphoenix = \"x\"\n", "not a table"),
        ] {
            let e = merge(Some(text), Some(&desired())).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(merge(Some("x = ["), None).unwrap_err().contains("TOML"));
    }
}
