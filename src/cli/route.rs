//! The one routing path: a command that names an agent runs where that agent lives. [`route`]
//! is the one place that knows which argument of which command names an agent; [`forward`]
//! sends the command line the operator typed (without this machine's `--config`) to the
//! agent's host: through the host protocol, its output printed as it came, or over `ssh -t`
//! for what needs a terminal (`attach`, `exec`, `--follow`). An agent of this machine, and
//! any command of a fleet without `[[host]]`, runs here as on one machine.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::{Cli, Command, out};
use crate::hosts::{actions, reads};
use crate::spec::Spec;

/// Where a command runs.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// Here: it names no agent, or it is run on the agent's own machine by that machine's
    /// phoenix (a pane's wrapper, a hook).
    Here,
    /// Across the fleet, by the command itself: it merges every host's answer (`status`,
    /// `events`, `handoff search`, `usage`) or sends each agent to its host (`restart a b`,
    /// `apply a b`, `down`, `move`).
    Fleet,
    /// Where these agents live (all on one machine); `terminal`: it needs one there.
    Agents {
        agents: Vec<&'a str>,
        terminal: bool,
    },
}

fn one(agent: &str) -> Route<'_> {
    Route::Agents {
        agents: vec![agent],
        terminal: false,
    }
}

fn with_terminal(agent: &str) -> Route<'_> {
    Route::Agents {
        agents: vec![agent],
        terminal: true,
    }
}

/// Where `command` runs. Every variant is named (no `_`): a new command must say.
pub fn route(command: &Command) -> Route<'_> {
    use super::agent_state::{HooksCommand, LoopCommand, StateCommand};
    use super::continuity::HandoffCommand;
    use super::sandbox::SandboxCommand;
    match command {
        Command::Status { agent: None, .. } => Route::Fleet,
        // The same document as `status --json`, of one agent, labelled with its host.
        Command::Status { json: true, .. } => Route::Fleet,
        Command::Status {
            agent: Some(agent), ..
        } => one(agent),
        Command::Usage(_)
        | Command::Apply { .. }
        | Command::Restart { .. }
        | Command::Stop { .. }
        | Command::Start { .. }
        | Command::Down { .. }
        | Command::Move(_)
        | Command::Plan { .. } => Route::Fleet,
        Command::Events(args) => match (&args.agent, args.follow) {
            (Some(agent), true) => with_terminal(agent),
            _ => Route::Fleet,
        },
        Command::Logs(args) if args.agents.is_empty() => Route::Here,
        Command::Logs(args) => Route::Agents {
            agents: args.agents.iter().map(String::as_str).collect(),
            terminal: args.follow,
        },
        Command::Attach { agent } | Command::Exec { agent, .. } => with_terminal(agent),
        Command::Resolve { agent, .. }
        | Command::Ledger { agent, .. }
        | Command::Inbox { agent, .. }
        | Command::Brief { agent, .. } => one(agent),
        Command::Send(args) => one(&args.agent),
        Command::Wait(args) => one(&args.agent),
        Command::Clinic(args) => one(&args.agent),
        Command::Loop(LoopCommand::Add { agent, .. } | LoopCommand::List { agent, .. }) => {
            one(agent)
        }
        Command::State(StateCommand::Show { agent, .. }) => one(agent),
        // Its host sends that agent's notifications, through the channels of its slice.
        Command::Notify(super::notify::NotifyCommand::Test {
            agent: Some(agent), ..
        }) => one(agent),
        Command::Hooks(HooksCommand::Show { agent, .. }) => one(agent),
        Command::Handoff(cmd) => match cmd {
            HandoffCommand::Save { agent, .. }
            | HandoffCommand::Inject { agent, .. }
            | HandoffCommand::Clear { agent, .. }
            | HandoffCommand::List {
                agent: Some(agent), ..
            }
            | HandoffCommand::Show {
                agent: Some(agent), ..
            } => one(agent),
            HandoffCommand::List { agent: None, .. }
            | HandoffCommand::Show { agent: None, .. }
            | HandoffCommand::Search { .. } => Route::Fleet,
        },
        Command::Sandbox(cmd) => match cmd {
            SandboxCommand::Show { agent, .. } => one(agent),
            // Names agents or profiles: each agent where it lives, when all are on one host.
            SandboxCommand::Verify { names, .. } => Route::Agents {
                agents: names.iter().map(String::as_str).collect(),
                terminal: false,
            },
        },
        // Run by an agent's own machine (its pane, its CLI's hooks), never by an operator.
        Command::Wrap { .. } | Command::Hook(_) | Command::Tap { .. } => Route::Here,
        Command::DemoAgent(_) => Route::Here,
        Command::Init { .. }
        | Command::Validate { .. }
        | Command::Top { .. }
        | Command::Doctor { .. }
        | Command::Run { .. }
        | Command::Service { .. }
        | Command::Policy(_)
        | Command::Watchdog { .. }
        | Command::Notify(super::notify::NotifyCommand::Test { agent: None, .. })
        | Command::Reindex { .. }
        | Command::Hosts(_)
        | Command::SandboxCanary { .. }
        | Command::Host
        | Command::SandboxInner { .. }
        | Command::Serve { .. }
        | Command::Mcp
        | Command::Completions { .. }
        | Command::Complete { .. }
        | Command::Man { .. }
        | Command::Schema
        | Command::Version { .. } => Route::Here,
    }
}

