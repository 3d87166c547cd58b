//! The plan for people: one line per change, the summary line, what runs undeclared or is held back.

use std::fmt::{self, Write as _};

use super::{Action, Attention, Change, Plan, Summary, Unmanaged};

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty()
            && self.unmanaged.is_empty()
            && self.attention.is_empty()
            && self.kept_worktrees.is_empty()
        {
            writeln!(f, "No changes. The fleet matches phoenix.toml.")?;
        } else if self.changes.is_empty() {
            writeln!(f, "No changes to apply.")?;
        } else {
            writeln!(f, "phoenix will perform these actions:\n")?;
            for c in &self.changes {
                writeln!(f, "{}", render_change(c, 5))?;
            }
            writeln!(f, "\n{}.", summary_line(&self.summary()))?;
        }
        if !self.unmanaged.is_empty() {
            writeln!(
                f,
                "\nRunning but not in phoenix.toml (use --prune to remove):"
            )?;
            for u in &self.unmanaged {
                writeln!(f, "  {}", unmanaged_line(u))?;
            }
        }
        if !self.attention.is_empty() {
            writeln!(f, "\nDeclared but held back by phoenix (not changes):")?;
            for a in &self.attention {
                writeln!(f, "  {}", attention_line(a))?;
            }
        }
        // A version outside the proven range is said; one not known only by `doctor` (a
        // wrapper script as the command is common and fine).
        let outside: Vec<_> = self
            .cli_versions
            .iter()
            .filter(|v| v.version.is_some() && v.warning.is_some())
            .collect();
        if !outside.is_empty() {
            writeln!(
                f,
                "\nCLI versions phoenix was not proven with (not changes):"
            )?;
            for v in outside {
                writeln!(f, "  {}", cli_version_line(v))?;
            }
        }
        if !self.sandboxes.is_empty() {
            writeln!(f, "\nSandboxes (not changes):")?;
            for s in &self.sandboxes {
                writeln!(f, "  {}", sandbox_line(s))?;
            }
        }
        if !self.kept_worktrees.is_empty() {
            writeln!(f, "\nWorktrees no agent works in, kept (not changes):")?;
            for k in &self.kept_worktrees {
                writeln!(f, "  {}", kept_worktree_line(k))?;
            }
        }
        Ok(())
    }
}

/// `Plan: 1 to start, 0 to restart, 0 to replace, 0 to remove` and the counts that are not 0
/// of the rest (without the final full stop).
pub fn summary_line(s: &Summary) -> String {
    let mut line = format!(
        "Plan: {} to start, {} to restart, {} to replace, {} to remove",
        s.start, s.restart, s.replace, s.remove
    );
    if s.stop > 0 {
        let _ = write!(line, ", {} to stop", s.stop);
    }
    if s.init > 0 {
        let _ = write!(line, ", {} state dir{} to create", s.init, plural(s.init));
    }
    if s.hooks > 0 {
        let _ = write!(line, ", {} hook file{} to update", s.hooks, plural(s.hooks));
    }
    if s.worktrees > 0 {
        let _ = write!(
            line,
            ", {} worktree{} to change",
            s.worktrees,
            plural(s.worktrees)
        );
    }
    line
}

/// `! agent `cc`: Claude Code 2.1.400 is newer than …; hint`.
pub fn cli_version_line(v: &crate::world::cli_version::Report) -> String {
    let mut line = format!(
        "! agent `{}`: {}",
        v.agent,
        v.warning.as_deref().unwrap_or_default()
    );
    if let Some(hint) = &v.hint {
        line.push_str("; ");
        line.push_str(hint);
    }
    line
}

/// `? agent `x` in pane %3`: running here but not declared.
pub fn unmanaged_line(u: &Unmanaged) -> String {
    format!("? agent `{}` in pane {}", u.agent, u.pane)
}

