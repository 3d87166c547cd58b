//! What phoenix knows about each agent CLI (Claude Code, Codex CLI, Gemini CLI, a custom
//! program), behind one trait: how it is started and resumed, the hooks phoenix installs for
//! it, the trust it needs before they run, what its hooks print, how it says that a turn
//! failed, and how it shows life. Callers ask `agent.cli.adapter()`; nothing outside this
//! module matches on the kind of CLI. Each CLI's file also keeps the notes on its versions
//! and quirks (sources in the reference `cli-hooks.md`).
//!
//! Sits low: it uses `spec` and `state` types only.

pub mod claude;
pub mod codex;
pub mod copilot;
pub mod custom;
pub mod failed_turn;
pub mod gemini;
pub mod opencode;
pub mod own_sandbox;
pub mod pi;
pub mod usage;
pub mod version;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::spec::{AgentSpec, Cli};
use crate::state::bounded::{self, Links};
pub use failed_turn::TurnError;
pub use version::Version;

/// Every kind of CLI, in a fixed order.
pub const ALL: [Cli; 7] = [
    Cli::Claude,
    Cli::Codex,
    Cli::Gemini,
    Cli::Pi,
    Cli::Opencode,
    Cli::Copilot,
    Cli::Custom,
];
/// The CLIs phoenix writes hook files for (`custom` has none), in a fixed order.
pub const HOOKED: [Cli; 6] = [
    Cli::Claude,
    Cli::Codex,
    Cli::Gemini,
    Cli::Pi,
    Cli::Opencode,
    Cli::Copilot,
];
/// A CLI settings, hooks or trust file larger than this is not read.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// The file of `cli`'s project MCP servers in `workdir`, when it is not its hook file (Claude
/// Code's `.mcp.json`; Gemini CLI reads them from its hook file).
pub fn mcp_path_in(cli: Cli, workdir: &std::path::Path) -> Option<std::path::PathBuf> {
    own_mcp_file(cli).map(|f| workdir.join(f))
}

/// The file of `cli`'s project MCP servers when it is not its hook file.
pub fn own_mcp_file(cli: Cli) -> Option<&'static str> {
    let adapter = cli.adapter();
    adapter
        .mcp_file()
        .filter(|f| Some(*f) != adapter.hook_file())
}

/// The hook file of `cli` in `workdir`, where the CLI reads project hooks from.
pub fn hook_path_in(cli: Cli, workdir: &std::path::Path) -> Option<std::path::PathBuf> {
    cli.adapter().hook_file().map(|p| workdir.join(p))
}

/// The hooks phoenix installs for `cli` at version `installed` (`None`: not known): the
/// adapter's entries, with only the events of the proven version they are
/// made for (`version::made_for`). A CLI with no proven versions gets its entries as they are.
pub fn hooks_for(cli: Cli, installed: Option<Version>) -> Vec<version::Fitted> {
    let adapter = cli.adapter();
    let entries = adapter.hook_entries();
    let proven = adapter.proven();
    if proven.is_empty() {
        return entries
            .into_iter()
            .map(|entry| version::Fitted {
                matcher: entry.matcher.map(str::to_string),
                entry,
            })
            .collect();
    }
    version::fit(entries, version::made_for(proven, installed))
}

impl Cli {
    /// What phoenix knows about this CLI.
    pub fn adapter(self) -> &'static dyn AgentCli {
        match self {
            Cli::Claude => &claude::Claude,
            Cli::Codex => &codex::Codex,
            Cli::Gemini => &gemini::Gemini,
            Cli::Pi => &pi::Pi,
            Cli::Copilot => &copilot::Copilot,
            Cli::Opencode => &opencode::Opencode,
            Cli::Custom => &custom::Custom,
        }
    }
}

/// One CLI's ways. The defaults describe a CLI phoenix knows nothing special about.
pub trait AgentCli: Sync {
    // ---- Versions.

