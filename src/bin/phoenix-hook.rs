//! `phoenix-hook`: the hook entry point alone, for the CLIs' hook files. Hooks run on every
//! tool call of every agent, and a binary without the Lua runtime, the HTTP client and the
//! command-line parser starts measurably faster than `phoenix hook`. Same arguments, same
//! behaviour: `phoenix-hook [--config FILE] <event> --agent NAME [--cli CLI] [PAYLOAD]`.

const USAGE: &str =
    "usage: phoenix-hook [--config FILE] <event> --agent NAME [--cli CLI] [PAYLOAD]";

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // A person asking, never a CLI's hook call (those always name an event).
    match args.first().map(String::as_str) {
        Some("-h" | "--help") if args.len() == 1 => {
            println!(
                "phoenix-hook: the hook command phoenix writes into each agent CLI's hook files.\n\n{USAGE}\n\nevents: {}\n\nA hook never fails its CLI: input it cannot understand is reported on stderr and\nit exits 0. `phoenix hooks` shows what is installed; `phoenix hook --help` says more.",
                phoenix::hooks::Event::NAMES.join(", ")
            );
            return;
        }
        Some("-V" | "--version") if args.len() == 1 => {
            println!("phoenix-hook {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        _ => {}
    }
    // Accept both `phoenix-hook heartbeat …` and `phoenix-hook hook heartbeat …`.
    if !args.iter().any(|a| a == "hook") {
        let at = args
            .iter()
            .position(|a| !a.starts_with('-'))
            .map(|i| {
                // Skip the value of a leading --config/-c.
                if i > 0 && matches!(args[i - 1].as_str(), "-c" | "--config") {
                    args.iter()
                        .skip(i + 1)
                        .position(|a| !a.starts_with('-'))
                        .map_or(args.len(), |j| i + 1 + j)
                } else {
                    i
                }
            })
            .unwrap_or(args.len());
        args.insert(at, "hook".into());
    }
    let code = match phoenix::hooks::HookArgs::parse(&args) {
        // A session start searches the index for related decisions when there is one:
        // `phoenix` has SQLite, this binary (on every tool call's path) does not. If it cannot
        // be run, the session start goes on here without them.
        Some(hook) if hook.event == "session-start" && has_index(&hook) => {
            use std::os::unix::process::CommandExt;
            if let Ok(exe) = std::env::current_exe() {
                let err = std::process::Command::new(exe.with_file_name("phoenix"))
                    .args(&args)
                    .exec();
                eprintln!("phoenix-hook: cannot hand the session start to phoenix: {err}");
            }
            phoenix::cli::hook::run(hook)
        }
        Some(hook) => phoenix::cli::hook::run(hook),
        None => {
            // A hook must never fail its CLI: say what was wrong and exit 0.
            eprintln!("phoenix-hook: cannot understand {args:?}; {USAGE}");
            print!("{}", phoenix::hooks::fallback_output(&args));
            0
        }
    };
    std::process::exit(code);
}

/// Does the fleet have a search index to find related decisions in?
fn has_index(hook: &phoenix::hooks::HookArgs) -> bool {
    phoenix::spec::load(&phoenix::cli::hook::config(hook))
        .is_ok_and(|spec| spec.fleet.state_dir.join(phoenix::store::INDEX).exists())
}
