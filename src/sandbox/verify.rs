//! `phoenix sandbox verify`: canaries run inside each agent's sandbox, as its CLI would run
//! there, each one an escape the sandbox must stop (or a thing it must allow). Outside, the
//! verifier plants what the canaries look for: a secret in the fleet's hidden state, a
//! listener on the host's loopback, an abstract socket like a wrapper's, its own pid. Inside,
//! `phoenix sandbox-canary` tries each and says what happened; the verdict is the outside's.
//!
//! The result is kept outside the agent's reach (`<state_dir>/sandbox/<agent>.json`), with a
//! digest of the layout it was made for: `apply` starts a sandboxed agent only when the
//! layout it will start has passed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::layout::{Access, Context, Layout, RELAY_ADDRESS};
use crate::spec::sandbox::Network;
use crate::spec::{AgentSpec, Spec};
use crate::state::FleetDir;

/// How long the canaries get inside, all together.
const INSIDE_DEADLINE: Duration = Duration::from_secs(20);
/// What the canaries print, at most.
const MAX_REPORT: u64 = 1 << 20;
/// Connections tried inside give up after this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// One thing to try inside.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "try", rename_all = "snake_case")]
pub enum Canary {
    /// Read a planted secret: must fail.
    ReadSecret { path: PathBuf, secret: String },
    /// A hidden path shows nothing: an empty directory (but for the way to what the layout
    /// shows inside it, `except`), or an empty file.
    SeeNothing {
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        except: Vec<String>,
    },
    /// Write into (or over) a path: must fail.
    Write { path: PathBuf, what: String },
    /// Write into the workdir: must work.
    WriteWorkdir { path: PathBuf },
    /// Connect to a TCP listener on the host's loopback directly: must fail.
    ConnectHost { address: String },
    /// Connect to an abstract Unix socket of the host (like a wrapper's tap socket): must fail.
    ConnectAbstract { name: String },
    /// Connect to a Unix socket by path (the fleet's pane server): must fail.
    ConnectPath { path: PathBuf },
    /// Signal a process outside (the wrapper): must fail.
    Signal { pid: i32 },
    /// Ask the proxy for a host the profile does not allow: must be refused.
    ProxyRefuses { host: String },
    /// Ask the proxy for an allowed host: must answer.
    ProxyAllows { host: String },
}

/// What a canary found inside.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Found {
    /// The escape was stopped (or the allowed thing worked).
    pub held: bool,
    pub detail: String,
}

/// One canary's verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// One agent's verification.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verified {
    pub agent: String,
    pub profile: String,
    /// Of the layout verified (`layout_digest`).
    pub layout: String,
    pub at: String,
    pub passed: bool,
    pub checks: Vec<Check>,
    /// Limits, and how they were applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
}

impl Verified {
    pub fn failed(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.passed).collect()
    }
}

/// A digest of what a layout does: a different one needs verifying again.
pub fn layout_digest(layout: &Layout) -> String {
    crate::state::digest(&serde_json::to_vec(layout).expect("layout serialises"))
}

fn record_path(fleet: &FleetDir, agent: &str) -> PathBuf {
    fleet.root.join("sandbox").join(format!("{agent}.json"))
}

/// The last verification of `agent`, if any.
pub fn last(fleet: &FleetDir, agent: &str) -> Option<Verified> {
    let text = crate::state::bounded::read_string(
        &record_path(fleet, agent),
        MAX_REPORT,
        crate::state::bounded::Links::Refuse,
    )
    .ok()?;
    serde_json::from_str(&text).ok()
}

fn record(fleet: &FleetDir, verified: &Verified) -> std::io::Result<()> {
    let path = record_path(fleet, &verified.agent);
    if let Some(dir) = path.parent() {
        crate::state::create_private_dir(dir)?;
    }
    let bytes = serde_json::to_vec_pretty(verified).map_err(std::io::Error::other)?;
    crate::state::file::write_atomic(&path, &bytes, 0o600, false)
}

/// What the outside plants for the canaries, kept until they ran.
struct Planted {
    canaries: Vec<(String, Canary)>,
    _listener: TcpListener,
    _abstract: UnixListener,
    secret_file: PathBuf,
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.secret_file);
    }
}

fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn plant(
    spec: &Spec,
    agent: &AgentSpec,
    layout: &Layout,
    cx: &Context,
) -> std::io::Result<Planted> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let mut canaries = Vec::new();
    // A secret in the fleet's state, which only the agent's own dir of is shown.
    let dir = fleet.root.join("sandbox");
    crate::state::create_private_dir(&dir)?;
    let secret = random_hex();
    let secret_file = dir.join(format!("canary-{secret}"));
    crate::state::file::write_atomic(&secret_file, secret.as_bytes(), 0o600, false)?;
    canaries.push((
        "a planted secret in the fleet's state cannot be read".to_string(),
        Canary::ReadSecret {
            path: secret_file.clone(),
            secret: secret.clone(),
        },
    ));
    for rule in &layout.rules {
        let exists = std::fs::symlink_metadata(&rule.path).is_ok();
        match &rule.access {
            Access::Hide if exists && rule.why != "the fleet's pane server" => {
                // The first step towards each path the layout shows inside this one.
                let mut except: Vec<String> = layout
                    .rules
                    .iter()
                    .filter_map(|r| r.path.strip_prefix(&rule.path).ok())
                    .filter_map(|rest| rest.components().next())
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                except.sort();
                except.dedup();
                canaries.push((
                    format!("{} is hidden ({})", rule.path.display(), rule.why),
                    Canary::SeeNothing {
                        path: rule.path.clone(),
                        except,
                    },
                ))
            }
            Access::Protect if exists => canaries.push((
                format!("{} cannot be changed ({})", rule.path.display(), rule.why),
                Canary::Write {
                    path: rule.path.clone(),
                    what: rule.why.to_string(),
                },
            )),
            _ => {}
        }
    }
    // Another agent's state: a real one where the fleet has one, else a stand-in.
    let other = spec
        .agents
        .iter()
        .find(|a| a.name != agent.name)
        .map(|a| fleet.agent(&a.name).path)
        .unwrap_or_else(|| fleet.root.join("agents").join(".canary-other"));
    crate::state::create_private_dir(&other)?;
    canaries.push((
        "another agent's state cannot be written".to_string(),
        Canary::Write {
            path: other,
            what: "another agent's state".to_string(),
        },
    ));
    canaries.push((
        "the workdir can be written".to_string(),
        Canary::WriteWorkdir {
            path: agent.workdir.clone(),
        },
    ));
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?.to_string();
    canaries.push((
        format!("a server on the host's loopback ({address}) cannot be reached directly"),
        Canary::ConnectHost {
            address: address.clone(),
        },
    ));
    let name = format!("phoenix-canary-{}", random_hex());
    let abstract_socket =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
    canaries.push((
        "another wrapper's socket cannot be reached".to_string(),
        Canary::ConnectAbstract { name },
    ));
    if let Some(socket) = &cx.pane_server {
        canaries.push((
            "the fleet's pane server cannot be reached".to_string(),
            Canary::ConnectPath {
                path: socket.clone(),
            },
        ));
    }
    canaries.push((
        "the wrapper outside cannot be signalled".to_string(),
        Canary::Signal {
            pid: std::process::id() as i32,
        },
    ));
    if layout.network.proxied() {
        canaries.push((
            format!("the proxy refuses a host not allowed ({address})"),
            Canary::ProxyRefuses {
                host: address.clone(),
            },
        ));
        if layout.network == Network::Allow
            && let Some(host) = layout.allow.iter().find(|h| !h.starts_with("*."))
        {
            let host = if host.contains(':') {
                host.clone()
            } else {
                format!("{host}:443")
            };
            canaries.push((
                format!("an allowed host answers ({host})"),
                Canary::ProxyAllows { host },
            ));
        }
    }
    Ok(Planted {
        canaries,
        _listener: listener,
        _abstract: abstract_socket,
        secret_file,
    })
}

