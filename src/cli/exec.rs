//! `phoenix exec AGENT -- CMD…`: a command run as the agent's CLI runs, on the agent's host:
//! in its workdir, with its environment (`env`, `PHOENIX_AGENT`, `PHOENIX_CONFIG`,
//! `PHOENIX_STATE_DIR`), inside its sandbox where it has one (the same layout, network and
//! limits its CLI gets). The command's exit code is phoenix's; killed by a signal: 128 + N.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use anyhow::{Context as _, bail};

use crate::sandbox;
use crate::state::FleetDir;

pub fn exec(config: &Path, name: &str, command: &[String]) -> anyhow::Result<i32> {
    let spec = &crate::spec::load(config)?;
    let agent = super::lifecycle::declared(spec, &[name.to_string()])?.remove(0);
    let agent = spec.agent(&agent).expect("declared");
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(&agent.name);
    let mut proxy = None;
    let mut limits = None;
    let mut extra_env = Vec::new();
    let argv: Vec<OsString> = match &agent.sandbox {
        None => command.iter().map(Into::into).collect(),
        Some(profile) => {
            if let Some(why) = sandbox::unusable() {
                bail!(
                    "agent `{}` runs in sandbox `{}`, which cannot be made here: {why}",
                    agent.name,
                    profile.profile
                );
            }
            let layout = sandbox::layout(spec, agent, profile, &sandbox::Context::of(spec));
            for made in &layout.make {
                crate::state::create_private_dir(made)
                    .with_context(|| format!("cannot make `{}` for the sandbox", made.display()))?;
            }
            proxy = sandbox::Proxy::start(&layout, &dir, false)
                .context("cannot start the sandbox's proxy")?;
            let exe = crate::process::main_binary().context("cannot find phoenix")?;
            extra_env = layout.proxy_env();
            limits = Some(profile.limits.clone());
            sandbox::wrap_argv(
                &layout,
                command,
                proxy.as_ref().map(|p| p.socket.as_path()),
                &exe,
            )
        }
    };
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&agent.workdir)
        .envs(&agent.env)
        .env("PHOENIX_AGENT", &agent.name)
        .env("PHOENIX_CONFIG", &spec.file)
        .env("PHOENIX_STATE_DIR", &dir.path)
        .envs(extra_env.iter().map(|(k, v)| (k, v)));
    if let Some(limits) = &limits {
        sandbox::apply_limits(&mut cmd, limits);
    }
    // Waited for, not exec'd: the sandbox's proxy serves from this process while it runs.
    let status = cmd.status().with_context(|| {
        format!(
            "cannot run `{}` for agent `{}` in `{}`",
            command[0],
            agent.name,
            agent.workdir.display()
        )
    })?;
    drop(proxy);
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    })
}
