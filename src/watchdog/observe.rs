//! What the watchdog reads about one agent: the process tree from the world observation, and
//! state.json, tool_use.jsonl, ops.jsonl, the transcript and the pane's screen. Read-only: it
//! never writes to these files, and a missing or corrupt one only narrows what can be checked.
//! The one thing it writes is the agent's usage ledger (`crate::usage`), brought up to date
//! from the session files for the spend and budget checks.

use std::path::Path;

use serde_json::Value;

use super::health::{self, Call, Inputs, Process};
use crate::spec::AgentSpec;
use crate::state::bounded::{self, Links};
use crate::state::jsonl::tail_jsonl;
use crate::state::{self, AgentDir, AgentState, Loaded, Op};
use crate::world::{PaneObs, World};

/// Tool calls kept for the repetition and cascade checks.
const RECENT_CALLS: usize = 64;
/// Lines of the pane's history (above its visible screen) read for the screen checks: none.
/// A CLI draws its dialogs on the visible screen; the scrollback holds what scrolled by (the
/// model's answers, tool output, a resumed session's replay), never a dialog.
pub const SCREEN_LINES: usize = 0;
/// How much of the transcript's end is read for the words the model and its tools wrote,
/// which a dialog on screen never is.
const OWN_WORDS_TAIL_BYTES: u64 = 256 * 1024;
/// How much of a transcript's end is read for token use.
pub const TRANSCRIPT_TAIL_BYTES: u64 = 32 * 1024 * 1024;
/// How much of a transcript is read for `tokens_used`.
const TRANSCRIPT_BYTES: u64 = 256 * 1024 * 1024;

/// What a pass asks of the agents' usage ledgers: bring each up to date, price today's tokens
/// (the budget check), and give the current session's tokens to the spend check when
/// `max_tokens` is set.
#[derive(Debug, Clone)]
pub struct UsageCheck {
    pub prices: crate::usage::Prices,
    pub max_tokens: bool,
}

/// One agent as observed, or why it was not checked.
pub struct Observed {
    /// The agent's name: its wrapper's start banner marks where its session's screen begins.
    pub agent: String,
    /// The agent's CLI: where it draws its dialogs.
    pub cli: crate::spec::Cli,
    /// The session's transcript, if the hooks recorded one: the model's and the tools' words.
    pub transcript: Option<std::path::PathBuf>,
    pub inputs: Inputs,
    /// Not checked at all (disabled, stopped on purpose, in safe mode, being restarted).
    pub skip: Option<String>,
    pub task: Option<String>,
    pub pane: Option<String>,
    /// The pane whose screen the screen check needs.
    pub wants_screen: Option<String>,
    pub screen_hash: Option<String>,
    /// The screen's digest without its clocks (`without_clocks`): what moving means.
    pub screen_moved_hash: Option<String>,
    /// Which failed turn the status `failed` is about (when it was recorded, with the error):
    /// a turn already handled, by the wrapper or an earlier pass, is not handled again.
    pub failed_turn: Option<String>,
    /// What the CLI said it waits for (state.json's `needs_input`, from its hook).
    pub hook_wait: Option<crate::state::NeedsInput>,
    /// Open loops in state.json.
    pub open_loops: usize,
}

impl Observed {
    /// Add the pane's screen, compared with the one of the previous pass: a different one is
    /// a sign of life now (a spinner, a retry countdown, streamed text), the same one is stuck.
    /// Without a previous screen nothing is concluded either way.
    pub fn with_screen(&mut self, text: String, previous: &super::Memory) {
        // What an earlier session left in the scrollback (its error, its retry banner) says
        // nothing about this one.
        let text = crate::clinic::triage::this_session(&text, &self.agent).to_string();
        let hash = digest(&text);
        self.inputs.screen_unchanged = previous.screen_hash.as_deref() == Some(hash.as_str());
        let moved = digest(&without_clocks(&text));
        if previous
            .screen_moved_hash
            .as_ref()
            .is_some_and(|p| *p != moved)
        {
            self.inputs.screen_changed_at = Some(self.inputs.now);
        }
        self.inputs.dialog = self.dialog_on(&text);
        self.inputs.screen = Some(text);
        self.screen_hash = Some(hash);
        self.screen_moved_hash = Some(moved);
    }

