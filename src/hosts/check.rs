//! `phoenix hosts check`: `doctor` for every `[[host]]` at once. Each host is asked in
//! parallel with its own slice of the fleet, so an unreachable host costs its connect timeout
//! and never delays the others' answers.

use std::collections::BTreeMap;

use serde::Serialize;

use super::HostError;
use super::fleet::{self, Link, READ_TIMEOUT};
use super::protocol::Call;
use crate::spec::Spec;
use crate::world::Check;

/// What one host answered (or why it did not).
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub host: String,
    /// How it is reached (`ssh deploy@gpu-1`).
    pub via: String,
    /// The transport got through (ssh connected and ran something there).
    pub reachable: bool,
    /// What went wrong reaching the host's phoenix: ssh's error, no phoenix there, another
    /// protocol version.
    pub error: Option<String>,
    pub hint: Option<String>,
    pub phoenix_version: Option<String>,
    pub os: Option<String>,
    pub arch: Option<String>,
    /// The host's own rows: its phoenix, tmux, its directory, each agent's command and workdir.
    pub checks: Vec<Check>,
}

impl HostReport {
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.checks.iter().all(|c| c.ok)
    }

    fn failed(link: &Link, error: &HostError) -> HostReport {
        HostReport {
            host: link.name().to_string(),
            via: fleet::describe(link),
            reachable: !matches!(error, HostError::Transport(_)),
            error: Some(error.to_string()),
            hint: error.hint(),
            phoenix_version: match error {
                HostError::VersionMismatch { theirs, .. } => Some(theirs.clone()),
                _ => None,
            },
            os: None,
            arch: None,
            checks: Vec::new(),
        }
    }
}

/// Every host's report, in the order the hosts are declared.
pub fn check_all(spec: &Spec) -> crate::error::Result<Vec<HostReport>> {
    let slices = spec
        .hosts
        .iter()
        .map(|h| Ok((h.name.clone(), fleet::slice(spec, &h.name)?)))
        .collect::<crate::error::Result<BTreeMap<_, _>>>()?;
    let links = fleet::links(spec);
    Ok(fleet::each(&links, |link| {
        let mut report = check_one(link, slices[link.name()].clone());
        // What `hosts install` would put there, also (above all) where no phoenix answers.
        if report.reachable {
            report.checks.push(super::binary::install_row(link));
        }
        report
    }))
}

fn check_one(link: &Link, slice: String) -> HostReport {
    let call = Call::Check {
        dir: link.host.dir.clone(),
        slice,
    };
    let reply = match link.ask(call, READ_TIMEOUT) {
        Ok(reply) => reply,
        Err(e) => return HostReport::failed(link, &e),
    };
    let mut report = HostReport {
        host: link.name().to_string(),
        via: fleet::describe(link),
        reachable: true,
        error: None,
        hint: None,
        phoenix_version: Some(reply.phoenix_version),
        os: Some(reply.os),
        arch: Some(reply.arch),
        checks: Vec::new(),
    };
    match serde_json::from_value::<Vec<Check>>(reply.result) {
        Ok(mut checks) => {
            // The host's fixes name it as the operator does.
            for fix in checks.iter_mut().filter_map(|c| c.fix.as_mut()) {
                *fix = fix.replace(super::serve::HOST_PLACEHOLDER, link.name());
            }
            report.checks = checks
        }
        Err(e) => {
            report.error = Some(format!(
                "host `{}`: the answer is not a list of checks: {e}",
                link.name()
            ))
        }
    }
    report
}
