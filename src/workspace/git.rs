//! The one door to git: the real `git` program, always as an argv (never a shell), always
//! `git -C <dir>`, with the environment variables that would point it at another repository
//! taken away (a hook of the agent's may have exported `GIT_DIR`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

/// The program phoenix runs.
pub const PROGRAM: &str = "git";

/// Variables that make git work on another repository, index or worktree than `-C` says.
const REDIRECTING: [&str; 8] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
];

#[derive(Debug, Clone, thiserror::Error)]
pub enum GitError {
    #[error("`{PROGRAM}` was not found on PATH (install git)")]
    NotInstalled,
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
}

/// Run `git -C dir args…` and return its stdout. `read_only`: ask git not to take optional
/// locks (a `git status` refreshing the index must never get in the way of the agent's own git).
pub fn run<S: AsRef<OsStr>>(dir: &Path, args: &[S], read_only: bool) -> Result<String, GitError> {
    let mut cmd = Command::new(PROGRAM);
    cmd.arg("-C").arg(dir).args(args);
    for var in REDIRECTING {
        cmd.env_remove(var);
    }
    // Messages in one language, never a prompt for credentials or an editor.
    cmd.env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true")
        .stdin(Stdio::null());
    if read_only {
        cmd.env("GIT_OPTIONAL_LOCKS", "0");
    }
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => GitError::NotInstalled,
        _ => GitError::Failed {
            command: describe(dir, args),
            stderr: e.to_string(),
        },
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(GitError::Failed {
        command: describe(dir, args),
        stderr: stderr.trim().lines().take(4).collect::<Vec<_>>().join("; "),
    })
}

/// Whether `git -C dir args…` succeeds (a question such as "does this ref exist").
pub fn succeeds<S: AsRef<OsStr>>(dir: &Path, args: &[S]) -> Result<bool, GitError> {
    match run(dir, args, true) {
        Ok(_) => Ok(true),
        Err(GitError::Failed { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `git -C '/src/my app' worktree add …`, for messages.
fn describe<S: AsRef<OsStr>>(dir: &Path, args: &[S]) -> String {
    let mut words = vec![PROGRAM.to_string(), "-C".into(), dir.display().to_string()];
    words.extend(
        args.iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned()),
    );
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}
