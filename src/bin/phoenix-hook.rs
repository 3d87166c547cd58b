// The C entry point, without Rust's runtime set-up: that reads /proc/self/maps to place a
// guard page and installs an alternate signal stack, a measurable part of a call this short
// (`cargo bench --bench hooks`). The arguments are read from `argv` here: `std::env::args`
// is filled by glibc's initialiser only, and is empty in a static musl build. What the
// set-up did that a hook needs is done here (SIGPIPE).
#![no_main]

const USAGE: &str =
    "usage: phoenix-hook [--config FILE] <event> --agent NAME [--cli CLI] [PAYLOAD]";

#[unsafe(no_mangle)]
extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    // A CLI that stopped reading the hook's answer must not kill it with SIGPIPE (a hook never
    // fails its CLI): the write fails instead and is ignored, as under Rust's own runtime.
    // SAFETY: setting a signal's disposition to SIG_IGN, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let args = (1..usize::try_from(argc).unwrap_or(0))
        .filter_map(|i| {
            // SAFETY: the C runtime hands main `argc` valid NUL-terminated strings in `argv`.
            let arg = unsafe { *argv.add(i) };
            (!arg.is_null()).then(|| {
                // SAFETY: non-null, NUL-terminated, alive for the whole process.
                let bytes = unsafe { std::ffi::CStr::from_ptr(arg) }.to_bytes();
                String::from_utf8_lossy(bytes).into_owned()
            })
        })
        .collect();
    run(args)
}

fn run(mut args: Vec<String>) -> libc::c_int {
    // A person asking, never a CLI's hook call (those always name an event).
    match args.first().map(String::as_str) {
        Some("-h" | "--help") if args.len() == 1 => {
            println!(
                "phoenix-hook: the hook command phoenix writes into each agent CLI's hook files.\n\n{USAGE}\n\nevents: {}\n\nA hook never fails its CLI: input it cannot understand is reported on stderr and\nit exits 0. `phoenix hooks` shows what is installed; `phoenix hook --help` says more.",
                phoenix::hooks::Event::NAMES.join(", ")
            );
            return 0;
        }
        Some("-V" | "--version") if args.len() == 1 => {
            println!("phoenix-hook {}", env!("CARGO_PKG_VERSION"));
            return 0;
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
    match phoenix::hooks::HookArgs::parse(&args) {
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
            // Nothing flushes stdout at exit without Rust's runtime.
            let _ = std::io::Write::flush(&mut std::io::stdout());
            0
        }
    }
}

/// Does the fleet have a search index to find related decisions in?
fn has_index(hook: &phoenix::hooks::HookArgs) -> bool {
    // Under its wrapper the agent's state dir is in its environment and the index sits at the
    // fleet's root above it: one stat, where loading phoenix.toml here parsed it a second time
    // (the hook itself loads it next). The answer only picks which binary runs the hook.
    if let Some(dir) = std::env::var_os("PHOENIX_STATE_DIR")
        .filter(|_| std::env::var("PHOENIX_AGENT").is_ok_and(|a| a == hook.agent))
    {
        let dir = phoenix::state::AgentDir {
            name: hook.agent.clone(),
            path: dir.into(),
        };
        return dir.fleet_root().join(phoenix::store::INDEX).exists();
    }
    phoenix::spec::load(&phoenix::cli::hook::config(hook))
        .is_ok_and(|spec| spec.fleet.state_dir.join(phoenix::store::INDEX).exists())
}
