//! `phoenix top`: the fleet live in a terminal — the agents table (state, health, pid, uptime,
//! last activity, loops, crashes, a context meter), the critical events as they come, and keys
//! to restart, inject into, or open an agent's pane. Fits an 80×24 terminal over ssh.
//!
//! The data flows one way: [`Snapshot`] (read from the world and the files) → [`App`] (what
//! is selected, what is being asked) → a frame. Keys become [`Command`]s; only the loop in
//! [`run`] carries them out, restarts and injections on a worker thread so the view stays live.

mod hosts;
mod view;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::Context as _;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::Value;

use crate::spec::Spec;
use crate::state::FleetDir;
use crate::state::events::{self, Filter};
use crate::status::{self, AgentStatus};
use crate::world::Runtime;

/// Events kept for the view.
const EVENTS: usize = 100;

/// What the view shows, read fresh on every tick.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub fleet: String,
    pub rows: Vec<AgentStatus>,
    pub events: Vec<Value>,
    /// Why the world could not be read, if it could not.
    pub problem: Option<String>,
    pub at: Option<jiff::Timestamp>,
    /// The pid of the `phoenix run` supervising this fleet, if one does.
    pub daemon: Option<u32>,
    /// The host of each agent of a host (this machine's agents are not in it).
    pub hosts: BTreeMap<String, String>,
    /// Every `[[host]]`: when it last answered, or why not (empty without hosts).
    pub host_lines: Vec<hosts::HostLine>,
}

impl Snapshot {
    pub fn read(spec: &Spec, runtime: &dyn Runtime) -> Snapshot {
        let fleet = FleetDir::new(&spec.fleet.state_dir);
        let (rows, problem) = match status::observe(spec, runtime) {
            Ok(world) => (status::rows(spec, &world), None),
            // Every agent runs on a host: this machine needs no tmux to show them.
            Err(_) if spec.agents.is_empty() && !spec.hosts.is_empty() => (Vec::new(), None),
            Err(e) => (Vec::new(), Some(format!("{e:#}"))),
        };
        let declared = spec.agent_names();
        let (events, _) = events::read(
            &fleet,
            &Filter {
                limit: Some(EVENTS),
                agents: &declared,
                ..Filter::default()
            },
        );
        Snapshot {
            fleet: spec.fleet.name.clone(),
            rows,
            events,
            problem,
            at: Some(jiff::Timestamp::now()),
            daemon: crate::state::daemon::daemon_pid(&fleet),
            ..Snapshot::default()
        }
    }

    /// This machine's snapshot with what every host said last: their rows after this
    /// machine's, their events in the one timeline, a host that did not answer in the title.
    pub fn with_hosts(mut self, spec: &Spec, views: &[hosts::HostView]) -> Snapshot {
        if views.is_empty() {
            return self;
        }
        let now = jiff::Timestamp::now();
        let (rows, placed, lines) = hosts::rows(spec, views, now);
        self.rows.extend(rows);
        self.hosts = placed;
        self.events = hosts::events(std::mem::take(&mut self.events), views, EVENTS);
        if let Some(said) = hosts::problems(&lines) {
            self.problem = Some(match self.problem.take() {
                Some(local) => format!("{local} · {said}"),
                None => said,
            });
        }
        self.host_lines = lines;
        self
    }

    /// The host `agent` runs on, if it is an agent of a host.
    pub fn host_of(&self, agent: &str) -> Option<&str> {
        self.hosts.get(agent).map(String::as_str)
    }
}

/// What a key asks for; carried out by the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Restart {
        agent: String,
        fresh: bool,
    },
    /// Empty text: the agent's latest handoff.
    Inject {
        agent: String,
        text: String,
    },
    Attach {
        agent: String,
        pane: String,
    },
    /// As `phoenix stop`: it stays down until started.
    Stop {
        agent: String,
    },
    /// As `phoenix start`.
    Start {
        agent: String,
    },
    Quit,
}

