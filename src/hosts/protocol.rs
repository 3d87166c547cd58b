//! The host protocol: what the operator's phoenix sends to `phoenix host` on a host (one JSON
//! request on stdin) and what comes back (one JSON reply on stdout). Everything travels in
//! the JSON, nothing in the remote command line but the program and the word `host`, so no
//! name, path or secret of the spec ever reaches a remote shell or a process list.
//!
//! The envelope (`format_version`, `phoenix_version`, `os`, `arch`, `ok`, `error`) stays the
//! same in every version, so two phoenixes of different versions can always tell each other
//! which versions they are, whatever else changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of the request and reply formats. Bumped on any change a peer of the other
/// version would misread; both sides must agree exactly.
pub const FORMAT_VERSION: u32 = 1;

/// The largest request a host reads (a spec slice with its policies and templates).
pub const MAX_REQUEST_BYTES: u64 = 16 << 20;
/// The largest reply the operator reads (an agent's exported context, as JSON).
pub const MAX_REPLY_BYTES: u64 = 32 << 20;

pub fn phoenix_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub format_version: u32,
    pub phoenix_version: String,
    /// The operator's placements this host is owed (agents moved away from it while it was
    /// unreachable): with every request until the host has answered one, so the first
    /// contact with a host that comes back records them and stops its stale copies before
    /// the call itself is answered ([`Reply::fenced`] says what that did).
    ///
    /// (Not `fences`: [`Call::Fence`] has a field of that name, flattened beside it.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owed_fences: BTreeMap<String, crate::state::fence::Fence>,
    #[serde(flatten)]
    pub call: Call,
}

impl Request {
    pub fn new(call: Call) -> Request {
        Request {
            format_version: FORMAT_VERSION,
            phoenix_version: phoenix_version().to_string(),
            owed_fences: BTreeMap::new(),
            call,
        }
    }
}

/// What the operator asks a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case")]
pub enum Call {
    /// Who are you: versions, OS and architecture only.
    Hello,
    /// `doctor` for the host: tmux, the host's directory, each agent's CLI and workdir there.
    Check {
        /// The host's directory (`~` is the remote user's home).
        dir: String,
        /// The host's slice of phoenix.toml, as TOML text.
        slice: String,
    },
    /// `plan --json` for the host's slice as sent, against what runs there: the host's own
    /// phoenix.toml is not touched (the host's daemon must not act on a dry run).
    Plan {
        dir: String,
        slice: String,
        /// `--prune`, `--force-remove-worktrees`.
        #[serde(flatten)]
        prune: crate::plan::Pruning,
    },
    /// Make the slice the host's phoenix.toml (each file whole: the policies and templates
    /// first, phoenix.toml last, every one written to a temporary name and renamed), then
    /// `apply --yes --json` there.
    Apply {
        dir: String,
        slice: String,
        /// Policies and templates next to phoenix.toml, by path relative to it (only under
        /// `policies/` and `templates/`).
        #[serde(default)]
        files: std::collections::BTreeMap<String, String>,
        /// Only these agents (all of the slice when empty).
        #[serde(default)]
        agents: Vec<String>,
        #[serde(flatten)]
        prune: crate::plan::Pruning,
    },
    /// One of phoenix's own commands on the host's fleet (`status --json`, `events`,
    /// `restart NAME`, …): the words go to the host's phoenix as an argv, never to a shell.
    /// Only the commands in [`RUN_COMMANDS`]. `stdin`: what the command reads on its stdin
    /// (a message given as `-`, a handoff's body), read on the operator's machine.
    Run {
        dir: String,
        args: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdin: Option<String>,
    },
    /// Paste `text` into one agent's pane on the host and confirm it was submitted, as the
    /// API's inject does on the operator's machine (the runtime's paste makes it inert there
    /// too). Text travels in the request, never in an argv.
    Inject {
        dir: String,
        agent: String,
        text: String,
    },
    /// Install this host's daemon, `<this phoenix> --config <dir>/phoenix.toml run`, as a
    /// systemd user unit named after `fleet` and start it; where there is no systemd user
    /// manager, write nothing and answer with the unit and the command to run instead. Sent by
    /// `hosts install` to the phoenix it has just copied there.
    Install { dir: String, fleet: String },
    /// What one agent has here, for a move: whether it runs, its latest handoff, its workdir
    /// and whether that holds unpushed commits ([`super::carry::Summary`]).
    Context { dir: String, agent: String },
    /// One agent's externalized state ([`super::carry::AgentContext`]): state.json, the
    /// ledger, the handoffs (newest first, bounded), brief.md, the resolved log.
    Export { dir: String, agent: String },
    /// The agent leaves this host for another: stopped as `phoenix stop` does, its wrapper
    /// waited for, a handoff saved with reason `move`, its context read
    /// ([`super::carry::Left`]).
    Leave { dir: String, agent: String },
    /// Make `context` the agent's externalized state here (before its slice is pushed and it
    /// starts fresh), and record `fence` (the operator's placement of it, here).
    Import {
        dir: String,
        agent: String,
        context: super::carry::AgentContext,
        fence: crate::state::fence::Fence,
    },
    /// The operator's placements of moved agents: recorded (a lower generation never
    /// overrides a higher one), and a copy of an agent placed elsewhere that runs here is
    /// stopped.
    Fence {
        dir: String,
        fences: std::collections::BTreeMap<String, crate::state::fence::Fence>,
    },
    /// The handoffs, ledgers and state of these agents for the operator's mirror: each with
    /// the newest handoff id the mirror already holds (only newer handoffs come back).
    Mirror {
        dir: String,
        agents: std::collections::BTreeMap<String, Option<String>>,
    },
}