/// `cli`'s command run on its agents' host, when phoenix.toml places them on one (`None`:
/// it runs here). `argv` is the command line as typed, after the program's name.
pub fn forward(cli: &mut Cli, argv: &[String]) -> anyhow::Result<Option<i32>> {
    let Route::Agents { agents, terminal } = route(&cli.command) else {
        return Ok(None);
    };
    // A spec that does not load is the command's to report, in its own words.
    let Ok(spec) = super::load_without_fs_checks(&cli.config) else {
        return Ok(None);
    };
    if spec.hosts.is_empty() {
        return Ok(None);
    }
    let Some(host) = host_of_all(&spec, &agents)? else {
        return Ok(None);
    };
    let host = host.to_string();
    let local = take_local(&spec, &mut cli.command)?;
    // No colour here is none there either (on the host's terminal, with `ssh -t`).
    let no_color = cli.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let words = words_for_host(argv, no_color, &local)?;
    check_words(&words, &cli.command)?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    if terminal {
        return exec_on_host(&spec, &host, &words).map(Some);
    }
    on_host(&spec, &host, &words, local.stdin).map(Some)
}

/// The one host of `agents` (`None`: they are this machine's, or one is not declared at all,
/// which the command here reports with what was meant). Agents of two machines cannot be one
/// command's.
fn host_of_all<'a>(spec: &'a Spec, agents: &[&str]) -> anyhow::Result<Option<&'a str>> {
    let place = |agent: &str| reads::host_of(spec, agent);
    if agents
        .iter()
        .any(|a| place(a).is_none() && spec.agent(a).is_none())
    {
        return Ok(None);
    }
    let Some(first) = agents.first() else {
        return Ok(None);
    };
    for other in &agents[1..] {
        if place(other) != place(first) {
            let on = |a: &str| place(a).map_or("this machine".to_string(), |h| format!("`{h}`"));
            bail!(
                "agents `{first}` (on {}) and `{other}` (on {}) are on different machines: name one machine's agents at a time",
                on(first),
                on(other)
            );
        }
    }
    Ok(place(first))
}

/// What a command takes from the operator's machine (its stdin, a file it names, who sends
/// a message), carried to the host in the request, and how its command line changes for it.
#[derive(Default)]
struct Local {
    /// Given to the command there as its stdin.
    stdin: Option<String>,
    /// An option naming a file here, left out of the words.
    drop: Option<&'static str>,
    /// A word added (`--output=-`, `--from=…`).
    add: Option<String>,
}

/// What `command` takes from this machine, read here; `command` is changed to what the host
/// is told (its file options gone or `-`), so the words can be checked against it.
fn take_local(spec: &Spec, command: &mut Command) -> anyhow::Result<Local> {
    use super::continuity::HandoffCommand;
    Ok(match command {
        Command::Send(args) => {
            let stdin = match args.text.as_str() {
                "-" => Some(super::messages::read_text("-")?),
                _ => None,
            };
            // The sender as this machine knows it (the agent whose wrapper runs this, an
            // agent's `$PHOENIX_AGENT`), checked here: the host's phoenix runs under no
            // wrapper and takes `--from` as given.
            let from = super::messages::sender(spec, args)?;
            let add = args.from.is_none().then(|| format!("--from={from}"));
            args.from = Some(from);
            Local {
                stdin,
                drop: None,
                add,
            }
        }
        Command::Handoff(HandoffCommand::Save { file, no_input, .. }) => {
            let stdin = super::continuity::read_body(file.as_deref(), *no_input)?;
            Local {
                stdin,
                drop: file.take().map(|_| "file"),
                add: None,
            }
        }
        Command::Clinic(args) if args.output.is_some() => {
            let text = super::policy::read_output(args.output.as_deref())?.unwrap_or_default();
            args.output = Some(PathBuf::from("-"));
            Local {
                stdin: Some(text),
                drop: Some("output"),
                add: Some("--output=-".into()),
            }
        }
        _ => Local::default(),
    })
}