/// What the details of the selected agent show (`d`): why it is in the state it is, its day
/// (tokens per hour, crashes), the last lines of its pane. Read by the loop while shown.
#[derive(Debug, Clone, Default)]
pub struct Detail {
    pub agent: String,
    /// Why it runs or does not, in a few lines (safe mode and why, a crash loop, a stop).
    pub why: Vec<String>,
    /// `None` for an agent of a host (its records are there).
    pub day: Option<crate::usage::report::Day>,
    pub pane: Vec<String>,
}

impl Detail {
    /// How many of the pane's lines the details show at most.
    const PANE_LINES: usize = 12;

    pub fn read(spec: &Spec, runtime: &dyn Runtime, row: &AgentStatus, on_host: bool) -> Detail {
        let mut detail = Detail {
            agent: row.agent.clone(),
            ..Detail::default()
        };
        let declared = spec.agent(&row.agent);
        let summary = (!on_host).then(|| {
            let dir = FleetDir::new(&spec.fleet.state_dir).agent(&row.agent);
            crate::recovery::record::summary(&dir, declared.map(|a| &a.restart))
        });
        detail.why = why(row, summary.as_ref());
        if let (false, Some(agent)) = (on_host, declared) {
            let mut notes = Vec::new();
            detail.day = Some(crate::usage::report::day(
                spec,
                &agent.name,
                agent.cli,
                &mut notes,
            ));
            if let Some(Ok(text)) = row
                .pane
                .as_ref()
                .map(|pane| runtime.capture(pane, Self::PANE_LINES))
            {
                let lines: Vec<String> = text.trim_end().lines().map(str::to_string).collect();
                let skip = lines.len().saturating_sub(Self::PANE_LINES);
                detail.pane = lines.into_iter().skip(skip).collect();
            }
        }
        detail
    }
}

/// Why `row` is in its state, as lines: safe mode (since when, why), a crash loop, a stop on
/// purpose or a clean exit, a cooldown; then how its last run ended.
fn why(row: &AgentStatus, summary: Option<&crate::recovery::record::Summary>) -> Vec<String> {
    let mut lines = Vec::new();
    let agent = &row.agent;
    let crash_loop = summary.is_some_and(|s| {
        s.max_crashes
            .is_some_and(|max| s.crashes_in_window >= max as usize)
    });
    if let Some(q) = summary.and_then(|s| s.safe_mode.as_ref()) {
        lines.push(format!(
            "safe mode since {}: {} (r restarts it)",
            q.since, q.reason
        ));
    } else if crash_loop {
        lines.push("crash loop: as many crashes in the window as allowed".to_string());
    } else {
        lines.push(match row.state {
            "stopped"
                if summary
                    .and_then(|s| s.last_end.as_ref())
                    .is_some_and(|e| e["reason"] == "clean_exit") =>
            {
                format!("exited cleanly: held until started (S, or `phoenix start {agent}`)")
            }
            "stopped" => {
                format!("stopped on purpose: down until started (S, or `phoenix start {agent}`)")
            }
            "cooldown" => "restarting: waiting out the cooldown after its last exit".to_string(),
            "declared" => "not started: `phoenix apply` starts it".to_string(),
            "running" => format!("running ({})", row.health),
            other => other.to_string(),
        });
    }
    if let Some(s) = summary {
        lines.push(match s.max_crashes {
            Some(max) => format!("crashes: {} in the window (max {max})", s.crashes_in_window),
            None => format!("crashes: {} in the window", s.crashes_in_window),
        });
        if let Some(end) = &s.last_end {
            let how = match (end["code"].as_i64(), end["signal"].as_i64()) {
                (_, Some(sig)) => format!(", signal {sig}"),
                (Some(code), None) => format!(", exit code {code}"),
                _ => String::new(),
            };
            let explain = end["explain"]
                .as_str()
                .filter(|w| !w.is_empty())
                .map(|w| format!(" — {w}"))
                .unwrap_or_default();
            lines.push(format!(
                "last stop: {}{how} at {}{explain}",
                end["reason"].as_str().unwrap_or("?").replace('_', " "),
                end["ts"].as_str().unwrap_or("?")
            ));
        }
    }
    lines
}

