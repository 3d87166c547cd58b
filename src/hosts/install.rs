//! `phoenix hosts install HOST`: this phoenix (and `phoenix-hook` next to it) copied to a host
//! of the same OS and architecture, then the host's daemon installed there as a systemd user
//! unit. The copy goes through the transport's stdin into a fixed script: each file lands
//! under a temporary name, its size is checked and it is run once there (`--version`), and only
//! then is it renamed over the old one, so neither a cut connection nor a binary that cannot
//! run on the host ever replaces a working phoenix.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::binary::Glibc;
use super::fleet::{Link, READ_TIMEOUT};
use super::protocol::{Call, ErrorKind, Installed};
use super::{HostError, Transport};
use crate::supervise::service;

/// How long one file's copy may take (a release phoenix is tens of MB; a slow link).
pub const COPY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long installing the daemon may take on the host (systemctl).
const DAEMON_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a host's phoenix goes when its `phoenix` is a bare name (found on the remote PATH).
pub const DEFAULT_DIR: &str = "~/.local/bin";

/// An operating system and architecture, as Rust names them (`linux`, `x86_64`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub arch: String,
}

impl Platform {
    /// What this phoenix was built for.
    pub fn here() -> Platform {
        Platform {
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
        }
    }

    /// `uname -s -m` output (`Linux x86_64`) in Rust's names.
    pub fn from_uname(text: &str) -> Option<Platform> {
        let mut words = text.split_whitespace();
        let (system, machine) = (words.next()?, words.next()?);
        let os = match system {
            "Linux" => "linux",
            "Darwin" => "macos",
            "FreeBSD" => "freebsd",
            "OpenBSD" => "openbsd",
            "NetBSD" => "netbsd",
            "DragonFly" => "dragonfly",
            other => return Some(Platform::of(&other.to_lowercase(), machine)),
        };
        Some(Platform::of(os, machine))
    }

    fn of(os: &str, machine: &str) -> Platform {
        let arch = match machine {
            "x86_64" | "amd64" => "x86_64",
            "aarch64" | "arm64" => "aarch64",
            "i386" | "i486" | "i586" | "i686" => "x86",
            "ppc64le" | "ppc64" => "powerpc64",
            m if m.starts_with("armv") => "arm",
            other => other,
        };
        Platform {
            os: os.into(),
            arch: arch.into(),
        }
    }

    /// The Rust target to build phoenix for on this platform, where it is a common one.
    pub fn target_triple(&self) -> Option<String> {
        match self.os.as_str() {
            "linux" => Some(format!("{}-unknown-linux-gnu", self.arch)),
            "macos" => Some(format!("{}-apple-darwin", self.arch)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.os, self.arch)
    }
}

/// What a host said about itself before anything is copied.
#[derive(Debug, Clone)]
pub struct Probe {
    pub platform: Platform,
    /// The version of the phoenix at the host's `phoenix`, when one answered.
    pub phoenix: Option<String>,
    /// Why the host's `phoenix` did not answer, when it did not (none there yet, another
    /// protocol version): the platform then came from `uname`.
    pub no_phoenix: Option<String>,
    /// The host's glibc, when it was asked with the platform ([`host_side`]): `Some(None)`
    /// where it has none.
    pub glibc: Option<Option<Glibc>>,
}

/// Ask the host's phoenix who it is; where none answers, ask `uname -s -m` ([`host_side`]). An unreachable host is an error.
pub fn probe(link: &Link) -> Result<Probe, HostError> {
    match link.ask(Call::Hello, READ_TIMEOUT) {
        Ok(reply) => Ok(Probe {
            platform: Platform {
                os: reply.os,
                arch: reply.arch,
            },
            phoenix: Some(reply.phoenix_version),
            no_phoenix: None,
            glibc: None,
        }),
        Err(e @ HostError::Transport(_)) => Err(e),
        Err(other) => {
            let (platform, glibc) = host_side(link)?;
            Ok(Probe {
                platform,
                phoenix: None,
                no_phoenix: Some(other.to_string()),
                glibc: Some(glibc),
            })
        }
    }
}

/// The host's platform and glibc (`getconf GNU_LIBC_VERSION`; `None` where it names none),
/// asked in one fixed script (no value of phoenix.toml in it).
pub fn host_side(link: &Link) -> Result<(Platform, Option<Glibc>), HostError> {
    const ASK: &str = "uname -s -m; getconf GNU_LIBC_VERSION 2>/dev/null || :";
    let finished = link
        .transport
        .call(&["sh", "-c", ASK], b"", READ_TIMEOUT)
        .map_err(HostError::Transport)?;
    let mut lines = finished.stdout.lines();
    let platform = finished
        .status
        .success()
        .then(|| lines.next().and_then(Platform::from_uname))
        .flatten()
        .ok_or_else(|| HostError::Remote {
            host: link.name().to_string(),
            kind: ErrorKind::Failed,
            message: format!(
                "cannot tell its OS and architecture: `uname -s -m` said {:?} ({})",
                crate::text::shorten(finished.stdout.trim(), 80),
                finished.describe_status()
            ),
        })?;
    Ok((platform, lines.next().and_then(Glibc::from_getconf)))
}

/// A host of another platform: what it is, what this phoenix is, and what to do instead.
pub fn refuse_platform(
    link: &Link,
    theirs: &Platform,
    ours: &Platform,
) -> Option<crate::error::Error> {
    if theirs == ours {
        return None;
    }
    let build = match theirs.target_triple() {
        Some(triple) => format!(
            "`cargo build --release --target {triple}` here, or `cargo install` on the host"
        ),
        None => "phoenix built on the host (`cargo install`)".into(),
    };
    Some(crate::error::Error::Failed {
        message: format!(
            "host `{}` is {theirs} and this phoenix is built for {ours}: it would not run there, so nothing was copied",
            link.name()
        ),
        hint: Some(format!(
            "install a phoenix built for {theirs} on the host ({build}) at its `phoenix` path (`{}`), or run `phoenix hosts install {}` from a machine that is {theirs}",
            link.host.phoenix,
            link.name()
        )),
    })
}

/// Where on the host the copies go: a directory and a file name, as the host's shell reads
/// them (`~/` is the remote user's home).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub dir: String,
    pub name: String,
}

