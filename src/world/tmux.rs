//! The tmux runtime: every call goes to a private server (`tmux -L <socket>`), arguments are
//! passed as a vector (never through a shell) and made inert (`super::inert`), and output is
//! read through explicit formats.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use super::{Check, Launch, PaneObs, Runtime, RuntimeError, Started, Tag};
use crate::spec::Spec;
use crate::text::sh_quote;

mod batch;

/// The program this adapter runs.
pub(super) const PROGRAM: &str = "tmux";

/// `list-panes` format. tmux escapes control characters when no UTF-8 locale is set, so the
/// separator is printable: every field before the last is ours or numeric and cannot contain
/// `|`, and the last is `session:window` (session names cannot contain `:`).
const LIST_FORMAT: &str = "#{pane_id}|#{pane_pid}|#{pane_dead}|#{pane_dead_status}|#{pane_dead_signal}|#{@phoenix_agent}|#{@phoenix_fp}|#{@phoenix_phase}|#{@phoenix_fleet}|#{session_name}:#{window_name}";
const LIST_FIELDS: usize = 10;

/// The directory a pane starts in. tmux format-expands `-c` (`#(…)` would run, `#h` would
/// become the host name), so the agent's workdir never goes there: the wrapper changes into
/// it itself, and the agent is started in it.
const PANE_START_DIR: &str = "/";

#[derive(Debug, Clone)]
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    pub fn new(socket: impl Into<String>) -> Self {
        Tmux {
            socket: socket.into(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(program());
        cmd.arg("-L").arg(&self.socket);
        // A tmux client inside another tmux would otherwise refuse or talk to the wrong server.
        cmd.env_remove("TMUX");
        cmd
    }

    /// A client of this server at `pane`, in a popup of the tmux this process runs inside
    /// (`$TMUX`, the person's own server); it returns when the popup closes. `false` when that
    /// tmux shows no popup: older than 3.2, or no client attached to it.
    fn show_in_popup(&self, pane: &str) -> Result<bool, RuntimeError> {
        // The popup's shell runs this line; tmux found on PATH here is an absolute path.
        let client = format!(
            "exec env -u TMUX {} -L {} attach-session -t {}",
            sh_quote(&program().to_string_lossy()),
            sh_quote(&self.socket),
            sh_quote(pane)
        );
        let args: Vec<std::ffi::OsString> = ["display-popup", "-E", "-w", "90%", "-h", "90%"]
            .iter()
            .map(|a| (*a).into())
            .chain([client.into()])
            .collect();
        // Not `command()`: this one is for the person's tmux, which `$TMUX` names.
        let output = Command::new(program())
            .args(args.iter().map(|a| super::inert::command_argument(a)))
            .output()
            .map_err(|e| RuntimeError::Failed {
                command: describe(&args),
                stderr: e.to_string(),
            })?;
        Ok(output.status.success())
    }

    /// Put `text` into the paste buffer `name`, through stdin: no shell, no argument limits.
    /// Private: text reaches a pane only through `paste`, which sanitizes it.
    fn load_buffer(&self, name: &str, text: &str) -> Result<(), RuntimeError> {
        use std::io::Write;
        use std::process::Stdio;
        let args: Vec<std::ffi::OsString> =
            vec!["load-buffer".into(), "-b".into(), name.into(), "-".into()];
        let mut child = self
            .command()
            .args(args.iter().map(|a| super::inert::command_argument(a)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| RuntimeError::Failed {
                command: describe(&args),
                stderr: e.to_string(),
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(text.as_bytes());
        }
        let output = child.wait_with_output().map_err(|e| RuntimeError::Failed {
            command: describe(&args),
            stderr: e.to_string(),
        })?;
        check(output, &args).map(drop)
    }

    /// Run one tmux invocation (possibly several commands separated by lone `;` arguments).
    /// Any other argument ending in `;` has that `;` escaped, so no value can split the
    /// command; values tmux format-expands must be passed through `inert::format_literal`.
    fn run<I, S>(&self, args: I) -> Result<String, RuntimeError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        check(self.output(&args)?, &args)
    }

    /// `run`, with what tmux printed whether it succeeded or not (a sequence that failed half
    /// way printed what its first half made).
    fn output<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<Output, RuntimeError> {
        let args: Vec<std::ffi::OsString> = args.iter().map(|a| a.as_ref().to_owned()).collect();
        let mut cmd = self.command();
        cmd.args(args.iter().map(|a| super::inert::command_argument(a)));
        cmd.output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                RuntimeError::NotInstalled
            } else {
                RuntimeError::Failed {
                    command: describe(&args),
                    stderr: e.to_string(),
                }
            }
        })
    }
}