/// What the bottom line is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Browse,
    /// `y` carries the command out, anything else drops it.
    Confirm(Command),
    /// Typing the text to inject into `agent`.
    Input {
        agent: String,
        text: String,
    },
}

/// The view's state: the latest snapshot, the selection, the mode and the last message.
#[derive(Debug, Clone)]
pub struct App {
    pub snapshot: Snapshot,
    pub selected: usize,
    pub mode: Mode,
    pub message: Option<String>,
    /// The selected agent's details are shown (`d`) instead of the events.
    pub show_detail: bool,
    /// The details last read (of the agent selected then).
    pub detail: Option<Detail>,
}

impl App {
    pub fn new(snapshot: Snapshot) -> App {
        App {
            snapshot,
            selected: 0,
            mode: Mode::Browse,
            message: None,
            show_detail: false,
            detail: None,
        }
    }

    /// A new snapshot; the selection follows the agent it was on.
    pub fn refresh(&mut self, snapshot: Snapshot) {
        let name = self.selected_row().map(|r| r.agent.clone());
        self.snapshot = snapshot;
        self.selected = name
            .and_then(|n| self.snapshot.rows.iter().position(|r| r.agent == n))
            .unwrap_or(self.selected)
            .min(self.snapshot.rows.len().saturating_sub(1));
    }

    pub fn selected_row(&self) -> Option<&AgentStatus> {
        self.snapshot.rows.get(self.selected)
    }

    /// One key press: a new mode, a message, or a command for the loop.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Command> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Command::Quit);
        }
        match std::mem::replace(&mut self.mode, Mode::Browse) {
            Mode::Confirm(command) => {
                if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
                    return Some(command);
                }
                self.message = Some("cancelled".into());
                None
            }
            Mode::Input { agent, mut text } => {
                match key.code {
                    KeyCode::Enter => return Some(Command::Inject { agent, text }),
                    KeyCode::Esc => self.message = Some("cancelled".into()),
                    KeyCode::Backspace => {
                        text.pop();
                        self.mode = Mode::Input { agent, text };
                    }
                    KeyCode::Char(c) if text.chars().count() < 2_000 => {
                        text.push(c);
                        self.mode = Mode::Input { agent, text };
                    }
                    _ => self.mode = Mode::Input { agent, text },
                }
                None
            }
            Mode::Browse => self.browse(key),
        }
    }

    fn browse(&mut self, key: KeyEvent) -> Option<Command> {
        // A message stays until the next key.
        self.message = None;
        let count = self.snapshot.rows.len();
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Some(Command::Quit),
            KeyCode::Down | KeyCode::Char('j') if count > 0 => {
                self.selected = (self.selected + 1).min(count - 1);
            }
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = count.saturating_sub(1),
            KeyCode::Char(c @ ('r' | 'R')) => {
                let agent = self.selected_row()?.agent.clone();
                self.mode = Mode::Confirm(Command::Restart {
                    agent,
                    fresh: c == 'R',
                });
            }
            KeyCode::Char('s') => {
                let agent = self.selected_row()?.agent.clone();
                self.mode = Mode::Confirm(Command::Stop { agent });
            }
            KeyCode::Char('S') => {
                let agent = self.selected_row()?.agent.clone();
                self.mode = Mode::Confirm(Command::Start { agent });
            }
            KeyCode::Char('d') => self.show_detail = !self.show_detail,
            KeyCode::Char('i') => {
                let agent = self.selected_row()?.agent.clone();
                self.mode = Mode::Input {
                    agent,
                    text: String::new(),
                };
            }
            KeyCode::Enter | KeyCode::Char('a') => {
                let row = self.selected_row()?;
                match &row.pane {
                    Some(pane) => {
                        return Some(Command::Attach {
                            agent: row.agent.clone(),
                            pane: pane.clone(),
                        });
                    }
                    None => self.message = Some(format!("`{}` has no pane", row.agent)),
                }
            }
            _ => {}
        }
        None
    }
}

