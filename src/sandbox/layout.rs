//! What one agent's profile makes of the filesystem: every path the sandbox shows read-only,
//! writable, hidden or protected, phoenix's own defaults added to the profile's, and the
//! `bwrap` arguments that build it. Pure but for reading which paths exist (and what links
//! point to): the same spec and disk give the same arguments.
//!
//! Paths are mounted from the outside in (fewest components first), so the most specific
//! rule for a path wins: a hidden fleet state dir with the agent's own state dir writable
//! inside it, a writable workdir with its `.claude` settings read-only inside it. For one
//! path named twice, the stronger rule wins: a path the profile names over phoenix's
//! default, a hidden path over a writable one, a protected one over both.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::spec::sandbox::Network;
use crate::spec::{AgentSpec, SandboxSpec, Spec};

/// Where the proxy's socket appears inside the sandbox (its private /tmp).
pub const PROXY_SOCKET_INSIDE: &str = "/tmp/.phoenix-proxy.sock";
/// The loopback address the relay inside listens on for the CLI's proxy variables.
pub const RELAY_ADDRESS: &str = "127.0.0.1:3128";
/// The agent's private /tmp, in its state dir (on disk: a CLI's temporary files can be big).
pub const PRIVATE_TMP: &str = "sandbox-tmp";

/// Secrets every sandbox hides, relative to a home directory.
pub const HOME_SECRETS: [&str; 11] = [
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gh",
    ".netrc",
    ".docker",
    ".kube",
    ".git-credentials",
    ".config/gcloud",
    ".azure",
    ".password-store",
];

/// What a rule does to its path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
    /// An empty, read-only directory or file in its place.
    Hide,
    /// Read-only, even inside a writable path.
    Protect,
    /// Another file shown read-only in its place (phoenix.toml → the agent's own part).
    ShowInstead(PathBuf),
    /// Another path, writable, in its place (/tmp → the agent's private one).
    WriteInstead(PathBuf),
}

/// One path and what the sandbox does with it, and why (for `sandbox show`, plan and verify).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub path: PathBuf,
    pub access: Access,
    pub why: &'static str,
    /// Stronger wins for the same path.
    #[serde(skip)]
    rank: u8,
}

/// Ranks: phoenix's defaults below the profile's own, hiding above writing, protection last.
const DEFAULT_READ: u8 = 0;
const DEFAULT_HIDE: u8 = 1;
const DEFAULT_WRITE: u8 = 2;
const PROFILE_READ: u8 = 3;
const PROFILE_WRITE: u8 = 4;
const PROFILE_HIDE: u8 = 5;
const PROTECT: u8 = 6;
const ALWAYS: u8 = 7;

/// One agent's sandbox, ready to start.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    pub profile: String,
    pub rules: Vec<Rule>,
    pub network: Network,
    pub allow: Vec<String>,
    pub workdir: PathBuf,
    /// Directories the CLI needs writable that do not exist yet: made before the start (not
    /// part of what the sandbox does: a start makes them).
    #[serde(skip)]
    pub make: Vec<PathBuf>,
}

/// What the layout needs from outside the spec.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// phoenix's own `HOME` (the operator's secrets live there even when the agent's env sets
    /// another).
    pub operator_home: Option<PathBuf>,
    /// The socket of the fleet's pane server (a sandbox hides it).
    pub pane_server: Option<PathBuf>,
    /// The phoenix program (the hooks run it inside).
    pub exe: Option<PathBuf>,
    /// The proxy's socket outside, with a proxied network.
    pub proxy_socket: Option<PathBuf>,
}

impl Context {
    /// The context of `spec`'s fleet as this process sees it: the same for apply, the
    /// wrapper and verify, so that what one verified is what another starts.
    pub fn of(spec: &Spec) -> Context {
        Context {
            operator_home: std::env::var_os("HOME").map(PathBuf::from),
            pane_server: Some(crate::world::server_socket_path(&spec.fleet.socket)),
            exe: crate::process::main_binary().ok(),
            proxy_socket: None,
        }
    }
}

struct Rules(BTreeMap<PathBuf, Rule>);

