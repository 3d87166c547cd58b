//! Which version of its CLI an agent's command runs. Read from the npm package the program
//! lies in (its `package.json`: no process started), else asked with `<program> --version`
//! (an argv, never a shell; killed after [`ASK_TIMEOUT`]), and cached by the program's real
//! path, size and modification time in `<state_dir>/cli_versions.json`, so that a plan asks a
//! program once per install, not each time.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent_cli::version::{self, Proven, Standing, Version};
use crate::spec::AgentSpec;
use crate::state::bounded::{self, Links};

/// How long `--version` may take. Gemini CLI's took 31 s on a loaded machine (it relaunches
/// itself under a bigger heap), which is why the package file is read first.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// The cache file, in the fleet's state dir.
pub const CACHE_FILE: &str = "cli_versions.json";
/// Largest cache file or `package.json` read.
const MAX_FILE: u64 = 1 << 20;
/// Programs remembered at most (a cache of a fleet, not of every binary ever seen).
const MAX_ENTRIES: usize = 256;

/// What is known of the CLI an agent's command runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Installed {
    /// The program the command starts, resolved (symlinks followed); `None` when it cannot be
    /// found.
    pub program: Option<PathBuf>,
    pub version: Option<Version>,
    /// Why the version is not known, when it is not.
    pub problem: Option<String>,
}

/// One remembered answer, valid while the program's file is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cached {
    size: u64,
    mtime_ns: i128,
    version: Option<String>,
    problem: Option<String>,
}

/// The version of the CLI `agent`'s command runs, cached under `state_dir`. `None` for an
/// agent whose CLI phoenix knows no versions of (custom, or its command is phoenix's own).
pub fn installed(agent: &AgentSpec, state_dir: &Path) -> Option<Installed> {
    let adapter = agent.cli.adapter();
    if adapter.proven().is_empty() {
        return None;
    }
    let Some(program) = agent.program_path() else {
        return Some(Installed {
            program: None,
            version: None,
            problem: Some(format!("command `{}` is not found", agent.program())),
        });
    };
    let real = std::fs::canonicalize(&program).unwrap_or(program);
    let Ok(meta) = std::fs::metadata(&real) else {
        return Some(Installed {
            program: Some(real),
            version: None,
            problem: Some("cannot read the program's file".into()),
        });
    };
    let key = real.to_string_lossy().into_owned();
    let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
    let cache_path = state_dir.join(CACHE_FILE);
    let mut cache = read_cache(&cache_path);
    let hit = cache
        .get(&key)
        .filter(|c| c.size == meta.size() && c.mtime_ns == mtime_ns)
        .cloned();
    let cached = hit.unwrap_or_else(|| {
        let (version, problem) = match detect(agent, &real) {
            Ok(v) => (Some(v.to_string()), None),
            Err(problem) => (None, Some(problem)),
        };
        let fresh = Cached {
            size: meta.size(),
            mtime_ns,
            version,
            problem,
        };
        if cache.len() >= MAX_ENTRIES {
            cache.clear();
        }
        cache.insert(key, fresh.clone());
        // A cache that cannot be written is asked again next time: nothing else is lost. No
        // state dir is made for it (`doctor` and `plan` only look).
        if state_dir.is_dir()
            && let Ok(text) = serde_json::to_string_pretty(&cache)
        {
            let _ = crate::state::atomic_write(&cache_path, text.as_bytes());
        }
        fresh
    });
    Some(Installed {
        program: Some(real),
        version: cached.version.as_deref().and_then(Version::parse),
        problem: cached.problem,
    })
}

fn read_cache(path: &Path) -> BTreeMap<String, Cached> {
    bounded::read_string(path, MAX_FILE, Links::Refuse)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// The version of `program` (resolved), run by `agent`: its npm package's, else its answer to
/// `--version`.
fn detect(agent: &AgentSpec, program: &Path) -> Result<Version, String> {
    let adapter = agent.cli.adapter();
    if let Some(v) = adapter
        .npm_package()
        .and_then(|name| package_version(program, name))
    {
        return Ok(v);
    }
    let named = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| adapter.program_names().contains(&n))
    };
    let written = Path::new(agent.argv.first().map(String::as_str).unwrap_or(""));
    if !named(written) && !named(program) {
        return Err(format!(
            "`{}` is not {}'s own program ({}), and phoenix starts no other program to ask",
            agent.program(),
            adapter.display_name(),
            adapter.program_names().join(", ")
        ));
    }
    let mut command = Command::new(program);
    command
        .arg("--version")
        .envs(&agent.env)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped());
    if agent.workdir.is_dir() {
        command.current_dir(&agent.workdir);
    }
    match crate::process::run(command, b"", ASK_TIMEOUT) {
        Ok(done) => adapter.version_in(&done.stdout).ok_or_else(|| {
            format!(
                "`{} --version` did not print a {} version ({}: {:?})",
                agent.program(),
                adapter.display_name(),
                done.describe_status(),
                crate::process::first_line(&done.stdout)
            )
        }),
        Err(crate::process::RunError::Timeout) => Err(format!(
            "`{} --version` did not answer within {} s",
            agent.program(),
            ASK_TIMEOUT.as_secs()
        )),
        Err(crate::process::RunError::Spawn(e)) => {
            Err(format!("cannot run `{} --version`: {e}", agent.program()))
        }
    }
}

