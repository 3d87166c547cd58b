//! One end of a move: a host, reached over its transport, or the operator's own machine,
//! where the same functions run in-process and phoenix's own commands run as this phoenix
//! on the operator's phoenix.toml (as a host runs them on its slice).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::carry::{self, AgentContext, Fenced, Imported, Left, Summary};
use super::fleet::{APPLY_TIMEOUT, Link, READ_TIMEOUT};
use super::protocol::{Call, Ran};
use crate::error::Error;
use crate::spec::Spec;
use crate::state::FleetDir;
use crate::state::fence::Fence;
use crate::world::Check;

pub enum Side<'a> {
    /// The operator's machine, with its phoenix.toml.
    Local(&'a Spec),
    Host(&'a Link),
}

impl Side<'_> {
    fn fleet(spec: &Spec) -> FleetDir {
        FleetDir::new(&spec.fleet.state_dir)
    }

    /// Ask the host `call` and read its result as a `T`.
    fn ask<T: DeserializeOwned>(link: &Link, call: Call, timeout: Duration) -> Result<T, Error> {
        let reply = link.ask(call, timeout)?;
        serde_json::from_value(reply.result).map_err(|e| {
            Error::msg(format!(
                "host `{}` answered something else than expected: {e}",
                link.name()
            ))
        })
    }

    /// The host answers at all (the operator's machine always does).
    pub fn hello(&self) -> Result<(), Error> {
        match self {
            Side::Local(_) => Ok(()),
            Side::Host(link) => link
                .ask(Call::Hello, READ_TIMEOUT)
                .map(|_| ())
                .map_err(Into::into),
        }
    }

    pub fn summary(&self, agent: &str) -> Result<Summary, Error> {
        match self {
            Side::Local(spec) => {
                carry::summarize(Some(spec), &Self::fleet(spec), agent).map_err(Error::msg)
            }
            Side::Host(link) => Self::ask(
                link,
                Call::Context {
                    dir: link.host.dir.clone(),
                    agent: agent.to_string(),
                },
                READ_TIMEOUT,
            ),
        }
    }

    /// The agent leaves: stopped, a `move` handoff saved, its context read.
    pub fn leave(&self, agent: &str) -> Result<Left, Error> {
        match self {
            Side::Local(spec) => {
                carry::leave(Some(spec), &Self::fleet(spec), agent).map_err(Error::msg)
            }
            Side::Host(link) => Self::ask(
                link,
                Call::Leave {
                    dir: link.host.dir.clone(),
                    agent: agent.to_string(),
                },
                APPLY_TIMEOUT,
            ),
        }
    }

    pub fn import(
        &self,
        agent: &str,
        context: &AgentContext,
        fence: &Fence,
    ) -> Result<Imported, Error> {
        match self {
            Side::Local(spec) => {
                carry::import(&Self::fleet(spec), agent, context, fence).map_err(Error::msg)
            }
            Side::Host(link) => Self::ask(
                link,
                Call::Import {
                    dir: link.host.dir.clone(),
                    agent: agent.to_string(),
                    context: context.clone(),
                    fence: fence.clone(),
                },
                READ_TIMEOUT,
            ),
        }
    }

    /// Record `fences` there and stop the stale copies that run.
    pub fn fence(&self, fences: &BTreeMap<String, Fence>) -> Result<Fenced, Error> {
        match self {
            Side::Local(spec) => {
                carry::fence_here(Some(spec), &Self::fleet(spec), fences).map_err(Error::msg)
            }
            Side::Host(link) => Self::ask(
                link,
                Call::Fence {
                    dir: link.host.dir.clone(),
                    fences: fences.clone(),
                },
                APPLY_TIMEOUT,
            ),
        }
    }

    /// `doctor`'s rows for `agent` as `spec_text` (the operator's phoenix.toml, with the
    /// agent placed here) declares it: its CLI and its workdir, checked on this machine.
    pub fn agent_checks(
        &self,
        spec_text: &str,
        file: &Spec,
        agent: &str,
    ) -> Result<Vec<Check>, Error> {
        match self {
            Side::Local(_) => {
                let spec = crate::spec::parse(
                    spec_text,
                    &file.file,
                    crate::spec::LoadOptions {
                        check_filesystem: false,
                    },
                )
                .map_err(|e| Error::msg(e.to_string()))?;
                Ok(spec
                    .agent(agent)
                    .map(|a| crate::world::agent_checks(a).to_vec())
                    .unwrap_or_default())
            }
            Side::Host(link) => {
                let slice = self.slice(spec_text, file)?;
                let rows: Vec<Check> = Self::ask(
                    link,
                    Call::Check {
                        dir: link.host.dir.clone(),
                        slice,
                    },
                    READ_TIMEOUT,
                )?;
                let mine = [
                    format!("agent `{agent}` command"),
                    format!("agent `{agent}` workdir"),
                ];
                Ok(rows
                    .into_iter()
                    .filter(|r| mine.contains(&r.check) || (r.check == "dir" && !r.ok))
                    .collect())
            }
        }
    }

    /// The host's slice of `spec_text` (nothing for the operator's machine, which reads its
    /// phoenix.toml itself).
    fn slice(&self, spec_text: &str, spec: &Spec) -> Result<String, Error> {
        let Side::Host(link) = self else {
            return Ok(String::new());
        };
        super::slice::for_host(spec_text, link.name(), link.host.tmux_socket.as_deref()).map_err(
            |e| {
                Error::msg(format!(
                    "cannot cut host `{}`'s slice of `{}`: {e}",
                    link.name(),
                    spec.file.display()
                ))
            },
        )
    }

    /// One of phoenix's own commands on this side's fleet (`stop NAME`, `handoff save …`).
    pub fn phoenix(&self, args: &[&str], timeout: Duration) -> Result<Ran, Error> {
        match self {
            Side::Local(spec) => run_here(spec, args, timeout),
            Side::Host(link) => Ok(link.run(args, timeout)?),
        }
    }

    /// Start `agent` as `spec_text` declares it: a host gets its slice of it pushed and
    /// applies it for this agent; the operator's machine applies its own spec (the agent
    /// declared here, as phoenix.toml is already written) for it.
    pub fn start(&self, spec_text: &str, spec: &Spec, agent: &str) -> Result<Ran, Error> {
        match self {
            // In this process: a `phoenix apply` here would plan the whole fleet again,
            // this move included.
            Side::Local(spec) => Ok(match carry::start_here(spec, &Self::fleet(spec), agent) {
                Ok(()) => Ran {
                    code: Some(0),
                    stdout: String::new(),
                    stderr: String::new(),
                },
                Err(why) => Ran {
                    code: Some(1),
                    stdout: String::new(),
                    stderr: why,
                },
            }),
            Side::Host(link) => Self::ask(
                link,
                Call::Apply {
                    dir: link.host.dir.clone(),
                    slice: self.slice(spec_text, spec)?,
                    files: super::fleet::slice_files(spec)?,
                    agents: vec![agent.to_string()],
                    prune: Default::default(),
                },
                APPLY_TIMEOUT,
            ),
        }
    }
}

