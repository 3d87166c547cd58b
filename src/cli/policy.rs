//! `phoenix policy test|show`, `phoenix clinic`, and the policy and template part of
//! `phoenix validate`.

use super::output;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::json;

use super::out;
use crate::clinic::{Clinic, TriageInput};
use crate::diag::{Diagnostic, FileDiagnostics, Located};
use crate::policy::fixture::{self, Fixture};
use crate::policy::{self, AgentInfo, Policies};
use crate::render::Templates;
use crate::spec::Spec;
use crate::state::FleetDir;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Run one entry point of a policy against a fixture and print the decision.
    /// Exit 1 when the policy broke or the decision differs from the fixture's `expect`.
    Test {
        /// A Lua file, or `recovery.lua` for the built-in default.
        policy: PathBuf,
        /// `{"call": "on_exit", "args": {"agent": {…}, "exit": {…}}, "expect": {…}}`
        fixture: PathBuf,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Print a built-in policy or fixture (to copy into policies/ and change), or list them.
    Show { name: Option<String> },
}

pub fn policy(cmd: PolicyCommand) -> anyhow::Result<i32> {
    match cmd {
        PolicyCommand::Test {
            policy,
            fixture,
            json,
        } => test(&policy, &fixture, json),
        PolicyCommand::Show { name } => show(name.as_deref()),
    }
}