    /// The CLI's name as people know it (`Claude Code`), for messages.
    fn display_name(&self) -> &'static str {
        "the agent's program"
    }

    /// The versions phoenix was proven with (its real-CLI suites passed against them), oldest
    /// first, each with what it knows; none for a CLI phoenix knows no versions of.
    fn proven(&self) -> &'static [version::Proven] {
        &[]
    }

    /// The npm package the CLI ships in: its `package.json` tells the installed version
    /// without starting the CLI.
    fn npm_package(&self) -> Option<&'static str> {
        None
    }

    /// The file names of the CLI's own program (`claude`, and `claude.exe` that npm's link
    /// points at). Only a program so named is asked its `--version`: phoenix never starts a
    /// wrapper script or another program to learn a version.
    fn program_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// The version in what `--version` printed, when the output is this CLI's (the agent's
    /// command may start something else first, whose version says nothing).
    fn version_in(&self, _output: &str) -> Option<Version> {
        None
    }

    // ---- Starting.

    /// The argv to start a new session, from the agent's command as written (with a leading
    /// `phoenix` already resolved to this binary).
    fn base_argv(&self, argv: Vec<String>) -> Vec<String> {
        argv
    }

    /// The CLI's resume form of `base` (the agent's base argv) for session `id`. `None` when
    /// the CLI has no known resume form.
    fn resume_argv(&self, _base: Vec<String>, _id: &str) -> Option<Vec<String>> {
        None
    }

    /// What the CLI prints (lowercase) when it refuses to resume a session id it has no
    /// conversation for, before the session comes up: the one sign that the id cannot be
    /// resumed (a resume killed before it showed life is no such sign).
    fn resume_refusals(&self) -> &'static [&'static str] {
        &[]
    }

    /// The flags that choose the model on its command line (the first is the one to name).
    fn model_flags(&self) -> &'static [&'static str] {
        &[]
    }

    /// Where the CLI takes the model from when its command line names none.
    fn model_settings(&self) -> Option<&'static str> {
        None
    }

    // ---- Hooks: what phoenix installs, and the trust the CLI needs to run them.

    /// Where the CLI reads project hooks from, relative to the agent's workdir; `None` when
    /// phoenix installs no hook file for it.
    fn hook_file(&self) -> Option<&'static str> {
        None
    }

    /// Where the CLI reads a project's MCP servers, relative to the workdir: its hook file
    /// (Gemini CLI), a file of their own (Claude Code's `.mcp.json`); `None`: phoenix writes
    /// no MCP server entry for it.
    fn mcp_file(&self) -> Option<&'static str> {
        None
    }

    /// The key of its hook file that lists the project MCP servers it may start without
    /// asking (Claude Code's `enabledMcpjsonServers`), if it asks.
    fn mcp_enable_key(&self) -> Option<&'static str> {
        None
    }

    /// Inside a sandbox: the files and directories the CLI keeps its sessions in (writable:
    /// resume needs them) and its settings in its home (read-only: they could switch off
    /// phoenix's hooks), for home `home` and the agent's environment `env`.
    fn sandbox_home(
        &self,
        home: &std::path::Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
        let _ = (home, env);
        (Vec::new(), Vec::new())
    }

    /// Inside a sandbox: what the CLI reads its settings (and so phoenix's hooks) from in a
    /// workdir, relative to it: kept read-only.
    fn sandbox_project_settings(&self) -> &'static [&'static str] {
        &[]
    }

    /// Every file phoenix writes into the agent's workdir for this CLI (relative): its own,
    /// never the agent's work. The hook file, and whatever else the CLI needs.
    fn own_files(&self) -> Vec<&'static str> {
        self.hook_file().into_iter().collect()
    }

    /// The hooks phoenix installs, in the order they are written.
    fn hook_entries(&self) -> Vec<HookEntry> {
        Vec::new()
    }

    /// Does the CLI need trust recorded (outside the workdir) before it runs project hooks?
    fn needs_trust(&self) -> bool {
        false
    }

    /// Does the CLI stop at its trust dialog even without phoenix's hooks (so the trust is
    /// recorded for every agent of it, not only for one whose hooks are installed)?
    fn trusts_without_hooks(&self) -> bool {
        false
    }

    /// Record that trust. `Ok(None)`: nothing to do. The caller holds the lock and has checked
    /// that the hook file holds phoenix's entries for the agent.
    fn trust(&self, _request: &TrustRequest<'_>) -> Result<Option<Trusted>, String> {
        Ok(None)
    }

    /// The background job of the CLI's own (Claude Code's `claude --bg`) a hook fired in, from
    /// the hook's environment (`env`) and its payload's session id; `None`: the agent's own.
    fn background_job_of_hook(
        &self,
        _env: &dyn Fn(&str) -> Option<String>,
        _session_id: Option<&str>,
    ) -> Option<claude::background::JobRef> {
        None
    }

    /// The teammate of an agent team (Claude Code's, in its own tmux pane) whose CLI ran a
    /// hook, from the hook's environment (`env`) and the processes above it (`ancestors`,
    /// nearest first, with their arguments, read as far as asked); `None`: the agent's own.
    fn teammate_of_hook(
        &self,
        _env: &dyn Fn(&str) -> Option<String>,
        _ancestors: &mut dyn Iterator<Item = (u32, Vec<String>)>,
    ) -> Option<claude::teams::Teammate> {
        None
    }

    /// The CLI's own background jobs recorded for the agent (newest first), as each says now;
    /// `None` for a CLI without them.
    fn background_jobs(
        &self,
        _dir: &crate::state::AgentDir,
    ) -> Option<Vec<claude::background::BackgroundJob>> {
        None
    }

    /// What a person is asked, when `screen` (the CLI's pane) shows its folder-trust dialog
    /// for `workdir`.
    fn trust_question(&self, _screen: &str, _workdir: &Path) -> Option<String> {
        None
    }

    /// The file the CLI reads its folder trust from, for an agent whose environment is
    /// `lookup` (`None`: it has none phoenix knows); watched while the agent waits for it.
    fn trust_file(&self, _lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        None
    }

    /// Whether the CLI trusts `workdir` (symlinks resolved) by `file` now, read without
    /// changing anything; an error when it cannot be told.
    fn trusts(&self, _file: &Path, _workdir: &Path) -> Result<bool, String> {
        Err("this CLI's trust is not known to phoenix".into())
    }

    /// A comment for `phoenix hooks show` on the trust the wrapper records before each start.
    fn trust_note(&self) -> Option<&'static str> {
        None
    }

    /// A config file (relative to the workdir) that may take an optional `notify = [argv]`
    /// line calling `phoenix hook turn-complete`, which phoenix shows but never installs.
    fn notify_config(&self) -> Option<&'static str> {
        None
    }

    // ---- What the hooks read and print.

    /// The exact stdout of a hook for `reply`.
    fn render(&self, reply: &Reply) -> String {
        render_hook_specific(reply)
    }

    /// Does a payload with this event name and these fields come from this CLI? Asked only
    /// when the hook command line does not say (`--cli`).
    fn claims_payload(&self, _event: &str, _has_field: &dyn Fn(&str) -> bool) -> bool {
        false
    }

    /// A failed shell call, read from the tool response (`tool_response`) of a post-tool
    /// payload in this CLI's shape.
    fn shell_exit_in_response<'a>(&self, _response: &'a Value) -> Option<ShellExit<'a>> {
        None
    }

    /// The exit code of shell call `call_id`, from the session file at `transcript`, for a CLI
    /// whose tool payload has no failure signal.
    fn shell_exit_code(&self, _transcript: &Path, _call_id: &str) -> Option<i64> {
        None
    }

    /// The file that holds the session a hook payload's `transcript_path` names: as reported,
    /// unless the CLI reports another one (Gemini after a resume, see `gemini::session_chat`).
    fn session_file(&self, reported: &Path) -> std::path::PathBuf {
        reported.to_path_buf()
    }

    /// The session file of session `id`, for a CLI whose hook payloads do not all name it
    /// (Copilot's SessionStart); `None` when only a payload's `transcript_path` tells.
    fn session_file_of(&self, _id: &str) -> Option<PathBuf> {
        None
    }

    /// The API error the last turn ended in, read from the session file at `transcript`, for a
    /// CLI that has no hook of its own for such a turn.
    fn last_turn_error(&self, _transcript: &Path) -> Option<TurnError> {
        None
    }

    /// The tokens one parsed line of this CLI's session record reports (`None`: none, or not
    /// this CLI's shape).
    fn usage_record(&self, _record: &Value) -> Option<usage::Record> {
        None
    }

    /// The files that hold the usage of the session whose record is `transcript`: that file,
    /// and any the CLI keeps beside it (Claude Code's subagents).
    fn usage_files(&self, transcript: &Path) -> Vec<PathBuf> {
        vec![transcript.to_path_buf()]
    }

    /// Will the CLI really compact now? Asked by the pre-compact hook (`trigger` is `auto` or
    /// `manual`; `cwd` the session's directory).
    fn compacts_now(&self, _trigger: &str, _transcript: Option<&Path>, _cwd: &Path) -> bool {
        true
    }

    /// After a compaction, does the CLI go on without a SessionStart? Then the context
    /// phoenix gives at session start is given again with the next prompt.
    fn compaction_skips_session_start(&self) -> bool {
        false
    }

    /// Is `prompt` one the CLI submitted itself (a background agent's result, a slash
    /// command's expansion, a reminder), not one somebody typed? Then it starts a turn but is
    /// not a task.
    fn machine_prompt(&self, _prompt: &str) -> bool {
        false
    }

    /// Does the CLI drop the SessionStart context of a resumed session? Then it is held back
    /// for the first prompt.
    fn resume_drops_session_start_context(&self) -> bool {
        false
    }

    // ---- The model's own words.

    /// Are the model's `->continuity:` markers read from its own text at the end of each turn
    /// (the turn-end hook's payload, else `last_turn_text`)? Then its pane is never taken for
    /// its voice, and its usage comes only from its session records. Without a turn-end hook
    /// (a custom CLI) they are read from the pane, and only with the session's marker key.
    fn markers_at_turn_end(&self) -> bool {
        false
    }

    /// The text the model wrote in the last turn of the session at `transcript` (its
    /// assistant messages since the last prompt: a turn-end payload carries only the last
    /// one), or `None` when the file's end does not even contain `needle` (the cheap look,
    /// made first). Tool output and prompts are never part of it.
    fn last_turn_text(&self, _transcript: &Path, _needle: &str) -> Option<String> {
        None
    }

    // ---- Signs of life.

    /// Does phoenix install a session-start hook that gives the CLI its startup context?
    /// Without one the wrapper pastes it into the pane, and does not type a continue prompt.
    fn has_session_start_hook(&self) -> bool {
        true
    }

    /// Does the CLI run its session-start hook at launch, before the first prompt? When it
    /// runs it only with a prompt, waiting for it would only hold that prompt up.
    fn session_start_at_launch(&self) -> bool {
        true
    }

    /// Is the CLI ready for typed input once its session-start hook has run (its input box
    /// comes next)? Then a short still screen after the hook is enough before the continue
    /// prompt; otherwise the wrapper waits for a longer still screen.
    fn ready_after_session_start(&self) -> bool {
        false
    }

    /// Text the CLI's screen shows only once it takes typed input (a footer), for a CLI whose
    /// still screen is no sign of that (Copilot CLI draws a resumed session, then loads for
    /// seconds, ignoring Enter): the continue prompt waits for it. `None`: a still screen is.
    fn ready_text(&self) -> Option<&'static str> {
        None
    }

    /// The approval prompts the CLI shows when a tool call waits for a person's yes or no (the
    /// watchdog reads them off the screen); none when it has none known.
    fn approval_prompts(&self) -> &'static [ApprovalPrompt] {
        &[]
    }

    /// The glyphs that begin the CLI's input box line (where a person types; also the echo of
    /// a prompt in its history). Text with such a line below it is conversation, never one of
    /// the CLI's dialogs, which it draws in place of its input box. A CLI phoenix knows
    /// nothing about may use any of the known ones.
    fn input_prompts(&self) -> &'static [&'static str] {
        &[">", "❯", "›"]
    }

    /// May a started CLI show life only in its pane (no hook at launch)? Then a change in the
    /// pane counts as a sign of life too.
    fn life_shows_in_pane(&self) -> bool {
        true
    }

    // ---- Its own sandbox, inside phoenix's.

    /// What phoenix sets for the CLI's own sandbox when it runs the CLI inside its own
    /// (`own_sandbox::plan` asks only then). By default nothing, and nothing said: a CLI
    /// phoenix knows nothing about.
    fn own_sandbox(&self, cmd: own_sandbox::Command<'_>) -> own_sandbox::OwnSandbox {
        own_sandbox::OwnSandbox::unchanged(cmd.argv)
    }
}

