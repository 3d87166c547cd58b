//! Command-line definitions (clap) and dispatch. Each subcommand calls into the modules.

// Every print of the CLI goes through `output`'s writer, which shows what came from outside
// phoenix (an agent's text, a pane, a host's answer, a path in an error) inert on the
// operator's terminal. These shadow the standard macros in every module declared below, so a
// plain `eprintln!` there cannot go around it (those not used today are here for tomorrow's).
#[allow(unused_macros)]
macro_rules! print {
    ($($arg:tt)*) => { $crate::cli::output::out(&format!($($arg)*)) };
}
#[allow(unused_macros)]
macro_rules! println {
    () => { $crate::cli::output::out("\n") };
    ($($arg:tt)*) => { $crate::cli::output::out(&format!("{}\n", format_args!($($arg)*))) };
}
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::cli::output::err(&format!($($arg)*)) };
}
macro_rules! eprintln {
    () => { $crate::cli::output::err("\n") };
    ($($arg:tt)*) => { $crate::cli::output::err(&format!("{}\n", format_args!($($arg)*))) };
}

mod agent_state;
mod ask;
mod continuity;
mod doctor;
mod events;
mod exec;
mod fleet;
mod fleet_hosts;
mod fleet_moves;
mod fleet_usage;
mod fleetwide;
mod generate;
mod help;
pub mod hook;
mod hosts;
#[cfg(test)]
mod layers;
mod lifecycle;
mod logs;
mod messages;
mod moves;
mod notify;
mod output;
mod policy;
mod route;
mod sandbox;
mod scaffold;
mod usage;
mod wait;
mod watchdog;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  0  success / nothing to do
  1  error (invalid config, failed step, failed check)
  2  changes pending (`plan`)
  3  `status`: a declared agent is down, stopped or in safe mode
  64 usage error: an unknown command or option, a bad or missing value

