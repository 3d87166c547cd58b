//! Hosts: the machines of a fleet that spans several. Every host runs its own phoenix for its
//! own agents (hooks, state and daemon stay local); the operator's phoenix reaches each one
//! through a [`Transport`] (OpenSSH today, see `docs/multi-host.md` for `kubectl exec`) and
//! speaks the versioned JSON [`protocol`] with `phoenix host` there.

pub mod actions;
pub mod admit;
pub mod binary;
pub mod carry;
pub mod check;
pub mod combined;
pub mod fleet;
pub mod follow;
pub mod install;
pub mod known;
pub mod mirror;
pub mod moves;
mod moving;
pub mod protocol;
pub mod reads;
pub mod replan;
pub mod serve;
mod side;
pub mod slice;
pub mod ssh;

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use protocol::{Call, ErrorKind, FORMAT_VERSION, Reply, Request};

use crate::process::Finished;
use crate::text::sh_quote;

/// How the operator reaches a host. Every call runs one program there with JSON on stdin;
/// what it printed and how it ended come back.
pub trait Transport: Send + Sync {
    /// The host's name in the spec.
    fn host(&self) -> &str;
    /// Where the host is, for messages (`ssh deploy@gpu-1`).
    fn describe(&self) -> String;
    /// Run `remote` (program and arguments, each passed through literally) on the host with
    /// `input` on its stdin; never longer than `timeout`.
    fn call(
        &self,
        remote: &[&str],
        input: &[u8],
        timeout: Duration,
    ) -> Result<Finished, TransportError>;
    /// [`Transport::call`] with a file as stdin, streamed (`hosts install` copies phoenix
    /// itself this way: no scp or sftp needed on the host).
    fn call_file(
        &self,
        remote: &[&str],
        input: std::fs::File,
        timeout: Duration,
    ) -> Result<Finished, TransportError>;
    /// The local argv that runs `remote` on the host with a terminal (for `attach`).
    fn interactive(&self, remote: &[&str]) -> Vec<OsString>;
}

#[derive(Debug, Clone, PartialEq)]
pub enum TransportError {
    /// The host could not be reached or refused us (what ssh said).
    Unreachable { host: String, detail: String },
    /// No answer within the timeout.
    Timeout { host: String, after: Duration },
    /// Nothing was sent: a local problem (no `ssh`, the control directory).
    Local { host: String, detail: String },
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Unreachable { host, detail } => {
                write!(f, "host `{host}` is unreachable: {detail}")
            }
            TransportError::Timeout { host, after } => write!(
                f,
                "host `{host}` did not answer within {}",
                crate::spec::duration::format(*after)
            ),
            TransportError::Local { host, detail } => write!(f, "host `{host}`: {detail}"),
        }
    }
}

impl std::error::Error for TransportError {}

/// What went wrong asking a host something.
#[derive(Debug, Clone, PartialEq)]
pub enum HostError {
    Transport(TransportError),
    /// The host's phoenix speaks another version of the host protocol.
    VersionMismatch {
        host: String,
        theirs: String,
        their_format: u32,
    },
    /// The program at `phoenix` on the host is missing or does not speak the protocol at all.
    NoPhoenix {
        host: String,
        detail: String,
    },
    /// The host answered with an error of its own.
    Remote {
        host: String,
        kind: ErrorKind,
        message: String,
    },
}

