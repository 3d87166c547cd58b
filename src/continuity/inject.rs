//! Injection into a running agent: the text is pasted into the pane as a bracketed paste when
//! the agent is ready for input, and Enter submits it. Delivery is confirmed — the CLI's
//! prompt-submit hook fires, or the text leaves the input line — and Enter is sent again a
//! bounded number of times if it was swallowed. Nothing goes through a shell, and the text is
//! sanitized by the runtime's paste (`world::inert::keyboard_text`): no escape sequence
//! reaches the pane.
//!
//! A text is typed once. Once pasted it is in the agent's input whatever the screen shows
//! next: a screen that looks the same after Enter as before (a REPL whose last line is `> `
//! either way) proves nothing either way, and pasting again would give the agent the text
//! twice. An unconfirmed paste is [`InjectError::Unconfirmed`], which callers treat as given
//! (marked, recorded as unconfirmed), never as a reason to paste again.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::spec::{AgentSpec, Spec};
use crate::state::Op;
use crate::state::{self, AgentDir, FleetDir};
use crate::world::{self, Runtime};

#[derive(Debug, Clone)]
pub struct Options {
    /// How long to wait for the agent to be ready (its screen still).
    pub ready_timeout: Duration,
    /// How long the screen must not change to count as ready.
    pub quiet: Duration,
    /// How long to wait for each confirmation.
    pub confirm_timeout: Duration,
    /// Enter presses at most (the first one included).
    pub attempts: u32,
    /// Only the CLI's prompt hook confirms delivery. A CLI still drawing its screen changes
    /// the line under the cursor without having taken the text (Claude Code just after a
    /// resume swallowed the Enter), so for a CLI that runs the hook a changed line is no proof.
    pub hook_only: bool,
    /// The process the text is for (the agent CLI a wrapper started). Once it has ended the
    /// text is not pasted: nothing would read it, and it would wait in the terminal's input
    /// for whatever reads next (the wrapper's safe-mode prompt, the next CLI) as if typed.
    pub for_pid: Option<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ready_timeout: Duration::from_secs(15),
            quiet: Duration::from_millis(600),
            confirm_timeout: Duration::from_secs(3),
            attempts: 3,
            hook_only: false,
            for_pid: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pane: String,
    /// Enter presses it took.
    pub attempts: u32,
    /// `prompt hook`, `input line cleared` or `screen changed`.
    pub confirmed_by: &'static str,
    pub waited_ms: u64,
}

/// Why an injection did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("cannot observe {location}: {source}")]
    Observe {
        location: String,
        #[source]
        source: world::RuntimeError,
    },
    #[error(
        "agent `{0}` is not running: nothing to inject into (start it with `phoenix apply`; a new session gets its latest handoff anyway)"
    )]
    NotRunning(String),
    /// The pane was there but the text was not pasted (busy agent, a tmux call failed).
    #[error("{0}")]
    Delivery(String),
    /// The text was pasted and Enter pressed, but nothing confirmed it was submitted. It is in
    /// the agent's input: pasting it again would type it twice.
    #[error(
        "the text was pasted into pane {pane} but nothing confirmed it was submitted after {attempts} Enter press(es); it is not pasted again (look at the pane: it may wait in the input line)"
    )]
    Unconfirmed { pane: String, attempts: u32 },
}

/// How a text pasted without a confirmation is marked where it counts as given.
pub const TYPED_UNCONFIRMED: &str = "typed, unconfirmed";

impl From<InjectError> for crate::error::Error {
    fn from(e: InjectError) -> Self {
        crate::error::Error::Layer(Box::new(e))
    }
}

/// Inject `text` into `agent`'s pane.
pub fn to_agent(spec: &Spec, agent: &AgentSpec, text: &str) -> Result<Report, InjectError> {
    let runtime = world::runtime_for(spec);
    let world = world::observe(spec, &*runtime).map_err(|source| InjectError::Observe {
        location: runtime.location(),
        source,
    })?;
    let pane = world
        .pane_of(&agent.name)
        .filter(|p| !p.dead && p.agent_process().is_some())
        .ok_or_else(|| InjectError::NotRunning(agent.name.clone()))?;
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(&agent.name);
    let report = deliver(&*runtime, &pane.id, &dir, text, &Options::default())?;
    let _ = dir.record_op(
        Op::ContextInjected,
        serde_json::json!({"chars": text.len(), "pane": report.pane, "attempts": report.attempts,
                           "confirmed_by": report.confirmed_by}),
    );
    Ok(report)
}

/// The text a handoff is given to a running agent as.
pub fn handoff_text(h: &super::Handoff) -> String {
    format!(
        "[phoenix] handoff {} ({}), for your context:\n{}",
        h.id,
        h.trigger.as_str(),
        h.body.trim()
    )
}

fn screen(runtime: &dyn Runtime, pane: &str) -> Result<String, String> {
    runtime
        .capture(pane, 30)
        .map(|s| s.trim_end().to_string())
        .map_err(|e| format!("cannot read pane {pane}: {e}"))
}

