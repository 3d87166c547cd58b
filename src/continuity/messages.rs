//! Messages between agents: `phoenix send`, the tap's `->continuity:send`, and the API put a
//! message in the recipient's inbox (`state::inbox`); it is given to the recipient at its next
//! turn boundary as one block (`templates/messages.md.j2`), and marked delivered only once the
//! delivery is confirmed.
//!
//! Where a turn boundary is seen: the recipient's wrapper pastes the block when the agent sits
//! idle at its prompt (a hooked CLI's Stop hook left it `idle`; a CLI without hooks has a
//! still screen), confirmed by the prompt hook (or the input line clearing, without hooks); a
//! prompt typed meanwhile takes the block along through the prompt hook; a new session gets
//! them in its startup context. An urgent message interrupts the turn at once (Escape).

use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;
use serde_json::json;

use crate::render::Templates;
use crate::spec::Spec;
use crate::state::inbox::{self, Message, SendError};
use crate::state::{AgentDir, FleetDir, Op};
use crate::world::Runtime;

/// One delivery's text at most: the rest waits for the next boundary.
const MAX_BLOCK_CHARS: usize = 12_000;
/// The messages a startup context or a prompt takes at most (their share of the CLI's limit
/// on hook context); the rest follow at the next boundary.
pub const MAX_CONTEXT_CHARS: usize = 4_000;
/// Held while a delivery is under way, so that the wrapper and a prompt hook never both give
/// the same messages.
const DELIVERY_LOCK: &str = ".inbox-delivery.lock";

/// Why `phoenix send` did not take a message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no agent `{to}` in `{file}` ({hint})")]
    UnknownAgent {
        to: String,
        file: String,
        hint: String,
    },
    #[error("cannot send to agent `{to}`: {source}")]
    Inbox {
        to: String,
        #[source]
        source: SendError,
    },
}

impl From<Error> for crate::error::Error {
    fn from(e: Error) -> Self {
        crate::error::Error::Layer(Box::new(e))
    }
}

/// Put `text` from `from` in `to`'s inbox. The recipient must be declared in the spec.
pub fn send(spec: &Spec, to: &str, from: &str, text: &str, urgent: bool) -> Result<Message, Error> {
    if spec.agent(to).is_none() {
        return Err(Error::UnknownAgent {
            to: to.to_string(),
            file: spec.file.display().to_string(),
            hint: spec.declared_hint(to),
        });
    }
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(to);
    // The paste rule, applied once on the way in: the inbox keeps only inert text.
    let text = crate::world::inert::keyboard_text(text);
    let message = inbox::send(&dir, from, &text, urgent).map_err(|source| Error::Inbox {
        to: to.to_string(),
        source,
    })?;
    let _ = dir.record_op(
        Op::MessageReceived,
        json!({"id": message.id, "from": message.from, "chars": message.text.len(),
               "urgent": urgent}),
    );
    Ok(message)
}

/// What the block template is given.
#[derive(Serialize)]
struct BlockContext<'a> {
    agent: &'a str,
    messages: &'a [Message],
    left: usize,
}

/// The oldest pending messages that fit in `max_chars` (always at least one), and how many
/// are left after them.
pub fn first_that_fit(pending: Vec<Message>, max_chars: usize) -> (Vec<Message>, usize) {
    let total = pending.len();
    let mut used = 0;
    let taken: Vec<Message> = pending
        .into_iter()
        .enumerate()
        .take_while(|(i, m)| {
            used += m.text.chars().count() + 80;
            *i == 0 || used <= max_chars
        })
        .map(|(_, m)| m)
        .collect();
    let left = total - taken.len();
    (taken, left)
}

/// The block `messages` are given as (`templates/messages.md.j2`), sanitized for the paste.
pub fn block(templates: &Templates, agent: &str, messages: &[Message], left: usize) -> String {
    let ctx = BlockContext {
        agent,
        messages,
        left,
    };
    let (text, _override_error) = templates.render_or_builtin("messages.md.j2", &ctx);
    let text = text.unwrap_or_else(|_| {
        // Even a broken built-in must not keep messages from their recipient.
        let mut t = format!("[phoenix] messages for agent `{agent}`:\n");
        for m in messages {
            t.push_str(&format!(
                "--- from {} at {} ---\n{}\n",
                m.from, m.sent_at, m.text
            ));
        }
        t
    });
    crate::world::inert::keyboard_text(text.trim())
}

/// The delivery lock, if nobody else holds it (a delivery under way elsewhere: `None`).
fn try_delivery_lock(dir: &AgentDir) -> Option<Flock<std::fs::File>> {
    let file = crate::state::file::open_lock(&dir.file(DELIVERY_LOCK)).ok()?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()
}

