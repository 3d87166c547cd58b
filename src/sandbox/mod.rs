//! Sandboxed agents. An agent with `sandbox = "NAME"` runs its CLI, and the hooks the CLI
//! runs, inside bubblewrap: its own user, pid, network and IPC namespaces, the filesystem
//! read-only but for its workdir, its own state dir, a private /tmp and the CLI's sessions,
//! with secrets, the fleet's state and the other agents hidden. The wrapper stays outside, in
//! the pane. `layout` decides what the sandbox shows; `verify` proves it from inside.

pub mod layout;
pub mod proxy;
pub mod relay;
pub mod verify;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

pub use crate::spec::sandbox::{INSTALL_HINT, bwrap_path};
pub use layout::{Context, Layout, layout};

/// Why bubblewrap cannot make a sandbox here, with the fix; `None` when it can. Asked once
/// per process (one `bwrap` run, a few milliseconds).
pub fn unusable() -> Option<String> {
    static ANSWER: OnceLock<Option<String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            let Some(bwrap) = bwrap_path() else {
                return Some(format!("bubblewrap (`bwrap`) is not installed: {INSTALL_HINT}"));
            };
            let out = std::process::Command::new(&bwrap)
                .args([
                    "--unshare-user",
                    "--unshare-pid",
                    "--unshare-net",
                    "--die-with-parent",
                    "--ro-bind",
                    "/",
                    "/",
                    "--dev",
                    "/dev",
                    "--proc",
                    "/proc",
                    "--",
                    "true",
                ])
                .stdin(std::process::Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => None,
                Ok(o) => Some(format!(
                    "bubblewrap cannot make a sandbox here ({}): unprivileged user namespaces are probably off; allow them with `sudo sysctl -w kernel.unprivileged_userns_clone=1` (Debian) or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (Ubuntu 24.04 and later), and in a container run it with user namespaces allowed",
                    crate::text::terminal_text(String::from_utf8_lossy(&o.stderr).trim())
                )),
                Err(e) => Some(format!("cannot run {}: {e}", bwrap.display())),
            }
        })
        .clone()
}

/// The argv that runs `inner` inside `layout`: `bwrap`, its arguments, then `inner` (for a
/// proxied network behind `phoenix sandbox-inner`, which serves the proxy inside first).
pub fn wrap_argv(
    layout: &Layout,
    inner: &[String],
    proxy_socket: Option<&std::path::Path>,
    exe: &std::path::Path,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![
        bwrap_path()
            .unwrap_or_else(|| PathBuf::from("bwrap"))
            .into(),
    ];
    argv.extend(layout.bwrap_args(proxy_socket));
    if proxy_socket.is_some() && layout.network.proxied() {
        argv.extend([
            exe.as_os_str().to_owned(),
            "sandbox-inner".into(),
            "--relay".into(),
            layout::RELAY_ADDRESS.into(),
            "--socket".into(),
            layout::PROXY_SOCKET_INSIDE.into(),
            "--".into(),
        ]);
    }
    argv.extend(inner.iter().map(OsString::from));
    argv
}

/// The proxy a sandbox with a proxied network reaches the network through, outside it; it
/// stops when dropped.
pub struct Proxy {
    /// Its socket outside (bound into the sandbox at `layout::PROXY_SOCKET_INSIDE`).
    pub socket: PathBuf,
    _serving: proxy::Proxy,
}

/// Refusals recorded per proxy at most (an agent retrying a refused host in a loop must not
/// fill its ops log).
const MAX_RECORDED_REFUSALS: u32 = 100;