impl Call {
    /// The host's directory the call is about (`None`: [`Call::Hello`]).
    pub fn dir(&self) -> Option<&str> {
        match self {
            Call::Hello => None,
            Call::Check { dir, .. }
            | Call::Plan { dir, .. }
            | Call::Apply { dir, .. }
            | Call::Run { dir, .. }
            | Call::Inject { dir, .. }
            | Call::Install { dir, .. }
            | Call::Context { dir, .. }
            | Call::Export { dir, .. }
            | Call::Leave { dir, .. }
            | Call::Import { dir, .. }
            | Call::Fence { dir, .. }
            | Call::Mirror { dir, .. } => Some(dir),
        }
    }
}

/// What [`Call::Install`] did on the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Installed {
    /// `phoenix-<fleet>.service`.
    pub unit_name: String,
    /// The unit, as written (or as it would be on a host with systemd).
    pub unit: String,
    /// Where the unit was written; `None` when it was not.
    pub unit_path: Option<String>,
    /// The daemon's command line, quoted for a shell: what to run where there is no systemd.
    pub command: String,
    /// A systemd user manager answered there.
    pub systemd: bool,
    /// `systemctl --user enable --now` succeeded.
    pub started: bool,
    /// The host's directory has a phoenix.toml already (until the first apply pushes one, the
    /// daemon cannot start: systemd retries it).
    pub has_slice: bool,
    /// What went wrong, when something did (systemd missing or refusing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What [`Call::Run`] may run on a host: reading the fleet and acting on its agents, never
/// a daemon, a hook, a server or anything that writes the host's phoenix.toml.
pub const RUN_COMMANDS: &[&str] = &[
    "status", "events", "logs", "handoff", "ledger", "reindex", "restart", "stop", "start", "down",
    "watchdog", "validate", "doctor", "state", "loop", "resolve", "brief", "usage", "send",
    "inbox", "clinic", "hooks", "sandbox", "notify", "wait",
];

/// How long a [`Call::Run`] of `args` may take, beside `usual` for any other command: a
/// `wait` as long as its own `--timeout` (10 minutes unless given, 24 hours at most) and a
/// margin for the link and the process start, so neither side cuts a wait short.
pub fn run_timeout(args: &[&str], usual: std::time::Duration) -> std::time::Duration {
    use std::time::Duration;
    const MARGIN: Duration = Duration::from_secs(30);
    const MOST: Duration = Duration::from_secs(24 * 3600);
    if args.first() != Some(&"wait") {
        return usual;
    }
    let given = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--timeout=").or_else(|| {
            (*a == "--timeout")
                .then(|| args.get(i + 1).copied())
                .flatten()
        })
    });
    let wait = given
        .and_then(|t| crate::spec::duration::parse(t).ok())
        .unwrap_or(Duration::from_secs(600))
        .min(MOST);
    (wait + MARGIN).max(usual)
}

/// What a [`Call::Run`] (and the apply of [`Call::Apply`]) printed and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ran {
    /// The exit code (`None`: killed by a signal or the timeout).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub format_version: u32,
    pub phoenix_version: String,
    /// `std::env::consts::OS` and `ARCH` of the host's phoenix: `hosts install` copies this
    /// binary only to a host where both are the same.
    pub os: String,
    pub arch: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RemoteError>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub result: Value,
    /// What the host did with the request's [`Request::owed_fences`] (none sent: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced: Option<super::carry::Fenced>,
}

impl Reply {
    pub fn ok(result: Value) -> Reply {
        Reply {
            result,
            ..Reply::envelope(true)
        }
    }

    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Reply {
        Reply {
            error: Some(RemoteError {
                kind,
                message: message.into(),
            }),
            ..Reply::envelope(false)
        }
    }

    fn envelope(ok: bool) -> Reply {
        Reply {
            format_version: FORMAT_VERSION,
            phoenix_version: phoenix_version().to_string(),
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            ok,
            error: None,
            result: Value::Null,
            fenced: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteError {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request's `format_version` is not the host's.
    VersionMismatch,
    /// The request could not be read (not JSON, too large, an unknown verb).
    BadRequest,
    /// The host understood the request and could not carry it out.
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_wait_on_a_host_may_take_its_own_timeout_and_a_margin_and_nothing_else_more() {
        let usual = Duration::from_secs(60);
        assert_eq!(run_timeout(&["status", "--json"], usual), usual);
        let secs = |args: &[&str]| run_timeout(args, usual).as_secs();
        assert_eq!(secs(&["wait", "a"]), 630, "10 minutes unless given");
        assert_eq!(secs(&["wait", "a", "--timeout", "2h"]), 7230);
        assert_eq!(secs(&["wait", "a", "--timeout=90s"]), 120);
        assert_eq!(
            secs(&["wait", "a", "--timeout", "1s"]),
            60,
            "never less than usual"
        );
        assert_eq!(secs(&["wait", "a", "--timeout", "400h"]), 24 * 3600 + 30);
        assert_eq!(secs(&["wait", "a", "--timeout"]), 630);
        // An agent named like the flag is the agent.
        assert_eq!(secs(&["wait", "--timeout"]), 630);
    }
}