/// The version in the `package.json` of npm package `name` that `program` lies in (a few
/// directories up: `…/@google/gemini-cli/bundle/gemini.js`).
fn package_version(program: &Path, name: &str) -> Option<Version> {
    program.ancestors().skip(1).take(4).find_map(|dir| {
        let text = bounded::read_string(&dir.join("package.json"), MAX_FILE, Links::Follow).ok()?;
        let package: serde_json::Value = serde_json::from_str(&text).ok()?;
        (package.get("name")?.as_str()? == name)
            .then(|| Version::parse(package.get("version")?.as_str()?))
            .flatten()
    })
}

/// What `doctor` and `plan` say of an agent's CLI version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub agent: String,
    pub cli: String,
    /// `Claude Code`.
    pub name: String,
    /// The installed version, when known.
    pub version: Option<String>,
    /// The versions phoenix was proven with, `2.1.197–2.1.332`.
    pub proven: String,
    /// The proven version the hooks are made for.
    pub hooks_made_for: String,
    /// `proven`, `older`, `newer` or `unknown`.
    pub standing: String,
    /// Said when the version is outside the proven range or not known.
    pub warning: Option<String>,
    pub hint: Option<String>,
}

/// The report for an agent whose CLI has proven versions.
pub fn report(agent: &AgentSpec, installed: &Installed) -> Report {
    let adapter = agent.cli.adapter();
    let proven: &'static [Proven] = adapter.proven();
    let name = adapter.display_name();
    let range = version::range_text(proven);
    let made_for = version::made_for(proven, installed.version).version;
    let standing = version::standing(proven, installed.version);
    let (word, warning, hint) = match standing {
        Standing::Proven => ("proven", None, None),
        Standing::Older => (
            "older",
            Some(format!(
                "{name} {} is older than the versions phoenix was proven with ({range}); \
                 hooks made for {name} {made_for}",
                fmt(installed.version)
            )),
            Some(format!("upgrade {name} to {range} or newer")),
        ),
        Standing::Newer => (
            "newer",
            Some(format!(
                "{name} {} is newer than the versions phoenix was proven with ({range}); \
                 hooks made for {name} {made_for}, its new hook events left unused",
                fmt(installed.version)
            )),
            Some(format!(
                "watch its first start (`phoenix status {}`), or install a proven version",
                agent.name
            )),
        ),
        Standing::Unknown => (
            "unknown",
            Some(format!(
                "the {name} version is not known ({}); hooks made for {name} {made_for}, \
                 the oldest proven",
                installed.problem.as_deref().unwrap_or("no answer")
            )),
            Some(format!(
                "check that `{}` is {name} and runs",
                agent.program()
            )),
        ),
    };
    Report {
        agent: agent.name.clone(),
        cli: agent.cli.as_str().to_string(),
        name: name.to_string(),
        version: installed.version.map(|v| v.to_string()),
        proven: range,
        hooks_made_for: made_for.to_string(),
        standing: word.to_string(),
        warning,
        hint,
    }
}

/// `hooks made for Claude Code 2.1.332` (and the installed version when it is another).
pub fn made_for_text(agent: &AgentSpec, installed: &Installed) -> String {
    let adapter = agent.cli.adapter();
    let name = adapter.display_name();
    let made_for = version::made_for(adapter.proven(), installed.version).version;
    match installed.version {
        Some(v) if v == made_for => format!("hooks made for {name} {made_for}"),
        Some(v) => format!("hooks made for {name} {made_for} (installed: {v})"),
        None => format!("hooks made for {name} {made_for} (installed version not known)"),
    }
}

fn fmt(v: Option<Version>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}
