//! phoenix's MCP server: the fleet as tools an agent (or a person's MCP client) can call —
//! `phoenix mcp` on stdio, and `/mcp` on `phoenix serve` (streamable HTTP).
//!
//! The caller is known from the channel, never from a call's text: over stdio it is the agent
//! whose environment phoenix set when it started it (`PHOENIX_AGENT`, checked against
//! phoenix.toml and its state dir), or the operator when there is none; over HTTP it is the
//! operator, behind the API's own auth. A message's sender is that identity, whatever a call's
//! arguments say.
//!
//! Every call passes [`authorize`] (the one permission check: `[[agent]] mcp.allow`), then runs
//! as a plain function over the library calls the CLI and the API use ([`tools`], [`wait`]),
//! and is recorded in the caller's ops log ([`record`]). The protocol (rmcp) is in [`server`].

pub mod server;
pub mod tools;
pub mod wait;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::spec::{McpPermission, Spec};
use crate::state::{FleetDir, Op};

/// The environment variable phoenix sets for every agent it starts: the agent's name.
pub const AGENT_ENV: &str = "PHOENIX_AGENT";
/// Set beside it: the agent's own state dir, which must be the one phoenix.toml gives it.
pub const STATE_DIR_ENV: &str = "PHOENIX_STATE_DIR";
/// Where the operator's calls are recorded (the operator has no ops log of its own).
pub const OPERATOR_LOG: &str = "mcp_operator.jsonl";

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A person, or a program of theirs: any process phoenix did not start as an agent.
    Operator,
    /// An agent of this fleet, as phoenix started it.
    Agent(String),
}

impl Caller {
    /// The caller of a stdio server, from the environment its process inherited: the agent
    /// phoenix started (its CLI starts this server), or the operator.
    /// A process under an agent's wrapper is that agent whatever its environment says: a CLI
    /// that starts its MCP servers with only some variables (Codex), or an agent that unsets
    /// them, never makes the call the operator's.
    pub fn from_env(spec: &Spec) -> crate::error::Result<Caller> {
        let agent = std::env::var(AGENT_ENV).ok().filter(|a| !a.is_empty());
        let state_dir = std::env::var(STATE_DIR_ENV).ok().filter(|d| !d.is_empty());
        match (crate::world::wrapping_agent(spec), agent) {
            (Some(wrapped), Some(named)) if wrapped != named => crate::bail!(
                "{AGENT_ENV}=`{named}`, but this process runs under agent `{wrapped}`'s wrapper: an agent calls phoenix mcp as itself"
            ),
            (Some(wrapped), named) => {
                // The state dir is checked where the environment named the agent.
                let state_dir = named.and(state_dir);
                Caller::from_identity(spec, Some(&wrapped), state_dir.as_deref().map(Path::new))
            }
            (None, named) => {
                Caller::from_identity(spec, named.as_deref(), state_dir.as_deref().map(Path::new))
            }
        }
    }

    /// The caller `agent` (with the state dir its environment names), checked against `spec`.
    pub fn from_identity(
        spec: &Spec,
        agent: Option<&str>,
        state_dir: Option<&Path>,
    ) -> crate::error::Result<Caller> {
        let Some(name) = agent else {
            return Ok(Caller::Operator);
        };
        if spec.agent(name).is_none() {
            crate::bail!(
                "{AGENT_ENV}=`{name}` names no agent of this machine in {} ({}): phoenix mcp serves the agents phoenix started from this file; unset {AGENT_ENV} to call it as the operator",
                spec.file.display(),
                spec.declared_hint(name)
            );
        }
        let own = FleetDir::new(&spec.fleet.state_dir).agent(name).path;
        if let Some(dir) = state_dir
            && !same_dir(dir, &own)
        {
            crate::bail!(
                "{STATE_DIR_ENV}=`{}` is not agent `{name}`'s state dir `{}` in {}: this process was started for another fleet (pass that fleet's --config)",
                dir.display(),
                own.display(),
                spec.file.display()
            );
        }
        Ok(Caller::Agent(name.to_string()))
    }