impl Target {
    /// The directory of the host's `phoenix` when that is absolute or `~/…`, else
    /// [`DEFAULT_DIR`].
    pub fn for_phoenix(phoenix: &str) -> Target {
        let file_name = |path: &str| {
            let name = path.rsplit('/').next().unwrap_or("");
            if name.is_empty() || name == "." || name == ".." {
                "phoenix".to_string()
            } else {
                name.to_string()
            }
        };
        let placed = phoenix.starts_with('/') || phoenix.starts_with("~/");
        if !placed {
            return Target {
                dir: DEFAULT_DIR.into(),
                name: file_name(phoenix),
            };
        }
        let (dir, _) = phoenix.rsplit_once('/').unwrap_or(("", ""));
        let dir = match dir {
            "" => "/".to_string(),
            // The remote shell expands a `~/` prefix only: the home itself is `~/.`.
            "~" => "~/.".to_string(),
            dir => dir.to_string(),
        };
        Target {
            dir,
            name: file_name(phoenix),
        }
    }

    /// The path of a file called `name` in the target directory.
    pub fn file(&self, name: &str) -> String {
        match self.dir.as_str() {
            "/" => format!("/{name}"),
            "~/." => format!("~/{name}"),
            dir => format!("{dir}/{name}"),
        }
    }

    /// Where phoenix itself goes.
    pub fn phoenix(&self) -> String {
        self.file(&self.name)
    }
}

/// One file to copy: this machine's `local` as `name` in the target directory.
#[derive(Debug, Clone)]
pub struct Copy {
    pub local: PathBuf,
    pub name: String,
    pub bytes: u64,
}

/// The companions (`phoenix-hook`, `phoenix-wrap`) this build has next to `exe`, and then
/// `exe` itself: the companions first, so a phoenix in place always has the hook and wrapper
/// binaries of the same build beside it.
pub fn copies(exe: &Path, target: &Target) -> crate::error::Result<Vec<Copy>> {
    let mut files: Vec<(PathBuf, String)> = crate::process::COMPANIONS
        .iter()
        .map(|suffix| {
            let name = crate::process::companion_name(&target.name, suffix);
            (crate::process::companion(exe, suffix), name)
        })
        .filter(|(local, _)| local != exe)
        .collect();
    files.push((exe.to_path_buf(), target.name.clone()));
    files
        .into_iter()
        .map(|(local, name)| {
            let bytes = std::fs::metadata(&local)
                .map_err(|e| {
                    crate::error::Error::msg(format!("cannot read `{}`: {e}", local.display()))
                })?
                .len();
            Ok(Copy { local, name, bytes })
        })
        .collect()
}

