//! An operator's restart as a request to the controller: when `phoenix run` supervises the
//! fleet, `phoenix restart` (the CLI, the API, the dashboard, `top`) writes a request into the
//! agent's state dir and pokes the daemon, which carries it out through the same apply path as
//! its reconciles, between two passes; without a daemon the restart runs in this process.
//!
//! Whoever removes the request file owns it: the daemon removes it before it acts, and a
//! client whose request is not taken within [`TAKE_WAIT`] removes it and acts itself, so a
//! restart is never carried out twice.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::bail;
use crate::error::Context;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::Controller;
use crate::context::FleetContext;
use crate::restart::{self, By, Carried, RestartReport};
use crate::spec;
use crate::state::bounded::{self, Links};
use crate::state::{self, AgentDir};

/// The request, in the agent's state dir, while no one has taken it.
pub const REQUEST: &str = "restart_request.json";
/// The daemon's answer to it.
pub const REPLY: &str = "restart_reply.json";
/// How long a running daemon has to take a request before the client restarts in-process.
const TAKE_WAIT: Duration = Duration::from_secs(5);
/// How long a taken request may take (the fleet lock, the old agent's grace period).
const ANSWER_WAIT: Duration = Duration::from_secs(60);
const MAX_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Request {
    id: String,
    fresh: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Reply {
    id: String,
    /// What the daemon did, or why it could not.
    result: Result<Carried, String>,
}

/// `phoenix restart AGENT [--fresh]` for the fleet of `config`.
pub fn restart(config: &Path, name: &str, fresh: bool) -> crate::error::Result<RestartReport> {
    let ctx = FleetContext::new(config, spec::load(config)?);
    restart_with(
        &ctx,
        name,
        fresh,
        &|holder| tracing::info!(%holder, "waiting for the fleet lock"),
    )
}

/// [`restart`] in the fleet `ctx`: asked of the running daemon, else carried out here, telling
/// `on_wait` whom it waits for when another phoenix is changing the fleet.
pub fn restart_with(
    ctx: &FleetContext,
    name: &str,
    fresh: bool,
    on_wait: &dyn Fn(&str),
) -> crate::error::Result<RestartReport> {
    restart::restartable(&ctx.spec, name)?;
    if state::daemon::daemon_pid(&ctx.dir).is_none() {
        return restart::in_process(ctx, name, fresh, on_wait);
    }
    match ask_daemon(ctx, name, fresh)? {
        Some(carried) => Ok(restart::wait_for_new(
            &ctx.spec,
            ctx.runtime(),
            name,
            fresh,
            &carried,
        )),
        None => restart::in_process(ctx, name, fresh, on_wait),
    }
}

/// Hand the restart to the daemon: `Some` with what it did, `None` when it did not take the
/// request in time (it is busy, or stopping), which the caller then carries out itself.
fn ask_daemon(
    ctx: &FleetContext,
    name: &str,
    fresh: bool,
) -> crate::error::Result<Option<Carried>> {
    let dir = ctx.dir.agent(name);
    dir.ensure()
        .with_context(|| format!("cannot create state dir `{}`", dir.path.display()))?;
    let id = format!(
        "{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    );
    let request = serde_json::to_vec(&Request {
        id: id.clone(),
        fresh,
    })?;
    let _ = std::fs::remove_file(dir.file(REPLY));
    state::atomic_write(&dir.file(REQUEST), &request)
        .with_context(|| format!("cannot write `{}`", dir.file(REQUEST).display()))?;
    state::daemon::poke(&ctx.dir, name);
    let start = Instant::now();
    loop {
        if let Some(reply) = read_reply(&dir, &id) {
            let _ = std::fs::remove_file(dir.file(REPLY));
            return reply.result.map(Some).map_err(|e| {
                crate::Error::msg(format!("the daemon could not restart `{name}`: {e}"))
            });
        }
        let waited = start.elapsed();
        if waited >= TAKE_WAIT && dir.file(REQUEST).exists() {
            // Not taken: withdraw it; if the daemon took it just now, wait for its answer.
            match std::fs::remove_file(dir.file(REQUEST)) {
                Ok(()) => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).context("cannot withdraw the restart request"),
            }
        }
        if waited >= ANSWER_WAIT {
            bail!(
                "the daemon took the restart of `{name}` but did not answer within {}s; see its log",
                ANSWER_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_reply(dir: &AgentDir, id: &str) -> Option<Reply> {
    let text = bounded::read_string(&dir.file(REPLY), MAX_BYTES, Links::Refuse).ok()?;
    serde_json::from_str::<Reply>(&text)
        .ok()
        .filter(|r| r.id == id)
}

/// Take the request waiting in `dir`, if any: removed before it is acted on, so the client
/// that wrote it never acts on it as well.
fn take(dir: &AgentDir) -> Option<Request> {
    let text = bounded::read_string(&dir.file(REQUEST), MAX_BYTES, Links::Refuse).ok()?;
    std::fs::remove_file(dir.file(REQUEST)).ok()?;
    match serde_json::from_str(&text) {
        Ok(request) => Some(request),
        Err(e) => {
            warn!(file = %dir.file(REQUEST).display(), error = %e, "ignoring a restart request that does not parse");
            None
        }
    }
}

impl Controller {
    /// Carry out the restart requests of the agents poked since the last pass.
    pub(super) fn serve_requests(&mut self) {
        let fleet = state::FleetDir::new(&self.spec.fleet.state_dir);
        for name in std::mem::take(&mut self.poked) {
            // Only declared agents: a poke is a name, not a path.
            if self.spec.agent(&name).is_none() {
                continue;
            }
            let dir = fleet.agent(&name);
            let Some(request) = take(&dir) else {
                continue;
            };
            info!(agent = %name, fresh = request.fresh, "operator restart requested");
            let result = restart::carry_out(
                &self.spec,
                &*self.runtime,
                &name,
                request.fresh,
                &|holder| info!(%holder, "waiting for the fleet lock"),
                By::Operator,
            )
            .map_err(|e| format!("{e:#}"));
            match &result {
                // A person asked for a new try: the agent's own backoff starts again.
                Ok(carried) => {
                    self.backoff.succeeded(&name);
                    info!(agent = %name, via = %carried.via, "restarted on request");
                }
                Err(e) => warn!(agent = %name, error = %e, "restart on request failed"),
            }
            let reply = Reply {
                id: request.id,
                result,
            };
            let written = serde_json::to_vec(&reply)
                .map_err(std::io::Error::other)
                .and_then(|bytes| state::atomic_write(&dir.file(REPLY), &bytes));
            if let Err(e) = written {
                warn!(agent = %name, error = %e, "cannot answer the restart request");
            }
        }
    }
}
