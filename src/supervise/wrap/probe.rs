//! The first sign of life of a started agent, and the pane without the wrapper's own lines.

use super::*;

/// Lines of the pane read to see it change (history above the screen, and the screen).
pub(super) const SCREEN_LINES: usize = 200;

/// Watches for the first sign of life of a started agent: its hooks write `state.json`,
/// `tool_use.jsonl`, `session_id` or hook lines in `ops.jsonl`; a CLI without a hook at launch
/// (`AgentCli::life_shows_in_pane`) may instead just print in its pane: anything below the
/// start banner the wrapper printed just before it, but the wrapper's own lines. No read of
/// the pane before the start is needed to compare with, so a start costs no tmux call.
pub(super) struct LifeProbe {
    files: Vec<(PathBuf, Option<(u64, SystemTime)>)>,
    ops: PathBuf,
    ops_len: u64,
    /// The runtime, the pane and the agent's name (its banner).
    pane: Option<(SharedRuntime, String, String)>,
    /// When the pane may be read next, and the wait after that: a tmux call per agent every
    /// 100 ms would swamp the server of a large fleet of quiet agents.
    next_capture: Instant,
    capture_every: Duration,
    /// No hook is guaranteed and no pane can be read: being alive has to do.
    blind: bool,
    /// The session's end hook ran: what it wrote (state.json) is the end, not life.
    ended: bool,
}

impl LifeProbe {
    pub(super) fn new(
        dir: &AgentDir,
        agent: &AgentSpec,
        runtime: &SharedRuntime,
        pane: &Option<String>,
    ) -> LifeProbe {
        let stamp = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
        };
        let files = ["state.json", "tool_use.jsonl", record::SESSION_ID]
            .iter()
            .map(|f| {
                let p = dir.file(f);
                let s = stamp(&p);
                (p, s)
            })
            .collect();
        let ops = dir.file(state::OPS_LOG);
        let ops_len = std::fs::metadata(&ops).map(|m| m.len()).unwrap_or(0);
        // A CLI whose hooks may not fire at launch: what it prints counts too.
        let watch_pane = agent.cli.adapter().life_shows_in_pane();
        let pane = pane
            .as_ref()
            .filter(|_| watch_pane)
            .map(|p| (runtime.clone(), p.clone(), agent.name.clone()));
        LifeProbe {
            files,
            ops,
            ops_len,
            blind: watch_pane && pane.is_none(),
            pane,
            next_capture: Instant::now() + Duration::from_millis(200),
            capture_every: Duration::from_millis(250),
            ended: false,
        }
    }

    pub(super) fn shown(&mut self) -> bool {
        if self.shown_in_files() {
            return true;
        }
        if let Some((runtime, pane, agent)) = &self.pane
            && Instant::now() >= self.next_capture
        {
            self.next_capture = Instant::now() + self.capture_every;
            self.capture_every = (self.capture_every * 2).min(Duration::from_secs(2));
            if let Ok(now) = runtime.capture(pane, SCREEN_LINES)
                && printed(&now, agent)
            {
                return true;
            }
        }
        false
    }

    /// The last look, after the exit, at the pane as it was read then (`screen`) whatever
    /// the throttle says.
    pub(super) fn shown_at_exit(&mut self, screen: Option<&str>) -> bool {
        if self.shown_in_files() {
            return true;
        }
        match (&self.pane, screen) {
            (Some((_, _, agent)), Some(now)) => printed(now, agent),
            _ => false,
        }
    }

    /// The wrapper itself just wrote the agent's state (a wait it saw on the screen): that
    /// write is no sign of the CLI's life.
    pub(super) fn written_by_wrapper(&mut self) {
        for (path, before) in &mut self.files {
            if path.ends_with("state.json") {
                *before = std::fs::metadata(&*path)
                    .ok()
                    .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
            }
        }
    }

    fn shown_in_files(&mut self) -> bool {
        if self.blind {
            return true;
        }
        // The ops first: an end hook seen there makes the files it wrote no sign of life.
        if self.hook_in_ops() {
            return true;
        }
        if self.ended {
            return false;
        }
        for (path, before) in &self.files {
            let now = std::fs::metadata(path)
                .ok()
                .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
            if now.is_some() && now != *before {
                return true;
            }
        }
        false
    }

    /// Has a hook other than the session's end written an op since the last look: the CLI
    /// runs, and runs its hooks. An end hook (SessionEnd: Claude Code runs it after printing
    /// "No conversation found" for a resume it refused, Gemini CLI from its exit cleanup
    /// whatever ended it) says the session is over, not that it came up.
    pub(super) fn hook_in_ops(&mut self) -> bool {
        let text = state::read_since(&self.ops, self.ops_len);
        self.ops_len += text.len() as u64;
        let ops = state::op::parse(&text);
        self.ended |= ops.iter().any(|o| matches!(o.op, Op::SessionEnd(_)));
        ops.iter().any(|o| shows_life(&o.op))
    }

    /// After the exit: did the run's hooks (ops since `since`) only end the session? Then
    /// whatever was taken for life on the way (the end hook's write to state.json, seen
    /// before its op) was not.
    pub(super) fn only_ended(&self, since: u64) -> bool {
        let ops = state::op::since(&self.ops, since);
        let hooks: Vec<&Op> = ops
            .iter()
            .map(|o| &o.op)
            .filter(|o| o.is_from_hook())
            .collect();
        !self.blind && !hooks.is_empty() && !hooks.iter().any(|o| shows_life(o))
    }
}

