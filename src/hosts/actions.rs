//! Fleet-wide actions across hosts: `restart`, `stop` and `start` of agents of hosts go to
//! their host's phoenix (one call per host, every host at once) and come back as one result
//! per agent, labelled with its host; `attach` and `logs --follow` become an interactive
//! `ssh -t` running the host's own phoenix there.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::fleet::{Link, each, links};
use super::reads::{agents_of, document_of};
use super::{HostError, TransportError};
use crate::spec::Spec;

/// How long an action may take on a host: the host's own phoenix gives up after a minute
/// (waiting for the fleet lock included), and its answer is worth the wait.
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(90);

/// What became of one agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentResult {
    pub agent: String,
    /// `None`: this machine.
    pub host: Option<String>,
    pub ok: bool,
    pub detail: String,
}

/// What to do on one host: these agents, or (`None`) all of them (`restart --all`).
pub type Targets = BTreeMap<String, Option<Vec<String>>>;

/// The named agents that run on hosts, grouped by host, and the rest (this machine's, and
/// names phoenix.toml does not know, which the local command reports as it always has).
pub fn split(spec: &Spec, names: &[String]) -> (Vec<String>, Targets) {
    let mut local = Vec::new();
    let mut remote: Targets = BTreeMap::new();
    for name in names {
        match super::reads::host_of(spec, name) {
            Some(host) => {
                let agents = remote.entry(host.to_string()).or_insert(Some(Vec::new()));
                if let Some(agents) = agents
                    && !agents.contains(name)
                {
                    agents.push(name.clone());
                }
            }
            None => local.push(name.clone()),
        }
    }
    (local, remote)
}

/// Every host that phoenix.toml gives an enabled agent, for `--all`.
pub fn every_host(spec: &Spec) -> Targets {
    spec.hosts
        .iter()
        .filter(|h| agents_of(spec, &h.name).any(|a| a.enabled))
        .map(|h| (h.name.clone(), None))
        .collect()
}

