//! Claude Code: hooks in `<workdir>/.claude/settings.json`, timeouts in seconds, resumed with
//! `--resume <id>`, and a SessionStart hook at every launch.
//!
//! Notes on its versions and quirks (the CLI is closed source; see the reference
//! `cli-hooks.md`):
//! - PostToolUse never fires for a failed Bash call (anthropics/claude-code#29799, #6371):
//!   PostToolUseFailure is wired for those.
//! - An API error ends the turn with StopFailure instead of Stop; phoenix reads it as a failed
//!   turn (no session file is read).
//! - Resuming fires two SessionStart events, the first a spurious `startup` with a fresh id and
//!   an empty transcript (#24265, #12235): phoenix keeps the last session id it is told.
//! - PreCompact exit 2 vetoes the compaction (v2.1.105): the hook always exits 0.
//! - SessionEnd work is killed at exit (about 1.5 s, #41577): the hook only records.

use super::{AgentCli, HookEntry, SESSION_STARTS, entry as e};

/// Claude Code's adapter.
pub struct Claude;

impl AgentCli for Claude {
    fn resume_argv(&self, mut base: Vec<String>, id: &str) -> Option<Vec<String>> {
        base.extend(["--resume".to_string(), id.to_string()]);
        Some(base)
    }

    fn hook_file(&self) -> Option<&'static str> {
        Some(".claude/settings.json")
    }

    fn hook_entries(&self) -> Vec<HookEntry> {
        vec![
            e("SessionStart", SESSION_STARTS, "session-start", 10, ""),
            e("UserPromptSubmit", None, "prompt", 5, ""),
            e("PostToolUse", Some("*"), "heartbeat", 5, ""),
            // PostToolUse never fires for a failed Bash call.
            e("PostToolUseFailure", Some("*"), "tool-error", 5, ""),
            e("PreCompact", Some("manual|auto"), "pre-compact", 30, ""),
            e("Stop", None, "stop", 5, ""),
            // An API error ends the turn with StopFailure instead of Stop.
            e("StopFailure", None, "turn-failed", 5, ""),
            e("SessionEnd", None, "session-end", 5, ""),
            // The call about to run is noted, so an exit while it runs can be named to the
            // next session (and the structured-file guard snapshots what the call will edit).
            e("PreToolUse", Some("*"), "pre-tool", 5, ""),
        ]
    }

    /// Claude fires SessionStart at startup: its hooks are the sign of life, the pane is not
    /// watched.
    fn life_shows_in_pane(&self) -> bool {
        false
    }

    /// Claude Code (2.1) runs SessionStart once its session is loaded; its input box follows
    /// at once (measured: kill -9 → resumed first request 3.0–3.3 s with a 250 ms still
    /// screen after the hook, 4.5 s with 1.5 s).
    fn ready_after_session_start(&self) -> bool {
        true
    }
}