    /// The name messages carry as their sender, and ops logs as the caller.
    pub fn name(&self) -> &str {
        match self {
            Caller::Operator => "operator",
            Caller::Agent(name) => name,
        }
    }

    /// May this caller do `what`? The operator may do anything; an agent what its
    /// `mcp.allow` says, read from phoenix.toml as it is now.
    pub fn allows(&self, spec: &Spec, what: McpPermission) -> bool {
        match self {
            Caller::Operator => true,
            Caller::Agent(name) => spec
                .agent(name)
                .is_some_and(|a| a.mcp_allow.contains(&what)),
        }
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || std::fs::canonicalize(a)
            .ok()
            .zip(std::fs::canonicalize(b).ok())
            .is_some_and(|(a, b)| a == b)
}

/// Why a call did not do what it asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// No tool of that name: a protocol error, not a tool's result.
    #[error("no tool `{0}`")]
    UnknownTool(String),
    #[error("{message}")]
    BadArguments { message: String, hint: String },
    #[error("`{caller}` may not call `{tool}`{target}: it needs the `{needs}` permission")]
    Denied {
        caller: String,
        tool: String,
        target: String,
        needs: &'static str,
    },
    #[error("{message}")]
    UnknownAgent { message: String, hint: String },
    #[error("{message}")]
    Failed { message: String, hint: String },
    #[error("cancelled")]
    Cancelled,
}

