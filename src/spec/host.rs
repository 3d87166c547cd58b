//! The machines of a fleet: each `[[host]]` runs its own phoenix for its own agents, and the
//! operator's phoenix reaches it over ssh. What the operator's spec knows of a host, and of
//! the agents declared to run there (the host validates and runs them itself).

use serde::Serialize;

/// What `plan` and `apply` label this machine's part with: no `[[host]]` may take the name.
pub const THIS_MACHINE: &str = "local";

/// One `[[host]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostSpec {
    pub name: String,
    /// What `ssh` is given as the destination: `user@host`, a `~/.ssh/config` alias, or
    /// `ssh://user@host:port`. Checked by [`check_destination`].
    pub ssh: String,
    /// Where the host keeps its slice of the fleet (phoenix.toml, its state): a path on the
    /// host, `~/` meaning the remote user's home. Default [`default_dir`].
    pub dir: String,
    /// The phoenix program on the host. Default `phoenix` (found on the remote PATH), or
    /// where `phoenix hosts install` put it ([`crate::hosts::known`]).
    pub phoenix: String,
    /// `phoenix` is written in phoenix.toml: it wins over what `hosts install` recorded.
    #[serde(skip)]
    pub phoenix_configured: bool,
    /// The host's tmux server (`tmux -L`); `None`: the host's default for its slice.
    pub tmux_socket: Option<String>,
    /// The phoenix (on this machine) `hosts install` copies to the host; `None`: the one
    /// running. Never sent to the host.
    #[serde(skip)]
    pub binary: Option<std::path::PathBuf>,
}

/// An agent declared with `host = "…"`: it runs there, never on this machine. The operator
/// knows its name and its host; the host checks the rest (its workdir, its command) itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteAgent {
    pub name: String,
    pub host: String,
    pub enabled: bool,
}

/// Where a host keeps a fleet's slice unless `dir` says otherwise.
pub fn default_dir(fleet: &str) -> String {
    format!("~/.phoenix-hosts/{fleet}")
}

/// An ssh destination phoenix passes on: never an option (a leading `-`), and only the
/// characters a user, host name, IPv6 address or `ssh://` URL needs. ssh always gets an argv,
/// never a shell; this keeps a destination from smuggling options or `ProxyCommand`s.
pub fn check_destination(destination: &str) -> Result<(), String> {
    if destination.is_empty() {
        return Err("is empty".into());
    }
    if destination.starts_with('-') {
        return Err("starts with `-` (ssh would read it as an option)".into());
    }
    if let Some(bad) = destination
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "@._-:[]/%+".contains(*c)))
    {
        return Err(format!(
            "contains {bad:?}: only letters, digits and @ . _ - : [ ] / % + are allowed (options belong in ~/.ssh/config)"
        ));
    }
    Ok(())
}

/// A path on a host (`dir`, `phoenix`): sent as one argv word the remote shell sees quoted,
/// so only what no file name needs is refused: control characters, and an empty path.
pub fn check_remote_path(path: &str) -> Result<(), String> {
    if path.trim().is_empty() {
        return Err("is empty".into());
    }
    if let Some(bad) = path.chars().find(|c| c.is_control()) {
        return Err(format!("contains the control character {bad:?}"));
    }
    Ok(())
}
