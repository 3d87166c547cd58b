//! phoenix.toml: the declared fleet. Parsing, defaults, and validation with precise errors.
//! This module owns the whole `Spec`; its parts live in submodules by concept (the agent,
//! the fleet-wide settings, schedules, loading, key and value validation) and are re-exported
//! here, so the rest of the crate names them `crate::spec::X`.

pub mod duration;
mod raw;
pub mod sandbox;
pub mod schema;
pub mod schema_check;

mod agent;
pub mod floors;
mod host;
pub mod intake;
mod keys;
mod load;
pub mod narrow;
mod paths;
mod schedule;
mod settings;
mod validate;
pub mod workspace;

use std::path::PathBuf;

use crate::diag::{Located, did_you_mean};

pub use agent::{
    AgentSpec, Cli, DEFAULT_CONTINUE_PROMPT, FieldChange, LaunchSpec, McpPermission,
    RestartSettings, RestartWhen, SESSION_ID,
};
pub use floors::Floor;
pub use host::{
    HostSpec, RemoteAgent, THIS_MACHINE, check_destination, check_remote_path, default_dir,
};
pub use load::{
    LAST_GOOD_CONFIG, LoadError, LoadOptions, MAX_CONFIG_BYTES, file_digest, load, load_for_hook,
    load_last_good_for_hook, load_with, parse, parse_with_items, read_config, remember_good,
};
pub use paths::{expand_path, fleet_id, tidy};
pub use sandbox::SandboxSpec;
pub use schedule::{Schedule, Schedules};
pub use settings::{
    BriefSettings, Budget, ClinicSettings, Fleet, GithubNotify, MAX_WEBHOOK_RETRIES,
    NotifySettings, NtfyNotify, Price, Reload, TelemetrySettings, Thresholds, WatchdogSettings,
    WebhookFormat, WebhookNotify,
};
pub use validate::{DEFAULT_EVERY, ItemLists, NAME_HINT, valid_name};
pub use workspace::WorkspaceSpec;

pub const DEFAULT_CONFIG: &str = "phoenix.toml";

/// The validated, effective fleet specification.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Absolute path of the phoenix.toml this came from.
    pub file: PathBuf,
    /// Directory of that file; relative paths in the spec are relative to it.
    pub dir: PathBuf,
    pub fleet: Fleet,
    pub thresholds: Thresholds,
    pub schedules: Schedules,
    pub clinic: ClinicSettings,
    pub notify: NotifySettings,
    pub watchdog: WatchdogSettings,
    pub brief: BriefSettings,
    pub telemetry: TelemetrySettings,
    /// The agents that run on this machine.
    pub agents: Vec<AgentSpec>,
    /// The other machines (`[[host]]`), in the order written.
    pub hosts: Vec<HostSpec>,
    /// The agents declared to run on one of `hosts`: never started here.
    pub remote_agents: Vec<RemoteAgent>,
    /// `[prices]`: prices per model name, over the built-in table (`crate::usage::prices`).
    pub prices: std::collections::BTreeMap<String, Price>,
    /// What is allowed but probably not meant (`cooldown` longer than `backoff_max`); shown by
    /// `validate`, `plan` and `apply`, never fatal.
    pub warnings: Vec<Located>,
    /// `[[agent_set]]`s: their agents are in `agents`, each with its `origin`.
    pub agent_sets: Vec<intake::AgentSetSpec>,
    /// Agents of items that left their set's source: stopped with a handoff, never started
    /// again unless the item comes back.
    pub retired: Vec<intake::Retired>,
    /// Where each agent is in `agents`, made at the first lookup (see `Spec::agent`).
    pub(crate) by_name: AgentIndex,
}

/// Name → position in `Spec::agents`, made once: lookups by name are made per agent (plans,
/// status rows, apply steps), and a scan each made a plan of 50,000 agents take minutes (issue
/// 34). `agents` is a public field that callers narrow or clear, so an entry is trusted only
/// when the agent at its position still has that name; otherwise the lookup scans.
#[derive(Clone, Default)]
pub(crate) struct AgentIndex(std::sync::OnceLock<std::collections::HashMap<String, usize>>);

impl std::fmt::Debug for AgentIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentIndex")
    }
}

/// Written here, not in `render`: the spec renders its `[[agent_set]]` templates with
/// `render`'s bounded environment, so `render` knows nothing of the spec.
impl crate::render::Templates {
    /// `templates/` next to phoenix.toml.
    pub fn for_spec(spec: &Spec) -> crate::render::Templates {
        crate::render::Templates::new(Some(&spec.dir.join("templates")))
    }
}

impl Spec {
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        let index = self.by_name.0.get_or_init(|| {
            self.agents
                .iter()
                .enumerate()
                .map(|(i, a)| (a.name.clone(), i))
                .collect()
        });
        if let Some(agent) = index
            .get(name)
            .and_then(|&i| self.agents.get(i))
            .filter(|a| a.name == name)
        {
            return Some(agent);
        }
        // Not in the index, or `agents` changed since it was made: the index cannot say.
        // A miss scans, so an agent pushed after the index was made is still found.
        self.agents.iter().find(|a| a.name == name)
    }

    pub fn agent_names(&self) -> Vec<&str> {
        self.agents.iter().map(|a| a.name.as_str()).collect()
    }

    /// For an agent name that is not declared: the likely typo's fix, then every name.
    pub fn declared_hint(&self, name: &str) -> String {
        // The agents of other hosts are declared too: a typo of one of them is still a typo.
        let mut names = self.agent_names();
        names.extend(self.remote_agents.iter().map(|a| a.name.as_str()));
        match did_you_mean(name, &names) {
            Some(s) => format!("did you mean `{s}`? declared: {}", names.join(", ")),
            None => format!("declared: {}", names.join(", ")),
        }
    }

    /// The state directory of one agent: `<state_dir>/agents/<name>`.
    pub fn agent_dir(&self, name: &str) -> PathBuf {
        self.fleet.state_dir.join("agents").join(name)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod host_tests;
