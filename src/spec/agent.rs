//! One `[[agent]]` once validated: its CLI, command, restart settings, and the launch part
//! whose change means the running agent must be replaced.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::paths::{expand_path, tidy};
use super::settings::human;

/// Where `resume_command` takes the recorded session id.
pub const SESSION_ID: &str = "{session_id}";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cli {
    Claude,
    Codex,
    Gemini,
    Pi,
    Copilot,
    Opencode,
    Custom,
}

impl Cli {
    pub const NAMES: [&'static str; 7] = [
        "claude", "codex", "gemini", "pi", "opencode", "copilot", "custom",
    ];

    pub fn parse(s: &str) -> Option<Cli> {
        match s {
            "claude" => Some(Cli::Claude),
            "codex" => Some(Cli::Codex),
            "gemini" => Some(Cli::Gemini),
            "pi" => Some(Cli::Pi),
            "copilot" => Some(Cli::Copilot),
            "opencode" => Some(Cli::Opencode),
            "custom" => Some(Cli::Custom),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Pi => "pi",
            Cli::Copilot => "copilot",
            Cli::Opencode => "opencode",
            Cli::Custom => "custom",
        }
    }

    /// The command used when an agent names a CLI but no command.
    pub(super) fn default_command(self) -> Option<&'static str> {
        match self {
            Cli::Custom => None,
            other => Some(other.as_str()),
        }
    }
}

impl fmt::Display for Cli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which exits of an agent's CLI are followed by a start (`restart.when`): compose's and
/// systemd's `restart` / `Restart=`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartWhen {
    /// A crash is restarted (the crash-loop rules apply); a clean exit waits for a person.
    #[default]
    OnFailure,
    /// A clean exit is restarted too, after `cooldown` (it counts as no crash).
    Always,
    /// No exit is restarted: the agent waits for `phoenix restart`.
    Never,
}