fn show(name: Option<&str>) -> anyhow::Result<i32> {
    let policies = policy::EMBEDDED.iter().map(|(n, t)| (n.to_string(), *t));
    let fixtures = fixture::EMBEDDED
        .iter()
        .map(|(n, t)| (format!("fixtures/{n}"), *t));
    let all: Vec<(String, &str)> = policies.chain(fixtures).collect();
    match name {
        None => {
            let mut text =
                String::from("Built-in policies and fixtures (`phoenix policy show NAME`):\n");
            for (n, _) in &all {
                text.push_str(&format!("  {n}\n"));
            }
            out(&text);
            Ok(0)
        }
        Some(name) => {
            let name = name.trim_start_matches("policies/");
            match all
                .iter()
                .find(|(n, _)| n == name || n.trim_end_matches(".lua") == name)
            {
                Some((_, text)) => {
                    out(text);
                    Ok(0)
                }
                None => bail!(
                    "no built-in `{name}` (built in: {})",
                    all.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    }
}

fn test(policy_path: &Path, fixture_path: &Path, json: bool) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(fixture_path)
        .with_context(|| format!("cannot read fixture `{}`", fixture_path.display()))?;
    let fixture = Fixture::parse(&text)
        .map_err(|e| anyhow::anyhow!("fixture `{}`: {e}", fixture_path.display()))?;

    let builtin_name = policy_path
        .to_str()
        .map(|s| s.trim_start_matches("policies/"))
        .filter(|s| {
            policy::EMBEDDED
                .iter()
                .any(|(n, _)| n == s || n.trim_end_matches(".lua") == *s)
        });
    let (policies, selector) = if !policy_path.exists() && builtin_name.is_some() {
        (Policies::new(None), None)
    } else {
        let file = std::path::absolute(policy_path)
            .with_context(|| format!("cannot resolve `{}`", policy_path.display()))?;
        if !file.is_file() {
            bail!("policy `{}` does not exist", policy_path.display());
        }
        // `require` looks next to the policy; names are shown relative to where we are.
        let dir = file.parent().map(Path::to_path_buf);
        let mut policies = Policies::new(dir.as_deref());
        policies.set_base(&std::env::current_dir()?);
        let selector = file.display().to_string();
        (policies, Some(selector))
    };
    let outcome = fixture::run_quiet(&policies, selector.as_deref(), &fixture);
    if json {
        let mut value = outcome.to_json();
        value["policy"] = json!(policy_path);
        value["fixture"] = json!(fixture_path);
        output::json(&value);
    } else {
        let mut text = String::new();
        if let Some(d) = &fixture.description {
            text.push_str(&format!("fixture:  {d}\n"));
        }
        text.push_str(&format!("call:     {}\n", outcome.call));
        text.push_str(&format!("by:       {}\n", outcome.by));
        text.push_str(&format!("decision: {}\n", outcome.decision));
        // The budget hook counts in steps of 1000 instructions.
        let instructions = match outcome.instructions {
            0 => "under 1000 VM instructions".to_string(),
            n => format!("about {n} VM instructions"),
        };
        text.push_str(&format!(
            "took:     {}µs, {instructions}\n",
            outcome.elapsed.as_micros()
        ));
        for line in &outcome.logs {
            text.push_str(&format!("log:      {line}\n"));
        }
        if let Some(e) = &outcome.error {
            text.push_str(&format!(
                "error:    {e}\n          (phoenix would use the built-in default shown above)\n"
            ));
        }
        for m in &outcome.mismatches {
            text.push_str(&format!("expected: {m}\n"));
        }
        text.push_str(if outcome.passed() { "ok\n" } else { "FAILED\n" });
        out(&text);
    }
    Ok(if outcome.passed() { 0 } else { 1 })
}

/// A diagnostic for a policy error, pointing at the line in the file when we have both.
fn policy_diagnostics(spec: &Spec, errors: &[policy::Error]) -> Vec<FileDiagnostics> {
    let hint = "until it is fixed, phoenix uses the built-in default for this decision (`phoenix policy show recovery.lua`)";
    errors
        .iter()
        .map(|e| {
            let file = spec.dir.join(e.script());
            let source = std::fs::read_to_string(&file).unwrap_or_default();
            let span = e.line().and_then(|line| {
                let start: usize = source
                    .split_inclusive('\n')
                    .take((line as usize).saturating_sub(1))
                    .map(str::len)
                    .sum();
                let text = source[start.min(source.len())..].lines().next()?;
                let indent = text.len() - text.trim_start().len();
                Some(start + indent..start + text.len().max(indent + 1))
            });
            let message = format!(
                "policy `{}`: `{}`: {}",
                e.location(),
                e.function(),
                e.failure()
            );
            FileDiagnostics {
                file: if source.is_empty() {
                    PathBuf::from(e.script())
                } else {
                    file
                },
                source,
                diagnostics: vec![Diagnostic::new(message, span).with_hint(hint)],
            }
        })
        .collect()
}

fn template_diagnostics(spec: &Spec, errors: &[crate::render::Error]) -> Vec<FileDiagnostics> {
    errors
        .iter()
        .map(|e| {
            let (origin, line) = e.location();
            let file = spec.dir.join(&origin);
            let source = std::fs::read_to_string(&file).unwrap_or_default();
            let span = line.and_then(|line| {
                let start: usize = source
                    .split_inclusive('\n')
                    .take(line.saturating_sub(1))
                    .map(str::len)
                    .sum();
                (start < source.len()).then_some(start..start + 1)
            });
            FileDiagnostics {
                file,
                source,
                diagnostics: vec![
                    Diagnostic::new(format!("template `{origin}`: {}", e.message()), span)
                        .with_hint("until it is fixed, phoenix renders the built-in template of the same name"),
                ],
            }
        })
        .collect()
}

/// Policies and templates of a valid spec: what would break at run time, found now.
pub fn check_spec(spec: &Spec) -> Vec<FileDiagnostics> {
    let policies = Policies::for_spec(spec);
    let mut errors: Vec<policy::Error> = policies.check(None);
    let mut seen: Vec<&Path> = Vec::new();
    for agent in &spec.agents {
        if let Some(p) = &agent.policy {
            if seen.contains(&p.as_path()) {
                continue;
            }
            seen.push(p);
            for e in policies.check(Some(&p.display().to_string())) {
                if !errors.contains(&e) {
                    errors.push(e);
                }
            }
        }
    }
    let mut diags = policy_diagnostics(spec, &errors);
    diags.extend(template_diagnostics(
        spec,
        &Templates::for_spec(spec).check(),
    ));
    diags
}

/// `phoenix validate` for what comes after phoenix.toml. Returns the exit code.
pub fn validate_extras(spec: &Spec, json: bool) -> Option<i32> {
    let problems = check_spec(spec);
    if problems.is_empty() {
        return None;
    }
    if json {
        let errors: Vec<Located> = problems.iter().flat_map(|d| d.located()).collect();
        output::json(
            json!({"ok": false, "file": spec.file, "agents": spec.agent_names(), "errors": errors}),
        );
    } else {
        let text: Vec<String> = problems.iter().map(|d| d.to_string()).collect();
        eprint!("{}", text.join("\n"));
        eprintln!(
            "\n{}: {} problem{} in policies or templates",
            spec.file.display(),
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
    }
    Some(1)
}

// `phoenix clinic AGENT`: run the recovery pipeline on the agent's latest exit (the help is
// the variant's, in `Command`).
#[derive(Debug, clap::Args)]
pub struct ClinicArgs {
    pub agent: String,
    /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// The tail of the agent CLI's output (`-` for stdin), to find the error in.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// The CLI's transcript (default: the latest one its hooks reported).
    #[arg(long)]
    pub transcript: Option<PathBuf>,
    /// Decide and print only: record nothing, write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn clinic(config: &Path, args: ClinicArgs) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    let agent = spec.agent(&args.agent).with_context(|| {
        format!(
            "agent `{}` is not declared in {} ({})",
            args.agent,
            spec.file.display(),
            spec.declared_hint(&args.agent)
        )
    })?;
    let output = read_output(args.output.as_deref())?;
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(&agent.name);
    if output.is_none() && args.transcript.is_none() {
        require_an_exit(&agent.name, &dir)?;
    }
    let mut policies = Policies::for_spec(&spec);
    if args.dry_run {
        // A dry run writes nothing, not even a policy's fallback event.
        policies = Policies::new(Some(&spec.dir.join("policies")));
        policies.set_base(&spec.dir);
    }
    let templates = Templates::for_spec(&spec);
    let clinic = Clinic {
        policies: &policies,
        templates: &templates,
        settings: &spec.clinic,
        fleet,
        spent: crate::recovery::record::load(&dir).recoveries,
    };
    let recovery = clinic.recover(
        &TriageInput {
            agent: AgentInfo::from_spec(&spec, agent),
            dir: &dir,
            exit: None,
            transcript: args.transcript.clone(),
            output,
            // A person asks after the wrapper has moved on: the crash is the last exit's.
            session: crate::clinic::triage::Session::LastExited,
        },
        !args.dry_run,
    );
    if !args.dry_run {
        crate::recovery::execute::rehabilitate(&dir, &recovery)
            .context("cannot write what the next start gets")?;
    }
    if args.json {
        output::json(&recovery);
    } else {
        out(&recovery_text(&recovery, args.dry_run));
    }
    Ok(0)
}

/// `--output`: the CLI's output from a file, or from stdin for `-`.
pub(super) fn read_output(path: Option<&Path>) -> anyhow::Result<Option<String>> {
    let Some(path) = path else { return Ok(None) };
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        return Ok(Some(s));
    }
    let text =
        crate::state::bounded::read_string(path, 16 << 20, crate::state::bounded::Links::Follow)
            .with_context(|| format!("cannot read output `{}`", path.display()))?;
    Ok(Some(text))
}

