//! The fleet-wide commands when phoenix.toml has `[[host]]`s: `status`, `events`,
//! `handoff list|search|show ID` show every host's rows beside this machine's, each labelled
//! with its host; `restart`, `stop`, `start` send each host's agents to it. The merging is
//! `hosts::reads` and `hosts::actions`; this file prints. A command about one agent of a host
//! is not here: it runs on that host through the one routing path (`route`).

use serde_json::{Value, json};

use super::{out, output};
use crate::hosts::actions::{self, AgentResult, Targets};
use crate::hosts::reads::{self, Merged};
use crate::spec::Spec;

/// How a row of this machine is labelled in the HOST column (`null` in JSON): no host can
/// have this name.
const HERE: &str = "(local)";

fn host_label(row: &Value) -> &str {
    row["host"].as_str().unwrap_or(HERE)
}

/// The width of the HOST column for `rows`.
fn host_width<'a>(labels: impl Iterator<Item = &'a str>) -> usize {
    labels
        .map(str::len)
        .chain([HERE.len(), 4])
        .max()
        .unwrap_or(4)
}

// ---- status ----

/// `status [--json]` across this machine and every host, and `status AGENT [--json]` of an
/// agent of a host (`status AGENT` of this machine's agent is as on one machine).
pub fn status(
    ctx: &crate::context::FleetContext,
    agent: Option<&str>,
    json: bool,
) -> anyhow::Result<i32> {
    let spec = &ctx.spec;
    let doc = reads::fleet_status(spec, ctx.runtime(), agent)?;
    let rows = doc["agents"].as_array().cloned().unwrap_or_default();
    let code = if rows.iter().any(reads::is_down) {
        super::fleet::EXIT_NOT_RUNNING
    } else {
        0
    };
    if json {
        output::json(&doc);
        return Ok(code);
    }
    out(&status_table(spec, &doc, &rows, ctx.runtime.location()));
    Ok(code)
}

/// One line per agent with its host first, then this machine's daemon and each host's.
fn status_table(spec: &Spec, doc: &Value, rows: &[Value], location: String) -> String {
    let now = jiff::Timestamp::now().as_second();
    let width = host_width(rows.iter().map(host_label));
    let mut text = format!(
        "{:<width$} {:<20} {:<14} {:<10} {:>8} {:>8} {:<6} {}\n",
        "HOST", "AGENT", "STATE", "HEALTH", "PID", "UPTIME", "PANE", "LAST ACTIVITY"
    );
    let dash = || "-".to_string();
    for r in rows {
        let health = r["health"].as_str().unwrap_or("-");
        let ago = r["last_activity"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| format!("{} ago", super::fleet::human_secs(now - t.as_second())))
            .unwrap_or_else(dash);
        text.push_str(&format!(
            "{:<width$} {:<20} {:<14} {} {:>8} {:>8} {:<6} {}\n",
            host_label(r),
            r["agent"].as_str().unwrap_or("?"),
            r["state"].as_str().unwrap_or("-"),
            output::paint(output::health(health), &format!("{health:<10}")),
            r["pid"]
                .as_u64()
                .map(|p| p.to_string())
                .unwrap_or_else(dash),
            r["uptime_secs"]
                .as_i64()
                .map(super::fleet::human_secs)
                .unwrap_or_else(dash),
            r["pane"].as_str().unwrap_or("-"),
            ago
        ));
    }
    if doc["server_running"] != true && !spec.agents.is_empty() {
        text.push_str(&format!(
            "\n(no {location} yet: run `phoenix apply` to start the fleet)\n"
        ));
    }
    for r in rows.iter().filter(|r| reads::is_stale(r)) {
        text.push_str(&format!(
            "{}\n",
            output::paint(
                output::REMOVE,
                &format!(
                    "stale copy: `{}` runs on {} but is placed on {}: phoenix stops it at its next contact with that machine; `phoenix move --cleanup` stops it now",
                    r["agent"].as_str().unwrap_or("?"),
                    r["host"].as_str().unwrap_or("this machine"),
                    r["stale"]["placed"].as_str().unwrap_or("?")
                )
            )
        ));
    }
    text.push_str(&super::fleet::daemon_line(spec));
    for host in doc["hosts"].as_array().into_iter().flatten() {
        text.push_str(&host_line(host));
    }
    text
}