/// A CLI's approval prompt as its screen shows it: one of the questions, and below it one of
/// the answers offered (lowercase). Both must be there: a question alone may be quoted in
/// ordinary output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalPrompt {
    pub questions: &'static [&'static str],
    pub answers: &'static [&'static str],
}

/// Claude Code's permission dialog (2.1): "Do you want to proceed?", "Do you want to make
/// this edit to x?", with "No, and tell Claude what to do differently (esc)". Its
/// Notification hook says so first; the screen covers hooks that do not run.
pub const CLAUDE_APPROVAL: ApprovalPrompt = ApprovalPrompt {
    questions: &[
        "do you want to proceed?",
        "do you want to make this edit to",
        "do you want to create ",
    ],
    answers: &["no, and tell claude what to do differently"],
};

/// Codex CLI's approval overlay (0.169, read from its binary): "Would you like to run the
/// following command?" and its siblings, with "Yes, just this once", "Yes, and don't ask
/// again …", "No, and tell Codex what to do differently".
pub const CODEX_APPROVAL: ApprovalPrompt = ApprovalPrompt {
    questions: &[
        "would you like to run the following command?",
        "would you like to make the following edits?",
        "would you like to grant these permissions?",
        "would you like to send input to the existing terminal?",
        "do you want to approve network access to",
    ],
    answers: &[
        "no, and tell codex what to do differently",
        "no, continue without running it",
        "yes, just this once",
        "yes, and don't ask again",
    ],
};

