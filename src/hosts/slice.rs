//! A host's slice of phoenix.toml: the operator's file as it is (comments, defaults,
//! thresholds, policies, schedules), with only that host's agents and without what means
//! something on the operator's machine only (the `[[host]]` table, the state directory, the
//! tmux socket, the ssh config). The host's own phoenix runs it like any phoenix.toml.

use toml_edit::{DocumentMut, Item};

/// Keys of `[fleet]` that name places on the operator's machine: on a host they take their
/// defaults, inside the host's `dir`.
const OPERATOR_ONLY_FLEET_KEYS: [&str; 3] = ["state_dir", "tmux_socket", "ssh_config"];

/// The slice of `source` (a phoenix.toml that already validated) for `host`; `tmux_socket`
/// is the host's own (`[[host]] tmux_socket`), if it names one.
pub fn for_host(
    source: &str,
    host: &str,
    tmux_socket: Option<&str>,
) -> Result<String, toml_edit::TomlError> {
    let mut doc: DocumentMut = source.parse()?;
    doc.remove("host");
    if let Some(fleet) = doc.get_mut("fleet").and_then(Item::as_table_like_mut) {
        for key in OPERATOR_ONLY_FLEET_KEYS {
            fleet.remove(key);
        }
    }
    if let Some(socket) = tmux_socket {
        doc["fleet"]["tmux_socket"] = toml_edit::value(socket);
    }
    if let Some(agents) = doc.get_mut("agent").and_then(Item::as_array_of_tables_mut) {
        agents.retain(|agent| agent.get("host").and_then(Item::as_str) == Some(host));
        for agent in agents.iter_mut() {
            agent.remove("host");
        }
        if agents.is_empty() {
            doc.remove("agent");
        }
    }
    Ok(doc.to_string())
}

