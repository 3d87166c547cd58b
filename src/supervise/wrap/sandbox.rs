//! Starting the CLI inside its sandbox: the layout for this start, the directories it needs,
//! the limits, and `bwrap` in front of the CLI's argv. The wrapper itself stays outside.

use std::ffi::OsString;
use std::process::Command;

use serde_json::json;

use super::Wrapper;
use crate::sandbox::{self, Context as SandboxContext, Layout};
use crate::spec::SandboxSpec;
use crate::spec::sandbox::Limits;
use crate::state::Op;

/// What starts the CLI inside its sandbox.
pub(super) struct SandboxStart {
    /// `bwrap`, its arguments, then the CLI's argv.
    pub argv: Vec<OsString>,
    /// Added to the CLI's environment (the proxy's address).
    pub env: Vec<(&'static str, String)>,
    pub limits: Limits,
}

impl SandboxStart {
    pub fn apply(&self, cmd: &mut Command) {
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        sandbox::apply_limits(cmd, &self.limits);
    }
}

impl Wrapper {
    /// How to start `argv` inside the agent's sandbox; `None` when the agent has none. An
    /// error when the sandbox cannot be made: the CLI is then not started at all, never
    /// started unsandboxed.
    pub(super) fn sandbox_start(&self, argv: &[String]) -> Result<Option<SandboxStart>, String> {
        let Some(profile) = &self.agent.sandbox else {
            return Ok(None);
        };
        if let Some(why) = sandbox::unusable() {
            return Err(format!(
                "agent `{}` runs in sandbox `{}`, which cannot be made: {why}",
                self.agent.name, profile.profile
            ));
        }
        let layout = self.sandbox_layout(profile);
        for dir in &layout.make {
            crate::state::create_private_dir(dir)
                .map_err(|e| format!("cannot make `{}` for the sandbox: {e}", dir.display()))?;
        }
        let exe = crate::process::main_binary().map_err(|e| format!("cannot find phoenix: {e}"))?;
        let proxy = self.sandbox_proxy(&layout)?;
        let argv = sandbox::wrap_argv(&layout, argv, proxy.as_deref(), &exe);
        let _ = self.dir.record_op(
            Op::SandboxEntered,
            json!({"profile": profile.profile, "summary": layout.summary(), "network": layout.network.as_str()}),
        );
        Ok(Some(SandboxStart {
            argv,
            env: layout.proxy_env(),
            limits: profile.limits.clone(),
        }))
    }

    /// The layout for this start: the whole fleet's agents (the wrapper reads only its own
    /// part of phoenix.toml; the others' workdirs are hidden from this one).
    pub(super) fn sandbox_layout(&self, profile: &SandboxSpec) -> Layout {
        let whole = crate::spec::load_for_hook(&self.spec.file).ok();
        let spec = whole
            .as_ref()
            .filter(|w| w.agent(&self.agent.name).is_some())
            .unwrap_or(&self.spec);
        sandbox::layout(spec, &self.agent, profile, &SandboxContext::of(spec))
    }

    /// The proxy for a sandbox whose network goes through one: its socket outside. One per
    /// wrapper, started with the first start that needs it and serving until it exits.
    fn sandbox_proxy(&self, layout: &Layout) -> Result<Option<std::path::PathBuf>, String> {
        if !layout.network.proxied() {
            return Ok(None);
        }
        let mut held = self.proxy.borrow_mut();
        if held.is_none() {
            *held = sandbox::Proxy::start(layout, &self.dir, true)
                .map_err(|e| format!("cannot start the sandbox's proxy: {e}"))?;
        }
        Ok(held.as_ref().map(|p| p.socket.clone()))
    }
}

/// bubblewrap's exit status as the CLI's own: bwrap exits 128+N when the CLI inside was
/// killed by signal N (an OOM kill, a crash, a kill -9), which is a crash, not an exit code.
pub(super) fn as_the_clis(status: std::process::ExitStatus) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match status.code() {
        Some(code) if (129..=128 + 64).contains(&code) => {
            std::process::ExitStatus::from_raw(code - 128)
        }
        _ => status,
    }
}
