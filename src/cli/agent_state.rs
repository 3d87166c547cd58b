//! `loop add|list`, `resolve`, `state show` and `hooks show`: one agent's state and hooks.

use super::output;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::json;

use super::out;
use crate::hooks::config::{self, Target};
use crate::spec::{AgentSpec, Spec};
use crate::state::{self, AgentDir, AgentState, FleetDir, Retention};

#[derive(Debug, Subcommand)]
pub enum LoopCommand {
    /// Add an open loop with a stable id (letters, digits, `-_.:/`).
    Add {
        agent: String,
        id: String,
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// List the open loops; stale ones are marked.
    List {
        agent: String,
        /// Print one JSON document `{format_version, agent, loops: […]}` (see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Show state.json (with staleness and retention applied).
    Show {
        agent: String,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Print exactly what `apply` installs in the agent's workdir.
    Show {
        #[arg(long)]
        agent: String,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

fn agent<'a>(spec: &'a Spec, name: &str) -> anyhow::Result<&'a AgentSpec> {
    spec.agent(name)
        .ok_or_else(|| super::lifecycle::unknown_agent(spec, name))
}

fn agent_dir(spec: &Spec, name: &str) -> anyhow::Result<AgentDir> {
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(name);
    dir.ensure()
        .with_context(|| format!("cannot create state dir `{}`", dir.path.display()))?;
    Ok(dir)
}

fn shown_state(spec: &Spec, dir: &AgentDir) -> anyhow::Result<AgentState> {
    Ok(dir.shown_state(Retention::from(&spec.thresholds))?)
}

pub fn loops(config: &Path, cmd: LoopCommand) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    match cmd {
        LoopCommand::Add {
            agent: name,
            id,
            text,
        } => {
            agent(&spec, &name)?;
            if !state::agent::valid_loop_id(&id) {
                bail!(
                    "loop id `{id}` is not valid: use letters, digits and `-_.:/` (at most 80), e.g. `schwab-oauth`"
                );
            }
            let text = text.join(" ");
            let dir = agent_dir(&spec, &name)?;
            let added = dir.add_loop(Retention::from(&spec.thresholds), &id, &text)?;
            out(&if added {
                format!("added loop `{id}` to agent `{name}`\n")
            } else {
                format!("loop `{id}` is already open with that text; nothing changed\n")
            });
            Ok(0)
        }
        LoopCommand::List { agent: name, json } => {
            agent(&spec, &name)?;
            let state = shown_state(&spec, &agent_dir(&spec, &name)?)?;
            if json {
                output::json(json!({"agent": name, "loops": state.open_loops}));
                return Ok(0);
            }
            if state.open_loops.is_empty() {
                out(&format!("agent `{name}` has no open loops\n"));
                return Ok(0);
            }
            let width = state
                .open_loops
                .iter()
                .map(|l| l.id.len())
                .max()
                .unwrap_or(2)
                .max(2);
            let mut text = format!("{:<width$}  {:<10}  {:<5}  TEXT\n", "ID", "ADDED", "STALE");
            for l in &state.open_loops {
                let _ = writeln!(
                    text,
                    "{:<width$}  {:<10}  {:<5}  {}",
                    l.id,
                    l.added,
                    if l.stale { "stale" } else { "" },
                    l.text
                );
            }
            out(&text);
            Ok(0)
        }
    }
}

pub fn resolve(
    config: &Path,
    name: &str,
    id: &str,
    reason: &str,
    json: bool,
) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    agent(&spec, name)?;
    let dir = agent_dir(&spec, name)?;
    let item = dir.resolve(Retention::from(&spec.thresholds), id, reason)?;
    if json {
        output::json(serde_json::json!({"ok": true, "agent": name, "resolved": item}));
        return Ok(0);
    }
    out(&format!(
        "resolved `{}` for agent `{name}` ({}): {}\n",
        item.id, item.resolved_date, item.reason
    ));
    Ok(0)
}

pub fn state(config: &Path, cmd: StateCommand) -> anyhow::Result<i32> {
    let StateCommand::Show { agent: name, json } = cmd;
    let spec = super::load_without_fs_checks(config)?;
    agent(&spec, &name)?;
    let dir = agent_dir(&spec, &name)?;
    let state = shown_state(&spec, &dir)?;
    if json {
        output::json(&state);
        return Ok(0);
    }
    let mut text = String::new();
    for (key, value) in state_rows(&state) {
        let _ = writeln!(text, "{key:<12} {value}");
    }
    state_lists(&mut text, &state);
    let brief = match dir.brief() {
        Some(b) => format!(
            "{} ({} lines)",
            dir.file(state::BRIEF).display(),
            b.lines().count()
        ),
        None => "none".into(),
    };
    let _ = writeln!(text, "{:<12} {brief}", "brief");
    out(&text);
    Ok(0)
}

/// `state show`'s first rows: who, where the session is, what goes wrong (only when
/// something does).
fn state_rows(state: &AgentState) -> Vec<(&'static str, String)> {
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let session = match (&state.session_id, &state.session_source) {
        (Some(id), Some(src)) => format!("{id} ({src})"),
        (Some(id), None) => id.clone(),
        _ => "-".into(),
    };
    let mut rows = vec![
        ("agent", state.agent.clone()),
        ("status", state.status.to_string()),
        ("last active", or_dash(&state.last_active)),
        ("session", session),
        ("task", or_dash(&state.current_task)),
    ];
    if state.consecutive_errors > 0 {
        let last = state.last_error.as_deref().unwrap_or("?");
        let errors = format!("{} consecutive (last: {last})", state.consecutive_errors);
        rows.push(("errors", errors));
    }
    if state.compactions > 0 {
        let last = state.last_compaction.as_deref().unwrap_or("?");
        rows.push((
            "compactions",
            format!("{} (last {last})", state.compactions),
        ));
    }
    if let Some(end) = &state.last_session_end {
        let clean = if end.clean { " (clean exit)" } else { "" };
        rows.push(("last end", format!("{} {}{clean}", end.ts, end.reason)));
    }
    rows
}

/// `state show`'s lists: the open loops (stale ones marked), the resolved ones, the numbers.
fn state_lists(text: &mut String, state: &AgentState) {
    let stale = state.open_loops.iter().filter(|l| l.stale).count();
    let open = format!("{} ({stale} stale)", state.open_loops.len());
    let _ = writeln!(text, "{:<12} {open}", "open loops");
    for l in &state.open_loops {
        let mark = if l.stale { ", stale" } else { "" };
        let _ = writeln!(text, "  - [{}] {} (added {}{mark})", l.id, l.text, l.added);
    }
    let _ = writeln!(text, "{:<12} {}", "resolved", state.resolved.len());
    for r in &state.resolved {
        let _ = writeln!(text, "  - [{}] {} ({})", r.id, r.reason, r.resolved_date);
    }
    if !state.numbers.is_empty() {
        let _ = writeln!(text, "numbers");
        for (k, v) in &state.numbers {
            let _ = writeln!(text, "  {k}: {v}");
        }
    }
}

pub fn hooks(config: &Path, cmd: HooksCommand) -> anyhow::Result<i32> {
    let HooksCommand::Show { agent: name, json } = cmd;
    let spec = super::load_without_fs_checks(config)?;
    let agent = agent(&spec, &name)?;
    let exe = crate::process::main_binary().context("cannot find the phoenix binary")?;
    let exe = crate::hooks::config::hook_binary(&exe);
    let installed = crate::world::cli_version::installed(agent, &spec.fleet.state_dir);
    let versions = installed
        .as_ref()
        .map(|i| crate::world::cli_version::report(agent, i));
    let target = Target::new(
        &exe,
        &spec.file,
        agent,
        installed.as_ref().and_then(|i| i.version),
    );
    let (Some(path), Some(content)) =
        (config::path_in(agent.cli, &agent.workdir), target.desired())
    else {
        let message = format!(
            "agent `{name}` uses cli `{}`: phoenix installs no hook file for it; its wrapper and the \
             continuity layer keep its state instead",
            agent.cli
        );
        if json {
            output::json(json!({"agent": name, "cli": agent.cli, "files": [], "note": message}));
        } else {
            out(&format!("{message}\n"));
        }
        return Ok(0);
    };
    let adapter = agent.cli.adapter();
    let notify = adapter
        .notify_config()
        .map(|file| (file, target.notify_command()));
    // A CLI that keeps its MCP servers in a file of their own gets phoenix's server there.
    let mcp = config::mcp_path_in(agent.cli, &agent.workdir)
        .filter(|mcp| *mcp != path)
        .and_then(|mcp| Some((target.desired_for(&mcp)?, mcp)));
    if json {
        let mut files = vec![json!({"path": path, "content": content})];
        if let Some((content, path)) = &mcp {
            files.push(json!({"path": path, "content": content}));
        }
        output::json(json!({
            "agent": name, "cli": agent.cli,
            "files": files,
            "codex_notify": notify.as_ref().map(|(_, argv)| argv),
            "cli_version": versions,
        }));
        return Ok(0);
    }
    let mut text = format!(
        "# {} — merged into the file: your own settings and hooks stay, only phoenix's entries for agent `{name}` are replaced\n",
        path.display()
    );
    if let Some(i) = &installed {
        let _ = writeln!(
            text,
            "# {}",
            crate::world::cli_version::made_for_text(agent, i)
        );
    }
    if let Some(warning) = versions.as_ref().and_then(|v| v.warning.as_ref()) {
        let _ = writeln!(text, "# warning: {warning}");
    }
    text.push_str(&config::pretty(&content));
    if let Some((content, mcp)) = &mcp {
        let _ = writeln!(
            text,
            "\n# {} — phoenix's MCP server entry (`phoenix mcp`), merged the same way",
            mcp.display()
        );
        let shown = if mcp.extension().is_some_and(|e| e == "toml") {
            crate::hooks::config::mcp_toml_text(content)
        } else {
            config::pretty(content)
        };
        text.push_str(&shown);
    }
    if let Some(note) = adapter.trust_note() {
        text.push('\n');
        for line in note.lines() {
            let _ = writeln!(text, "# {line}");
        }
    }
    if let Some((file, notify)) = notify {
        let array = toml::Value::Array(notify.into_iter().map(toml::Value::String).collect());
        let _ = write!(
            text,
            "\n# optional, not installed: Codex turn-complete notifications. Add this line at the top of\n# {} (before any [table]):\nnotify = {array}\n",
            agent.workdir.join(file).display()
        );
    }
    out(&text);
    Ok(0)
}