/// Run the canaries of `agent`'s sandbox and record the result.
pub fn verify(spec: &Spec, agent: &AgentSpec) -> Result<Verified, String> {
    let sandbox = agent
        .sandbox
        .as_ref()
        .ok_or_else(|| format!("agent `{}` has no sandbox", agent.name))?;
    if let Some(why) = super::unusable() {
        return Err(why);
    }
    let mut cx = Context::of(spec);
    let layout = super::layout(spec, agent, sandbox, &cx);
    for dir in &layout.make {
        crate::state::create_private_dir(dir)
            .map_err(|e| format!("cannot make `{}`: {e}", dir.display()))?;
    }
    let planted =
        plant(spec, agent, &layout, &cx).map_err(|e| format!("cannot plant the canaries: {e}"))?;
    // The canaries' refusals are no doing of the agent's: not recorded in its ops.
    let proxy = super::Proxy::start(
        &layout,
        &FleetDir::new(&spec.fleet.state_dir).agent(&agent.name),
        false,
    )
    .map_err(|e| format!("cannot start the sandbox's proxy: {e}"))?;
    cx.proxy_socket = proxy.as_ref().map(|p| p.socket.clone());
    let exe = crate::process::main_binary().map_err(|e| format!("cannot find phoenix: {e}"))?;
    let plan: Vec<&Canary> = planted.canaries.iter().map(|(_, c)| c).collect();
    let inner = vec![
        exe.to_string_lossy().into_owned(),
        "sandbox-canary".to_string(),
        serde_json::to_string(&plan).expect("canaries serialise"),
    ];
    let argv = super::wrap_argv(&layout, &inner, cx.proxy_socket.as_deref(), &exe);
    let found = run_inside(&argv, &agent.workdir, &layout)?;
    let mut checks: Vec<Check> = planted
        .canaries
        .iter()
        .enumerate()
        .map(|(i, (name, _))| match found.get(i) {
            Some(f) => Check {
                name: name.clone(),
                passed: f.held,
                detail: f.detail.clone(),
            },
            None => Check {
                name: name.clone(),
                passed: false,
                detail: "the canary did not report".to_string(),
            },
        })
        .collect();
    if found.len() > planted.canaries.len() {
        checks.push(Check {
            name: "the canaries' report".to_string(),
            passed: false,
            detail: "more results than canaries".to_string(),
        });
    }
    drop(planted);
    drop(proxy);
    let verified = Verified {
        agent: agent.name.clone(),
        profile: sandbox.profile.clone(),
        layout: layout_digest(&layout),
        at: crate::state::now_rfc3339(),
        passed: checks.iter().all(|c| c.passed),
        checks,
        limits: super::limits_applied(&sandbox.limits),
    };
    let _ = record(&FleetDir::new(&spec.fleet.state_dir), &verified);
    Ok(verified)
}

/// Whether `agent`'s sandbox, as it would start now, has passed its canaries; verifies it
/// when the last verification was of another layout (or failed: a fixed machine passes).
pub fn passed_for_start(spec: &Spec, agent: &AgentSpec) -> Result<(), String> {
    let Some(sandbox) = &agent.sandbox else {
        return Ok(());
    };
    let layout = super::layout(spec, agent, sandbox, &Context::of(spec));
    let digest = layout_digest(&layout);
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    if last(&fleet, &agent.name).is_some_and(|v| v.passed && v.layout == digest) {
        return Ok(());
    }
    let verified = verify(spec, agent)?;
    if verified.passed {
        return Ok(());
    }
    let failed: Vec<String> = verified
        .failed()
        .iter()
        .map(|c| format!("{} ({})", c.name, c.detail))
        .collect();
    Err(format!(
        "its sandbox `{}` failed {} canar{}: {}",
        sandbox.profile,
        failed.len(),
        if failed.len() == 1 { "y" } else { "ies" },
        failed.join("; ")
    ))
}

fn run_inside(
    argv: &[std::ffi::OsString],
    workdir: &Path,
    layout: &Layout,
) -> Result<Vec<Found>, String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .envs(layout.proxy_env());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run bwrap: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stdout).take(MAX_REPORT).read_to_end(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > INSIDE_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the canaries did not finish within {}s",
                    INSIDE_DEADLINE.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("cannot wait for bwrap: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        return Err(format!(
            "the sandbox could not be made ({status}): {}",
            String::from_utf8_lossy(&err).trim()
        ));
    }
    serde_json::from_slice(&out).map_err(|e| format!("the canaries' report does not read ({e})"))
}

