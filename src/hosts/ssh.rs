//! The OpenSSH transport: the system `ssh`, with the user's own config, keys, jump hosts and
//! host-key checking, run with an argv (never through a local shell). One master connection
//! per host is shared between calls (ControlMaster in a private 0700 directory), `BatchMode`
//! means a missing key is an error and never a password prompt, and a connect timeout bounds
//! what a dead host costs.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Transport, TransportError, remote_command};
use crate::process::{self, Finished, RunError};
pub use crate::spec::check_destination;

/// ssh's own exit status for "could not connect or authenticate" (any other status is the
/// remote command's).
const SSH_FAILED: i32 = 255;

/// How long an idle shared connection stays open after the last call.
const CONTROL_PERSIST: &str = "120s";

#[derive(Debug, Clone)]
pub struct Ssh {
    /// The host's name in the spec, for messages.
    pub host: String,
    /// Anything `ssh` accepts as a destination: `user@host`, an alias of ~/.ssh/config,
    /// `ssh://user@host:port`. Validated by [`check_destination`].
    pub destination: String,
    /// `-F`: an ssh config file to use instead of ~/.ssh/config.
    pub config: Option<PathBuf>,
    /// Where the shared connections' sockets live (0700).
    pub control_dir: PathBuf,
    pub connect_timeout: Duration,
}

impl Ssh {
    /// The local argv that runs `remote` (a program and its arguments) on the host. The remote
    /// side always goes through the login shell of the remote user (ssh has no other way), so
    /// every word is quoted for it: nothing in a name or a path is ever interpreted there.
    pub fn argv(&self, remote: &[&str], terminal: bool) -> Vec<OsString> {
        let line = if terminal {
            remote_command(remote)
        } else {
            telling_session(&remote_command(remote))
        };
        self.argv_of(line, terminal)
    }

    /// The local argv that runs the remote command line `line` on the host.
    fn argv_of(&self, line: String, terminal: bool) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["ssh".into()];
        if let Some(config) = &self.config {
            argv.push("-F".into());
            argv.push(config.into());
        }
        let secs = self.connect_timeout.as_secs().max(1);
        for option in [
            "BatchMode=yes".to_string(),
            format!("ConnectTimeout={secs}"),
            "ControlMaster=auto".into(),
            format!("ControlPath={}", self.control_dir.join("%C").display()),
            format!("ControlPersist={CONTROL_PERSIST}"),
            // A dead peer is noticed within about three intervals instead of never.
            "ServerAliveInterval=5".into(),
            "ServerAliveCountMax=3".into(),
        ] {
            argv.push("-o".into());
            argv.push(option.into());
        }
        argv.push(if terminal { "-t" } else { "-T" }.into());
        // `--` ends ssh's options: the destination can never be read as one.
        argv.push("--".into());
        argv.push(self.destination.clone().into());
        argv.push(line.into());
        argv
    }

    /// End the remote session `session` (all its processes: the remote command and whatever
    /// it started) through the shared connection: after a timeout, so that a call given up on
    /// here does not go on running there.
    fn end_session(&self, session: u32) {
        let argv = self.argv_of(
            format!(
                "pkill -KILL -s {session} 2>/dev/null; kill -KILL -- -{session} 2>/dev/null; true"
            ),
            false,
        );
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        let _ = process::run(command, b"", END_SESSION_TIMEOUT);
    }

    fn command(&self, remote: &[&str]) -> Result<Command, TransportError> {
        ensure_private_dir(&self.control_dir).map_err(|e| TransportError::Local {
            host: self.host.clone(),
            detail: format!(
                "cannot make the ssh control directory `{}`: {e}",
                self.control_dir.display()
            ),
        })?;
        let argv = self.argv(remote, false);
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        Ok(command)
    }
}

impl Transport for Ssh {
    fn host(&self) -> &str {
        &self.host
    }

    fn describe(&self) -> String {
        format!("ssh {}", self.destination)
    }

    fn call(
        &self,
        remote: &[&str],
        input: &[u8],
        timeout: Duration,
    ) -> Result<Finished, TransportError> {
        let command = self.command(remote)?;
        let run =
            process::run_limited_telling(command, input, timeout, super::protocol::MAX_REPLY_BYTES);
        self.finished(self.ended(run), timeout)
    }

    fn call_file(
        &self,
        remote: &[&str],
        input: std::fs::File,
        timeout: Duration,
    ) -> Result<Finished, TransportError> {
        let command = self.command(remote)?;
        let run = process::run_file_telling(command, input, timeout);
        self.finished(self.ended(run), timeout)
    }

    fn interactive(&self, remote: &[&str]) -> Vec<OsString> {
        self.argv(remote, true)
    }
}

impl Ssh {
    /// A run with the remote session's line taken out of its stderr; after a timeout, the
    /// remote session ended too (the local ssh is killed already).
    fn ended(&self, run: Result<Finished, (RunError, String)>) -> Result<Finished, RunError> {
        match run {
            Ok(mut finished) => {
                finished.stderr = without_session_line(&finished.stderr);
                Ok(finished)
            }
            Err((RunError::Timeout, stderr)) => {
                if let Some(session) = session_of(&stderr) {
                    self.end_session(session);
                }
                Err(RunError::Timeout)
            }
            Err((e, _)) => Err(e),
        }
    }

