//! The host's side of the protocol: `phoenix host` reads one request from stdin and answers
//! with one reply. It never trusts the request beyond its shape: a bad one gets an error
//! reply, never a panic or a partial action.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::carry;
use super::protocol::{
    Call, ErrorKind, FORMAT_VERSION, MAX_REQUEST_BYTES, RUN_COMMANDS, Ran, Reply, Request,
};
use crate::spec::{self, LoadOptions};
use crate::world::{self, Check};

/// Read the request from `input` (at most [`MAX_REQUEST_BYTES`]) and answer it.
pub fn answer_from(input: impl Read) -> Reply {
    let mut bytes = Vec::new();
    if let Err(e) = input.take(MAX_REQUEST_BYTES + 1).read_to_end(&mut bytes) {
        return Reply::error(
            ErrorKind::BadRequest,
            format!("cannot read the request: {e}"),
        );
    }
    if bytes.len() as u64 > MAX_REQUEST_BYTES {
        return Reply::error(
            ErrorKind::BadRequest,
            format!("the request is larger than {MAX_REQUEST_BYTES} bytes"),
        );
    }
    answer(&bytes)
}

pub fn answer(bytes: &[u8]) -> Reply {
    // The version first, from the bare JSON: a request of another version may not parse.
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Reply::error(ErrorKind::BadRequest, format!("not JSON: {e}")),
    };
    let theirs = value.get("format_version").and_then(Value::as_u64);
    if theirs != Some(u64::from(FORMAT_VERSION)) {
        let version = value
            .get("phoenix_version")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        return Reply::error(
            ErrorKind::VersionMismatch,
            format!(
                "the operator's phoenix {version} speaks host protocol {}; this host's phoenix {} speaks {FORMAT_VERSION}",
                theirs.map_or("unknown".to_string(), |v| v.to_string()),
                super::protocol::phoenix_version()
            ),
        );
    }
    let request: Request = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return Reply::error(ErrorKind::BadRequest, format!("bad request: {e}")),
    };
    // The operator's owed word first: a stale copy here stops before anything else is done
    // or read (a status then no longer shows it running).
    let fenced = fence_first(&request.call, &request.owed_fences);
    let mut reply = answer_call(request.call);
    reply.fenced = fenced;
    reply
}

/// How long the fences of a request wait for this host's fleet lock to stop a stale copy:
/// the operator's call is bounded (a status by seconds). A copy not stopped now is refused
/// from now on and stopped by this host's daemon, or at the operator's next contact.
const FENCE_LOCK_WAIT: Duration = Duration::from_secs(3);

/// Record the fences a request carries and stop the stale copies they fence.
fn fence_first(
    call: &Call,
    fences: &BTreeMap<String, crate::state::fence::Fence>,
) -> Option<carry::Fenced> {
    if fences.is_empty() {
        return None;
    }
    let dir = call.dir()?;
    let done = carry::host_fleet(dir).and_then(|(spec, fleet)| {
        carry::fence_within(spec.as_ref(), &fleet, fences, FENCE_LOCK_WAIT)
    });
    Some(done.unwrap_or_else(|e| carry::Fenced {
        failed: vec![e],
        ..carry::Fenced::default()
    }))
}

