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
//! - Its transcript writes one `assistant` record per content block of a response, each with
//!   the response's `message.usage`: a response is counted once, by `message.id`. Subagents
//!   write their own transcripts in `<session>/subagents/`, and their tokens are billed too.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::usage::{self, Record, Tokens};
use super::{AgentCli, HookEntry, SESSION_STARTS, entry as e};

/// Subagent transcripts looked at per session at most.
const MAX_SUBAGENT_FILES: usize = 256;

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

    fn approval_prompts(&self) -> &'static [super::ApprovalPrompt] {
        &[super::CLAUDE_APPROVAL]
    }

    /// Claude Code (2.1) draws its input box (`❯ `, `> ` in older builds) below the
    /// conversation, also while a turn runs; its permission and choice dialogs take its place
    /// at the bottom, with the selection cursor `❯` before an answer (`❯ 1. Yes`).
    fn input_prompts(&self) -> &'static [&'static str] {
        &["❯", ">"]
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
            // A permission prompt, an elicitation dialog, a minute idle at its prompt: the
            // agent waits for a person (the matcher is the notification type).
            e(
                "Notification",
                Some("permission_prompt|idle_prompt|elicitation_dialog"),
                "notification",
                5,
                "",
            ),
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

    /// `{"type":"assistant","message":{"id","model","usage":{input_tokens,
    /// cache_creation_input_tokens, cache_read_input_tokens, output_tokens}},"timestamp"}`.
    /// An API error is written as a `<synthetic>` response with zero usage: nothing.
    fn usage_record(&self, record: &Value) -> Option<Record> {
        if record.get("type").and_then(Value::as_str) != Some("assistant") {
            return None;
        }
        let u = record.pointer("/message/usage")?;
        let tokens = Tokens {
            input: usage::count(u, "input_tokens"),
            output: usage::count(u, "output_tokens"),
            cache_write: usage::count(u, "cache_creation_input_tokens"),
            cache_read: usage::count(u, "cache_read_input_tokens"),
        };
        (!tokens.is_zero()).then(|| Record::Response {
            id: usage::text(record, "/message/id"),
            model: usage::text(record, "/message/model"),
            at: usage::text(record, "/timestamp"),
            tokens,
        })
    }

    /// The transcript and its subagents' (`<dir>/<session>/subagents/*.jsonl`).
    fn usage_files(&self, transcript: &Path) -> Vec<PathBuf> {
        let mut files = vec![transcript.to_path_buf()];
        let subagents = transcript.with_extension("").join("subagents");
        let Ok(entries) = std::fs::read_dir(&subagents) else {
            return files;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .take(MAX_SUBAGENT_FILES)
            .collect();
        found.sort();
        files.extend(found);
        files
    }
}
