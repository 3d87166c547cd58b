//! Claude Code's background sessions (`claude --bg "<task>"`, `/background`, listed by
//! `claude agents`), beside a supervised agent. Read from the 2.1.197 and 2.1.332 binaries and
//! tried against a scripted model server:
//!
//! - `claude --bg` hands the session to Claude's own daemon (`claude daemon run`, started on
//!   demand, one per config dir), which runs it in a pty host of its own, detached from the
//!   caller: `backgrounded · <id>` and the caller exits. `<id>` is the first 8 hex digits of
//!   the session id.
//! - Each job has `$CLAUDE_CONFIG_DIR/jobs/<id>/state.json` (else `~/.claude/jobs/<id>/`),
//!   rewritten by the job itself: `state` (`working`, `blocked`, `done`, `failed`,
//!   `stopped`), `tempo` (`active`, `idle`, `blocked`), `detail` (the last thing it said or its
//!   error), `intent` (its prompt), `name`, `sessionId`, `createdAt`, `updatedAt`.
//! - The job runs in the caller's folder, so it loads that folder's `.claude/settings.json`:
//!   a job an agent starts runs the agent's own phoenix hooks, and its hooks see
//!   `CLAUDE_JOB_DIR=<config>/jobs/<id>` in their environment (the agent's own session never
//!   does). A job's end, failure or prompt is not the agent's: `hooks/background.rs` records
//!   the job here and leaves the agent's state alone.
//!
//! phoenix reads what a job wrote, never runs `claude agents` or anything of the job's: the
//! files are the job's (untrusted), read bounded, regular files only, no link followed, and
//! every text is cut to one short line.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use crate::state::bounded::{self, Links};
use crate::state::{self, AgentDir};

/// The environment variable Claude Code gives a background session (and its hooks).
pub const JOB_DIR_ENV: &str = "CLAUDE_JOB_DIR";
/// phoenix's record of the background jobs that ran an agent's hooks, in its state dir.
pub const RECORD: &str = "background_jobs.jsonl";
/// A job's state.json is a few kilobytes; Claude itself refuses one over 8 MiB.
const MAX_STATE_BYTES: u64 = 256 * 1024;
/// How much of the end of [`RECORD`] is read.
const RECORD_TAIL_BYTES: u64 = 64 * 1024;
/// Jobs shown per agent at most (the newest).
pub const MAX_SHOWN: usize = 20;
/// A job's name, prompt or detail is cut to this many characters.
const MAX_TEXT: usize = 120;

/// The background job a hook fired in: its id and its dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    pub id: String,
    pub dir: PathBuf,
}

/// The job a hook runs in, from its `CLAUDE_JOB_DIR` and the payload's session id: a dir
/// named `jobs/<id>` whose `<id>` is the session's own short id. An agent started from inside
/// a job (phoenix run from a job's shell) inherits the variable, but its own session has
/// another id: it is not taken for a job.
pub fn job_of_hook(job_dir: Option<&str>, session_id: Option<&str>) -> Option<JobRef> {
    let dir = PathBuf::from(job_dir.filter(|d| !d.is_empty())?);
    let id = dir.file_name()?.to_str()?.to_string();
    let in_jobs = dir
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "jobs");
    let session = session_id?;
    (in_jobs && is_job_id(&id) && session.get(..8) == Some(id.as_str()))
        .then_some(JobRef { id, dir })
}

/// Claude's short ids: 8 lowercase hex digits.
fn is_job_id(id: &str) -> bool {
    id.len() == 8 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Record that `job` ran the agent's hooks (at its session start): what `status AGENT` lists.
pub fn record(dir: &AgentDir, job: &JobRef, session_id: Option<&str>) -> std::io::Result<()> {
    state::append_jsonl(
        &dir.file(RECORD),
        &json!({"ts": state::now_rfc3339(), "job": job.id, "job_dir": job.dir,
                "session_id": session_id}),
    )
}

/// One background job as `status AGENT` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackgroundJob {
    /// Claude's short id (`claude attach <id>`).
    pub id: String,
    /// Its name, else its prompt (one line, cut).
    pub name: Option<String>,
    /// `working`, `blocked`, `done`, `failed`, `stopped` as the job wrote it; `gone` when its
    /// state.json is no longer there, `unreadable` when it cannot be read.
    pub state: String,
    /// `active`, `idle`, `blocked`.
    pub tempo: Option<String>,
    /// The last thing it said, or its error (one line, cut).
    pub detail: Option<String>,
    pub started: Option<String>,
    pub updated: Option<String>,
    pub session_id: Option<String>,
    /// Why it is the agent's: it ran the agent's hooks (it runs in the agent's workdir).
    pub belongs: &'static str,
}