/// Run the view until `q`. `interval`: how often the fleet is read again.
pub fn run(config: &Path, interval: Duration) -> crate::error::Result<i32> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        crate::bail!(
            "`phoenix top` needs a terminal; for scripts use `phoenix status --json` and `phoenix events --follow`"
        );
    }
    let mut spec = crate::spec::load(config)?;
    // The fleet's runtime, once: a changed socket takes effect when top starts again, as in
    // the daemon.
    let runtime = crate::world::runtime_for(&spec);
    // The hosts are asked on threads of their own, so a slow one never stalls the keys (the
    // hosts of phoenix.toml as top started, as the runtime).
    let watcher = hosts::Watcher::start(&spec, interval);
    let read = |spec: &Spec| Snapshot::read(spec, &*runtime).with_hosts(spec, &watcher.views());
    let mut app = App::new(read(&spec));
    let detail = |spec: &Spec, app: &App| {
        let row = app.selected_row()?;
        let on_host = app.snapshot.host_of(&row.agent).is_some();
        Some(Detail::read(spec, &*runtime, row, on_host))
    };
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let (done_tx, done_rx) = mpsc::channel::<String>();
    let mut next_read = Instant::now() + interval;
    let result = (|| -> crate::error::Result<()> {
        loop {
            terminal.draw(|frame| view::draw(frame, &app))?;
            let wait = next_read.saturating_duration_since(Instant::now());
            if event::poll(wait.min(Duration::from_millis(250)))? {
                let command = match event::read()? {
                    Event::Key(key) => app.on_key(key),
                    _ => None,
                };
                // The details follow the selection at once, not at the next read.
                let selected = app.selected_row().map(|r| r.agent.as_str());
                if app.show_detail && app.detail.as_ref().map(|d| d.agent.as_str()) != selected {
                    app.detail = detail(&spec, &app);
                }
                match command {
                    None => {}
                    Some(Command::Quit) => return Ok(()),
                    Some(Command::Attach { agent, pane }) => {
                        ratatui::restore();
                        let outcome = match app.snapshot.host_of(&agent) {
                            Some(_) => attach_as_the_command_line(config, &agent),
                            None => attach(&*runtime, &pane),
                        };
                        terminal = ratatui::try_init().context("cannot set up the terminal")?;
                        terminal.clear()?;
                        app.message = Some(match outcome {
                            Ok(()) => format!("back from `{agent}`"),
                            Err(e) => format!("cannot open `{agent}`'s pane: {e:#}"),
                        });
                    }
                    Some(command) => {
                        app.message = Some(working_on(&command));
                        let (config, tx) = (config.to_path_buf(), done_tx.clone());
                        std::thread::spawn(move || {
                            let _ = tx.send(carry_out(&config, &command));
                        });
                    }
                }
            }
            while let Ok(message) = done_rx.try_recv() {
                app.message = Some(message);
                watcher.poke();
                next_read = Instant::now();
            }
            if Instant::now() >= next_read {
                if let Ok(newer) = crate::spec::load(config) {
                    spec = newer;
                }
                app.refresh(read(&spec));
                app.detail = if app.show_detail {
                    detail(&spec, &app)
                } else {
                    None
                };
                next_read = Instant::now() + interval;
            }
        }
    })();
    ratatui::restore();
    result.map(|()| 0)
}

