//! What the watchdog remembers of one agent between passes (`watchdog.json`): the findings
//! to confirm, the screen, the progress of its tool calls, what was reported and handled.

use serde::{Deserialize, Serialize};

use super::health::{Check, Finding};
use super::observe::Observed;
use super::report::AgentReport;
use crate::state::{self, AgentDir, NeedsInput};

/// The watchdog's memory of one agent between passes (`watchdog.json` in its state dir).
pub const MEMORY: &str = "watchdog.json";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    #[serde(default)]
    pub last_pass: Option<i64>,
    /// What the previous pass found (confirmed or not).
    #[serde(default)]
    pub pending: Vec<Check>,
    #[serde(default)]
    pub screen_hash: Option<String>,
    /// The screen's digest without spinners and elapsed-time counters, and the latest pass
    /// that saw it change: a sign of life for the silence check.
    #[serde(default)]
    pub screen_moved_hash: Option<String>,
    #[serde(default)]
    pub screen_changed_at: Option<i64>,
    /// Tool calls in the log and the latest one's time at the previous pass (progress).
    #[serde(default)]
    pub tool_count: Option<u64>,
    #[serde(default)]
    pub last_tool_call: Option<i64>,
    /// The last notification: what it was about and when, so a long-running problem is not
    /// reported on every pass.
    #[serde(default)]
    pub notified_key: Option<String>,
    #[serde(default)]
    pub notified_at: Option<i64>,
    /// The failed turn (`Observed::failed_turn`) last acted on: whoever ran the pass (the
    /// agent's wrapper at once, the daemon, a cron `watchdog --once`), it is handled once.
    #[serde(default)]
    pub failed_turn_handled: Option<String>,
    /// What a pass found the agent waiting for (an approval prompt on its screen, idle with
    /// open loops), with the time the wait began; the hook's own word is in state.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_input: Option<NeedsInput>,
    /// The wait last notified (`NeedsInput::key`) and when: once per wait, and at most one
    /// per agent within `[notify] input_cooldown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_notified: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_notified_at: Option<i64>,
    /// The local day the warning that only the agent's own usage reports put it past its
    /// budget was last sent: once a day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_budget_warned: Option<String>,
    /// The revivals an older phoenix kept here, kept as they are until the restart ledger
    /// has read them (it reads them once, when it is first written); never read otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revival_task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revivals: Option<u32>,
}

impl Memory {
    /// `watchdog.json` as a `JsonFile`, not synced: losing a write to a power cut only means
    /// confirming a finding once more.
    fn file(dir: &AgentDir) -> state::JsonFile<Memory> {
        state::JsonFile::new(dir, MEMORY, "watchdog").unsynced()
    }

    pub fn load(dir: &AgentDir) -> Memory {
        Memory::file(dir).load_or_default()
    }

    /// Write it if it changed since `before` (the time of the pass alone is no change): a
    /// pass over a large quiet fleet then writes nothing.
    pub(super) fn save_if_changed(&self, before: &Memory, dir: &AgentDir) -> std::io::Result<()> {
        let unchanged = Memory {
            last_pass: self.last_pass,
            ..before.clone()
        } == *self;
        if unchanged && dir.file(MEMORY).exists() {
            return Ok(());
        }
        dir.ensure()?;
        // Last write wins, as for a memory of findings: no lock.
        Memory::file(dir)
            .save_locked(self)
            .map_err(std::io::Error::other)
    }

    /// What this pass saw, for the next one to confirm findings and measure progress against.
    pub(super) fn remember(&mut self, seen: &Observed, found: &[Finding], now: i64) {
        self.pending = found.iter().map(|f| f.check).collect();
        self.screen_hash = seen.screen_hash.clone();
        self.screen_moved_hash = seen.screen_moved_hash.clone();
        self.screen_changed_at = seen.inputs.screen_changed_at;
        self.tool_count = Some(seen.inputs.tool_count);
        self.last_tool_call = seen.inputs.last_tool_call;
        self.last_pass = Some(now);
    }

    /// The agent was revived or stopped: a new session is a new episode, whose problems are
    /// confirmed afresh. A failed turn acted on (not skipped) is not handled again.
    pub(super) fn new_episode(
        &mut self,
        seen: &Observed,
        confirmed: &[Finding],
        report: &AgentReport,
    ) {
        self.pending.clear();
        if confirmed.iter().any(|f| f.check == Check::TurnFailed)
            && !report
                .action_taken
                .as_deref()
                .is_some_and(|a| a.starts_with("revival_skipped"))
        {
            self.failed_turn_handled = seen.failed_turn.clone();
        }
        self.screen_hash = None;
        self.screen_moved_hash = None;
    }
}
