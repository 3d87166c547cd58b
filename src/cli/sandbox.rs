//! `phoenix sandbox verify|show`: the agents' sandboxes proven by canaries run inside them,
//! and what each sandbox shows; `phoenix sandbox-canary`, the canaries' side inside.

use std::path::Path;

use clap::Subcommand;
use serde_json::json;

use super::{out, output};
use crate::sandbox::verify::{self, Verified};
use crate::spec::{self, AgentSpec, Spec};

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run canaries inside each sandboxed agent's sandbox (or those named, by agent or by
    /// profile): a planted secret cannot be read, another agent's state cannot be written,
    /// protected hook files cannot be changed, hosts not allowed cannot be reached, an
    /// allowed one answers, the workdir can be written, other wrappers' sockets and the
    /// wrapper itself are out of reach. Exit 1 when a canary escaped.
    Verify {
        /// Agents or sandbox profiles; default: every sandboxed agent.
        names: Vec<String>,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// What an agent's sandbox shows: each path read-only, writable, hidden or protected,
    /// and why; its network.
    Show {
        agent: String,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

pub fn sandbox(config: &Path, cmd: SandboxCommand) -> anyhow::Result<i32> {
    let spec = spec::load(config)?;
    match cmd {
        SandboxCommand::Verify { names, json } => verify_all(&spec, &names, json),
        SandboxCommand::Show { agent, json } => show(&spec, &agent, json),
    }
}

/// The agents `names` pick: by agent name or profile name; all sandboxed ones without names.
fn pick<'a>(spec: &'a Spec, names: &[String]) -> anyhow::Result<Vec<&'a AgentSpec>> {
    let sandboxed: Vec<&AgentSpec> = spec.agents.iter().filter(|a| a.sandbox.is_some()).collect();
    if names.is_empty() {
        return Ok(sandboxed);
    }
    let mut picked = Vec::new();
    for name in names {
        let by_profile: Vec<&AgentSpec> = sandboxed
            .iter()
            .copied()
            .filter(|a| a.sandbox.as_ref().is_some_and(|s| &s.profile == name))
            .collect();
        match spec.agent(name) {
            Some(a) if a.sandbox.is_none() => anyhow::bail!(
                "agent `{name}` has no sandbox (give it `sandbox = \"PROFILE\"` in phoenix.toml)"
            ),
            Some(a) => picked.push(a),
            None if !by_profile.is_empty() => picked.extend(by_profile),
            None => anyhow::bail!(
                "`{name}` is neither a sandboxed agent nor a profile an agent uses ({})",
                spec.declared_hint(name)
            ),
        }
    }
    picked.dedup_by(|a, b| a.name == b.name);
    Ok(picked)
}

fn verify_all(spec: &Spec, names: &[String], json: bool) -> anyhow::Result<i32> {
    let agents = pick(spec, names)?;
    let mut results: Vec<Result<Verified, (String, String)>> = Vec::new();
    for agent in agents {
        results.push(verify::verify(spec, agent).map_err(|e| (agent.name.clone(), e)));
    }
    let passed = results.iter().all(|r| r.as_ref().is_ok_and(|v| v.passed));
    if json {
        let agents: Vec<serde_json::Value> = results
            .iter()
            .map(|r| match r {
                Ok(v) => serde_json::to_value(v).expect("serialises"),
                Err((agent, e)) => json!({"agent": agent, "passed": false, "error": e}),
            })
            .collect();
        output::json(json!({"passed": passed, "agents": agents}));
    } else if results.is_empty() {
        out("no agent runs in a sandbox (give one `sandbox = \"PROFILE\"`; see docs/sandbox.md)\n");
    } else {
        let mut text = String::new();
        for r in &results {
            match r {
                Ok(v) => text.push_str(&verified_text(v)),
                Err((agent, e)) => text.push_str(&format!(
                    "✗ agent `{agent}`: cannot verify its sandbox: {e}\n"
                )),
            }
        }
        out(&text);
    }
    Ok(if passed { 0 } else { 1 })
}

fn verified_text(v: &Verified) -> String {
    let mark = if v.passed { "✓" } else { "✗" };
    let failed = v.failed().len();
    let mut text = format!(
        "{mark} agent `{}`, sandbox `{}`: {} of {} canaries held\n",
        v.agent,
        v.profile,
        v.checks.len() - failed,
        v.checks.len()
    );
    for c in &v.checks {
        let mark = if c.passed { "✓" } else { "✗" };
        text.push_str(&format!("    {mark} {} — {}\n", c.name, c.detail));
    }
    if let Some(limits) = &v.limits {
        text.push_str(&format!("    limits: {limits}\n"));
    }
    text
}

fn show(spec: &Spec, name: &str, json: bool) -> anyhow::Result<i32> {
    let agent = spec
        .agent(name)
        .ok_or_else(|| anyhow::anyhow!("no agent `{name}` ({})", spec.declared_hint(name)))?;
    let Some(sandbox) = &agent.sandbox else {
        anyhow::bail!("agent `{name}` has no sandbox (give it `sandbox = \"PROFILE\"`)");
    };
    let layout = crate::sandbox::layout(spec, agent, sandbox, &crate::sandbox::Context::of(spec));
    let last = verify::last(&crate::state::FleetDir::new(&spec.fleet.state_dir), name);
    if json {
        output::json(json!({"agent": name, "layout": layout, "verified": last}));
        return Ok(0);
    }
    let mut text = format!("{}\n", layout.summary());
    for rule in &layout.rules {
        let what = match &rule.access {
            crate::sandbox::layout::Access::Read => "read-only".to_string(),
            crate::sandbox::layout::Access::Write => "writable".to_string(),
            crate::sandbox::layout::Access::Hide => "hidden".to_string(),
            crate::sandbox::layout::Access::Protect => "protected".to_string(),
            crate::sandbox::layout::Access::ShowInstead(p) => format!("shows {}", p.display()),
            crate::sandbox::layout::Access::WriteInstead(p) => {
                format!("writable, from {}", p.display())
            }
        };
        let missing = if rule.path.exists() {
            ""
        } else {
            " (not there)"
        };
        text.push_str(&format!(
            "    {:<10} {}{missing} — {}\n",
            what,
            rule.path.display(),
            rule.why
        ));
    }
    text.push_str(&match &last {
        Some(v) => format!(
            "    last verified {}: {}\n",
            v.at,
            if v.passed { "passed" } else { "FAILED" }
        ),
        None => "    never verified: run `phoenix sandbox verify`\n".to_string(),
    });
    out(&text);
    Ok(0)
}

/// Inside a sandbox: the canaries in `plan` (JSON), their findings as JSON on stdout.
pub fn canary(plan: &str) -> anyhow::Result<i32> {
    let canaries: Vec<verify::Canary> = serde_json::from_str(plan)?;
    let found = verify::run_canaries(&canaries);
    out(&format!("{}\n", serde_json::to_string(&found)?));
    Ok(0)
}
