//! The output-pattern tap: an agent's pane output (from `tmux pipe-pane`) read as a stream,
//! `->continuity:` commands found in it whatever the terminal did to them — ANSI escapes,
//! carriage returns, lines wrapped by the pane, reads that stop mid-line or mid-block, and
//! output far larger than any command.
//!
//! ```text
//! ->continuity:save#KEY <<<
//! Current task: …
//! >>>
//! ->continuity:load#KEY
//! ->continuity:uncertain#KEY "API rate limit handling unclear"
//! ->continuity:search#KEY "authentication patterns"
//! ->continuity:done#KEY
//! ->continuity:usage#KEY model=my-model input=1200 output=300 cache_write=0 cache_read=800
//! ->continuity:send#KEY reviewer <<< the parser is done, please review src/parse.rs >>>
//! ```
//!
//! `send` puts a message in another agent's inbox (`continuity::messages`), signed by this
//! agent; like `save`, its text may span lines up to a `>>>`.
//!
//! `usage` is how a custom CLI reports what a model call cost (the CLIs phoenix knows are
//! read from their own session records): one line per call, token counts by kind, any of
//! them left out counting 0, at most `tap_usage::MAX_PER_CALL` of a kind. It goes to the
//! agent's `usage_reported.jsonl`, which its usage ledger reads as reported (never enough
//! alone to stop the agent); it is not rate-limited like the others (a busy agent makes many
//! calls), only capped per minute.
//!
//! Only a custom CLI is read this way: a CLI with hooks (Claude Code, Codex, Gemini) has its
//! markers read from its model's own text at the end of each turn (`super::turn_markers`),
//! and its pane never speaks for it (`Gate` refuses what it shows). A custom CLI's marker
//! carries the session's marker key after its verb (`->continuity:save#KEY <<< … >>>`,
//! `super::marker_key`), which phoenix gives it at start and which no file it shows can
//! know; a marker without it is refused (`marker_refused`), not acted on.
//!
//! Only what the agent itself says counts: a marker at the start of a line (after at most
//! three spaces and one speaker bullet such as Claude Code's `⏺`), outside fenced code
//! blocks, and not the echo of text phoenix pasted into the pane (`note_injected`). So an
//! agent that `cat`s a file quoting the protocol, or shows tool output (indented under `⎿`,
//! `└`, `│`), or is given a handoff that contains a marker, does not trigger anything. What
//! does trigger is rate-limited, and the queue of actions is bounded.

use crate::state::Op;

/// A command found in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Save(String),
    Load,
    Uncertain(String),
    Search(String),
    /// Tokens of one model call, and the model.
    Usage(super::tap_usage::Reported),
    /// A message for another agent: `send AGENT <<< text >>>`.
    Send {
        to: String,
        text: String,
    },
    /// The task is done: an `[[agent_set]]` agent's set runs its `on_done`.
    Done,
}

const MARKER: &str = "->continuity:";
/// A save block larger than this is cut off (and still saved): a runaway block must not eat
/// the tap's memory.
const MAX_BLOCK: usize = 64 * 1024;
/// A line without a newline is kept up to this much while more output arrives.
const MAX_LINE: usize = 16 * 1024;

/// Lines a fenced code block is believed open for: a fence that never closes (a file cut
/// short) must not deafen the tap for good.
const MAX_FENCE_LINES: usize = 500;
/// Bullets a CLI puts before what the agent says (Claude Code `⏺`/`●`, Codex `•`, Gemini
/// `✦`). Tool output is shown under other glyphs (`⎿`, `└`, `│`) and never counts.
const SPEAKER_BULLETS: &[char] = &['⏺', '●', '•', '✦', '◆'];

/// Feed it chunks of output in order; it returns the commands completed by each chunk.
#[derive(Debug, Default)]
pub struct Tap {
    /// Bytes of an incomplete line (or escape sequence, or UTF-8 character).
    partial: Vec<u8>,
    /// Inside `save <<<` (or `send AGENT <<<`) … `>>>`.
    block: Option<Block>,
    /// An escape sequence left open at the end of the last chunk.
    escapes: crate::text::EscapeFilter,
    /// Inside a fenced code block (quoted text, not the agent's own words): its lines so far.
    fence: Option<usize>,
    /// Find markers anywhere in a line, fences or not: what text *could* trigger, for
    /// recognising the echo of injected text.
    anywhere: bool,
}

