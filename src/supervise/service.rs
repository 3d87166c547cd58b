//! `phoenix service install [--print]`: a systemd user unit that runs `phoenix run`. Writing
//! (or printing) the unit needs no systemd; enabling it is left to `systemctl --user`.

use std::path::{Path, PathBuf};

use crate::error::Context;

use crate::spec::Spec;

pub fn unit_name(spec: &Spec) -> String {
    unit_name_of(&spec.fleet.name)
}

/// The unit's name for the fleet called `fleet`.
pub fn unit_name_of(fleet: &str) -> String {
    format!("phoenix-{fleet}.service")
}

/// What a unit runs: `exe --config config run` in `dir`, for the fleet called `fleet`.
pub struct Unit<'a> {
    pub fleet: &'a str,
    pub exe: &'a Path,
    pub config: &'a Path,
    pub dir: &'a Path,
    /// The command that wrote it, for the unit's first comment.
    pub written_by: &'a str,
}

/// The unit text of this fleet's daemon (see [`render`]).
pub fn render_unit(spec: &Spec, exe: &Path, path_env: Option<&str>) -> String {
    render(
        &Unit {
            fleet: &spec.fleet.name,
            exe,
            config: &spec.file,
            dir: &spec.dir,
            written_by: "phoenix service install",
        },
        path_env,
    )
}

/// The unit text. `KillMode=process` is the important line: the daemon may have started the
/// fleet's tmux server, which then lives in the service's cgroup, and systemd's default
/// (`control-group`) would kill it — and every agent — on `systemctl stop` or `restart`.
pub fn render(unit: &Unit, path_env: Option<&str>) -> String {
    let exec = exec_words(unit)
        .iter()
        .map(|a| quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut text = format!(
        "# Written by `{by}`; re-run it after moving phoenix or the config.\n\
         [Unit]\n\
         Description=phoenix fleet {name}: reconcile loop and schedules\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         WorkingDirectory={dir}\n",
        by = unit.written_by,
        name = unit.fleet,
        dir = path_value(&unit.dir.to_string_lossy()),
    );
    if let Some(path) = path_env {
        // Agent CLIs are found through the PATH of whoever installed the unit.
        text.push_str(&format!("Environment={}\n", quote(&format!("PATH={path}"))));
    }
    text.push_str(
        "Restart=on-failure\n\
         RestartSec=5\n\
         # Stop only the daemon: the fleet's server and the agents in it keep running.\n\
         KillMode=process\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec=30\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
    );
    text
}

/// The daemon's argv: `exe --config config run`.
pub fn exec_words(unit: &Unit) -> [String; 4] {
    [
        unit.exe.to_string_lossy().into_owned(),
        "--config".into(),
        unit.config.to_string_lossy().into_owned(),
        "run".into(),
    ]
}

/// systemd's quoting: double quotes, backslash escapes, `%` specifiers and `$` expansion
/// neutralised.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A path-valued setting (`WorkingDirectory=`): systemd takes the rest of the line as the path
/// and refuses quotes ("path is not absolute"); only `%` specifiers need escaping.
fn path_value(s: &str) -> String {
    s.replace('%', "%%").replace('\n', " ")
}

/// `$XDG_CONFIG_HOME/systemd/user`, or `~/.config/systemd/user`.
pub fn unit_dir() -> crate::error::Result<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .context("neither `XDG_CONFIG_HOME` nor `HOME` is set")?;
    Ok(base.join("systemd").join("user"))
}

/// Write the unit; returns its path.
pub fn install(spec: &Spec, exe: &Path) -> crate::error::Result<PathBuf> {
    let path_env = std::env::var("PATH").ok();
    write_unit(
        &unit_name(spec),
        &render_unit(spec, exe, path_env.as_deref()),
    )
}

/// Write `text` as the user unit `name` (whole: a temporary name, then renamed); returns its
/// path.
pub fn write_unit(name: &str, text: &str) -> crate::error::Result<PathBuf> {
    let dir = unit_dir()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let path = dir.join(name);
    crate::state::atomic_write(&path, text.as_bytes())
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(path)
}

/// How long one `systemctl --user` call may take.
const SYSTEMCTL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `systemctl --user ARGS`; what it said when it failed (or could not be run).
pub fn systemctl_user(args: &[&str]) -> Result<(), String> {
    let mut command = std::process::Command::new("systemctl");
    command.arg("--user").args(args);
    match crate::process::run(command, b"", SYSTEMCTL_TIMEOUT) {
        Ok(f) if f.status.success() => Ok(()),
        Ok(f) => Err(format!(
            "`systemctl --user {}`: {} ({})",
            args.join(" "),
            f.stderr_line(),
            f.describe_status()
        )),
        Err(crate::process::RunError::Spawn(e)) => Err(format!("cannot run `systemctl`: {e}")),
        Err(crate::process::RunError::Timeout) => Err(format!(
            "`systemctl --user {}` did not finish within 30s",
            args.join(" ")
        )),
    }
}

/// A systemd user manager answers for this user (none in most containers, or without a
/// login session and lingering): why not, if it does not.
pub fn user_manager() -> Result<(), String> {
    systemctl_user(&["show-environment"])
}

/// Where [`install`] writes this fleet's unit.
pub fn unit_path(spec: &Spec) -> crate::error::Result<PathBuf> {
    Ok(unit_dir()?.join(unit_name(spec)))
}

/// Remove the unit [`install`] wrote; returns its path if there was one.
pub fn uninstall(spec: &Spec) -> crate::error::Result<Option<PathBuf>> {
    let path = unit_path(spec)?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(Some(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot remove `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{LoadOptions, parse};

    #[test]
    fn unit_keeps_agents_alive_and_quotes_paths() {
        let spec = parse(
            "[fleet]\nname = \"lab\"\n",
            Path::new("/srv/my fleet/phoenix.toml"),
            LoadOptions::default(),
        )
        .unwrap();
        let unit = render_unit(&spec, Path::new("/opt/phoenix"), Some("/usr/bin:/bin"));
        assert!(unit.contains("KillMode=process"), "{unit}");
        assert!(
            unit.contains(
                "ExecStart=\"/opt/phoenix\" \"--config\" \"/srv/my fleet/phoenix.toml\" \"run\""
            ),
            "{unit}"
        );
        assert!(unit.contains("Environment=\"PATH=/usr/bin:/bin\""));
        assert!(unit.contains("WorkingDirectory=/srv/my fleet\n"), "{unit}");
        assert_eq!(unit_name(&spec), "phoenix-lab.service");
        assert_eq!(quote("50%$x"), "\"50%%$$x\"");
    }
}