/// A hook op that says the session came up: any but the session's end.
fn shows_life(op: &Op) -> bool {
    op.is_from_hook() && !matches!(op, Op::SessionEnd(_))
}

/// Has the session started last printed anything in `screen`: below its start banner (all of
/// it when the banner is gone: scrolled out, or the CLI cleared the screen), a line that is
/// not the wrapper's own.
fn printed(screen: &str, agent: &str) -> bool {
    !without_our_lines(crate::clinic::triage::this_session(screen, agent)).is_empty()
}

pub(super) fn without_our_lines(screen: &str) -> String {
    screen
        .lines()
        // Also after what a CLI killed mid-screen left on the line (`❯ [phoenix] … ended`):
        // the wrapper's own words are never the agent's error, nor a sign of its life.
        .filter(|l| !crate::clinic::triage::said_by_phoenix(l, SAY))
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_follows_the_start_banner_and_is_not_ours_shows_life() {
        let before = "old session's last words\n[phoenix] `a` ended (crash)\n";
        let started = format!("{before}[phoenix] starting `a` (fresh session)\n");
        assert!(!printed(&started, "a"), "the previous session's output");
        assert!(!printed(&format!("{started}\n[phoenix] a note\n  \n"), "a"));
        assert!(printed(&format!("{started}ready>\n"), "a"));
        // Another agent's banner is not this one's.
        assert!(printed(
            "[phoenix] starting `b` (fresh session)\nhello\n",
            "a"
        ));
        // The screen was cleared (or the banner scrolled out): all of it is this session's.
        assert!(printed("  welcome\n", "a"));
        assert!(!printed("", "a"));
        // The agent quoting a banner starts nothing.
        assert!(printed(
            &format!("{started}echo '[phoenix] starting `a`'\n"),
            "a"
        ));
    }

    #[test]
    pub(super) fn pane_comparison_ignores_the_wrappers_own_lines() {
        assert_eq!(
            without_our_lines("$ x\n[phoenix] starting\n\n"),
            without_our_lines("$ x\n")
        );
        assert_eq!(
            without_our_lines("$ x\n❯ [phoenix] `a` ended (crash): clinic: transient_error\n"),
            "$ x"
        );
        assert_eq!(
            without_our_lines("echo '[phoenix] hi'\n"),
            "echo '[phoenix] hi'"
        );
    }
}