impl Proxy {
    /// The proxy for `layout`, `None` when its network is not proxied. Its socket is in a
    /// private directory of phoenix's under /tmp (a Unix socket's path has at most 107
    /// bytes; state dirs can be deeper), named after the agent's state dir. What it refuses
    /// is recorded in the agent's ops (`sandbox_network`) when `record`.
    pub fn start(
        layout: &Layout,
        dir: &crate::state::AgentDir,
        record: bool,
    ) -> std::io::Result<Option<Proxy>> {
        if !layout.network.proxied() {
            return Ok(None);
        }
        let allow = match layout.network {
            crate::spec::sandbox::Network::Host => proxy::Allow::any_name(),
            _ => proxy::Allow::parse(&layout.allow).map_err(std::io::Error::other)?,
        };
        use std::os::unix::ffi::OsStrExt;
        let base = std::env::temp_dir().join(format!("phoenix-{}", nix::unistd::getuid()));
        crate::state::create_private_dir(&base)?;
        let digest = crate::state::digest(dir.path.as_os_str().as_bytes());
        let socket = base.join(format!(
            "proxy-{}-{}.sock",
            &digest[..12],
            std::process::id()
        ));
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket)?;
        let agent_dir = dir.clone();
        let recorded = std::sync::atomic::AtomicU32::new(0);
        let serving = proxy::serve(listener, allow, move |event| {
            if !record || matches!(event, proxy::ProxyEvent::Allowed { .. }) {
                return;
            }
            if recorded.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < MAX_RECORDED_REFUSALS {
                let _ = agent_dir.record_op(
                    crate::state::Op::SandboxNetwork,
                    serde_json::json!({"what": event.to_string()}),
                );
            }
        })?;
        Ok(Some(Proxy {
            socket,
            _serving: serving,
        }))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// How the profile's limits are applied here, for status and verify.
pub fn limits_applied(limits: &crate::spec::sandbox::Limits) -> Option<String> {
    if limits.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(n) = limits.processes {
        parts.push(format!(
            "processes {n} (RLIMIT_NPROC: counts every process of this user)"
        ));
    }
    if let Some(n) = limits.memory {
        parts.push(format!("memory {} MiB (RLIMIT_DATA, per process)", n >> 20));
    }
    if let Some(n) = limits.open_files {
        parts.push(format!("open files {n} (RLIMIT_NOFILE, per process)"));
    }
    Some(format!("{}; no writable cgroup is used", parts.join(", ")))
}

/// An agent's sandbox as `status AGENT` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub profile: String,
    pub summary: String,
    pub network: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// How its limits apply here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// What phoenix tells the CLI about its own sandbox (off, and how).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_sandbox: Option<String>,
    /// The last `sandbox verify` (or apply's), and whether it was of the layout it would
    /// start with now.
    pub verified: Option<verify::Verified>,
    pub verified_current: bool,
}

/// The agent's sandbox as a plan shows it.
pub fn report(
    spec: &crate::spec::Spec,
    agent: &crate::spec::AgentSpec,
) -> Option<crate::world::SandboxReport> {
    let s = status(spec, agent)?;
    let v = s.verified.as_ref().filter(|_| s.verified_current);
    Some(crate::world::SandboxReport {
        agent: agent.name.clone(),
        profile: s.profile.clone(),
        summary: s.summary.clone(),
        verified: match v {
            Some(v) if v.passed => "passed",
            Some(_) => "failed",
            None => "unverified",
        }
        .to_string(),
        failed: v
            .map(|v| v.failed().iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default(),
        verified_at: s.verified.as_ref().map(|v| v.at.clone()),
        own_sandbox: s.own_sandbox.clone(),
    })
}

pub fn status(spec: &crate::spec::Spec, agent: &crate::spec::AgentSpec) -> Option<Status> {
    let sandbox = agent.sandbox.as_ref()?;
    let layout = layout(spec, agent, sandbox, &Context::of(spec));
    let verified = verify::last(
        &crate::state::FleetDir::new(&spec.fleet.state_dir),
        &agent.name,
    );
    let digest = verify::layout_digest(&layout);
    Some(Status {
        profile: sandbox.profile.clone(),
        summary: layout.summary(),
        network: sandbox.network.as_str(),
        allow: sandbox.allow.clone(),
        limits: limits_applied(&sandbox.limits),
        own_sandbox: crate::agent_cli::own_sandbox::for_agent(
            agent,
            true,
            agent.cli.adapter().base_argv(agent.argv.clone()),
            &|k| std::env::var(k).ok(),
            None,
        )
        .note,
        verified_current: verified.as_ref().is_some_and(|v| v.layout == digest),
        verified,
    })
}

/// The profile's limits as rlimits, set in the child before `bwrap` runs (inherited by all
/// it starts).
pub fn apply_limits(cmd: &mut std::process::Command, limits: &crate::spec::sandbox::Limits) {
    use std::os::unix::process::CommandExt;
    if limits.is_empty() {
        return;
    }
    // glibc's setrlimit takes its own enum type, musl's an int.
    #[cfg(target_env = "gnu")]
    type Resource = libc::__rlimit_resource_t;
    #[cfg(not(target_env = "gnu"))]
    type Resource = libc::c_int;
    let set: Vec<(Resource, u64)> = [
        (libc::RLIMIT_NPROC, limits.processes),
        (libc::RLIMIT_DATA, limits.memory),
        (libc::RLIMIT_NOFILE, limits.open_files),
    ]
    .into_iter()
    .filter_map(|(r, v)| v.map(|v| (r, v)))
    .collect();
    // SAFETY: setrlimit is async-signal-safe; nothing is allocated between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for (resource, value) in &set {
                let limit = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                if libc::setrlimit(*resource, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