impl Rules {
    /// Add a rule for `path`; a link is followed (the sandbox must act on what the path
    /// shows, and a mount point must not be a link).
    fn add(&mut self, path: &Path, access: Access, rank: u8, why: &'static str) {
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if self.0.get(&path).is_some_and(|old| old.rank > rank) {
            return;
        }
        let rule = Rule {
            path: path.clone(),
            access,
            why,
            rank,
        };
        self.0.insert(path, rule);
    }
}

fn home_of(agent: &AgentSpec, cx: &Context) -> Option<PathBuf> {
    agent
        .env
        .get("HOME")
        .map(PathBuf::from)
        .or_else(|| cx.operator_home.clone())
}

/// Project files a CLI reads its settings (and phoenix's hooks) from, below the workdir:
/// read-only, so an agent cannot switch off what phoenix hears from it. Every CLI's,
/// whichever this agent runs: another agent may run another CLI here.
fn project_settings(workdir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = crate::agent_cli::HOOKED
        .into_iter()
        .filter_map(|cli| crate::agent_cli::hook_path_in(cli, workdir))
        .collect();
    paths.extend(
        crate::agent_cli::ALL
            .into_iter()
            .flat_map(|cli| cli.adapter().sandbox_project_settings().iter())
            .map(|p| workdir.join(p)),
    );
    paths
}

/// A git checkout's own directories: the common dir (objects, refs: writable, or the agent
/// could not commit) and what git runs from there (read-only: a hook or a `core.fsmonitor`
/// written there would run outside the sandbox, the next time phoenix or a person runs git).
fn git_dirs(workdir: &Path) -> Option<(PathBuf, Vec<PathBuf>)> {
    let dot_git = workdir.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    let common = if meta.is_dir() {
        dot_git
    } else {
        // A worktree: `gitdir: <common>/worktrees/<id>`, and that dir's `commondir`.
        let text = crate::state::bounded::read_string(
            &dot_git,
            4096,
            crate::state::bounded::Links::Refuse,
        )
        .ok()?;
        let gitdir = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
        let gitdir = if gitdir.is_absolute() {
            gitdir
        } else {
            workdir.join(gitdir)
        };
        let common = crate::state::bounded::read_string(
            &gitdir.join("commondir"),
            4096,
            crate::state::bounded::Links::Refuse,
        )
        .ok()
        .map(|c| PathBuf::from(c.trim()))
        .unwrap_or_else(|| PathBuf::from("../.."));
        crate::spec::tidy(&if common.is_absolute() {
            common
        } else {
            gitdir.join(common)
        })
    };
    let protected = vec![common.join("hooks"), common.join("config")];
    Some((common, protected))
}