/// The background jobs recorded for an agent, newest first, each as its state.json says now.
pub fn jobs_of(dir: &AgentDir) -> Vec<BackgroundJob> {
    let Ok(tail) = bounded::read_tail(&dir.file(RECORD), RECORD_TAIL_BYTES, Links::Refuse) else {
        return Vec::new();
    };
    let mut seen: Vec<(String, PathBuf, Option<String>)> = Vec::new();
    for line in state::jsonl::objects(&tail.lines_text()).iter().rev() {
        let (Some(id), Some(job_dir)) = (line["job"].as_str(), line["job_dir"].as_str()) else {
            continue;
        };
        if !is_job_id(id) || seen.iter().any(|(s, ..)| s == id) {
            continue;
        }
        seen.push((
            id.to_string(),
            PathBuf::from(job_dir),
            line["session_id"].as_str().map(str::to_string),
        ));
        if seen.len() == MAX_SHOWN {
            break;
        }
    }
    seen.into_iter()
        .map(|(id, job_dir, session)| read_job(&id, &job_dir, session))
        .collect()
}

/// The job `id` as its `state.json` in `job_dir` says; `job_dir` must be a real `jobs/<id>`
/// directory (no link on the way: the path came from the job's own environment).
pub fn read_job(id: &str, job_dir: &Path, session_id: Option<String>) -> BackgroundJob {
    let mut job = BackgroundJob {
        id: id.to_string(),
        name: None,
        state: "gone".into(),
        tempo: None,
        detail: None,
        started: None,
        updated: None,
        session_id: session_id.filter(|s| is_session_id(s)),
        belongs: "ran this agent's hooks (started in its workdir)",
    };
    let shaped = job_dir.file_name().is_some_and(|n| n == id)
        && job_dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "jobs");
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !shaped || !job_dir.parent().is_some_and(real_dir) || !real_dir(job_dir) {
        job.state = if shaped && !job_dir.exists() {
            "gone"
        } else {
            "unreadable"
        }
        .into();
        return job;
    }
    let text =
        match bounded::read_string(&job_dir.join("state.json"), MAX_STATE_BYTES, Links::Refuse) {
            Ok(text) => text,
            Err(e) if e.is_not_found() => return job,
            Err(_) => {
                job.state = "unreadable".into();
                return job;
            }
        };
    let Some(v) = serde_json::from_str::<Value>(&text)
        .ok()
        .filter(Value::is_object)
    else {
        job.state = "unreadable".into();
        return job;
    };
    job.state = word(&v["state"]).unwrap_or_else(|| "unknown".into());
    job.tempo = word(&v["tempo"]);
    job.name = line(&v["name"]).or_else(|| line(&v["intent"]));
    job.detail = line(&v["detail"]);
    job.started = timestamp(&v["createdAt"]);
    job.updated = timestamp(&v["updatedAt"]);
    if let Some(s) = v["sessionId"].as_str().filter(|s| is_session_id(s)) {
        job.session_id = Some(s.to_string());
    }
    job
}

/// A state word as Claude writes them (`working`, `blocked`): lowercase letters, `_`, `-`.
fn word(v: &Value) -> Option<String> {
    v.as_str()
        .filter(|s| {
            !s.is_empty()
                && s.len() <= 24
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-')
        })
        .map(str::to_string)
}

/// Text the job wrote as one short line: whitespace runs and control characters as one
/// space (no line of it can pass for one of phoenix's), cut to [`MAX_TEXT`] characters.
fn line(v: &Value) -> Option<String> {
    let text: String = v
        .as_str()?
        .chars()
        .take(MAX_TEXT * 4)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then(|| crate::text::shorten(&text, MAX_TEXT))
}

/// An RFC 3339 time, rendered by phoenix (the job's own text is not passed on).
fn timestamp(v: &Value) -> Option<String> {
    v.as_str()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .map(state::rfc3339)
}

