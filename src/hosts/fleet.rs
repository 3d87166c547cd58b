//! The operator's side: the hosts of a spec, each reached through its own transport, asked in
//! parallel so a slow or dead host costs its own timeout and never the others' time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::carry::Fenced;
use super::protocol::{Call, Ran, Reply, Request};
use super::ssh::Ssh;
use super::{HostError, Transport};
use crate::spec::{HostSpec, Spec};
use crate::state::bounded::{Links, read_whole};
use crate::state::fence::Fence;

/// How long ssh may take to connect to a host before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a read (status, events, a plan) may take on a host, connecting included.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a host's apply may take: starting its agents waits for their panes.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(330);

/// The longest file a slice carries (a policy, a template).
const MAX_SLICE_FILE: u64 = 1 << 20;
/// At most this many policy and template files go with a slice.
const MAX_SLICE_FILES: usize = 200;

/// One host of the spec and how to reach it.
pub struct Link {
    pub host: HostSpec,
    pub transport: Ssh,
    /// The fences the operator's placement record owes this host (agents moved away from it
    /// while it was unreachable), sent with every call until one is answered: the first
    /// contact with a host that comes back stops its stale copies.
    pub owed: Mutex<BTreeMap<String, Fence>>,
    /// The operator's state dir, where the record is.
    pub state_dir: PathBuf,
    /// What the host did with the fences it was sent (the stale copies it stopped).
    pub fenced: Mutex<Vec<Fenced>>,
    /// The agents the fleet knows: the only ones a host's rows may be about.
    pub known: std::sync::Arc<super::admit::Known>,
}

impl Link {
    pub fn name(&self) -> &str {
        &self.host.name
    }

    /// Ask the host's phoenix one thing (with the fences it is owed, if any).
    pub fn ask(&self, call: Call, timeout: Duration) -> Result<Reply, HostError> {
        let mut request = Request::new(call);
        request.owed_fences = self.owed.lock().map(|o| o.clone()).unwrap_or_default();
        let reply = super::ask_request(&self.transport, &self.host.phoenix, &request, timeout)?;
        if let Some(done) = &reply.fenced {
            self.delivered(&request.owed_fences, done);
        }
        Ok(reply)
    }

    /// The host answered the fences it was sent: those whose copies are stopped (or never
    /// ran) are no longer owed; a stop that failed keeps its fence owed, sent again next time.
    fn delivered(&self, sent: &BTreeMap<String, Fence>, done: &Fenced) {
        if let Ok(mut fenced) = self.fenced.lock() {
            fenced.push(done.clone());
        }
        if !done.failed.is_empty() {
            return;
        }
        if let Ok(mut owed) = self.owed.lock() {
            owed.retain(|agent, _| !sent.contains_key(agent));
        }
        if let Err(e) = super::moves::fences_delivered(&self.state_dir, self.name(), sent) {
            tracing::debug!(host = %self.name(), error = %e, "owed fences stay recorded: sent again next time");
        }
    }

    /// One of phoenix's own commands (`status --json`, …) on the host's fleet.
    pub fn run(&self, args: &[&str], timeout: Duration) -> Result<Ran, HostError> {
        self.run_with_stdin(args, None, timeout)
    }

    /// [`Link::run`] with `stdin` given to the command there.
    pub fn run_with_stdin(
        &self,
        args: &[&str],
        stdin: Option<String>,
        timeout: Duration,
    ) -> Result<Ran, HostError> {
        let call = Call::Run {
            dir: self.host.dir.clone(),
            args: args.iter().map(|a| a.to_string()).collect(),
            stdin,
        };
        let reply = self.ask(call, timeout)?;
        serde_json::from_value(reply.result).map_err(|e| HostError::Remote {
            host: self.name().to_string(),
            kind: super::protocol::ErrorKind::BadRequest,
            message: format!("the host's answer is not a command's result: {e}"),
        })
    }

    /// Where the transport runs `remote` with a terminal (for `attach`).
    pub fn interactive(&self, remote: &[&str]) -> Vec<std::ffi::OsString> {
        self.transport.interactive(remote)
    }
}