/// The layout of `agent`'s sandbox in `spec`.
pub fn layout(spec: &Spec, agent: &AgentSpec, sandbox: &SandboxSpec, cx: &Context) -> Layout {
    let mut rules = Rules(BTreeMap::new());
    let state_dir = spec.agent_dir(&agent.name);
    let home = home_of(agent, cx);

    for p in &sandbox.read {
        rules.add(p, Access::Read, PROFILE_READ, "the profile's `read`");
    }
    if !sandbox.read.iter().any(|p| p == Path::new("/")) {
        // What any program needs to run, and what the hooks run.
        for p in ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"] {
            rules.add(Path::new(p), Access::Read, DEFAULT_READ, "system files");
        }
        if let Some(exe) = &cx.exe {
            rules.add(
                exe,
                Access::Read,
                DEFAULT_READ,
                "the phoenix program (hooks)",
            );
        }
        if let Some(program) = agent.program_path() {
            let real = std::fs::canonicalize(&program).unwrap_or(program);
            // A CLI installed by npm runs from its package: show the whole package.
            let package = real
                .ancestors()
                .find(|a| a.parent().is_some_and(|p| p.ends_with("node_modules")))
                .map(Path::to_path_buf)
                .unwrap_or(real);
            rules.add(&package, Access::Read, DEFAULT_READ, "the CLI's program");
        }
    }

    // Secrets, the fleet's state, the other agents, phoenix.toml.
    let mut homes: Vec<PathBuf> = home.iter().cloned().collect();
    homes.extend(cx.operator_home.iter().cloned());
    homes.dedup();
    for h in &homes {
        for secret in HOME_SECRETS {
            rules.add(&h.join(secret), Access::Hide, DEFAULT_HIDE, "a secret");
        }
    }
    rules.add(
        &spec.fleet.state_dir,
        Access::Hide,
        DEFAULT_HIDE,
        "the fleet's state",
    );
    for other in spec.agents.iter().filter(|a| a.name != agent.name) {
        // An agent sharing this workdir, or one above it, keeps it: hiding it would hide
        // this agent's own work.
        if !agent.workdir.starts_with(&other.workdir) {
            rules.add(
                &other.workdir,
                Access::Hide,
                DEFAULT_HIDE,
                "another agent's workdir",
            );
        }
    }
    let part = state_dir.join(crate::spec::narrow::AGENT_CONFIG);
    let config_instead = if part.is_file() {
        Access::ShowInstead(part)
    } else {
        Access::Hide
    };
    rules.add(
        &spec.file,
        config_instead,
        ALWAYS,
        "phoenix.toml: only this agent's part",
    );
    if let Some(socket) = &cx.pane_server {
        rules.add(socket, Access::Hide, ALWAYS, "the fleet's pane server");
        if let Some(dir) = socket.parent().filter(|d| *d != Path::new("/tmp")) {
            rules.add(dir, Access::Hide, DEFAULT_HIDE, "the fleet's pane server");
        }
    }
    for p in &sandbox.hide {
        rules.add(p, Access::Hide, PROFILE_HIDE, "the profile's `hide`");
    }

    // What it writes.
    for p in &sandbox.write {
        rules.add(p, Access::Write, PROFILE_WRITE, "the profile's `write`");
    }
    rules.add(&state_dir, Access::Write, ALWAYS, "its own state dir");
    // Its part of phoenix.toml, which its wrapper outside reads too: not the agent's to edit.
    rules.add(
        &state_dir.join(crate::spec::narrow::AGENT_CONFIG),
        Access::Protect,
        ALWAYS,
        "the config its wrapper reads",
    );
    rules.add(
        Path::new("/tmp"),
        Access::WriteInstead(state_dir.join(PRIVATE_TMP)),
        ALWAYS,
        "a private /tmp",
    );
    let mut make = vec![state_dir.join(PRIVATE_TMP)];
    if let Some(h) = &home {
        let env = |k: &str| agent.env.get(k).cloned();
        let (session, settings) = agent.cli.adapter().sandbox_home(h, &env);
        for p in session {
            if !p.exists() && p.extension().is_none() {
                make.push(p.clone());
            }
            rules.add(&p, Access::Write, DEFAULT_WRITE, "the CLI's sessions");
        }
        for p in settings {
            rules.add(&p, Access::Protect, PROTECT, "the CLI's settings");
        }
    }
    let workdirs = sandbox
        .write
        .iter()
        .chain(std::iter::once(&agent.workdir))
        .collect::<Vec<_>>();
    for w in workdirs {
        if let Some((common, protected)) = git_dirs(w) {
            if !common.starts_with(w) {
                rules.add(&common, Access::Write, DEFAULT_WRITE, "its git repository");
            }
            for p in protected {
                rules.add(&p, Access::Protect, PROTECT, "what git runs");
            }
        }
    }
    for p in project_settings(&agent.workdir) {
        rules.add(
            &p,
            Access::Protect,
            PROTECT,
            "the CLI's settings and phoenix's hooks",
        );
    }
    for p in &sandbox.protect {
        rules.add(p, Access::Protect, PROTECT, "the profile's `protect`");
    }

    let mut rules: Vec<Rule> = rules.0.into_values().collect();
    rules.sort_by(|a, b| {
        (a.path.components().count(), &a.path).cmp(&(b.path.components().count(), &b.path))
    });
    Layout {
        profile: sandbox.profile.clone(),
        rules,
        network: sandbox.network,
        allow: sandbox.allow.clone(),
        workdir: agent.workdir.clone(),
        make,
    }
}

