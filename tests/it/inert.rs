//! Nothing from a config, a handoff or an agent's output reaches a shell or a keyboard: tmux
//! gets values it cannot expand or split, pastes carry no escape sequences, and the tap acts
//! only on what the agent itself says. Real tmux, real processes, the demo agent and small
//! shell scripts standing in for CLIs.

use crate::support;

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

fn type_into(fleet: &Fleet, pane: &str, text: &str) {
    fleet.tmux(&["send-keys", "-t", pane, "-l", text]).unwrap();
    fleet.tmux(&["send-keys", "-t", pane, "Enter"]).unwrap();
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
         printf '%s\\n' \"->continuity:uncertain#$PHOENIX_MARKER_KEY inert-probe\"\n\
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

/// What the raw agent received from one injection: nothing before the paste, no ESC but the
/// paste's own brackets, the text inside as text, and nothing after it but Enter.
#[track_caller]
fn assert_one_plain_paste(received: &[u8]) {
    let text = String::from_utf8_lossy(received).into_owned();
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
        "the text is there, as text: {inside:?}"
    );
    assert!(
        !after.is_empty() && after.chars().all(|c| c == '\r'),
        "only Enter after the paste, got {after:?}"
    );
}

const HOSTILE: &str = "Current task: innocent\n\x1b]2;pwned-title\x07\x1b]0;pwned\x07still text\
                       \x1b[201~\r!touch pwned-by-paste\r\n\u{9b}201~\x1b[200~more\n";

/// A handoff (or any injected text) with an OSC title sequence and an early end of bracketed
/// paste followed by `\r!command\r` arrives as plain text inside one paste — from `handoff
/// inject` and from the API's `text` alike: the program in the pane receives no ESC but the
/// paste's own brackets, nothing after the paste but Enter, and the pane's title stays.
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

    let h = save_handoff(&fleet, "raw", HOSTILE);
    let id = h["id"].as_str().unwrap();
    let file = fleet
        .agent_dir("raw")
        .join("handoffs")
        .join(format!("{id}.md"));
    // Saved under the same rule: the handoff file has no control characters left.
    let saved = String::from_utf8(std::fs::read(&file).unwrap()).unwrap();
    assert!(
        !saved.contains(['\x1b', '\u{9b}', '\x07', '\r']),
        "{saved:?}"
    );
    // Pasted under the rule too: a body that got onto disk some other way (an older phoenix,
    // an edit) is delivered as plain text all the same.
    let (header, body) = saved.split_once("\n---\n").unwrap();
    std::fs::write(&file, format!("{header}\n---\n{body}{HOSTILE}")).unwrap();
    fleet
        .run(&["handoff", "inject", "raw", "--id", id, "--json"])
        .status(0);
    let received = std::fs::read(&log).unwrap();
    assert_one_plain_paste(&received);
    assert_eq!(title(), title_before, "the pane's title changed");

    // The API: its `text` under the rule is refused outright; its handoff bodies are saved
    // and pasted under the rule.
    let server = support::serve::Server::start(&fleet, &[]);
    let (code, refused) = server.post(
        "/api/agents/raw/inject",
        &serde_json::json!({"text": HOSTILE}),
    );
    assert_eq!(code, 400, "{refused}");
    let (code, saved) = server.post(
        "/api/agents/raw/handoffs",
        &serde_json::json!({"reason": "manual", "body": HOSTILE}),
    );
    assert_eq!(code, 201, "{saved}");
    let api_id = saved["id"].as_str().unwrap().to_string();
    let api_file = file.with_file_name(format!("{api_id}.md"));
    let saved = std::fs::read_to_string(&api_file).unwrap();
    assert!(
        !saved.contains(['\x1b', '\u{9b}', '\x07', '\r']),
        "{saved:?}"
    );
    let (header, body) = saved.split_once("\n---\n").unwrap();
    std::fs::write(&api_file, format!("{header}\n---\n{body}{HOSTILE}")).unwrap();
    let (code, injected) = server.post(
        "/api/agents/raw/inject",
        &serde_json::json!({"handoff_id": api_id}),
    );
    assert_eq!(code, 200, "{injected}");
    let all = std::fs::read(&log).unwrap();
    assert_one_plain_paste(&all[received.len()..]);
    assert_eq!(title(), title_before, "the pane's title changed");
}

fn demo(name: &str, flags: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 300ms --no-hooks {flags}\"\n"
    )
}

fn ledger(fleet: &Fleet, agent: &str) -> serde_json::Value {
    fleet.run(&["ledger", agent, "--json"]).status(0).json()
}