    /// The CLI's own dialog on `screen`, if one can be there: a turn runs (or no hook ever
    /// said), the screen stays put (a verdict needs that anyway, and the transcript is read
    /// only then), and its lines are not the transcript's words.
    fn dialog_on(&self, screen: &str) -> Option<String> {
        use super::dialog::{self, Turn};
        let turn = Turn::of_inputs(&self.inputs);
        if turn == Turn::Ended || !self.inputs.screen_unchanged {
            return None;
        }
        let cli = self.cli.adapter();
        dialog::region(screen, cli).first()?;
        let words = self
            .transcript
            .as_deref()
            .and_then(|p| bounded::read_tail(p, OWN_WORDS_TAIL_BYTES, Links::Follow).ok())
            .map(|tail| dialog::transcript_words(&tail.lines_text()))
            .unwrap_or_default();
        dialog::dialog(screen, turn, cli, &words)
    }
}

fn seconds(ts: &str) -> Option<i64> {
    millis(ts).map(|ms| ms.div_euclid(1000))
}

fn millis(ts: &str) -> Option<i64> {
    ts.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// Ops that begin a turn: a prompt, a session or agent start. The calls made since the latest
/// one are the current turn's, also once the turn ended.
fn turn_start(op: &Op) -> bool {
    matches!(op, Op::Prompt(_) | Op::SessionStart(_) | Op::AgentStart(_))
}

/// Ops that begin or end a turn: the agent has been working since the latest one.
fn turn_boundary(op: &Op) -> bool {
    turn_start(op)
        || matches!(
            op,
            Op::TurnComplete(_) | Op::TurnFailed(_) | Op::SessionEnd(_)
        )
}

/// Everything the checks need to know about one agent, or why it is not checked at all.
pub fn observe(
    agent: &AgentSpec,
    world: &World,
    dir: &AgentDir,
    previous: &super::Memory,
    usage: Option<&UsageCheck>,
    now: i64,
) -> Observed {
    let pane = world.pane_of(&agent.name);
    let mut observed = Observed {
        agent: agent.name.clone(),
        cli: agent.cli,
        transcript: None,
        inputs: Inputs {
            now,
            screen_changed_at: previous.screen_changed_at,
            ..Inputs::default()
        },
        skip: not_checked(agent, pane, dir),
        task: None,
        pane: pane.map(|p| p.id.clone()),
        wants_screen: None,
        screen_hash: None,
        screen_moved_hash: None,
        failed_turn: None,
        hook_wait: None,
        open_loops: 0,
    };
    if observed.skip.is_some() {
        return observed;
    }
    observed.inputs.process = Some(process(pane, world));
    let state = read_state(dir, &mut observed.inputs.notes);
    let state = state.as_ref();
    let transcript = state
        .and_then(|s| s.transcript_path.as_deref())
        .map(Path::new);
    observed.read_status(state);
    observed.transcript = transcript.map(Path::to_path_buf);
    let ops = state::op::tail(&dir.file(state::OPS_LOG));
    if let Some(path) = transcript {
        observed.read_failed_turn_in(agent, path, &ops);
    }
    let inputs = &mut observed.inputs;
    let prompted = state.and_then(|s| s.turn_started.as_deref());
    inputs.working_since = latest_of(&ops, turn_boundary, prompted).map(|ms| ms.div_euclid(1000));
    let turn_started_ms = latest_of(&ops, turn_start, prompted);
    read_tool_calls(&dir.file(state::TOOL_USE), turn_started_ms, inputs);
    inputs.tool_running_since = tool_running_since(&dir.file(state::IN_FLIGHT), turn_started_ms);

    // The transcript moves while the model works without calling tools (its messages, and
    // retry records where the CLI writes them): one stat, and its tail only while working.
    if inputs.status.as_deref() == Some("working")
        && let Some(path) = transcript
    {
        (inputs.transcript_written, inputs.retry_at) = transcript_life(path);
    }
    if let Some(check) = usage {
        read_usage(agent, dir, transcript, check, inputs);
    }

    // The screen is read only when no tool call happened since the previous pass: a wedged
    // screen makes no progress, and a busy fleet costs no screen reads. The caller reads
    // every wanted screen in one runtime call and passes it to `with_screen`.
    let progressed = previous.tool_count != Some(inputs.tool_count)
        || previous.last_tool_call != inputs.last_tool_call;
    observed.wants_screen = pane
        .filter(|p| !p.dead && !progressed)
        .map(|p| p.id.clone());
    observed
}

/// Why the agent is not checked at all: disabled, never started, stopped on purpose, in safe
/// mode, or being restarted by its wrapper.
fn not_checked(agent: &AgentSpec, pane: Option<&PaneObs>, dir: &AgentDir) -> Option<String> {
    let quarantined = crate::recovery::record::load(dir).safe_mode.is_some();
    // Starting a fleet is `apply`'s decision (or `phoenix run`'s), never a watchdog pass's:
    // an agent phoenix never started has nothing to revive.
    let never_started = !dir.file(state::STARTED_SPEC).exists();
    let phase = pane.and_then(|p| p.phase.as_deref());
    if !agent.enabled {
        Some("disabled in phoenix.toml".into())
    } else if never_started && pane.is_none() {
        Some("never started (`phoenix apply` starts it)".into())
    } else if dir.has_marker(state::STOPPED) {
        Some(format!(
            "stopped with `phoenix stop` (`phoenix start {}` starts it)",
            agent.name
        ))
    } else if dir.has_marker(state::CLEAN_EXIT) {
        Some("stopped on purpose (.clean-exit)".into())
    } else if quarantined || phase == Some("safe") {
        Some("in safe mode, waiting for a person".into())
    } else if phase == Some("cooldown") {
        Some("its wrapper is restarting it".into())
    } else {
        // One owner of a restart: a pane without its CLI is that restart under way.
        state::claim::current(dir).map(|claim| format!("{}: left to it", claim.describe()))
    }
}

/// Is the agent's CLI there: its pane, alive, with the CLI under the wrapper?
fn process(pane: Option<&PaneObs>, world: &World) -> Process {
    let gone = |why: String| Process::Gone { why };
    match pane {
        None if !world.server_running => gone(format!("{} is not running", world.location())),
        None => gone(format!("no pane in {}", world.location())),
        Some(p) if p.dead => gone(format!("pane {} is dead", p.id)),
        Some(p) => match p.agent_process() {
            Some(proc) => Process::Alive { pid: proc.pid },
            None => gone(format!("no CLI process under the wrapper in pane {}", p.id)),
        },
    }
}

/// state.json as it is: the watchdog must not trigger a rollback write. What cannot be read
/// is said in `notes`.
fn read_state(dir: &AgentDir, notes: &mut Vec<String>) -> Option<AgentState> {
    match state::store::read_state_file(&dir.file(state::STATE)) {
        Ok(Loaded::Valid(s)) => Some(s),
        Ok(Loaded::Corrupt(why)) => {
            notes.push(format!(
                "state.json is not valid JSON or not a regular file ({why}): status unknown"
            ));
            None
        }
        Ok(Loaded::Missing) => {
            notes.push("no state.json: status unknown, silence and runaway not checked".into());
            None
        }
        Err(e) => {
            notes.push(format!(
                "{e}: status unknown, silence and runaway not checked"
            ));
            None
        }
    }
}

impl Observed {
    /// The status state.json records, the failed turn it is about, the latest hook, the task.
    fn read_status(&mut self, state: Option<&AgentState>) {
        let inputs = &mut self.inputs;
        let last_active = state.and_then(|s| s.last_active.as_deref());
        inputs.status = state.map(|s| s.status.as_str().to_string());
        if inputs.status.as_deref() == Some("failed") {
            // The failed turn's own error, never one an earlier session left behind.
            inputs.turn_error = state
                .and_then(state::agent::session_error)
                .map(|(e, _)| e.to_string());
            // The turn-failed hook sets `last_active` with the status; nothing else touches it
            // until the next session or prompt.
            self.failed_turn = Some(format!(
                "{}|{}",
                last_active.unwrap_or_default(),
                inputs.turn_error.as_deref().unwrap_or("")
            ));
        }
        inputs.last_active = last_active.and_then(seconds);
        self.task = state.and_then(|s| s.current_task.clone());
        self.hook_wait = state.and_then(|s| s.needs_input.clone());
        self.open_loops = state.map_or(0, |s| s.open_loops.len());
    }

    /// A CLI may end a turn that failed on an API error without any hook (Codex), so the
    /// status stays `working`: its session file says the turn failed, and the CLI waits at
    /// its prompt. Only an error of the current run counts: a Codex started afresh runs its
    /// SessionStart hook, and records its new rollout, only with its first prompt.
    fn read_failed_turn_in(
        &mut self,
        agent: &AgentSpec,
        transcript: &Path,
        ops: &[state::op::Line],
    ) {
        if self.inputs.status.as_deref() != Some("working") {
            return;
        }
        let Some(error) = agent.cli.adapter().last_turn_error(transcript) else {
            return;
        };
        let started = ops
            .iter()
            .rev()
            .find(|o| matches!(o.op, Op::AgentStart(_)))
            .and_then(|o| o.ts.as_deref())
            .and_then(seconds);
        if of_this_run(error.ts.as_deref().and_then(seconds), started) {
            self.inputs.status = Some("failed".into());
            self.inputs.turn_error = Some(error.to_string());
            self.failed_turn = Some(format!("{}|{error}", error.ts.as_deref().unwrap_or("")));
            self.inputs
                .notes
                .push("the session file says the last turn ended in an API error".into());
        }
    }
}

/// The tool calls tool_use.jsonl records: how many, the latest one's time, and the recent
/// ones (which of them the current turn made).
fn read_tool_calls(tool_log: &Path, turn_started_ms: Option<i64>, inputs: &mut Inputs) {
    if !tool_log.exists() {
        inputs
            .notes
            .push("no tool_use.jsonl yet: silence uses the other signs of life".into());
        return;
    }
    let lines = tail_jsonl(tool_log);
    inputs.tool_count = lines.len() as u64;
    inputs.last_tool_call = lines
        .iter()
        .rev()
        .find_map(|l| l.get("ts").and_then(Value::as_str).and_then(seconds));
    let at = |l: &Value| l.get("ts").and_then(Value::as_str).and_then(millis);
    let latest_ms = lines.iter().rev().find_map(at);
    inputs.recent_calls = lines
        .iter()
        .skip(lines.len().saturating_sub(RECENT_CALLS))
        .map(|l| Call {
            tool: l["tool"].as_str().unwrap_or("?").to_string(),
            ok: l["ok"].as_bool().unwrap_or(true),
            input: l["input_digest"].as_str().map(str::to_string),
            this_turn: health::in_current_turn(at(l), turn_started_ms, latest_ms),
        })
        .collect();
    if lines.is_empty() {
        inputs.notes.push(
            "tool_use.jsonl has no readable line: silence uses the other signs of life".into(),
        );
    }
}

/// The largest in-flight note read (the hook keeps 500 characters of the call's input).
const IN_FLIGHT_MAX_BYTES: u64 = 16 * 1024;

/// When the tool call under way began (seconds since the epoch): the pre-tool hook's note
/// (`in_flight.json`), which the call's post-tool hook and the turn's end remove, when it was
/// made in the current turn. A note older than the turn is left over, never a call now.
fn tool_running_since(note: &Path, turn_started_ms: Option<i64>) -> Option<i64> {
    let text = bounded::read_string(note, IN_FLIGHT_MAX_BYTES, Links::Refuse).ok()?;
    let at = serde_json::from_str::<Value>(&text)
        .ok()?
        .get("ts")
        .and_then(Value::as_str)
        .and_then(millis)?;
    turn_started_ms
        .is_none_or(|start| at >= start)
        .then_some(at.div_euclid(1000))
}

/// The agent's usage ledger brought up to date: today's spend for the budget check, and the
/// current session's tokens for the spend check (or why they are not checked).
fn read_usage(
    agent: &AgentSpec,
    dir: &AgentDir,
    transcript: Option<&Path>,
    check: &UsageCheck,
    inputs: &mut Inputs,
) {
    let update = match crate::usage::update(dir, agent.cli, true) {
        Ok(u) => u,
        Err(e) => {
            inputs.notes.push(format!(
                "usage ledger: {e}: token use and budget not checked"
            ));
            return;
        }
    };
    inputs.notes.extend(update.notes.iter().cloned());
    // What the CLI's own records say, and apart from it what the agent reported itself.
    let trusted: std::collections::BTreeMap<String, crate::usage::Tokens> = update
        .today
        .iter()
        .map(|(model, t)| {
            let reported = update
                .reported_today
                .get(model)
                .copied()
                .unwrap_or_default();
            (model.clone(), t.beyond(&reported))
        })
        .filter(|(_, t)| !t.is_zero())
        .collect();
    inputs.spent_today = Some(crate::usage::Spent::of(&trusted, &check.prices));
    inputs.reported_today = (!update.reported_today.is_empty())
        .then(|| crate::usage::Spent::of(&update.reported_today, &check.prices));
    if !check.max_tokens {
        return;
    }
    match (transcript, &update.session_unreadable) {
        (None, _) => inputs
            .notes
            .push("no transcript recorded: token use not checked".into()),
        (Some(_), Some(why)) => inputs
            .notes
            .push(format!("transcript: {why}: token use not checked")),
        (Some(_), None) => inputs.tokens = update.session.map(|t| t.total()),
    }
}

/// The time of the latest op among `events`, or the prompt state.json recorded
/// (`turn_started`), whichever is later (milliseconds since the epoch). An agent idle for
/// hours that gets a prompt works since that prompt, not since the turn before.
fn latest_of(
    ops: &[state::op::Line],
    which: fn(&Op) -> bool,
    state_turn_started: Option<&str>,
) -> Option<i64> {
    ops.iter()
        .rev()
        .find(|o| which(&o.op))
        .and_then(|o| o.ts.as_deref())
        .and_then(millis)
        .max(state_turn_started.and_then(millis))
}

/// How much of a transcript's end is read for a retry record.
const RETRY_TAIL_BYTES: u64 = 64 * 1024;

/// When the transcript at `path` was last written, and, when its last record says the CLI is
/// retrying a failed API call (Claude Code's `{"type":"system","subtype":"api_error",
/// "retryInMs":…,"retryAttempt":…}`; the interactive 2.1.197 writes none and shows only its
/// banner), when it said it would try again. Seconds since the epoch; `None` for what cannot
/// be read.
fn transcript_life(path: &Path) -> (Option<i64>, Option<i64>) {
    let Ok((_, meta)) = bounded::open_regular(path, Links::Follow) else {
        return (None, None);
    };
    let written = meta
        .modified()
        .ok()
        .and_then(|t| jiff::Timestamp::try_from(t).ok())
        .map(|t| t.as_second());
    let retry_at = bounded::read_tail(path, RETRY_TAIL_BYTES, Links::Follow)
        .ok()
        .and_then(|tail| {
            let text = tail.lines_text();
            let last = text
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<Value>(l).ok())?;
            retry_record(&last)
        });
    (written, retry_at)
}

