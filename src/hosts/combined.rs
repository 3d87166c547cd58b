//! One plan and one apply across this machine and every `[[host]]`. Each host plans and
//! applies its own slice of phoenix.toml (asked in parallel, each over its own transport);
//! this module gathers what the hosts answered, as data for the CLI to show. This machine's
//! part stays the CLI's, as on one host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::fleet::{self, Link};
use super::protocol::{Call, Ran};
use super::{HostError, TransportError};
use crate::diag::did_you_mean;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::plan::Pruning;
use crate::spec::Spec;

/// This machine's label in a combined plan: a `[[host]]` may not take the name.
pub const LOCAL: &str = crate::spec::THIS_MACHINE;

/// Why a host's part has no answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub message: String,
    pub hint: Option<String>,
    /// The host was not reached at all (ssh failed or timed out), which `--skip-unreachable`
    /// accepts; a host that answered with an error is never skipped.
    pub unreachable: bool,
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Failure {
        if let HostError::Remote { host, message, .. } = &e {
            // The host's own error as its phoenix prints it, without a second `error:`.
            let message = message
                .strip_prefix("error: ")
                .unwrap_or(message)
                .trim_end();
            return Failure::of(host, message.to_string());
        }
        Failure {
            unreachable: matches!(
                e,
                HostError::Transport(
                    TransportError::Unreachable { .. } | TransportError::Timeout { .. }
                )
            ),
            hint: e.hint(),
            message: e.to_string(),
        }
    }
}

impl Failure {
    fn of(host: &str, message: String) -> Failure {
        Failure {
            message: format!("host `{host}`: {message}"),
            hint: None,
            unreachable: false,
        }
    }
}

/// A file of a host's slice that the host does not have as the operator would send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SliceFile {
    /// Relative to the host's `dir`: `phoenix.toml`, `policies/…`, `templates/…`.
    pub path: String,
    /// The host has no such file yet (else it has another content).
    pub new: bool,
}

/// What a host plans for its slice.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    /// The slice's own warnings, as the host read it.
    pub warnings: Vec<String>,
    /// The files `apply` writes there first: a slice that changed without changing an agent
    /// (a threshold, a policy) still goes to the host, whose daemon runs on it.
    pub push: Vec<SliceFile>,
    /// What the host has of a slice: path → digest.
    pub digests: BTreeMap<String, String>,
}

impl Planned {
    pub fn is_empty(&self) -> bool {
        self.plan.is_empty() && self.push.is_empty()
    }
}

/// One host's part of the combined plan.
#[derive(Debug, Clone)]
pub struct HostPlan {
    pub host: String,
    /// Its agents by the operator's spec (those `apply` named, when it named some): what an
    /// unanswered host's part would have been about.
    pub agents: Vec<String>,
    pub outcome: std::result::Result<Planned, Failure>,
}

impl HostPlan {
    /// `{host, reachable, error, hint, plan, push, unknown, warnings}`: the host's entry of
    /// `plan --json` (`plan` is the host's own plan document, `null` without an answer).
    pub fn to_json(&self) -> Value {
        match &self.outcome {
            Ok(planned) => json!({
                "host": self.host,
                "reachable": true,
                "error": null,
                "hint": null,
                "plan": planned.plan.to_json(),
                "push": planned.push,
                "unknown": [],
                "warnings": planned.warnings,
            }),
            Err(failure) => json!({
                "host": self.host,
                "reachable": !failure.unreachable,
                "error": failure.message,
                "hint": failure.hint,
                "plan": null,
                "push": [],
                "unknown": self.agents,
                "warnings": [],
            }),
        }
    }
}

/// This machine's entry of `plan --json`, in the shape of a host's.
pub fn local_json(plan: &Plan) -> Value {
    json!({
        "host": LOCAL,
        "reachable": true,
        "error": null,
        "hint": null,
        "plan": plan.to_json(),
        "push": [],
        "unknown": [],
        "warnings": [],
    })
}

/// Which agents `apply NAME…` is about, by where each runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Targets {
    /// Names were given: only their parts take part, each with its own names.
    pub named: bool,
    pub local: Vec<String>,
    pub hosts: BTreeMap<String, Vec<String>>,
}

impl Targets {
    /// Every agent of every part.
    pub fn all() -> Targets {
        Targets::default()
    }

