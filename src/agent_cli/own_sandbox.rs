//! The CLI's own sandbox, when phoenix runs the CLI inside its own (an agent with `sandbox =
//! "NAME"`). Claude Code, Codex and Copilot CLI sandbox their shell tool with bubblewrap of their
//! own, Gemini CLI relaunches itself in a container: nested inside phoenix's sandbox these fail
//! (Claude Code 2.1.332: `bwrap: Can't mount proc on /newroot/proc: Operation not permitted`,
//! every Bash call; any of them once phoenix's sandbox forbids nested user namespaces:
//! `Creating new namespace failed … (ENOSPC)`), or work only as long as the outer sandbox lets
//! them. So phoenix turns each one off and says so: its own sandbox is the boundary. What the
//! agent's own command or environment chooses for the CLI's sandbox is kept, and said too.
//!
//! Pure: each adapter's `AgentCli::own_sandbox` reads the agent's argv and environment and
//! returns what to change; the wrapper applies it. docs/sandbox.md has the table.

use super::{AgentCli, Version};
use crate::spec::Cli;

/// The agent's command as phoenix is about to start it, and what its CLI's sandbox is asked.
pub struct Command<'a> {
    /// The base argv (its resume form is built from it, so what is added here stays in it).
    pub argv: Vec<String>,
    /// The environment the CLI will see before phoenix adds anything (the agent's `env`, then
    /// the wrapper's own): what the user chose there is kept.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The installed version of the CLI (`None`: not known).
    pub version: Option<Version>,
}

/// What phoenix does about the CLI's own sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OwnSandbox {
    /// The argv to start (and to build the resume form from).
    pub argv: Vec<String>,
    /// Variables phoenix sets in the CLI's environment.
    pub env: Vec<(String, String)>,
    /// One line for the plan and `status`: what phoenix set and why, or what it kept of the
    /// agent's own choice. `None`: nothing to say (not sandboxed, or a custom CLI).
    pub note: Option<String>,
}

impl OwnSandbox {
    /// Nothing changed, nothing said.
    pub fn unchanged(argv: Vec<String>) -> OwnSandbox {
        OwnSandbox {
            argv,
            env: Vec::new(),
            note: None,
        }
    }

    fn said(argv: Vec<String>, note: String) -> OwnSandbox {
        OwnSandbox {
            argv,
            env: Vec::new(),
            note: Some(note),
        }
    }
}

/// What phoenix sets for `cli`'s own sandbox when it starts `argv` (the agent's base argv)
/// with `env` (the environment the CLI would see) at `version`. `sandboxed`: phoenix runs the
/// CLI inside its own sandbox; when it does not, nothing changes.
pub fn plan(
    cli: Cli,
    sandboxed: bool,
    argv: Vec<String>,
    env: &dyn Fn(&str) -> Option<String>,
    version: Option<Version>,
) -> OwnSandbox {
    if !sandboxed {
        return OwnSandbox::unchanged(argv);
    }
    cli.adapter().own_sandbox(Command { argv, env, version })
}

/// [`plan`] for `agent` started as `base` (its base argv): the environment the CLI sees is the
/// agent's `env`, then `inherited` (the wrapper's own, `|k| std::env::var(k).ok()`).
pub fn for_agent(
    agent: &crate::spec::AgentSpec,
    sandboxed: bool,
    base: Vec<String>,
    inherited: &dyn Fn(&str) -> Option<String>,
    version: Option<Version>,
) -> OwnSandbox {
    let env = |k: &str| agent.env.get(k).cloned().or_else(|| inherited(k));
    plan(agent.cli, sandboxed, base, &env, version)
}

/// For a CLI that has no sandbox of its own: nothing to set, and the plan says so.
pub fn none_of_its_own(adapter: &dyn AgentCli, checked: &str, argv: Vec<String>) -> OwnSandbox {
    OwnSandbox::said(
        argv,
        format!(
            "{} has no sandbox of its own ({checked} checked): phoenix's sandbox is the only one",
            adapter.display_name()
        ),
    )
}

/// Is the program `argv` starts the CLI itself (by its file name)? Flags are added only
/// then: after `npx`, `env` or a wrapper script they would go to that program instead.
pub fn starts_the_cli(adapter: &dyn AgentCli, argv: &[String]) -> bool {
    argv.first()
        .and_then(|p| std::path::Path::new(p).file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| adapter.program_names().contains(&n))
}

/// The value of the first of `names` in `argv` (`--flag VALUE` or `--flag=VALUE`), with the
/// index of the word that holds it. Only words before a `--` are flags.
pub fn flag_value<'a>(argv: &'a [String], names: &[&str]) -> Option<(usize, &'a str)> {
    let words = argv.iter().take_while(|w| *w != "--").enumerate().skip(1);
    for (i, word) in words {
        for name in names {
            if word == name {
                return argv.get(i + 1).map(|v| (i + 1, v.as_str()));
            }
            if let Some(value) = word.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                return Some((i, value));
            }
        }
    }
    None
}

/// Does `argv` (before a `--`) hold one of `names` as a word of its own?
pub fn has_flag(argv: &[String], names: &[&str]) -> bool {
    argv.iter()
        .take_while(|w| *w != "--")
        .skip(1)
        .any(|w| names.contains(&w.as_str()))
}

/// The `-c KEY=…` / `--config KEY=…` override of one of `keys` in a Codex argv, as written.
pub fn config_override<'a>(argv: &'a [String], keys: &[&str]) -> Option<&'a str> {
    let words: Vec<&String> = argv.iter().take_while(|w| *w != "--").collect();
    for (i, word) in words.iter().enumerate().skip(1) {
        let value = match word.as_str() {
            "-c" | "--config" => words.get(i + 1).map(|v| v.as_str()),
            w => w.strip_prefix("--config=").or_else(|| w.strip_prefix("-c")),
        };
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            continue;
        };
        let key = value.split('=').next().unwrap_or("").trim();
        if keys.contains(&key) {
            return Some(value);
        }
    }
    None
}

/// `argv` with `words` right after the program.
pub fn with_after_program(mut argv: Vec<String>, words: &[&str]) -> Vec<String> {
    let at = argv.len().min(1);
    argv.splice(at..at, words.iter().map(|w| w.to_string()));
    argv
}

#[cfg(test)]
mod tests;