/// When a transcript record of an API retry says the next attempt is due.
fn retry_record(record: &Value) -> Option<i64> {
    let wait = record.get("retryInMs").and_then(Value::as_i64)?;
    let at = record
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(millis)?;
    Some((at + wait.max(0)).div_euclid(1000))
}

/// Was something recorded at `when` part of the run that started at `started` (both seconds
/// since the epoch)? Without a start on record, yes; without a time of its own, no.
fn of_this_run(when: Option<i64>, started: Option<i64>) -> bool {
    started.is_none_or(|s| when.is_some_and(|w| w >= s))
}

/// Spinner frames the CLIs animate while they wait (Claude Code's, Gemini CLI's braille, and
/// Copilot CLI's circles: its `◉ Working` cycles `∙ ∘ ○ ◎ ◉ ●`, read from 1.0.102's bundle;
/// opencode's bar of `■` and `⬝` that runs left and right, 1.18.33).
/// Copilot keeps neither the streamed text nor a shell call's output in its events file (both
/// are ephemeral events there), so its screen is the one sign of a slow answer: its spinner
/// must not be one too, or a hung model call looks alive forever.
const SPINNER: &[char] = &[
    '·', '✢', '✳', '✶', '✻', '✽', '*', '∗', '⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏', '◐',
    '◓', '◑', '◒', '•', '◦', '●', '⏺', '∙', '∘', '○', '◎', '◉', '■', '⬝',
];

