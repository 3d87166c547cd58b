//! The GitHub channel: one issue per investigated agent through the `gh` CLI, de-duplicated
//! against open issues and limited to one new issue per fleet within `issue_cooldown`
//! (remembered in `<state_dir>/notify.json` under a file lock, across restarts and processes).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Message, Sent};
use crate::process::{self, RunError};
use crate::spec::GithubNotify;
use crate::state::{FleetDir, JsonFile};

/// The fleet's notification state, next to `critical_events.jsonl`.
pub(crate) const NOTIFY_STATE: &str = "notify.json";
/// Serialises issue creation between processes (the daemon and `phoenix watchdog --once`).
pub(crate) const NOTIFY_LOCK: &str = "notify.lock";
/// Every issue phoenix opens starts with this; de-duplication searches for it.
pub(crate) const TITLE_PREFIX: &str = "[Watchdog]";
/// GitHub refuses bodies over 65,536 characters.
const MAX_BODY: usize = 60_000;

const CHANNEL: &str = "github";

/// `notify.json`. Unknown fields are kept, so an older phoenix does not drop a newer one's.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct NotifyState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_issue: Option<LastIssue>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LastIssue {
    pub created_at: jiff::Timestamp,
    pub agent: String,
    pub repo: String,
    #[serde(default)]
    pub url: Option<String>,
}

/// An issue as `gh issue list --json number,title,url` prints it (the number is not needed).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Issue {
    pub title: String,
    #[serde(default)]
    pub url: String,
}

/// `[Watchdog] agent `trades`: stuck on a permission prompt`.
pub(crate) fn issue_title(agent: &str, title: &str) -> String {
    format!("{TITLE_PREFIX} agent `{agent}`: {}", title.trim())
}

/// The open issue that already tracks `agent`, if any.
pub(crate) fn tracking_issue<'i>(issues: &'i [Issue], agent: &str) -> Option<&'i Issue> {
    let needle = format!("agent `{agent}`");
    issues
        .iter()
        .find(|i| i.title.starts_with(TITLE_PREFIX) && i.title.contains(&needle))
}

/// The issue URL `gh issue create` printed: its last line that starts with `http`.
pub(crate) fn created_url(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with("http"))
        .map(str::to_string)
}

pub(crate) struct Github<'a> {
    pub settings: &'a GithubNotify,
    pub cooldown: Duration,
    pub fleet: &'a FleetDir,
    pub program: &'a Path,
    pub timeout: Duration,
}