/// What a delivery gave.
#[derive(Debug, Clone, Serialize)]
pub struct Delivered {
    pub ids: Vec<String>,
    pub confirmed_by: &'static str,
    pub urgent: bool,
}

/// Paste the pending messages into `pane` as one block and mark them delivered once the
/// paste is confirmed (`hooked`: only the prompt hook confirms). A block pasted that nothing
/// confirmed is marked delivered as `typed, unconfirmed` (and the failure recorded): it is
/// never pasted twice. An urgent message interrupts the agent first. `Ok(None)`: nothing
/// pending, or a delivery under way elsewhere. `for_pid`: the agent process they are for;
/// nothing is pasted once it has ended.
pub fn deliver(
    spec: &Spec,
    runtime: &dyn Runtime,
    pane: &str,
    dir: &AgentDir,
    hooked: bool,
    for_pid: Option<u32>,
) -> Result<Option<Delivered>, String> {
    let Some(_lock) = try_delivery_lock(dir) else {
        return Ok(None);
    };
    let pending = inbox::pending(dir);
    if pending.is_empty() {
        return Ok(None);
    }
    let urgent = pending.iter().any(|m| m.urgent);
    let (messages, left) = first_that_fit(pending, MAX_BLOCK_CHARS);
    let text = block(&Templates::for_spec(spec), &dir.name, &messages, left);
    if urgent {
        runtime
            .interrupt(pane)
            .map_err(|e| format!("cannot interrupt pane {pane}: {e}"))?;
    }
    let text = after_interruption(text, urgent && hooked);

    let opts = super::inject::Options {
        quiet: Duration::from_millis(if urgent { 400 } else { 800 }),
        confirm_timeout: Duration::from_secs(if hooked { 1 } else { 3 }),
        attempts: if hooked { 6 } else { 3 },
        hook_only: hooked,
        for_pid,
        ..Default::default()
    };
    let confirmed_by = match super::inject::deliver(runtime, pane, dir, &text, &opts) {
        Ok(report) => report.confirmed_by,
        // Typed once: a block pasted without a confirmation is in the agent's input, and
        // pasting it again at the next boundary would give every message twice.
        Err(e @ super::inject::InjectError::Unconfirmed { .. }) => {
            let _ = dir.record_op(
                Op::MessagesDeliveryFailed,
                json!({"ids": messages.iter().map(|m| &m.id).collect::<Vec<_>>(),
                       "error": e.to_string(), "typed": true}),
            );
            super::inject::TYPED_UNCONFIRMED
        }
        Err(e) => return Err(e.to_string()),
    };
    let ids: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
    mark(dir, &ids, confirmed_by, urgent, None);
    Ok(Some(Delivered {
        ids,
        confirmed_by,
        urgent,
    }))
}

/// The block as pasted after an interruption: a CLI interrupted before its answer came puts
/// the prompt it was on back in its input line (Claude Code does), and the block must not be
/// glued to it. It starts after an empty line, inside the paste (a hooked CLI takes a paste
/// as text: its line ends are no Enter).
fn after_interruption(text: String, interrupted: bool) -> String {
    if interrupted {
        format!("\n\n{text}")
    } else {
        text
    }
}

/// Mark `ids` delivered and record it; a failure to mark is recorded (they come again).
/// `handed_to`: the session whose startup context carried them (see [`reopen_unconfirmed`]).
fn mark(dir: &AgentDir, ids: &[String], confirmed_by: &str, urgent: bool, handed_to: Option<&str>) {
    let mut fields = json!({"ids": ids, "count": ids.len(), "confirmed_by": confirmed_by,
                            "urgent": urgent});
    if let Some(session) = handed_to {
        fields["session_id"] = json!(session);
    }
    match inbox::mark_delivered(dir, ids, confirmed_by, handed_to) {
        Ok(()) => {
            let _ = dir.record_op(Op::MessagesDelivered, fields);
        }
        Err(e) => {
            let _ = dir.record_op(
                Op::MessagesDeliveryFailed,
                json!({"ids": ids, "error": format!("delivered, but not marked: {e}")}),
            );
        }
    }
}

/// The pending messages for text a hook hands the CLI (the startup context, a prompt's
/// added context), and a way to mark them delivered once it is handed. `None` with nothing
/// pending (one `stat`) or a paste of them under way.
pub struct ForContext {
    pub messages: Vec<Message>,
    pub left: usize,
    _lock: Flock<std::fs::File>,
}

