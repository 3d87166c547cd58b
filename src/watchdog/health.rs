//! Health assessment: a pure function from what the watchdog observed about one agent to its
//! findings. No files, no clock, no tmux: `observe.rs` gathers the inputs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One check of the assessment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    Process,
    Silence,
    ErrorCascade,
    Runaway,
    Repetition,
    Spend,
    Screen,
    /// The CLI said the last turn failed (an API error it gave up on) and waits for input.
    TurnFailed,
    /// The agent spent more today than its `budget` allows.
    Budget,
}

impl Check {
    /// Every check, in the order of the assessment.
    pub const ALL: [Check; 8] = [
        Check::Process,
        Check::Silence,
        Check::ErrorCascade,
        Check::Runaway,
        Check::Repetition,
        Check::Spend,
        Check::Screen,
        Check::TurnFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Check::Process => "process",
            Check::Silence => "silence",
            Check::ErrorCascade => "error_cascade",
            Check::Runaway => "runaway",
            Check::Repetition => "repetition",
            Check::Spend => "spend",
            Check::Screen => "screen",
            Check::TurnFailed => "turn_failed",
            Check::Budget => "budget",
        }
    }
}

/// Is the agent's CLI there?
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Process {
    Alive {
        pid: u32,
    },
    /// No pane, a dead pane, or a pane without the CLI under its wrapper.
    Gone {
        why: String,
    },
}

/// One tool call as tool_use.jsonl recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Call {
    pub tool: String,
    pub ok: bool,
    /// Digest of the call's input (hooks record it); `None` for older lines.
    pub input: Option<String>,
    /// Made in the current turn (see `in_current_turn`): only those can form a loop or a
    /// cascade. Calls of earlier turns or sessions are history.
    pub this_turn: bool,
}

/// When nothing says where the current turn began (a CLI without a prompt hook), calls this
/// close to the latest one count as one stretch of work.
pub const TURN_WINDOW_MS: i64 = 10 * 60 * 1000;

/// Was a call made at `call_ms` part of the current turn? The turn began at `turn_started_ms`
/// (its prompt, or the session start) when known; otherwise calls within `TURN_WINDOW_MS` of
/// the latest call (`latest_ms`) are. A call without a time is never part of it. All times
/// in milliseconds since the epoch.
pub fn in_current_turn(
    call_ms: Option<i64>,
    turn_started_ms: Option<i64>,
    latest_ms: Option<i64>,
) -> bool {
    let Some(call) = call_ms else {
        return false;
    };
    match (turn_started_ms, latest_ms) {
        (Some(start), _) => call >= start,
        (None, Some(latest)) => latest - call <= TURN_WINDOW_MS,
        (None, None) => false,
    }
}

/// Lowercase phrases a CLI shows while it retries a failed API call by itself (Claude Code:
/// "API Error (…) · Retrying in 5 seconds… (attempt 2/10)"; Codex: "Reconnecting... 2/5",
/// "stream error: …; retrying 1/5 in 200ms…"; Gemini CLI: "Retrying with backoff"). Such a CLI
/// is busy, not silent and not stuck.
pub const RETRY_PATTERNS: &[&str] = &[
    "retrying in ",
    "reconnecting...",
    "retrying with backoff",
    "retrying after ",
    "; retrying ",
];

/// How many lines at the bottom of the screen are searched for a retry banner: the CLI shows
/// it where it is working now, and an old one further up is history.
const RETRY_BANNER_LINES: usize = 12;

/// The retry banner at the bottom of `screen`, if the CLI shows one.
pub fn retry_banner(screen: &str) -> Option<&'static str> {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let bottom = lines[lines.len().saturating_sub(RETRY_BANNER_LINES)..]
        .join("\n")
        .to_lowercase();
    RETRY_PATTERNS.iter().copied().find(|p| bottom.contains(p))
}