/// A block being read: the recipient of a send (none for a save), the marker key its first
/// line had, and the text so far.
#[derive(Debug)]
struct Block {
    to: Option<String>,
    key: Option<String>,
    text: String,
}

/// A command and the marker key it was said with (`->continuity:VERB#KEY`), if any: the key
/// is what tells the agent's own marker from one in text it only shows (`Gate::trusted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub command: Command,
    pub key: Option<String>,
}

impl Tap {
    pub fn new() -> Tap {
        Tap::default()
    }

    /// Every command `text` contains wherever it stands in a line: what its echo could
    /// trigger.
    pub fn commands_anywhere(text: &str) -> Vec<Command> {
        let mut tap = Tap {
            anywhere: true,
            ..Tap::default()
        };
        let mut out = tap.feed(text.as_bytes());
        out.extend(tap.feed(b"\n"));
        out
    }

    /// Every command a whole text says where the agent says it (line starts, outside
    /// fences), with its key: the model's own text of a turn (`super::turn_markers`).
    pub fn said_in(text: &str) -> Vec<Said> {
        let mut tap = Tap::new();
        let mut out = tap.feed_said(text.as_bytes());
        out.extend(tap.feed_said(b"\n"));
        out
    }

    /// The commands completed by `chunk`, without their keys.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Command> {
        self.feed_said(chunk)
            .into_iter()
            .map(|s| s.command)
            .collect()
    }

    /// The commands completed by `chunk`, each with the marker key it was said with.
    pub fn feed_said(&mut self, chunk: &[u8]) -> Vec<Said> {
        let mut out = Vec::new();
        for &b in chunk {
            if let Some(b) = self.escapes.feed(b) {
                if b == b'\n' {
                    let line = std::mem::take(&mut self.partial);
                    // A line longer than MAX_LINE was cut by bytes: never inside a character.
                    self.line(&crate::text::cut_utf8(&line), &mut out);
                } else if b == b'\r' {
                    // A carriage return redraws the line: keep what follows (progress bars),
                    // unless nothing follows (a CRLF line end).
                    self.partial.push(b'\r');
                } else if self.partial.len() < MAX_LINE {
                    self.partial.push(b);
                }
            }
        }
        out
    }

    fn line(&mut self, raw: &str, out: &mut Vec<Said>) {
        // What a carriage return left visible: the text after the last one (a trailing one
        // is a CRLF line end).
        let raw = raw.trim_end_matches('\r');
        let line = raw.rsplit('\r').next().unwrap_or(raw);
        if let Some(block) = &mut self.block {
            if let Some(end) = line.find(">>>") {
                block.text.push_str(&line[..end]);
                if let Some(block) = self.block.take() {
                    let text = block.text.trim().to_string();
                    out.push(Said {
                        command: block_command(block.to, text),
                        key: block.key,
                    });
                }
                return;
            }
            if block.text.len() < MAX_BLOCK {
                block.text.push_str(line);
                block.text.push('\n');
            }
            return;
        }
        let at = if self.anywhere {
            line.find(MARKER)
        } else {
            let quoted = line.trim_start();
            if quoted.starts_with("```") || quoted.starts_with("~~~") {
                self.fence = match self.fence {
                    Some(_) => None,
                    None => Some(0),
                };
                return;
            }
            if let Some(n) = &mut self.fence {
                *n += 1;
                if *n >= MAX_FENCE_LINES {
                    self.fence = None;
                }
                return;
            }
            said_at_line_start(line)
        };
        let Some(at) = at else {
            return;
        };
        let rest = line[at + MARKER.len()..].trim();
        let (word, arg) = rest
            .split_once(char::is_whitespace)
            .map(|(v, a)| (v, a.trim()))
            .unwrap_or((rest, ""));
        // `VERB#KEY`: the session's marker key, glued to the verb.
        let (verb, key) = match word.split_once('#') {
            Some((verb, key)) => (verb, Some(key.to_string())),
            None => (word, None),
        };
        let said = |out: &mut Vec<Said>, command: Command| {
            out.push(Said {
                command,
                key: key.clone(),
            })
        };
        match verb {
            "save" => match arg.strip_prefix("<<<") {
                Some(after) => self.open_block(None, key.clone(), after, out),
                None if !arg.is_empty() => said(out, Command::Save(unquote(arg))),
                None => {}
            },
            "send" => {
                let (to, rest) = arg
                    .split_once(char::is_whitespace)
                    .map(|(t, r)| (t, r.trim()))
                    .unwrap_or((arg, ""));
                // No recipient (`send <<< …`): nothing to send.
                if to.is_empty() || to.starts_with("<<<") {
                    return;
                }
                match rest.strip_prefix("<<<") {
                    Some(after) => self.open_block(Some(to.to_string()), key.clone(), after, out),
                    None if !rest.is_empty() => said(
                        out,
                        Command::Send {
                            to: to.to_string(),
                            text: unquote(rest),
                        },
                    ),
                    None => {}
                }
            }
            "load" => said(out, Command::Load),
            "done" => said(out, Command::Done),
            "uncertain" if !arg.is_empty() => said(out, Command::Uncertain(unquote(arg))),
            "search" if !arg.is_empty() => said(out, Command::Search(unquote(arg))),
            "usage" => {
                if let Some(r) = super::tap_usage::Reported::parse(arg) {
                    said(out, Command::Usage(r));
                }
            }
            _ => {}
        }
    }
}

