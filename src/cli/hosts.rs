//! `phoenix host` (the host side of the protocol) and `phoenix hosts …` (the operator's view
//! of its hosts: `check`, `install`).

use std::path::Path;

use anyhow::bail;
use clap::Subcommand;
use serde_json::json;

use super::{out, output};
use crate::hosts::check::{self, HostReport};
use crate::hosts::fleet::{self, Link};
use crate::hosts::install::{self, Copy, Probe, Target};
use crate::hosts::protocol::Installed;
use crate::hosts::serve;
use crate::spec::{self, Spec};
use crate::world::Check;

#[derive(Debug, Subcommand)]
pub enum HostsCommand {
    /// `doctor` for every [[host]] at once: reachable, its phoenix's version, OS and
    /// architecture, tmux, its `dir` writable, each of its agents' CLI and workdir there.
    /// Exit 1 when a host is unreachable or a check fails.
    Check {
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Copy this phoenix (and phoenix-hook) to HOST when it has the same OS and architecture,
    /// next to the host's `phoenix` (absolute or `~/…`; else into ~/.local/bin), then install
    /// the host's daemon as a systemd user unit there (or print it where there is no systemd).
    Install {
        host: String,
        /// Say what would be done (the host is asked its OS and architecture, nothing more).
        #[arg(long)]
        print: bool,
    },
    /// Copy every host's agent contexts (handoffs, ledgers, state) into the operator's
    /// mirror, `<state_dir>/hosts/mirror/`: what `phoenix move --from-unreachable` starts
    /// from when a host is gone. Only what is new travels.
    Mirror {
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

/// Answer the one request on stdin with one reply on stdout. Always exits 0: whatever went
/// wrong is in the reply, where the operator's phoenix reads it.
pub fn host() -> i32 {
    let reply = serve::answer_from(std::io::stdin().lock());
    // As it is: the envelope carries the host protocol's own `format_version`, not the one
    // of phoenix's `--json` documents.
    out(&output::json_line(&reply));
    crate::error::exit::OK
}

pub fn hosts(config: &Path, command: HostsCommand) -> anyhow::Result<i32> {
    match command {
        HostsCommand::Check { json } => check(config, json),
        HostsCommand::Install { host, print } => install(config, &host, print),
        HostsCommand::Mirror { json } => super::moves::mirror(config, json),
    }
}

// ---- hosts check ----

fn check(config: &Path, json: bool) -> anyhow::Result<i32> {
    let spec = spec::load(config)?;
    let reports = check::check_all(&spec)?;
    let failed = reports.iter().filter(|r| !r.ok()).count();
    if json {
        output::json(json!({"ok": failed == 0, "hosts": reports}));
    } else if reports.is_empty() {
        out(&format!(
            "no [[host]] in `{}`: every agent runs on this machine (`phoenix doctor` checks it)\n",
            spec.file.display()
        ));
    } else {
        out(&reports_text(&reports));
    }
    Ok(i32::from(failed > 0))
}

/// Each host's header line and its rows as `phoenix doctor` prints them, then the verdict.
fn reports_text(reports: &[HostReport]) -> String {
    let mut text = String::new();
    for report in reports {
        text.push_str(&format!(
            "{} ({}): {}\n",
            report.host,
            report.via,
            headline(report)
        ));
        let mut rows = report.checks.clone();
        if let Some(error) = &report.error {
            rows.insert(
                0,
                Check {
                    check: if report.reachable {
                        "phoenix"
                    } else {
                        "reachable"
                    }
                    .into(),
                    ok: false,
                    detail: error.clone(),
                    fix: report.hint.clone(),
                },
            );
        }
        text.push_str(&super::doctor::check_rows(&rows, "  "));
        text.push('\n');
    }
    let unreachable = reports.iter().filter(|r| !r.reachable).count();
    let failing: usize = reports
        .iter()
        .map(|r| {
            r.checks.iter().filter(|c| !c.ok).count()
                + usize::from(r.reachable && r.error.is_some())
        })
        .sum();
    text.push_str(&if unreachable == 0 && failing == 0 {
        format!(
            "All checks passed on {}.\n",
            crate::text::counted(reports.len(), "host")
        )
    } else {
        format!(
            "{}: {unreachable} unreachable, {failing} check(s) failed.\n",
            crate::text::counted(reports.len(), "host")
        )
    });
    text
}

fn headline(report: &HostReport) -> String {
    if !report.reachable {
        return "unreachable".into();
    }
    match (&report.phoenix_version, &report.os, &report.arch) {
        (Some(version), Some(os), Some(arch)) => format!("phoenix {version}, {os}-{arch}"),
        (Some(version), ..) => format!("phoenix {version}, another host protocol"),
        _ => "no phoenix answers there".into(),
    }
}

// ---- hosts install ----

fn install(config: &Path, name: &str, print: bool) -> anyhow::Result<i32> {
    let spec = spec::load(config)?;
    let links = fleet::links(&spec);
    let Some(link) = links.iter().find(|l| l.name() == name) else {
        bail!(unknown_host(&spec, name));
    };
    let probe = install::probe(link)?;
    let exe = crate::hosts::binary::to_copy(&link.host)?;
    let needs = crate::hosts::binary::needs(&exe).map_err(crate::error::Error::msg)?;
    if let Some(refusal) = install::refuse_platform(link, &probe.platform, &needs.platform) {
        return Err(refusal.into());
    }
    // A build linked against a newer glibc than the host's would fail its run there after
    // the whole upload: said before anything is copied, with the static build to use.
    if needs.glibc.is_some() {
        let glibc = match probe.glibc {
            Some(glibc) => glibc,
            None => install::host_side(link)?.1,
        };
        if let Err(why) = crate::hosts::binary::runs_on(&needs, &probe.platform, glibc) {
            return Err(crate::error::Error::Failed {
                message: format!(
                    "host `{name}` cannot run {}: {why}; nothing was copied",
                    exe.display()
                ),
                hint: Some(crate::hosts::binary::static_build_hint(name)),
            }
            .into());
        }
    }
    let target = Target::for_phoenix(&link.host.phoenix);
    let copies = install::copies(&exe, &target)?;
    out(&probe_line(link, &probe));
    if print {
        out(&print_plan(&spec, link, &target, &copies));
        return Ok(0);
    }
    for file in &copies {
        let took = install::copy(&link.transport, file, &target)?;
        out(&format!(
            "copied {} ({}) to {} in {:.1} s\n",
            file.local.display(),
            megabytes(file.bytes),
            target.file(&file.name),
            took.as_secs_f64()
        ));
    }
    // Recorded before the daemon: the copy is there whatever becomes of the unit, and every
    // later command reaches it without `phoenix` set by hand.
    crate::hosts::known::installed(&spec.fleet.state_dir, name, &target.phoenix())?;
    let installed = install::daemon(link, &target, &spec.fleet.name)?;
    out(&daemon_text(link, &installed));
    if !link.host.phoenix_configured {
        out(&format!(
            "recorded in {}: phoenix reaches `{name}`'s phoenix at {} (a `phoenix` in its [[host]] entry would win)\n",
            crate::hosts::known::path(&spec.fleet.state_dir, name).display(),
            target.phoenix()
        ));
    } else if let Some(change) = install::configured_mismatch(link, &target) {
        eprintln!("warning: {change}");
    }
    Ok(0)
}

fn unknown_host(spec: &Spec, name: &str) -> String {
    let names: Vec<&str> = spec.hosts.iter().map(|h| h.name.as_str()).collect();
    if names.is_empty() {
        return format!(
            "no host `{name}`: `{}` declares no [[host]]",
            spec.file.display()
        );
    }
    format!(
        "no host `{name}` in `{}` ({})",
        spec.file.display(),
        crate::diag::suggest(name, &names)
    )
}

fn probe_line(link: &Link, probe: &Probe) -> String {
    let now = match (&probe.phoenix, &probe.no_phoenix) {
        (Some(version), _) => format!("phoenix {version} there now"),
        (None, Some(why)) => format!("no phoenix answers there yet: {why}"),
        (None, None) => "no phoenix there yet".into(),
    };
    format!(
        "host `{}` ({}) is {} like this machine; {now}\n",
        link.name(),
        fleet::describe(link),
        probe.platform
    )
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// `--print`: the copies, then the daemon's unit as the host would get it.
fn print_plan(spec: &Spec, link: &Link, target: &Target, copies: &[Copy]) -> String {
    let mut text = String::from(
        "would copy (each to a temporary name next to it, its size checked and `--version` run there, then renamed over the old one):\n",
    );
    for file in copies {
        text.push_str(&format!(
            "  {} ({}) → {}\n",
            file.local.display(),
            megabytes(file.bytes),
            target.file(&file.name)
        ));
    }
    let phoenix = target.phoenix();
    let dir = Path::new(&link.host.dir);
    let config = dir.join(crate::spec::DEFAULT_CONFIG);
    let unit = crate::supervise::service::Unit {
        fleet: &spec.fleet.name,
        exe: Path::new(&phoenix),
        config: &config,
        dir,
        written_by: "phoenix hosts install",
    };
    let name = crate::supervise::service::unit_name_of(&spec.fleet.name);
    text.push_str(&format!(
        "would install the daemon as the systemd user unit `{name}` on the host and (re)start it \
         (without systemd there: print it and the command to run instead); the host writes it \
         with its own home for `~` and its own PATH:\n\n{}",
        crate::supervise::service::render(&unit, None)
    ));
    text
}

fn daemon_text(link: &Link, installed: &Installed) -> String {
    let host = link.name();
    let name = &installed.unit_name;
    let mut text = String::new();
    if !installed.systemd {
        text.push_str(&format!(
            "daemon: not installed as a service: {}.\n\
             Run it on `{host}` under the host's own supervisor (it must outlive your ssh session):\n  {}\n\
             On a host with systemd this unit (in ~/.config/systemd/user/{name}) does it:\n\n{}",
            installed.problem.as_deref().unwrap_or("no systemd there"),
            installed.command,
            installed.unit
        ));
        return text;
    }
    let path = installed.unit_path.as_deref().unwrap_or("?");
    if installed.started {
        text.push_str(&format!(
            "daemon: systemd user unit `{name}` written to {path} on `{host}`, enabled and started\n"
        ));
    } else {
        text.push_str(&format!(
            "daemon: systemd user unit `{name}` written to {path} on `{host}`, but not started: {}\n  \
             on the host: systemctl --user daemon-reload && systemctl --user enable --now {name}\n",
            installed.problem.as_deref().unwrap_or("systemctl failed")
        ));
    }
    if !installed.has_slice {
        text.push_str(
            "  the host has no phoenix.toml yet: the daemon supervises its agents once `phoenix apply` has pushed the host's slice (systemd retries it every 5 s until then)\n",
        );
    }
    text.push_str(&format!(
        "  to keep it running after you log out of `{host}`: `loginctl enable-linger $USER` there\n"
    ));
    text
}