/// The screen without what a waiting CLI animates by itself: spinner frames and elapsed-time
/// counters (`12s`, `1m 3s`, `2h`). A CLI whose request hangs shows a ticking spinner and has
/// not moved; streamed tokens (their counter), text, a retry countdown (`in 5 seconds`) have.
fn without_clocks(screen: &str) -> String {
    let chars: Vec<char> = screen.chars().filter(|c| !SPINNER.contains(c)).collect();
    // The end of a clock (`12s`) starting at `k`, if one does.
    let clock = |k: usize| {
        if !chars[k].is_ascii_digit() || (k > 0 && chars[k - 1].is_alphanumeric()) {
            return None;
        }
        let end = chars[k..]
            .iter()
            .position(|c| !c.is_ascii_digit())
            .map_or(chars.len(), |n| k + n);
        let unit = chars.get(end).copied();
        let after = chars.get(end + 1).copied();
        (matches!(unit, Some('s' | 'm' | 'h')) && after.is_none_or(|c| !c.is_alphanumeric()))
            .then_some(end + 1)
    };
    let mut out = String::with_capacity(screen.len());
    let mut k = 0;
    while k < chars.len() {
        let Some(mut end) = clock(k) else {
            out.push(chars[k]);
            k += 1;
            continue;
        };
        // `1m 3s` is one clock.
        loop {
            let next = chars[end..]
                .iter()
                .position(|c| *c != ' ')
                .map_or(chars.len(), |n| end + n);
            match (next < chars.len()).then(|| clock(next)).flatten() {
                Some(e) => end = e,
                None => break,
            }
        }
        out.push('#');
        k = end;
    }
    out
}