/// What the watchdog saw of one agent. Times are seconds since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inputs {
    pub now: i64,
    pub process: Option<Process>,
    /// state.json's status: `working`, `idle`, `stopped`.
    pub status: Option<String>,
    pub last_tool_call: Option<i64>,
    /// state.json's `last_active`: the latest hook that wrote state (a prompt, a session
    /// start, a tool call at most `HEARTBEAT_WRITE_INTERVAL` old, a turn's end).
    pub last_active: Option<i64>,
    /// When the session's transcript was last written (the CLI records messages, and Claude
    /// Code its API retries, there).
    pub transcript_written: Option<i64>,
    /// The CLI wrote in its transcript that it retries a failed API call: when it said it
    /// would try again.
    pub retry_at: Option<i64>,
    /// The latest pass that saw the pane's text change.
    pub screen_changed_at: Option<i64>,
    /// A tool call of the current turn is under way (its pre-tool hook noted it, no post-tool
    /// hook ended it yet): since when. The tool works, not the model: Copilot CLI and Codex
    /// record nothing while a shell call runs, and its screen may be still for as long.
    pub tool_running_since: Option<i64>,
    /// The latest tool calls, oldest first.
    pub recent_calls: Vec<Call>,
    /// All the tool calls in the readable log (progress between two passes).
    pub tool_count: u64,
    /// When the current turn began: its prompt, the start of the session, or the end of the
    /// turn before, whichever is latest.
    pub working_since: Option<i64>,
    /// Tokens the current session has used, from its transcript (the usage ledger).
    pub tokens: Option<u64>,
    /// What the agent spent today by its CLI's own records (the usage ledger, priced).
    pub spent_today: Option<crate::usage::Spent>,
    /// What it reported spending today itself (a custom CLI's `->continuity:usage`): never
    /// enough alone to stop it (`reported_over_budget`).
    pub reported_today: Option<crate::usage::Spent>,
    /// The error of the last turn, when the CLI reported it failed (status `failed`).
    pub turn_error: Option<String>,
    /// The pane's visible text: signs of life (it moves, a retry banner), never a verdict.
    pub screen: Option<String>,
    /// The CLI's own dialog on the screen (`dialog.rs`): its lines at the bottom of the
    /// visible screen while a turn runs, without the model's and the tools' words. The only
    /// text on a pane a verdict (wedged, waiting for a person) may rest on.
    pub dialog: Option<String>,
    /// The screen did not change since the previous pass.
    pub screen_unchanged: bool,
    /// The agent waits for a person (its CLI said so, or its screen asks for an approval):
    /// quiet on purpose, neither silent, runaway nor wedged.
    pub waiting_for_person: bool,
    /// Why a check could not run (missing or corrupt logs).
    pub notes: Vec<String>,
}

/// The limits an agent is held to.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub silence: Duration,
    pub error_cascade: u32,
    pub runaway: Duration,
    pub repeat: u32,
    pub max_tokens: Option<u64>,
    /// The agent's `budget`.
    pub budget: Option<crate::spec::Budget>,
    /// Lowercase phrases that mean a wedged screen for this agent's CLI.
    pub screen_patterns: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub check: Check,
    /// Machine-friendly, e.g. `silent_for_15_minutes`.
    pub reason: String,
    /// For people.
    pub summary: String,
    /// Evidence that needs no second look (a dead process, a spend limit passed).
    pub unambiguous: bool,
}

/// Phrases of wedged screens every CLI shows in some form: API error banners, rate limits,
/// expired logins, permission prompts nobody answers.
pub const SCREEN_PATTERNS: &[&str] = &[
    "api error: 5",
    "overloaded_error",
    "rate_limit_error",
    "rate limit reached",
    "usage limit reached",
    "please run /login",
    "invalid api key",
    "oauth token has expired",
    "do you want to proceed?",
    "do you want to make this edit",
    "allow command?",
    "allow execution",
    "apply this change?",
    "waiting for approval",
    // Gemini CLI's dialog after a 404 for its model ("It seems like you don't have access to
    // gemini-x", then "1. Keep trying / 2. Stop"): no hook fires and nothing changes until a
    // person chooses. The same choice follows its quota errors.
    "you don't have access to gemini",
    "1. keep trying",
];