/// Every `[[host]]` of `spec`, in the order written.
pub fn links(spec: &Spec) -> Vec<Link> {
    let control_dir = control_dir(&spec.fleet.state_dir);
    // A record that cannot be read owes nothing here: the commands that need it (move, plan,
    // apply) say why.
    let placements = super::moves::load(&spec.fleet.state_dir).unwrap_or_default();
    let known = std::sync::Arc::new(super::admit::Known::of(spec, &placements));
    spec.hosts
        .iter()
        .map(|host| Link {
            owed: Mutex::new(super::moves::owed_to(
                &placements,
                &super::moves::Place::Host(host.name.clone()),
            )),
            state_dir: spec.fleet.state_dir.clone(),
            fenced: Mutex::new(Vec::new()),
            known: known.clone(),
            host: HostSpec {
                phoenix: super::known::phoenix_of(&spec.fleet.state_dir, host),
                ..host.clone()
            },
            transport: Ssh {
                host: host.name.clone(),
                destination: host.ssh.clone(),
                config: spec.fleet.ssh_config.clone(),
                control_dir: control_dir.clone(),
                connect_timeout: CONNECT_TIMEOUT,
            },
        })
        .collect()
}

/// `f` for every link at once, the answers in the links' order. Each host is bounded by its
/// own timeout, so the slowest host bounds the whole.
pub fn each<T: Send>(links: &[Link], f: impl Fn(&Link) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = links.iter().map(|l| scope.spawn(|| f(l))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a host's thread does not panic"))
            .collect()
    })
}

/// The directory of the shared ssh connections: `<state_dir>/ssh`, unless that is too long
/// for a unix socket path (108 bytes, and ssh adds a 40-character `%C` and a temporary
/// suffix), then a directory of this user's under the system's temporary directory named
/// after the state dir.
pub fn control_dir(state_dir: &Path) -> PathBuf {
    let preferred = state_dir.join("ssh");
    if preferred.as_os_str().len() <= 50 {
        return preferred;
    }
    use std::os::unix::ffi::OsStrExt;
    let digest = crate::state::digest(state_dir.as_os_str().as_bytes());
    std::env::temp_dir().join(format!(
        "phoenix-ssh-{}-{}",
        nix::unistd::getuid(),
        &digest[..12]
    ))
}

/// The host's slice of the spec's phoenix.toml (see [`super::slice`]).
pub fn slice(spec: &Spec, host: &str) -> crate::error::Result<String> {
    let bytes =
        read_whole(&spec.file, crate::spec::MAX_CONFIG_BYTES, Links::Follow).map_err(|e| {
            crate::error::Error::msg(format!("cannot read `{}`: {e}", spec.file.display()))
        })?;
    slice_of(spec, &String::from_utf8_lossy(&bytes), host)
}

/// The host's slice of `source`, a text of the spec's phoenix.toml (see [`super::slice`]).
pub fn slice_of(spec: &Spec, source: &str, host: &str) -> crate::error::Result<String> {
    let socket = spec
        .hosts
        .iter()
        .find(|h| h.name == host)
        .and_then(|h| h.tmux_socket.as_deref());
    super::slice::for_host(source, host, socket).map_err(|e| {
        crate::error::Error::msg(format!(
            "cannot cut host `{host}`'s slice of `{}`: {e}",
            spec.file.display()
        ))
    })
}

/// The policies and templates next to the spec, by path relative to it, that go with every
/// slice: regular files only, each at most 1 MiB. Where the spec has none, none.
pub fn slice_files(spec: &Spec) -> crate::error::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for top in ["policies", "templates"] {
        let Ok(entries) = std::fs::read_dir(spec.dir.join(top)) else {
            continue;
        };
        let mut names: Vec<_> = entries.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for entry in names {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            // Regular files only: a link or a directory stays on this machine.
            if !entry.file_type().is_ok_and(|t| t.is_file()) || name.starts_with('.') {
                continue;
            }
            if files.len() >= MAX_SLICE_FILES {
                return Err(crate::error::Error::msg(format!(
                    "more than {MAX_SLICE_FILES} files in `{}` and `{}`",
                    spec.dir.join("policies").display(),
                    spec.dir.join("templates").display()
                )));
            }
            let bytes = read_whole(&entry.path(), MAX_SLICE_FILE, Links::Refuse).map_err(|e| {
                crate::error::Error::msg(format!("cannot read `{}`: {e}", entry.path().display()))
            })?;
            files.insert(
                format!("{top}/{name}"),
                String::from_utf8_lossy(&bytes).into_owned(),
            );
        }
    }
    Ok(files)
}

/// Which transport `attach` and messages name for a host.
pub fn describe(link: &Link) -> String {
    link.transport.describe()
}