fn digest(text: &str) -> String {
    state::digest(text.trim_end().as_bytes())
}

/// Tokens a session used, from its transcript (read whole, each response once): Claude
/// Code's `message.usage` per assistant message, Codex's running `token_count` total, Gemini's
/// `tokens`.
pub fn tokens_used(path: &Path) -> Option<u64> {
    crate::usage::source::tokens_in(path, TRANSCRIPT_BYTES)
        .ok()
        .flatten()
}

/// The tokens of a transcript read line by line, in any number of pieces: the watchdog reads
/// a tail at once, `/metrics` what each scrape finds appended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenCount {
    summed: u64,
    cumulative: Option<u64>,
    seen: bool,
}

impl TokenCount {
    /// Count one line of the transcript (a line that is not JSON counts nothing).
    pub fn line(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if let Some(usage) = v.get("message").and_then(|m| m.get("usage")) {
            self.seen = true;
            for key in [
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
                "output_tokens",
            ] {
                self.summed += usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            }
        } else if let Some(total) = v
            .pointer("/payload/info/total_token_usage/total_tokens")
            .and_then(Value::as_u64)
        {
            self.cumulative = Some(total);
        } else if let Some(total) = v.pointer("/tokens/total").and_then(Value::as_u64) {
            self.seen = true;
            self.summed += total;
        }
    }