fn minutes(secs: i64) -> String {
    let m = secs / 60;
    if m >= 1 {
        format!("{m}_minute{}", if m == 1 { "" } else { "s" })
    } else {
        format!("{secs}_seconds")
    }
}

fn human(secs: i64) -> String {
    crate::spec::duration::format(Duration::from_secs(secs.max(0) as u64))
}

/// Every check of one agent. Only a live CLI can be silent, looping or wedged.
pub fn assess(i: &Inputs, limits: &Limits) -> Vec<Finding> {
    let mut found = Vec::new();
    let alive = match &i.process {
        Some(Process::Alive { .. }) => true,
        Some(Process::Gone { why }) => {
            found.push(Finding::new(
                Check::Process,
                "process_dead".into(),
                format!("the CLI process is gone: {why}"),
                true,
            ));
            false
        }
        None => false,
    };
    if !alive {
        return found;
    }
    // A finished turn waiting for input is idle, not silent, and its loops are over.
    let working = i.status.as_deref() == Some("working");
    let turn = current_turn(&i.recent_calls);
    found.extend(turn_failed(i));
    if working && !i.waiting_for_person {
        found.extend(silence(i, limits));
        found.extend(runaway(i, limits));
    }
    found.extend(error_cascade(&turn, limits));
    if working && let Some(summary) = repetition(&turn, limits.repeat as usize) {
        found.push(Finding::new(
            Check::Repetition,
            "repetition_loop".into(),
            summary,
            false,
        ));
    }
    found.extend(spend(i, limits));
    found.extend(over_budget(i, limits));
    if !i.waiting_for_person {
        found.extend(wedged_screen(i, limits));
    }
    found
}

impl Finding {
    fn new(check: Check, reason: String, summary: String, unambiguous: bool) -> Finding {
        Finding {
            check,
            reason,
            summary,
            unambiguous,
        }
    }
}

/// Nothing will happen after a failed turn unless someone types: unambiguous.
fn turn_failed(i: &Inputs) -> Option<Finding> {
    if i.status.as_deref() != Some("failed") {
        return None;
    }
    let error = i.turn_error.as_deref().unwrap_or("no error text");
    Some(Finding::new(
        Check::TurnFailed,
        "turn_failed".into(),
        format!(
            "the last turn ended in an API error and the CLI waits for input: {}",
            error.chars().take(200).collect::<String>()
        ),
        true,
    ))
}

/// A working agent is silent only when no sign of life of its current turn is recent, and
/// never while its CLI says it is retrying an API call or one of its tool calls runs.
fn silence(i: &Inputs, limits: &Limits) -> Option<Finding> {
    if i.screen.as_deref().and_then(retry_banner).is_some() {
        return None;
    }
    // A running tool call is the agent's work, however quiet (a build, a test run): its
    // length is the runaway check's business, and reviving would kill it mid-call.
    if i.tool_running_since.is_some() {
        return None;
    }
    let (last, what) = last_sign_of_life(i)?;
    let quiet = i.now - last;
    let summary = format!(
        "no sign of life for {} while working, the last one {what}",
        human(quiet)
    );
    too_long(
        Check::Silence,
        "silent_for",
        quiet,
        limits.silence,
        "silence",
        summary,
    )
}

fn runaway(i: &Inputs, limits: &Limits) -> Option<Finding> {
    let busy = i.now - i.working_since?;
    let summary = format!("working for {} without finishing a turn", human(busy));
    too_long(
        Check::Runaway,
        "working_for",
        busy,
        limits.runaway,
        "runaway",
        summary,
    )
}