/// An agent that merely prints a file quoting the protocol (the README) changes nothing: its
/// ledger and handoffs stay as they were. A marker the agent prints itself afterwards still
/// works (and, the tap acting in order, shows that the README's lines were all read).
#[test]
fn printing_a_file_that_quotes_the_protocol_changes_nothing() {
    let fleet = Fleet::new();
    fleet.toml("[[agent]]\nname = \"shell\"\ncli = \"custom\"\ncommand = \"sh\"\n");
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["shell"]);
    let pane = pane_of(&fleet, "shell");
    wait_until(Duration::from_secs(10), "the tap", || {
        fleet
            .ops("shell")
            .iter()
            .any(|o| o["event"] == "tap_started")
    });
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    assert!(
        std::fs::read_to_string(&readme)
            .unwrap()
            .contains("\n->continuity:save <<<\n")
    );
    // One command line, so that the marker comes right after the README (typed ahead, the
    // shell's prompt would stand before it). The typed line holds the marker mid-line (not the
    // agent speaking); printf's output has it at the start of a line.
    type_into(
        &fleet,
        &pane,
        &format!(
            "cat '{}'; printf '%s\\n' \"->continuity:uncertain#$PHOENIX_MARKER_KEY \\\"after the readme\\\"\"",
            readme.display()
        ),
    );
    wait_until_explained(
        Duration::from_secs(20),
        "the agent's own marker acted on",
        || {
            fleet
                .ops("shell")
                .iter()
                .any(|o| o["event"] == "tap_uncertain" && o["item"] == "after the readme")
        },
        || fleet.explain("shell", &pane),
    );
    assert_eq!(
        ledger(&fleet, "shell")["uncertain"],
        serde_json::json!(["after the readme"]),
        "the README's example was taken for the agent's"
    );
    let ops = fleet.ops("shell");
    let acted: Vec<_> = ops
        .iter()
        .filter(|o| {
            o["event"]
                .as_str()
                .is_some_and(|e| e.starts_with("tap_") && e != "tap_started")
        })
        .collect();
    assert_eq!(acted.len(), 1, "{acted:#?}");
    let ledger = ledger(&fleet, "shell");
    assert!(ledger["current_task"].is_null(), "{ledger}");
    let handoffs = fleet.run(&["handoff", "list", "shell", "--json"]).json();
    assert_eq!(handoffs["handoffs"], serde_json::json!([]));
}

/// A handoff whose body holds `->continuity:load` is loaded once when the agent asks, not
/// again by its own echo (it once loaded itself 62 times in 100 s).
#[test]
fn a_self_referencing_handoff_is_loaded_once() {
    let fleet = Fleet::new();
    fleet.toml(&demo("plain", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["plain"]);
    let pane = pane_of(&fleet, "plain");
    wait_until(Duration::from_secs(10), "the tap", || {
        fleet
            .ops("plain")
            .iter()
            .any(|o| o["event"] == "tap_started")
    });
    // The agent's own marker, key and all, saved in its handoff: its echo is still no command.
    let key = fleet.marker_key("plain");
    save_handoff(
        &fleet,
        "plain",
        &format!(
            "Current task: the loop check\n->continuity:load#{key}\nNext: ->continuity:load#{key} again\n"
        ),
    );
    type_into(&fleet, &pane, "silent");
    type_into(&fleet, &pane, &format!("say ->conti{{}}nuity:load#{key}"));
    wait_until_explained(
        Duration::from_secs(20),
        "the handoff loaded",
        || fleet.ops("plain").iter().any(|o| o["event"] == "tap_load"),
        || fleet.explain("plain", &pane),
    );
    // The tap acts in order: once this is done, every echo of the paste has been read.
    type_into(
        &fleet,
        &pane,
        &format!("say ->conti{{}}nuity:uncertain#{key} \"after the load\""),
    );
    wait_until_explained(
        Duration::from_secs(20),
        "the agent's own marker acted on",
        || {
            fleet
                .ops("plain")
                .iter()
                .any(|o| o["event"] == "tap_uncertain" && o["item"] == "after the load")
        },
        || fleet.explain("plain", &pane),
    );
    let ops = fleet.ops("plain");
    let loads = ops.iter().filter(|o| o["event"] == "tap_load").count();
    assert_eq!(loads, 1, "{ops:#?}");
    assert!(
        ops.iter().any(|o| o["event"] == "tap_ignored"
            && o["command"] == "load"
            && o["reason"] == "the echo of text phoenix pasted"),
        "{ops:#?}"
    );
}
