//! Nothing from a config, a handoff or an agent's output reaches a shell or a keyboard: tmux
//! gets values it cannot expand or split, pastes carry no escape sequences, and the tap acts
//! only on what the agent itself says. Real tmux, real processes, the demo agent and small
//! shell scripts standing in for CLIs.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use support::{Fleet, PHOENIX, read_jsonl, wait_until, wait_until_explained};

/// Run phoenix on the config `config` (not the fleet's own), with the fleet's environment.
fn phoenix(fleet: &Fleet, config: &Path, args: &[&str]) -> Output {
    std::process::Command::new(PHOENIX)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", fleet.path().join("home"))
        .env("TERM", "xterm")
        .current_dir(fleet.path())
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Every file or directory under `root` whose name starts with `prefix`.
fn named(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with(prefix) {
                found.push(path.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path);
            }
        }
    }
    found
}

fn pane_of(fleet: &Fleet, agent: &str) -> String {
    fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap_or_else(|| panic!("no pane for `{agent}`"))
        .to_string()
}

fn save_handoff(fleet: &Fleet, agent: &str, body: &str) -> serde_json::Value {
    let mut child = fleet
        .command(&["handoff", "save", agent, "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// tmux format-expands `-c` and the `pipe-pane` command, and an argument ending in `;` ends
/// a tmux command. A workdir, a config directory, an agent's arguments and environment full
/// of `#(…)`, `#{…}`, `#[…]`, `#h` and trailing `;` run nothing and arrive as written.
#[test]
fn hostile_paths_and_values_reach_the_agent_literally() {
    let fleet = Fleet::new();
    let root = fleet.path();
    // `cd;` first: a `#(…)` that runs does so in $HOME, which the test can look at.
    let config_dir = root.join("cfg #(cd;touch PWNED_CFG) #h #{pane_id} #[fg=red];");
    let workdir = root.join("work #(cd;touch PWNED_WD) #h #{session_name} #[bold];");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::create_dir_all(&workdir).unwrap();
    let out = root.join("probe.out");
    std::fs::write(
        root.join("probe.sh"),
        "{ pwd -P; printf '%s\\n' \"$1\"; printf '%s\\n' \"$PROBE\"; } > \"$PROBE_OUT.tmp\"\n\
         mv \"$PROBE_OUT.tmp\" \"$PROBE_OUT\"\n\
         printf '%s\\n' '->continuity:uncertain \"inert probe\"'\n\
         exec sleep 600\n",
    )
    .unwrap();
    let arg = "arg #(cd;touch PWNED_ARG) #h #{pane_id};";
    let env = "env #(cd;touch PWNED_ENV) #h #[bold] #{session_name};";
    let config = config_dir.join("phoenix.toml");
    std::fs::write(
        &config,
        format!(
            "[fleet]\nname = \"test\"\ntmux_socket = \"{socket}\"\n\n\
             [[agent]]\nname = \"probe\"\ncli = \"custom\"\n\
             command = \"sh {script} '{arg}'\"\n\
             workdir = \"{workdir}\"\n\
             env = {{ PROBE = \"{env}\", PROBE_OUT = \"{out}\" }}\n",
            socket = fleet.socket,
            script = root.join("probe.sh").display(),
            workdir = workdir.display(),
            out = out.display(),
        ),
    )
    .unwrap();

    let apply = phoenix(&fleet, &config, &["apply", "--yes"]);
    assert_eq!(
        apply.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&apply.stdout),
        String::from_utf8_lossy(&apply.stderr)
    );
    wait_until(Duration::from_secs(15), "the probe's report", || {
        out.exists()
    });
    let report = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    let expected_dir = workdir.canonicalize().unwrap();
    assert_eq!(
        lines,
        [expected_dir.to_str().unwrap(), arg, env],
        "the agent runs in exactly its workdir and gets its argument and environment as written"
    );
    // The tap was started with the config's path intact: it hears the agent.
    let ops = config_dir.join(".phoenix/agents/probe/ops.jsonl");
    wait_until_explained(
        Duration::from_secs(15),
        "the tap acting on the probe's marker",
        || {
            read_jsonl(&ops)
                .iter()
                .any(|o| o["event"] == "tap_uncertain")
        },
        || format!("{:#?}", read_jsonl(&ops)),
    );
    // The pane's own process started in a fixed directory and changed into the workdir.
    let pane_path = fleet
        .tmux(&["list-panes", "-a", "-F", "#{pane_current_path}"])
        .unwrap();
    assert_eq!(pane_path.trim(), expected_dir.to_str().unwrap());
    // Nothing ran: `#(…)` jobs would have touched these in $HOME (or anywhere under the test).
    assert_eq!(named(root, "PWNED"), Vec::<PathBuf>::new());
}

/// A handoff (or any injected text) with an OSC title sequence and an early end of bracketed
/// paste followed by `\r!command\r` arrives as plain text inside one paste: the program in
/// the pane receives no ESC but the paste's own brackets, nothing after the paste but Enter,
/// and the pane's title stays as it was.
#[test]
fn a_hostile_handoff_is_pasted_as_plain_text() {
    let fleet = Fleet::new();
    let log = fleet.path().join("received.bin");
    fleet.toml(&format!(
        "[[agent]]\nname = \"raw\"\ncli = \"custom\"\ntap = false\n\
         command = \"phoenix demo-agent --raw-log {}\"\n",
        log.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["raw"]);
    let pane = pane_of(&fleet, "raw");
    support::wait_for_screen(&fleet, &pane, "raw>", Duration::from_secs(10));
    let title = || {
        fleet
            .tmux(&["display-message", "-p", "-t", &pane, "#{pane_title}"])
            .unwrap()
    };
    let title_before = title();

    let hostile = "Current task: innocent\n\x1b]2;pwned-title\x07\x1b]0;pwned\x07still text\
                   \x1b[201~\r!touch pwned-by-paste\r\n\u{9b}201~\x1b[200~more\n";
    let h = save_handoff(&fleet, "raw", hostile);
    let id = h["id"].as_str().unwrap();
    // Saved under the same rule: the handoff file has no control characters left.
    let saved = std::fs::read(
        fleet
            .agent_dir("raw")
            .join("handoffs")
            .join(format!("{id}.md")),
    )
    .unwrap();
    assert!(
        !saved.contains(&0x1b) && !String::from_utf8_lossy(&saved).contains('\u{9b}'),
        "{}",
        String::from_utf8_lossy(&saved)
    );
    // Pasted under the rule too: a body that got onto disk some other way (an older phoenix,
    // an edit) is delivered as plain text all the same.
    let saved = String::from_utf8_lossy(&saved).into_owned();
    let (header, body) = saved.split_once("\n---\n").unwrap();
    std::fs::write(
        fleet
            .agent_dir("raw")
            .join("handoffs")
            .join(format!("{id}.md")),
        format!("{header}\n---\n{body}{hostile}"),
    )
    .unwrap();
    fleet
        .run(&["handoff", "inject", "raw", "--id", id, "--json"])
        .status(0);

    let received = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&received).into_owned();
    let start = text.find("\x1b[200~").expect("a bracketed paste");
    let end = text.find("\x1b[201~").expect("the paste's end");
    let (before, inside, after) = (&text[..start], &text[start + 6..end], &text[end + 6..]);
    assert_eq!(before, "", "nothing typed before the paste");
    assert!(
        !inside.contains('\x1b'),
        "an ESC inside the paste: {inside:?}"
    );
    assert!(
        !inside.contains('\u{9b}') && !inside.contains('\x07'),
        "{inside:?}"
    );
    assert!(
        inside.contains("!touch pwned-by-paste"),
        "the text is there, as text"
    );
    assert!(
        !after.is_empty() && after.chars().all(|c| c == '\r'),
        "only Enter after the paste, got {after:?}"
    );
    assert_eq!(title(), title_before, "the pane's title changed");
}