impl HostError {
    pub fn host(&self) -> &str {
        match self {
            HostError::Transport(
                TransportError::Unreachable { host, .. }
                | TransportError::Timeout { host, .. }
                | TransportError::Local { host, .. },
            )
            | HostError::VersionMismatch { host, .. }
            | HostError::NoPhoenix { host, .. }
            | HostError::Remote { host, .. } => host,
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        let host = self.host();
        match self {
            HostError::Transport(TransportError::Unreachable { .. }) => Some(format!(
                "check that `ssh` to the host works without a password prompt (a key in the agent, the host key in known_hosts): the [[host]] `{host}` entry's `ssh` is passed to ssh as is"
            )),
            HostError::Transport(TransportError::Timeout { .. }) => None,
            HostError::Transport(TransportError::Local { .. }) => None,
            HostError::VersionMismatch { .. } | HostError::NoPhoenix { .. } => Some(format!(
                "run the same phoenix on both sides: `phoenix hosts install {host}` copies this one there"
            )),
            HostError::Remote { .. } => None,
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Transport(e) => e.fmt(f),
            HostError::VersionMismatch {
                host,
                theirs,
                their_format,
            } => write!(
                f,
                "host `{host}` runs phoenix {theirs} (host protocol {their_format}); this is phoenix {} (host protocol {FORMAT_VERSION})",
                protocol::phoenix_version()
            ),
            HostError::NoPhoenix { host, detail } => write!(f, "host `{host}`: {detail}"),
            HostError::Remote { host, message, .. } => write!(f, "host `{host}`: {message}"),
        }
    }
}

impl std::error::Error for HostError {}

impl From<HostError> for crate::error::Error {
    fn from(e: HostError) -> crate::error::Error {
        let hint = e.hint();
        crate::error::Error::Failed {
            message: e.to_string(),
            hint,
        }
    }
}

/// The one command line ever run on a host: its phoenix and the word `host`. Each word is
/// quoted for the remote shell; a leading `~/` stays unquoted so it still means the remote
/// user's home, except after a `--` word: what follows it (an agent's name, `exec`'s
/// command as the operator typed it) means exactly what it says.
pub fn remote_command(words: &[&str]) -> String {
    let mut literal = false;
    words
        .iter()
        .map(|word| {
            let quoted = match word.strip_prefix("~/") {
                Some(rest) if !rest.is_empty() && !literal => format!("~/{}", sh_quote(rest)),
                _ => sh_quote(word),
            };
            literal |= *word == "--";
            quoted
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Ask the host's phoenix (`phoenix`, as the spec names the program there) one thing.
pub fn ask(
    transport: &dyn Transport,
    phoenix: &str,
    call: Call,
    timeout: Duration,
) -> Result<Reply, HostError> {
    ask_request(transport, phoenix, &Request::new(call), timeout)
}

/// [`ask`] with the whole request (its owed fences: see [`Request::owed_fences`]).
pub fn ask_request(
    transport: &dyn Transport,
    phoenix: &str,
    request: &Request,
    timeout: Duration,
) -> Result<Reply, HostError> {
    let request = serde_json::to_vec(request).expect("a request serializes");
    let finished = transport
        .call(&[phoenix, "host"], &request, timeout)
        .map_err(HostError::Transport)?;
    let host = transport.host().to_string();
    let reply: Reply = match serde_json::from_str(finished.stdout.trim()) {
        Ok(reply) => reply,
        Err(_) => return Err(no_protocol(&host, phoenix, &finished)),
    };
    if reply.format_version != FORMAT_VERSION {
        return Err(HostError::VersionMismatch {
            host,
            theirs: reply.phoenix_version,
            their_format: reply.format_version,
        });
    }
    match reply.error {
        Some(error) if !reply.ok => Err(HostError::Remote {
            host,
            kind: error.kind,
            message: error.message,
        }),
        _ => Ok(reply),
    }
}

/// The host answered with something that is not a reply: no phoenix there, or one too old to
/// know `phoenix host`.
fn no_protocol(host: &str, phoenix: &str, finished: &Finished) -> HostError {
    let said = finished.stderr_line();
    let detail = match finished.status.code() {
        Some(127) => format!("`{phoenix}` was not found there ({said})"),
        Some(126) => format!("`{phoenix}` cannot be run there ({said})"),
        _ => format!(
            "`{phoenix} host` did not answer in the host protocol ({}: {}); it is not phoenix, or one older than the host protocol",
            finished.describe_status(),
            if said.is_empty() {
                crate::process::first_line(&finished.stdout)
            } else {
                said
            }
        ),
    };
    HostError::NoPhoenix {
        host: host.to_string(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_words_are_quoted_and_a_home_prefix_still_expands() {
        assert_eq!(remote_command(&["phoenix", "host"]), "phoenix host");
        assert_eq!(
            remote_command(&["~/bin/phoenix x", "host"]),
            "~/'bin/phoenix x' host"
        );
        assert_eq!(
            remote_command(&["/opt/a'b/phoenix", "host"]),
            r"'/opt/a'\''b/phoenix' host"
        );
        assert_eq!(remote_command(&["$(reboot)", "host"]), "'$(reboot)' host");
        assert_eq!(
            remote_command(&["~/bin/phoenix", "exec", "a", "--", "cat", "~/x"]),
            "~/bin/phoenix exec a -- cat '~/x'"
        );
    }
}