/// Gemini CLI's tool confirmation (0.61, read from its bundle): "Allow execution of [Shell]?",
/// "Apply this change?", "Do you want to proceed?", with "Allow once" and "No, suggest
/// changes (esc)".
pub const GEMINI_APPROVAL: ApprovalPrompt = ApprovalPrompt {
    questions: &[
        "allow execution of",
        "apply this change?",
        "do you want to proceed?",
    ],
    answers: &["no, suggest changes (esc)", "allow once"],
};

/// One hook phoenix installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEntry {
    /// The CLI's event name.
    pub event: &'static str,
    pub matcher: Option<&'static str>,
    /// `phoenix hook <hook>`.
    pub hook: &'static str,
    /// In the CLI's unit (seconds or milliseconds).
    pub timeout: u64,
    /// The handler's `name`, for a CLI that identifies handlers by it; empty: none.
    pub name: &'static str,
}

pub(crate) const fn entry(
    event: &'static str,
    matcher: Option<&'static str>,
    hook: &'static str,
    timeout: u64,
    name: &'static str,
) -> HookEntry {
    HookEntry {
        event,
        matcher,
        hook,
        timeout,
        name,
    }
}

/// A SessionStart matcher without `resume` silently skips resumed sessions
/// (thedotmack/claude-mem#3950).
pub(crate) const SESSION_STARTS: Option<&str> = Some("startup|resume|clear|compact");

/// What a hook answers the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nothing,
    /// Context for the model (`additionalContext` of `event`).
    Context {
        event: String,
        text: String,
    },
    /// Feedback about the tool call that just ran (the CLI's blocking feedback channel).
    Feedback {
        event: String,
        reason: String,
    },
}