/// Inside: try each canary, in order.
pub fn run_canaries(canaries: &[Canary]) -> Vec<Found> {
    canaries.iter().map(try_one).collect()
}

fn held(detail: impl Into<String>) -> Found {
    Found {
        held: true,
        detail: detail.into(),
    }
}

fn escaped(detail: impl Into<String>) -> Found {
    Found {
        held: false,
        detail: detail.into(),
    }
}

fn try_one(canary: &Canary) -> Found {
    match canary {
        Canary::ReadSecret { path, secret } => match std::fs::read(path) {
            Ok(bytes) if bytes == secret.as_bytes() => escaped("read the secret"),
            Ok(_) => held("the file shows something else"),
            Err(e) => held(format!("refused: {e}")),
        },
        Canary::SeeNothing { path, except } => match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => match std::fs::read_dir(path) {
                Ok(entries) => {
                    let seen: Vec<String> = entries
                        .filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|name| !except.contains(name))
                        .take(3)
                        .collect();
                    if seen.is_empty() {
                        held("nothing visible")
                    } else {
                        escaped(format!("visible: {}", seen.join(", ")))
                    }
                }
                Err(e) => held(format!("refused: {e}")),
            },
            Ok(m) if m.len() == 0 => held("an empty file"),
            Ok(m) => escaped(format!("{} bytes visible", m.len())),
            Err(e) => held(format!("not there: {e}")),
        },
        Canary::Write { path, .. } => {
            let attempt = if path.is_dir() {
                let probe = path.join(format!(".phoenix-canary-{}", random_hex()));
                let r = std::fs::File::create(&probe);
                let _ = std::fs::remove_file(&probe);
                r.map(drop)
            } else {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map(drop)
            };
            match attempt {
                Ok(()) => escaped("written"),
                Err(e) => held(format!("refused: {e}")),
            }
        }
        Canary::WriteWorkdir { path } => {
            let probe = path.join(format!(".phoenix-canary-{}", random_hex()));
            let r = std::fs::write(&probe, b"canary");
            let _ = std::fs::remove_file(&probe);
            match r {
                Ok(()) => held("written and removed"),
                Err(e) => escaped(format!("cannot write it: {e}")),
            }
        }
        Canary::ConnectHost { address } => {
            match address.parse().map_err(|e| format!("{e}")).and_then(|a| {
                TcpStream::connect_timeout(&a, CONNECT_TIMEOUT).map_err(|e| e.to_string())
            }) {
                Ok(_) => escaped("connected"),
                Err(e) => held(format!("refused: {e}")),
            }
        }
        Canary::ConnectAbstract { name } => {
            match SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|a| UnixStream::connect_addr(&a))
            {
                Ok(_) => escaped("connected"),
                Err(e) => held(format!("refused: {e}")),
            }
        }
        Canary::ConnectPath { path } => match UnixStream::connect(path) {
            Ok(_) => escaped("connected"),
            Err(e) => held(format!("refused: {e}")),
        },
        Canary::Signal { pid } => {
            // SAFETY: signal 0 only asks whether the process can be signalled.
            let r = unsafe { libc::kill(*pid, 0) };
            if r == 0 {
                escaped("the process can be signalled")
            } else {
                held(format!("refused: {}", std::io::Error::last_os_error()))
            }
        }
        Canary::ProxyRefuses { host } => match proxy_connect(host) {
            Ok(200) => escaped("the proxy connected it"),
            Ok(status) => held(format!("the proxy answered {status}")),
            Err(e) => escaped(format!("no answer from the proxy: {e}")),
        },
        Canary::ProxyAllows { host } => match proxy_connect(host) {
            Ok(200) => held("the proxy connected it"),
            Ok(status) => escaped(format!("the proxy answered {status}")),
            Err(e) => escaped(format!("no answer from the proxy: {e}")),
        },
    }
}

/// `CONNECT host` through the proxy inside; the status it answers.
fn proxy_connect(host: &str) -> Result<u16, String> {
    let address = RELAY_ADDRESS.parse().expect("a socket address");
    let mut stream =
        TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    write!(stream, "CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {}", line.lines().next().unwrap_or("")))
}
