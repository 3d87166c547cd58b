//! What the wrapper pastes into the agent's pane: the startup context of a CLI without hooks,
//! the request to continue after an interrupted turn, and the inbox's messages at a turn
//! boundary.

use super::*;

/// How long the continue prompt waits for a CLI's ready text (`AgentCli::ready_text`):
/// Copilot CLI took 12 s to start on a loaded machine.
const READY_TEXT_WAIT: Duration = Duration::from_secs(60);

impl Wrapper {
    /// A CLI without a session-start hook gets its startup context (latest handoff, ledger,
    /// open loops) pasted into its pane once it is up and quiet. A custom CLI that does call
    /// the hook (its session_start op appears) is left to the hook. On a thread of its own:
    /// the wrapper keeps supervising meanwhile. `since`: the length of ops.jsonl when the run
    /// started; `pid`: the agent CLI's.
    pub(super) fn startup_context_without_hooks(&self, since: u64, pid: u32) {
        let Some(pane) = self.pane.clone() else {
            return;
        };
        if self.agent.cli.adapter().has_session_start_hook() {
            return;
        }
        let (spec, dir) = (self.spec.clone(), self.dir.clone());
        std::thread::spawn(move || {
            let hooked = || {
                state::op::since(&dir.file(state::OPS_LOG), since)
                    .iter()
                    .any(|o| matches!(o.op, Op::SessionStart(_)))
            };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if hooked() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            // Ended meanwhile: its startup text would be read by whatever reads next.
            if !crate::restart::process_alive(pid) {
                return;
            }
            let Some(startup) = crate::continuity::startup_text(&spec, &dir) else {
                return;
            };
            let runtime = world::runtime_for(&spec);
            match crate::continuity::inject::deliver(
                &*runtime,
                &pane,
                &dir,
                &startup.text,
                &crate::continuity::inject::Options {
                    for_pid: Some(pid),
                    ..Default::default()
                },
            ) {
                Ok(r) => {
                    let _ = dir.record_op(
                        Op::StartupContextInjected,
                        json!({"chars": startup.text.len(), "confirmed_by": r.confirmed_by}),
                    );
                    startup.delivered(&dir, r.confirmed_by);
                }
                Err(e) => {
                    let typed = matches!(
                        e,
                        crate::continuity::inject::InjectError::Unconfirmed { .. }
                    );
                    let _ = dir.record_op(
                        Op::StartupContextFailed,
                        json!({"error": e.to_string(), "typed": typed}),
                    );
                    // Typed once: the messages it carried are in the agent's input already,
                    // and must not come again with the next delivery.
                    if typed {
                        startup.delivered(&dir, crate::continuity::inject::TYPED_UNCONFIRMED);
                    }
                }
            }
        });
    }

    /// A hooked CLI started again after an interruption has its context (from the
    /// session-start hook) but nobody to type the next prompt: phoenix types the agent's
    /// `continue_prompt` once the CLI waits for input, and confirms it was submitted. On a
    /// thread of its own: the wrapper keeps supervising meanwhile. `since`: the length of
    /// ops.jsonl when the run started; `pid`: the agent CLI's.
    pub(super) fn continue_after_interruption(&mut self, since: u64, pid: u32) {
        let Some(why) = self.interrupted_by.take() else {
            return;
        };
        let prompt = self.agent.restart.continue_prompt.clone();
        let (Some(pane), false, false) = (
            self.pane.clone(),
            prompt.is_empty(),
            !self.agent.cli.adapter().has_session_start_hook(),
        ) else {
            return;
        };
        let (spec, dir) = (self.spec.clone(), self.dir.clone());
        // A CLI that runs its SessionStart hook only with the first prompt (Codex): waiting for
        // it would only hold the prompt that triggers it.
        let ready_after_hook = self.agent.cli.adapter().ready_after_session_start();
        let ready_text = self.agent.cli.adapter().ready_text();
        let wait = if self.agent.cli.adapter().session_start_at_launch() {
            Duration::from_secs(10)
        } else {
            Duration::ZERO
        };
        std::thread::spawn(move || {
            // After the session-start hook, so the context is in before the prompt.
            let deadline = Instant::now() + wait;
            let hooked = || {
                state::op::since(&dir.file(state::OPS_LOG), since)
                    .iter()
                    .any(|o| matches!(o.op, Op::SessionStart(_)))
            };
            while Instant::now() < deadline && !hooked() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let runtime = world::runtime_for(&spec);
            // A CLI whose still screen does not say it takes input says so in its footer.
            if let Some(text) = ready_text {
                let deadline = Instant::now() + READY_TEXT_WAIT;
                while Instant::now() < deadline
                    && !runtime.capture(&pane, 0).is_ok_and(|s| s.contains(text))
                {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            // Claude Code has loaded its session when the hook fires and draws its input box
            // next, so a short still screen says it waits. Gemini CLI runs the hook before it
            // loads the resumed history (a still screen then may be a busy one), and without
            // the hook nothing says the CLI got that far: a screen still for longer is the sign.
            let quiet = if ready_after_hook && hooked() {
                250
            } else {
                1500
            };
            // Every hooked CLI runs its prompt hook on a submitted prompt: only that confirms
            // it, and an Enter the CLI swallowed while it settled is pressed again soon.
            let opts = crate::continuity::inject::Options {
                quiet: Duration::from_millis(quiet),
                confirm_timeout: Duration::from_secs(1),
                attempts: 6,
                hook_only: true,
                for_pid: Some(pid),
                ..Default::default()
            };
            match crate::continuity::inject::deliver(&*runtime, &pane, &dir, &prompt, &opts) {
                Ok(r) => {
                    let _ = dir.record_op(
                        Op::ContinuePromptSent,
                        json!({"after": why, "confirmed_by": r.confirmed_by, "attempts": r.attempts}),
                    );
                }
                Err(e) => {
                    let _ = dir.record_op(
                        Op::ContinuePromptFailed,
                        json!({"after": why, "error": e.to_string()}),
                    );
                }
            }
        });
    }

    /// Is the agent between turns, where messages may be given? An urgent message does not
    /// wait. A hooked CLI is between turns when its Stop hook left it `idle` (not while it
    /// works, recovers or failed). A custom CLI that calls the hooks all the same says so too
    /// (its prompt hook makes it `working` until its Stop hook); one that calls none is never
    /// `working`, and gets them when its screen is still, which the delivery waits for.
    /// Called only with messages pending: one read of state.json.
    pub(super) fn at_turn_boundary(&self) -> bool {
        if crate::state::inbox::urgent_pending(&self.dir) {
            return true;
        }
        let status = self.dir.read_state().map(|s| s.status).ok();
        if self.agent.cli.adapter().has_session_start_hook() {
            status == Some(state::Status::Idle)
        } else {
            status != Some(state::Status::Working)
        }
    }

    /// Give the pending messages to the agent as one block, on a thread of its own (the
    /// wrapper keeps supervising meanwhile); a failure is recorded and tried again later.
    pub(super) fn deliver_messages(&self, pid: u32) -> Option<std::thread::JoinHandle<()>> {
        let pane = self.pane.clone()?;
        let (spec, dir) = (self.spec.clone(), self.dir.clone());
        let hooked = self.agent.cli.adapter().has_session_start_hook();
        Some(std::thread::spawn(move || {
            let runtime = world::runtime_for(&spec);
            if let Err(e) = crate::continuity::messages::deliver(
                &spec,
                &*runtime,
                &pane,
                &dir,
                hooked,
                Some(pid),
            ) {
                let _ = dir.record_op(Op::MessagesDeliveryFailed, json!({"error": e}));
            }
        }))
    }
}