/// Without an output or a transcript to diagnose, the agent must have exited once.
fn require_an_exit(name: &str, dir: &crate::state::AgentDir) -> anyhow::Result<()> {
    let ops_log = dir.file(crate::state::OPS_LOG);
    let ops = crate::state::op::tail(&ops_log);
    if !ops
        .iter()
        .any(|o| matches!(o.op, crate::state::Op::AgentExit(_)))
    {
        bail!(
            "agent `{name}` has no recorded exit (no `agent_exit` in {}): nothing to recover from; pass --output or --transcript to diagnose anyway",
            ops_log.display()
        );
    }
    Ok(())
}

/// The recovery for a person: one line a stage, then what the next session and the
/// notification get.
fn recovery_text(r: &crate::clinic::Recovery, dry_run: bool) -> String {
    let mut text = format!(
        "agent `{}`: recovery {} of {}\n",
        r.agent, r.attempt, r.max_recoveries
    );
    text.push_str(&format!(
        "triage:        {}: {}\n",
        r.trauma.error_type,
        crate::text::shorten(&r.trauma.error_message, 160)
    ));
    text.push_str(&format!(
        "diagnosis:     {} ({:.0}%): {}  [{}]\n",
        r.diagnosis.root_cause,
        r.diagnosis.confidence * 100.0,
        r.diagnosis.explanation,
        r.diagnosed_by
    ));
    let reason = r.prescription.reason.as_deref();
    text.push_str(&format!(
        "prescription:  {}{}  [{}]\n",
        r.prescription.action.as_str(),
        reason.map(|s| format!(": {s}")).unwrap_or_default(),
        r.prescribed_by
    ));
    let start = match r.rehab.start {
        crate::recovery::Start::Resume => "resume",
        crate::recovery::Start::Fresh => "fresh session",
        crate::recovery::Start::SafeMode => "safe mode",
    };
    let injected = if r.rehab.inject.is_some() {
        ", with injected context"
    } else {
        ""
    };
    text.push_str(&format!(
        "rehabilitation: {start} after {}s{injected}\n",
        r.rehab.delay.as_secs_f64()
    ));
    let sections = [
        ("injected into the next session", &r.rehab.inject),
        ("notification", &r.rehab.notify),
    ];
    for (title, body) in sections {
        if let Some(body) = body {
            text.push_str(&format!("\n--- {title} ---\n{body}"));
        }
    }
    for p in &r.problems {
        text.push_str(&format!("warning: {p}\n"));
    }
    if dry_run {
        text.push_str("\n(dry run: nothing was recorded or written)\n");
    }
    text
}