/// The Claude Code shape, also Codex's (and the answer when the CLI is unknown):
/// `hookSpecificOutput` JSON, `decision: block` for feedback, nothing when there is nothing.
/// Where to fix the model of an agent whose model cannot be used: the flag in its command
/// when the command gives one, else the CLI's settings it came from (or the flag to add);
/// both when phoenix cannot tell.
pub fn model_fix(cli: Cli, argv: &[String]) -> String {
    let adapter = cli.adapter();
    let flags = adapter.model_flags();
    let given = flags.iter().find(|f| {
        argv.iter()
            .skip(1)
            .any(|a| a == *f || a.strip_prefix(*f).is_some_and(|r| r.starts_with('=')))
    });
    match (given, flags.first(), adapter.model_settings()) {
        (Some(flag), _, _) => {
            format!("fix `{flag}` in the agent's `command` in phoenix.toml")
        }
        (None, Some(flag), Some(settings)) => format!(
            "the agent's `command` gives no `{flag}`, so the model comes from {settings}: fix it there, or give `{flag}` in the agent's `command` in phoenix.toml"
        ),
        _ => "fix the model the agent's `command` in phoenix.toml gives, or the one its CLI's own settings give".to_string(),
    }
}

pub fn render_hook_specific(reply: &Reply) -> String {
    let value = match reply {
        Reply::Nothing => return String::new(),
        Reply::Context { event, text } => {
            json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})
        }
        Reply::Feedback { reason, .. } => json!({"decision": "block", "reason": reason}),
    };
    format!("{value}\n")
}

/// A shell call that exited non-zero, as a CLI's tool response tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellExit<'a> {
    pub code: i64,
    /// The first line of the command's output, when the response has one apart.
    pub first_line: Option<&'a str>,
}

/// A failed shell call in a tool response, in any CLI's shape: the payload tells which CLI
/// sent it only by its shape, and the shapes cannot be mistaken for each other.
pub fn shell_exit_in_response(response: &Value) -> Option<ShellExit<'_>> {
    ALL.into_iter()
        .find_map(|cli| cli.adapter().shell_exit_in_response(response))
}

/// The CLI that sent a hook payload, judged by what only that CLI sends.
pub fn guess_from_payload(event: &str, has_field: &dyn Fn(&str) -> bool) -> Option<Cli> {
    // pi first: its extension names its event (`pi_event`), no other CLI does. Then Copilot:
    // it claims only fields and an event no other CLI sends, and stamps its payloads with a
    // `timestamp` as Gemini does. Then Gemini: its payloads are the most distinct (event
    // names, a `timestamp` on all).
    [
        Cli::Pi,
        Cli::Copilot,
        Cli::Gemini,
        Cli::Codex,
        Cli::Claude,
        Cli::Opencode,
        Cli::Custom,
    ]
    .into_iter()
    .find(|cli| cli.adapter().claims_payload(event, has_field))
}

/// Is this hook handler one phoenix installed for `agent`? Recognised by its command:
/// a program named `phoenix…` called with `hook … --agent AGENT`, wherever the binary lives.
pub fn is_phoenix_handler(handler: &Value, agent: &str) -> bool {
    let Some(command) = handler.get("command").and_then(Value::as_str) else {
        return false;
    };
    let Some(argv) = shlex::split(command) else {
        return false;
    };
    let program = argv
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .unwrap_or("");
    program.starts_with("phoenix")
        && argv.iter().any(|a| a == "hook")
        && argv.windows(2).any(|w| w[0] == "--agent" && w[1] == agent)
}

/// phoenix's handlers for `agent` in a hook file's text (`file` names it in errors), as the
/// JSON text of a table `{event: [{"argv": [...], "timeout": N, "command": "..."}]}`: each
/// command line split into the argv it stands for, for an extension or plugin that runs it
/// without a shell (pi, opencode), and the line itself (opencode's plugin runs a handler only
/// while the hook file still holds it). JSON is a JavaScript expression: the table goes into
/// their code as data.
pub fn handler_argv_table(hooks_text: &str, agent: &str, file: &str) -> Result<String, String> {
    let root: Value =
        serde_json::from_str(hooks_text).map_err(|e| format!("`{file}` is not JSON: {e}"))?;
    let mut table = serde_json::Map::new();
    for (event, groups) in root
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let handlers: Vec<Value> = groups
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g.get("hooks").and_then(Value::as_array))
            .flatten()
            .filter(|h| is_phoenix_handler(h, agent))
            .filter_map(|h| {
                let argv = shlex::split(h.get("command")?.as_str()?)?;
                let timeout = h.get("timeout").and_then(Value::as_u64).unwrap_or(5_000);
                Some(serde_json::json!({"argv": argv, "timeout": timeout, "command": h.get("command")?}))
            })
            .collect();
        if !handlers.is_empty() {
            table.insert(event.clone(), Value::Array(handlers));
        }
    }
    Ok(serde_json::to_string_pretty(&Value::Object(table)).expect("JSON"))
}

