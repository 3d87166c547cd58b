//! The agent's argv: its base command and its CLI's resume form, rebuilt every time.

use super::*;

/// The agent's base argv, rebuilt from its command every time, as its CLI wants it
/// (`AgentCli::base_argv`). A leading `phoenix` means this very binary, so bundled examples
/// work without phoenix on PATH.
pub fn base_argv(agent: &AgentSpec) -> Vec<String> {
    let argv = agent.cli.adapter().base_argv(with_exe(agent.argv.clone()));
    if agent.sandbox.is_none() {
        return argv;
    }
    // Inside phoenix's sandbox the CLI's own is off: nested, it fails (docs/sandbox.md).
    own_sandbox(agent, argv).argv
}

/// What the CLI is told about its own sandbox when phoenix runs it in one.
pub(super) fn own_sandbox(
    agent: &AgentSpec,
    argv: Vec<String>,
) -> crate::agent_cli::own_sandbox::OwnSandbox {
    crate::agent_cli::own_sandbox::for_agent(
        agent,
        agent.sandbox.is_some(),
        argv,
        &|k| std::env::var(k).ok(),
        None,
    )
}

pub(super) fn with_exe(mut argv: Vec<String>) -> Vec<String> {
    if argv.first().map(String::as_str) == Some("phoenix")
        && let Ok(exe) = crate::process::main_binary()
    {
        argv[0] = exe.to_string_lossy().into_owned();
    }
    argv
}

/// The CLI's resume form for session `id`, built from the base command (never from the
/// previous argv, so flags cannot pile up). `None` when the CLI has no known resume form.
pub fn resume_argv(agent: &AgentSpec, id: &str) -> Option<Vec<String>> {
    if let Some(template) = &agent.resume_argv {
        // Substituted per argument after splitting: an id can never become two arguments.
        let argv = template
            .iter()
            .map(|a| a.replace("{session_id}", id))
            .collect();
        return Some(with_exe(argv));
    }
    agent.cli.adapter().resume_argv(base_argv(agent), id)
}

/// What the agent's next start will be, as its wrapper would choose it now (`status AGENT`
/// says it): the resume of the recorded session with the CLI's resume form, or a fresh
/// session and why. Reads only.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NextStart {
    /// `resume` or `fresh`.
    pub mode: Start,
    pub session_id: Option<String>,
    pub argv: Vec<String>,
    /// Why it is fresh (`None` for a resume).
    pub why: Option<String>,
}

/// The start [`NextStart`] describes, by the rules `run_once` follows: the `.fresh` marker,
/// a recorded session this agent may resume, a turn in it, a resume form for its CLI.
pub fn next_start(dir: &AgentDir, agent: &AgentSpec) -> NextStart {
    let fresh = |why: String| NextStart {
        mode: Start::Fresh,
        session_id: None,
        argv: base_argv(agent),
        why: Some(why),
    };
    if dir.has_marker(state::FRESH) {
        return fresh("a fresh start was asked for".into());
    }
    let Some(session) = record::recorded_session(dir) else {
        return fresh("no session recorded yet".into());
    };
    let id = session.id.clone();
    if !record::resumable(&session, &record::load(dir), &agent.workdir) {
        return fresh(format!(
            "session {id} is not to be resumed (abandoned, or from another directory)"
        ));
    }
    if !record::session_has_turn(dir, &id) {
        return fresh(format!("session {id}: {}", record::no_turn_why(dir, &id)));
    }
    match resume_argv(agent, &id) {
        Some(argv) => NextStart {
            mode: Start::Resume,
            session_id: Some(id),
            argv,
            why: None,
        },
        None => fresh(format!(
            "`{}` has no known resume form (set `resume_command`)",
            agent.cli
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{LoadOptions, parse};
    use std::path::Path;

    pub(super) fn agent(body: &str) -> AgentSpec {
        let spec = parse(
            &format!("[[agent]]\nname = \"a\"\n{body}"),
            Path::new("/fleet/phoenix.toml"),
            LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        spec.agents[0].clone()
    }

    #[test]
    pub(super) fn resume_forms_follow_each_cli() {
        let claude = agent("cli = \"claude\"\ncommand = \"claude --model opus\"\n");
        assert_eq!(
            resume_argv(&claude, "s1").unwrap(),
            ["claude", "--model", "opus", "--resume", "s1"]
        );
        let codex = agent("cli = \"codex\"\ncommand = \"codex -m o3\"\n");
        assert_eq!(
            resume_argv(&codex, "s1").unwrap(),
            ["codex", "resume", "s1", "--no-daemon", "-m", "o3"]
        );
        let gemini = agent("cli = \"gemini\"\n");
        assert_eq!(
            resume_argv(&gemini, "s1").unwrap(),
            ["gemini", "--resume", "s1"]
        );
        let custom = agent("command = \"my-cli\"\n");
        assert_eq!(resume_argv(&custom, "s1"), None);
    }

    #[test]
    pub(super) fn codex_runs_its_session_in_the_supervised_process() {
        let codex = agent("cli = \"codex\"\ncommand = \"/opt/bin/codex --search\"\n");
        assert_eq!(
            base_argv(&codex),
            ["/opt/bin/codex", "--no-daemon", "--search"]
        );
        let chosen = agent("cli = \"codex\"\ncommand = \"codex --no-daemon\"\n");
        assert_eq!(base_argv(&chosen), ["codex", "--no-daemon"]);
        let remote = agent("cli = \"codex\"\ncommand = \"codex --remote ws://h:1\"\n");
        assert_eq!(base_argv(&remote), ["codex", "--remote", "ws://h:1"]);
        // Some other program that starts Codex its own way is left as written.
        let wrapped = agent("cli = \"codex\"\ncommand = \"npx @openai/codex\"\n");
        assert_eq!(base_argv(&wrapped), ["npx", "@openai/codex"]);
        let claude = agent("cli = \"claude\"\ncommand = \"codex\"\n");
        assert_eq!(base_argv(&claude), ["codex"]);
    }

    #[test]
    pub(super) fn resume_command_template_substitutes_one_argument() {
        let a =
            agent("command = \"my-cli\"\nresume_command = \"my-cli --resume {session_id} --x\"\n");
        assert_eq!(
            resume_argv(&a, "a b;c").unwrap(),
            ["my-cli", "--resume", "a b;c", "--x"]
        );
    }

    #[test]
    pub(super) fn base_command_never_accumulates_flags() {
        let a = agent("cli = \"claude\"\ncommand = \"claude\"\n");
        let _ = resume_argv(&a, "s1");
        let _ = resume_argv(&a, "s2");
        assert_eq!(base_argv(&a), ["claude"]);
        assert_eq!(resume_argv(&a, "s3").unwrap(), ["claude", "--resume", "s3"]);
    }
}
