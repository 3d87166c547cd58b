//! `phoenix doctor`: the environment checks (the host, the config, the state dir, the daemon,
//! the runtime's server, each agent's command and workdir), one line each.

use std::path::Path;

use serde_json::json;

use super::{out, output};
use crate::spec::{self, Spec};
use crate::state::FleetDir;
use crate::world::{self, Check};

pub fn doctor(config: &Path, json: bool) -> anyhow::Result<i32> {
    let mut checks = world::host_checks();
    let mut versions = Vec::new();
    match spec::load(config) {
        Err(e) => checks.push(Check {
            check: "config".into(),
            ok: false,
            detail: format!("{}: {}", config.display(), first_line(&e.to_string())),
            fix: Some(
                e.hint()
                    .unwrap_or_else(|| "run `phoenix validate` for details".into()),
            ),
        }),
        Ok(spec) => {
            checks.extend(fleet_checks(&spec));
            versions = cli_versions(&spec);
            checks.extend(versions.iter().map(version_check));
        }
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if json {
        output::json(json!({"ok": failed == 0, "checks": checks, "cli_versions": versions}));
    } else {
        out(&checks_text(&checks, failed));
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// What a spec that loads lets doctor check.
fn fleet_checks(spec: &Spec) -> Vec<Check> {
    let config = Check {
        check: "config".into(),
        ok: true,
        detail: format!(
            "{} ({})",
            spec.file.display(),
            crate::text::counted(spec.agents.len(), "agent")
        ),
        fix: None,
    };
    let server =
        world::runtime_for(spec).server_check(&spec.fleet.id, world::leftover_problem(spec));
    let mut checks = vec![
        config,
        state_dir_check(&spec.fleet.state_dir),
        daemon_check(&spec.fleet.state_dir),
        server,
    ];
    checks.extend(spec.agents.iter().flat_map(world::agent_checks));
    checks.extend(sandbox_checks(spec));
    checks
}

/// Whether bubblewrap makes sandboxes here, when an agent has one, and each sandboxed
/// agent's last verification.
fn sandbox_checks(spec: &Spec) -> Vec<Check> {
    let sandboxed: Vec<_> = spec.agents.iter().filter(|a| a.sandbox.is_some()).collect();
    if sandboxed.is_empty() {
        return Vec::new();
    }
    let problem = crate::sandbox::unusable();
    let mut checks = vec![Check {
        check: "sandbox".into(),
        ok: problem.is_none(),
        detail: match &problem {
            None => format!(
                "bubblewrap makes sandboxes here ({})",
                crate::text::counted(sandboxed.len(), "sandboxed agent")
            ),
            Some(_) => "bubblewrap cannot make sandboxes here".to_string(),
        },
        fix: problem,
    }];
    for agent in sandboxed {
        let Some(status) = crate::sandbox::status(spec, agent) else {
            continue;
        };
        let (ok, detail, fix) = match &status.verified {
            None => (
                true,
                format!("{}; never verified", status.summary),
                Some(format!("run `phoenix sandbox verify {}`", agent.name)),
            ),
            Some(v) if !v.passed => (
                false,
                format!(
                    "{}; canaries escaped: {}",
                    status.summary,
                    v.failed()
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                Some(format!("`phoenix sandbox verify {}` says why", agent.name)),
            ),
            Some(v) => (
                true,
                format!(
                    "{}; verified {}{}",
                    status.summary,
                    v.at,
                    if status.verified_current {
                        ""
                    } else {
                        " (of an earlier layout)"
                    }
                ),
                None,
            ),
        };
        checks.push(Check {
            check: format!("agent `{}` sandbox", agent.name),
            ok,
            detail,
            fix,
        });
    }
    checks
}

/// The installed version of each agent's CLI that phoenix knows versions of.
fn cli_versions(spec: &Spec) -> Vec<world::cli_version::Report> {
    spec.agents
        .iter()
        .filter_map(|a| {
            let installed = world::cli_version::installed(a, &spec.fleet.state_dir)?;
            Some(world::cli_version::report(a, &installed))
        })
        .collect()
}

/// Not a failure: a version outside the proven range may well work. Said, with a hint.
fn version_check(v: &world::cli_version::Report) -> Check {
    let detail = match (&v.version, &v.warning) {
        (_, Some(warning)) => warning.clone(),
        (Some(version), None) => format!(
            "{} {version} (proven {}); hooks made for {} {}",
            v.name, v.proven, v.name, v.hooks_made_for
        ),
        (None, None) => format!("{} (proven {})", v.name, v.proven),
    };
    Check {
        check: format!("agent `{}` version", v.agent),
        ok: true,
        detail,
        fix: v.hint.clone(),
    }
}

/// Checked without creating anything: the nearest existing directory must take a new file
/// (doctor only looks).
fn state_dir_check(state: &Path) -> Check {
    let existing = state
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let probe = if existing.is_dir() {
        nix::unistd::access(
            existing,
            nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
        )
        .map_err(std::io::Error::from)
    } else {
        Err(std::io::Error::other(format!(
            "`{}` is not a directory",
            existing.display()
        )))
    };
    Check {
        check: "state dir".into(),
        ok: probe.is_ok(),
        detail: state.display().to_string(),
        fix: probe
            .err()
            .map(|e| format!("cannot write there ({e}); fix permissions or set `state_dir`")),
    }
}

/// Not a failure: a fleet may run without the daemon. Said, so nobody assumes it.
fn daemon_check(state: &Path) -> Check {
    let detail = match crate::state::daemon::daemon_pid(&FleetDir::new(state)) {
        Some(pid) => format!("`phoenix run` supervises this fleet (pid {pid})"),
        None => "not running: `phoenix run` (or `phoenix service install`) keeps \
                 the fleet converged and runs the watchdog"
            .into(),
    };
    Check {
        check: "daemon".into(),
        ok: true,
        detail,
        fix: None,
    }
}

/// One line a check, its fix under it, and the verdict.
fn checks_text(checks: &[Check], failed: usize) -> String {
    let mut text = check_rows(checks, "");
    text.push_str(&if failed == 0 {
        "\nAll checks passed.\n".to_string()
    } else {
        format!("\n{failed} check(s) failed.\n")
    });
    text
}

/// One line a check (`ok  ` or `FAIL`, its name, what was found), its fix under it; every
/// line after `indent`.
pub(super) fn check_rows(checks: &[Check], indent: &str) -> String {
    let mut text = String::new();
    for c in checks {
        text.push_str(&format!(
            "{indent}{} {:<28} {}\n",
            if c.ok { "ok  " } else { "FAIL" },
            c.check,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            text.push_str(&format!("{indent}     → {fix}\n"));
        }
    }
    text
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