/// The host's side of a copy: stdin to a temporary name in `$1` (made if missing), checked to
/// be `$3` bytes long, made executable, run once with `$4`, then renamed to `$2`. Whatever
/// fails or is interrupted leaves the old file as it was and the temporary one removed. On one
/// line: a login shell that is not a Bourne shell may refuse a newline in quotes.
pub const COPY_SCRIPT: &str = "set -eu; dir=$1; name=$2; size=$3; probe=$4; \
mkdir -p -- \"$dir\"; tmp=\"$dir/.$name.phoenix-install.$$\"; \
trap 'rm -f -- \"$tmp\"' EXIT; trap 'exit 1' HUP INT TERM PIPE; \
cat > \"$tmp\"; got=$(wc -c < \"$tmp\"); got=$((got)); \
if [ \"$got\" -ne \"$size\" ]; then echo \"received $got of $size bytes: nothing was replaced\" >&2; exit 3; fi; \
chmod 755 -- \"$tmp\"; \
if ! said=$(\"$tmp\" \"$probe\" 2>&1 </dev/null); then printf '%s\\n' \"the copy does not run there ($said): nothing was replaced\" >&2; exit 4; fi; \
mv -f -- \"$tmp\" \"$dir/$name\"; trap - EXIT";

/// Copy one file to the host; how long it took.
pub fn copy(
    transport: &dyn Transport,
    file: &Copy,
    target: &Target,
) -> Result<Duration, HostError> {
    let started = Instant::now();
    let input = std::fs::File::open(&file.local).map_err(|e| HostError::Remote {
        host: transport.host().to_string(),
        kind: ErrorKind::Failed,
        message: format!("cannot read `{}`: {e}", file.local.display()),
    })?;
    let size = file.bytes.to_string();
    let words = [
        "sh",
        "-c",
        COPY_SCRIPT,
        "phoenix-install",
        &target.dir,
        &file.name,
        &size,
        "--version",
    ];
    let finished = transport
        .call_file(&words, input, COPY_TIMEOUT)
        .map_err(HostError::Transport)?;
    if finished.status.success() {
        return Ok(started.elapsed());
    }
    let said = finished
        .stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(|l| crate::text::shorten(l, 300))
        .unwrap_or_else(|| finished.describe_status());
    Err(HostError::Remote {
        host: transport.host().to_string(),
        kind: ErrorKind::Failed,
        message: format!("cannot copy `{}` to `{}`: {said}", file.name, target.dir),
    })
}

/// Ask the phoenix just copied to `target` to install the host's daemon.
pub fn daemon(link: &Link, target: &Target, fleet: &str) -> Result<Installed, HostError> {
    let call = Call::Install {
        dir: link.host.dir.clone(),
        fleet: fleet.to_string(),
    };
    let reply = super::ask(&link.transport, &target.phoenix(), call, DAEMON_TIMEOUT)?;
    serde_json::from_value(reply.result).map_err(|e| HostError::Remote {
        host: link.name().to_string(),
        kind: ErrorKind::BadRequest,
        message: format!("the host's answer is not an install's result: {e}"),
    })
}

/// After the copy: whether the host's `phoenix`, as the spec names it, is the phoenix just
/// installed (a bare name may find another one first on the host's PATH). What to change when
/// it is not.
pub fn configured_mismatch(link: &Link, target: &Target) -> Option<String> {
    let answered = link.ask(Call::Hello, READ_TIMEOUT);
    let ours = super::protocol::phoenix_version();
    let found = match &answered {
        Ok(reply) if reply.phoenix_version == ours => return None,
        Ok(reply) => format!("answers as phoenix {}", reply.phoenix_version),
        Err(e) => format!("does not answer ({e})"),
    };
    Some(format!(
        "the [[host]] `{host}` entry's phoenix = \"{configured}\" {found} on the host: set `phoenix = \"{installed}\"` there",
        host = link.name(),
        configured = link.host.phoenix,
        installed = target.phoenix(),
    ))
}

