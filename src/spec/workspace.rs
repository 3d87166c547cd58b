//! `workspace = { repo, branch, base, worktrees }`: an agent that works in a git worktree of
//! its own, on a branch of its own, instead of a `workdir`. What the spec says, and the rules a
//! branch name must follow (git's `check-ref-format --branch`), checked at validate time so
//! that nothing hostile ever reaches git's argv or a terminal.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Where the agent's name goes in `branch`.
pub const NAME_PLACEHOLDER: &str = "{name}";
/// The branch of an agent whose workspace names none.
pub const DEFAULT_BRANCH: &str = "agent/{name}";
/// Where worktrees live unless `worktrees` says otherwise: inside the repo.
pub const DEFAULT_WORKTREES: &str = ".worktrees";

/// One agent's declared worktree, every default applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkspaceSpec {
    /// The repository (its main working tree), `~` and relative paths expanded.
    pub repo: PathBuf,
    /// The agent's branch, `{name}` replaced.
    pub branch: String,
    /// What a new branch starts from; `None`: the branch the repo has checked out.
    pub base: Option<String>,
    /// The worktree: `<worktrees>/<agent name>`. It is the agent's workdir.
    pub path: PathBuf,
}

impl WorkspaceSpec {
    /// Whether the worktree sits inside its repo (then git must be told to ignore the
    /// directory holding it, or the repo's own `git status` lists every agent's files).
    pub fn inside_repo(&self) -> bool {
        self.path.starts_with(&self.repo)
    }
}

/// Why `name` cannot be a branch (git's `check-ref-format --branch` rules, and printable
/// ASCII only: a branch name is shown in plans and terminals, where an escape sequence or a
/// right-to-left mark would lie about it). `None` when it can.
pub fn branch_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".into());
    }
    if name.starts_with('-') {
        return Some("starts with `-` (git would read it as an option)".into());
    }
    if name == "HEAD" || name == "@" {
        return Some(format!("`{name}` is not a branch name git allows"));
    }
    ref_problem(name)
}

/// Why `name` cannot name a commit to start from (a branch, `origin/main`, a tag, a commit
/// id): the same characters as a branch; `None` when it can.
pub fn base_problem(name: &str) -> Option<String> {
    if name.starts_with('-') {
        return Some("starts with `-` (git would read it as an option)".into());
    }
    if name == "HEAD" {
        return None;
    }
    branch_problem(name)
}

/// git's refname rules (`git help check-ref-format`), over printable ASCII.
fn ref_problem(name: &str) -> Option<String> {
    if let Some(bad) = name.chars().find(|c| !c.is_ascii() || c.is_ascii_control()) {
        return Some(format!(
            "contains {bad:?}: only printable ASCII characters are allowed"
        ));
    }
    if let Some(bad) = name.chars().find(|c| " ~^:?*[\\".contains(*c)) {
        return Some(format!(
            "contains {bad:?}, which git does not allow in a branch name"
        ));
    }
    if name.contains("..") {
        return Some("contains `..`".into());
    }
    if name.contains("@{") {
        return Some("contains `@{`".into());
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Some("has an empty part (a leading, trailing or doubled `/`)".into());
    }
    if name.ends_with('.') {
        return Some("ends with `.`".into());
    }
    for part in name.split('/') {
        if part.starts_with('.') {
            return Some(format!("has a part starting with `.` (`{part}`)"));
        }
        if part.ends_with(".lock") {
            return Some(format!("has a part ending with `.lock` (`{part}`)"));
        }
    }
    None
}

/// `branch` as written with the agent's name in place of `{name}`.
pub fn branch_for(template: &str, agent: &str) -> String {
    template.replace(NAME_PLACEHOLDER, agent)
}

/// The worktree of `agent` under `worktrees` (already expanded).
pub fn worktree_path(worktrees: &Path, agent: &str) -> PathBuf {
    worktrees.join(agent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_and_malformed_branch_names_are_refused() {
        for bad in [
            "",
            "-f",
            "--force",
            "HEAD",
            "@",
            "a b",
            "a\tb",
            "a\u{1b}[31m",
            "a\u{202e}b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[b",
            "a\\b",
            "a..b",
            "a@{1}",
            "/a",
            "a/",
            "a//b",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a.lock/b",
        ] {
            assert!(branch_problem(bad).is_some(), "{bad:?} accepted");
        }
        for good in ["agent/auth", "a-b_c.d", "feature/x/y", "a@b", "v1.2", "é"] {
            let problem = branch_problem(good);
            // Non-ASCII is refused on purpose; everything else here is a fine branch.
            assert_eq!(problem.is_some(), good == "é", "{good:?}: {problem:?}");
        }
        assert!(base_problem("HEAD").is_none());
        assert!(base_problem("origin/main").is_none());
        assert!(base_problem("--upload-pack=x").is_some());
    }

    /// The rules agree with git itself on what git accepts (phoenix may refuse more).
    #[test]
    fn what_phoenix_accepts_git_accepts() {
        let Ok(git) = std::process::Command::new("git").arg("--version").output() else {
            return;
        };
        assert!(git.status.success());
        for name in [
            "agent/auth",
            "a-b_c.d",
            "feature/x/y",
            "a@b",
            "v1.2",
            "a;rm -rf",
            "a$(x)",
            "a`b`",
            "a'b",
            "a\"b",
            "x.lockx",
            "a/b.c/d",
            "-x",
            "a..b",
            "a.",
        ] {
            let ok = std::process::Command::new("git")
                .args(["check-ref-format", "--branch", name])
                .output()
                .unwrap()
                .status
                .success();
            if branch_problem(name).is_none() {
                assert!(ok, "phoenix accepts {name:?}, git refuses it");
            }
        }
    }
}