/// A stretch of `secs` longer than the threshold `name` (`limit`): the reason says how long
/// (`silent_for_15_minutes`), the summary ends with the threshold.
fn too_long(
    check: Check,
    reason: &str,
    secs: i64,
    limit: Duration,
    name: &str,
    summary: String,
) -> Option<Finding> {
    let limit = limit.as_secs() as i64;
    (secs > limit).then(|| {
        Finding::new(
            check,
            format!("{reason}_{}", minutes(secs)),
            format!("{summary} ({name} = {})", human(limit)),
            false,
        )
    })
}

/// Loops and cascades are made of the calls of one turn (the latest, also once it ended):
/// the same successful command at the end of every turn is a habit, and failures of earlier
/// turns or sessions are history.
fn current_turn(calls: &[Call]) -> Vec<&Call> {
    let first = calls.iter().rposition(|c| !c.this_turn);
    calls[first.map_or(0, |k| k + 1)..].iter().collect()
}

fn error_cascade(turn: &[&Call], limits: &Limits) -> Option<Finding> {
    let failing = turn.iter().rev().take_while(|c| !c.ok).count() as u32;
    if failing <= limits.error_cascade {
        return None;
    }
    let tool = &turn[turn.len() - 1].tool;
    Some(Finding::new(
        Check::ErrorCascade,
        format!("{failing}_consecutive_tool_errors"),
        format!(
            "{failing} failed tool calls in a row, the last one `{tool}` (error_cascade = {})",
            limits.error_cascade
        ),
        false,
    ))
}

fn spend(i: &Inputs, limits: &Limits) -> Option<Finding> {
    let (tokens, max) = (i.tokens?, limits.max_tokens?);
    (tokens > max).then(|| {
        Finding::new(
            Check::Spend,
            "token_limit_exceeded".into(),
            format!("the session used {tokens} tokens (max_tokens = {max})"),
            true,
        )
    })
}

/// Today's spend past the agent's budget by its CLI's own records: tokens, or the estimated
/// cost of its priced models (tokens of an unpriced model cost nothing known, and are named).
/// Unambiguous: the recovery stops the agent for a person, whatever the policy. What the agent
/// reported itself is not part of it (`reported_over_budget`).
fn over_budget(i: &Inputs, limits: &Limits) -> Option<Finding> {
    let (reason, summary) = past_budget(i.spent_today.as_ref()?, limits.budget.as_ref()?)?;
    Some(Finding::new(Check::Budget, reason, summary, true))
}

/// What to warn about when today's spend is past the budget only with the usage the agent
/// reported itself counted: a line it prints (or a file it writes) is no bill, so it stops
/// nothing until the CLI's own records agree. `None`: nothing to warn about.
pub fn reported_over_budget(i: &Inputs, limits: &Limits) -> Option<String> {
    let budget = limits.budget.as_ref()?;
    let reported = i.reported_today.as_ref()?;
    let trusted = i.spent_today.clone().unwrap_or_default();
    if past_budget(&trusted, budget).is_some() {
        return None;
    }
    let (_, summary) = past_budget(&trusted.plus(reported), budget)?;
    Some(format!(
        "{summary}, counting usage the agent reported itself ({} tokens): not stopped, since \
         no record of its CLI agrees",
        crate::usage::thousands(reported.tokens.total)
    ))
}

/// The reason and summary of `spent` past `budget`, if it is.
fn past_budget(
    spent: &crate::usage::Spent,
    budget: &crate::spec::Budget,
) -> Option<(String, String)> {
    use crate::usage::{thousands, usd_text};
    let tokens = spent.tokens.total;
    if let Some(max) = budget.tokens_per_day
        && tokens > max
    {
        return Some((
            "daily_token_budget_exceeded".into(),
            format!(
                "{} tokens used today (budget tokens_per_day = {})",
                thousands(tokens),
                thousands(max)
            ),
        ));
    }
    let (max, usd) = (budget.usd_per_day?, spent.cost_usd?);
    let unpriced = if spent.unpriced_models.is_empty() {
        String::new()
    } else {
        format!(", besides unpriced {}", spent.unpriced_models.join(", "))
    };
    (usd > max).then(|| {
        (
            "daily_cost_budget_exceeded".into(),
            format!(
                "an estimated {} spent today{unpriced} (budget usd_per_day = {})",
                usd_text(usd),
                usd_text(max)
            ),
        )
    })
}