impl Tap {
    /// `<<<` seen, `after` the rest of its line: the whole block if `>>>` ends it there
    /// (`save <<< text >>>`), else the start of a block that further lines complete.
    fn open_block(
        &mut self,
        to: Option<String>,
        key: Option<String>,
        after: &str,
        out: &mut Vec<Said>,
    ) {
        if let Some(end) = after.find(">>>") {
            out.push(Said {
                command: block_command(to, after[..end].trim().to_string()),
                key,
            });
            return;
        }
        let mut text = String::new();
        if !after.trim().is_empty() {
            text.push_str(after.trim());
            text.push('\n');
        }
        self.block = Some(Block { to, key, text });
    }
}

/// A finished block: a save, or a send to `to`.
fn block_command(to: Option<String>, text: String) -> Command {
    match to {
        Some(to) => Command::Send { to, text },
        None => Command::Save(text),
    }
}

/// Where the marker starts if the line is the agent speaking: at most three spaces (four
/// make a code block in Markdown, and CLIs indent tool output deeper), at most one speaker
/// bullet and its space, then the marker.
fn said_at_line_start(line: &str) -> Option<usize> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let mut rest = &line[indent..];
    if let Some(after) = rest.strip_prefix(SPEAKER_BULLETS) {
        let trimmed = after.trim_start_matches(' ');
        if trimmed.len() == after.len() {
            return None;
        }
        rest = trimmed;
    }
    rest.starts_with(MARKER).then(|| line.len() - rest.len())
}

impl Command {
    pub(super) fn verb(&self) -> &'static str {
        match self {
            Command::Save(_) => "save",
            Command::Load => "load",
            Command::Done => "done",
            Command::Uncertain(_) => "uncertain",
            Command::Search(_) => "search",
            Command::Usage(_) => "usage",
            Command::Send { .. } => "send",
        }
    }

    /// What identifies the command for echo and repeat checks: its verb and its text with
    /// whitespace collapsed (a pane may wrap or re-indent an echo), cut to a bounded length.
    pub(super) fn key(&self) -> String {
        let usage;
        let text = match self {
            Command::Save(t) | Command::Uncertain(t) | Command::Search(t) => t.as_str(),
            Command::Load | Command::Done => "",
            Command::Send { to, text } => {
                usage = format!("{to} {text}");
                usage.as_str()
            }
            Command::Usage(r) => {
                usage = format!("{:?} {:?}", r.model, r.tokens);
                usage.as_str()
            }
        };
        let mut key = self.verb().to_string();
        for word in text.split_whitespace() {
            if key.len() > 256 {
                break;
            }
            key.push(' ');
            key.push_str(word);
        }
        key
    }
}