    /// Codex's latest cumulative count, else the sum of the others' per-message counts; `None`
    /// when no line said anything about tokens.
    pub fn total(&self) -> Option<u64> {
        self.cumulative.or(self.seen.then_some(self.summed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_before_the_last_start_is_not_this_runs() {
        assert!(of_this_run(Some(10), Some(5)));
        assert!(of_this_run(Some(5), Some(5)));
        assert!(
            !of_this_run(Some(4), Some(5)),
            "the session before a fresh start"
        );
        assert!(!of_this_run(None, Some(5)));
        assert!(of_this_run(Some(1), None));
        assert!(of_this_run(None, None));
    }

    #[test]
    fn tokens_from_each_transcript_shape() {
        let dir = tempfile::tempdir().unwrap();
        let shapes = [
            (
                "claude",
                "{\"type\":\"assistant\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":100,\"output_tokens\":5}}}\n\
                 not json\n\
                 {\"type\":\"assistant\",\"message\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":5}}}\n",
                Some(140),
            ),
            (
                "codex",
                "{\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":{\"total_tokens\":500}}}}\n\
                 {\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":{\"total_tokens\":900}}}}\n",
                Some(900),
            ),
            ("no usage", "{\"type\":\"user\"}\n", None),
        ];
        for (k, (shape, text, tokens)) in shapes.into_iter().enumerate() {
            let path = dir.path().join(format!("{k}.jsonl"));
            std::fs::write(&path, text).unwrap();
            assert_eq!(tokens_used(&path), tokens, "{shape}");
        }
        assert_eq!(tokens_used(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_claude_retry_record_says_when_the_next_attempt_is_due() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(
            &path,
            "{\"type\":\"assistant\",\"timestamp\":\"2026-11-25T12:00:00.000Z\"}\n\
             {\"type\":\"system\",\"subtype\":\"api_error\",\"level\":\"error\",\"retryInMs\":32000,\
             \"retryAttempt\":5,\"maxRetries\":10,\"timestamp\":\"2026-11-25T12:01:00.500Z\"}\n",
        )
        .unwrap();
        let (written, retry_at) = transcript_life(&path);
        assert!(written.is_some());
        let due = "2026-11-25T12:01:32.500Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second();
        assert_eq!(retry_at, Some(due));
        // A record after it means the retry is over.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"type\":\"assistant\",\"timestamp\":\"2026-11-25T12:01:40.000Z\"}\n");
        std::fs::write(&path, text).unwrap();
        assert_eq!(transcript_life(&path).1, None);
        assert_eq!(transcript_life(&dir.path().join("missing")), (None, None));
    }

    #[test]
    fn a_tool_call_runs_while_its_note_of_this_turn_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let note = dir.path().join("in_flight.json");
        assert_eq!(tool_running_since(&note, None), None, "no call under way");
        std::fs::write(
            &note,
            r#"{"ts":"2026-12-02T03:50:00.500Z","tool":"Bash","input":"sleep 600"}"#,
        )
        .unwrap();
        let at = millis("2026-12-02T03:50:00.500Z").unwrap();
        assert_eq!(tool_running_since(&note, Some(at - 5_000)), Some(at / 1000));
        assert_eq!(tool_running_since(&note, None), Some(at / 1000));
        // Left over from a turn before this one's prompt: no call of this turn.
        assert_eq!(tool_running_since(&note, Some(at + 1)), None);
        std::fs::write(&note, "not json").unwrap();
        assert_eq!(tool_running_since(&note, None), None);
    }

    #[test]
    fn a_ticking_spinner_is_not_movement_but_tokens_and_text_are() {
        let at = |elapsed: &str, tokens: &str, glyph: &str| {
            without_clocks(&format!(
                "● Reading\n\n{glyph} Indexing… ({elapsed} · ↓ {tokens} tokens · esc to interrupt)\n> "
            ))
        };
        assert_eq!(at("3s", "0", "✻"), at("1m 12s", "0", "✶"));
        assert_eq!(at("59s", "12", "⠏"), at("1h 2m", "12", "⠋"));
        // Copilot CLI's spinner, as its pane shows it while the model call hangs.
        let copilot = |glyph: &str| {
            without_clocks(&format!(
                "❯ index the archive\n\n❯\n {glyph} Working esc esc edit prompt   gpt-4.1"
            ))
        };
        assert_eq!(copilot("◉"), copilot("○"));
        assert_eq!(copilot("◎"), copilot("∙"));
        // opencode's running bar.
        assert_eq!(
            without_clocks("   ■■■■⬝⬝⬝⬝  esc interrupt"),
            without_clocks("   ⬝⬝■■■■■■  esc interrupt")
        );
        assert_ne!(at("3s", "1.2k", "✻"), at("4s", "1.3k", "✻"));
        assert_ne!(
            without_clocks("Retrying in 5 seconds… (attempt 2/10)"),
            without_clocks("Retrying in 4 seconds… (attempt 2/10)")
        );
        assert_ne!(without_clocks("step 1"), without_clocks("step 2"));
        assert_eq!(without_clocks("sha 3s9f"), "sha 3s9f");
    }

    #[test]
    fn a_turn_starts_at_its_prompt_not_at_the_end_of_the_turn_before() {
        let op = |event: &str, ts: &str| {
            let line = serde_json::json!({"event": event, "ts": ts}).to_string();
            state::op::parse(&line).remove(0)
        };
        let ms = |ts: &str| millis(ts).unwrap();
        let ops = vec![
            op("session_start", "2026-11-25T09:00:00Z"),
            op("turn_complete", "2026-11-25T09:05:00Z"),
            op("watchdog", "2026-11-25T11:00:00Z"),
            op("prompt", "2026-11-25T12:00:00.250Z"),
            op("clinic_context_injected", "2026-11-25T12:00:01Z"),
        ];
        let turn_started = |ops: &[state::op::Line], state| latest_of(ops, turn_boundary, state);
        assert_eq!(
            turn_started(&ops, None),
            Some(ms("2026-11-25T12:00:00.250Z"))
        );
        // The prompt op was not written, state.json has it.
        assert_eq!(
            turn_started(&ops[..3], Some("2026-11-25T12:00:00.250Z")),
            Some(ms("2026-11-25T12:00:00.250Z"))
        );
        // A new session after it begins a new turn too.
        let mut later = ops.clone();
        later.push(op("session_start", "2026-11-25T12:30:00Z"));
        assert_eq!(
            turn_started(&later, Some("2026-11-25T12:00:00.250Z")),
            Some(ms("2026-11-25T12:30:00Z"))
        );
        assert_eq!(turn_started(&[], None), None);
        // The calls of a turn that ended are still its calls until the next one begins; the
        // agent has been working only since it ended.
        let ended = vec![
            op("prompt", "2026-11-25T12:00:00Z"),
            op("turn_complete", "2026-11-25T12:10:00Z"),
        ];
        assert_eq!(
            latest_of(&ended, turn_start, None),
            Some(ms("2026-11-25T12:00:00Z"))
        );
        assert_eq!(turn_started(&ended, None), Some(ms("2026-11-25T12:10:00Z")));
    }
}