With --json, every command prints one JSON document on stdout with `format_version` first,
errors included: {\"format_version\":1,\"ok\":false,\"error\":{\"message\":…,\"hint\":…}}
(see docs/json.md).";

/// A usage error (see [`crate::error::exit::USAGE`]).
pub const EXIT_USAGE: i32 = crate::error::exit::USAGE;

#[derive(Debug, Parser)]
#[command(name = "phoenix", version, about = "Keeps a fleet of AI coding agents alive and on task in tmux", after_help = EXIT_CODES)]
pub struct Cli {
    /// The fleet spec.
    #[arg(long, short = 'c', global = true, env = "PHOENIX_CONFIG", default_value = crate::spec::DEFAULT_CONFIG)]
    pub config: PathBuf,

    /// No colour, even on a terminal (so does a set `NO_COLOR`; piped output never has any).
    #[arg(long, global = true)]
    pub no_color: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scaffold a minimal phoenix.toml (or the file `-c` names) that runs as it is, with the
    /// full reference beside it (phoenix.toml.example), policies/ and templates/.
    Init {
        /// The agent CLI of the one agent it declares (`custom`: phoenix's demo agent, which
        /// runs on any machine).
        #[arg(long, value_enum, default_value = "custom")]
        cli: scaffold::Starter,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Check phoenix.toml, the policies and the templates; report every problem with
    /// file:line:column.
    Validate {
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Show what `apply` would change (exit 0: nothing to do, 2: changes pending).
    Plan {
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
        /// Also remove agents that run but are no longer declared, and the worktrees phoenix
        /// made that no agent works in (only those where nothing would be lost).
        #[arg(long)]
        prune: bool,
        /// With --prune: remove those worktrees even with uncommitted changes or commits that
        /// are neither on their base nor pushed (their branches stay).
        #[arg(long, requires = "prune")]
        force_remove_worktrees: bool,
        /// With `[[host]]`s: plan the rest when a host cannot be reached (its agents show as
        /// unknown) instead of exiting 1.
        #[arg(long)]
        skip_unreachable: bool,
    },
    /// Converge the fleet on phoenix.toml.
    ///
    /// One change of a fleet at a time: apply holds the fleet lock (`<state_dir>/fleet.lock`)
    /// from its observation to its last step, confirmation included. Another apply or restart
    /// says whom it waits for and gives up after 60 s; `phoenix run` reconciles after it.
    /// Only panes this fleet started are planned for; `--prune` never touches others.
    Apply {
        /// Only these agents' changes (as Terraform's `-target`); default: the whole fleet.
        agents: Vec<String>,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Also remove agents that run but are no longer declared, and the worktrees phoenix
        /// made that no agent works in (only those where nothing would be lost).
        #[arg(long)]
        prune: bool,
        /// With --prune: remove those worktrees even with uncommitted changes or commits that
        /// are neither on their base nor pushed (their branches stay).
        #[arg(long, requires = "prune")]
        force_remove_worktrees: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
        /// With `[[host]]`s: apply this machine and the other hosts when a host cannot be
        /// reached, instead of applying nothing.
        #[arg(long)]
        skip_unreachable: bool,
    },
    /// One line per agent in 80 columns: state, health, restarts, how its last run ended, last
    /// activity (-o wide adds pid, uptime, pane, today's tokens and cost; --json adds open
    /// loops, crashes and how fresh the agent's saved context is).
    Status {
        /// Show one agent in detail.
        agent: Option<String>,
        /// `wide`: every column (pid, uptime, pane, tokens, cost), whatever the width.
        #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
        output: Option<fleet::StatusOutput>,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Tokens and estimated cost per agent (--by day: per agent and day).
    ///
    /// Read from each CLI's own session record into a usage ledger per agent (each byte once);
    /// prices from a built-in table under `[prices]` in phoenix.toml, a model in neither shown
    /// as "unpriced", never as free.
    Usage(usage::UsageArgs),
    /// The fleet live in the terminal: agents, events, and keys to restart, inject into or
    /// open an agent's pane (works over ssh in 80×24).
    Top {
        /// How often the fleet is read again.
        #[arg(long, default_value = "2s", value_parser = parse_refresh_arg)]
        interval: std::time::Duration,
    },
    /// Check the environment: tmux, agent CLIs, workdirs, state dir.
    Doctor {
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// The controller daemon: reconcile on an interval and on events, run the schedules.
    Run {
        #[command(flatten)]
        options: crate::controller::RunOptions,
        /// Also serve Prometheus metrics at `http://ADDR/metrics` (the same as `phoenix serve`'s
        /// `/metrics`); without a value on 127.0.0.1:7879. Any address but loopback needs
        /// `PHOENIX_TOKEN`, sent by the scraper as `Authorization: Bearer <token>`.
        #[arg(long, value_name = "ADDR", num_args = 0..=1,
              default_missing_value = crate::serve::DEFAULT_METRICS_LISTEN)]
        metrics_listen: Option<String>,
    },
    /// Restart agents on purpose: clears `.clean-exit` and their crash quarantine. Waits (up to
    /// 60 s) while another phoenix holds the fleet lock. A stopped agent needs `phoenix start`.
    Restart {
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        agents: Vec<String>,
        /// Every enabled agent that is not stopped.
        #[arg(long)]
        all: bool,
        /// Start a fresh session instead of resuming the recorded one.
        #[arg(long)]
        fresh: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Stop agents and keep them stopped: `apply`, `phoenix run` and restarts leave them down
    /// until `phoenix start` (recorded in each agent's state dir).
    Stop {
        #[arg(required = true)]
        agents: Vec<String>,
        /// The results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start agents again after `phoenix stop` (or a clean exit).
    Start {
        #[arg(required = true)]
        agents: Vec<String>,
        /// The results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop every agent of this fleet and its tmux server, on this machine and every
    /// `[[host]]` (`phoenix apply` brings it up again).
    Down {
        /// Also take phoenix's entries out of the workdirs' hook files (the user's own stay).
        #[arg(long)]
        remove_hooks: bool,
        /// Only this machine (`local`) or this `[[host]]`; repeatable. Default: all of them.
        #[arg(long = "host", value_name = "NAME")]
        hosts: Vec<String>,
        /// The results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move an agent to another machine with its context: a handoff saved where it runs
    /// (reason `move`), stopped there, its state (ledger, handoffs, open loops, brief)
    /// carried, started fresh on the target with that context, and its `host` in
    /// phoenix.toml rewritten. Nothing stops until the target can run it (CLI and workdir
    /// there); if a later step fails it starts again where it was. See docs/multi-host.md.
    Move(moves::MoveArgs),
    /// Agents' steps (ops.jsonl) and their panes' output, oldest first.
    ///
    /// The output is kept per agent in its state dir as the pane shows it (pane.log, rotated
    /// at 4 MiB to pane.log.1), so it outlives a recreated pane and `phoenix down`. With no
    /// agent named, every agent of this machine, interleaved, each line after its name.
    Logs(logs::LogsArgs),
    /// Attach to the fleet's private tmux server at an agent's pane (detach: Ctrl-b d).
    Attach { agent: String },
    /// Run a command as the agent's CLI runs, on its host: in its workdir, with its
    /// environment, inside its sandbox where it has one. Exits with the command's code.
    Exec {
        agent: String,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Install phoenix as a service.
    Service {
        #[command(subcommand)]
        command: ServiceCommand,
    },
    /// Run an agent inside its pane (started by `apply`; not for interactive use).
    #[command(hide = true)]
    Wrap {
        #[arg(long)]
        agent: String,
        /// The agent's own part of the config `apply` wrote (read instead of the whole file
        /// while it is current).
        #[arg(long)]
        part: Option<PathBuf>,
    },
    /// Entry point for the agent CLIs' hooks (reads the payload on stdin). Always exits 0.
    #[command(hide = true)]
    Hook(hook::HookCall),
    /// The hook configuration phoenix installs in agents' workdirs.
    #[command(subcommand)]
    Hooks(agent_state::HooksCommand),
    /// Open loops: things an agent still has to close.
    #[command(subcommand)]
    Loop(agent_state::LoopCommand),
    /// Resolve an open loop: appends to resolved.jsonl and updates state.json at once.
    Resolve {
        agent: String,
        /// The loop's id (`phoenix loop list AGENT`).
        id: String,
        /// Why it is resolved.
        #[arg(required = true, num_args = 1..)]
        reason: Vec<String>,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// An agent's externalized state (state.json).
    #[command(subcommand)]
    State(agent_state::StateCommand),
    /// Lua policies: test one against a fixture, show the built-in ones.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Run the recovery pipeline (triage, diagnosis, prescription, rehabilitation) on an
    /// agent's latest exit, record every step and print the decision.
    Clinic(policy::ClinicArgs),
    /// Check every agent's health (process, silence, error cascade, runaway, repetition,
    /// spend, wedged screen) and heal the unhealthy ones through the `on_unhealthy` policy.
    /// Exit code with --once: 0 all healthy (or only suspect), 1 something was unhealthy.
    Watchdog {
        /// One pass, then exit (default: a pass on every `[schedules] watchdog` tick).
        #[arg(long)]
        once: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Notifications: send a test message through every channel of `[notify]`.
    #[command(subcommand)]
    Notify(notify::NotifyCommand),
    /// An agent's ledger: current task, completed, in progress, blocked, key decisions,
    /// uncertain items, files.
    Ledger {
        agent: String,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Handoffs: what a session knew, saved for the next one.
    #[command(subcommand)]
    Handoff(continuity::HandoffCommand),
    /// Send an agent a message: kept in its inbox and given to it at its next turn boundary
    /// (--urgent: at once, interrupting its turn); a new session gets it in its startup
    /// context. An agent sends one the same way, or writes `->continuity:send AGENT <<< … >>>`.
    Send(messages::SendArgs),
    /// Wait until an agent's turn ends (--until idle, exit or revival), or --timeout: across a
    /// kill and its resume. Exit 0 when it came, 124 at the timeout (the MCP tool `wait_for`).
    Wait(wait::WaitArgs),
    /// An agent's messages: pending ones, then delivered ones (when, and what confirmed it).
    Inbox {
        agent: String,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Show an agent's brief (brief.md), or write a new one with --generate: the built-in
    /// generator, or `[brief] command`.
    Brief {
        agent: String,
        #[arg(long)]
        generate: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the search index (index.db) from the files.
    Reindex {
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// The hosts of a fleet across machines: check them all, install phoenix and its daemon
    /// on one, mirror their agents' contexts (see docs/multi-host.md).
    #[command(subcommand)]
    Hosts(hosts::HostsCommand),
    /// Agents' sandboxes: prove them with canaries run inside (`verify`), or see what one
    /// shows (`show`). See docs/sandbox.md.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// Inside a sandbox (run by `sandbox verify`): try the canaries given as JSON.
    #[command(hide = true)]
    SandboxCanary { plan: String },
    /// The host side of a multi-host fleet: one JSON request on stdin, one JSON reply on
    /// stdout (run over ssh by the operator's phoenix; see docs/multi-host.md).
    #[command(hide = true)]
    Host,
    /// Read an agent's pane output on stdin and act on its `->continuity:` commands (started
    /// with the agent's pane through `tmux pipe-pane`). With `--wrapper PID`, give stdin to
    /// that wrapper, which reads it itself, and exit (read it here if it does not take it).
    #[command(hide = true)]
    Tap {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        wrapper: Option<u32>,
    },
    /// bubblewrap's payload inside an agent's sandbox: with `--relay`, start the relay from
    /// that loopback address (in the sandbox's own network) to the proxy's socket and set
    /// HTTPS_PROXY/HTTP_PROXY to it; then exec PROGRAM.
    #[command(hide = true)]
    SandboxInner {
        #[arg(long, requires = "socket", value_name = "ADDR")]
        relay: Option<std::net::SocketAddr>,
        #[arg(long, requires = "relay", value_name = "PATH")]
        socket: Option<PathBuf>,
        #[arg(last = true, required = true, value_name = "PROGRAM")]
        program: Vec<std::ffi::OsString>,
    },
    /// The fleet's critical events, oldest first: crash loops, policy fallbacks, each step
    /// of a Clinic recovery, state rolled back, and each session's end (--all: every step).
    Events(events::EventsArgs),
    /// Serve the HTTP API and the web dashboard: fleet status, state, ledgers, handoffs,
    /// briefs, critical events and the plan; save/inject handoffs, restart, resolve loops, run
    /// the watchdog. Loopback only unless `PHOENIX_TOKEN` is set; with a token, every action
    /// needs `Authorization: Bearer <token>` (and, off loopback, every API call does).
    /// Runs until SIGTERM or SIGINT.
    Serve {
        /// Address to listen on (`127.0.0.1:0` picks a free port; the first line on stdout
        /// says which).
        #[arg(long, default_value = crate::serve::DEFAULT_LISTEN)]
        listen: String,
    },
    /// Serve the fleet as MCP tools on stdin/stdout (list_agents, send_message, wait_for,
    /// handoffs, restart/stop/start; see docs/mcp.md). An agent's CLI starts it (`apply`
    /// writes the entry); the caller is the agent phoenix started (`PHOENIX_AGENT`), else the
    /// operator. `phoenix serve` has the same tools at /mcp.
    Mcp,
    /// A stand-in agent CLI for demos and tests.
    #[command(hide = true)]
    DemoAgent(crate::demo::DemoArgs),
    /// Print a shell completion script, e.g.
    /// `phoenix completions bash > ~/.local/share/bash-completion/completions/phoenix`.
    Completions { shell: clap_complete::Shell },
    /// The names the completion script offers: the agents or hosts of the fleet file.
    #[command(name = "__complete", hide = true)]
    Complete { kind: generate::NameKind },
    /// Print the man page (roff): `phoenix man | man -l -`; with --dir, write a page for
    /// each command there: `phoenix man --dir ~/.local/share/man/man1`.
    Man {
        /// Write phoenix.1 and a page for each command (phoenix-apply.1, …) into DIR
        /// (created if missing) instead of printing the one page.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print the JSON Schema of phoenix.toml, for editors: `phoenix schema > phoenix.schema.json`.
    Schema,
    /// Print phoenix's version, `phoenix X.Y.Z` (as `phoenix --version` does).
    Version {
        /// Print one JSON document on stdout, `format_version` first (see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write a systemd user unit running `phoenix run` for this fleet.
    Install {
        /// Print the unit instead of writing it.
        #[arg(long)]
        print: bool,
    },
    /// Remove the unit `install` wrote.
    Uninstall,
    /// Whether the unit is installed and a daemon supervises this fleet (exit 3 if none).
    Status {
        #[arg(long)]
        json: bool,
    },
}

/// The spec without filesystem checks: state and continuity commands work even if a workdir
/// moved.
fn load_without_fs_checks(config: &std::path::Path) -> anyhow::Result<crate::spec::Spec> {
    Ok(crate::spec::load_with(
        config,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )?)
}

/// Parse the command line, run, and return the process exit code.
pub fn main() -> i32 {
    crate::continuity::startup::search_the_index();
    // The hook fast path: the shape phoenix writes into hook files, without clap.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(hook) = crate::hooks::HookArgs::parse(&args) {
        return hook::run(hook);
    }
    if let Some(cli) = as_apply_wrote_it(&args) {
        return match run(cli, &args) {
            Ok(code) => code,
            Err(err) => report(&err),
        };
    }
    let cli = match parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            if crate::hooks::is_hook_invocation(&args) && e.use_stderr() {
                // Exit 2 from a hook blocks the agent (its tool call, its compaction): a
                // malformed hook command is a logged problem, never that.
                eprintln!("phoenix hook: {e}");
                out(&crate::hooks::fallback_output(&args));
                return 0;
            }
            if e.use_stderr() && json_requested(&args) {
                let (message, hint) = usage_error_parts(&e.to_string());
                output::json(output::error_document(&message, Some(&hint)));
                return EXIT_USAGE;
            }
            // --help and --version come this way too, on stdout and with 0.
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { 0 };
        }
    };
    if cli.no_color {
        output::disable_colour();
    }
    match run(cli, &args) {
        Ok(code) => code,
        Err(err) if json_requested(&args) => report_json(&err),
        Err(err) => report(&err),
    }
}

/// `phoenix-wrap`, the small binary an agent's pane runs: the two commands of an agent start
/// (`wrap`, `tap`) in the shape `apply` writes them, and nothing else. It links only what
/// those need, without the position independence of `phoenix` (build.rs), so what a wrapper
/// keeps for its agent's whole life is not a private copy of `phoenix`'s relocated data.
/// Anything else is handed to `phoenix` beside it, with the same arguments.
pub fn wrapper_main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        // What `hosts install` runs to see that a copy works there (under a temporary name,
        // beside no `phoenix` of its name).
        ["-V" | "--version"] => {
            println!("phoenix-wrap {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        ["-h" | "--help"] => {
            println!(
                "phoenix-wrap: what an agent's pane runs (`--config FILE wrap --agent NAME`) and \
                 what reads the pane (`--config FILE tap --agent NAME --wrapper PID`), as \
                 `phoenix apply` writes them.\n\
                 Any other command line is run by the `phoenix` beside it."
            );
            return 0;
        }
        _ => {}
    }
    let Some(cli) = as_apply_wrote_it(&args) else {
        return run_main_binary(&args);
    };
    let config = cli.config;
    let outcome = match cli.command {
        Command::Wrap { agent, part } => {
            crate::supervise::wrap(&config, &agent, part).map_err(anyhow::Error::from)
        }
        Command::Tap { agent, wrapper } => tap(&config, &agent, wrapper),
        _ => unreachable!("as_apply_wrote_it reads wrap and tap only"),
    };
    outcome.unwrap_or_else(|err| report(&err))
}

/// Run `args` with the `phoenix` this companion belongs to; never with this binary itself
/// (a copy under another name has no `phoenix` of its name beside it: that would exec itself
/// for ever).
fn run_main_binary(args: &[String]) -> i32 {
    let this = std::env::current_exe().ok();
    let main = crate::process::main_binary().ok();
    let Some(main) = main.filter(|main| Some(main) != this.as_ref() && main.is_file()) else {
        eprintln!(
            "phoenix-wrap: `{}` is not a command of mine, and there is no phoenix beside me to \
             run it (see `phoenix-wrap --help`)",
            args.join(" ")
        );
        return EXIT_USAGE;
    };
    let err =
        std::os::unix::process::CommandExt::exec(std::process::Command::new(&main).args(args));
    eprintln!("phoenix-wrap: cannot run `{}`: {err}", main.display());
    crate::error::exit::ERROR
}

/// `phoenix tap`: hand the pane's pipe to its wrapper, or read it here.
fn tap(config: &std::path::Path, agent: &str, wrapper: Option<u32>) -> anyhow::Result<i32> {
    if let Some(pid) = wrapper
        && crate::continuity::tap_host::hand_over(pid).unwrap_or(false)
    {
        return Ok(0);
    }
    // What it reads is taken as the agent's own words: only a pane's pipe from tmux.
    if !crate::continuity::tap_host::stdin_is_a_pane_pipe() {
        err_line(crate::continuity::tap_host::NOT_A_PANE_PIPE);
        return Ok(2);
    }
    Ok(crate::continuity::tap::run(config, agent, err_line)?)
}

/// The two commands every agent start runs, in exactly the shape `apply` writes them
/// (`apply::wrap_argv`, `apply::tap_argv`), read without clap: the wrapper lives as long as
/// its agent, and building clap's whole command tree left ~60 kB of heap in every wrapper
/// (and a few ms in each start). Any other shape goes through clap as before.
fn as_apply_wrote_it(args: &[String]) -> Option<Cli> {
    let [flag, config, verb, agent_flag, agent, rest @ ..] = args else {
        return None;
    };
    if flag != "--config" || agent_flag != "--agent" || agent.starts_with('-') {
        return None;
    }
    let command = match (verb.as_str(), rest) {
        ("wrap", []) => Command::Wrap {
            agent: agent.clone(),
            part: None,
        },
        ("wrap", [part_flag, part]) if part_flag == "--part" => Command::Wrap {
            agent: agent.clone(),
            part: Some(PathBuf::from(part)),
        },
        ("tap", [wrapper_flag, pid]) if wrapper_flag == "--wrapper" => Command::Tap {
            agent: agent.clone(),
            wrapper: Some(pid.parse().ok()?),
        },
        _ => return None,
    };
    Some(Cli {
        config: PathBuf::from(config),
        no_color: false,
        command,
    })
}

// ---- errors with --json (docs/json.md) ----

/// `--json` anywhere before a `--`: a script asked for JSON, so even a usage error or a
/// failure before the command ran comes as a JSON document on stdout.
fn json_requested(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// clap's rendered usage error as (message, hint): its first line, and its `tip:` or else its
/// closing pointer to `--help`.
fn usage_error_parts(text: &str) -> (String, String) {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_string();
    let rest: Vec<&str> = lines.collect();
    let hint = rest
        .iter()
        .find_map(|l| l.strip_prefix("tip: "))
        .or_else(|| rest.last().copied())
        .unwrap_or("try '--help'")
        .to_string();
    (message, hint)
}

/// The error of a failed command as one JSON document on stdout (and nothing on stderr).
/// `report` for `--json`: the same error as one JSON document on stdout; the same exit code.
fn report_json(err: &anyhow::Error) -> i32 {
    let lib = err.downcast_ref::<crate::Error>();
    let load = lib
        .and_then(crate::Error::load)
        .or_else(|| err.downcast_ref::<crate::spec::LoadError>());
    let message = match load {
        Some(crate::spec::LoadError::Invalid(d)) => d.to_string().trim_end().to_string(),
        Some(other) => other.to_string(),
        None => format!("{err:#}"),
    };
    let hint = load
        .and_then(|l| l.hint())
        .or_else(|| lib.and_then(crate::Error::hint));
    output::json(output::error_document(&message, hint.as_deref()));
    lib.map_or(crate::error::exit::ERROR, crate::Error::code)
}

/// `cli`, read from `argv` (the words after the program's name): on the host of the agent
/// it names when phoenix.toml places it on one ([`route`]), else here.
fn run(mut cli: Cli, argv: &[String]) -> anyhow::Result<i32> {
    if let Some(code) = route::forward(&mut cli, argv)? {
        return Ok(code);
    }
    let config = cli.config;
    match cli.command {
        Command::Init { cli, force, json } => scaffold::init(&config, cli, force, json),
        Command::Validate { json } => fleet::validate(&config, json),
        Command::Plan {
            json,
            prune,
            force_remove_worktrees,
            skip_unreachable,
        } => {
            let prune = fleet::Pruning {
                prune,
                force_remove_worktrees,
            };
            fleet::plan(&config, json, prune, skip_unreachable)
        }
        Command::Apply {
            agents,
            yes,
            prune,
            force_remove_worktrees,
            json,
            skip_unreachable,
        } => {
            let prune = fleet::Pruning {
                prune,
                force_remove_worktrees,
            };
            fleet::apply(&config, &agents, yes, prune, json, skip_unreachable)
        }
        Command::Status {
            agent,
            output,
            json,
        } => fleet::status(&config, agent.as_deref(), output.is_some(), json),
        Command::Doctor { json } => doctor::doctor(&config, json),
        Command::Usage(args) => usage::usage(&config, args),
        Command::Top { interval } => Ok(crate::top::run(&config, interval)?),
        Command::Run {
            options,
            metrics_listen,
        } => {
            if let Some(listen) = metrics_listen {
                // Logging first: the listener says where it is in the daemon's log.
                crate::controller::init_tracing(options);
                crate::serve::metrics::listen(
                    &config,
                    &listen,
                    std::env::var(crate::serve::auth::TOKEN_ENV).ok(),
                )?;
            }
            Ok(crate::controller::run(&config, options)?)
        }
        Command::Restart {
            agents,
            all,
            fresh,
            json,
        } => lifecycle::restart(&config, &agents, all, fresh, json),
        Command::Stop { agents, json } => lifecycle::stop(&config, &agents, json),
        Command::Start { agents, json } => lifecycle::start(&config, &agents, json),
        Command::Down {
            remove_hooks,
            hosts,
            json,
        } => lifecycle::down(&config, remove_hooks, &hosts, json),
        Command::Logs(args) => logs::logs(&config, args),
        Command::Attach { agent } => lifecycle::attach(&config, &agent),
        Command::Exec { agent, command } => exec::exec(&config, &agent, &command),
        Command::Move(args) => moves::run(&config, args),
        Command::Service { command } => lifecycle::service(&config, command),
        Command::Wrap { agent, part } => Ok(crate::supervise::wrap(&config, &agent, part)?),
        Command::Hook(call) => Ok(hook::run(call.with_config(config))),
        Command::Hooks(cmd) => agent_state::hooks(&config, cmd),
        Command::Loop(cmd) => agent_state::loops(&config, cmd),
        Command::Resolve {
            agent,
            id,
            reason,
            json,
        } => agent_state::resolve(&config, &agent, &id, &reason.join(" "), json),
        Command::State(cmd) => agent_state::state(&config, cmd),
        Command::Policy(cmd) => policy::policy(cmd),
        Command::Clinic(args) => policy::clinic(&config, args),
        Command::Ledger { agent, json } => continuity::ledger(&config, &agent, json),
        Command::Handoff(cmd) => continuity::handoff(&config, cmd),
        Command::Send(args) => messages::send(&config, args),
        Command::Inbox { agent, json } => messages::inbox(&config, &agent, json),
        Command::Wait(args) => wait::wait(&config, args),
        Command::Reindex { json } => continuity::reindex(&config, json),
        Command::Brief {
            agent,
            generate,
            json,
        } => continuity::brief(&config, &agent, generate, json),
        Command::Host => Ok(hosts::host()),
        Command::Hosts(cmd) => hosts::hosts(&config, cmd),
        Command::Sandbox(cmd) => sandbox::sandbox(&config, cmd),
        Command::SandboxCanary { plan } => sandbox::canary(&plan),
        Command::Tap { agent, wrapper } => tap(&config, &agent, wrapper),
        Command::SandboxInner {
            relay,
            socket,
            program,
        } => {
            // Returns only when PROGRAM could not be started (126/127 as a shell says it).
            let e = crate::sandbox::relay::exec_inside(relay.zip(socket), &program);
            err_line(&format!("phoenix sandbox-inner: {e}"));
            Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
        Command::Watchdog { once, json } => watchdog::run(&config, once, json),
        Command::Notify(cmd) => notify::notify(&config, cmd),
        Command::Events(args) => events::events(&config, args),
        Command::Serve { listen } => Ok(crate::serve::run(
            &config,
            &listen,
            std::env::var(crate::serve::auth::TOKEN_ENV).ok(),
            out,
        )?),
        Command::Mcp => {
            crate::mcp::server::serve_stdio(&config, rmcp::transport::stdio)?;
            Ok(0)
        }
        Command::DemoAgent(args) => Ok(crate::demo::run(args, &mut std::io::stdout())?),
        Command::Completions { shell } => Ok(generate::completions(shell)?),
        Command::Complete { kind } => Ok(generate::names(&config, kind)),
        Command::Man { dir } => generate::man(dir.as_deref()),
        Command::Schema => Ok(generate::schema()?),
        Command::Version { json } => Ok(version(json)),
    }
}

/// The command line read by clap. What clap prints instead of running a command (help, the
/// version, a usage error) comes from the command with the grouped top-level help
/// ([`help::command`]); a command line that parses does not build it: building every
/// subcommand and the grouped list took longer than the parse itself, on every run of
/// phoenix (each agent's wrapper, each search).
fn parse_args() -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut command = <Cli as clap::CommandFactory>::command();
    if let Ok(mut matches) = command.try_get_matches_from_mut(&args) {
        return Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command));
    }
    let mut command = help::command();
    let mut matches = command.try_get_matches_from_mut(&args)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command))
}

/// `phoenix version`: `phoenix X.Y.Z`, or `{"format_version": 1, "version": "X.Y.Z"}`.
fn version(json: bool) -> i32 {
    let version = env!("CARGO_PKG_VERSION");
    if json {
        output::json(serde_json::json!({ "version": version }));
    } else {
        println!("phoenix {version}");
    }
    0
}

fn parse_duration_arg(text: &str) -> Result<std::time::Duration, String> {
    crate::spec::duration::parse(text).map_err(|e| format!("{e}; {}", crate::spec::duration::HINT))
}

/// A refresh interval: `0s` would read the fleet in a busy loop.
fn parse_refresh_arg(text: &str) -> Result<std::time::Duration, String> {
    const MIN: std::time::Duration = std::time::Duration::from_millis(200);
    let d = parse_duration_arg(text)?;
    if d < MIN {
        return Err(format!(
            "`{text}` is too short: the minimum is {}",
            crate::spec::duration::format(MIN)
        ));
    }
    Ok(d)
}

/// The one place an error is printed: its chain (`{:#}`) and, where phoenix knows one, a hint.
/// Returns the exit code the error means ([`crate::Error::code`]; 1 for the CLI's own errors).
pub fn report(err: &anyhow::Error) -> i32 {
    let lib = err.downcast_ref::<crate::Error>();
    let load = lib
        .and_then(crate::Error::load)
        .or_else(|| err.downcast_ref::<crate::spec::LoadError>());
    if let Some(load) = load {
        match load {
            crate::spec::LoadError::Invalid(d) => eprint!("{d}"),
            other => eprintln!("{}: {other}", output::paint(output::ERROR, "error")),
        }
        if let Some(hint) = load.hint() {
            eprintln!("  = {}: {hint}", output::paint(output::HINT, "hint"));
        }
        return crate::error::exit::ERROR;
    }
    eprintln!("{}: {err:#}", output::paint(output::ERROR, "error"));
    if let Some(hint) = lib.and_then(crate::Error::hint) {
        eprintln!("  = hint: {hint}");
    }
    lib.map_or(crate::error::exit::ERROR, crate::Error::code)
}

/// One line on stderr, for the library's long-running parts that say things as they go.
fn err_line(line: &str) {
    eprintln!("{line}");
}

/// Write to stdout, treating a closed pipe (`phoenix status | head`) as success.
pub(crate) fn out(text: &str) {
    output::out(text);
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;
    use std::path::Path;

    /// What `apply` writes into a pane reads the same without clap as with it.
    #[test]
    fn the_commands_apply_writes_read_as_clap_reads_them() {
        let exe = Path::new("/opt/phoenix");
        let config = Path::new("/fleet/phoenix.toml");
        let part = Path::new("/state/agents/a-1/agent.toml");
        let mut tap = crate::apply::tap_argv(exe, config, "a-1");
        tap.push("4242".into());
        for argv in [
            crate::apply::wrap_argv(exe, config, "a-1", None),
            crate::apply::wrap_argv(exe, config, "a-1", Some(part)),
            tap,
        ] {
            let fast = as_apply_wrote_it(&argv[1..]).expect("the fast path reads it");
            let clap = Cli::try_parse_from(&argv).expect("clap reads it");
            assert_eq!(format!("{fast:?}"), format!("{clap:?}"));
        }
    }

    /// Anything else goes to clap, which validates it and says what is wrong.
    #[test]
    fn other_shapes_go_to_clap() {
        for args in [
            &["--config", "c", "wrap", "--agent", "a", "--extra"][..],
            &["--config", "c", "wrap", "--agent", "--part", "p"],
            &["--config", "c", "tap", "--agent", "a", "--wrapper", "x"],
            &["--config", "c", "tap", "--agent", "a"],
            &["-c", "c", "wrap", "--agent", "a"],
            &["--config", "c", "status", "--agent", "a"],
        ] {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            assert!(as_apply_wrote_it(&args).is_none(), "{args:?}");
        }
    }
}