/// `! agent `x` in pane %3: safe-mode; what to do`: declared but held back.
pub fn attention_line(a: &Attention) -> String {
    let pane = if a.pane.is_empty() {
        String::new()
    } else {
        format!(" in pane {}", a.pane)
    };
    format!("! agent `{}`{pane}: {}; {}", a.agent, a.state, a.hint)
}

/// `+ worktree ~/src/app/.worktrees/auth on branch agent/auth (from main) for agent `auth` — why`:
/// a worktree change names the worktree first, as that is what changes on disk.
fn worktree_line(c: &Change, width: usize) -> String {
    use crate::workspace::display;
    let what = match &c.action {
        Action::CreateWorktree {
            path,
            branch,
            base,
            new_branch,
            ..
        } => {
            let from = if *new_branch {
                format!("from {base}")
            } else {
                "existing branch".into()
            };
            format!("worktree {} on branch {branch} ({from})", display(path))
        }
        Action::SwitchWorktree { path, branch, .. } => {
            format!("worktree {} back to branch {branch}", display(path))
        }
        Action::RemoveWorktree { path, branch, .. } => {
            format!("worktree {} (branch {branch} stays)", display(path))
        }
        _ => String::new(),
    };
    format!(
        "{:>width$} {what} for agent `{}` — {}",
        c.symbol, c.agent, c.reason
    )
}

/// `! worktree ~/src/app/.worktrees/old of agent `old` kept: why`.
pub fn kept_worktree_line(k: &super::KeptWorktree) -> String {
    format!(
        "! worktree {} of agent `{}` (branch {}) kept: {}",
        k.path, k.agent, k.branch, k.why
    )
}

pub fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// One change: its symbol right-aligned in `width` columns, what and why; a hook file's diff
/// and a replacement's changed fields follow on lines of their own, indented past the symbol.
pub fn render_change(c: &Change, width: usize) -> String {
    let what = match &c.action {
        Action::InitState => "create state dir".to_string(),
        Action::Start => "start".to_string(),
        Action::Restart { pane } => format!("restart in {pane}"),
        Action::Replace { pane, .. } => format!("replace in {pane}"),
        Action::Stop { pane } => format!("stop {pane}"),
        Action::Prune { pane } | Action::RemoveExtra { pane, .. } => format!("remove {pane}"),
        Action::Retire { pane } => format!("retire in {pane}"),
        Action::InstallHooks { path, .. } => format!("install hooks in {}", path.display()),
        Action::RemoveHooks { path, .. } => {
            format!("remove phoenix hooks from {}", path.display())
        }
        Action::CreateWorktree { .. }
        | Action::SwitchWorktree { .. }
        | Action::RemoveWorktree { .. } => return worktree_line(c, width),
    };
    let mut out = format!(
        "{:>width$} agent `{}`: {what} — {}",
        c.symbol, c.agent, c.reason
    );
    let indent = " ".repeat(width + 5);
    if let Action::InstallHooks { diff, .. } | Action::RemoveHooks { diff, .. } = &c.action {
        for line in diff.lines() {
            let _ = write!(out, "\n{indent}{line}");
        }
    }
    if let Action::Replace { changed, .. } = &c.action {
        for fc in changed {
            let _ = write!(out, "\n{indent}{}: {} → {}", fc.field, fc.before, fc.after);
        }
    }
    out
}

/// `agent `a`: sandbox `strict`: 3 writable, … — verified: all canaries held`.
fn sandbox_line(s: &super::SandboxReport) -> String {
    let verified = match s.verified.as_str() {
        "passed" => "verified: every canary held".to_string(),
        "failed" => format!(
            "FAILED its canaries ({}): apply will not start it; `phoenix sandbox verify {}` says why",
            s.failed.join("; "),
            s.agent
        ),
        _ => "not verified for this layout yet: apply verifies it before it starts the agent"
            .to_string(),
    };
    let own = s
        .own_sandbox
        .as_ref()
        .map(|n| format!("; {n}"))
        .unwrap_or_default();
    format!("agent `{}`: {} — {verified}{own}", s.agent, s.summary)
}