fn last_line(screen: &str) -> &str {
    screen
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

fn prompt_hook_since(dir: &AgentDir, offset: u64) -> bool {
    state::op::since(&dir.file(state::OPS_LOG), offset)
        .iter()
        .any(|o| matches!(o.op, state::Op::Prompt(_)))
}

/// How long a cleared input line waits for the prompt hook before it counts as the proof.
const HOOK_GRACE: Duration = Duration::from_millis(500);

/// Wait until ready, paste, press Enter, confirm; retry Enter if it was swallowed.
pub fn deliver(
    runtime: &dyn Runtime,
    pane: &str,
    dir: &AgentDir,
    text: &str,
    opts: &Options,
) -> Result<Report, InjectError> {
    try_deliver(runtime, pane, dir, text, opts)
}

/// [`deliver`]; a failure before the paste is said as one line.
fn try_deliver(
    runtime: &dyn Runtime,
    pane: &str,
    dir: &AgentDir,
    text: &str,
    opts: &Options,
) -> Result<Report, InjectError> {
    let not_pasted = InjectError::Delivery;
    let started = Instant::now();
    // Ready: the screen has stopped changing (the agent is waiting, not printing).
    let mut last = screen(runtime, pane).map_err(not_pasted)?;
    let mut still_since = Instant::now();
    // Several looks within `quiet`, so that a short one is not mostly one sleep.
    let look = (opts.quiet / 4).clamp(Duration::from_millis(50), Duration::from_millis(150));
    loop {
        std::thread::sleep(look);
        let now = screen(runtime, pane).map_err(not_pasted)?;
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= opts.quiet {
            break;
        }
        if started.elapsed() > opts.ready_timeout {
            return Err(not_pasted(format!(
                "pane {pane} kept changing for {}s: the agent is busy; try again when it waits for input",
                opts.ready_timeout.as_secs()
            )));
        }
    }
    let ops_offset = std::fs::metadata(dir.file(state::OPS_LOG))
        .map(|m| m.len())
        .unwrap_or(0);
    let text = text.trim_end();
    // The tap must know the echo of this text for what it is, not the agent speaking.
    if let Err(e) = super::tap::note_injected(dir, text) {
        let _ = dir.record_op(
            Op::TapNoteFailed,
            serde_json::json!({"error": e.to_string()}),
        );
    }
    if let Some(pid) = opts.for_pid
        && !crate::process::alive(pid)
    {
        return Err(InjectError::Delivery(format!(
            "the agent (pid {pid}) ended before the text was given: not pasted into pane {pane}"
        )));
    }
    runtime
        .paste(pane, text)
        .map_err(|e| not_pasted(format!("cannot paste into pane {pane}: {e}")))?;
    // From here on the text is in the agent's input: whatever goes wrong, it is not pasted
    // again (`Unconfirmed`), only Enter is pressed again.
    let unconfirmed = |attempts| InjectError::Unconfirmed {
        pane: pane.to_string(),
        attempts,
    };
    let confirmed = |attempts, confirmed_by| Report {
        pane: pane.to_string(),
        attempts,
        confirmed_by,
        waited_ms: started.elapsed().as_millis() as u64,
    };
    for attempt in 1..=opts.attempts {
        // Give the paste a moment to land before Enter, or a fast Enter is part of it.
        std::thread::sleep(Duration::from_millis(150));
        let before = screen(runtime, pane).map_err(|_| unconfirmed(attempt - 1))?;
        runtime
            .press_enter(pane)
            .map_err(|_| unconfirmed(attempt - 1))?;
        let deadline = Instant::now() + opts.confirm_timeout;
        // When the line under the cursor changed, and when the screen did at all.
        let mut cleared_at: Option<Instant> = None;
        let mut changed_at: Option<Instant> = None;
        while Instant::now() < deadline {
            if prompt_hook_since(dir, ops_offset) {
                return Ok(confirmed(attempt, "prompt hook"));
            }
            let now = screen(runtime, pane).map_err(|_| unconfirmed(attempt))?;
            if !opts.hook_only && now != before {
                changed_at.get_or_insert_with(Instant::now);
                // Submitted text leaves the input line: the line the cursor was on changes.
                // A swallowed Enter changes nothing, and is pressed again.
                if cleared_at.is_none() && last_line(&now) != last_line(&before) {
                    cleared_at = Some(Instant::now());
                }
            }
            // The prompt hook is the stronger proof: give it a moment to come first.
            if cleared_at.is_some_and(|t| t.elapsed() >= HOOK_GRACE) {
                return Ok(confirmed(attempt, "input line cleared"));
            }
            // The screen moved on after Enter, though its last line reads as before (a REPL
            // that shows its `> ` again): the Enter was taken. Another one would submit an
            // empty line, and the paste is never repeated.
            if cleared_at.is_none() && changed_at.is_some_and(|t| t.elapsed() >= HOOK_GRACE) {
                return Ok(confirmed(attempt, "screen changed"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Err(unconfirmed(opts.attempts))
}
