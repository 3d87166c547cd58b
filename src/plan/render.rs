//! The plan for people: one line per change, the summary line, what runs undeclared or is held back.

use std::fmt::{self, Write as _};

use super::{Action, Change, Plan};

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() && self.unmanaged.is_empty() && self.attention.is_empty() {
            writeln!(f, "No changes. The fleet matches phoenix.toml.")?;
        } else if self.changes.is_empty() {
            writeln!(f, "No changes to apply.")?;
        } else {
            writeln!(f, "phoenix will perform these actions:\n")?;
            for c in &self.changes {
                writeln!(f, "{}", render_change(c))?;
            }
            let s = self.summary();
            let mut line = format!(
                "\nPlan: {} to start, {} to restart, {} to replace, {} to remove",
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
            writeln!(f, "{line}.")?;
        }
        if !self.unmanaged.is_empty() {
            writeln!(
                f,
                "\nRunning but not in phoenix.toml (use --prune to remove):"
            )?;
            for u in &self.unmanaged {
                writeln!(f, "  ? agent `{}` in pane {}", u.agent, u.pane)?;
            }
        }
        if !self.attention.is_empty() {
            writeln!(f, "\nDeclared but held back by phoenix (not changes):")?;
            for a in &self.attention {
                let pane = if a.pane.is_empty() {
                    String::new()
                } else {
                    format!(" in pane {}", a.pane)
                };
                writeln!(f, "  ! agent `{}`{pane}: {}; {}", a.agent, a.state, a.hint)?;
            }
        }
        Ok(())
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn render_change(c: &Change) -> String {
    let what = match &c.action {
        Action::InitState => "create state dir".to_string(),
        Action::Start => "start".to_string(),
        Action::Restart { pane } => format!("restart in {pane}"),
        Action::Replace { pane, .. } => format!("replace in {pane}"),
        Action::Stop { pane } => format!("stop {pane}"),
        Action::Prune { pane } | Action::RemoveExtra { pane, .. } => format!("remove {pane}"),
        Action::InstallHooks { path, .. } => format!("install hooks in {}", path.display()),
        Action::RemoveHooks { path, .. } => {
            format!("remove phoenix hooks from {}", path.display())
        }
    };
    let mut out = format!("{:>5} agent `{}`: {what} — {}", c.symbol, c.agent, c.reason);
    if let Action::InstallHooks { diff, .. } | Action::RemoveHooks { diff, .. } = &c.action {
        for line in diff.lines() {
            let _ = write!(out, "\n          {line}");
        }
    }
    if let Action::Replace { changed, .. } = &c.action {
        for fc in changed {
            let _ = write!(
                out,
                "\n          {}: {} → {}",
                fc.field, fc.before, fc.after
            );
        }
    }
    out
}
