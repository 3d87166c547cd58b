//! `[sandbox.NAME]` profiles and an agent's `sandbox` key: the profile's keys are checked
//! once, then its paths are filled in for each agent that names it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Validator;
use crate::diag::suggest;
use crate::spec::raw::{RawSandbox, Spanned};
use crate::spec::sandbox::{Limits, Network, PATH_PLACEHOLDERS, SandboxSpec, parse_bytes};
use crate::spec::{expand_path, valid_name};

/// The value of an agent's `sandbox` that runs it without one, over `[defaults]`.
pub const NO_SANDBOX: &str = "none";

/// A profile as written, its keys checked: paths still hold their placeholders.
#[derive(Debug, Clone)]
pub(super) struct Profile {
    read: Option<Vec<String>>,
    write: Option<Vec<String>>,
    hide: Vec<String>,
    protect: Vec<String>,
    network: Network,
    allow: Vec<String>,
    limits: Limits,
}

/// The profiles by name; `None` for one already reported, so its agents are not reported
/// again.
pub(super) type Profiles = BTreeMap<String, Option<Profile>>;

const PATH_HINT: &str = "an absolute path, `~/…`, a path relative to phoenix.toml, or one starting with {workdir}, {state_dir}; {name} is the agent's name";

impl Validator<'_> {
    pub(super) fn sandboxes(&mut self, raw: &BTreeMap<String, Spanned<RawSandbox>>) -> Profiles {
        raw.iter()
            .map(|(name, table)| {
                let errors_before = self.diags.len();
                if !valid_name(name) || name == NO_SANDBOX {
                    self.error(
                        format!("sandbox profile `{name}` is not a valid name"),
                        Some(table.span()),
                        &format!(
                            "{}; `{NO_SANDBOX}` means no sandbox",
                            crate::spec::NAME_HINT
                        ),
                    );
                }
                let profile = self.profile(name, table.get_ref());
                (
                    name.clone(),
                    profile.filter(|_| self.diags.len() == errors_before),
                )
            })
            .collect()
    }

    fn profile(&mut self, name: &str, raw: &RawSandbox) -> Option<Profile> {
        let what = |key: &str| format!("[sandbox.{name}] {key}");
        let mut paths = |key: &str, value: &Option<Spanned<Vec<String>>>| {
            value.as_ref().map(|list| {
                for p in list.get_ref() {
                    self.path_template(p, &what(key), list.span());
                }
                list.get_ref().clone()
            })
        };
        let read = paths("read", &raw.read);
        let write = paths("write", &raw.write);
        let hide = paths("hide", &raw.hide).unwrap_or_default();
        let protect = paths("protect", &raw.protect).unwrap_or_default();
        let network = match &raw.network {
            None => Network::None,
            Some(v) => Network::parse(v.get_ref()).unwrap_or_else(|| {
                self.error(
                    format!("{}: unknown network `{}`", what("network"), v.get_ref()),
                    Some(v.span()),
                    &format!(
                        "{}: \"none\" (no network), \"allow\" (only the hosts in `allow`), \"host\" (any host, through phoenix's proxy)",
                        suggest(v.get_ref(), &Network::NAMES)
                    ),
                );
                Network::None
            }),
        };
        let allow = raw.allow.as_ref().map_or_else(Vec::new, |list| {
            if network != Network::Allow {
                self.error(
                    format!("{}: `allow` is only read with network = \"allow\"", what("allow")),
                    Some(list.span()),
                    "set `network = \"allow\"`, or leave `allow` out",
                );
            }
            // The proxy's own parser: what validate accepts, the proxy serves.
            if let Err(e) = crate::spec::sandbox::allow::Allow::parse(list.get_ref()) {
                self.error(
                    format!("{}: {e}", what("allow")),
                    Some(list.span()),
                    "a host name (`api.anthropic.com`), `*.example.com` for its subdomains, or `host:port`",
                );
            }
            list.get_ref().clone()
        });
        if network == Network::Allow && allow.is_empty() {
            let span = raw.network.as_ref().map(|n| n.span());
            self.error(
                format!("{}: network = \"allow\" with no host in `allow`", what("network")),
                span,
                "list the hosts the CLI needs, e.g. allow = [\"api.anthropic.com\"], or use network = \"none\"",
            );
        }
        let mut limits = Limits::default();
        if let Some(l) = &raw.limits {
            let why = "a limit below this stops the CLI from starting at all";
            limits.processes = l
                .processes
                .as_ref()
                .and_then(|v| self.bounded(v, &what("limits.processes"), 16..=u64::MAX, why));
            limits.open_files = l
                .open_files
                .as_ref()
                .and_then(|v| self.bounded(v, &what("limits.open_files"), 64..=u64::MAX, why));
            limits.memory = l
                .memory
                .as_ref()
                .and_then(|v| match parse_bytes(v.get_ref()) {
                    Some(n) if n >= 64 << 20 => Some(n),
                    Some(_) => {
                        self.error(
                            format!("{} must be at least 64M", what("limits.memory")),
                            Some(v.span()),
                            why,
                        );
                        None
                    }
                    None => {
                        self.error(
                            format!("{}: `{}` is not a size", what("limits.memory"), v.get_ref()),
                            Some(v.span()),
                            "a number of bytes with an optional unit: \"4G\", \"512M\"",
                        );
                        None
                    }
                });
        }
        Some(Profile {
            read,
            write,
            hide,
            protect,
            network,
            allow,
            limits,
        })
    }

    /// A path of a profile: only the known placeholders, and only at its start (`{name}`
    /// anywhere).
    fn path_template(&mut self, text: &str, what: &str, span: std::ops::Range<usize>) {
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let after = &rest[open..];
            let known = PATH_PLACEHOLDERS.iter().find(|p| after.starts_with(**p));
            match known {
                Some(p) if *p == "{name}" || (open == 0 && rest.len() == text.len()) => {
                    rest = &after[p.len()..];
                }
                Some(p) => {
                    self.error(
                        format!("{what}: `{text}` has {p} inside it"),
                        Some(span),
                        &format!("{p} is a whole path: it may only start one, e.g. \"{p}/build\""),
                    );
                    return;
                }
                None => {
                    self.error(
                        format!("{what}: `{text}` has an unknown placeholder"),
                        Some(span),
                        PATH_HINT,
                    );
                    return;
                }
            }
        }
        if text.trim().is_empty() {
            self.error(format!("{what}: an empty path"), Some(span), PATH_HINT);
        }
    }

    /// The agent's sandbox: its own `sandbox` key, else [defaults]'; `None` without one.
    pub(super) fn agent_sandbox(
        &mut self,
        value: Option<&Spanned<String>>,
        agent: &str,
        workdir: &Path,
        state_dir: &Path,
        home: Option<&Path>,
    ) -> Option<SandboxSpec> {
        let v = value?;
        let name = v.get_ref().as_str();
        if name == NO_SANDBOX || name.is_empty() {
            return None;
        }
        let Some(profile) = self.sandbox_profiles.get(name) else {
            let names: Vec<&str> = self.sandbox_profiles.keys().map(String::as_str).collect();
            let hint = if names.is_empty() {
                format!(
                    "declare it: [sandbox.{name}] (see docs/sandbox.md), or use \"{NO_SANDBOX}\""
                )
            } else {
                format!(
                    "{}; or \"{NO_SANDBOX}\" for no sandbox",
                    suggest(name, &names)
                )
            };
            self.error(
                format!("agent `{agent}`: no sandbox profile `{name}`"),
                Some(v.span()),
                &hint,
            );
            return None;
        };
        let profile = profile.clone()?;
        if self.options.check_filesystem && crate::spec::sandbox::bwrap_path().is_none() {
            self.error(
                format!("agent `{agent}` runs in sandbox `{name}`, but bubblewrap (`bwrap`) is not installed"),
                Some(v.span()),
                crate::spec::sandbox::INSTALL_HINT,
            );
            return None;
        }
        let fill = |text: &String| -> PathBuf {
            let text = text.replace("{name}", agent);
            let (base, rest) = if let Some(rest) = text.strip_prefix("{workdir}") {
                (Some(workdir), rest)
            } else if let Some(rest) = text.strip_prefix("{state_dir}") {
                (Some(state_dir), rest)
            } else {
                (None, text.as_str())
            };
            match (base, home) {
                (Some(base), _) => crate::spec::tidy(&base.join(rest.trim_start_matches('/'))),
                (None, Some(home)) if rest == "~" => home.to_path_buf(),
                (None, Some(home)) if rest.starts_with("~/") => {
                    crate::spec::tidy(&home.join(&rest[2..]))
                }
                (None, _) => expand_path(rest, self.dir),
            }
        };
        let fill_all = |list: &[String]| list.iter().map(fill).collect::<Vec<_>>();
        Some(SandboxSpec {
            profile: name.to_string(),
            read: profile
                .read
                .as_deref()
                .map_or_else(|| vec![PathBuf::from("/")], fill_all),
            write: profile
                .write
                .as_deref()
                .map_or_else(|| vec![workdir.to_path_buf()], fill_all),
            hide: fill_all(&profile.hide),
            protect: fill_all(&profile.protect),
            network: profile.network,
            allow: profile.allow,
            limits: profile.limits,
        })
    }
}