/// A host's line under the table: its daemon, or why it did not answer.
fn host_line(host: &Value) -> String {
    let name = host["host"].as_str().unwrap_or("?");
    if let Some(error) = host["error"].as_str() {
        // The error names the host itself (`host `gpu-2` is unreachable: …`).
        let mut line = format!("{}\n", output::paint(output::REMOVE, error));
        if let Some(hint) = host["hint"].as_str() {
            line.push_str(&format!("  = hint: {hint}\n"));
        }
        return line;
    }
    let mut said = String::new();
    for stopped in host["stale_stopped"].as_array().into_iter().flatten() {
        said.push_str(&format!(
            "host `{name}`: stopped the stale copy of `{}` (the agent was moved away from it)\n",
            stopped.as_str().unwrap_or("?")
        ));
    }
    for failed in host["stale_stop_failed"].as_array().into_iter().flatten() {
        said.push_str(&format!(
            "{}\n",
            output::paint(
                output::REMOVE,
                &format!(
                    "host `{name}`: a stale copy was not stopped ({}): its daemon stops it, or `phoenix move --cleanup`",
                    failed.as_str().unwrap_or("?")
                )
            )
        ));
    }
    for warning in host["warnings"].as_array().into_iter().flatten() {
        said.push_str(&format!("warning: {}\n", warning.as_str().unwrap_or("?")));
    }
    let daemon = match host["daemon"]["pid"].as_u64() {
        Some(pid) => format!("`phoenix run` supervises it (pid {pid})"),
        None => "daemon not running".to_string(),
    };
    let server = if host["server_running"] == true {
        ""
    } else {
        ", nothing started there yet"
    };
    format!("{said}host `{name}`: {daemon}{server}\n")
}

// ---- events ----

/// `events` of this machine and every host (only an agent's host with `--agent`), merged
/// into one timeline, each event with its host.
pub fn events(
    spec: &Spec,
    args: &super::events::EventsArgs,
    host_args: &[String],
    local: Vec<Value>,
) -> anyhow::Result<i32> {
    let mut links = crate::hosts::fleet::links(spec);
    if let Some(agent) = &args.agent {
        links.retain(|l| reads::host_of(spec, agent) == Some(l.name()));
    }
    let answers = reads::ask_json(&links, host_args, reads::READ_TIMEOUT);
    let merged = reads::merge_events(local, answers, args.limit);
    if args.json {
        output::json(reads::merged_document("events", merged));
        return Ok(0);
    }
    warn_unreachable(&merged, "events");
    if merged.rows.is_empty() {
        out("no critical events on this machine or its hosts\n");
        return Ok(0);
    }
    let width = host_width(merged.rows.iter().map(host_label));
    let layout = super::events::Layout::new(&merged.rows, Some(width), &[], args.utc);
    let mut text = layout.header();
    for e in &merged.rows {
        text.push_str(&layout.line(e, Some(host_label(e))));
    }
    out(&text);
    Ok(0)
}

