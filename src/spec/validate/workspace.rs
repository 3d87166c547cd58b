//! Where an agent works: a `workdir`, or a `workspace` (a git worktree of its own). The two
//! exclude each other at one level; an agent's own key wins over the one in `[defaults]`.

use std::path::PathBuf;

use super::Validator;
use crate::spec::raw::{RawAgent, RawWorkspace, Spanned};
use crate::spec::workspace::{
    DEFAULT_BRANCH, DEFAULT_WORKTREES, NAME_PLACEHOLDER, WorkspaceSpec, base_problem, branch_for,
    branch_problem, worktree_path,
};
use crate::spec::{AgentSpec, expand_path};

const BOTH_HINT: &str = "an agent with a `workspace` works in its worktree: remove `workdir`, or remove `workspace` to work in `workdir`";

impl Validator<'_> {
    /// The agent's workdir and, when it has one, its workspace (whose worktree is the workdir).
    pub(super) fn place(
        &mut self,
        raw: &RawAgent,
        defaults: &RawAgent,
        name: &str,
    ) -> (PathBuf, Option<WorkspaceSpec>) {
        for level in [raw, defaults] {
            if let (Some(ws), Some(_)) = (&level.workspace, &level.workdir) {
                self.error(
                    format!("agent `{name}`: `workspace` and `workdir` exclude each other"),
                    Some(ws.span()),
                    BOTH_HINT,
                );
            }
        }
        // The agent's own key first: its `workdir` overrides a `[defaults] workspace`.
        let chosen = [raw, defaults]
            .into_iter()
            .find(|level| level.workspace.is_some() || level.workdir.is_some());
        match chosen {
            Some(RawAgent {
                workspace: Some(ws),
                ..
            }) => match self.workspace(ws, name) {
                Some(ws) => (ws.path.clone(), Some(ws)),
                None => (self.dir.to_path_buf(), None),
            },
            Some(level) => (self.workdir(level.workdir.as_ref(), name), None),
            None => (self.workdir(None, name), None),
        }
    }

    /// One `workspace` table, or `None` once one of its problems is reported.
    fn workspace(&mut self, raw: &Spanned<RawWorkspace>, name: &str) -> Option<WorkspaceSpec> {
        let ws = raw.get_ref();
        let Some(repo_text) = &ws.repo else {
            self.error(
                format!("agent `{name}`: `workspace` has no `repo`"),
                Some(raw.span()),
                "add `repo = \"~/src/app\"`: the git repository the agent gets a worktree of",
            );
            return None;
        };
        let repo = self.repo(repo_text, name)?;
        let branch = match &ws.branch {
            Some(b) => self.branch(b, name)?,
            None => branch_for(DEFAULT_BRANCH, name),
        };
        let base = match &ws.base {
            Some(b) => match base_problem(b.get_ref()) {
                Some(problem) => {
                    self.error(
                        format!("agent `{name}`: workspace base `{}` {problem}", b.get_ref()),
                        Some(b.span()),
                        "name a branch (\"main\", \"origin/main\"), a tag or a commit",
                    );
                    return None;
                }
                None => Some(b.get_ref().clone()),
            },
            None => None,
        };
        let worktrees = match &ws.worktrees {
            Some(w) if w.get_ref().trim().is_empty() => {
                self.error(
                    format!("agent `{name}`: workspace `worktrees` is empty"),
                    Some(w.span()),
                    "leave it out for `.worktrees` inside the repo",
                );
                return None;
            }
            Some(w) => expand_path(w.get_ref(), &repo),
            None => repo.join(DEFAULT_WORKTREES),
        };
        Some(WorkspaceSpec {
            path: worktree_path(&worktrees, name),
            repo,
            branch,
            base,
        })
    }

    /// The repository: relative to phoenix.toml; a git repository's top directory when the
    /// filesystem is checked.
    fn repo(&mut self, text: &Spanned<String>, name: &str) -> Option<PathBuf> {
        if text.get_ref().trim().is_empty() {
            self.error(
                format!("agent `{name}`: workspace `repo` is empty"),
                Some(text.span()),
                "the git repository the agent gets a worktree of, e.g. \"~/src/app\"",
            );
            return None;
        }
        let repo = self.path(text.get_ref());
        if self.options.check_filesystem {
            if !repo.is_dir() {
                self.missing(name, "workspace repo", &repo, text, "repository");
                return None;
            }
            if !repo.join(".git").exists() {
                self.error(
                    format!(
                        "agent `{name}`: workspace repo `{}` is not a git repository",
                        repo.display()
                    ),
                    Some(text.span()),
                    "point `repo` at the top directory of a git repository (the one holding `.git`)",
                );
                return None;
            }
        }
        Some(repo)
    }

    /// The branch with `{name}` replaced, checked as git would check it (and stricter).
    fn branch(&mut self, text: &Spanned<String>, name: &str) -> Option<String> {
        let branch = branch_for(text.get_ref(), name);
        let problem = branch_problem(&branch).or_else(|| {
            (branch.contains('{') || branch.contains('}'))
                .then(|| format!("has a `{{` or `}}` left: only `{NAME_PLACEHOLDER}` is replaced"))
        });
        if let Some(problem) = problem {
            self.error(
                format!("agent `{name}`: workspace branch `{branch}` {problem}"),
                Some(text.span()),
                "a git branch name, e.g. \"agent/{name}\": letters, digits and `/ - _ .`; no spaces, no `~ ^ : ? * [ \\`, no `..`, not starting with `-`",
            );
            return None;
        }
        Some(branch)
    }

    /// Whether `agent`'s branch is still free in its repo (on its host): git checks a branch
    /// out in one worktree at a time.
    pub(super) fn claim_branch(
        &mut self,
        taken: &mut super::Taken,
        agent: &AgentSpec,
        raw: &Spanned<RawAgent>,
        host: Option<&str>,
    ) -> bool {
        let Some(ws) = &agent.workspace else {
            return true;
        };
        let key = (host.map(str::to_string), ws.repo.clone(), ws.branch.clone());
        if let Some(other) = taken.branches.get(&key) {
            let span = raw.get_ref().workspace.as_ref().map(|w| w.span());
            self.error(
                format!(
                    "agent `{}`: branch `{}` of `{}` is already agent `{other}`'s",
                    agent.name,
                    ws.branch,
                    ws.repo.display()
                ),
                span,
                "git checks a branch out in one worktree at a time: give each agent its own, e.g. branch = \"agent/{name}\"",
            );
            return false;
        }
        taken.branches.insert(key, agent.name.clone());
        true
    }
}