fn working_on(command: &Command) -> String {
    match command {
        Command::Restart { agent, fresh: true } => format!("restarting `{agent}` fresh…"),
        Command::Restart { agent, .. } => format!("restarting `{agent}`…"),
        Command::Inject { agent, .. } => format!("injecting into `{agent}`…"),
        Command::Attach { agent, .. } => format!("opening `{agent}`…"),
        Command::Stop { agent } => format!("stopping `{agent}`…"),
        Command::Start { agent } => format!("starting `{agent}`…"),
        Command::Quit => String::new(),
    }
}

/// A restart or an injection, as `phoenix restart` / `phoenix handoff inject` do them; the
/// outcome as one line for the view.
fn carry_out(config: &Path, command: &Command) -> String {
    match command {
        Command::Stop { agent } => return lifecycle_verb(config, "stop", &[], agent),
        Command::Start { agent } => return lifecycle_verb(config, "start", &[], agent),
        _ => {}
    }
    if let Some(line) = carry_out_on_host(config, command) {
        return line;
    }
    match command {
        Command::Restart { agent, fresh } => {
            match crate::controller::request::restart(config, agent, *fresh) {
                Ok(r) => format!(
                    "restarted `{agent}`{} (via {}{})",
                    if r.fresh { " fresh" } else { "" },
                    r.via,
                    r.pid.map(|p| format!(", pid {p}")).unwrap_or_default()
                ),
                Err(e) => format!("restart of `{agent}` failed: {e:#}"),
            }
        }
        Command::Inject { agent, text } => match inject(config, agent, text) {
            Ok(how) => format!("injected into `{agent}` ({how})"),
            Err(e) => format!("injection into `{agent}` failed: {e:#}"),
        },
        Command::Attach { .. } | Command::Stop { .. } | Command::Start { .. } | Command::Quit => {
            String::new()
        }
    }
}

/// `phoenix stop|start|restart [FLAGS] AGENT` run as the command line runs it (a host's agent
/// on its host): one way to stop; its row's detail (and its host) as the line for the view.
fn lifecycle_verb(config: &Path, verb: &str, flags: &[&str], agent: &str) -> String {
    let exe = match crate::process::main_binary() {
        Ok(exe) => exe,
        Err(e) => return format!("{verb} of `{agent}` failed: cannot find phoenix: {e}"),
    };
    let output = std::process::Command::new(exe)
        .arg("--config")
        .arg(config)
        .args([verb, "--json"])
        .args(flags)
        .args(["--", agent])
        .stdin(std::process::Stdio::null())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => return format!("{verb} of `{agent}` failed: {e}"),
    };
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let row = doc["agents"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["agent"] == agent));
    let on = |row: &Value| {
        row["host"]
            .as_str()
            .map(|h| format!(" on {h}"))
            .unwrap_or_default()
    };
    match row {
        Some(row) if row["ok"] != false && output.status.success() => {
            format!(
                "`{agent}`{}: {}",
                on(row),
                row["detail"].as_str().unwrap_or(verb)
            )
        }
        Some(row) => format!(
            "{verb} of `{agent}` failed: {}",
            row["detail"].as_str().unwrap_or("?")
        ),
        None => format!(
            "{verb} of `{agent}` failed: {}",
            doc["error"]["message"].as_str().unwrap_or("no answer")
        ),
    }
}