/// The CLI's own dialog (never the model's words, never an idle agent's screen) showing a
/// wedge phrase on a screen that did not change since the previous pass. A CLI that shows it
/// is retrying is waiting on purpose: its banner names an API error that it handles itself.
fn wedged_screen(i: &Inputs, limits: &Limits) -> Option<Finding> {
    // An agent whose turn ended sits at its prompt: what its screen shows is history.
    if super::dialog::Turn::of_inputs(i) == super::dialog::Turn::Ended {
        return None;
    }
    let dialog = i.dialog.as_deref().filter(|_| i.screen_unchanged)?;
    if i.screen.as_deref().and_then(retry_banner).is_some() || retry_banner(dialog).is_some() {
        return None;
    }
    let lower = dialog.to_lowercase();
    let p = limits
        .screen_patterns
        .iter()
        .find(|p| lower.contains(p.as_str()))?;
    Some(Finding::new(
        Check::Screen,
        "stuck_on_screen".into(),
        format!("the screen shows \"{p}\" and has not changed since the last pass"),
        false,
    ))
}

/// The latest sign of life of the current turn and what it was: a tool call, a hook (prompt,
/// session start), the start of the turn or session, a transcript write, the time the CLI said it would
/// retry, or the pane's text changing. Signs from before the turn are older than its start, so
/// the latest one is always of the current turn.
fn last_sign_of_life(i: &Inputs) -> Option<(i64, &'static str)> {
    [
        (i.last_tool_call, "a tool call"),
        (i.last_active, "a hook (prompt, session start or tool call)"),
        (i.working_since, "the start of the turn or session"),
        (i.transcript_written, "a transcript write"),
        (i.retry_at, "an API retry the CLI announced"),
        (i.screen_changed_at, "the screen changing"),
    ]
    .into_iter()
    .filter_map(|(t, what)| t.map(|t| (t, what)))
    .max_by_key(|(t, _)| *t)
}

/// The same call `n` times in a row, or the same failing call alternating with the same
/// other call `n` times: busy, never silent, and still going nowhere.
fn repetition(calls: &[&Call], n: usize) -> Option<String> {
    let keyed: Vec<(&str, &str, bool)> = calls
        .iter()
        .map(|c| (c.tool.as_str(), c.input.as_deref().unwrap_or(""), c.ok))
        .collect();
    if n >= 2 && keyed.len() >= n {
        let tail = &keyed[keyed.len() - n..];
        // Calls without a recorded input cannot be told apart: never call them a loop.
        if !tail[0].1.is_empty() && tail.iter().all(|c| (c.0, c.1) == (tail[0].0, tail[0].1)) {
            return Some(format!("the same `{}` call {n} times in a row", tail[0].0));
        }
    }
    if n >= 2 && keyed.len() >= 2 * n {
        let tail = &keyed[keyed.len() - 2 * n..];
        let (a, b) = (tail[0], tail[1]);
        let alternates = !a.1.is_empty()
            && !b.1.is_empty()
            && (a.0, a.1) != (b.0, b.1)
            && tail.iter().enumerate().all(|(k, c)| {
                let want = if k % 2 == 0 { a } else { b };
                (c.0, c.1) == (want.0, want.1)
            });
        let one_fails =
            tail.iter().step_by(2).all(|c| !c.2) || tail.iter().skip(1).step_by(2).all(|c| !c.2);
        if alternates && one_fails {
            return Some(format!(
                "the same failing call alternating with the same fix {n} times (`{}` / `{}`)",
                a.0, b.0
            ));
        }
    }
    None
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
