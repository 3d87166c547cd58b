//! `phoenix ledger`, `phoenix handoff save|list|show|search|inject|clear`, `phoenix reindex`:
//! an agent's continuity from the command line.

use super::output;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::json;

use super::out;
use crate::continuity::{self, Trigger, handoff, ledger};
use crate::spec::{self, Spec};
use crate::state::FleetDir;
use crate::state::Op;
use crate::state::bounded::{self, Links};
use crate::store::Store;

#[derive(Debug, Subcommand)]
pub enum HandoffCommand {
    /// Save a handoff now. The body comes from stdin or --file: the same `Current task: … /
    /// Completed: … / Next: …` text an agent writes inside `->continuity:save <<< … >>>`.
    Save {
        agent: String,
        /// Why: manual, auto_restart, context_limit, crash, pre_compact, move.
        #[arg(long, default_value = "manual")]
        reason: String,
        #[arg(long)]
        file: Option<PathBuf>,
        /// Save from what phoenix knows only; do not read stdin.
        #[arg(long)]
        no_input: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// The agent's handoffs, oldest first (every agent's without AGENT).
    List {
        agent: Option<String>,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// One handoff, whole.
    Show {
        id: String,
        #[arg(long)]
        agent: Option<String>,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Ranked full-text search over handoffs, briefs, ledger decisions and critical events.
    ///
    /// Every word must appear; `word*` is a prefix. A search matching more than 2,000
    /// documents ranks the newest 2,000 of them: add a word to narrow it.
    Search {
        query: String,
        #[arg(long)]
        agent: Option<String>,
        /// handoff, brief, decision or event.
        #[arg(long)]
        kind: Option<String>,
        #[arg(long, short = 'n', default_value_t = 10)]
        limit: usize,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Give a running agent a handoff (the latest by default): pasted into its pane when it
    /// is ready for input, delivery confirmed.
    Inject {
        agent: String,
        #[arg(long)]
        id: Option<String>,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Delete the agent's ledger and handoffs (they are archived under handoffs/archive).
    Clear {
        agent: String,
        /// Required: this forgets what the agent knew.
        #[arg(long)]
        yes: bool,
    },
}

fn agent<'a>(spec: &'a Spec, name: &str) -> anyhow::Result<&'a spec::AgentSpec> {
    spec.agent(name)
        .ok_or_else(|| super::lifecycle::unknown_agent(spec, name))
}

pub fn ledger(config: &Path, name: &str, json: bool) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    agent(&spec, name)?;
    let ledger = ledger::load(&FleetDir::new(&spec.fleet.state_dir).agent(name));
    if json {
        output::json(&ledger);
        return Ok(0);
    }
    let mut text = format!(
        "agent `{name}`, updated {}\ncurrent task: {}\n",
        ledger.updated_at.as_deref().unwrap_or("never"),
        ledger.current_task.as_deref().unwrap_or("-")
    );
    let list = |text: &mut String, title: &str, items: &[String]| {
        if !items.is_empty() {
            text.push_str(&format!("{title}:\n"));
            for i in items {
                text.push_str(&format!("  - {i}\n"));
            }
        }
    };
    list(&mut text, "completed", &ledger.completed);
    list(&mut text, "in progress", &ledger.in_progress);
    list(&mut text, "blocked", &ledger.blocked);
    let decisions: Vec<String> = ledger.decisions.iter().map(|d| d.text.clone()).collect();
    list(&mut text, "key decisions", &decisions);
    list(&mut text, "uncertain", &ledger.uncertain);
    list(&mut text, "files", &ledger.files);
    out(&text);
    Ok(0)
}

/// A handoff body larger than this is refused (a handoff is a page or two).
const MAX_BODY_BYTES: u64 = 1024 * 1024;

pub(super) fn read_body(file: Option<&Path>, no_input: bool) -> anyhow::Result<Option<String>> {
    if let Some(f) = file {
        // A FIFO or `/dev/zero` given as the file is refused, not waited on or read forever.
        return Ok(Some(bounded::read_string(
            f,
            MAX_BODY_BYTES,
            Links::Follow,
        )?));
    }
    if no_input {
        return Ok(None);
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("type the handoff (Current task: … / Completed: … / Next: …), end with Ctrl-D");
    }
    let mut text = String::new();
    stdin.take(MAX_BODY_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_BODY_BYTES {
        bail!("the handoff on stdin has more than {MAX_BODY_BYTES} bytes");
    }
    Ok((!text.trim().is_empty()).then_some(text))
}

pub fn handoff(config: &Path, cmd: HandoffCommand) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    match cmd {
        HandoffCommand::Save {
            agent,
            reason,
            file,
            no_input,
            json,
        } => save(&spec, &agent, &reason, file.as_deref(), no_input, json),
        HandoffCommand::List { agent, json } => list(&spec, agent.as_deref(), json),
        HandoffCommand::Show { id, agent, json } => show(&spec, &id, agent.as_deref(), json),
        HandoffCommand::Search {
            query,
            agent,
            kind,
            limit,
            json,
        } => search(
            &spec,
            &query,
            agent.as_deref(),
            kind.as_deref(),
            limit,
            json,
        ),
        HandoffCommand::Inject { agent, id, json } => inject(&spec, &agent, id.as_deref(), json),
        HandoffCommand::Clear { agent, yes } => clear(&spec, &agent, yes),
    }
}

/// `handoff save`: a handoff from the body given (or from what phoenix knows only).
fn save(
    spec: &Spec,
    name: &str,
    reason: &str,
    file: Option<&Path>,
    no_input: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let a = agent(spec, name)?;
    let Some(trigger) = Trigger::parse(reason) else {
        bail!(
            "unknown reason `{reason}` ({})",
            crate::diag::suggest(reason, &Trigger::NAMES)
        );
    };
    let body = read_body(file, no_input)?;
    let h = continuity::save(spec, a, trigger, body.as_deref())?;
    for note in &h.notes {
        eprintln!("note: {note}");
    }
    if json {
        output::json(continuity::summary_json(&h));
    } else {
        let dir = FleetDir::new(&spec.fleet.state_dir).agent(name);
        out(&format!(
            "saved handoff {} for agent `{name}` ({})\n",
            h.id,
            handoff::path(&dir, &h.id).display()
        ));
    }
    Ok(0)
}

/// `handoff list`: one line a handoff, the agent's or every agent's (every host's too).
fn list(spec: &Spec, name: Option<&str>, json: bool) -> anyhow::Result<i32> {
    if name.is_none() && !spec.hosts.is_empty() {
        return super::fleetwide::list(spec, json);
    }
    let names: Vec<String> = match name {
        Some(n) => {
            agent(spec, n)?;
            vec![n.to_string()]
        }
        None => spec.agent_names().iter().map(|s| s.to_string()).collect(),
    };
    let all = continuity::handoffs(spec, names.iter().map(String::as_str));
    if json {
        let list: Vec<_> = all.iter().map(continuity::summary_json).collect();
        output::json(json!({"handoffs": list}));
        return Ok(0);
    }
    if all.is_empty() {
        out("no handoffs yet\n");
    }
    let text: String = all
        .iter()
        .map(|h| {
            let trigger = h.trigger.as_str();
            format!("{}  {:<12} {trigger:<14} {}\n", h.id, h.agent, h.summary)
        })
        .collect();
    out(&text);
    Ok(0)
}

/// `handoff show`: one handoff, whole.
fn show(spec: &Spec, id: &str, name: Option<&str>, json: bool) -> anyhow::Result<i32> {
    let mut on_host = vec!["handoff".to_string(), "show".into()];
    on_host.extend(name.map(|n| format!("--agent={n}")));
    on_host.extend(json.then(|| "--json".to_string()));
    on_host.extend(["--".to_string(), id.to_string()]);
    let found = continuity::find_handoff(spec, id, name);
    if found.is_none()
        && name.is_none()
        && let Some(code) = super::fleetwide::show_anywhere(spec, &on_host)?
    {
        return Ok(code);
    }
    let found = found.with_context(|| format!("no handoff `{id}` (see `phoenix handoff list`)"))?;
    if json {
        output::json(&found);
    } else {
        out(&handoff::to_text(&found));
    }
    Ok(0)
}

/// `handoff search`: the ranked hits, two lines each, and how long the search took.
fn search(
    spec: &Spec,
    query: &str,
    name: Option<&str>,
    kind: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<i32> {
    if !spec.hosts.is_empty() {
        return super::fleetwide::search(spec, query, name, kind, limit, json);
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let started = std::time::Instant::now();
    let hits = crate::store::search(&fleet, query, name, kind, limit)?;
    let took = started.elapsed();
    if json {
        output::json(json!({"hits": hits}));
        return Ok(0);
    }
    if hits.is_empty() {
        out(&format!("nothing found for `{query}`\n"));
        return Ok(0);
    }
    let mut text: String = hits
        .iter()
        .map(|h| {
            let snippet = h.snippet.replace('\n', " ");
            let (kind, agent) = (&h.kind, &h.agent);
            format!(
                "{kind:<9} {agent:<12} {}  {}\n          {snippet}\n",
                h.reference, h.title
            )
        })
        .collect();
    text.push_str(&format!("{} result(s) in {took:.1?}\n", hits.len()));
    out(&text);
    Ok(0)
}

/// `handoff inject`: paste a handoff (the latest by default) into the agent's pane.
fn inject(spec: &Spec, name: &str, id: Option<&str>, json: bool) -> anyhow::Result<i32> {
    let a = agent(spec, name)?;
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(name);
    let h = match id {
        Some(id) => continuity::find_handoff(spec, id, Some(name))
            .with_context(|| format!("agent `{name}` has no handoff `{id}`"))?,
        None => continuity::latest_for_startup(&dir).with_context(|| {
            format!(
                "agent `{name}` has no handoff yet (save one with `phoenix handoff save {name}`)"
            )
        })?,
    };
    let report = continuity::inject::to_agent(spec, a, &continuity::inject::handoff_text(&h))?;
    if json {
        output::json(&report);
    } else {
        out(&format!(
            "handoff {} injected into agent `{name}` in {} ({})\n",
            h.id, report.pane, report.confirmed_by
        ));
    }
    Ok(0)
}

/// `handoff clear`: archive the agent's handoffs, remove its ledger, reindex.
fn clear(spec: &Spec, name: &str, yes: bool) -> anyhow::Result<i32> {
    agent(spec, name)?;
    if !yes {
        bail!("this forgets agent `{name}`'s ledger and handoffs; pass --yes to go ahead");
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(name);
    let archive = dir.file(handoff::DIR).join("archive").join(
        jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string(),
    );
    let ids = handoff::list_ids(&dir);
    if !ids.is_empty() {
        crate::state::create_private_dir(&archive)?;
    }
    for id in &ids {
        std::fs::rename(handoff::path(&dir, id), archive.join(format!("{id}.md")))?;
    }
    let _ = std::fs::remove_file(dir.file(ledger::LEDGER));
    let _ = dir.record_op(
        Op::ContinuityCleared,
        json!({"handoffs": ids.len(), "archive": archive}),
    );
    Store::rebuild_fresh(&fleet)?;
    out(&format!(
        "cleared agent `{name}`: {} handoff(s) archived in {}, ledger removed\n",
        ids.len(),
        archive.display()
    ));
    Ok(0)
}

pub fn reindex(config: &Path, json: bool) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let started = std::time::Instant::now();
    // Into a new file renamed into place: a malformed index cannot make this fail.
    let (_, n) = Store::rebuild_fresh(&fleet)?;
    let took = started.elapsed();
    if json {
        output::json(json!({"documents": n, "ms": took.as_secs_f64() * 1000.0}));
    } else {
        out(&format!(
            "reindexed {n} document(s) in {took:.1?} ({})\n",
            fleet.root.join(crate::store::INDEX).display()
        ));
    }
    Ok(0)
}

pub fn brief(config: &Path, name: &str, generate: bool, json: bool) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    let a = agent(&spec, name)?;
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(name);
    if generate {
        let done = continuity::brief::generate(&spec, a).map_err(|e| {
            anyhow::anyhow!(
                "cannot generate the brief of agent `{name}`: {e} (nothing was changed)"
            )
        })?;
        for note in &done.notes {
            eprintln!("note: {note}");
        }
        if json {
            output::json(&done);
        } else {
            out(&format!(
                "wrote {} ({} characters, by {}){}{}\n",
                dir.file("brief.md").display(),
                done.chars,
                done.by,
                if done.state_fields.is_empty() {
                    String::new()
                } else {
                    format!("; state.json: {} updated", done.state_fields.join(", "))
                },
                if done.archived == 0 {
                    String::new()
                } else {
                    format!("; {} resolved item(s) archived", done.archived)
                }
            ));
        }
        return Ok(0);
    }
    let text = continuity::brief::read(&dir);
    if json {
        output::json(json!({"agent": name, "brief": text}));
    } else if text.trim().is_empty() {
        out(&format!(
            "agent `{name}` has no brief yet: `phoenix brief {name} --generate` writes one\n"
        ));
    } else {
        out(&text);
    }
    Ok(0)
}