/// Whether `command` still names a file of this machine (after [`take_local`] it must not).
fn names_local_input(command: &Command) -> bool {
    use super::continuity::HandoffCommand;
    match command {
        Command::Handoff(HandoffCommand::Save { file, .. }) => file.is_some(),
        Command::Clinic(args) => args.output.as_deref().is_some_and(|o| o != Path::new("-")),
        _ => false,
    }
}

/// The global options of the command line (`--config`, `--no-color`): each with its long
/// name, its short one and whether it takes a value.
fn globals() -> Vec<(String, Option<char>, bool)> {
    use clap::CommandFactory;
    Cli::command()
        .get_arguments()
        .filter(|a| a.is_global_set())
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            Some((long, a.get_short(), a.get_action().takes_values()))
        })
        .collect()
}

/// `argv` as the host's phoenix is given it: the global options out (the host has its own
/// phoenix.toml; `--no-color` comes back after the command's name, where the host's allowlist
/// reads the name first), `local`'s option replaced. Words after `--` are left as they are.
fn words_for_host(argv: &[String], no_color: bool, local: &Local) -> anyhow::Result<Vec<String>> {
    let mut options: Vec<(String, Option<char>, bool)> = globals();
    if let Some(drop) = local.drop {
        options.push((drop.to_string(), None, true));
    }
    let mut words = Vec::new();
    let mut rest = argv.iter();
    while let Some(word) = rest.next() {
        if word == "--" {
            words.push(word.clone());
            words.extend(rest.by_ref().cloned());
            break;
        }
        let matched = options.iter().find(|(long, short, _)| {
            let long_form = format!("--{long}");
            word == &long_form
                || word.starts_with(&format!("{long_form}="))
                || short.is_some_and(|s| {
                    let short_form = format!("-{s}");
                    word == &short_form
                        || (word.starts_with(&short_form) && !word.starts_with("--"))
                })
        });
        match matched {
            // `--config X` and `-c X`: the value is the next word.
            Some((long, short, true))
                if word == &format!("--{long}")
                    || short.is_some_and(|s| word == &format!("-{s}")) =>
            {
                rest.next();
            }
            Some(_) => {}
            None => words.push(word.clone()),
        }
    }
    if let Some(add) = &local.add {
        let at = words.iter().position(|w| w == "--").unwrap_or(words.len());
        words.insert(at, add.clone());
    }
    if no_color && !words.is_empty() {
        words.insert(1, "--no-color".into());
    }
    Ok(words)
}

/// What no `--config` names (no file name starts with a control character in practice).
const NO_CONFIG: &str = "\u{1}phoenix-sends-no-config";

/// The words the host is given must be the command the operator gave, about the same agents,
/// with no option of this machine's left in them: read again as the host will read them.
fn check_words(words: &[String], command: &Command) -> anyhow::Result<()> {
    use clap::Parser;
    let read = Cli::try_parse_from(
        ["phoenix", "--config", NO_CONFIG]
            .into_iter()
            .map(String::from)
            .chain(words.iter().cloned()),
    );
    let same = read.as_ref().is_ok_and(|cli| {
        cli.config == Path::new(NO_CONFIG)
            && route(&cli.command) == route(command)
            && !names_local_input(&cli.command)
    });
    if !same {
        bail!(
            "cannot send this command line to the agent's host as it is: give `--config` before the command's name (as `phoenix --config FILE {}`)",
            words.first().map(String::as_str).unwrap_or("")
        );
    }
    Ok(())
}

