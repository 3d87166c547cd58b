//! What the operator's machine remembers of each host between commands, in
//! `<state_dir>/hosts/known/<host>.json`: where `phoenix hosts install` put phoenix there
//! (used as the host's `phoenix` when phoenix.toml does not set one), written whole
//! (temporary file, sync, rename).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::state;

/// The record of one host is small: anything longer was not written by phoenix.
const MAX_BYTES: u64 = 64 << 10;

/// One host's record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Known {
    /// The path `hosts install` copied phoenix to, as the host's shell reads it (`~/` is the
    /// remote home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phoenix: Option<String>,
    /// When it did (RFC 3339) and which version it copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_version: Option<String>,
}

/// Where `host`'s record is.
pub fn path(state_dir: &Path, host: &str) -> PathBuf {
    state_dir
        .join("hosts")
        .join("known")
        .join(format!("{host}.json"))
}

/// `host`'s record; an empty one when there is none or it cannot be read (it only spares
/// setting `phoenix` by hand: without it, the spec's default applies).
pub fn load(state_dir: &Path, host: &str) -> Known {
    state::bounded::read_whole(
        &path(state_dir, host),
        MAX_BYTES,
        state::bounded::Links::Refuse,
    )
    .ok()
    .and_then(|bytes| serde_json::from_slice(&bytes).ok())
    .unwrap_or_default()
}

/// Write `host`'s record whole.
pub fn save(state_dir: &Path, host: &str, known: &Known) -> crate::error::Result<()> {
    let file = path(state_dir, host);
    let parent = file.parent().unwrap_or(state_dir);
    state::create_private_dir(parent)
        .map_err(|e| Error::msg(format!("cannot make `{}`: {e}", parent.display())))?;
    let bytes = serde_json::to_vec_pretty(known)?;
    state::file::write_atomic(&file, &bytes, 0o600, true)
        .map_err(|e| Error::msg(format!("cannot write `{}`: {e}", file.display())))
}

/// Record that `hosts install` put phoenix at `phoenix` on `host`.
pub fn installed(state_dir: &Path, host: &str, phoenix: &str) -> crate::error::Result<()> {
    let mut known = load(state_dir, host);
    known.phoenix = Some(phoenix.to_string());
    known.installed_at = Some(state::now_rfc3339());
    known.installed_version = Some(super::protocol::phoenix_version().to_string());
    save(state_dir, host, &known)
}

/// The host's `phoenix` as the operator runs it: the one phoenix.toml sets, else the one
/// `hosts install` recorded, else the spec's default (found on the remote PATH).
pub fn phoenix_of(state_dir: &Path, host: &crate::spec::HostSpec) -> String {
    if host.phoenix_configured {
        return host.phoenix.clone();
    }
    load(state_dir, &host.name)
        .phoenix
        .filter(|p| crate::spec::check_remote_path(p).is_ok())
        .unwrap_or_else(|| host.phoenix.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(phoenix: &str, configured: bool) -> crate::spec::HostSpec {
        crate::spec::HostSpec {
            name: "gpu-1".into(),
            ssh: "gpu-1".into(),
            dir: "~/x".into(),
            phoenix: phoenix.into(),
            phoenix_configured: configured,
            tmux_socket: None,
            binary: None,
        }
    }

    #[test]
    fn the_installed_path_is_used_unless_phoenix_toml_sets_one() {
        let tmp = tempfile::tempdir().unwrap();
        let state_dir = tmp.path().join("state");
        assert_eq!(phoenix_of(&state_dir, &host("phoenix", false)), "phoenix");
        installed(&state_dir, "gpu-1", "~/.local/bin/phoenix").unwrap();
        assert_eq!(
            phoenix_of(&state_dir, &host("phoenix", false)),
            "~/.local/bin/phoenix"
        );
        assert_eq!(
            phoenix_of(&state_dir, &host("/opt/phoenix", true)),
            "/opt/phoenix"
        );
        // A record that is not one changes nothing.
        std::fs::write(path(&state_dir, "gpu-1"), "{").unwrap();
        assert_eq!(phoenix_of(&state_dir, &host("phoenix", false)), "phoenix");
    }
}