/// The per-agent record of commands contained in recently injected text.
const INJECTED: &str = "injected.json";
/// How long the echo of injected text is recognised: the paste's echo comes at once, a CLI
/// that redraws its history may show it again a little later.
const ECHO_WINDOW_MS: u64 = 10 * 60 * 1000;
/// Injections remembered at most.
const INJECTED_KEEP: usize = 32;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Injected {
    recent: Vec<InjectedText>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct InjectedText {
    at_ms: u64,
    commands: Vec<String>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The record of injected text: a JSON state file like the others (no link followed, never a
/// FIFO, bounded, rolled back when corrupt), unsynced: losing it to a power cut costs little.
fn injected(dir: &crate::state::AgentDir) -> crate::state::JsonFile<Injected> {
    crate::state::JsonFile::new(dir, INJECTED, "injected").unsynced()
}

/// Remember the commands `text` contains, before it is pasted into the agent's pane, so that
/// the tap recognises their echo. Text without a marker (nearly all of it) costs nothing.
pub fn note_injected(dir: &crate::state::AgentDir, text: &str) -> std::io::Result<()> {
    let commands: Vec<String> = Tap::commands_anywhere(text)
        .iter()
        .map(Command::key)
        .collect();
    if commands.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    // Under the file's lock: two injections at once both keep their commands.
    injected(dir)
        .update(|record| {
            let record = record.get_or_insert_with(Injected::default);
            record
                .recent
                .retain(|r| now.saturating_sub(r.at_ms) < ECHO_WINDOW_MS);
            record.recent.push(InjectedText {
                at_ms: now,
                commands,
            });
            let over = record.recent.len().saturating_sub(INJECTED_KEEP);
            record.recent.drain(..over);
        })
        .map_err(std::io::Error::other)
}

/// Whether `command` is the echo of text phoenix injected lately.
fn is_echo(dir: &crate::state::AgentDir, command: &Command) -> bool {
    let key = command.key();
    let now = now_ms();
    injected(dir)
        .load_or_default()
        .recent
        .iter()
        .filter(|r| now.saturating_sub(r.at_ms) < ECHO_WINDOW_MS)
        .any(|r| r.commands.contains(&key))
}

/// Commands acted on per minute at most, and how long the same command is not repeated.
const RATE_PER_MINUTE: usize = 12;
const REPEAT_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);
/// Actions waiting for the worker at most; more are dropped, not queued without end.
const QUEUE: usize = 4;
/// `tap_ignored` records per minute at most (a flood of markers must not flood ops.jsonl).
const NOTES_PER_MINUTE: usize = 10;

/// A sliding one-minute window over what was let through.
#[derive(Debug, Default)]
struct Limiter {
    recent: std::collections::VecDeque<(std::time::Instant, String)>,
}

impl Limiter {
    fn admit(&mut self, key: &str, now: std::time::Instant) -> Result<(), &'static str> {
        const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= MINUTE)
        {
            self.recent.pop_front();
        }
        if self
            .recent
            .iter()
            .any(|(t, k)| k == key && now.duration_since(*t) < REPEAT_WINDOW)
        {
            return Err("the same command again within 10 s");
        }
        if self.recent.len() >= RATE_PER_MINUTE {
            return Err("more than 12 commands in a minute");
        }
        self.recent.push_back((now, key.to_string()));
        Ok(())
    }
}