impl ForContext {
    pub fn take(dir: &AgentDir) -> Option<ForContext> {
        if !inbox::has_pending(dir) {
            return None;
        }
        let lock = try_delivery_lock(dir)?;
        let pending = inbox::pending(dir);
        if pending.is_empty() {
            return None;
        }
        let (messages, left) = first_that_fit(pending, MAX_CONTEXT_CHARS);
        Some(ForContext {
            messages,
            left,
            _lock: lock,
        })
    }

    /// The block these messages make.
    pub fn text(&self, spec: &Spec, agent: &str) -> String {
        block(&Templates::for_spec(spec), agent, &self.messages, self.left)
    }

    /// They were handed over (`how`: `session start`, `prompt hook`).
    pub fn delivered(self, dir: &AgentDir, how: &str) {
        self.handed(dir, how, None);
    }

    /// They were handed to session `session` in its startup context: delivered once its first
    /// prompt confirms them ([`confirm_handed`]), pending again if another session starts
    /// before that ([`reopen_unconfirmed`]). Without a session id they count as delivered.
    pub fn handed(self, dir: &AgentDir, how: &str, session: Option<&str>) {
        let ids: Vec<String> = self.messages.iter().map(|m| m.id.clone()).collect();
        let urgent = self.messages.iter().any(|m| m.urgent);
        mark(dir, &ids, how, urgent, session);
    }
}

/// A new session `session` starts: messages an earlier session was handed at its start but
/// never confirmed with a prompt are pending again, for this one. That earlier session ended
/// before it showed them to the model (stopped or killed while starting), or its CLI
/// superseded it (Claude Code's resume announces a session it then drops). Recorded.
pub fn reopen_unconfirmed(dir: &AgentDir, session: Option<&str>) {
    match inbox::reopen_handed(dir, session) {
        Ok(ids) if ids.is_empty() => {}
        Ok(ids) => {
            let _ = dir.record_op(
                Op::MessagesReopened,
                json!({"ids": ids, "count": ids.len(), "session_id": session,
                       "why": "the session whose startup context carried them ended before its first prompt"}),
            );
        }
        Err(e) => {
            let _ = dir.record_op(
                Op::MessagesDeliveryFailed,
                json!({"error": format!("cannot reopen messages no session confirmed: {e}")}),
            );
        }
    }
}

/// Session `session` had its first prompt: the messages its startup context carried reached
/// the model. An inbox with nothing waiting costs one `stat`.
pub fn confirm_handed(dir: &AgentDir, session: &str) {
    if let Err(e) = inbox::confirm_handed(dir, session) {
        let _ = dir.record_op(
            Op::MessagesDeliveryFailed,
            json!({"error": format!("cannot confirm messages handed at session start: {e}")}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(n: usize, text: &str) -> Message {
        Message {
            id: format!("m-{n}"),
            from: "alice".into(),
            sent_at: "2026-11-28T00:00:00Z".into(),
            text: text.into(),
            urgent: n == 2,
            delivered_at: None,
            confirmed_by: None,
            handed_to: None,
        }
    }

    #[test]
    fn the_block_names_each_sender_and_time_and_starts_as_phoenix_text() {
        let messages = [message(1, "first"), message(2, "second\nline")];
        let text = block(&Templates::default(), "bob", &messages, 3);
        assert!(text.starts_with("[phoenix] 2 messages for agent `bob` (urgent):"));
        assert!(text.contains("--- from alice at 2026-11-28T00:00:00Z ---\nfirst\n"));
        assert!(text.contains("(urgent) ---\nsecond\nline\n"), "{text}");
        assert!(
            text.contains("--- end of messages (3 more waiting) ---"),
            "{text}"
        );
    }

    #[test]
    fn an_urgent_block_starts_apart_from_what_the_interrupted_cli_left_in_its_input() {
        let text = block(&Templates::default(), "bob", &[message(2, "stop")], 0);
        let pasted = after_interruption(text.clone(), true);
        let input = format!("run the slow job{pasted}");
        assert!(
            input.starts_with("run the slow job\n\n[phoenix] 1 message"),
            "{input}"
        );
        assert_eq!(after_interruption(text.clone(), false), text);
    }

    #[test]
    fn a_block_takes_what_fits_but_never_nothing() {
        let big = "x".repeat(MAX_CONTEXT_CHARS);
        let (taken, left) = first_that_fit(
            vec![message(1, &big), message(2, "a"), message(3, "b")],
            MAX_CONTEXT_CHARS,
        );
        assert_eq!((taken.len(), left), (1, 2));
        let (taken, left) =
            first_that_fit(vec![message(1, "a"), message(2, "b")], MAX_CONTEXT_CHARS);
        assert_eq!((taken.len(), left), (2, 0));
    }
}