/// `verb` (`restart`, `stop` or `start`, with `flags`) on each host of `targets`, every host
/// at once; one result per agent, in host order.
pub fn act(spec: &Spec, verb: &str, flags: &[&str], targets: &Targets) -> Vec<AgentResult> {
    let asked: Vec<Link> = links(spec)
        .into_iter()
        .filter(|l| targets.contains_key(l.name()))
        .collect();
    each(&asked, |link| {
        let agents = targets.get(link.name()).cloned().flatten();
        let mut args: Vec<String> = [verb, "--json"].iter().map(|a| a.to_string()).collect();
        args.extend(flags.iter().map(|f| f.to_string()));
        match &agents {
            Some(agents) => {
                args.push("--".into());
                args.extend(agents.iter().cloned());
            }
            None => args.push("--all".into()),
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let all = agents.is_none();
        let named = agents.unwrap_or_else(|| {
            agents_of(spec, link.name())
                .filter(|a| a.enabled)
                .map(|a| a.name.clone())
                .collect()
        });
        let answer = link
            .run(&args, ACTION_TIMEOUT)
            .and_then(|ran| document_of(link.name(), &ran));
        results_of(link.name(), &named, all, answer)
    })
    .into_iter()
    .flatten()
    .collect()
}

/// What `phoenix down` did on one host.
#[derive(Debug)]
pub struct HostDown {
    pub host: String,
    /// One result per agent the host stopped (or failed to); for a host that did not answer,
    /// the agents phoenix.toml puts there, each failed with the host's error.
    pub agents: Vec<AgentResult>,
    /// What became of the host's tmux server (its `down --json`'s `server`), when it answered.
    pub server: Option<String>,
    /// Why the host did not go down: nothing was done there.
    pub error: Option<HostError>,
}

/// `phoenix down` (`--remove-hooks` with `remove_hooks`) on each of `hosts`, every host at
/// once: each host's own `down` records the fleet down there first (its daemon leaves it
/// down) and stops every agent of its fleet, declared or not. A host that cannot be reached
/// is reported, and the others still go down.
pub fn down(spec: &Spec, hosts: &[String], remove_hooks: bool) -> Vec<HostDown> {
    let asked: Vec<Link> = links(spec)
        .into_iter()
        .filter(|l| hosts.iter().any(|h| h == l.name()))
        .collect();
    each(&asked, |link| {
        let mut args = vec!["down", "--json"];
        if remove_hooks {
            args.push("--remove-hooks");
        }
        let answer = link
            .run(&args, ACTION_TIMEOUT)
            .and_then(|ran| document_of(link.name(), &ran));
        let done = |agents, server: &str| HostDown {
            host: link.name().to_string(),
            agents,
            server: Some(server.to_string()),
            error: None,
        };
        match answer {
            Ok(doc) => done(
                results_of(link.name(), &[], false, Ok(doc.clone())),
                doc["server"].as_str().unwrap_or("unknown"),
            ),
            // Never applied: no fleet there, nothing runs for it.
            Err(e) if super::reads::not_applied(&e) => {
                done(Vec::new(), "not running (never applied there)")
            }
            Err(error) => {
                let named: Vec<String> = agents_of(spec, link.name())
                    .map(|a| a.name.clone())
                    .collect();
                HostDown {
                    host: link.name().to_string(),
                    agents: results_of(link.name(), &named, false, Err(error.clone())),
                    server: None,
                    error: Some(error),
                }
            }
        }
    })
}

/// One host's answer as one result per agent: its own per-agent results, a single
/// restart's report, or its error for every agent it was asked about.
fn results_of(
    host: &str,
    named: &[String],
    all: bool,
    answer: Result<Value, HostError>,
) -> Vec<AgentResult> {
    let result = |agent: &str, ok: bool, detail: String| AgentResult {
        agent: agent.to_string(),
        host: Some(host.to_string()),
        ok,
        detail,
    };
    let doc = match answer {
        Ok(doc) => doc,
        // `restart --all` where every agent of the host is stopped: nothing to do there.
        Err(HostError::Remote { message, .. })
            if all && message.starts_with("no agent to restart") =>
        {
            return Vec::new();
        }
        Err(error) => {
            let detail = match &error {
                HostError::Transport(TransportError::Unreachable { .. }) => format!(
                    "{error}; nothing was done there{}",
                    error.hint().map(|h| format!(" ({h})")).unwrap_or_default()
                ),
                _ => error.to_string(),
            };
            return named
                .iter()
                .map(|agent| result(agent, false, detail.clone()))
                .collect();
        }
    };
    if let Some(rows) = doc["agents"].as_array() {
        return rows
            .iter()
            .map(|r| {
                result(
                    r["agent"].as_str().unwrap_or("?"),
                    r["ok"] == true,
                    r["detail"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
    }
    // One agent's `restart --json`: its report (the pane and pid it runs in now).
    let agent = doc["agent"].as_str().unwrap_or("?");
    let detail = match (doc["pane"].as_str(), doc["pid"].as_u64()) {
        (Some(pane), Some(pid)) => format!("restarted in pane {pane} (pid {pid})"),
        _ => "restart requested; not running yet".to_string(),
    };
    vec![result(agent, true, detail)]
}

/// `text` pasted into `agent`'s pane by the host `link` reaches, confirmed there: its report
/// (`pane`, `attempts`, `confirmed_by`, `waited_ms`). The text travels in the request on
/// stdin, never in an argv; the host's paste makes it inert.
pub fn inject_text(link: &Link, agent: &str, text: &str) -> Result<Value, HostError> {
    let call = super::protocol::Call::Inject {
        dir: link.host.dir.clone(),
        agent: agent.to_string(),
        text: text.to_string(),
    };
    link.ask(call, ACTION_TIMEOUT).map(|reply| reply.result)
}

/// The host's phoenix.toml, as its own phoenix is given it (`~/` stays the remote home).
pub fn remote_config(link: &Link) -> String {
    format!(
        "{}/{}",
        link.host.dir.trim_end_matches('/'),
        crate::spec::DEFAULT_CONFIG
    )
}

/// The local argv that runs `phoenix --config <dir>/phoenix.toml <args>` on `link`'s host
/// with a terminal (`attach`, `logs --follow`): ssh with the fleet's options, the words
/// quoted for the remote shell. The shared connections' directory is made first.
pub fn interactive(link: &Link, args: &[&str]) -> Result<Vec<OsString>, HostError> {
    super::ssh::ensure_private_dir(&link.transport.control_dir).map_err(|e| {
        HostError::Transport(TransportError::Local {
            host: link.name().to_string(),
            detail: format!(
                "cannot make the ssh control directory `{}`: {e}",
                link.transport.control_dir.display()
            ),
        })
    })?;
    let config = remote_config(link);
    let mut words = vec![link.host.phoenix.as_str(), "--config", config.as_str()];
    words.extend(args);
    Ok(link.interactive(&words))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::protocol::ErrorKind;
    use serde_json::json;

    #[test]
    fn a_hosts_answers_become_one_result_per_agent() {
        let many = json!({"agents": [{"agent": "a", "ok": true, "detail": "stopped"},
                                    {"agent": "b", "ok": false, "detail": "no pane"}]});
        let results = results_of("gpu-1", &["a".into(), "b".into()], false, Ok(many));
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].host.as_deref(), Some("gpu-1"));
        assert!(!results[1].ok);
        let one = json!({"agent": "a", "pane": "%3", "pid": 77});
        let results = results_of("gpu-1", &["a".into()], false, Ok(one));
        assert_eq!(results[0].detail, "restarted in pane %3 (pid 77)");
        let refused = Err(HostError::Transport(TransportError::Unreachable {
            host: "gpu-1".into(),
            detail: "Connection refused".into(),
        }));
        let results = results_of("gpu-1", &["a".into(), "b".into()], false, refused);
        assert!(
            results
                .iter()
                .all(|r| !r.ok && r.detail.contains("refused"))
        );
        let nothing = Err(HostError::Remote {
            host: "gpu-1".into(),
            kind: ErrorKind::Failed,
            message: "no agent to restart: every agent is disabled or stopped".into(),
        });
        assert!(results_of("gpu-1", &["a".into(), "b".into()], true, nothing).is_empty());
    }
}