impl RestartWhen {
    pub const NAMES: [&'static str; 3] = ["on-failure", "always", "never"];

    pub fn parse(text: &str) -> Option<RestartWhen> {
        match text {
            "on-failure" => Some(RestartWhen::OnFailure),
            "always" => Some(RestartWhen::Always),
            "never" => Some(RestartWhen::Never),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RestartWhen::OnFailure => "on-failure",
            RestartWhen::Always => "always",
            RestartWhen::Never => "never",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestartSettings {
    /// Which exits are followed by a start.
    pub when: RestartWhen,
    #[serde(with = "human")]
    pub cooldown: Duration,
    #[serde(with = "human")]
    pub backoff_max: Duration,
    pub max_crashes: u32,
    #[serde(with = "human")]
    pub crash_window: Duration,
    /// How long a started agent has to show life (a session-start or heartbeat hook; for
    /// custom CLIs also output in its pane) before the start counts as failed.
    #[serde(with = "human")]
    pub life_deadline: Duration,
    /// Typed into a hooked CLI once it is up again after an interruption (crash, watchdog
    /// revival, a fresh start for a full context), so that the work goes on without a person.
    /// Empty: wait for a person instead.
    pub continue_prompt: String,
}

/// What a revived session is told, after the context its session-start hook gave it.
pub const DEFAULT_CONTINUE_PROMPT: &str = "[phoenix] This session was restarted after an interruption. \
Continue the task where it stopped: the context phoenix gave you at session start says where. \
Check what the interrupted work left behind and do not redo finished steps.";

impl Default for RestartSettings {
    fn default() -> Self {
        RestartSettings {
            when: RestartWhen::OnFailure,
            cooldown: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            max_crashes: 5,
            crash_window: Duration::from_secs(3600),
            life_deadline: Duration::from_secs(60),
            continue_prompt: DEFAULT_CONTINUE_PROMPT.to_string(),
        }
    }
}

/// One agent with every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    pub name: String,
    pub cli: Cli,
    /// The base command as written; the wrapper rebuilds its argv from this every start.
    pub command: String,
    pub argv: Vec<String>,
    /// `resume_command` as written, and split; `{session_id}` is substituted per argument.
    pub resume_command: Option<String>,
    pub resume_argv: Option<Vec<String>>,
    pub workdir: PathBuf,
    /// A git worktree of its own (then `workdir` is the worktree).
    pub workspace: Option<super::WorkspaceSpec>,
    pub env: BTreeMap<String, String>,
    pub session: String,
    pub window: String,
    pub enabled: bool,
    pub restart: RestartSettings,
    /// Snapshot .json/.toml/.yaml files before the agent edits them and restore them if the
    /// edit leaves them unparsable (installs a pre-tool hook).
    pub guard_structured_files: bool,
    /// Read the pane's output for `->continuity:` commands (`tmux pipe-pane` → `phoenix tap`).
    pub tap: bool,
    /// The `[notify]` channels this agent's reports and failure messages go to (all when
    /// `None`): `github`, `webhook`, `command`.
    pub notify: Option<Vec<String>>,
    /// `[[agent]] policy`: a Lua policy file of its own (entry points it lacks come from
    /// policies/recovery.lua).
    pub policy: Option<PathBuf>,
    /// What it may spend per day; `None`: no limit. Not part of the launch: a new budget
    /// applies from the next watchdog pass without a restart.
    pub budget: Option<super::Budget>,
    /// `sandbox = "NAME"`: the profile its CLI and hooks run inside (bubblewrap).
    pub sandbox: Option<super::SandboxSpec>,
    /// The `[[agent_set]]` item it was made for; `None` for an `[[agent]]`.
    pub origin: Option<super::intake::Origin>,
    /// `mcp = { allow = [...] }`: what it may do through phoenix's MCP server. Not part of
    /// the launch: each call reads phoenix.toml again.
    pub mcp_allow: Vec<McpPermission>,
}

/// One kind of thing an agent may do through phoenix's MCP server (`src/mcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpPermission {
    /// The fleet's status, handoffs and search, and waiting for an agent.
    Read,
    /// Messages to other agents' inboxes, and handoffs of its own.
    Message,
    /// Restart, stop and start of other agents (and handoffs saved for them).
    Control,
}

impl McpPermission {
    pub const NAMES: [&'static str; 3] = ["read", "message", "control"];
    /// What an agent may do when phoenix.toml says nothing.
    pub const DEFAULT: [McpPermission; 2] = [McpPermission::Read, McpPermission::Message];

    pub fn parse(name: &str) -> Option<McpPermission> {
        match name {
            "read" => Some(McpPermission::Read),
            "message" => Some(McpPermission::Message),
            "control" => Some(McpPermission::Control),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            McpPermission::Read => "read",
            McpPermission::Message => "message",
            McpPermission::Control => "control",
        }
    }
}

/// The part of an agent's spec that, when changed, means the running agent must be replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub cli: Cli,
    pub command: String,
    /// Left out when unset so fingerprints of agents without it do not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<String>,
    pub workdir: PathBuf,
    pub env: BTreeMap<String, String>,
    pub session: String,
    pub window: String,
    /// Left out when unset so fingerprints of agents without one do not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<super::SandboxSpec>,
}

impl LaunchSpec {
    /// A stable 64-bit FNV-1a hash of the canonical JSON form, as 16 hex digits.
    pub fn fingerprint(&self) -> String {
        crate::state::digest(&serde_json::to_vec(self).expect("launch spec serialises"))
    }

    /// This launch as an older phoenix recorded it, with `.` and `..` steps left in its
    /// workdir: equal to what phoenix.toml declares now means the same agent (no drift).
    pub fn tidied(&self) -> LaunchSpec {
        LaunchSpec {
            workdir: tidy(&self.workdir),
            ..self.clone()
        }
    }

    /// Names and values of fields that differ, for showing drift.
    pub fn diff(&self, other: &LaunchSpec) -> Vec<FieldChange> {
        let a = serde_json::to_value(self).expect("serialises");
        let b = serde_json::to_value(other).expect("serialises");
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        // Environment values are often secrets: a plan shows which changed, never what to.
        let shown = |k: &str, v: serde_json::Value| {
            if k == "env" { hide_values(v) } else { v }
        };
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        let null = serde_json::Value::Null;
        let mut changes = Vec::new();
        for k in keys {
            let (before, after) = (a.get(k).unwrap_or(&null), b.get(k).unwrap_or(&null));
            if before == after {
                continue;
            }
            // A changed sandbox profile names the keys that changed (`sandbox.network`).
            if k == "sandbox"
                && let (Some(x), Some(y)) = (before.as_object(), after.as_object())
            {
                let inner: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for key in inner {
                    let (xb, ya) = (x.get(key).unwrap_or(&null), y.get(key).unwrap_or(&null));
                    if xb != ya {
                        changes.push(FieldChange {
                            field: format!("sandbox.{key}"),
                            before: xb.clone(),
                            after: ya.clone(),
                        });
                    }
                }
                continue;
            }
            changes.push(FieldChange {
                field: k.clone(),
                before: shown(k, before.clone()),
                after: shown(k, after.clone()),
            });
        }
        changes
    }
}

/// `{"TOKEN": "abc"}` → `{"TOKEN": "(hidden #3f2a)"}`: a short digest tells a changed value
/// from an unchanged one without showing either.
fn hide_values(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| {
                let digest = crate::state::digest(v.as_str().unwrap_or_default().as_bytes());
                (
                    k,
                    serde_json::Value::String(format!("(hidden #{})", &digest[..4])),
                )
            })
            .collect(),
        other => other,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

impl AgentSpec {
    pub fn launch(&self) -> LaunchSpec {
        LaunchSpec {
            cli: self.cli,
            command: self.command.clone(),
            resume_command: self.resume_command.clone(),
            workdir: self.workdir.clone(),
            env: self.env.clone(),
            session: self.session.clone(),
            window: self.window.clone(),
            sandbox: self.sandbox.clone(),
        }
    }

    /// The program name that should be running under the agent's pane, for messages.
    pub fn program(&self) -> &str {
        self.argv
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or("agent")
    }

    /// The program the agent's command starts, as found here: a path as written (relative to
    /// the workdir), else the first executable of that name on the `PATH` it will get (its own
    /// `env` PATH, else phoenix's). `None` when there is none, or for `phoenix` itself.
    pub fn program_path(&self) -> Option<PathBuf> {
        let program = self.argv.first().map(String::as_str).unwrap_or("");
        if program == "phoenix" || program.is_empty() {
            return None;
        }
        let executable = |p: &Path| {
            p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
        };
        if program.contains('/') {
            let path = expand_path(program, &self.workdir);
            return executable(&path).then_some(path);
        }
        let path = self
            .env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| executable(p))
    }

    /// Why the agent's command cannot run here, if it cannot: not on the `PATH` it will get
    /// (its own `env` PATH, else phoenix's), or a path that is not an executable file. `None`
    /// when it can (or for `phoenix` itself, which the wrapper runs as this binary).
    pub fn command_problem(&self) -> Option<String> {
        let program = self.argv.first().map(String::as_str).unwrap_or("");
        if program == "phoenix" {
            return None;
        }
        let executable = |p: &Path| {
            p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
        };
        if program.contains('/') {
            let path = expand_path(program, &self.workdir);
            return (!executable(&path)).then(|| {
                format!(
                    "agent `{}`: command `{}` is not an executable file",
                    self.name,
                    path.display()
                )
            });
        }
        let path = self
            .env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        let found = std::env::split_paths(&path).any(|d| executable(&d.join(program)));
        (!found).then(|| {
            format!(
                "agent `{}`: command `{program}` is not on PATH (cli `{}`)",
                self.name, self.cli
            )
        })
    }
}