/// The host's side of [`Call::Install`]: the unit for this phoenix and the fleet in `dir`,
/// written and started where a systemd user manager answers; elsewhere nothing is written and
/// the answer carries the unit and the command to run instead.
pub fn serve(dir: &Path, fleet: &str) -> Result<Installed, String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if fleet.is_empty() || !fleet.chars().all(plain) || fleet.starts_with('.') {
        return Err(format!(
            "`{}` is not a fleet name a unit can be named after",
            crate::text::shorten(fleet, 60)
        ));
    }
    let exe =
        crate::process::main_binary().map_err(|e| format!("cannot find this phoenix: {e}"))?;
    let config = dir.join(crate::spec::DEFAULT_CONFIG);
    let unit = service::Unit {
        fleet,
        exe: &exe,
        config: &config,
        dir,
        written_by: "phoenix hosts install",
    };
    let path_env = std::env::var("PATH").ok();
    let name = service::unit_name_of(fleet);
    let mut installed = Installed {
        unit: service::render(&unit, path_env.as_deref()),
        unit_name: name.clone(),
        unit_path: None,
        command: service::exec_words(&unit)
            .iter()
            .map(|w| crate::text::sh_quote(w))
            .collect::<Vec<_>>()
            .join(" "),
        systemd: false,
        started: false,
        has_slice: config.is_file(),
        problem: None,
    };
    if let Err(why) = service::user_manager() {
        installed.problem = Some(format!("no systemd user manager answers here: {why}"));
        return Ok(installed);
    }
    installed.systemd = true;
    // systemd refuses to start a unit whose WorkingDirectory is missing.
    super::ssh::ensure_private_dir(dir)
        .map_err(|e| format!("cannot make `{}`: {e}", dir.display()))?;
    let path = service::write_unit(&name, &installed.unit).map_err(|e| e.to_string())?;
    installed.unit_path = Some(path.display().to_string());
    // `restart`, not `start`: a daemon already running from the replaced binary must become
    // the new one (KillMode=process: its agents keep running).
    let started = service::systemctl_user(&["daemon-reload"])
        .and_then(|()| service::systemctl_user(&["enable", &name]))
        .and_then(|()| service::systemctl_user(&["restart", &name]));
    match started {
        Ok(()) => installed.started = true,
        Err(why) => installed.problem = Some(why),
    }
    Ok(installed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_names_become_rusts() {
        assert_eq!(
            Platform::from_uname("Linux x86_64\n"),
            Some(Platform {
                os: "linux".into(),
                arch: "x86_64".into()
            })
        );
        assert_eq!(
            Platform::from_uname("Darwin arm64").unwrap().to_string(),
            "macos-aarch64"
        );
        assert_eq!(
            Platform::from_uname("FreeBSD amd64").unwrap().to_string(),
            "freebsd-x86_64"
        );
        assert_eq!(Platform::from_uname("Linux"), None);
    }

    #[test]
    fn the_copy_goes_next_to_the_hosts_phoenix_or_into_local_bin() {
        let t = Target::for_phoenix("/opt/phoenix/bin/phoenix");
        assert_eq!(
            (t.dir.as_str(), t.name.as_str()),
            ("/opt/phoenix/bin", "phoenix")
        );
        assert_eq!(t.file("phoenix-hook"), "/opt/phoenix/bin/phoenix-hook");
        let t = Target::for_phoenix("~/bin/phoenix-dev");
        assert_eq!(t.phoenix(), "~/bin/phoenix-dev");
        let t = Target::for_phoenix("~/phoenix");
        assert_eq!(t.dir, "~/.");
        assert_eq!(t.phoenix(), "~/phoenix");
        assert_eq!(
            Target::for_phoenix("phoenix").phoenix(),
            "~/.local/bin/phoenix"
        );
        assert_eq!(
            Target::for_phoenix("bin/phoenix").phoenix(),
            "~/.local/bin/phoenix"
        );
        assert_eq!(Target::for_phoenix("/phoenix").phoenix(), "/phoenix");
    }

    /// The script as the host's `sh` runs it, fed `input`.
    fn run_script(dir: &Path, name: &str, size: usize, input: &[u8]) -> crate::process::Finished {
        let mut command = std::process::Command::new("sh");
        command
            .args(["-c", COPY_SCRIPT, "phoenix-install"])
            .arg(dir)
            .args([name, &size.to_string(), "--version"]);
        crate::process::run(command, input, Duration::from_secs(20)).unwrap()
    }

    #[test]
    fn a_short_or_unrunnable_copy_never_replaces_the_working_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("bin dir");
        let good = b"#!/bin/sh\necho new 1.0\n";
        let done = run_script(&dir, "phoenix", good.len(), good);
        assert!(done.status.success(), "{}", done.stderr);
        let installed = dir.join("phoenix");
        assert_eq!(std::fs::read(&installed).unwrap(), good);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&installed).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o755);

        // Cut short: fewer bytes than announced.
        let cut = run_script(&dir, "phoenix", good.len() + 100, good);
        assert_eq!(cut.status.code(), Some(3), "{}", cut.stderr);
        assert!(
            cut.stderr.contains("nothing was replaced"),
            "{}",
            cut.stderr
        );
        // Whole, but it does not run there.
        let broken = b"#!/nonexistent/interpreter\n";
        let bad = run_script(&dir, "phoenix", broken.len(), broken);
        assert_eq!(bad.status.code(), Some(4), "{}", bad.stderr);
        assert!(bad.stderr.contains("does not run there"), "{}", bad.stderr);

        assert_eq!(std::fs::read(&installed).unwrap(), good);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    }
}