    /// How ssh's run ended, as the transport reports it: its own failure (exit 255) is an
    /// unreachable host, anything else the remote command's.
    fn finished(
        &self,
        run: Result<Finished, RunError>,
        timeout: Duration,
    ) -> Result<Finished, TransportError> {
        match run {
            Ok(finished) if finished.status.code() == Some(SSH_FAILED) => {
                Err(TransportError::Unreachable {
                    host: self.host.clone(),
                    detail: ssh_error(&finished),
                })
            }
            Ok(finished) => Ok(finished),
            Err(RunError::Timeout) => Err(TransportError::Timeout {
                host: self.host.clone(),
                after: timeout,
            }),
            Err(RunError::Spawn(e)) => Err(TransportError::Local {
                host: self.host.clone(),
                detail: format!("cannot run `ssh`: {e} (install openssh-client)"),
            }),
        }
    }
}

/// How long ending a remote session after a timeout may take.
const END_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// The first line on stderr of every remote call: the remote session's id.
const SESSION_LINE: &str = "phoenix-remote-session ";

/// `command` (a remote command line) run so that it first says its session's id on stderr:
/// sshd makes each session's first process a session leader, and `exec` keeps its pid, so
/// `$$` is the id of the session every process of the call runs in (what
/// [`Ssh::end_session`] ends). The words stay as quoted; the remote login shell still
/// expands a leading `~/`.
fn telling_session(command: &str) -> String {
    format!("exec sh -c 'echo {SESSION_LINE}$$ >&2; exec \"$@\"' sh {command}")
}

/// The session id a remote call said first on stderr.
fn session_of(stderr: &str) -> Option<u32> {
    stderr
        .lines()
        .next()?
        .strip_prefix(SESSION_LINE)?
        .trim()
        .parse()
        .ok()
        .filter(|&id| id > 1)
}

fn without_session_line(stderr: &str) -> String {
    match stderr.split_once('\n') {
        Some((first, rest)) if first.starts_with(SESSION_LINE) => rest.to_string(),
        None if stderr.starts_with(SESSION_LINE) => String::new(),
        _ => stderr.to_string(),
    }
}

/// What ssh said when it could not connect: its last non-empty stderr line (the first is
/// often a warning about known hosts).
fn ssh_error(finished: &Finished) -> String {
    let line = finished
        .stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("ssh failed without saying why");
    crate::text::shorten(line, 300)
}

/// Create `dir` (and its parents) 0700, or tighten an existing one that is ours; refuse a
/// symlink (the sockets in it grant a logged-in connection to every host).
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(std::io::Error::other("not a directory (a symlink?)"));
    }
    // One made by someone else (in a shared temporary directory) would be theirs to read.
    if std::os::unix::fs::MetadataExt::uid(&meta) != nix::unistd::getuid().as_raw() {
        return Err(std::io::Error::other("owned by another user"));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssh() -> Ssh {
        Ssh {
            host: "gpu-1".into(),
            destination: "deploy@gpu-1.internal".into(),
            config: None,
            control_dir: PathBuf::from("/run/user/1000/phoenix-ssh"),
            connect_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn the_destination_follows_the_end_of_options_and_the_remote_words_are_quoted() {
        let argv: Vec<String> = ssh()
            .argv(&["phoenix", "host", "a b;$(rm -rf ~)"], false)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let dd = argv.iter().position(|a| a == "--").unwrap();
        assert_eq!(argv[dd + 1], "deploy@gpu-1.internal");
        assert_eq!(
            argv[dd + 2],
            format!(
                "exec sh -c 'echo {SESSION_LINE}$$ >&2; exec \"$@\"' sh phoenix host 'a b;$(rm -rf ~)'"
            )
        );
        assert_eq!(session_of(&format!("{SESSION_LINE}4242\nrest")), Some(4242));
        assert_eq!(
            without_session_line(&format!("{SESSION_LINE}4242\nerror: x\n")),
            "error: x\n"
        );
        assert_eq!(session_of("error: x"), None);
        assert_eq!(argv.len(), dd + 3);
        assert!(argv.contains(&"BatchMode=yes".to_string()));
        assert!(argv.contains(&"ConnectTimeout=5".to_string()));
        assert!(
            argv.contains(&"ControlPath=/run/user/1000/phoenix-ssh/%C".to_string()),
            "{argv:?}"
        );
        // The user's host-key checking stays in force: never turned off, never accept-new.
        assert!(!argv.iter().any(|a| a.contains("StrictHostKeyChecking")));
    }

    #[test]
    fn hostile_destinations_are_refused() {
        for bad in [
            "",
            "-oProxyCommand=touch /tmp/x",
            "host;reboot",
            "user@host name",
            "$(id)@host",
            "host`id`",
            "a|b",
            "host\nother",
        ] {
            assert!(check_destination(bad).is_err(), "{bad:?} accepted");
        }
        for good in [
            "gpu-1",
            "deploy@gpu-1.internal",
            "ssh://deploy@10.0.0.7:2222",
            "root@[::1]",
            "user+ops@host",
        ] {
            assert!(check_destination(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn the_control_directory_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/ssh");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(ensure_private_dir(&link).is_err());
    }
}