/// `source` with agent `agent` declared on `host` (`None`: this machine), everything else
/// as written: how `phoenix move` records a move in phoenix.toml. `None` when no `[[agent]]`
/// has that name.
pub fn with_host(
    source: &str,
    agent: &str,
    host: Option<&str>,
) -> Result<Option<String>, toml_edit::TomlError> {
    let mut doc: DocumentMut = source.parse()?;
    let Some(agents) = doc.get_mut("agent").and_then(Item::as_array_of_tables_mut) else {
        return Ok(None);
    };
    let Some(table) = agents
        .iter_mut()
        .find(|a| a.get("name").and_then(Item::as_str) == Some(agent))
    else {
        return Ok(None);
    };
    match host {
        Some(host) => {
            table["host"] = toml_edit::value(host);
        }
        None => {
            table.remove("host");
        }
    }
    Ok(Some(doc.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"# the research fleet
[fleet]
name = "research"
state_dir = "/home/op/.phoenix"
tmux_socket = "ops"

[thresholds]
silence = "5m"   # a comment that stays

[[host]]
name = "gpu-1"
ssh = "deploy@gpu-1"

[[agent]]
name = "local"
command = "demo"

[[agent]]
name = "trades"
host = "gpu-1"
command = "claude --model opus"

[[agent]]
name = "other"
host = "gpu-2"
"#;

    #[test]
    fn a_slice_keeps_its_hosts_agents_and_the_shared_settings_only() {
        let slice = for_host(SOURCE, "gpu-1", None).unwrap();
        assert!(slice.contains("name = \"trades\""), "{slice}");
        assert!(
            slice.contains("command = \"claude --model opus\""),
            "{slice}"
        );
        assert!(
            slice.contains("silence = \"5m\"   # a comment that stays"),
            "{slice}"
        );
        assert!(slice.contains("name = \"research\""), "{slice}");
        for gone in [
            "\"local\"",
            "\"other\"",
            "[[host]]",
            "host =",
            "state_dir",
            "tmux_socket",
        ] {
            assert!(!slice.contains(gone), "{gone} in {slice}");
        }
    }

    #[test]
    fn a_host_without_agents_gets_a_fleet_without_agents() {
        let slice = for_host(SOURCE, "gpu-9", Some("phx-9")).unwrap();
        assert!(!slice.contains("[[agent]]"), "{slice}");
        assert!(slice.contains("[thresholds]"), "{slice}");
        assert!(slice.contains("tmux_socket = \"phx-9\""), "{slice}");
        // A file without [fleet] gets one for the host's socket.
        let bare = for_host("[[agent]]\nname = \"a\"\nhost = \"h\"\n", "h", Some("s")).unwrap();
        let doc: toml::Table = toml::from_str(&bare).unwrap();
        assert_eq!(doc["fleet"]["tmux_socket"].as_str(), Some("s"), "{bare}");
        assert!(doc["agent"][0].get("host").is_none(), "{bare}");
    }

    #[test]
    fn a_workspace_survives_the_slice_and_names_a_repo_on_the_host() {
        let source = "[defaults]\nworkspace = { repo = \"~/src/app\", base = \"main\" }\n\n\
                      [[host]]\nname = \"gpu-1\"\nssh = \"deploy@gpu-1\"\n\n\
                      [[agent]]\nname = \"auth\"\nhost = \"gpu-1\"\ncommand = \"x\"\n\
                      workspace = { repo = \"~/src/api\", branch = \"agent/{name}\", worktrees = \"/srv/wt\" }\n\n\
                      [[agent]]\nname = \"ui\"\nhost = \"gpu-1\"\ncommand = \"x\"\n";
        let operator = crate::spec::parse(
            source,
            std::path::Path::new("/home/op/fleet/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        assert!(operator.agents.is_empty(), "both run on the host");
        let slice = for_host(source, "gpu-1", None).unwrap();
        // The host reads its slice as its own phoenix.toml: `~` is the host user's home.
        let host = crate::spec::parse(
            &slice,
            std::path::Path::new("/home/deploy/.phoenix-hosts/f/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        let home = std::path::PathBuf::from(std::env::var("HOME").unwrap());
        let auth = host.agent("auth").unwrap().workspace.clone().unwrap();
        assert_eq!(auth.repo, home.join("src/api"));
        assert_eq!(auth.branch, "agent/auth");
        assert_eq!(auth.path, std::path::Path::new("/srv/wt/auth"));
        assert_eq!(host.agent("auth").unwrap().workdir, auth.path);
        // The `[defaults]` workspace travels too.
        let ui = host.agent("ui").unwrap().workspace.clone().unwrap();
        assert_eq!(ui.repo, home.join("src/app"));
        assert_eq!(ui.base.as_deref(), Some("main"));
        assert_eq!(ui.path, home.join("src/app/.worktrees/ui"));
    }

    #[test]
    fn a_move_rewrites_only_the_agents_host() {
        let moved = with_host(SOURCE, "trades", Some("gpu-2")).unwrap().unwrap();
        assert!(
            moved.contains("name = \"trades\"\nhost = \"gpu-2\""),
            "{moved}"
        );
        assert!(moved.contains("silence = \"5m\"   # a comment that stays"));
        assert!(
            for_host(&moved, "gpu-2", None)
                .unwrap()
                .contains("\"trades\"")
        );
        let home = with_host(&moved, "trades", None).unwrap().unwrap();
        assert!(
            !for_host(&home, "gpu-2", None)
                .unwrap()
                .contains("\"trades\"")
        );
        assert!(
            !for_host(&home, "gpu-1", None)
                .unwrap()
                .contains("\"trades\"")
        );
        let local = with_host(SOURCE, "local", Some("gpu-1")).unwrap().unwrap();
        assert!(
            for_host(&local, "gpu-1", None)
                .unwrap()
                .contains("\"local\"")
        );
        assert_eq!(with_host(SOURCE, "nobody", None).unwrap(), None);
    }
}