    /// The names given to `apply`, each once, split by where the agent runs. A name that no
    /// agent has here or on any host is an error, found before anything is sent.
    pub fn split(spec: &Spec, names: &[String]) -> Result<Targets> {
        let mut targets = Targets {
            named: !names.is_empty(),
            ..Targets::default()
        };
        for name in names {
            let list = if spec.agent(name).is_some() {
                &mut targets.local
            } else if let Some(remote) = spec.remote_agents.iter().find(|a| &a.name == name) {
                targets.hosts.entry(remote.host.clone()).or_default()
            } else {
                return Err(unknown_agent(spec, name));
            };
            if !list.contains(name) {
                list.push(name.clone());
            }
        }
        Ok(targets)
    }

    /// Whether `agent` takes part: every agent when no names were given.
    pub fn takes(&self, agent: &str) -> bool {
        !self.named
            || self.local.iter().any(|a| a == agent)
            || self.hosts.values().flatten().any(|a| a == agent)
    }

    /// Whether `host` takes part: every host when no names were given.
    pub fn includes(&self, host: &str) -> bool {
        !self.named || self.hosts.contains_key(host)
    }

    /// The names `host` is sent (none: all of its agents).
    pub fn of(&self, host: &str) -> &[String] {
        self.hosts.get(host).map(Vec::as_slice).unwrap_or_default()
    }
}

fn unknown_agent(spec: &Spec, name: &str) -> Error {
    let mut names = spec.agent_names();
    names.extend(spec.remote_agents.iter().map(|a| a.name.as_str()));
    let declared = format!("declared here and on the hosts: {}", names.join(", "));
    Error::Failed {
        message: format!(
            "no agent `{}` in `{}`",
            crate::text::shorten(name, 80),
            spec.file.display()
        ),
        hint: Some(match did_you_mean(name, &names) {
            Some(s) => format!("did you mean `{s}`? {declared}"),
            None => declared,
        }),
    }
}

/// The hosts that take part, each with its slice cut: everything that can fail on this
/// machine fails here, before anything is sent.
pub struct Hosts {
    links: Vec<Link>,
    slices: Vec<String>,
    files: BTreeMap<String, String>,
    targets: Targets,
    /// Each link's agents (all of them, or those named).
    agents: Vec<Vec<String>>,
}

