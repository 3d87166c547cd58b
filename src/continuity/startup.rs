//! The startup context of a new session, rendered from `templates/startup.md.j2`: a recovery
//! block when the last session was interrupted, the externalized state (task, open loops,
//! numbers, ledger), the latest handoff, earlier decisions found by searching for the task,
//! and the brief. The session-start hook gives it to CLIs that have one; the wrapper pastes
//! it into the pane of those that do not. One text for both.

use serde::Serialize;
use serde_json::Value;

use crate::continuity::{Handoff, Ledger, ledger};
use crate::render::Templates;
use crate::state::inbox::Message;
use crate::state::{self, AgentDir, AgentState, FleetDir, Status};
use crate::store::{Hit, Store};

/// Claude Code truncates hook context past ~10,000 characters; stay under it.
pub const MAX_CONTEXT_CHARS: usize = 9_500;
/// Room for the handoff, so the brief still fits after it.
const MAX_HANDOFF_CHARS: usize = 4_000;
/// Earlier decisions shown at most.
const RELATED: usize = 3;

/// Why a session is starting, as far as the startup context cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The last session stopped mid-task without a clean exit.
    Recovery,
    /// The context was just compacted: the details are gone, the state is not.
    Compacted,
    /// A fresh context (startup, clear).
    Fresh,
    /// The transcript was resumed after a clean stop: it already has everything.
    Resumed,
}

pub struct Inputs<'a> {
    pub state: &'a AgentState,
    pub ledger: Option<&'a Ledger>,
    pub brief: Option<&'a str>,
    /// The last few lines of tool_use.jsonl, oldest first (recovery only).
    pub recent_tools: &'a [Value],
    /// How the agent resolves a loop, e.g. `'/usr/bin/phoenix' --config … resolve NAME`.
    pub resolve_command: &'a str,
    pub handoff: Option<&'a Handoff>,
    /// Earlier decisions and handoffs that match the task.
    pub related: &'a [Hit],
    /// The tool call the last session was running when it ended (`interrupted_tool.json`).
    pub interrupted_tool: Option<&'a Value>,
    /// Messages waiting in the inbox that this context delivers, oldest first.
    pub messages: &'a [Message],
    /// Messages still waiting after those (they come at the next turn boundary).
    pub messages_left: usize,
    /// The session's marker key (a custom CLI read through its pane, `marker_key`).
    pub marker_key: Option<&'a str>,
    /// An `[[agent_set]]` agent's work item, as its set's `context` tells it.
    pub work_item: Option<&'a str>,
}

#[derive(Serialize)]
struct Context<'a> {
    agent: &'a str,
    start: &'static str,
    last_active: Option<&'a str>,
    task: Option<&'a str>,
    recent_tools: Vec<Tool>,
    open_loops: &'a [state::OpenLoop],
    resolve_command: &'a str,
    numbers: Vec<Number<'a>>,
    ledger: Option<&'a Ledger>,
    handoff: Option<HandoffCtx<'a>>,
    related: &'a [Hit],
    brief: Option<Cut>,
    interrupted_tool: Option<InterruptedTool>,
    messages: &'a [Message],
    messages_left: usize,
    marker_key: Option<&'a str>,
    work_item: Option<Cut>,
}

/// Room for the work item (an issue's body can be long; the issue itself has the rest).
const MAX_WORK_ITEM_CHARS: usize = 3_000;

#[derive(Serialize)]
struct InterruptedTool {
    tool: String,
    input: Option<String>,
}

#[derive(Serialize)]
struct Tool {
    tool: String,
    ok: bool,
    error: Option<String>,
}

#[derive(Serialize)]
struct Number<'a> {
    name: &'a str,
    value: &'a str,
}

#[derive(Serialize)]
struct HandoffCtx<'a> {
    id: &'a str,
    trigger: &'a str,
    created_at: &'a str,
    summary: &'a str,
    body: String,
    truncated: bool,
}

#[derive(Serialize, Clone)]
struct Cut {
    text: String,
    truncated: bool,
}

fn cut(text: &str, max: usize) -> Cut {
    let text = text.trim();
    if text.chars().count() > max {
        Cut {
            text: text.chars().take(max).collect(),
            truncated: true,
        }
    } else {
        Cut {
            text: text.to_string(),
            truncated: false,
        }
    }
}