/// `events --follow` of this machine and every host: the merged past first (as `events`
/// shows it), then each new event as it comes, from here (`poll_local`) or from a host
/// (`hosts`), labelled with its host. A host that cannot be followed is said once on
/// stderr, and again when it is back; the others go on meanwhile. Runs until interrupted.
pub fn follow(
    spec: &Spec,
    args: &super::events::EventsArgs,
    host_args: &[String],
    local: Vec<Value>,
    hosts: std::sync::mpsc::Receiver<crate::hosts::follow::Followed>,
    mut poll_local: impl FnMut() -> Vec<Value>,
) -> anyhow::Result<i32> {
    use crate::hosts::follow::Followed;
    let links = crate::hosts::fleet::links(spec);
    let answers = reads::ask_json(&links, host_args, reads::READ_TIMEOUT);
    let merged = reads::merge_events(local, answers, args.limit);
    warn_unreachable(&merged, "past events");
    let width = host_width(spec.hosts.iter().map(|h| h.name.as_str()));
    let names = spec.agent_names();
    let layout = super::events::Layout::new(&merged.rows, Some(width), &names, args.utc);
    let show = |e: &Value| match args.json {
        true => super::events::json_line(e),
        false => layout.line(e, Some(host_label(e))),
    };
    if !args.json {
        out(&layout.header());
    }
    out(&merged.rows.iter().map(show).collect::<String>());
    // A host's stream begins where the follow began, so its first events may be among the
    // past just shown: those are not shown twice.
    let mut shown: std::collections::HashSet<String> = merged
        .rows
        .iter()
        .filter(|e| e["host"].is_string())
        .map(event_key)
        .collect();
    loop {
        let mut text = String::new();
        for mut e in poll_local() {
            reads::label(std::slice::from_mut(&mut e), None);
            text.push_str(&show(&e));
        }
        while let Ok(followed) = hosts.try_recv() {
            match followed {
                Followed::Event(e) => {
                    if shown.is_empty() || !shown.remove(&event_key(&e)) {
                        text.push_str(&show(&e));
                    }
                }
                Followed::Down { error, hint, .. } => {
                    eprintln!("warning: {error}; its events are shown when it answers again");
                    if let Some(hint) = hint {
                        eprintln!("  = hint: {hint}");
                    }
                }
                Followed::Back { host } => {
                    eprintln!("host `{host}` answers again: following its events");
                }
            }
        }
        out(&text);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// What tells one host's event from another: its host, time, name, agent and reason.
fn event_key(e: &Value) -> String {
    ["host", "ts", "event", "agent", "reason"]
        .iter()
        .map(|k| e[*k].to_string())
        .collect::<Vec<_>>()
        .join("\u{0}")
}

/// The hosts that did not answer, on stderr: what is shown is without them.
fn warn_unreachable(merged: &Merged, what: &str) {
    for said in &merged.warnings {
        eprintln!("warning: {said}");
    }
    for host in &merged.unreachable {
        eprintln!(
            "warning: {}; its {what} are not shown",
            host["error"].as_str().unwrap_or("a host did not answer")
        );
        if let Some(hint) = host["hint"].as_str() {
            eprintln!("  = hint: {hint}");
        }
    }
}

// ---- handoffs ----

/// `handoff search` over this machine's index and every host's, merged by rank.
pub fn search(
    spec: &Spec,
    query: &str,
    agent: Option<&str>,
    kind: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let remote = agent.and_then(|a| reads::host_of(spec, a));
    let mut args = vec![
        "handoff".to_string(),
        "search".into(),
        "--json".into(),
        format!("--limit={limit}"),
    ];
    args.extend(agent.map(|a| format!("--agent={a}")));
    args.extend(kind.map(|k| format!("--kind={k}")));
    args.extend(["--".into(), query.to_string()]);
    let mut links = crate::hosts::fleet::links(spec);
    links.retain(|l| agent.is_none() || remote == Some(l.name()));
    let (local, answers) = std::thread::scope(|scope| {
        let hosts = scope.spawn(|| reads::ask_json(&links, &args, reads::READ_TIMEOUT));
        let local = match remote {
            Some(_) => Ok(Vec::new()),
            None => {
                let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
                crate::store::search(&fleet, query, agent, kind, limit)
            }
        };
        (
            local,
            hosts.join().expect("asking the hosts does not panic"),
        )
    });
    let local: Vec<Value> = local?
        .iter()
        .map(|h| serde_json::to_value(h).unwrap_or_default())
        .collect();
    let merged = reads::merge_hits(local, answers, limit);
    if json {
        output::json(reads::merged_document("hits", merged));
        return Ok(0);
    }
    warn_unreachable(&merged, "results");
    if merged.rows.is_empty() {
        out(&format!("nothing found for `{query}`\n"));
        return Ok(0);
    }
    let width = host_width(merged.rows.iter().map(host_label));
    let field = |h: &Value, k: &str| h[k].as_str().unwrap_or("-").to_string();
    let mut text: String = merged
        .rows
        .iter()
        .map(|h| {
            format!(
                "{:<9} {:<width$} {:<12} {}  {}\n          {}\n",
                field(h, "kind"),
                host_label(h),
                field(h, "agent"),
                field(h, "reference"),
                field(h, "title"),
                field(h, "snippet").replace('\n', " ")
            )
        })
        .collect();
    text.push_str(&format!(
        "{} result(s) in {:.1?}\n",
        merged.rows.len(),
        started.elapsed()
    ));
    out(&text);
    Ok(0)
}

/// `handoff list` of every agent: this machine's, then every host's.
pub fn list(spec: &Spec, json: bool) -> anyhow::Result<i32> {
    let links = crate::hosts::fleet::links(spec);
    let args = ["handoff".to_string(), "list".into(), "--json".into()];
    let answers = reads::ask_json(&links, &args, reads::READ_TIMEOUT);
    let local: Vec<Value> = crate::continuity::handoffs(spec, spec.agent_names().iter().copied())
        .iter()
        .map(crate::continuity::summary_json)
        .collect();
    let merged = reads::merge(local, answers, "handoffs");
    if json {
        output::json(reads::merged_document("handoffs", merged));
        return Ok(0);
    }
    warn_unreachable(&merged, "handoffs");
    if merged.rows.is_empty() {
        out("no handoffs yet\n");
        return Ok(0);
    }
    let width = host_width(merged.rows.iter().map(host_label));
    let field = |h: &Value, k: &str| h[k].as_str().unwrap_or("-").to_string();
    let text: String = merged
        .rows
        .iter()
        .map(|h| {
            format!(
                "{}  {:<width$} {:<12} {:<14} {}\n",
                field(h, "id"),
                host_label(h),
                field(h, "agent"),
                field(h, "trigger_reason"),
                field(h, "summary")
            )
        })
        .collect();
    out(&text);
    Ok(0)
}

/// `handoff show ID` of no agent in particular, not found here: the first host that has it
/// prints it.
pub fn show_anywhere(spec: &Spec, args: &[String]) -> anyhow::Result<Option<i32>> {
    let links = crate::hosts::fleet::links(spec);
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let found = crate::hosts::fleet::each(&links, |link| {
        link.run(&words, reads::READ_TIMEOUT)
            .ok()
            .filter(|ran| ran.code == Some(0))
    });
    match found.into_iter().flatten().next() {
        Some(ran) => {
            out(&ran.stdout);
            Ok(Some(0))
        }
        None => Ok(None),
    }
}

// ---- restart, stop, start ----

/// `verb` on this machine's agents (`local`, run here while the hosts are asked) and on the
/// hosts' (`targets`): one line per agent, labelled with its host; exit 1 if any failed.
pub fn act(
    spec: &Spec,
    verb: &str,
    flags: &[&str],
    targets: &Targets,
    local: impl FnOnce() -> anyhow::Result<Vec<AgentResult>>,
    json: bool,
) -> anyhow::Result<i32> {
    let (local, remote) = std::thread::scope(|scope| {
        let hosts = scope.spawn(|| actions::act(spec, verb, flags, targets));
        (
            local(),
            hosts.join().expect("asking the hosts does not panic"),
        )
    });
    let mut results = local?;
    results.extend(remote);
    let failed = results.iter().filter(|r| !r.ok).count();
    if json {
        super::output::json(json!({"command": verb, "agents": results, "failed": failed}));
    } else {
        let text: String = results
            .iter()
            .map(|r| {
                let mark = if r.ok { "✓" } else { "✗" };
                let on = r
                    .host
                    .as_deref()
                    .map(|h| format!(" on {h}"))
                    .unwrap_or_default();
                format!("{mark} agent `{}`{on}: {}\n", r.agent, r.detail)
            })
            .collect();
        out(&text);
    }
    Ok(i32::from(failed > 0))
}