impl Hosts {
    pub fn prepare(spec: &Spec, targets: Targets) -> Result<Hosts> {
        let links: Vec<Link> = fleet::links(spec)
            .into_iter()
            .filter(|l| targets.includes(l.name()))
            .collect();
        let slices = links
            .iter()
            .map(|l| fleet::slice(spec, l.name()))
            .collect::<Result<Vec<_>>>()?;
        let agents = links
            .iter()
            .map(|l| {
                spec.remote_agents
                    .iter()
                    .filter(|a| a.host == l.name())
                    .filter(|a| !targets.named || targets.of(l.name()).contains(&a.name))
                    .map(|a| a.name.clone())
                    .collect()
            })
            .collect();
        Ok(Hosts {
            links,
            slices,
            files: fleet::slice_files(spec)?,
            targets,
            agents,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Cut every slice from `text` (phoenix.toml as it is to be, step by step, during the
    /// moves of an apply) instead of the file.
    pub fn reslice(&mut self, spec: &Spec, text: &str) -> Result<()> {
        self.slices = self
            .links
            .iter()
            .map(|l| fleet::slice_of(spec, text, l.name()))
            .collect::<Result<Vec<_>>>()?;
        Ok(())
    }

    /// The hosts whose slice of `text` differs from the one they have: the one they are
    /// sent now, or the one cut from `sent`'s text for them (a move sent it since).
    pub fn outdated(
        &self,
        spec: &Spec,
        text: &str,
        sent: &BTreeMap<String, String>,
    ) -> Result<Vec<String>> {
        let mut outdated = Vec::new();
        for (link, slice) in self.links.iter().zip(&self.slices) {
            let host = link.name();
            let theirs = match sent.get(host) {
                Some(sent) => fleet::slice_of(spec, sent, host)?,
                None => slice.clone(),
            };
            if fleet::slice_of(spec, text, host)? != theirs {
                outdated.push(host.to_string());
            }
        }
        Ok(outdated)
    }

    /// Every host's plan for its slice, asked in parallel, in the spec's order.
    pub fn plan(&self, prune: Pruning) -> Vec<HostPlan> {
        let outcomes = fleet::each(&self.links, |link| {
            self.plan_one(link, &self.slices[self.index(link)], prune)
        });
        self.links
            .iter()
            .zip(&self.agents)
            .zip(outcomes)
            .map(|((link, agents), outcome)| HostPlan {
                host: link.name().to_string(),
                agents: agents.clone(),
                outcome,
            })
            .collect()
    }

    fn index(&self, link: &Link) -> usize {
        self.links
            .iter()
            .position(|l| l.name() == link.name())
            .expect("a link of these hosts")
    }

    fn plan_one(
        &self,
        link: &Link,
        slice: &str,
        prune: Pruning,
    ) -> std::result::Result<Planned, Failure> {
        let call = Call::Plan {
            dir: link.host.dir.clone(),
            slice: slice.to_string(),
            prune,
        };
        let mut result = link.ask(call, fleet::READ_TIMEOUT)?.result;
        // The host's lines: each of a valid agent name, every field bounded.
        let mut admitted = match result.get_mut("plan") {
            Some(plan) => super::admit::document(link.name(), plan, None),
            None => Vec::new(),
        };
        if let Some(warnings) = result.get_mut("warnings") {
            super::admit::bound(warnings);
        }
        let answer: PlanAnswer = serde_json::from_value(result).map_err(|e| {
            Failure::of(link.name(), format!("the host's answer is not a plan: {e}"))
        })?;
        let mut warnings = answer.warnings;
        warnings.append(&mut admitted);
        let mut plan = answer.plan;
        if self.targets.named {
            plan.only(self.targets.of(link.name()));
        }
        Ok(Planned {
            plan,
            warnings,
            push: to_push(slice, &self.files, &answer.files),
            digests: answer.files,
        })
    }

    /// Apply every host's part that planned something, in parallel: the slice is pushed
    /// whole, then the host applies it (only the names given, if any). A host whose plan
    /// failed or found nothing to do is not asked; one failing host does not stop the others.
    pub fn apply(&self, plans: &[HostPlan], prune: Pruning) -> Vec<HostApply> {
        self.apply_where(plans, prune, |_, planned| !planned.is_empty())
    }

    /// Apply the slices as they are now on `hosts` (those whose plan answered): after the
    /// moves of an apply, the slices the moved agents left.
    pub fn apply_again(
        &self,
        plans: &[HostPlan],
        hosts: &[String],
        prune: Pruning,
    ) -> Vec<HostApply> {
        if hosts.is_empty() {
            return Vec::new();
        }
        let mut done = self.apply_where(plans, prune, |host, _| hosts.iter().any(|h| h == host));
        done.retain(|h| hosts.contains(&h.host));
        done
    }

    fn apply_where(
        &self,
        plans: &[HostPlan],
        prune: Pruning,
        asked: impl Fn(&str, &Planned) -> bool + Sync,
    ) -> Vec<HostApply> {
        let outcomes = fleet::each(&self.links, |link| {
            let i = self.index(link);
            match plans
                .iter()
                .find(|p| p.host == link.name())
                .map(|p| &p.outcome)
            {
                Some(Ok(planned)) if asked(link.name(), planned) => {
                    // What the host had at plan time against the slice it is sent now.
                    let push = to_push(&self.slices[i], &self.files, &planned.digests);
                    self.apply_one(link, &self.slices[i], &push, prune)
                }
                Some(Ok(_)) => ApplyOutcome::Unchanged,
                Some(Err(failure)) => ApplyOutcome::NotPlanned(failure.clone()),
                None => ApplyOutcome::Unchanged,
            }
        });
        self.links
            .iter()
            .zip(outcomes)
            .map(|(link, outcome)| HostApply {
                host: link.name().to_string(),
                outcome,
            })
            .collect()
    }

    fn apply_one(
        &self,
        link: &Link,
        slice: &str,
        push: &[SliceFile],
        prune: Pruning,
    ) -> ApplyOutcome {
        let call = Call::Apply {
            dir: link.host.dir.clone(),
            slice: slice.to_string(),
            files: self.files.clone(),
            agents: self.targets.of(link.name()).to_vec(),
            prune,
        };
        let ran: Ran = match link
            .ask(call, fleet::APPLY_TIMEOUT)
            .map_err(Failure::from)
            .and_then(|reply| {
                serde_json::from_value(reply.result).map_err(|e| {
                    Failure::of(
                        link.name(),
                        format!("the host's answer is not an apply: {e}"),
                    )
                })
            }) {
            Ok(ran) => ran,
            Err(failure) => return ApplyOutcome::Failed(failure),
        };
        match applied(link.name(), &ran) {
            Ok(steps) => ApplyOutcome::Applied(Applied {
                pushed: push.to_vec(),
                failed: steps.iter().filter(|s| !s.ok).count(),
                steps,
            }),
            Err(failure) => ApplyOutcome::Failed(failure),
        }
    }
}

/// What the host answers a [`Call::Plan`] with.
#[derive(Deserialize)]
struct PlanAnswer {
    plan: Plan,
    #[serde(default)]
    warnings: Vec<String>,
    /// What the host has of a slice: path → digest.
    #[serde(default)]
    files: BTreeMap<String, String>,
}

/// The files of the slice (phoenix.toml first, then the policies and templates) the host
/// does not have with the same content.
fn to_push(
    slice: &str,
    files: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> Vec<SliceFile> {
    std::iter::once((crate::spec::DEFAULT_CONFIG, slice))
        .chain(files.iter().map(|(p, t)| (p.as_str(), t.as_str())))
        .filter_map(|(path, text)| {
            let theirs = theirs.get(path);
            (theirs != Some(&crate::state::digest(text.as_bytes()))).then(|| SliceFile {
                path: path.to_string(),
                new: theirs.is_none(),
            })
        })
        .collect()
}

/// One step of a host's apply, as its `apply --json` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub agent: String,
    #[serde(default)]
    pub symbol: String,
    pub action: String,
    pub ok: bool,
    pub detail: String,
}

/// What a host did of its part.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The slice's files written there first.
    pub pushed: Vec<SliceFile>,
    pub steps: Vec<Step>,
    pub failed: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ApplyOutcome {
    /// Nothing to change there: not asked.
    Unchanged,
    /// Its plan had no answer (shown with the plan): not asked.
    NotPlanned(Failure),
    Applied(Applied),
    /// Asked, and the apply there did not run or did not finish.
    Failed(Failure),
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostApply {
    pub host: String,
    pub outcome: ApplyOutcome,
}

impl HostApply {
    /// The failed steps, or 1 for a host whose part failed as a whole. A host skipped as
    /// unreachable (`--skip-unreachable`) is not a failure.
    pub fn failed(&self, skip_unreachable: bool) -> usize {
        match &self.outcome {
            ApplyOutcome::Unchanged => 0,
            ApplyOutcome::Applied(applied) => applied.failed,
            ApplyOutcome::NotPlanned(f) => usize::from(!(f.unreachable && skip_unreachable)),
            ApplyOutcome::Failed(_) => 1,
        }
    }

    /// `{host, reachable, error, hint, apply: {pushed, steps, failed}}` (`apply` is `null`
    /// for a host that did not apply).
    pub fn to_json(&self) -> Value {
        let failure = |f: &Failure| {
            json!({
                "host": self.host, "reachable": !f.unreachable, "error": f.message,
                "hint": f.hint, "apply": null,
            })
        };
        let done = |pushed: &[SliceFile], steps: &[Step], failed: usize| {
            json!({
                "host": self.host, "reachable": true, "error": null, "hint": null,
                "apply": {"pushed": pushed, "steps": steps, "failed": failed},
            })
        };
        match &self.outcome {
            ApplyOutcome::Unchanged => done(&[], &[], 0),
            ApplyOutcome::Applied(a) => done(&a.pushed, &a.steps, a.failed),
            ApplyOutcome::NotPlanned(f) | ApplyOutcome::Failed(f) => failure(f),
        }
    }
}

/// The steps of a host's `apply --json` from what it printed, or why there are none.
fn applied(host: &str, ran: &Ran) -> std::result::Result<Vec<Step>, Failure> {
    #[derive(Deserialize)]
    struct Report {
        steps: Option<Vec<Step>>,
        error: Option<ReportedError>,
    }
    #[derive(Deserialize)]
    struct ReportedError {
        message: String,
        hint: Option<String>,
    }
    // The host's steps: each of a valid agent name, every field bounded.
    let report = serde_json::from_str::<Value>(ran.stdout.trim()).and_then(|mut doc| {
        super::admit::document(host, &mut doc, None);
        serde_json::from_value::<Report>(doc)
    });
    match report {
        Ok(Report {
            steps: Some(steps), ..
        }) => Ok(steps),
        Ok(Report {
            error: Some(error), ..
        }) => Err(Failure {
            message: format!("host `{host}`: apply failed: {}", error.message),
            hint: error.hint,
            unreachable: false,
        }),
        _ => Err(Failure::of(
            host,
            format!(
                "`phoenix apply` ended with {} and no report: {}",
                ran.code
                    .map_or("a signal".to_string(), |c| format!("exit code {c}")),
                crate::text::shorten(
                    ran.stderr.lines().next().unwrap_or("(nothing on stderr)"),
                    300
                )
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_names_are_split_by_where_the_agent_runs_and_an_unknown_one_is_refused() {
        let spec = crate::spec::parse(
            "[[host]]\nname = \"gpu-1\"\nssh = \"a@b\"\n\n[[host]]\nname = \"gpu-2\"\nssh = \"c@d\"\n\n\
             [[agent]]\nname = \"here\"\ncommand = \"x\"\n\n\
             [[agent]]\nname = \"trades\"\ncommand = \"x\"\nhost = \"gpu-1\"\n\n\
             [[agent]]\nname = \"tests\"\ncommand = \"x\"\nhost = \"gpu-2\"\n",
            std::path::Path::new("/fleet/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        let all = Targets::split(&spec, &[]).unwrap();
        assert!(all.includes("gpu-1") && all.includes("gpu-2") && all.of("gpu-1").is_empty());
        let names = ["trades", "here", "trades"].map(String::from);
        let some = Targets::split(&spec, &names).unwrap();
        assert_eq!(some.local, ["here"]);
        assert_eq!(some.of("gpu-1"), ["trades"]);
        assert!(!some.includes("gpu-2"));
        let error = Targets::split(&spec, &["test".to_string()]).unwrap_err();
        assert!(error.to_string().contains("no agent `test`"), "{error}");
        let hint = error.hint().unwrap();
        assert!(hint.contains("did you mean `tests`?"), "{hint}");
        assert!(hint.contains("here, trades, tests"), "{hint}");
    }

    #[test]
    fn a_slice_is_pushed_only_where_the_host_lacks_it() {
        let files: BTreeMap<String, String> = [
            ("policies/a.lua".to_string(), "-- a\n".to_string()),
            ("templates/b.md".to_string(), "b\n".to_string()),
        ]
        .into();
        let theirs: BTreeMap<String, String> = [
            (
                "phoenix.toml".to_string(),
                crate::state::digest(b"[fleet]\n"),
            ),
            (
                "policies/a.lua".to_string(),
                crate::state::digest(b"-- old\n"),
            ),
            ("policies/extra.lua".to_string(), "x".to_string()),
        ]
        .into();
        let push = to_push("[fleet]\n", &files, &theirs);
        assert_eq!(
            push,
            vec![
                SliceFile {
                    path: "policies/a.lua".into(),
                    new: false
                },
                SliceFile {
                    path: "templates/b.md".into(),
                    new: true
                },
            ]
        );
        assert_eq!(
            to_push(
                "[fleet]\nname = \"x\"\n",
                &BTreeMap::new(),
                &BTreeMap::new()
            )[0],
            SliceFile {
                path: "phoenix.toml".into(),
                new: true
            }
        );
    }

    #[test]
    fn a_hosts_apply_report_or_its_error_is_read_from_what_it_printed() {
        let ran = |code, stdout: &str, stderr: &str| Ran {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        let steps = applied(
            "h",
            &ran(
                1,
                r#"{"format_version": 1, "steps": [{"agent": "a", "symbol": "+", "action": "start", "ok": false, "detail": "no"}], "failed": 1}"#,
                "",
            ),
        )
        .unwrap();
        assert!(!steps[0].ok);
        let error = applied(
            "h",
            &ran(
                1,
                r#"{"format_version": 1, "ok": false, "error": {"message": "locked", "hint": "wait"}}"#,
                "",
            ),
        )
        .unwrap_err();
        assert_eq!(error.message, "host `h`: apply failed: locked");
        assert_eq!(error.hint.as_deref(), Some("wait"));
        let garbage = applied("h", &ran(101, "", "thread panicked\nmore")).unwrap_err();
        assert!(
            garbage.message.contains("exit code 101") && garbage.message.contains("panicked"),
            "{garbage:?}"
        );
    }
}