/// The context for `start`, or `None` when there is nothing worth injecting. A broken
/// override of the template falls back to the built-in one (and the error is returned for
/// the caller to record).
pub fn render(
    templates: &Templates,
    start: Start,
    inputs: &Inputs<'_>,
) -> (Option<String>, Option<String>) {
    let brief = inputs.brief.map(str::trim).filter(|b| !b.is_empty());
    let ledger = inputs.ledger.filter(|l| !ledger_is_empty(l));
    let Some(start_name) = start_name(start, inputs, brief.is_some() || ledger.is_some()) else {
        return (None, None);
    };
    let mut ctx = Context::new(inputs, start_name, brief, ledger);
    let mut problem = None;
    let mut render = |ctx: &Context<'_>| {
        let (text, override_error) = templates.render_or_builtin("startup.md.j2", ctx);
        if let Some(e) = override_error {
            problem = Some(e.to_string());
        }
        // Pasted into the pane for a CLI without hooks: the paste rule, whatever the
        // template (or what it quotes) contains.
        text.map(|t| crate::world::inert::keyboard_text(&t))
            .map_err(|e| e.to_string())
    };
    let mut text = match render(&ctx) {
        Ok(text) => text,
        Err(e) => return (None, Some(e)),
    };
    // Too long: the brief gives way first (it is on disk for the agent to read), then a hard
    // cut keeps the hook's output under the CLI's limit whatever the template does.
    if text.chars().count() > MAX_CONTEXT_CHARS
        && let Some(full) = ctx.brief.clone()
    {
        let over = text.chars().count() - MAX_CONTEXT_CHARS;
        let keep = full.text.chars().count().saturating_sub(over + 120);
        ctx.brief = (keep > 0).then(|| Cut {
            text: full.text.chars().take(keep).collect(),
            truncated: true,
        });
        if let Ok(shorter) = render(&ctx) {
            text = shorter;
        }
    }
    if text.chars().count() > MAX_CONTEXT_CHARS {
        text = text.chars().take(MAX_CONTEXT_CHARS - 40).collect();
        text.push_str("\n… (startup context truncated)\n");
    }
    (Some(text), problem)
}

/// The template's name for `start`; `None` when there is nothing worth injecting: a resumed
/// transcript has it all, a fresh one with nothing saved has nothing to be told.
/// `saved`: a brief or a ledger worth showing.
fn start_name(start: Start, inputs: &Inputs<'_>, saved: bool) -> Option<&'static str> {
    let state = inputs.state;
    match start {
        Start::Resumed => None,
        Start::Fresh
            if state.open_loops.is_empty()
                && state.numbers.is_empty()
                && !saved
                && inputs.handoff.is_none()
                && inputs.interrupted_tool.is_none()
                && inputs.messages.is_empty()
                && inputs.work_item.is_none() =>
        {
            None
        }
        Start::Recovery => Some("recovery"),
        Start::Compacted => Some("compacted"),
        Start::Fresh => Some("fresh"),
    }
}

impl<'a> Context<'a> {
    fn new(
        inputs: &Inputs<'a>,
        start: &'static str,
        brief: Option<&str>,
        ledger: Option<&'a Ledger>,
    ) -> Context<'a> {
        let state = inputs.state;
        let task = state
            .current_task
            .as_deref()
            .or(ledger.and_then(|l| l.current_task.as_deref()));
        Context {
            agent: &state.agent,
            start,
            last_active: state.last_active.as_deref(),
            task,
            recent_tools: inputs.recent_tools.iter().map(Tool::from_record).collect(),
            open_loops: &state.open_loops,
            resolve_command: inputs.resolve_command,
            numbers: state
                .numbers
                .iter()
                .map(|(name, value)| Number { name, value })
                .collect(),
            ledger,
            handoff: inputs.handoff.map(HandoffCtx::new),
            related: inputs.related,
            brief: brief.map(|b| cut(b, MAX_CONTEXT_CHARS)),
            interrupted_tool: inputs.interrupted_tool.map(|t| InterruptedTool {
                tool: t["tool"].as_str().unwrap_or("?").to_string(),
                input: t["input"]
                    .as_str()
                    .filter(|i| !i.is_empty())
                    .map(str::to_string),
            }),
            messages: inputs.messages,
            messages_left: inputs.messages_left,
            marker_key: inputs.marker_key,
            work_item: inputs
                .work_item
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .map(|w| cut(w, MAX_WORK_ITEM_CHARS)),
        }
    }
}

impl Tool {
    /// One line of tool_use.jsonl.
    fn from_record(t: &Value) -> Tool {
        let error = t.get("error").and_then(Value::as_str).map(str::to_string);
        Tool {
            tool: t.get("tool").and_then(Value::as_str).unwrap_or("?").into(),
            ok: error.is_none(),
            error,
        }
    }
}