impl Layout {
    /// `bwrap`'s arguments (up to and including `--`) that build this sandbox. Paths that do
    /// not exist are left out: there is nothing to show, hide or protect.
    pub fn bwrap_args(&self, proxy_socket: Option<&Path>) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |parts: &[&std::ffi::OsStr]| args.extend(parts.iter().map(|p| p.into()));
        push(&[
            "--die-with-parent".as_ref(),
            "--unshare-user".as_ref(),
            "--unshare-pid".as_ref(),
            "--unshare-net".as_ref(),
            "--unshare-ipc".as_ref(),
            "--unshare-uts".as_ref(),
            "--unshare-cgroup-try".as_ref(),
            // As root, bwrap would keep every capability: one to unmount a hidden path.
            "--cap-drop".as_ref(),
            "ALL".as_ref(),
        ]);
        let mut remount = Vec::new();
        let mut specials_done = false;
        for rule in &self.rules {
            let path = rule.path.as_os_str();
            // /dev and /proc right after the root: everything else is below them or apart.
            if !specials_done && rule.path != Path::new("/") {
                push(&["--dev".as_ref(), "/dev".as_ref()]);
                push(&["--proc".as_ref(), "/proc".as_ref()]);
                specials_done = true;
            }
            let meta = std::fs::metadata(&rule.path);
            match &rule.access {
                Access::ShowInstead(src) => {
                    push(&["--ro-bind".as_ref(), src.as_os_str(), path]);
                    continue;
                }
                Access::WriteInstead(src) => {
                    push(&["--bind".as_ref(), src.as_os_str(), path]);
                    continue;
                }
                _ => {}
            }
            let Ok(meta) = meta else { continue };
            match rule.access {
                Access::Read | Access::Protect => push(&["--ro-bind".as_ref(), path, path]),
                Access::Write => push(&["--bind".as_ref(), path, path]),
                Access::Hide if meta.is_dir() => {
                    push(&["--tmpfs".as_ref(), path]);
                    remount.push(rule.path.clone());
                }
                Access::Hide => push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), path]),
                _ => unreachable!("handled above"),
            }
        }
        if !specials_done {
            push(&["--dev".as_ref(), "/dev".as_ref()]);
            push(&["--proc".as_ref(), "/proc".as_ref()]);
        }
        // Hidden directories read-only once everything inside them is mounted (a mount point
        // inside needs them writable until then); deepest first.
        for p in remount.iter().rev() {
            push(&["--remount-ro".as_ref(), p.as_os_str()]);
        }
        if let Some(socket) = proxy_socket {
            push(&[
                "--bind".as_ref(),
                socket.as_os_str(),
                PROXY_SOCKET_INSIDE.as_ref(),
            ]);
        }
        push(&["--chdir".as_ref(), self.workdir.as_os_str(), "--".as_ref()]);
        args
    }

    /// The environment the CLI gets for its network: the proxy's address where it has one,
    /// no exceptions for any host (loopback included: inside, it is the sandbox's own).
    pub fn proxy_env(&self) -> Vec<(&'static str, String)> {
        if !self.network.proxied() {
            return Vec::new();
        }
        let url = format!("http://{RELAY_ADDRESS}");
        let mut env: Vec<(&'static str, String)> = [
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "https_proxy",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ]
        .into_iter()
        .map(|k| (k, url.clone()))
        .collect();
        env.push(("NO_PROXY", String::new()));
        env.push(("no_proxy", String::new()));
        env
    }

    /// A one-line summary for plans and status.
    pub fn summary(&self) -> String {
        let count = |f: fn(&Access) -> bool| {
            self.rules
                .iter()
                .filter(|r| f(&r.access) && r.path.exists())
                .count()
        };
        let network = match self.network {
            Network::None => "no network".to_string(),
            Network::Host => "any host through the proxy".to_string(),
            Network::Allow => format!("network only to {}", self.allow.join(", ")),
        };
        format!(
            "sandbox `{}`: {} writable, {} hidden, {} protected, {network}",
            self.profile,
            count(|a| matches!(a, Access::Write | Access::WriteInstead(_))),
            count(|a| matches!(a, Access::Hide | Access::ShowInstead(_))),
            count(|a| matches!(a, Access::Protect)),
        )
    }
}