fn answer_call(call: Call) -> Reply {
    match call {
        Call::Hello => Reply::ok(Value::Null),
        Call::Check { dir, slice } => {
            Reply::ok(serde_json::to_value(check(&dir, &slice)).unwrap_or_default())
        }
        Call::Plan { dir, slice, prune } => reply(plan(&dir, &slice, prune)),
        Call::Apply {
            dir,
            slice,
            files,
            agents,
            prune,
        } => reply(apply(&dir, &slice, &files, &agents, prune)),
        Call::Run { dir, args, stdin } => {
            reply(run(&dir, &args, stdin.as_deref().unwrap_or_default()))
        }
        Call::Inject { dir, agent, text } => reply(inject(&dir, &agent, &text)),
        Call::Install { dir, fleet } => reply(
            super::install::serve(&host_dir(&dir), &fleet)
                .map(|installed| serde_json::to_value(installed).unwrap_or_default()),
        ),
        Call::Context { dir, agent } => reply(
            carry::host_fleet(&dir)
                .and_then(|(spec, fleet)| json(carry::summarize(spec.as_ref(), &fleet, &agent)?)),
        ),
        Call::Export { dir, agent } => reply(export(&dir, &agent)),
        Call::Leave { dir, agent } => reply(
            carry::host_fleet(&dir)
                .and_then(|(spec, fleet)| json(carry::leave(spec.as_ref(), &fleet, &agent)?)),
        ),
        Call::Import {
            dir,
            agent,
            context,
            fence,
        } => reply(
            carry::host_fleet(&dir)
                .and_then(|(_, fleet)| json(carry::import(&fleet, &agent, &context, &fence)?)),
        ),
        Call::Fence { dir, fences } => reply(
            carry::host_fleet(&dir)
                .and_then(|(spec, fleet)| json(carry::fence_here(spec.as_ref(), &fleet, &fences)?)),
        ),
        Call::Mirror { dir, agents } => reply(
            carry::host_fleet(&dir)
                .and_then(|(_, fleet)| json(carry::mirror_export(&fleet, &agents)?)),
        ),
    }
}

/// `text` pasted into `agent`'s pane here and confirmed: what the API's inject answers.
fn inject(dir: &str, agent: &str, text: &str) -> Result<Value, String> {
    let (Some(spec), _) = carry::host_fleet(dir)? else {
        return Err(format!("this host has no phoenix.toml in `{dir}`"));
    };
    let declared = spec.agent(agent).ok_or_else(|| {
        format!(
            "agent `{}` is not declared on this host",
            crate::text::shorten(agent, 64)
        )
    })?;
    let report =
        crate::continuity::inject::to_agent(&spec, declared, text).map_err(|e| e.to_string())?;
    Ok(serde_json::json!({
        "agent": agent, "chars": text.len(), "pane": report.pane, "attempts": report.attempts,
        "confirmed_by": report.confirmed_by, "waited_ms": report.waited_ms,
    }))
}

fn json(value: impl serde::Serialize) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| e.to_string())
}

/// One agent's context, for a move: the agent's name is checked before it becomes a path.
fn export(dir: &str, agent: &str) -> Result<Value, String> {
    carry::check_name(agent)?;
    let (_, fleet) = carry::host_fleet(dir)?;
    let dir = fleet.agent(agent);
    if !dir.exists() {
        return Err(format!(
            "agent `{agent}` has no state here (`{}` does not exist)",
            dir.path.display()
        ));
    }
    json(carry::export(&dir, None))
}

fn reply(result: Result<Value, String>) -> Reply {
    match result {
        Ok(value) => Reply::ok(value),
        Err(message) => Reply::error(ErrorKind::Failed, message),
    }
}