impl Side<'_> {
    /// The machine an agent left gets the fleet as `spec_text` declares it now (its slice
    /// pushed and applied, as the combined `apply` sends the sources of its moves): its
    /// phoenix.toml no longer declares the agent, so the next plan there has nothing to change.
    /// The operator's machine runs on phoenix.toml itself: nothing to send.
    pub fn converge(&self, spec_text: &str, spec: &Spec) -> Result<(), Error> {
        let Side::Host(link) = self else {
            return Ok(());
        };
        let ran: Ran = Self::ask(
            link,
            Call::Apply {
                dir: link.host.dir.clone(),
                slice: self.slice(spec_text, spec)?,
                files: super::fleet::slice_files(spec)?,
                agents: Vec::new(),
                prune: Default::default(),
            },
            APPLY_TIMEOUT,
        )?;
        match failure(&ran) {
            Some(why) => Err(Error::msg(format!("its apply failed: {why}"))),
            None => Ok(()),
        }
    }
}

/// This phoenix, on the operator's phoenix.toml, with `args` as its argv.
fn run_here(spec: &Spec, args: &[&str], timeout: Duration) -> Result<Ran, Error> {
    let exe = crate::process::main_binary()
        .map_err(|e| Error::msg(format!("cannot find this phoenix: {e}")))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--config")
        .arg(&spec.file)
        .args(args)
        .current_dir(&spec.dir);
    match crate::process::run(command, b"", timeout) {
        Ok(finished) => Ok(Ran {
            code: finished.status.code(),
            stdout: finished.stdout,
            stderr: finished.stderr,
        }),
        Err(crate::process::RunError::Timeout) => Err(Error::msg(format!(
            "`phoenix {}` did not finish within {}",
            args.first().copied().unwrap_or(""),
            crate::spec::duration::format(timeout)
        ))),
        Err(crate::process::RunError::Spawn(e)) => {
            Err(Error::msg(format!("cannot run phoenix: {e}")))
        }
    }
}

/// A command's failure, in words: its JSON error's message, else its stderr's first line.
pub fn failure(ran: &Ran) -> Option<String> {
    if ran.code == Some(0) {
        return None;
    }
    let json_error = serde_json::from_str::<serde_json::Value>(ran.stdout.trim())
        .ok()
        .and_then(|doc| doc["error"]["message"].as_str().map(str::to_string));
    let said = json_error.unwrap_or_else(|| {
        let line = crate::process::first_line(&ran.stderr);
        if line.is_empty() {
            crate::process::first_line(&ran.stdout)
        } else {
            line
        }
    });
    Some(match ran.code {
        Some(code) => format!("exit {code}: {said}"),
        None => format!("killed: {said}"),
    })
}