impl Github<'_> {
    pub fn send(&self, msg: &Message) -> Sent {
        match self.open_issue(msg) {
            Ok((url, detail)) => Sent {
                channel: CHANNEL.into(),
                ok: true,
                url,
                detail,
            },
            Err(detail) => Sent::new(CHANNEL, false, detail),
        }
    }

    /// `(url, detail)` of the issue that now tracks the agent, or why there is none.
    fn open_issue(&self, msg: &Message) -> Result<(Option<String>, String), String> {
        let repo = &self.settings.repo;
        let root = &self.fleet.root;
        self.fleet
            .ensure()
            .map_err(|e| format!("cannot create the state dir {}: {e}", root.display()))?;
        // Held until the issue is recorded: a second process waits, then sees the issue (as
        // open, or through the cooldown) instead of creating another.
        let _lock = self.lock()?;

        let list = self.gh(
            &[
                "issue",
                "list",
                "--repo",
                repo,
                "--state",
                "open",
                "--search",
                &format!("{TITLE_PREFIX} in:title"),
                "--json",
                "number,title,url",
                "--limit",
                "100",
            ],
            b"",
        )?;
        let issues: Vec<Issue> = serde_json::from_str(list.trim()).map_err(|e| {
            format!(
                "`gh issue list` answered with unexpected JSON ({e}): {}",
                process::first_line(&list)
            )
        })?;
        if let Some(open) = tracking_issue(&issues, &msg.agent) {
            let url = (!open.url.is_empty()).then(|| open.url.clone());
            return Ok((url, "open issue already tracks this agent".into()));
        }

        let path = state_path(self.fleet);
        let mut state = read_state(&path);
        let now = jiff::Timestamp::now();
        if let Some(last) = &state.last_issue
            && in_cooldown(last.created_at, now, self.cooldown)
        {
            return Err(format!(
                "cooldown: last issue created at {} (issue_cooldown = {})",
                crate::state::rfc3339(last.created_at),
                crate::spec::duration::format(self.cooldown)
            ));
        }

        let title = issue_title(&msg.agent, &msg.title);
        let mut args: Vec<&str> = vec![
            "issue",
            "create",
            "--repo",
            repo,
            "--title",
            &title,
            "--body-file",
            "-",
        ];
        for label in &self.settings.labels {
            args.extend(["--label", label.as_str()]);
        }
        let body = issue_body(msg);
        let out = self.gh(&args, body.as_bytes())?;
        let url = created_url(&out);

        state.last_issue = Some(LastIssue {
            created_at: now,
            agent: msg.agent.clone(),
            repo: repo.clone(),
            url: url.clone(),
        });
        let detail = match write_state(&path, &state) {
            Ok(()) => "issue created".to_string(),
            Err(e) => format!(
                "issue created, but {} could not be written ({e}): the cooldown will not hold",
                path.display()
            ),
        };
        match url {
            Some(url) => Ok((Some(url), detail)),
            None => Ok((None, format!("{detail} (gh printed no URL)"))),
        }
    }

    /// Take `notify.lock`, waiting at most as long as another holder may need for its two
    /// `gh` calls.
    fn lock(&self) -> Result<Flock<std::fs::File>, String> {
        let path = self.fleet.root.join(NOTIFY_LOCK);
        let mut file = crate::state::file::open_lock(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let deadline = Instant::now() + self.timeout * 2 + Duration::from_secs(5);
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(lock),
                Err((f, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = f;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(format!(
                        "another phoenix process has held {} for too long",
                        path.display()
                    ));
                }
                Err((_, errno)) => {
                    return Err(format!(
                        "cannot lock {}: {}",
                        path.display(),
                        io::Error::from(errno)
                    ));
                }
            }
        }
    }

    /// Run `gh ARGS` with `input` on stdin; its stdout, or why it failed.
    fn gh(&self, args: &[&str], input: &[u8]) -> Result<String, String> {
        let program = self.program.display().to_string();
        let what = format!(
            "`gh {}`",
            args.iter().take(2).copied().collect::<Vec<_>>().join(" ")
        );
        let mut command = Command::new(self.program);
        command.args(args).env("GH_PROMPT_DISABLED", "1");
        match process::run(command, input, self.timeout) {
            Ok(done) if done.status.success() => Ok(done.stdout),
            Ok(done) => {
                let why = done.stderr_line();
                let why = if why.is_empty() {
                    process::first_line(&done.stdout)
                } else {
                    why
                };
                Err(format!("{what} failed ({}): {why}", done.describe_status()))
            }
            Err(RunError::Spawn(e)) if e.kind() == io::ErrorKind::NotFound => {
                Err(not_found(self.program))
            }
            Err(RunError::Spawn(e)) => Err(format!("cannot start {program}: {e}")),
            Err(RunError::Timeout) => Err(format!(
                "{what} took longer than {} and was killed",
                crate::spec::duration::format(self.timeout)
            )),
        }
    }
}

fn not_found(program: &Path) -> String {
    if program.components().count() > 1 {
        format!(
            "{} not found: install the GitHub CLI or remove [notify.github]",
            program.display()
        )
    } else {
        format!(
            "{} not found on PATH: install the GitHub CLI or remove [notify.github]",
            program.display()
        )
    }
}

/// Whether an issue created at `last` still blocks a new one at `now`. A time far in the
/// future (a clock that jumped back, a hand-edited file) does not block forever.
pub(crate) fn in_cooldown(last: jiff::Timestamp, now: jiff::Timestamp, cooldown: Duration) -> bool {
    let Ok(cooldown) = jiff::SignedDuration::try_from(cooldown) else {
        return true;
    };
    let since = now.duration_since(last);
    since < cooldown && since > -cooldown
}

fn issue_body(msg: &Message) -> String {
    let body = crate::text::shorten(&msg.body, MAX_BODY);
    format!(
        "{body}\n\n---\n_Opened by the phoenix watchdog for agent `{}` of fleet `{}`. \
         phoenix opens no other issue for this agent while this one is open._\n",
        msg.agent, msg.fleet
    )
}

/// `notify.json` as a `JsonFile` of the fleet (under `notify.lock`, which callers hold).
fn state_file(path: &Path) -> JsonFile<NotifyState> {
    let fleet = FleetDir::new(path.parent().unwrap_or(Path::new(".")));
    JsonFile::fleet(&fleet, NOTIFY_STATE, "notify").lock_file(NOTIFY_LOCK)
}

/// `notify.json`, read with `notify.lock` held: missing means nothing was recorded; a corrupt
/// file is rolled back to its last good copy and recorded.
pub(crate) fn read_state(path: &Path) -> NotifyState {
    match state_file(path).load_locked() {
        Ok(state) => state.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "ignoring unreadable notify state: {e}");
            NotifyState::default()
        }
    }
}

fn write_state(path: &Path, state: &NotifyState) -> io::Result<()> {
    state_file(path)
        .save_locked(state)
        .map_err(io::Error::other)
}

/// The path of a fleet's `notify.json`.
pub(crate) fn state_path(fleet: &FleetDir) -> PathBuf {
    fleet.root.join(NOTIFY_STATE)
}