/// What a CLI's `trust` works from.
pub struct TrustRequest<'a> {
    pub agent: &'a AgentSpec,
    /// The agent's workdir as the CLI sees it through getcwd(): symlinks resolved.
    pub workdir: &'a Path,
    /// The hook file's text, holding phoenix's entries for the agent (empty for a CLI that
    /// `trusts_without_hooks` when they are not installed).
    pub hooks_text: &'a str,
    /// An environment variable as the agent sees it: its `env`, else phoenix's; never empty.
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
}

/// What `trust` changed: the file and one line per entry added or updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    pub file: PathBuf,
    pub entries: Vec<String>,
}

/// A trust file's new text and what changed in it, or `None`.
pub type Planned = Option<(String, Vec<String>)>;

/// A trust file's text, `None` when it does not exist yet.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, String> {
    match bounded::read_string(path, MAX_CONFIG_BYTES, Links::Follow) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Write a planned trust file atomically, keeping its mode (0600 when new).
pub(crate) fn write_planned(file: &Path, planned: Planned) -> Result<Option<Trusted>, String> {
    let Some((text, entries)) = planned else {
        return Ok(None);
    };
    if let Some(parent) = file.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
    }
    let mode = fs::metadata(file)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    crate::state::atomic_write_mode(file, text.as_bytes(), mode)
        .map_err(|e| format!("cannot write `{}`: {e}", file.display()))?;
    Ok(Some(Trusted {
        file: file.to_path_buf(),
        entries,
    }))
}

