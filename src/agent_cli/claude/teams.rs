//! Claude Code's agent teams beside a supervised agent. Read from the 2.1.197 and 2.1.332
//! binaries and tried against a scripted model server:
//!
//! - With `CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS=1` a session has one implicit team; its model
//!   spawns a teammate with the Agent tool and a `name` (`TeamCreate` is for older prompts).
//!   With `teammateMode: "tmux"` (a setting, or `--teammate-mode tmux`; `auto` picks tmux
//!   inside tmux too) the lead splits its own window (`split-window` at `$TMUX_PANE`) and
//!   types the teammate's command into the new pane: `cd <cwd> && env CLAUDECODE=1
//!   CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS=1 … <claude> --agent-id <name>@<team> --agent-name
//!   <name> --team-name <team> --agent-color <c> --parent-session-id <lead's session> …`.
//! - The teammate is a Claude Code of its own in the same workdir: it loads the same
//!   `.claude/settings.json` and runs phoenix's hooks for the agent, with a session of its
//!   own. Its payloads look like the lead's (no `agent_id`; `agent_type` only when it was
//!   given one, as `claude --agent` gives a main session one), and its environment is the
//!   tmux server's plus what Claude passes on (never `PHOENIX_*`). What tells it apart is the
//!   process that ran the hook: a Claude Code started with `--agent-id` and `--team-name`.
//!
//! `hooks/teammate.rs` keeps such a hook's session start, prompt, end and failed turn from
//! becoming the agent's.

/// The variable 2.1.332 gives its hooks: the pid of the Claude Code that runs them (2.1.197
/// has none: the walk up the process tree finds it).
const CLAUDE_PID_ENV: &str = "CLAUDE_PID";
/// How far up from the hook the Claude Code that runs it is looked for: the hook's shell
/// (`/bin/sh -c`), then the CLI; a few more for a wrapper script in between.
const MAX_ANCESTORS: usize = 6;

/// A teammate of an agent team, as its Claude Code was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teammate {
    /// `<name>@<team>`, the id the lead addresses it by.
    pub agent_id: String,
    pub name: Option<String>,
    pub team: String,
    /// The session of the lead that spawned it.
    pub lead_session: Option<String>,
    pub pid: u32,
}

/// The teammate whose Claude Code ran this hook: the nearest of the hook's `ancestors`
/// (nearest first, each with its arguments) started with the teammate flags, looked for no
/// further than the Claude Code that runs the hook (`CLAUDE_PID`, when it is one of them) or
/// a phoenix wrapper. `None`: not a teammate's.
pub fn teammate_of_hook(
    env: &dyn Fn(&str) -> Option<String>,
    ancestors: &mut dyn Iterator<Item = (u32, Vec<String>)>,
) -> Option<Teammate> {
    let runs_hook: Option<u32> = env(CLAUDE_PID_ENV).and_then(|p| p.trim().parse().ok());
    for (pid, argv) in ancestors.take(MAX_ANCESTORS) {
        if let Some(mate) = teammate_of(&argv, pid) {
            return Some(mate);
        }
        // The CLI that runs the hook, or a phoenix wrapper above it (teammates never run
        // under one): nothing further up is asked.
        if Some(pid) == runs_hook || is_wrapper(&argv) {
            return None;
        }
    }
    None
}

/// `phoenix … wrap --agent <agent>`: the supervisor a session of the agent runs under.
fn is_wrapper(argv: &[String]) -> bool {
    argv.iter().any(|a| a == "wrap") && argv.iter().any(|a| a == "--agent")
}

/// The teammate `argv` (a process's arguments) starts, if it is one: `--agent-id` and
/// `--team-name`, in either `--flag value` or `--flag=value` form, before a lone `--`.
pub fn teammate_of(argv: &[String], pid: u32) -> Option<Teammate> {
    let value = |flag: &str| -> Option<String> {
        let mut args = argv.iter().skip(1).take_while(|a| *a != "--");
        while let Some(arg) = args.next() {
            if arg == flag {
                return args
                    .next()
                    .filter(|v| !v.is_empty() && !v.starts_with("--"))
                    .cloned();
            }
            if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return (!v.is_empty()).then(|| v.to_string());
            }
        }
        None
    };
    let short = |v: String| crate::text::shorten(&v, 128);
    Some(Teammate {
        agent_id: short(value("--agent-id")?),
        team: short(value("--team-name")?),
        name: value("--agent-name").map(short),
        lead_session: value("--parent-session-id").map(short),
        pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    #[test]
    fn a_teammates_command_line_names_it() {
        let mate = teammate_of(
            &argv(
                "/usr/bin/claude --agent-id helper@session-3f --agent-name helper \
                 --team-name session-3f --agent-color blue \
                 --parent-session-id c6ad0470-c702-4ecf-b9e3-586d1ad4d2eb --dangerously-skip-permissions",
            ),
            42,
        )
        .unwrap();
        assert_eq!(mate.agent_id, "helper@session-3f");
        assert_eq!(mate.name.as_deref(), Some("helper"));
        assert_eq!(mate.team, "session-3f");
        assert_eq!(
            mate.lead_session.as_deref(),
            Some("c6ad0470-c702-4ecf-b9e3-586d1ad4d2eb")
        );
        let mate = teammate_of(&argv("claude --agent-id=a@t --team-name=t"), 1).unwrap();
        assert_eq!((mate.agent_id.as_str(), mate.team.as_str()), ("a@t", "t"));
    }

    #[test]
    fn a_lead_or_any_other_command_is_no_teammate() {
        for line in [
            "/usr/bin/claude --dangerously-skip-permissions",
            "/usr/bin/claude --agent reviewer --resume 4f9a",
            "claude --agent-id a@t",
            "claude --team-name t",
            "claude --agent-id --team-name t",
            "claude -p -- --agent-id a@t --team-name t",
            "--agent-id a@t --team-name t",
        ] {
            assert_eq!(teammate_of(&argv(line), 1), None, "{line}");
        }
    }

    #[test]
    fn the_walk_stops_at_the_cli_that_runs_the_hook_or_a_wrapper() {
        let chain = |lines: &[&str]| -> Vec<(u32, Vec<String>)> {
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| (100 - i as u32, argv(l)))
                .collect()
        };
        let mate = "claude --agent-id h@t --team-name t";
        let found = |lines: &[&str], pid: Option<&str>| {
            let pid = pid.map(str::to_string);
            teammate_of_hook(&|_| pid.clone(), &mut chain(lines).into_iter())
        };
        // 2.1.197: no CLAUDE_PID; the hook's shell, then the teammate.
        assert_eq!(found(&["sh -c hook", mate, "sh"], None).unwrap().pid, 99);
        // 2.1.332: CLAUDE_PID names it.
        assert!(found(&["sh -c hook", mate], Some("99")).is_some());
        // A Claude Code run inside a teammate's shell (CLAUDE_PID its own) is not it.
        assert_eq!(
            found(&["sh -c hook", "claude -p x", "bash", mate], Some("99")),
            None
        );
        // The agent's own session: its wrapper ends the walk.
        assert_eq!(
            found(
                &[
                    "sh -c hook",
                    "claude",
                    "phoenix --config p wrap --agent a",
                    mate
                ],
                None
            ),
            None
        );
        // Never further than MAX_ANCESTORS.
        let far = ["sh", "sh", "sh", "sh", "sh", "sh", mate];
        assert_eq!(found(&far, None), None);
    }
}