fn describe(args: &[std::ffi::OsString]) -> String {
    args.first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn check(output: Output, args: &[std::ffi::OsString]) -> Result<String, RuntimeError> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(RuntimeError::Failed {
            command: describe(args),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// The server is simply not there: an empty world, not an error.
/// tmux's client lost the server while it waited for an answer.
fn exited_under_the_client(err: &RuntimeError) -> bool {
    matches!(err, RuntimeError::Failed { stderr, .. } if stderr.contains("server exited unexpectedly"))
}

fn is_no_server(err: &RuntimeError) -> bool {
    match err {
        RuntimeError::Failed { stderr, .. } => {
            stderr.contains("no server running")
                || stderr.contains("error connecting to")
                || stderr.contains("No such file or directory")
        }
        _ => false,
    }
}

impl Runtime for Tmux {
    fn name(&self) -> &'static str {
        PROGRAM
    }

    fn location(&self) -> String {
        format!("tmux server `{}`", self.socket)
    }

    fn inspect_hint(&self) -> String {
        format!("`tmux -L {} list-panes -a`", self.socket)
    }

    fn diagnose(&self, err: &RuntimeError) -> Option<String> {
        diagnose(err)
    }

    fn server_check(&self, fleet_id: &str, problem: Option<String>) -> Check {
        // The server's name is derived by default: say it, so `tmux -L` can find it.
        Check {
            check: "tmux server".into(),
            ok: problem.is_none(),
            detail: format!("`tmux -L {}` (fleet `{fleet_id}`)", self.socket),
            fix: problem,
        }
    }

    fn list(&self) -> Result<Option<Vec<PaneObs>>, RuntimeError> {
        let out = match self.run(["list-panes", "-a", "-F", LIST_FORMAT]) {
            Ok(out) => out,
            Err(e) if is_no_server(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        out.lines()
            .filter(|l| !l.is_empty())
            .map(parse_pane)
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn start(&self, launch: &Launch) -> Result<String, RuntimeError> {
        match self.start_batch(std::slice::from_ref(launch)).pop() {
            Some(Started::Pane(pane)) => Ok(pane),
            Some(Started::Failed(e)) => Err(e),
            _ => Err(RuntimeError::Parse("tmux was not asked to start it".into())),
        }
    }

    fn start_many(&self, launches: &[Launch]) -> Vec<Started> {
        self.start_batch(launches)
    }

    fn respawn(&self, pane: &str, launch: &Launch) -> Result<(), RuntimeError> {
        let mut args: Vec<String> = vec![
            "respawn-pane".into(),
            "-k".into(),
            "-t".into(),
            pane.into(),
            "-c".into(),
            PANE_START_DIR.into(),
        ];
        args.extend(launch.argv.iter().cloned());
        args.extend(batch::label_args(launch, pane));
        args.extend(batch::tap_args(launch, pane));
        self.run(&args).map(drop)
    }

    fn stop(&self, pane: &str) -> Result<(), RuntimeError> {
        match self.run(["kill-pane", "-t", pane]) {
            Err(e) if is_gone(&e) => Ok(()),
            other => other.map(drop),
        }
    }

    fn stop_many(&self, panes: &[&str]) -> Vec<Result<(), RuntimeError>> {
        self.stop_batch(panes)
    }

    /// Paste `text` into `pane` as one bracketed paste (when the program there asked for
    /// bracketed paste). The text goes through `inert::keyboard_text` here, the one place every
    /// paste passes: no escape sequence in it can end the paste early or reach the terminal.
    fn paste(&self, pane: &str, text: &str) -> Result<(), RuntimeError> {
        let text = super::inert::keyboard_text(text);
        // One buffer per call: concurrent pastes (the tap, the API, the wrapper) must not
        // take each other's text.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let buffer = format!(
            "phoenix-paste-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        self.load_buffer(&buffer, &text)?;
        self.run(["paste-buffer", "-p", "-d", "-b", &buffer, "-t", pane])
            .map(drop)
    }

    /// Press Enter in `pane` (a key name, no text).
    fn press_enter(&self, pane: &str) -> Result<(), RuntimeError> {
        self.run(["send-keys", "-t", pane, "Enter"]).map(drop)
    }

    /// Press Escape in `pane` (a key name, no text).
    fn interrupt(&self, pane: &str) -> Result<(), RuntimeError> {
        self.run(["send-keys", "-t", pane, "Escape"]).map(drop)
    }

    /// Show `pane` to the person at this terminal until they leave it. Inside the fleet's own
    /// server: switch this client to it. Inside another tmux (the person's own): a popup of
    /// that tmux runs a client of the fleet's server, so the prefix and `d` reach the fleet's
    /// client (a client nested in the pane would leave the person's own client detached on
    /// `C-b d`), and closing it returns to where they were. Without a popup (tmux before 3.2,
    /// or no client of that tmux to show it on) the client is nested in place. Outside tmux:
    /// attach to the server until they detach. tmux gets the terminal (inherited stdio).
    fn show(&self, pane: &str) -> Result<(), RuntimeError> {
        let outer = std::env::var("TMUX").ok().filter(|t| !t.is_empty());
        let inside_server = outer.as_deref().is_some_and(|t| {
            let path = t.split(',').next().unwrap_or("");
            Path::new(path).file_name() == Some(std::ffi::OsStr::new(self.socket.as_str()))
        });
        self.run(["select-window", "-t", pane])?;
        self.run(["select-pane", "-t", pane])?;
        if outer.is_some() && !inside_server && self.show_in_popup(pane)? {
            return Ok(());
        }
        let verb = if inside_server {
            "switch-client"
        } else {
            "attach-session"
        };
        let args: Vec<std::ffi::OsString> = vec![verb.into(), "-t".into(), pane.into()];
        let status = self
            .command()
            .args(args.iter().map(|a| super::inert::command_argument(a)))
            .status()
            .map_err(|e| RuntimeError::Failed {
                command: describe(&args),
                stderr: e.to_string(),
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(RuntimeError::Failed {
                command: describe(&args),
                stderr: format!("tmux said no ({status})"),
            })
        }
    }

    fn capture(&self, pane: &str, lines: usize) -> Result<String, RuntimeError> {
        let start = format!("-{lines}");
        self.run(["capture-pane", "-p", "-J", "-t", pane, "-S", &start])
    }

    /// One tmux call per 40 panes (a tmux command line is limited to about 16 KB):
    /// `capture-pane` per pane, each preceded by a marker line with a per-call nonce (so no
    /// pane's text can pass for a marker). If a call fails (a pane went away meanwhile), its
    /// panes are read one by one.
    fn capture_many(&self, panes: &[String], lines: usize) -> BTreeMap<String, String> {
        const PER_CALL: usize = 40;
        let nonce = format!(
            "{:x}{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        );
        let prefix = format!("phoenix-capture-{nonce}:");
        let start = format!("-{lines}");
        let mut screens = BTreeMap::new();
        for chunk in panes.chunks(PER_CALL) {
            let mut args: Vec<String> = Vec::new();
            // The marker carries the pane's index, not its id: display-message runs its text
            // through strftime, and `%94` comes out as 94 columns of padding.
            for (i, pane) in chunk.iter().enumerate() {
                if !args.is_empty() {
                    args.push(";".into());
                }
                args.extend([
                    "display-message".into(),
                    "-p".into(),
                    format!("{prefix}{i}"),
                ]);
                args.push(";".into());
                args.extend(
                    [
                        "capture-pane",
                        "-p",
                        "-J",
                        "-t",
                        pane.as_str(),
                        "-S",
                        start.as_str(),
                    ]
                    .map(String::from),
                );
            }
            let Ok(out) = self.run(&args) else {
                for p in chunk {
                    if let Ok(t) = self.capture(p, lines) {
                        screens.insert(p.clone(), t);
                    }
                }
                continue;
            };
            let mut current: Option<(String, String)> = None;
            for line in out.split_inclusive('\n') {
                let bare = line.trim_end_matches('\n');
                if let Some(pane) = bare
                    .strip_prefix(&prefix)
                    .and_then(|i| i.trim().parse::<usize>().ok())
                    .and_then(|i| chunk.get(i))
                {
                    if let Some((p, text)) = current.take() {
                        screens.insert(p, text);
                    }
                    current = Some((pane.clone(), String::new()));
                } else if let Some((_, text)) = current.as_mut() {
                    text.push_str(line);
                }
            }
            if let Some((p, text)) = current {
                screens.insert(p, text);
            }
        }
        screens
    }

    fn set_tag(&self, pane: &str, tag: Tag, value: &str) -> Result<(), RuntimeError> {
        self.run(["set-option", "-p", "-t", pane, option(tag), value])
            .map(drop)
    }

    fn tag(&self, pane: &str, tag: Tag) -> Result<Option<String>, RuntimeError> {
        // `-q`: an option never set is empty, not an error; `-v`: the value alone.
        let out = self.run(["show-options", "-p", "-q", "-v", "-t", pane, option(tag)])?;
        let value = out.trim_end_matches('\n');
        Ok((!value.is_empty()).then(|| value.to_string()))
    }

    fn pane_pid(&self, pane: &str) -> Result<Option<u32>, RuntimeError> {
        match self.run(["display-message", "-p", "-t", pane, "#{pane_pid}"]) {
            Ok(out) => Ok(out.trim().parse().ok()),
            Err(e) if is_gone(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `TMUX_PANE` names a pane of whichever server started this process, and `%3` on the
    /// fleet's server may be another agent's pane: it counts only if this process is that
    /// pane's own, which tmux forks and execs directly (a pane's command given as separate
    /// words never goes through a shell). So this process's parent must be the server that
    /// `TMUX` names (`socket,pid,session`), and that socket the fleet's: no tmux call, which a
    /// thousand wrappers starting at once would queue on the one server for.
    fn own_pane(&self) -> Option<String> {
        let pane = std::env::var("TMUX_PANE")
            .ok()
            .filter(|p| p.starts_with('%'))?;
        let tmux = std::env::var("TMUX").ok()?;
        let mut fields = tmux.rsplitn(3, ',');
        let (_session, server, socket) = (fields.next()?, fields.next()?, fields.next()?);
        let server: u32 = server.parse().ok()?;
        if server != std::os::unix::process::parent_id() {
            return None;
        }
        use std::os::unix::fs::MetadataExt;
        let theirs = std::fs::metadata(socket).ok()?;
        let ours = std::fs::metadata(socket_dir().join(&self.socket)).ok()?;
        (theirs.dev() == ours.dev() && theirs.ino() == ours.ino()).then_some(pane)
    }

    fn kill_server(&self) -> Result<(), RuntimeError> {
        match self.run(["kill-server"]) {
            // The client saw the server go before it answered (seen with 1,000 panes): what
            // was asked for, if no server answers now.
            Err(e) if exited_under_the_client(&e) => match self.run(["list-sessions"]) {
                Err(again) if is_no_server(&again) => {}
                _ => return Err(e),
            },
            Err(e) if !is_no_server(&e) => return Err(e),
            _ => {}
        }
        // The server is gone; its socket file may not be.
        match std::fs::remove_file(socket_dir().join(&self.socket)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::Failed {
                command: "kill-server".into(),
                stderr: format!("cannot remove the socket: {e}"),
            }),
            _ => Ok(()),
        }
    }
}

/// The pane option that holds `tag`.
fn option(tag: Tag) -> &'static str {
    match tag {
        Tag::Fleet => "@phoenix_fleet",
        Tag::Agent => "@phoenix_agent",
        Tag::Fingerprint => "@phoenix_fp",
        Tag::Phase => "@phoenix_phase",
    }
}

fn is_gone(err: &RuntimeError) -> bool {
    is_no_server(err)
        || matches!(err, RuntimeError::Failed { stderr, .. } if stderr.contains("can't find pane"))
}

fn parse_pane(line: &str) -> Result<PaneObs, RuntimeError> {
    let bad = || RuntimeError::Parse(format!("unexpected list-panes line `{line}`"));
    let f: Vec<&str> = line.splitn(LIST_FIELDS, '|').collect();
    if f.len() != LIST_FIELDS {
        return Err(bad());
    }
    let (session, window) = f[LIST_FIELDS - 1].split_once(':').ok_or_else(bad)?;
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Ok(PaneObs {
        id: f[0].to_string(),
        pid: f[1].parse().map_err(|_| bad())?,
        dead: f[2] == "1",
        dead_status: f[3].parse().ok(),
        dead_signal: f[4].parse().ok(),
        agent: non_empty(f[5]),
        fingerprint: non_empty(f[6]),
        phase: non_empty(f[7]),
        fleet: non_empty(f[8]),
        session: session.to_string(),
        window: window.to_string(),
        started: None,
        processes: Vec::new(),
    })
}

/// The tmux program, found on PATH once: a wrapper calls it after every exit, and spawning by
/// name tries each PATH entry in turn (nine failed execs on a usual PATH). As a name when it
/// is not found, so the error says what it always said.
fn program() -> &'static std::ffi::OsStr {
    static FOUND: std::sync::OnceLock<std::ffi::OsString> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| on_path().map_or_else(|| PROGRAM.into(), |p| p.into_os_string()))
}

/// Whether `tmux` can be found on PATH (for diagnosis).
fn on_path() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("tmux"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Where the tmux server of socket name `socket` listens.
pub fn socket_path(socket: &str) -> std::path::PathBuf {
    socket_dir().join(socket)
}

/// The directory tmux puts its sockets in (`$TMUX_TMPDIR/tmux-UID`, default `/tmp`).
fn socket_dir() -> std::path::PathBuf {
    let base = std::env::var_os("TMUX_TMPDIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/tmp".into());
    base.join(format!("tmux-{}", nix::unistd::getuid()))
}

/// `tmux -V`, e.g. "tmux 3.3a".
fn version() -> Option<String> {
    let out = Command::new(program()).arg("-V").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Another tmux server where agents of this fleet still run: after an upgrade (the default
/// socket of earlier versions, `phoenix-<name>`, when none is configured) or a rename (the
/// default socket this config file had under its earlier name, `phoenix-<old>-<hash>`).
/// Starting the fleet on its own server would run each of them twice. The first such server
/// and its agents, by name.
fn elsewhere(spec: &Spec) -> Option<(String, Vec<String>)> {
    let mut sockets: Vec<String> = spec.fleet.legacy_socket.iter().cloned().collect();
    // The hash part of the id is this file's: only its own earlier names end with it.
    let suffix = spec
        .fleet
        .id
        .rsplit_once('-')
        .map(|(_, hash)| format!("-{hash}"))
        .unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(socket_dir()) {
        for entry in entries.flatten() {
            if let Some(name) = entry.file_name().to_str()
                && name.starts_with("phoenix-")
                && name.ends_with(&suffix)
            {
                sockets.push(name.to_string());
            }
        }
    }
    sockets.retain(|s| *s != spec.fleet.socket);
    sockets.sort();
    sockets.dedup();
    sockets.into_iter().find_map(|socket| {
        let Ok(Some(panes)) = Tmux::new(&socket).list() else {
            return None;
        };
        let mut agents: Vec<String> = panes
            .into_iter()
            .filter(|p| !p.dead && super::is_ours(p, spec))
            .filter_map(|p| p.agent)
            .collect();
        agents.sort();
        agents.dedup();
        (!agents.is_empty()).then_some((socket, agents))
    })
}

/// Agents of this fleet left running on another server (see [`elsewhere`]): what to do about
/// them, if there are any.
pub(super) fn leftover_problem(spec: &Spec) -> Option<String> {
    let (socket, agents) = elsewhere(spec)?;
    let why = if spec.fleet.legacy_socket.as_deref() == Some(socket.as_str()) {
        "the default socket of earlier phoenix versions"
    } else {
        "this file's default socket under an earlier fleet name"
    };
    Some(format!(
        "agent{} {} of this fleet still run{} on tmux server `{socket}` ({why}); this fleet's server is now `{}`. Keep the old server: set `tmux_socket = \"{socket}\"` under [fleet] in {}; or stop it: `tmux -L {socket} kill-server`. Then run the command again",
        if agents.len() == 1 { "" } else { "s" },
        agents
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", "),
        if agents.len() == 1 { "s" } else { "" },
        spec.fleet.socket,
        spec.file.display()
    ))
}

/// Why tmux itself cannot work here, with what to do about it: not installed, or no socket
/// directory it can use. `None` when neither explains `err`.
fn diagnose(err: &RuntimeError) -> Option<String> {
    if on_path().is_none() || matches!(err, RuntimeError::NotInstalled) {
        return Some(format!(
            "{err}; tmux is not installed or not on PATH — install it (e.g. `apt install tmux`) and run `phoenix doctor`"
        ));
    }
    let sockets = socket_dir();
    let base = sockets.parent().unwrap_or(Path::new("/tmp"));
    if !base.is_dir() {
        return Some(format!(
            "{err}; the tmux socket directory's parent `{}` is not a directory — point TMUX_TMPDIR at a writable directory (or unset it for /tmp)",
            base.display()
        ));
    }
    if !writable(if sockets.exists() { &sockets } else { base }) {
        return Some(format!(
            "{err}; the tmux socket directory `{}` is not writable — fix its permissions or set TMUX_TMPDIR to a writable directory",
            sockets.display()
        ));
    }
    None
}

fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// `tmux 3.3a` → ok: pane options need 3.0.
/// The oldest tmux phoenix is tested with and the README asks for.
const OLDEST: (u32, u32) = (3, 3);

/// `tmux 3.3a`, `tmux next-3.5`, `tmux master`: at least [`OLDEST`] (a build from tmux's own
/// development branch counts as new).
fn version_ok(version: &str) -> bool {
    let Some(word) = version.split_whitespace().nth(1) else {
        return false;
    };
    if word == "master" {
        return true;
    }
    let number = word
        .trim_start_matches("next-")
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten().or(Some(0))) {
        (Some(major), Some(minor)) => (major, minor) >= OLDEST,
        _ => false,
    }
}

/// tmux installed and recent enough, and a socket directory it can write.
/// Whether `pid` runs a tmux binary (by its executable's file name: `tmux`, `tmux-3.4`, …).
pub(super) fn is_server_process(pid: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
        exe.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("tmux"))
    })
}

pub(super) fn host_checks() -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(match (on_path(), version()) {
        (Some(path), Some(version)) => {
            let ok = version_ok(&version);
            Check {
                check: "tmux".into(),
                ok,
                detail: format!("{version} at {}", path.display()),
                fix: (!ok).then(|| {
                    format!(
                        "phoenix needs tmux {}.{} or newer (the version it is tested with): install a newer tmux",
                        OLDEST.0, OLDEST.1
                    )
                }),
            }
        }
        _ => Check {
            check: "tmux".into(),
            ok: false,
            detail: "not found on PATH".into(),
            fix: Some("install tmux (e.g. `apt install tmux`)".into()),
        },
    });
    let sockets = socket_dir();
    let socket_parent = if sockets.exists() {
        sockets.clone()
    } else {
        sockets.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let writable = writable(&socket_parent);
    checks.push(Check {
        check: "tmux socket dir".into(),
        ok: writable,
        detail: sockets.display().to_string(),
        fix: (!writable).then(|| "make it writable or set TMUX_TMPDIR".into()),
    });
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_list_panes_line() {
        let line = "%3|1234|1|137||trades|abc||research-0123abcd|fleet:my window: with | bars";
        let p = parse_pane(line).unwrap();
        assert_eq!(p.id, "%3");
        assert_eq!(p.session, "fleet");
        assert_eq!(p.window, "my window: with | bars");
        assert_eq!(p.pid, 1234);
        assert!(p.dead);
        assert_eq!(p.dead_status, Some(137));
        assert_eq!(p.agent.as_deref(), Some("trades"));
        assert_eq!(p.phase, None);
        assert_eq!(p.fleet.as_deref(), Some("research-0123abcd"));
    }

    /// The real adapter passes the suite the fake passes, on a private server of its own.
    #[test]
    fn tmux_conforms() {
        if on_path().is_none() {
            eprintln!("tmux is not installed: skipped");
            return;
        }
        let socket = format!("phx-conformance-{}", std::process::id());
        struct Down(Tmux);
        impl Drop for Down {
            fn drop(&mut self) {
                let _ = self.0.kill_server();
            }
        }
        let tmux = Down(Tmux::new(socket));
        // A real program exits by itself when Enter gives it its line.
        super::super::conformance::conforms(&tmux.0, &|_, _| {});
    }

    /// The runtime is closed: nothing outside this file names tmux in code (identifiers,
    /// strings), so nothing else can run it, build it or depend on how it works. The only
    /// words left elsewhere are the user's: the config file's keys and the help's one line.
    #[test]
    fn only_this_file_names_tmux() {
        let mut found = Vec::new();
        for (rel, text) in crate::text::crate_sources() {
            if rel == "world/tmux.rs" || rel.starts_with("world/tmux/") {
                continue;
            }
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let code = code.split(" // ").next().unwrap_or("").to_lowercase();
                if !code.contains("tmux") {
                    continue;
                }
                let allowed =
                    // The config file's key (and the API field and messages that name it).
                    code.contains("tmux_socket")
                    // The config file's `tmux = { session, window }` table, read by spec/.
                    || rel.starts_with("spec/")
                    // `world/` reaching its adapter.
                    || (rel == "world/mod.rs" && (code.contains("tmux::") || code.starts_with("mod tmux")))
                    // What phoenix is, in `--help`.
                    || (rel == "cli/mod.rs" && code.starts_with("#[command(name = \"phoenix\""));
                if !allowed {
                    found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "tmux named outside world/tmux.rs:\n{}",
            found.join("\n")
        );
    }

    /// A launch's tap starts with its pane, in the same call: it reads the pane's output from
    /// the first line and gets the pid of the pane's own process as its last argument. A
    /// respawn gives the new process a new tap (the old one sees its input end). A path with a
    /// tmux format and a quote in it stays a path (nothing expanded, nothing run).
    #[test]
    fn a_launch_streams_its_pane_to_its_tap() {
        if on_path().is_none() {
            eprintln!("tmux is not installed: skipped");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("it's #(touch ran) #{host}");
        std::fs::create_dir(&dir).unwrap();
        struct Down(Tmux);
        impl Drop for Down {
            fn drop(&mut self) {
                let _ = self.0.kill_server();
            }
        }
        let tmux = Down(Tmux::new(format!("phx-tap-{}", std::process::id())));
        let launch = |line: &str, out: &str| Launch {
            fleet: "tap-0123abcd".into(),
            agent: "a".into(),
            session: "tap".into(),
            window: "a".into(),
            workdir: "/".into(),
            argv: ["sh", "-c", &format!("echo {line}; exec sleep 30")]
                .map(String::from)
                .to_vec(),
            fingerprint: "fp".into(),
            tap: Some(
                [
                    "sh",
                    "-c",
                    &format!("echo \"$1\" > \"$0/{out}.pid\"; exec cat > \"$0/{out}\""),
                    &dir.to_string_lossy(),
                ]
                .map(String::from)
                .to_vec(),
            ),
        };
        let read = |name: &str, want: &str| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
                if text.contains(want) || std::time::Instant::now() > deadline {
                    return text;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        let pid_of = |pane: &str| {
            tmux.0
                .list()
                .unwrap()
                .unwrap()
                .into_iter()
                .find(|p| p.id == pane)
                .unwrap()
                .pid
        };
        let pane = tmux.0.start(&launch("first-line", "one")).unwrap();
        assert!(read("one", "first-line").contains("first-line"));
        assert_eq!(read("one.pid", "\n").trim(), pid_of(&pane).to_string());
        tmux.0
            .respawn(&pane, &launch("after-respawn", "two"))
            .unwrap();
        assert!(read("two", "after-respawn").contains("after-respawn"));
        assert_eq!(read("two.pid", "\n").trim(), pid_of(&pane).to_string());
        assert!(!read("one", "after-respawn").contains("after-respawn"));
        let names: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn versions() {
        assert!(version_ok("tmux 3.3a"));
        assert!(version_ok("tmux 3.4"));
        assert!(version_ok("tmux 3.10"));
        assert!(version_ok("tmux next-3.6"));
        assert!(version_ok("tmux master"));
        assert!(!version_ok("tmux 3.2a"));
        assert!(!version_ok("tmux 3"));
        assert!(!version_ok("tmux 2.9"));
        assert!(!version_ok("tmux"));
    }

    #[test]
    fn rejects_malformed_lines() {
        assert!(parse_pane("%3 fleet").is_err());
    }
}