impl<'a> HandoffCtx<'a> {
    /// The handoff, its body cut to leave room for the brief.
    fn new(h: &'a Handoff) -> HandoffCtx<'a> {
        let body = cut(&h.body, MAX_HANDOFF_CHARS);
        HandoffCtx {
            id: &h.id,
            trigger: h.trigger.as_str(),
            created_at: &h.created_at,
            summary: &h.summary,
            body: body.text,
            truncated: body.truncated,
        }
    }
}

fn ledger_is_empty(l: &Ledger) -> bool {
    l.current_task.is_none()
        && l.next.is_empty()
        && l.blocked.is_empty()
        && l.uncertain.is_empty()
        && l.in_progress.is_empty()
}

/// Earlier decisions and handoffs of this agent that match `task`, from the index if there is
/// one (never built here: a session start must not wait for it). Best effort.
pub fn related(fleet: &FleetDir, agent: &str, task: &str, shown: Option<&str>) -> Vec<Hit> {
    let Some(store) = Store::open_for_read(fleet) else {
        return Vec::new();
    };
    let exclude: Vec<&str> = shown.into_iter().collect();
    store
        .related(agent, task, &exclude, RELATED)
        .unwrap_or_default()
}

/// How the startup context finds related decisions: `related`, once a binary opts in with
/// [`search_the_index`]. `phoenix-hook`, which runs on every tool call, does not: SQLite then
/// stays out of it (2 MB less to map per call), and it hands session starts to `phoenix`.
type Finder = fn(&FleetDir, &str, &str, Option<&str>) -> Vec<Hit>;
static FINDER: std::sync::OnceLock<Finder> = std::sync::OnceLock::new();

/// Let startup contexts built by this process search the index for related decisions.
pub fn search_the_index() {
    let _ = FINDER.set(related);
}

/// Did the last session stop mid-task, with neither a clean-exit marker nor a clean session
/// end after its last activity? A tool call the wrapper set aside at the agent's exit
/// (`interrupted_tool.json`) settles it whatever the state says: a CLI whose launcher was
/// killed can still report its turn as finished on its way out (the Gemini CLI's AfterAgent
/// hook did), and the next session must still be told what was stopped.
pub fn was_interrupted(dir: &AgentDir, state: &AgentState) -> bool {
    if dir.file(state::INTERRUPTED_TOOL).exists() {
        return true;
    }
    if state.status != Status::Working {
        return false;
    }
    let last_active = state.last_active_at();
    let clean_after = |ts: Option<jiff::Timestamp>| match (ts, last_active) {
        (Some(t), Some(active)) => t >= active,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let marker = state::file::read_text(&dir.file(state::CLEAN_EXIT))
        .and_then(|t| t.trim().parse::<jiff::Timestamp>().ok());
    let ended_clean = state
        .last_session_end
        .as_ref()
        .filter(|e| e.clean)
        .and_then(|e| state::agent::parse_timestamp(&e.ts));
    !(clean_after(marker) || clean_after(ended_clean))
}

/// Everything the startup context is made of, read from the agent's files: the state, the
/// ledger, the brief, the latest handoff (unless the transcript was resumed) and the matching
/// earlier decisions.
pub struct Gathered {
    pub state: AgentState,
    pub ledger: Ledger,
    pub brief: Option<String>,
    pub handoff: Option<Handoff>,
    pub related: Vec<Hit>,
    pub interrupted_tool: Option<Value>,
}

impl Gathered {
    pub fn read(fleet: &FleetDir, dir: &AgentDir, state: AgentState, start: Start) -> Gathered {
        let ledger = ledger::load(dir);
        let brief = dir.brief();
        let (handoff, related) = if start == Start::Resumed {
            (None, Vec::new())
        } else {
            let handoff = super::latest_for_startup(dir);
            let task = state
                .current_task
                .clone()
                .or_else(|| ledger.current_task.clone())
                .or_else(|| handoff.as_ref().map(|h| h.summary.clone()));
            let related = match task {
                Some(task) => FINDER.get().map_or_else(Vec::new, |find| {
                    find(
                        fleet,
                        &dir.name,
                        &task,
                        handoff.as_ref().map(|h| h.id.as_str()),
                    )
                }),
                None => Vec::new(),
            };
            (handoff, related)
        };
        // Written by the wrapper (small, regular, ours): never followed through a link.
        let interrupted_tool = state::bounded::read_whole(
            &dir.file(state::INTERRUPTED_TOOL),
            16 * 1024,
            state::bounded::Links::Refuse,
        )
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter(|v| v["tool"].is_string());
        Gathered {
            state,
            ledger,
            brief,
            handoff,
            related,
            interrupted_tool,
        }
    }

    /// The inputs of the template; `messages`: the inbox's, taken for this context.
    pub fn inputs<'a>(
        &'a self,
        recent_tools: &'a [Value],
        resolve_command: &'a str,
        messages: Option<&'a super::messages::ForContext>,
    ) -> Inputs<'a> {
        Inputs {
            state: &self.state,
            ledger: Some(&self.ledger),
            brief: self.brief.as_deref(),
            recent_tools,
            resolve_command,
            handoff: self.handoff.as_ref(),
            related: &self.related,
            interrupted_tool: self.interrupted_tool.as_ref(),
            messages: messages.map_or(&[], |m| m.messages.as_slice()),
            messages_left: messages.map_or(0, |m| m.left),
            marker_key: None,
            work_item: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::continuity::Trigger;
    use crate::state::OpenLoop;

    fn state() -> AgentState {
        let mut s = AgentState::new("trades");
        s.status = Status::Working;
        s.current_task = Some("rebalance the portfolio".into());
        s.last_active = Some("2026-02-17T02:12:53Z".into());
        s.open_loops.push(OpenLoop {
            id: "schwab-oauth".into(),
            text: "Schwab OAuth not set up".into(),
            added: "2026-02-01".into(),
            stale: true,
            extra: Default::default(),
        });
        s
    }

    fn inputs<'a>(state: &'a AgentState, brief: Option<&'a str>) -> Inputs<'a> {
        Inputs {
            state,
            ledger: None,
            brief,
            recent_tools: &[],
            resolve_command: "phoenix resolve trades",
            handoff: None,
            related: &[],
            interrupted_tool: None,
            messages: &[],
            messages_left: 0,
            marker_key: None,
            work_item: None,
        }
    }

    fn text(start: Start, inputs: &Inputs<'_>) -> Option<String> {
        let (text, problem) = render(&Templates::default(), start, inputs);
        assert_eq!(problem, None);
        text
    }

    #[test]
    fn the_interrupted_call_is_named_on_a_line_of_its_own() {
        let s = state();
        let call = serde_json::json!({"tool": "Bash", "input": "make deploy"});
        let mut i = inputs(&s, None);
        i.interrupted_tool = Some(&call);
        let text = text(Start::Recovery, &i).unwrap();
        assert!(
            text.contains(
                "\nThis command was interrupted and has been stopped: Bash: make deploy\nIt may"
            ),
            "{text}"
        );
        // Even a fresh start with nothing else to say names it.
        let bare = AgentState::new("trades");
        let mut i = inputs(&bare, None);
        i.interrupted_tool = Some(&call);
        assert!(text_of_fresh(&i).contains("stopped: Bash: make deploy"));
        i.interrupted_tool = None;
        assert_eq!(
            super::render(&Templates::default(), Start::Fresh, &i).0,
            None
        );
    }

    fn text_of_fresh(i: &Inputs<'_>) -> String {
        text(Start::Fresh, i).unwrap()
    }

    #[test]
    fn recovery_block_has_task_loops_tools_and_brief() {
        let s = state();
        let tools = [serde_json::json!({"tool": "Bash", "ok": false, "error": "exit code 1"})];
        let mut i = inputs(&s, Some("trades — 2026-02-16\n**Next:** snapshot"));
        i.recent_tools = &tools;
        let text = text(Start::Recovery, &i).unwrap();
        assert!(
            text.starts_with("=== PHOENIX: RECOVERY DETECTED ==="),
            "{text}"
        );
        for needle in [
            "Last active: 2026-02-17T02:12:53Z",
            "Task: rebalance the portfolio",
            "[schwab-oauth] Schwab OAuth not set up (added 2026-02-01, STALE)",
            "Bash (error: exit code 1)",
            "phoenix resolve trades <loop-id>",
            "**Next:** snapshot",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        assert!(text.find("RECOVERY").unwrap() < text.find("brief.md").unwrap());
    }

    #[test]
    fn the_marker_key_is_named_and_its_echo_is_no_command() {
        let s = state();
        let mut i = inputs(&s, None);
        i.marker_key = Some("k2p8m4x9q3r7t5v6w8y2");
        let text = text(Start::Recovery, &i).unwrap();
        assert!(text.contains("KEY is k2p8m4x9q3r7t5v6w8y2"), "{text}");
        // Its pasted echo triggers nothing, and holds back no real marker for the echo window.
        assert_eq!(crate::continuity::tap::Tap::commands_anywhere(&text), []);
        i.marker_key = None;
        assert!(!text_of(&i).contains("Markers:"));
    }

    fn text_of(i: &Inputs<'_>) -> String {
        text(Start::Recovery, i).unwrap()
    }

    #[test]
    fn nothing_to_say_is_none() {
        let s = AgentState::new("a");
        let i = inputs(&s, Some("  \n"));
        assert_eq!(text(Start::Fresh, &i), None);
        assert_eq!(text(Start::Resumed, &i), None);
        assert!(text(Start::Compacted, &i).is_some());
    }

    #[test]
    fn huge_brief_and_handoff_are_cut_under_the_limit() {
        let s = state();
        let brief = "word ".repeat(10_000);
        let h = Handoff {
            id: "20261123T101010-x".into(),
            agent: "trades".into(),
            cli: "claude".into(),
            created_at: "2026-11-23T10:10:10Z".into(),
            trigger: Trigger::Crash,
            related: vec![],
            summary: "x".into(),
            body: "line\n".repeat(3_000),
            notes: Vec::new(),
        };
        let mut i = inputs(&s, Some(&brief));
        i.handoff = Some(&h);
        let text = text(Start::Fresh, &i).unwrap();
        assert!(text.chars().count() <= MAX_CONTEXT_CHARS, "{}", text.len());
        assert!(text.contains("brief truncated"), "{text}");
        assert!(text.contains("handoff truncated; `phoenix handoff show 20261123T101010-x`"));
    }

    #[test]
    fn a_fresh_session_gets_the_latest_handoff_ledger_and_related_decisions() {
        let state = AgentState::new("a");
        let h = Handoff {
            id: "20261123T-auth".into(),
            agent: "a".into(),
            cli: "claude".into(),
            created_at: "2026-11-23T10:10:10Z".into(),
            trigger: Trigger::Crash,
            related: vec![],
            summary: "auth".into(),
            body: "# Handoff: auth\n- login next".into(),
            notes: Vec::new(),
        };
        let ledger = Ledger {
            current_task: Some("ship the login page".into()),
            next: vec!["wire the form".into(), "test it".into()],
            ..Ledger::default()
        };
        let related = [Hit {
            kind: "decision".into(),
            agent: "a".into(),
            reference: "use [OAuth] PKCE".into(),
            ts: Some("2026-11-01T00:00:00Z".into()),
            title: "decision".into(),
            snippet: "use [OAuth] PKCE, not implicit flow".into(),
            rank: -1.0,
        }];
        let mut i = inputs(&state, None);
        i.handoff = Some(&h);
        i.ledger = Some(&ledger);
        i.related = &related;
        let text = text(Start::Fresh, &i).expect("something to inject");
        for needle in [
            "=== PHOENIX: STATE OF AGENT `a` ===",
            "Task: ship the login page",
            "Next (from the ledger): wire the form; test it",
            "--- latest handoff (20261123T-auth, crash) ---",
            "- login next",
            "--- relevant earlier decisions",
            "- decision use [OAuth] PKCE (2026-11-01T00:00:00Z): use [OAuth] PKCE, not implicit flow",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        i.related = &[];
        assert_eq!(text_resumed(&i), None);
    }

    fn text_resumed(i: &Inputs<'_>) -> Option<String> {
        render(&Templates::default(), Start::Resumed, i).0
    }

    #[test]
    fn a_broken_override_falls_back_to_the_builtin_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("startup.md.j2"), "{% if %}").unwrap();
        let s = state();
        let (text, problem) = render(
            &Templates::new(Some(dir.path())),
            Start::Recovery,
            &inputs(&s, None),
        );
        assert!(text.unwrap().contains("RECOVERY DETECTED"));
        assert!(problem.unwrap().contains("templates/startup.md.j2"));
    }

    #[test]
    fn an_override_decides_the_text() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("startup.md.j2"),
            "{{ start }} {{ agent }}: {{ task }}\n",
        )
        .unwrap();
        let s = state();
        let (text, _) = render(
            &Templates::new(Some(dir.path())),
            Start::Recovery,
            &inputs(&s, None),
        );
        assert_eq!(text.unwrap(), "recovery trades: rebalance the portfolio\n");
    }
}