/// A restart or an injection of an agent of a host: `phoenix restart` and `phoenix handoff
/// inject` as the command line runs them (on its host), typed text in the host protocol's
/// request (no command pastes text); `None` for an agent of this machine.
fn carry_out_on_host(config: &Path, command: &Command) -> Option<String> {
    let spec = crate::spec::load_with(
        config,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .ok()?;
    match command {
        Command::Restart { agent, fresh } => {
            crate::hosts::reads::host_of(&spec, agent)?;
            let flags: &[&str] = if *fresh { &["--fresh"] } else { &[] };
            Some(lifecycle_verb(config, "restart", flags, agent))
        }
        Command::Inject { agent, text } => {
            let host = crate::hosts::reads::host_of(&spec, agent)?;
            let link = crate::hosts::reads::link_to(&spec, host)?;
            let asked = if text.trim().is_empty() {
                link.run(
                    &["handoff", "inject", "--json", "--", agent],
                    crate::hosts::actions::ACTION_TIMEOUT,
                )
                .and_then(|ran| crate::hosts::reads::document_of(host, &ran))
            } else {
                crate::hosts::actions::inject_text(&link, agent, text)
            };
            Some(match asked {
                Ok(doc) => format!(
                    "injected into `{agent}` on {host} (confirmed by {})",
                    doc["confirmed_by"].as_str().unwrap_or("the host")
                ),
                Err(e) => format!("injection into `{agent}` on {host} failed: {e}"),
            })
        }
        Command::Attach { .. } | Command::Stop { .. } | Command::Start { .. } | Command::Quit => {
            None
        }
    }
}

/// Open the pane of an agent of a host: `phoenix attach AGENT` as the command line runs it
/// (`ssh -t` to its host), until the person detaches.
fn attach_as_the_command_line(config: &Path, agent: &str) -> crate::error::Result<()> {
    let exe = crate::process::main_binary().context("cannot find phoenix")?;
    let status = std::process::Command::new(exe)
        .arg("--config")
        .arg(config)
        .args(["attach", "--", agent])
        .status()
        .context("cannot run `phoenix attach`")?;
    if status.success() {
        Ok(())
    } else {
        crate::bail!("`phoenix attach {agent}` ended with {status}")
    }
}

fn inject(config: &Path, agent: &str, text: &str) -> crate::error::Result<String> {
    let spec = crate::spec::load(config)?;
    let a = spec
        .agent(agent)
        .with_context(|| format!("`{agent}` is no longer declared"))?;
    let text = if text.trim().is_empty() {
        let dir = FleetDir::new(&spec.fleet.state_dir).agent(agent);
        let h = crate::continuity::latest_for_startup(&dir)
            .with_context(|| format!("`{agent}` has no handoff yet: type the text to inject"))?;
        crate::continuity::inject::handoff_text(&h)
    } else {
        text.to_string()
    };
    let report = crate::continuity::inject::to_agent(&spec, a, &text)?;
    Ok(format!("confirmed by {}", report.confirmed_by))
}

/// Show the agent's pane: switch to it when top runs inside the fleet's own tmux server,
/// else attach to that server until the person detaches.
fn attach(runtime: &dyn Runtime, pane: &str) -> crate::error::Result<()> {
    runtime.show(pane).context("cannot show the pane")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyEventState;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent {
            code,
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Press,
            state: KeyEventState::NONE,
        }
    }

    pub(super) fn row(agent: &str, pane: Option<&str>) -> AgentStatus {
        AgentStatus {
            worktree: None,
            agent: agent.into(),
            declared: true,
            enabled: true,
            state: "running",
            health: "healthy",
            watchdog: vec![],
            pane: pane.map(str::to_string),
            pid: Some(42),
            uptime_secs: Some(90),
            last_activity: None,
            cli: Some("claude".into()),
            status: Some("idle".into()),
            current_task: None,
            open_loops: 0,
            stale_loops: 0,
            crashes: 0,
            restarts: 0,
            last_exit: None,
            max_crashes: Some(5),
            context: Default::default(),
            usage_today: None,
            messages_pending: 0,
            needs_input: None,
            supervision: None,
            background_jobs: None,
            sandbox: None,
            next_start: None,
            transcript: None,
        }
    }

    fn app() -> App {
        App::new(Snapshot {
            fleet: "f".into(),
            rows: vec![row("alpha", Some("%1")), row("beta", None)],
            ..Snapshot::default()
        })
    }

    #[test]
    fn restart_asks_first_and_anything_but_y_cancels() {
        let mut a = app();
        assert_eq!(a.on_key(key(KeyCode::Char('j'))), None);
        assert_eq!(a.on_key(key(KeyCode::Char('R'))), None);
        assert_eq!(
            a.mode,
            Mode::Confirm(Command::Restart {
                agent: "beta".into(),
                fresh: true
            })
        );
        assert_eq!(a.on_key(key(KeyCode::Char('n'))), None);
        assert_eq!(a.mode, Mode::Browse);
        a.on_key(key(KeyCode::Char('r')));
        assert_eq!(
            a.on_key(key(KeyCode::Char('y'))),
            Some(Command::Restart {
                agent: "beta".into(),
                fresh: false
            })
        );
    }

    #[test]
    fn inject_collects_text_until_enter() {
        let mut a = app();
        a.on_key(key(KeyCode::Char('i')));
        for c in "say hi!".chars() {
            assert_eq!(a.on_key(key(KeyCode::Char(c))), None);
        }
        a.on_key(key(KeyCode::Backspace));
        assert_eq!(
            a.on_key(key(KeyCode::Enter)),
            Some(Command::Inject {
                agent: "alpha".into(),
                text: "say hi".into()
            })
        );
        // `q` while typing is text, not quit.
        a.on_key(key(KeyCode::Char('i')));
        assert_eq!(a.on_key(key(KeyCode::Char('q'))), None);
        assert_eq!(a.on_key(key(KeyCode::Esc)), None);
        assert_eq!(a.on_key(key(KeyCode::Char('q'))), Some(Command::Quit));
    }

    #[test]
    fn the_selection_follows_its_agent_and_attach_needs_a_pane() {
        let mut a = app();
        a.on_key(key(KeyCode::Down));
        assert_eq!(a.on_key(key(KeyCode::Enter)), None);
        assert!(a.message.as_deref().unwrap().contains("no pane"));
        let mut snapshot = a.snapshot.clone();
        snapshot.rows.reverse();
        a.refresh(snapshot);
        assert_eq!(a.selected_row().unwrap().agent, "beta");
        a.on_key(key(KeyCode::Down));
        assert_eq!(
            a.on_key(key(KeyCode::Char('a'))),
            Some(Command::Attach {
                agent: "alpha".into(),
                pane: "%1".into()
            })
        );
    }
}