/// How long a host's own `apply` may take (starting agents waits for their panes).
const APPLY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a host's own read or action may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The host's directory, as the spec wrote it (`~/…` is this user's home).
fn host_dir(dir: &str) -> PathBuf {
    spec::expand_path(dir, Path::new("/"))
}

/// The slice as the host's own phoenix.toml would read it, its workdirs checked here.
fn parse_slice(dir: &Path, slice: &str) -> Result<spec::Spec, String> {
    spec::parse(
        slice,
        &dir.join(spec::DEFAULT_CONFIG),
        LoadOptions::default(),
    )
    .map_err(|e| e.to_string())
}

/// `plan --json` of the slice against this host's world; nothing is written.
fn plan(dir: &str, slice: &str, prune: crate::plan::Pruning) -> Result<Value, String> {
    let dir = host_dir(dir);
    let spec = parse_slice(&dir, slice)?;
    let runtime = world::runtime_for(&spec);
    let world = crate::status::observe(&spec, &*runtime).map_err(|e| e.to_string())?;
    let options = prune
        .options()
        .map_err(|e| format!("cannot find this phoenix: {e}"))?;
    let plan = crate::plan::diff(&spec, &world, &options);
    let warnings: Vec<String> = spec.warnings.iter().map(|w| w.message.clone()).collect();
    Ok(serde_json::json!({
        "plan": plan.to_json(),
        "warnings": warnings,
        "files": slice_digests(&dir),
    }))
}

/// At most this many files of a slice are looked at on the host.
const MAX_DIGESTS: usize = 1000;

/// What the host has of a slice (its phoenix.toml, the files under `policies/` and
/// `templates/`), each by path and [`crate::state::digest`] of its bytes: the operator pushes
/// a slice that differs even when no agent changes. A file too large or not regular is absent.
fn slice_digests(dir: &Path) -> BTreeMap<String, String> {
    use crate::state::bounded::{Links, read_whole};
    let mut paths = vec![spec::DEFAULT_CONFIG.to_string()];
    for top in ["policies", "templates"] {
        let Ok(entries) = std::fs::read_dir(dir.join(top)) else {
            continue;
        };
        paths.extend(
            entries
                .flatten()
                .take(MAX_DIGESTS)
                .filter_map(|e| e.file_name().to_str().map(|name| format!("{top}/{name}"))),
        );
    }
    paths
        .into_iter()
        .filter_map(|relative| {
            let bytes = read_whole(&dir.join(&relative), spec::MAX_CONFIG_BYTES, Links::Refuse);
            Some((relative, crate::state::digest(&bytes.ok()?)))
        })
        .collect()
}

/// Write the slice (a valid one only) as the host's phoenix.toml, then apply it.
fn apply(
    dir: &str,
    slice: &str,
    files: &BTreeMap<String, String>,
    agents: &[String],
    prune: crate::plan::Pruning,
) -> Result<Value, String> {
    let dir = host_dir(dir);
    parse_slice(&dir, slice)?;
    write_slice(&dir, slice, files)?;
    let mut args = vec!["apply".to_string(), "--yes".into(), "--json".into()];
    if prune.prune {
        args.push("--prune".into());
    }
    if prune.force_remove_worktrees {
        args.push("--force-remove-worktrees".into());
    }
    args.extend(agents.iter().cloned());
    let ran = phoenix_here(&dir, &args, b"", APPLY_TIMEOUT)?;
    Ok(serde_json::to_value(ran).unwrap_or_default())
}

/// One of [`RUN_COMMANDS`] on this host's fleet, `stdin` as its stdin.
fn run(dir: &str, args: &[String], stdin: &str) -> Result<Value, String> {
    let verb = args.first().map(String::as_str).unwrap_or("");
    if !RUN_COMMANDS.contains(&verb) {
        return Err(format!(
            "`{}` is not a command a host runs for the operator (only {})",
            crate::text::shorten(verb, 40),
            RUN_COMMANDS.join(", ")
        ));
    }
    let dir = host_dir(dir);
    if !dir.join(spec::DEFAULT_CONFIG).is_file() {
        return Err(format!(
            "no fleet here yet: `{}` has no phoenix.toml (run `phoenix apply` on the operator)",
            dir.display()
        ));
    }
    let ran = match status_here(&dir, args) {
        Some(ran) => ran,
        None => {
            let words: Vec<&str> = args.iter().map(String::as_str).collect();
            let timeout = crate::hosts::protocol::run_timeout(&words, RUN_TIMEOUT);
            phoenix_here(&dir, args, stdin.as_bytes(), timeout)?
        }
    };
    Ok(serde_json::to_value(ran).unwrap_or_default())
}

/// `status --json [-- AGENT]`, the read the operator asks most often (every `status`, every
/// `top` refresh, every dashboard update), answered in this process instead of a second
/// phoenix: what `phoenix status --json` would print, for one process start less. `None`
/// for anything else and for every error, which the command itself then reports in its own
/// words.
fn status_here(dir: &Path, args: &[String]) -> Option<Ran> {
    let agent = match args {
        [status, json] if status == "status" && json == "--json" => None,
        [status, json, dashes, agent]
            if status == "status" && json == "--json" && dashes == "--" =>
        {
            Some(agent.as_str())
        }
        _ => return None,
    };
    let spec = spec::load(&dir.join(spec::DEFAULT_CONFIG)).ok()?;
    if !spec.hosts.is_empty() {
        // A host's slice never declares hosts; a fleet here that does is not a slice.
        return None;
    }
    let runtime = world::runtime_for(&spec);
    let doc = crate::hosts::reads::fleet_status(&spec, &*runtime, agent).ok()?;
    let down = doc["agents"]
        .as_array()
        .is_some_and(|rows| rows.iter().any(crate::hosts::reads::is_down));
    Some(Ran {
        // As the command: 3 when something declared is not running.
        code: Some(if down { 3 } else { 0 }),
        stdout: serde_json::to_string(&doc).ok()?,
        stderr: String::new(),
    })
}

/// This phoenix, on the fleet in `dir`, with `args` as its argv and `stdin` on its stdin.
fn phoenix_here(
    dir: &Path,
    args: &[String],
    stdin: &[u8],
    timeout: Duration,
) -> Result<Ran, String> {
    let exe =
        crate::process::main_binary().map_err(|e| format!("cannot find this phoenix: {e}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--config")
        .arg(dir.join(spec::DEFAULT_CONFIG))
        .args(args)
        .current_dir(dir);
    match crate::process::run(command, stdin, timeout) {
        Ok(finished) => Ok(Ran {
            code: finished.status.code(),
            stdout: finished.stdout,
            stderr: finished.stderr,
        }),
        Err(crate::process::RunError::Timeout) => Err(format!(
            "`phoenix {}` did not finish within {}",
            args.first().map(String::as_str).unwrap_or(""),
            spec::duration::format(timeout)
        )),
        Err(crate::process::RunError::Spawn(e)) => Err(format!("cannot run phoenix: {e}")),
    }
}

/// The slice's files, each whole (temporary name, fsync, rename), phoenix.toml last: a
/// daemon here that reloads mid-push sees the old slice or the new one, never a mix of
/// halves. Only files under `policies/` and `templates/`, never outside `dir`.
fn write_slice(dir: &Path, slice: &str, files: &BTreeMap<String, String>) -> Result<(), String> {
    crate::hosts::ssh::ensure_private_dir(dir)
        .map_err(|e| format!("cannot make `{}`: {e}", dir.display()))?;
    for (relative, text) in files {
        let path = slice_file(dir, relative)?;
        if let Some(parent) = path.parent() {
            crate::hosts::ssh::ensure_private_dir(parent)
                .map_err(|e| format!("cannot make `{}`: {e}", parent.display()))?;
        }
        crate::state::file::write_atomic(&path, text.as_bytes(), 0o600, true)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    let config = dir.join(spec::DEFAULT_CONFIG);
    crate::state::file::write_atomic(&config, slice.as_bytes(), 0o600, true)
        .map_err(|e| format!("cannot write `{}`: {e}", config.display()))
}

/// Where a pushed file goes: a plain relative path under `policies/` or `templates/`.
fn slice_file(dir: &Path, relative: &str) -> Result<PathBuf, String> {
    let path = Path::new(relative);
    let plain = path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    let allowed = ["policies", "templates"]
        .iter()
        .any(|top| path.starts_with(top));
    if !plain || !allowed || relative.chars().any(char::is_control) {
        return Err(format!(
            "`{}` is not a file a slice carries (only plain paths under policies/ and templates/)",
            crate::text::shorten(relative, 80)
        ));
    }
    Ok(dir.join(path))
}

/// `doctor` on this host for its slice of the fleet.
fn check(dir: &str, slice: &str) -> Vec<Check> {
    let dir = spec::expand_path(dir, Path::new("/"));
    let mut rows = vec![Check {
        check: "phoenix".into(),
        ok: true,
        detail: format!(
            "{} ({}-{})",
            super::protocol::phoenix_version(),
            std::env::consts::OS,
            std::env::consts::ARCH
        ),
        fix: None,
    }];
    rows.extend(world::host_checks());
    rows.push(dir_row(&dir));
    let file = dir.join("phoenix.toml");
    let options = LoadOptions {
        check_filesystem: false,
    };
    match spec::parse(slice, &file, options) {
        Ok(spec) => {
            rows.push(daemon_row(&spec, &file));
            rows.extend(spec.agents.iter().flat_map(|a| agent_rows(a, &dir)));
        }
        Err(e) => rows.push(Check {
            check: "fleet slice".into(),
            ok: false,
            detail: crate::text::shorten(&e.to_string(), 400),
            fix: Some("run `phoenix validate` on the operator's phoenix.toml".into()),
        }),
    }
    rows
}

/// Whether a daemon keeps this host's agents alive with the operator gone: a `phoenix run`
/// supervises the fleet here, or the systemd user manager answers and has the fleet's unit
/// (it starts the daemon once an apply pushed the slice). Without either, the agents run
/// until something stops them, and nothing brings them back.
fn daemon_row(spec: &spec::Spec, config: &Path) -> Check {
    use crate::supervise::service;
    let row = |ok: bool, detail: String, fix: Option<String>| Check {
        check: "daemon".into(),
        ok,
        detail,
        fix,
    };
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    if let Some(pid) = crate::state::daemon::daemon_pid(&fleet) {
        return row(
            true,
            format!("`phoenix run` (pid {pid}) supervises the fleet here"),
            None,
        );
    }
    let name = service::unit_name_of(&spec.fleet.name);
    let install = format!("`phoenix hosts install {HOST_PLACEHOLDER}` on the operator's machine");
    match service::user_manager() {
        Ok(()) => match service::unit_dir().map(|d| d.join(&name)) {
            Ok(unit) if unit.is_file() => row(
                true,
                format!("systemd user unit `{name}` ({})", unit.display()),
                None,
            ),
            _ => row(
                false,
                format!(
                    "no daemon: the systemd user unit `{name}` is not installed and no `phoenix run` supervises the fleet"
                ),
                Some(format!("{install} installs and starts it")),
            ),
        },
        Err(why) => {
            let exe = crate::process::main_binary()
                .map(|e| e.display().to_string())
                .unwrap_or_else(|_| "phoenix".into());
            row(
                false,
                format!(
                    "no daemon will run here: no systemd user manager answers ({}) and no `phoenix run` supervises the fleet",
                    crate::text::shorten(&why, 200)
                ),
                Some(format!(
                    "run `{} --config {} run` under the host's own supervisor (it must outlive your ssh session), or give the user a systemd user manager (`loginctl enable-linger $USER`) and run {install}",
                    crate::text::sh_quote(&exe),
                    crate::text::sh_quote(&config.display().to_string()),
                )),
            )
        }
    }
}

/// What the host writes where the operator puts the host's name in a check's fix (the host
/// does not know what the operator calls it).
pub const HOST_PLACEHOLDER: &str = "<host>";

/// An agent's rows; a workdir that is the host's directory itself is there once the first
/// apply has made that (the default workdir of a host's agent).
fn agent_rows(agent: &spec::AgentSpec, dir: &Path) -> [Check; 2] {
    let mut rows = world::agent_checks(agent);
    let workdir = &mut rows[1];
    if !workdir.ok && agent.workdir == dir {
        workdir.ok = true;
        workdir.detail = format!(
            "{} (the host's dir: made by the first apply)",
            dir.display()
        );
        workdir.fix = None;
    }
    rows
}

/// The host's directory can be created or written by this user.
fn dir_row(dir: &Path) -> Check {
    let existing: PathBuf = dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    let writable =
        existing.is_dir() && nix::unistd::access(&existing, nix::unistd::AccessFlags::W_OK).is_ok();
    Check {
        check: "dir".into(),
        ok: writable,
        detail: if existing == dir {
            dir.display().to_string()
        } else {
            format!(
                "{} (to be created in {})",
                dir.display(),
                existing.display()
            )
        },
        fix: (!writable).then(|| {
            format!(
                "make `{}` writable for this user or set another `dir`",
                existing.display()
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_of_another_version_gets_a_mismatch_naming_both_versions() {
        let reply = answer(
            br#"{"format_version": 99, "phoenix_version": "9.9.9", "verb": "hello", "future": 1}"#,
        );
        assert!(!reply.ok);
        let error = reply.error.unwrap();
        assert_eq!(error.kind, ErrorKind::VersionMismatch);
        assert!(error.message.contains("9.9.9"), "{}", error.message);
        assert!(error.message.contains("protocol 99"), "{}", error.message);
        assert_eq!(reply.format_version, FORMAT_VERSION);
    }

    #[test]
    fn garbage_and_unknown_verbs_are_bad_requests_not_panics() {
        for input in [
            &b"\xff\xfe"[..],
            b"[]",
            b"{}",
            br#"{"format_version": 1, "phoenix_version": "x", "verb": "format_disk"}"#,
            br#"{"format_version": 1, "phoenix_version": "x", "verb": "check"}"#,
        ] {
            let reply = answer(input);
            assert!(!reply.ok, "{input:?}");
            assert!(
                matches!(
                    reply.error.as_ref().map(|e| e.kind),
                    Some(ErrorKind::BadRequest | ErrorKind::VersionMismatch)
                ),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn owed_fences_travel_beside_every_call_even_a_fence() {
        let fence = |generation| crate::state::fence::Fence {
            generation,
            here: false,
            runs_on: "gpu-2".into(),
            since: String::new(),
        };
        let mut request = Request::new(Call::Fence {
            dir: "/x".into(),
            fences: BTreeMap::from([("a".to_string(), fence(1))]),
        });
        request.owed_fences = BTreeMap::from([("b".to_string(), fence(2))]);
        let read: Request = serde_json::from_slice(&serde_json::to_vec(&request).unwrap()).unwrap();
        assert_eq!(read.owed_fences, request.owed_fences);
        assert_eq!(read.call, request.call);
        // Without any, the request is as it always was.
        let plain = serde_json::to_value(Request::new(Call::Hello)).unwrap();
        assert!(plain.get("owed_fences").is_none(), "{plain}");
    }

    #[test]
    fn an_oversized_request_is_refused_unread() {
        let reply = answer_from(std::io::repeat(b' ').take(MAX_REQUEST_BYTES + 10));
        assert_eq!(reply.error.unwrap().kind, ErrorKind::BadRequest);
    }

    #[test]
    fn only_status_json_is_answered_in_process_and_a_fleet_it_cannot_read_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Other commands, and status without --json, go to the command itself.
        for args in [
            words(&["events", "--json"]),
            words(&["status"]),
            words(&["status", "--json", "extra"]),
            words(&["status", "--json", "x", "y"]),
        ] {
            assert!(status_here(dir.path(), &args).is_none(), "{args:?}");
        }
        // No phoenix.toml (or one that does not load): the command reports it in its words.
        assert!(status_here(dir.path(), &words(&["status", "--json"])).is_none());
        std::fs::write(dir.path().join(spec::DEFAULT_CONFIG), "[[agent]\n").unwrap();
        assert!(status_here(dir.path(), &words(&["status", "--json"])).is_none());
    }

    #[test]
    fn check_reports_a_missing_workdir_and_command_of_the_slice() {
        let tmp = tempfile::tempdir().unwrap();
        let slice = format!(
            "[fleet]\nname = \"f\"\n\n[[agent]]\nname = \"a\"\ncli = \"custom\"\ncommand = \"no-such-program-x\"\nworkdir = \"{}\"\n",
            tmp.path().join("missing").display()
        );
        let request = serde_json::to_vec(&Request::new(Call::Check {
            dir: tmp.path().join("host").display().to_string(),
            slice,
        }))
        .unwrap();
        let reply = answer(&request);
        assert!(reply.ok, "{reply:?}");
        let rows: Vec<Check> = serde_json::from_value(reply.result).unwrap();
        let row = |name: &str| rows.iter().find(|r| r.check == name).unwrap().clone();
        assert!(row("dir").ok, "{rows:?}");
        assert!(!row("agent `a` command").ok, "{rows:?}");
        assert!(!row("agent `a` workdir").ok, "{rows:?}");
    }
}
