//! `[[host]]` tables and the agents' `host` key.

use std::collections::HashMap;

use super::super::raw::{RawAgent, RawHost, Spanned};
use super::super::{HostSpec, THIS_MACHINE, check_destination, check_remote_path, default_dir};
use super::Validator;
use crate::diag::did_you_mean;

impl Validator<'_> {
    /// Every valid `[[host]]`, each with a name of its own.
    pub(super) fn hosts(&mut self, raw: &[Spanned<RawHost>], fleet: &str) -> Vec<HostSpec> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut hosts = Vec::new();
        for table in raw {
            let errors_before = self.diags.len();
            let host = table.get_ref();
            let Some(raw_name) = &host.name else {
                self.error(
                    "[[host]] has no `name`".into(),
                    Some(table.span().start..table.span().start + 1),
                    "add `name = \"…\"` (letters, digits, `_`, `-`); agents name it in `host`",
                );
                continue;
            };
            let name = self.name(raw_name, "host name");
            if name == THIS_MACHINE {
                self.error(
                    format!("a host cannot be named `{THIS_MACHINE}`"),
                    Some(raw_name.span()),
                    "`local` means this machine (its part of `plan` and `apply`, `phoenix move AGENT --to local`): give the host another name",
                );
            }
            if let Some(first) = seen.get(&name) {
                let (line, _) = crate::diag::line_col(self.source, *first);
                self.error(
                    format!("duplicate host name `{name}`"),
                    Some(raw_name.span()),
                    &format!("first defined on line {line}; host names must be unique"),
                );
            }
            seen.entry(name.clone()).or_insert(raw_name.span().start);
            let ssh = match &host.ssh {
                None => {
                    self.error(
                        format!("host `{name}` has no `ssh`"),
                        Some(raw_name.span()),
                        "add `ssh = \"user@machine\"` (anything ssh accepts; ~/.ssh/config applies)",
                    );
                    String::new()
                }
                Some(ssh) => {
                    if let Err(e) = check_destination(ssh.get_ref()) {
                        self.error(
                            format!("host `{name}`: `ssh` {e}"),
                            Some(ssh.span()),
                            "give `user@machine`, a ~/.ssh/config alias or `ssh://user@machine:port`; ports, keys and jump hosts go in ~/.ssh/config",
                        );
                    }
                    ssh.get_ref().clone()
                }
            };
            let dir = self.remote_path(&host.dir, &name, "dir", default_dir(fleet));
            let phoenix = self.remote_path(&host.phoenix, &name, "phoenix", "phoenix".into());
            let tmux_socket = host.tmux_socket.as_ref().map(|s| self.tmux_socket(s));
            let binary = match &host.binary {
                Some(b) if b.get_ref().trim().is_empty() => {
                    self.error(
                        format!("host `{name}`: `binary` is empty"),
                        Some(b.span()),
                        "leave it out to copy the phoenix that runs `hosts install`, or name a phoenix on this machine (a static build: `target/x86_64-unknown-linux-musl/release/phoenix`)",
                    );
                    None
                }
                Some(b) => Some(self.path(b.get_ref())),
                None => None,
            };
            if self.diags.len() == errors_before {
                hosts.push(HostSpec {
                    name,
                    ssh,
                    dir,
                    phoenix,
                    phoenix_configured: host.phoenix.is_some(),
                    tmux_socket,
                    binary,
                });
            }
        }
        hosts
    }

    fn remote_path(
        &mut self,
        value: &Option<Spanned<String>>,
        host: &str,
        key: &str,
        default: String,
    ) -> String {
        let Some(v) = value else {
            return default;
        };
        if let Err(e) = check_remote_path(v.get_ref()) {
            self.error(
                format!("host `{host}`: `{key}` {e}"),
                Some(v.span()),
                "a path on that host; `~/` is the remote user's home",
            );
        }
        v.get_ref().clone()
    }

    /// The declared host an agent's `host` names; `None` for this machine, or once a host
    /// nobody declared is reported (the agent then counts as this machine's for the rest of
    /// the checks, and the spec is refused anyway).
    pub(super) fn agent_host(&mut self, raw: &RawAgent, hosts: &[HostSpec]) -> Option<String> {
        let written = raw.host.as_ref()?;
        let name = written.get_ref();
        if hosts.iter().any(|h| &h.name == name) {
            return Some(name.clone());
        }
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        let hint = match (did_you_mean(name, &names), names.is_empty()) {
            (Some(s), _) => format!("did you mean `{s}`? declared hosts: {}", names.join(", ")),
            (None, true) => format!(
                "declare it: [[host]] name = \"{name}\" ssh = \"user@machine\"; leave `host` out for this machine"
            ),
            (None, false) => format!(
                "declared hosts: {}; leave `host` out for this machine",
                names.join(", ")
            ),
        };
        let agent = raw.name.as_ref().map_or("?", |n| n.get_ref().as_str());
        self.error(
            format!("agent `{agent}`: host `{name}` is not declared"),
            Some(written.span()),
            &hint,
        );
        None
    }
}
