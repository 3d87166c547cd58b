//! `phoenix init`: scaffold phoenix.toml, policies/ and templates/ without clobbering.

use std::path::Path;

use anyhow::Context;

use super::out;

const EXAMPLE: &str = include_str!("../../phoenix.toml.example");

/// The example's socket line shows a placeholder; `init` fills in the fleet's own default.
const SOCKET_PLACEHOLDER: &str = "phoenix-research-<hash>";

/// The example, with the tmux socket this file will get by default spelled out: a unique
/// server per project, not one shared name.
fn example_for(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let id = crate::spec::fleet_id("research", &dir.join("phoenix.toml"));
    EXAMPLE.replace(SOCKET_PLACEHOLDER, &format!("phoenix-{id}"))
}

const POLICIES_README: &str = include_str!("../../policies/README.md");

const TEMPLATES_README: &str = "\
# templates/

Every text phoenix writes for people or agents (brief, handoff, startup context,
investigation report) is a minijinja template. Defaults ship inside the binary; a file here
with the same name overrides the default.
";

/// Which agent the minimal config declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Starter {
    Claude,
    Codex,
    Gemini,
    /// phoenix's own demo agent: runs on any machine, no account needed.
    Custom,
}

/// A fleet name from the directory's: two projects side by side get two service units.
fn fleet_name(dir: &Path) -> String {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().to_lowercase()))
        .unwrap_or_default();
    let name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-');
    if crate::spec::valid_name(name) && name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name.to_string()
    } else {
        "fleet".to_string()
    }
}

/// The smallest phoenix.toml that runs: one agent of `starter`, every other key at its default
/// (the reference, phoenix.toml.example, has them all).
pub fn minimal(dir: &Path, starter: Starter) -> String {
    let (name, cli, command, note) = match starter {
        Starter::Custom => (
            "demo",
            "custom",
            "phoenix demo-agent",
            "# phoenix's demo agent runs anywhere; replace it with your own CLI (`cli = \"custom\"`\n\
             # takes any command; `resume_command` tells phoenix how to resume a session).\n",
        ),
        Starter::Claude => (
            "claude",
            "claude",
            "claude",
            "# Needs Claude Code (`claude`) on PATH, logged in. phoenix adds the resume flags.\n",
        ),
        Starter::Codex => (
            "codex",
            "codex",
            "codex",
            "# Needs the Codex CLI (`codex`) on PATH, logged in. phoenix adds the resume flags.\n",
        ),
        Starter::Gemini => (
            "gemini",
            "gemini",
            "gemini",
            "# Needs the Gemini CLI (`gemini`) on PATH, logged in. phoenix adds the resume flags.\n",
        ),
    };
    format!(
        "# phoenix.toml: the fleet phoenix keeps alive. A minimal start; every key, with its\n\
         # default, is in phoenix.toml.example.\n\
         # Next: `phoenix validate`, `phoenix plan`, `phoenix apply`, `phoenix status`.\n\n\
         [fleet]\nname = \"{fleet}\"\n\n\
         {note}[[agent]]\nname = \"{name}\"\ncli = \"{cli}\"\ncommand = \"{command}\"\nworkdir = \".\"\n",
        fleet = fleet_name(dir),
    )
}

/// `phoenix init`: `config` (phoenix.toml by default) with one agent of `starter`, and beside
/// it the full reference, policies/ and templates/.
pub fn init(config: &Path, starter: Starter, force: bool, json: bool) -> anyhow::Result<i32> {
    let cwd = std::env::current_dir()?;
    let config = cwd.join(config);
    let dir = config.parent().unwrap_or(&cwd);
    if config.is_dir() {
        anyhow::bail!(
            "`{}` is a directory: name the file to write (`phoenix init -c {}/phoenix.toml`)",
            config.display(),
            config.display()
        );
    }
    let config_name = config
        .strip_prefix(dir)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| config.display().to_string());
    let config_text = minimal(dir, starter);
    // The default policies stay in the binary (a copy here would pin them forever); the
    // fixtures are examples to run them with.
    let fixtures: Vec<(String, &str)> = crate::policy::fixture::EMBEDDED
        .iter()
        .map(|(name, text)| (format!("policies/fixtures/{name}"), *text))
        .collect();
    let example = example_for(dir);
    let mut files: Vec<(&str, &str)> = vec![
        (&config_name, &config_text),
        ("phoenix.toml.example", &example),
        ("policies/README.md", POLICIES_README),
        ("templates/README.md", TEMPLATES_README),
    ];
    files.extend(fixtures.iter().map(|(n, t)| (n.as_str(), *t)));
    let existing: Vec<&str> = files
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| dir.join(name).exists())
        .collect();
    if !existing.is_empty() && !force {
        anyhow::bail!(
            "{} already exist{} in {}; nothing was written (use --force to overwrite)",
            existing.join(", "),
            if existing.len() == 1 { "s" } else { "" },
            dir.display()
        );
    }
    for &(name, content) in &files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, content)
            .with_context(|| format!("cannot write {}", path.display()))?;
        if !json {
            out(&format!("created {name}\n"));
        }
    }
    let flag = if config_name == crate::spec::DEFAULT_CONFIG && dir == cwd {
        String::new()
    } else {
        format!(" -c {}", config.display())
    };
    if json {
        let created: Vec<String> = files
            .iter()
            .map(|(name, _)| dir.join(name).display().to_string())
            .collect();
        super::output::json(serde_json::json!({
            "ok": true,
            "config": config,
            "created": created,
            "overwritten": existing.iter().map(|n| dir.join(n)).collect::<Vec<_>>(),
            "next": format!("phoenix{flag} plan"),
        }));
        return Ok(0);
    }
    out(&format!(
        "\nNext: `phoenix{flag} plan`, then `phoenix{flag} apply` (the reference for every key: phoenix.toml.example).\n"
    ));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaffold_names_its_own_derived_socket() {
        assert!(EXAMPLE.contains(SOCKET_PLACEHOLDER));
        assert!(EXAMPLE.contains("name = \"research\""));
        let one = example_for(Path::new("/srv/one"));
        let two = example_for(Path::new("/srv/two"));
        assert!(!one.contains(SOCKET_PLACEHOLDER));
        assert_ne!(one, two);
        let spec = crate::spec::parse(
            &one,
            Path::new("/srv/one/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        assert!(one.contains(&format!("\"{}\"", spec.fleet.socket)));
    }

    #[test]
    fn every_minimal_config_is_valid() {
        for starter in [
            Starter::Custom,
            Starter::Claude,
            Starter::Codex,
            Starter::Gemini,
        ] {
            let text = minimal(Path::new("/nonexistent/My Project"), starter);
            let spec = crate::spec::parse(
                &text,
                Path::new("/srv/one/phoenix.toml"),
                crate::spec::LoadOptions {
                    check_filesystem: false,
                },
            )
            .unwrap_or_else(|e| panic!("{starter:?}: {e}\n{text}"));
            assert_eq!(spec.agents.len(), 1);
        }
    }
}