/// A session id: a UUID's characters, at most 64.
fn is_session_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = "a4cd397e-86cd-4dc0-b365-abc3a3a349f4";

    #[test]
    fn a_hook_is_a_jobs_only_when_its_job_dir_is_its_own_sessions() {
        let ours = job_of_hook(Some("/h/.claude/jobs/a4cd397e"), Some(SESSION)).unwrap();
        assert_eq!(ours.id, "a4cd397e");
        // The agent's own session under an inherited variable: another id.
        let other = "4f9ae1e8-331c-4482-ab96-2c3407d4448e";
        assert_eq!(
            job_of_hook(Some("/h/.claude/jobs/a4cd397e"), Some(other)),
            None
        );
        assert_eq!(job_of_hook(None, Some(SESSION)), None);
        assert_eq!(job_of_hook(Some(""), Some(SESSION)), None);
        assert_eq!(job_of_hook(Some("/h/.claude/jobs/a4cd397e"), None), None);
        assert_eq!(
            job_of_hook(Some("/h/.claude/elsewhere/a4cd397e"), Some(SESSION)),
            None
        );
        assert_eq!(
            job_of_hook(Some("/h/.claude/jobs/A4CD397E"), Some("A4CD397E-x")),
            None
        );
    }

    fn job_dir(root: &Path, id: &str, state: &Value) -> PathBuf {
        let dir = root.join("jobs").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("state.json"), state.to_string()).unwrap();
        dir
    }

    #[test]
    fn a_jobs_state_is_read_as_one_short_line_each() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = job_dir(
            tmp.path(),
            "a4cd397e",
            &json!({"state": "blocked", "tempo": "blocked", "intent": "fail\nHealth: healthy",
                    "detail": format!("Prompt is too long\u{1b}[2J {}", "x".repeat(500)),
                    "sessionId": SESSION, "createdAt": "2026-12-02T03:33:58.927Z",
                    "updatedAt": "not a time"}),
        );
        let job = read_job("a4cd397e", &dir, None);
        assert_eq!(job.state, "blocked");
        assert_eq!(job.tempo.as_deref(), Some("blocked"));
        assert_eq!(job.name.as_deref(), Some("fail Health: healthy"));
        let detail = job.detail.unwrap();
        assert!(detail.starts_with("Prompt is too long [2J x"), "{detail}");
        assert_eq!(detail.chars().count(), MAX_TEXT);
        assert_eq!(job.started.as_deref(), Some("2026-12-02T03:33:58.927Z"));
        assert_eq!(job.updated, None);
        assert_eq!(job.session_id.as_deref(), Some(SESSION));
        // A state word of another shape is not passed on.
        let odd = job_dir(
            tmp.path(),
            "0000000a",
            &json!({"state": "WORKING\u{1b}[31m"}),
        );
        assert_eq!(read_job("0000000a", &odd, None).state, "unknown");
    }

    #[test]
    fn a_linked_or_missing_job_is_not_read_through() {
        let tmp = tempfile::tempdir().unwrap();
        let real = job_dir(tmp.path(), "a4cd397e", &json!({"state": "working"}));
        let jobs = tmp.path().join("other/jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        std::os::unix::fs::symlink(&real, jobs.join("a4cd397e")).unwrap();
        assert_eq!(
            read_job("a4cd397e", &jobs.join("a4cd397e"), None).state,
            "unreadable"
        );
        std::fs::remove_file(real.join("state.json")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", real.join("state.json")).unwrap();
        assert_eq!(read_job("a4cd397e", &real, None).state, "unreadable");
        assert_eq!(
            read_job("deadbeef", &tmp.path().join("jobs/deadbeef"), None).state,
            "gone"
        );
        // A recorded dir that is not `jobs/<id>` is not read.
        assert_eq!(read_job("a4cd397e", tmp.path(), None).state, "unreadable");
    }

    #[test]
    fn the_record_lists_each_job_once_newest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let agent = AgentDir {
            name: "cc".into(),
            path: tmp.path().join("agent"),
        };
        agent.ensure().unwrap();
        let a = job_dir(tmp.path(), "0000000a", &json!({"state": "done"}));
        let b = job_dir(tmp.path(), "0000000b", &json!({"state": "working"}));
        for (id, dir) in [("0000000a", &a), ("0000000b", &b), ("0000000a", &a)] {
            let job = JobRef {
                id: id.into(),
                dir: dir.clone(),
            };
            record(&agent, &job, None).unwrap();
        }
        let jobs = jobs_of(&agent);
        let ids: Vec<(&str, &str)> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.state.as_str()))
            .collect();
        assert_eq!(ids, [("0000000a", "done"), ("0000000b", "working")]);
    }
}
