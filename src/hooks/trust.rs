//! Making a CLI trust what phoenix installed, before the wrapper starts it: Codex CLI trusts
//! per project and per hook, Gemini CLI per folder, Claude Code per folder whether or not
//! phoenix's hooks are installed (each CLI's file says how). Without it the interactive CLI
//! stops at a dialog and phoenix's hooks never run (Claude Code 2.1.332's dialog even exits
//! on Enter).
//!
//! phoenix trusts the agent's workdir and its own handlers for that agent — never the user's
//! hooks — and leaves alone a directory the user marked untrusted. Planning is pure (in
//! `agent_cli`); `ensure` and the CLI's `trust` are what touch disk.

use std::fs;
use std::path::Path;

use super::config;
use crate::agent_cli::TrustRequest;
pub use crate::agent_cli::Trusted;
use crate::spec::AgentSpec;
use crate::state::bounded::{self, Links};

/// Record the trust the agent's CLI needs to run phoenix's hooks in its workdir. `Ok(None)`:
/// nothing to do (another CLI, no phoenix hooks installed, or already trusted). `Err`: why the
/// trust could not be recorded (the hooks will not run; the message says what to do).
///
/// Agents started together share the CLI's file: the read-change-write runs under an exclusive
/// lock on `lock` (a file in the fleet's state dir), so no agent's entries are lost.
pub fn ensure(agent: &AgentSpec, lock: &Path) -> Result<Option<Trusted>, String> {
    if !agent.cli.adapter().needs_trust() {
        return Ok(None);
    }
    // 0600 and never through a link, as every file of the state dir.
    let file = crate::state::file::open_lock(lock)
        .map_err(|e| format!("cannot open `{}`: {e}", lock.display()))?;
    let _held = crate::state::file::flock(file, true)
        .map_err(|(_, e)| format!("cannot lock `{}`: {e}", lock.display()))?;
    ensure_locked(agent)
}

fn ensure_locked(agent: &AgentSpec) -> Result<Option<Trusted>, String> {
    let lookup = lookup_in(agent);
    let adapter = agent.cli.adapter();
    let hooks_text = config::path_in(agent.cli, &agent.workdir)
        .and_then(|p| bounded::read_string(&p, config::MAX_CONFIG_BYTES, Links::Follow).ok())
        .filter(|text| config::has_agent_entries(text, &agent.name));
    if hooks_text.is_none() && !adapter.trusts_without_hooks() {
        return Ok(None);
    }
    // The CLIs see the workdir through getcwd(): symlinks resolved.
    let workdir = fs::canonicalize(&agent.workdir).unwrap_or_else(|_| agent.workdir.clone());
    adapter.trust(&TrustRequest {
        agent,
        workdir: &workdir,
        hooks_text: hooks_text.as_deref().unwrap_or(""),
        lookup: &lookup,
    })
}

/// Watches the file an agent's CLI keeps its folder trust in, while the agent waits for a
/// person to answer its trust question: it is read again only when it changed (it can be
/// large: Claude Code's holds every project it saw).
pub struct TrustWatch {
    agent: AgentSpec,
    file: std::path::PathBuf,
    workdir: std::path::PathBuf,
    stamp: Option<(u64, std::time::SystemTime)>,
}

impl TrustWatch {
    /// `None` when the agent's CLI keeps no trust phoenix knows how to read.
    pub fn new(agent: &AgentSpec) -> Option<TrustWatch> {
        let file = agent.cli.adapter().trust_file(&lookup_in(agent))?;
        let mut watch = TrustWatch {
            agent: agent.clone(),
            workdir: fs::canonicalize(&agent.workdir).unwrap_or_else(|_| agent.workdir.clone()),
            stamp: None,
            file,
        };
        watch.stamp = watch.stamp_now();
        Some(watch)
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    fn stamp_now(&self) -> Option<(u64, std::time::SystemTime)> {
        fs::metadata(&self.file)
            .ok()
            .map(|m| (m.len(), m.modified().unwrap_or(std::time::UNIX_EPOCH)))
    }

    /// Whether the file changed since the watch began (or last looked) and the CLI trusts the
    /// workdir by it now. A stat when nothing changed.
    pub fn trusted_since(&mut self) -> bool {
        let now = self.stamp_now();
        if now == self.stamp {
            return false;
        }
        self.stamp = now;
        self.agent
            .cli
            .adapter()
            .trusts(&self.file, &self.workdir)
            .unwrap_or(false)
    }
}

/// An environment variable as the agent sees it: its `env`, else phoenix's; never empty.
fn lookup_in(agent: &AgentSpec) -> impl Fn(&str) -> Option<String> + '_ {
    |key: &str| {
        agent
            .env
            .get(key)
            .cloned()
            .or_else(|| std::env::var(key).ok())
            .filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_starting_together_all_keep_their_trust() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let home = root.join("codex-home");
        let mut toml_text = String::new();
        for i in 0..6 {
            let work = root.join(format!("w{i}"));
            fs::create_dir_all(work.join(".codex")).unwrap();
            toml_text.push_str(&format!(
                "[[agent]]\nname = \"a{i}\"\ncli = \"codex\"\nworkdir = \"{}\"\nenv = {{ CODEX_HOME = \"{}\" }}\n",
                work.display(),
                home.display()
            ));
        }
        let spec = crate::spec::parse(
            &toml_text,
            &root.join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        for agent in &spec.agents {
            let target = config::Target::new(Path::new("/opt/phoenix"), &spec.file, agent, None);
            let hooks = config::pretty(&target.desired().unwrap());
            fs::write(agent.workdir.join(".codex/hooks.json"), hooks).unwrap();
        }
        let lock = root.join(".hooks-trust.lock");
        std::thread::scope(|s| {
            for agent in &spec.agents {
                let lock = &lock;
                s.spawn(move || ensure(agent, lock).unwrap().unwrap());
            }
        });
        let config: toml::Table =
            toml::from_str(&fs::read_to_string(home.join("config.toml")).unwrap()).unwrap();
        assert_eq!(config["projects"].as_table().unwrap().len(), 6);
        assert_eq!(config["hooks"]["state"].as_table().unwrap().len(), 42);
        // Trusted already: nothing to do.
        assert_eq!(ensure(&spec.agents[0], &lock).unwrap(), None);
    }
}