/// `args` run by the phoenix of `host` on its fleet (`stdin` on its stdin), its stdout and
/// stderr printed as they came, its exit code returned. Waited for as long as an action
/// (`brief --generate` may run the brief command): the host's own phoenix gives up first and
/// says why.
pub fn on_host(
    spec: &Spec,
    host: &str,
    args: &[&str],
    stdin: Option<String>,
) -> anyhow::Result<i32> {
    let link = reads::link_to(spec, host)
        .with_context(|| format!("host `{host}` is not declared in {}", spec.file.display()))?;
    let timeout = crate::hosts::protocol::run_timeout(args, actions::ACTION_TIMEOUT);
    let ran = link.run_with_stdin(args, stdin, timeout)?;
    out(&ran.stdout);
    if !ran.stderr.is_empty() {
        eprint!("{}", ran.stderr);
    }
    Ok(ran.code.unwrap_or(crate::error::exit::ERROR))
}

/// Replace this process with an interactive ssh running `args` with the host's phoenix
/// (`attach`, `exec`, `--follow`): the terminal is the host's until it ends.
pub fn exec_on_host(spec: &Spec, host: &str, args: &[&str]) -> anyhow::Result<i32> {
    use std::os::unix::process::CommandExt;
    let link = reads::link_to(spec, host)
        .with_context(|| format!("host `{host}` is not declared in {}", spec.file.display()))?;
    let argv = actions::interactive(&link, args)?;
    let error = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    Err(anyhow::anyhow!(
        "cannot run `ssh` to reach host `{host}`: {error} (install openssh-client)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn words(line: &[&str]) -> Vec<String> {
        let argv: Vec<String> = line.iter().map(|w| w.to_string()).collect();
        let cli = Cli::try_parse_from(["phoenix"].iter().chain(line)).unwrap();
        let words = words_for_host(&argv, cli.no_color, &Local::default()).unwrap();
        check_words(&words, &cli.command).unwrap();
        words
    }

    #[test]
    fn the_operators_config_never_reaches_the_host_and_words_after_dashes_stay() {
        assert_eq!(
            words(&["--config", "/x/p.toml", "loop", "add", "a", "k", "x"]),
            ["loop", "add", "a", "k", "x"]
        );
        assert_eq!(
            words(&["-c/x", "state", "show", "a", "-c", "y", "--json"]),
            ["state", "show", "a", "--json"]
        );
        assert_eq!(
            words(&[
                "--no-color",
                "exec",
                "a",
                "--config=z",
                "--",
                "ls",
                "-c",
                "--config"
            ]),
            ["exec", "--no-color", "a", "--", "ls", "-c", "--config"]
        );
    }

    #[test]
    fn a_command_line_that_cannot_be_read_back_the_same_is_refused() {
        // `-y` and `-c` in one word are not taken apart: the check sees a config left in.
        let cli = Cli::try_parse_from(["phoenix", "handoff", "save", "a", "--no-input"]).unwrap();
        let left = vec![
            "handoff".to_string(),
            "save".into(),
            "a".into(),
            "--config".into(),
            "/x".into(),
        ];
        assert!(check_words(&left, &cli.command).is_err());
        let other_agent = vec!["handoff".to_string(), "save".into(), "b".into()];
        assert!(check_words(&other_agent, &cli.command).is_err());
        // `-c` inside a cluster of short options stays in the words, and is caught.
        let argv: Vec<String> = ["logs", "-fc", "/x", "a"].map(String::from).to_vec();
        let cli =
            Cli::try_parse_from(["phoenix"].iter().chain(&["logs", "-fc", "/x", "a"])).unwrap();
        assert_eq!(cli.config, Path::new("/x"));
        let words = words_for_host(&argv, false, &Local::default()).unwrap();
        let refused = check_words(&words, &cli.command).unwrap_err().to_string();
        assert!(refused.contains("give `--config` before"), "{refused}");
    }

    #[test]
    fn every_command_routed_to_a_host_is_one_the_host_runs() {
        use clap::CommandFactory;
        let exe = |args: &[&str]| Cli::try_parse_from(["phoenix"].iter().chain(args)).ok();
        for top in Cli::command().get_subcommands() {
            let name = top.get_name();
            // Each agent-taking subcommand, with a made-up agent, routed non-interactively.
            for line in [
                vec![name, "a"],
                vec![name, "--agent", "a"],
                vec![name, "show", "a"],
                vec![name, "list", "a"],
                vec![name, "show", "--agent", "a"],
                vec![name, "test", "--agent", "a"],
            ] {
                if let Some(cli) = exe(&line)
                    && let Route::Agents {
                        terminal: false, ..
                    } = route(&cli.command)
                {
                    assert!(
                        crate::hosts::protocol::RUN_COMMANDS.contains(&name),
                        "`{name}` is routed to hosts, which do not run it"
                    );
                }
            }
        }
    }
}