impl ToolError {
    pub fn bad(message: impl Into<String>, hint: impl Into<String>) -> ToolError {
        ToolError::BadArguments {
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn failed(message: impl Into<String>, hint: impl Into<String>) -> ToolError {
        ToolError::Failed {
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// A short word for the kind, in the tool's result and the ops log.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::UnknownTool(_) => "unknown_tool",
            ToolError::BadArguments { .. } => "bad_arguments",
            ToolError::Denied { .. } => "denied",
            ToolError::UnknownAgent { .. } => "unknown_agent",
            ToolError::Failed { .. } => "failed",
            ToolError::Cancelled => "cancelled",
        }
    }

    pub fn hint(&self) -> String {
        match self {
            ToolError::UnknownTool(_) => format!("the tools: {}", tools::NAMES.join(", ")),
            ToolError::BadArguments { hint, .. }
            | ToolError::UnknownAgent { hint, .. }
            | ToolError::Failed { hint, .. } => hint.clone(),
            ToolError::Denied { needs, caller, .. } => format!(
                "add \"{needs}\" to agent `{caller}`'s `mcp = {{ allow = [...] }}` in phoenix.toml (docs/mcp.md)"
            ),
            ToolError::Cancelled => String::new(),
        }
    }

    /// What the caller's client is shown.
    pub fn to_json(&self) -> Value {
        json!({"error": self.to_string(), "code": self.code(), "hint": self.hint()})
    }
}

/// A call that passed [`authorize`]: the tool, its arguments, and the agent it is about.
#[derive(Debug, Clone)]
pub struct Authorized {
    pub tool: &'static str,
    pub args: Map<String, Value>,
    /// The agent the call acts on or reads, when it names one.
    pub target: Option<String>,
    /// Arguments the caller gave that phoenix does not take (a `from`, say): ignored.
    pub ignored: Vec<String>,
}

/// The one permission check: is `tool` a tool, are its arguments well formed, is its agent
/// declared, and may `caller` call it on that agent.
pub fn authorize(
    spec: &Spec,
    caller: &Caller,
    tool: &str,
    args: Map<String, Value>,
) -> Result<Authorized, ToolError> {
    let def = tools::find(tool).ok_or_else(|| ToolError::UnknownTool(tool.to_string()))?;
    let ignored: Vec<String> = args
        .keys()
        .filter(|k| !def.arguments.contains(&k.as_str()))
        .cloned()
        .collect();
    let target = match tools::string_arg(&args, "agent")? {
        Some(agent) => Some(agent),
        // A handoff saved without an agent is the caller's own.
        None if def.name == "save_handoff" => match caller {
            Caller::Agent(name) => Some(name.clone()),
            Caller::Operator => {
                return Err(ToolError::bad(
                    "`save_handoff` needs `agent` when the operator calls it",
                    "name the agent whose handoff to save",
                ));
            }
        },
        None if def.needs_agent => {
            return Err(ToolError::bad(
                format!("`{tool}` needs `agent`"),
                "the agent's name, as `list_agents` shows it",
            ));
        }
        None => None,
    };
    if let Some(agent) = &target {
        declared(spec, agent)?;
    }
    let needs = match def.name {
        "send_message" => McpPermission::Message,
        "save_handoff" if target.as_deref() == Some(caller.name()) => McpPermission::Message,
        "save_handoff" | "restart" | "stop" | "start" => McpPermission::Control,
        _ => McpPermission::Read,
    };
    if !caller.allows(spec, needs) {
        return Err(ToolError::Denied {
            caller: caller.name().to_string(),
            tool: def.name.to_string(),
            target: target
                .as_ref()
                .map(|t| format!(" on agent `{t}`"))
                .unwrap_or_default(),
            needs: needs.as_str(),
        });
    }
    Ok(Authorized {
        tool: def.name,
        args,
        target,
        ignored,
    })
}

/// `agent` is declared in phoenix.toml, on this machine or on one of its hosts.
pub fn declared(spec: &Spec, agent: &str) -> Result<(), ToolError> {
    if !crate::spec::valid_name(agent) {
        return Err(ToolError::bad(
            format!("`{}` is not an agent name", crate::text::shorten(agent, 80)),
            crate::spec::NAME_HINT,
        ));
    }
    if spec.agent(agent).is_some() || spec.remote_agents.iter().any(|a| a.name == agent) {
        return Ok(());
    }
    Err(ToolError::UnknownAgent {
        message: format!("no agent `{agent}` in {}", spec.file.display()),
        hint: format!("{}; `list_agents` lists them", spec.declared_hint(agent)),
    })
}

/// Record one call in the caller's ops log (`mcp_call`): the tool, the agent it was about,
/// whether it did it, and how long it took. Message texts and handoff bodies stay out.
pub fn record(
    spec: &Spec,
    caller: &Caller,
    tool: &str,
    target: Option<&str>,
    outcome: Result<(), &ToolError>,
    ms: f64,
    via: &str,
) {
    let mut fields = json!({
        "tool": tool,
        "target": target,
        "ok": outcome.is_ok(),
        "via": via,
        "ms": (ms * 10.0).round() / 10.0,
    });
    if let Err(e) = outcome {
        fields["error"] = json!(e.code());
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    match caller {
        Caller::Agent(name) => {
            // A declared agent's dir, as `apply` makes it: the call is recorded even before
            // the agent first ran.
            let dir = fleet.agent(name);
            if dir.ensure().is_ok() {
                let _ = dir.record_op(Op::McpCall, fields);
            }
        }
        Caller::Operator => {
            if fleet.ensure().is_ok() {
                fields["ts"] = json!(crate::state::now_rfc3339());
                fields["event"] = json!("mcp_call");
                fields["caller"] = json!("operator");
                let _ = crate::state::append_jsonl(&fleet.root.join(OPERATOR_LOG), &fields);
            }
        }
    }
}

/// What one server needs to answer calls: the fleet's file (read again on every call, so an
/// edit of `mcp.allow` applies at once) and who calls.
#[derive(Debug, Clone)]
pub struct Context {
    pub config: PathBuf,
    pub caller: Caller,
    /// `stdio` or `http`, for the ops log.
    pub via: &'static str,
}

impl Context {
    pub fn spec(&self) -> Result<Spec, ToolError> {
        crate::spec::load_with(
            &self.config,
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .map_err(|e| {
            ToolError::failed(
                format!("cannot read {}: {e}", self.config.display()),
                "run `phoenix validate`",
            )
        })
    }
}

#[cfg(test)]
mod tests;
