//! A `[sandbox.NAME]` profile once validated and applied to one agent: its paths with
//! `{workdir}`, `{state_dir}`, `{name}` and `~` filled in. What phoenix adds on its own (the
//! secrets it hides, the files it protects, the CLI's session files) is not part of it: that
//! is `crate::sandbox`'s, so a better default reaches every fleet without a config change.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod allow;

/// What the sandboxed CLI may reach over the network. Its own network namespace always.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Its own loopback only.
    None,
    /// The hosts in `allow`, through phoenix's proxy.
    Allow,
    /// Any host, through phoenix's proxy (HTTP and HTTPS only).
    Host,
}

impl Network {
    pub const NAMES: [&'static str; 3] = ["none", "allow", "host"];

    pub fn parse(s: &str) -> Option<Network> {
        match s {
            "none" => Some(Network::None),
            "allow" => Some(Network::Allow),
            "host" => Some(Network::Host),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Allow => "allow",
            Network::Host => "host",
        }
    }

    /// Whether the CLI reaches the network through phoenix's proxy.
    pub fn proxied(self) -> bool {
        self != Network::None
    }
}

/// `limits`: what the agent's processes may take. Unset: no limit of phoenix's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self == &Limits::default()
    }
}

/// One agent's sandbox: the profile's name and keys, its paths made absolute for this agent.
/// Part of the agent's launch: a changed profile is drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub profile: String,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub hide: Vec<PathBuf>,
    pub protect: Vec<PathBuf>,
    pub network: Network,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
}

/// The placeholders a profile's paths may use.
pub const PATH_PLACEHOLDERS: [&str; 3] = ["{workdir}", "{state_dir}", "{name}"];

/// How to get bubblewrap, for the error a missing one gives.
pub const INSTALL_HINT: &str = "install bubblewrap: `sudo apt-get install bubblewrap` (Debian, Ubuntu), `sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch); or set `sandbox = \"none\"` on the agent";

/// The `bwrap` program on phoenix's `PATH`, if any.
pub fn bwrap_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|p| p.is_file())
}

/// `"4G"`, `"512M"`, `"64k"`, `"1000000"` → bytes (powers of 1024).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = number.parse().ok()?;
    let shift = match unit
        .trim()
        .to_ascii_lowercase()
        .trim_end_matches(['b', 'i'])
    {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(parse_bytes("4G"), Some(4 << 30));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("1000"), Some(1000));
        for bad in ["", "G", "4X", "-1G", "4.5G", "99999999999T"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
