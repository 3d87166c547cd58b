//! "Needs a human": what an agent waits for (its CLI's own word through the notification
//! hook, kept in state.json, or what a pass saw: an approval prompt, idle with open loops,
//! kept in the watchdog's memory), recorded as a `needs_input` op and critical event and sent
//! through `[notify]` once per wait, at most once per agent per `input_cooldown`.
//!
//! The wrapper calls [`notify_now`] the moment the hook says its CLI waits; every pass calls
//! [`Watchdog::waits`] for the rest (and for a wait the wrapper's call held back).

use serde_json::json;

use super::Watchdog;
use super::memory::Memory;
use super::observe::Observed;
use super::report::AgentReport;
use super::waiting::{self, Waiting};
use crate::notify::{Kind, Message, Notifier, Sent};
use crate::spec::{AgentSpec, Spec};
use crate::state::lock::{FleetLock, WATCHDOG_LOCK};
use crate::state::{self, AgentDir, FleetDir, NeedsInput, Op};

/// How long the wrapper's notification waits for a running pass to finish.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Watchdog<'_> {
    /// What the agent waits for now, if anything: the hook's word first, else what this pass
    /// sees. The pass's own finding is kept in `memory` (with the time it began), ended with
    /// an `input_given` op when it is gone.
    pub(super) fn waits(
        &self,
        agent: &AgentSpec,
        dir: &AgentDir,
        seen: &Observed,
        memory: &mut Memory,
    ) -> Option<NeedsInput> {
        let alive = matches!(
            seen.inputs.process,
            Some(super::health::Process::Alive { .. })
        );
        let found = alive
            .then(|| {
                waiting::assess(
                    &seen.inputs,
                    seen.open_loops,
                    agent.cli.adapter().approval_prompts(),
                    self.spec.thresholds.waiting,
                )
            })
            .flatten();
        memory.needs_input = match (memory.needs_input.take(), found) {
            (Some(before), Some(now)) if before.reason == now.reason => Some(before),
            (before, Some(now)) => {
                if let Some(before) = before {
                    given(dir, &before, "watchdog");
                }
                Some(started(dir, now, seen.inputs.now))
            }
            (Some(before), None) => {
                given(dir, &before, "watchdog");
                None
            }
            (None, None) => None,
        };
        let hook = seen.hook_wait.clone().filter(|_| alive);
        hook.or_else(|| memory.needs_input.clone())
    }

    /// Send the notification for `wait` unless this wait was sent already or the agent's
    /// last one is younger than `input_cooldown`; the report lists what was sent.
    pub(super) fn notify_wait(
        &self,
        agent: &AgentSpec,
        wait: &NeedsInput,
        memory: &mut Memory,
        now: i64,
        report: &mut AgentReport,
    ) {
        if let Some(sent) = notify_once(self.spec, &self.fleet, agent, wait, memory, now) {
            report.notifications.extend(sent);
        }
    }
}

/// A wait this pass found, begun now: one `needs_input` op.
fn started(dir: &AgentDir, found: Waiting, now: i64) -> NeedsInput {
    let since = jiff::Timestamp::from_second(now)
        .map(state::rfc3339)
        .unwrap_or_else(|_| state::now_rfc3339());
    let wait = NeedsInput {
        reason: found.reason.to_string(),
        message: found.message,
        since,
        source: "watchdog".into(),
    };
    let _ = dir.record_op(
        Op::NeedsInput,
        json!({"reason": wait.reason, "message": wait.message, "source": "watchdog"}),
    );
    wait
}

fn given(dir: &AgentDir, wait: &NeedsInput, by: &str) {
    let _ = dir.record_op(
        Op::InputGiven,
        json!({"reason": wait.reason, "since": wait.since, "by": by}),
    );
}

/// Notify about `wait` once: `None` when it was notified already or the cooldown holds it
/// back (a later pass sends it then). Records the `needs_input` critical event with what was
/// sent.
fn notify_once(
    spec: &Spec,
    fleet: &FleetDir,
    agent: &AgentSpec,
    wait: &NeedsInput,
    memory: &mut Memory,
    now: i64,
) -> Option<Vec<Sent>> {
    let key = wait.key();
    if memory.input_notified.as_deref() == Some(key.as_str()) {
        return None;
    }
    let cooldown = spec.notify.input_cooldown.as_secs() as i64;
    if memory.input_notified_at.is_some_and(|t| now - t < cooldown) {
        return None;
    }
    let sent = if spec.notify.is_empty() {
        Vec::new()
    } else {
        Notifier::new(&spec.notify, fleet)
            .only(agent.notify.as_deref())
            .send(&message(spec, agent, wait))
    };
    memory.input_notified = Some(key);
    memory.input_notified_at = Some(now);
    let event = json!({
        "ts": state::now_rfc3339(), "event": "needs_input", "agent": agent.name,
        "project": spec.fleet.name, "reason": wait.reason, "action_taken": "notified",
        "details": {"message": wait.message, "since": wait.since, "source": wait.source,
                    "notifications": sent},
    });
    if let Err(e) = fleet.append_event(&event) {
        tracing::warn!(agent = %agent.name, "cannot record the needs_input event: {e}");
    }
    Some(sent)
}

/// The message every channel gets.
fn message(spec: &Spec, agent: &AgentSpec, wait: &NeedsInput) -> Message {
    let what = match wait.reason.as_str() {
        "permission_prompt" => "asks for permission",
        "idle_prompt" => "waits for input at its prompt",
        "elicitation_dialog" => "asks a question",
        "elicitation_url_dialog" => "asks you to open a link",
        "worker_permission_prompt" => "asks for permission for a worker",
        "agent_needs_input" => "waits for an answer",
        "approval_prompt" => "waits for an approval",
        "idle_with_open_loops" => "is idle with open loops",
        _ => "waits for a person",
    };
    let said = if wait.message.is_empty() {
        String::new()
    } else {
        format!(" ({})", wait.message)
    };
    Message {
        kind: Kind::NeedsInput,
        agent: agent.name.clone(),
        fleet: spec.fleet.name.clone(),
        title: format!("needs a human: {what}"),
        body: format!(
            "Agent `{}` of fleet `{}` {what}{said}, since {}.\n\n\
             Answer it in its pane: `phoenix attach {}`.",
            agent.name, spec.fleet.name, wait.since, agent.name
        ),
    }
}

/// The wrapper's call when the notification hook said its CLI waits: notify now (after any
/// running pass, whose memory this shares), without waiting for the next pass.
pub fn notify_now(spec: &Spec, agent: &str) -> Option<Vec<Sent>> {
    let agent = spec.agent(agent)?;
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(&agent.name);
    let _lock = FleetLock::acquire_file(
        &fleet,
        WATCHDOG_LOCK,
        "needs-input notification",
        LOCK_WAIT,
        |_| {},
    )
    .ok();
    let wait = dir.read_state().ok()?.needs_input?;
    let mut memory = Memory::load(&dir);
    let before = memory.clone();
    let now = jiff::Timestamp::now().as_second();
    let sent = notify_once(spec, &fleet, agent, &wait, &mut memory, now);
    if let Err(e) = memory.save_if_changed(&before, &dir) {
        tracing::warn!(agent = %agent.name, "cannot save the watchdog memory: {e}");
    }
    sent
}