#[cfg(test)]
mod screen_tests {
    use super::*;
    use ratatui::{Terminal, backend::TestBackend};

    /// The symbols of one drawn frame of `app`, cell by cell.
    fn drawn(app: &App) -> String {
        let mut terminal = Terminal::new(TestBackend::new(120, 30)).unwrap();
        terminal.draw(|frame| view::draw(frame, app)).unwrap();
        let buffer = terminal.backend().buffer();
        buffer.content().iter().map(|cell| cell.symbol()).collect()
    }

    #[test]
    fn an_agents_text_in_top_reaches_the_terminal_inert() {
        let hostile = "pwn\x1b]52;c;eA==\x07\u{9b}2J\u{202e}gnp\u{200b}\u{e0041}end";
        let mut row = tests_row("alpha");
        row.needs_input = Some(crate::state::NeedsInput {
            reason: "permission_prompt".into(),
            message: hostile.into(),
            since: "2026-01-01T00:00:00Z".into(),
            source: "hook".into(),
        });
        let app = App::new(Snapshot {
            fleet: "f".into(),
            rows: vec![row],
            events: vec![serde_json::json!({
                "ts": "2026-01-01T00:00:00Z", "agent": "alpha", "event": "agent_exit",
                "reason": hostile,
            })],
            problem: Some(format!("host `h`: {hostile}")),
            ..Snapshot::default()
        });
        let screen = drawn(&app);
        assert!(
            !screen.chars().any(crate::text::needs_stand_in),
            "{screen:?}"
        );
        assert!(
            screen.contains("pwn␛]52;c;eA==␇\\u{9b}2J\\u{202e}gnp"),
            "{screen}"
        );
    }

    fn tests_row(agent: &str) -> AgentStatus {
        super::tests::row(agent, Some("%1"))
    }
}