pub(crate) fn first_line(e: &impl std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    /// The unknown model's fix names where the model came from: the flag the command gives,
    /// else the CLI's settings (and the flag to give instead); both for a custom CLI.
    #[test]
    fn the_models_fix_names_where_it_came_from() {
        let argv = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let fix = |cli, command: &str| super::model_fix(cli, &argv(command));
        assert_eq!(
            fix(Cli::Claude, "claude --model opus"),
            "fix `--model` in the agent's `command` in phoenix.toml"
        );
        assert_eq!(
            fix(Cli::Codex, "codex -m o3"),
            "fix `-m` in the agent's `command` in phoenix.toml"
        );
        assert_eq!(
            fix(Cli::Gemini, "gemini --model=gemini-x"),
            "fix `--model` in the agent's `command` in phoenix.toml"
        );
        let settings = fix(Cli::Claude, "claude --dangerously-skip-permissions");
        assert!(
            settings.starts_with("the agent's `command` gives no `--model`, so the model comes from Claude Code's settings"),
            "{settings}"
        );
        assert!(fix(Cli::Codex, "codex").contains("~/.codex/config.toml"));
        assert!(fix(Cli::Gemini, "gemini").contains("`model.name` in .gemini/settings.json"));
        // The program itself is no flag: a CLI named `--model` would be odd, but not a flag.
        assert!(fix(Cli::Claude, "--model").contains("Claude Code's settings"));
        assert_eq!(
            fix(Cli::Custom, "my-cli --model x"),
            "fix the model the agent's `command` in phoenix.toml gives, or the one its CLI's own settings give"
        );
    }

    use super::*;

    #[test]
    fn hooked_are_exactly_the_clis_with_a_hook_file() {
        let with_file: Vec<Cli> = ALL
            .into_iter()
            .filter(|c| c.adapter().hook_file().is_some())
            .collect();
        assert_eq!(with_file, HOOKED);
        for cli in ALL {
            let a = cli.adapter();
            assert_eq!(
                a.hook_file().is_some(),
                !a.hook_entries().is_empty(),
                "{cli}"
            );
        }
    }

    /// A workdir holding only what phoenix wrote holds no work of the agent's: the hook file
    /// and, for pi, the extension written from it.
    #[test]
    fn own_files_are_the_hook_file_and_what_the_cli_needs_beside_it() {
        for cli in ALL {
            let a = cli.adapter();
            let own = a.own_files();
            assert_eq!(own.first().copied(), a.hook_file(), "{cli}");
        }
        assert!(Cli::Pi.adapter().own_files().contains(&pi::EXTENSION_FILE));
    }

    #[test]
    fn every_hooked_cli_gets_the_same_phoenix_hooks() {
        let hooks = |cli: Cli| {
            let mut h: Vec<&str> = cli
                .adapter()
                .hook_entries()
                .iter()
                .map(|e| e.hook)
                .collect();
            h.sort_unstable();
            h.dedup();
            h
        };
        let common = [
            "heartbeat",
            "pre-compact",
            "pre-tool",
            "prompt",
            "session-end",
            "session-start",
            "stop",
        ];
        for cli in HOOKED {
            let h = hooks(cli);
            assert!(common.iter().all(|c| h.contains(c)), "{cli}: {h:?}");
        }
    }

    /// Per-CLI knowledge stays here: outside `agent_cli` no code branches on the kind of CLI
    /// (a match arm, `matches!`, `==`/`!=` on a `Cli::…`). The enum's own name table in
    /// `spec` (`impl Cli`) is its identity, not knowledge about a CLI. Test modules may name
    /// kinds freely.
    #[test]
    fn no_code_outside_agent_cli_branches_on_the_cli_kind() {
        let kinds = [
            "Cli::Claude",
            "Cli::Codex",
            "Cli::Gemini",
            "Cli::Pi",
            "Cli::Copilot",
            "Cli::Opencode",
            "Cli::Custom",
        ];
        let mut found = Vec::new();
        for (rel, text) in crate::text::crate_sources() {
            if rel.starts_with("agent_cli/") || rel.ends_with("tests.rs") {
                continue;
            }
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let mut in_name_table = false;
            for (n, line) in code.lines().enumerate() {
                if line == "impl Cli {" {
                    in_name_table = true;
                }
                if in_name_table {
                    in_name_table = line != "}";
                    continue;
                }
                // A kind as a pattern or compared; `None => Cli::Custom` (a value) is fine.
                let branches = kinds.iter().any(|k| {
                    [
                        format!("{k} =>"),
                        format!("{k} |"),
                        format!("| {k}"),
                        format!("== {k}"),
                        format!("!= {k}"),
                        format!("== Some({k}"),
                        format!("!= Some({k}"),
                    ]
                    .iter()
                    .any(|form| line.contains(form.as_str()))
                        || (line.contains("matches!") && line.contains(k))
                });
                if branches {
                    found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "ask `cli.adapter()` instead of branching on the CLI kind:\n{}",
            found.join("\n")
        );
    }

    /// What each CLI answers, as one table: the old `match` arms over the kind, in one place.
    #[test]
    fn each_cli_answers_as_its_notes_say() {
        // (cli, session-start hook, at launch, life in pane, needs trust, compaction without
        //  SessionStart, resume drops context, notify config)
        let table = [
            (Cli::Claude, true, true, false, true, false, false, None),
            (
                Cli::Codex,
                true,
                false,
                true,
                true,
                false,
                false,
                Some(".codex/config.toml"),
            ),
            (Cli::Gemini, true, true, true, true, true, true, None),
            (Cli::Pi, true, true, true, true, true, false, None),
            (Cli::Copilot, true, false, true, true, false, false, None),
            (Cli::Opencode, true, false, true, true, false, false, None),
            (Cli::Custom, false, true, true, false, false, false, None),
        ];
        for (cli, hook, launch, pane, trust, compaction, resume, notify) in table {
            let a = cli.adapter();
            assert_eq!(a.has_session_start_hook(), hook, "{cli}");
            assert_eq!(a.session_start_at_launch(), launch, "{cli}");
            assert_eq!(a.life_shows_in_pane(), pane, "{cli}");
            assert_eq!(a.needs_trust(), trust, "{cli}");
            assert_eq!(a.trust_note().is_some(), trust, "{cli}");
            assert_eq!(a.compaction_skips_session_start(), compaction, "{cli}");
            assert_eq!(a.resume_drops_session_start_context(), resume, "{cli}");
            assert_eq!(a.notify_config(), notify, "{cli}");
            // Only Claude Code is known to wait for input as soon as its SessionStart ran.
            assert_eq!(a.ready_after_session_start(), cli == Cli::Claude, "{cli}");
        }
        // Only Gemini ever skips a compaction, and only an `auto` one.
        let cwd = Path::new("/nonexistent-phoenix");
        for cli in ALL {
            assert!(cli.adapter().compacts_now("manual", None, cwd), "{cli}");
        }
        assert!(Cli::Claude.adapter().compacts_now("auto", None, cwd));
        // Only Codex and Gemini read a failed turn from their session file (Copilot too, in
        // its own shape, below).
        let failed = r#"{"id":"e1","type":"error","content":"[API Error: 400]"}"#;
        let tmp = tempfile::tempdir().unwrap();
        let chat = tmp.path().join("chat.jsonl");
        fs::write(&chat, format!("{failed}\n")).unwrap();
        for (cli, reads) in [
            (Cli::Claude, false),
            (Cli::Codex, true),
            (Cli::Gemini, true),
            (Cli::Pi, false),
            (Cli::Copilot, false),
            (Cli::Opencode, false),
            (Cli::Custom, false),
        ] {
            assert_eq!(
                cli.adapter().last_turn_error(&chat).is_some(),
                reads,
                "{cli}"
            );
        }
    }

    /// Every hooked CLI's hooks, made for each version it was proven with, name only events
    /// and matcher names that version knows (an unknown event stops Claude Code 2.1.197 at a
    /// "Settings Warning"), and lose none of phoenix's hooks on the way.
    #[test]
    fn the_hooks_made_for_each_proven_version_are_what_that_version_knows() {
        for cli in HOOKED {
            let a = cli.adapter();
            assert!(!a.proven().is_empty(), "{cli} has proven versions");
            let versions: Vec<Version> = a.proven().iter().map(|p| p.version).collect();
            let mut sorted = versions.clone();
            sorted.sort();
            assert_eq!(versions, sorted, "{cli}: proven oldest first");
            let wanted: Vec<&str> = a.hook_entries().iter().map(|e| e.hook).collect();
            for p in a.proven() {
                let made = hooks_for(cli, Some(p.version));
                for f in &made {
                    assert!(p.events.contains(&f.entry.event), "{cli} {}", p.version);
                    // Every name a matcher lists is one the newest proven version sends.
                    let newest = a.proven().last().unwrap();
                    let known = newest
                        .matcher_values
                        .iter()
                        .find(|(e, _)| *e == f.entry.event);
                    if let (Some((_, values)), Some(m)) = (known, &f.matcher) {
                        assert!(m.split('|').all(|v| values.contains(&v)), "{cli} {m}");
                    }
                }
                let got: Vec<&str> = made.iter().map(|f| f.entry.hook).collect();
                assert_eq!(got, wanted, "{cli} {}: every hook phoenix reads", p.version);
            }
        }
        // A version not known gets what the oldest proven one knows.
        assert_eq!(
            hooks_for(Cli::Claude, None),
            hooks_for(Cli::Claude, Some(claude::PROVEN[0].version))
        );
        // None of the events new in Claude Code 2.1.332 is read by phoenix (it installs none).
        let new_events = [
            "PreModelSwitch",
            "PostModelSwitch",
            "DirectoryAdded",
            "PreSkillShellCommand",
        ];
        for p in claude::PROVEN {
            for f in hooks_for(Cli::Claude, Some(p.version)) {
                assert!(!new_events.contains(&f.entry.event));
            }
        }
    }

    #[test]
    fn hook_output_per_cli() {
        let nothing = |cli: Cli| cli.adapter().render(&Reply::Nothing);
        assert_eq!(nothing(Cli::Gemini), "{}\n");
        assert_eq!(nothing(Cli::Claude), "");
        assert_eq!(nothing(Cli::Codex), "");
        assert_eq!(nothing(Cli::Custom), "");
        assert_eq!(nothing(Cli::Copilot), "");
        let context = Reply::Context {
            event: "SessionStart".into(),
            text: "ctx".into(),
        };
        assert_eq!(
            Cli::Copilot.adapter().render(&context),
            "{\"additionalContext\":\"ctx\"}\n"
        );
        assert_eq!(nothing(Cli::Opencode), "");
        let payload = |event: &str, fields: &[&str]| {
            let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            guess_from_payload(event, &|f| fields.iter().any(|x| x == f))
        };
        assert_eq!(payload("AfterTool", &[]), Some(Cli::Gemini));
        assert_eq!(payload("SessionStart", &["timestamp"]), Some(Cli::Gemini));
        assert_eq!(payload("Stop", &["turn_id"]), Some(Cli::Codex));
        assert_eq!(
            payload("Stop", &["turn_id", "timestamp"]),
            Some(Cli::Gemini)
        );
        assert_eq!(payload("PostToolUse", &["session_id"]), None);
        // Copilot stamps `timestamp` too, and is told by what only it sends.
        assert_eq!(
            payload("PostToolUse", &["timestamp", "tool_result"]),
            Some(Cli::Copilot)
        );
        assert_eq!(
            payload("SessionStart", &["timestamp", "initial_prompt"]),
            Some(Cli::Copilot)
        );
        assert_eq!(payload("ErrorOccurred", &["timestamp"]), Some(Cli::Copilot));
    }

    #[test]
    fn resume_forms_per_cli() {
        let base = |p: &str| vec![p.to_string(), "-m".to_string(), "x".to_string()];
        assert_eq!(
            Cli::Claude
                .adapter()
                .resume_argv(base("claude"), "s1")
                .unwrap(),
            ["claude", "-m", "x", "--resume", "s1"]
        );
        assert_eq!(
            Cli::Gemini
                .adapter()
                .resume_argv(base("gemini"), "s1")
                .unwrap(),
            ["gemini", "-m", "x", "--resume", "s1"]
        );
        assert_eq!(
            Cli::Codex
                .adapter()
                .resume_argv(base("codex"), "s1")
                .unwrap(),
            ["codex", "resume", "s1", "-m", "x"]
        );
        assert_eq!(
            Cli::Pi.adapter().resume_argv(base("pi"), "s1").unwrap(),
            ["pi", "-m", "x", "--session", "s1"]
        );
        assert_eq!(
            Cli::Copilot
                .adapter()
                .resume_argv(base("copilot"), "s1")
                .unwrap(),
            ["copilot", "-m", "x", "--resume=s1"]
        );
        assert_eq!(
            Cli::Opencode
                .adapter()
                .resume_argv(base("opencode"), "ses_1")
                .unwrap(),
            ["opencode", "-m", "x", "--session", "ses_1"]
        );
        assert_eq!(Cli::Custom.adapter().resume_argv(base("bot"), "s1"), None);
    }
}