/// `phoenix tap --agent NAME`: read the pane's output from stdin until it closes and act on
/// every command: save a handoff, load the latest one into the agent, note an uncertain item,
/// search and give the agent the results. Actions run on a worker thread, so the pane's output
/// is always read promptly. A failing action is logged in ops.jsonl, never fatal; what cannot
/// be logged there (an unreadable phoenix.toml) goes to `log`, which the edge hands in.
pub fn run(config: &std::path::Path, agent: &str, log: fn(&str)) -> crate::error::Result<i32> {
    // Read here, not by its wrapper: the output is kept here too.
    let keep = crate::spec::load_with(
        config,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .ok()
    .map(|spec| crate::state::FleetDir::new(&spec.fleet.state_dir).agent(agent));
    read(std::io::stdin().lock(), config, agent, keep.as_ref(), log);
    Ok(0)
}

/// Read the pane's output from `input` until it closes, acting on its commands (`run`; the
/// wrapper's own tap reads the pipe handed to it, `super::tap_host`). The output is kept in
/// `keep`'s `pane.log` as it is read (`state::pane_log`).
pub fn read(
    mut input: impl std::io::Read,
    config: &std::path::Path,
    agent: &str,
    keep: Option<&crate::state::AgentDir>,
    log: fn(&str),
) {
    let mut kept = keep.map(crate::state::pane_log::Writer::new);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Command>(QUEUE);
    let config = config.to_path_buf();
    let name = agent.to_string();
    let worker = {
        let (config, name) = (config.clone(), name.clone());
        std::thread::spawn(move || {
            for command in rx {
                super::tap_act::act(&config, &name, command, log);
            }
        })
    };
    let mut tap = Tap::new();
    let mut gate = Gate::new(&config, &name);
    // Small: a wrapper reads its pane with it for the agent's whole life.
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(kept) = &mut kept {
                    kept.feed(&buf[..n]);
                }
                for said in tap.feed_said(&buf[..n]) {
                    if let Some(c) = gate.pass(said)
                        && let Err(std::sync::mpsc::TrySendError::Full(c)) = tx.try_send(c)
                    {
                        gate.note(&c, "the tap is still busy with earlier commands");
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if let Some(kept) = &mut kept {
        kept.finish();
    }
    drop(tx);
    let _ = worker.join();
}

/// What the tap knows of its agent, from the config (read once, when the first command comes).
struct Agent {
    dir: crate::state::AgentDir,
    /// The CLI's name, when its markers are read at the end of its turns instead (a CLI with
    /// hooks): its pane is never its voice.
    turn_end_cli: Option<&'static str>,
}

/// What stands between a command found in the output and the worker: the trust check (a CLI
/// with hooks never speaks through its pane; a custom CLI's marker carries the session's key),
/// the echo check and the rate limit. Refused commands are recorded as `marker_refused`,
/// ignored ones as `tap_ignored` (together a bounded number a minute; those left unrecorded
/// are counted in the next record).
struct Gate {
    config: std::path::PathBuf,
    name: String,
    agent: Option<Agent>,
    limiter: Limiter,
    /// When the records of the last minute were written.
    notes: std::collections::VecDeque<std::time::Instant>,
    /// Records left unwritten since the last one (the flood limit).
    unrecorded: u64,
    usage: super::tap_usage::UsageGate,
}

impl Gate {
    fn new(config: &std::path::Path, name: &str) -> Gate {
        Gate {
            config: config.to_path_buf(),
            name: name.to_string(),
            agent: None,
            limiter: Limiter::default(),
            notes: Default::default(),
            unrecorded: 0,
            usage: Default::default(),
        }
    }

    fn agent(&mut self) -> Option<&Agent> {
        if self.agent.is_none() {
            let spec = crate::spec::load_with(
                &self.config,
                crate::spec::LoadOptions {
                    check_filesystem: false,
                },
            )
            .ok()?;
            let agent = spec.agent(&self.name)?;
            let cli = agent.cli;
            self.agent = Some(Agent {
                dir: crate::state::FleetDir::new(&spec.fleet.state_dir).agent(&self.name),
                turn_end_cli: cli.adapter().markers_at_turn_end().then(|| cli.as_str()),
            });
        }
        self.agent.as_ref()
    }

    /// The agent's state dir, once the config was read.
    fn dir(&mut self) -> Option<&crate::state::AgentDir> {
        self.agent().map(|a| &a.dir)
    }

    /// Why `said` is not the agent's own marker, if it is not.
    fn distrust(&mut self, said: &Said) -> Option<String> {
        let Some(agent) = self.agent() else {
            return Some("the agent is not in the config".into());
        };
        if let Some(cli) = agent.turn_end_cli {
            return Some(format!(
                "the pane of a `{cli}` agent is not its voice: its markers are read from its \
                 own text at the end of each turn"
            ));
        }
        let current = super::marker_key::current(&agent.dir);
        super::marker_key::check(current.as_deref(), said.key.as_deref())
            .err()
            .map(str::to_string)
    }

    fn pass(&mut self, said: Said) -> Option<Command> {
        if let Some(why) = self.distrust(&said) {
            self.refuse(&said.command, &why);
            return None;
        }
        let command = said.command;
        if self.dir().is_some_and(|d| is_echo(d, &command)) {
            self.note(&command, "the echo of text phoenix pasted");
            return None;
        }
        // Recorded here and now: one append, and many calls in a row are usual.
        if let Command::Usage(reported) = &command {
            if let Some(why) = reported.absurd() {
                self.refuse(&command, &why);
                return None;
            }
            let result = match self.dir().cloned() {
                Some(dir) => self.usage.record(&dir, reported),
                None => Ok(()),
            };
            if let Err(why) = result {
                self.note(&command, &why);
            }
            return None;
        }
        if let Err(why) = self
            .limiter
            .admit(&command.key(), std::time::Instant::now())
        {
            self.note(&command, why);
            return None;
        }
        Some(command)
    }

    /// A command not acted on for now (an echo, a flood): `tap_ignored`.
    fn note(&mut self, command: &Command, reason: &str) {
        self.record(Op::TapIgnored, command, reason);
    }

    /// A marker that is not the agent's own (or asks the absurd): `marker_refused`.
    fn refuse(&mut self, command: &Command, reason: &str) {
        self.record(Op::MarkerRefused, command, reason);
    }

    fn record(&mut self, op: crate::state::op::Make, command: &Command, reason: &str) {
        let now = std::time::Instant::now();
        self.notes
            .retain(|t| now.duration_since(*t) < std::time::Duration::from_secs(60));
        if self.notes.len() >= NOTES_PER_MINUTE {
            self.unrecorded = self.unrecorded.saturating_add(1);
            return;
        }
        self.notes.push_back(now);
        let unrecorded = std::mem::take(&mut self.unrecorded);
        if let Some(dir) = self.dir() {
            let _ = dir.record_op(
                op,
                serde_json::json!({"command": command.verb(), "reason": reason,
                                   "read_from": "pane", "unrecorded_before": unrecorded}),
            );
        }
    }
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<Command> {
        let mut tap = Tap::new();
        chunks.iter().flat_map(|c| tap.feed(c)).collect()
    }

    #[test]
    fn send_takes_a_recipient_and_a_block_on_one_line_or_many() {
        let out = all(&[
            b"->continuity:send reviewer <<< parser done >>>\n",
            b"\x1b[1m->continuity:send ops <<<\nline one\r\n",
            b"line two\n>>>\n->continuity:send lead \"quoted\"\n->continuity:send <<< x >>>\n",
        ]);
        let send = |to: &str, text: &str| Command::Send {
            to: to.into(),
            text: text.into(),
        };
        assert_eq!(
            out,
            [
                send("reviewer", "parser done"),
                send("ops", "line one\nline two"),
                send("lead", "quoted"),
            ]
        );
    }

    #[test]
    fn the_marker_key_is_glued_to_the_verb_and_kept_through_a_block() {
        let mut tap = Tap::new();
        let out = tap.feed_said(
            b"->continuity:save#k1 <<<\nTask: x\n>>>\n->continuity:load#k2\n\
              ->continuity:send#k3 bob <<< hi >>>\n->continuity:usage#k4 input=5\n\
              ->continuity:load\n->continuity:load#\n",
        );
        let keys: Vec<Option<&str>> = out.iter().map(|s| s.key.as_deref()).collect();
        assert_eq!(
            keys,
            [
                Some("k1"),
                Some("k2"),
                Some("k3"),
                Some("k4"),
                None,
                Some("")
            ]
        );
        assert_eq!(out[0].command, Command::Save("Task: x".into()));
        assert_eq!(out[1].command, Command::Load);
        // The key is no part of what identifies a command (its echo, its repeats).
        assert_eq!(out[1].command.key(), out[4].command.key());
        // An example that names the syntax is no command.
        assert_eq!(all(&[b"->continuity:VERB#KEY, where KEY is abc\n"]), []);
    }

    #[test]
    fn done_is_a_command_of_its_own() {
        assert_eq!(
            all(&[b"->continuity:done\n  ->continuity:done#k1\n"]),
            [Command::Done, Command::Done]
        );
    }

    #[test]
    fn every_command_of_the_seed() {
        let out = all(&[
            b"->continuity:save <<<\nCurrent task: auth\nNext: login\n>>>\n\
            ->continuity:load\n->continuity:uncertain \"API rate limit handling unclear\"\n\
            ->continuity:search \"authentication patterns\"\n",
        ]);
        assert_eq!(
            out,
            [
                Command::Save("Current task: auth\nNext: login".into()),
                Command::Load,
                Command::Uncertain("API rate limit handling unclear".into()),
                Command::Search("authentication patterns".into()),
            ]
        );
    }

    #[test]
    fn ansi_escapes_crlf_and_prompts_around_the_marker() {
        let out = all(&[
            b"\x1b[32m\xe2\x8f\xba\x1b[0m ->conti\x1b[1mnuity:\x1b[0mload\r\n",
            b"\x1b]0;title\x07  ->continuity:save <<< one line >>>\r\n",
        ]);
        assert_eq!(out, [Command::Load, Command::Save("one line".into())]);
    }

    #[test]
    fn split_anywhere_gives_the_same_commands() {
        let text: &[u8] =
            b"noise\n->continuity:save <<<\nTask: x \xc3\xa9t\xc3\xa9\n>>>\n->continuity:load\n";
        let whole = all(&[text]);
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(all(&[a, b]), whole, "cut at {cut}");
        }
        assert_eq!(whole[0], Command::Save("Task: x été".into()));
    }

    #[test]
    fn garbage_and_huge_output_cost_bounded_memory() {
        let mut tap = Tap::new();
        let junk: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        let _ = tap.feed(&junk);
        assert!(tap.partial.len() <= MAX_LINE);
        let out = tap.feed(b"\n->continuity:load\n");
        assert_eq!(out, [Command::Load]);
        // An unterminated save block is bounded too, and the next >>> closes it.
        let _ = tap.feed(b"->continuity:save <<<\n");
        for _ in 0..10_000 {
            let _ = tap.feed(b"line of a block that never ends\n");
        }
        let out = tap.feed(b">>>\n");
        match &out[0] {
            Command::Save(t) => assert!(t.len() <= MAX_BLOCK + 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_redrawn_line_counts_as_what_is_left_on_screen() {
        let out = all(&[b"progress 10%\rprogress 100%\r->continuity:load\n"]);
        assert_eq!(out, [Command::Load]);
    }

    #[test]
    fn a_marker_counts_only_where_the_agent_says_it() {
        let out = all(&[concat!(
            "you could write ->continuity:load here\n",
            "> ->continuity:load\n",
            "  ⎿  ->continuity:load\n",
            "     ->continuity:load\n",
            "\t->continuity:load\n",
            "⏺->continuity:load\n",
            "⏺ ->continuity:uncertain \"said\"\n",
            "   ->continuity:search \"indented\"\n",
        )
        .as_bytes()]);
        assert_eq!(
            out,
            [
                Command::Uncertain("said".into()),
                Command::Search("indented".into())
            ]
        );
    }

    #[test]
    fn the_protocol_quoted_in_a_fenced_block_does_nothing() {
        let readme = include_str!("../../README.md");
        assert!(
            readme.contains("\n->continuity:save <<<\n"),
            "the README quotes it"
        );
        assert_eq!(all(&[readme.as_bytes()]), []);
        // A fence that never closes is forgotten after a while.
        let mut tap = Tap::new();
        let _ = tap.feed(b"```\n");
        for _ in 0..MAX_FENCE_LINES {
            let _ = tap.feed(b"->continuity:load\n");
        }
        assert_eq!(tap.feed(b"->continuity:load\n"), [Command::Load]);
    }

    #[test]
    fn injected_text_is_recognised_wherever_its_markers_stand() {
        let found = Tap::commands_anywhere(
            "[phoenix] handoff x:\nNext: ->continuity:load\n```\n->continuity:save <<<\nTask:  a\n>>>\n```",
        );
        let keys: Vec<String> = found.iter().map(Command::key).collect();
        assert_eq!(keys, ["load", "save Task: a"]);
        // The echo, re-indented by the pane, has the same key.
        assert_eq!(Command::Save("Task: a".into()).key(), keys[1]);
    }

    #[test]
    fn the_limiter_drops_repeats_and_floods() {
        let mut l = Limiter::default();
        let t = std::time::Instant::now();
        assert!(l.admit("load", t).is_ok());
        assert!(
            l.admit("load", t + std::time::Duration::from_secs(1))
                .is_err()
        );
        assert!(l.admit("load", t + REPEAT_WINDOW).is_ok());
        for i in 0..RATE_PER_MINUTE - 2 {
            assert!(l.admit(&format!("search {i}"), t + REPEAT_WINDOW).is_ok());
        }
        assert!(l.admit("search more", t + REPEAT_WINDOW).is_err());
        assert!(
            l.admit("search more", t + std::time::Duration::from_secs(61))
                .is_ok()
        );
    }
}
