//! Nothing an agent (or a host, or a file) supplies reaches the operator's terminal raw: what
//! its state, ledger, handoffs, messages, ops and pane hold is printed with every escape
//! sequence, control character, bidi control and invisible character shown as a visible
//! stand-in, phoenix's own colour kept; `--json` holds the same text escaped. Each command
//! runs as on a colour terminal (`CLICOLOR_FORCE`: anstream passes escapes through), its
//! stdout and stderr checked byte by byte.

use crate::support;

use std::io::Write;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{Fleet, wait_until};

/// What an agent writes wherever it can: an OSC 52 clipboard write, an OSC 0 title, a screen
/// clear, a DCS, an 8-bit CSI, a right-to-left override, a zero-width space, a tag character.
const HOSTILE: &str = "pwn\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;owned\x1b\\\x1b[2J\x1bP+q544e\x1b\\\u{9b}31m\u{202e}gnp.exe\u{200b}\u{e0041}end";

/// The part of [`HOSTILE`] that survives every layer that already drops control characters
/// (handoff save, `send`, tmux's screen): a bidi override, a zero-width space, a tag.
const INVISIBLE: &str = "calm\u{202e}gnp.exe\u{200b}\u{e0041}end";

/// `args` run as on a colour terminal.
fn on_terminal(fleet: &Fleet, args: &[&str]) -> Output {
    fleet
        .command(args)
        .env("CLICOLOR_FORCE", "1")
        .output()
        .expect("run phoenix")
}

/// Why `bytes` could act on a terminal, if they could: an ESC that does not start a colour
/// (SGR) sequence, a C0 control but `\n` and `\t`, DEL, a C1 control, a bidi control or an
/// invisible character.
fn danger(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut rest = &*text;
    while let Some(at) = rest.find('\x1b') {
        let after = &rest[at + 1..];
        let params = after.strip_prefix('[').map(|p| {
            p.len()
                - p.trim_start_matches(|c: char| c.is_ascii_digit() || c == ';')
                    .len()
        });
        match params {
            Some(n) if after[1 + n..].starts_with('m') => rest = &after[n + 2..],
            _ => {
                let shown: String = rest[at..].chars().take(12).collect();
                return Some(format!(
                    "an escape sequence that is not a colour: {shown:?}"
                ));
            }
        }
    }
    text.chars()
        .find(|&c| {
            (c.is_control() && !matches!(c, '\n' | '\t' | '\x1b'))
                || matches!(c, '\u{200b}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{e0000}'..='\u{e007f}')
        })
        .map(|c| format!("the character U+{:04X}", c as u32))
}

#[track_caller]
fn assert_inert(args: &[&str], out: &Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        if let Some(why) = danger(bytes) {
            panic!(
                "phoenix {args:?}: {stream} holds {why}:\n{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}

/// `args` on a terminal: exit `code`, stdout and stderr inert, the text both print.
#[track_caller]
fn inert_run(fleet: &Fleet, args: &[&str], code: i32) -> String {
    let out = on_terminal(fleet, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(code), "phoenix {args:?}:\n{text}");
    assert_inert(args, &out);
    text
}

/// `args` with `--json`: inert bytes too, and a document.
#[track_caller]
fn inert_json(fleet: &Fleet, args: &[&str]) -> Value {
    let out = on_terminal(fleet, args);
    assert_inert(args, &out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "phoenix {args:?}: not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Set the string field `key` of the JSON object in `path` to `value` (what an agent can do to
/// the files of its own state dir).
fn set_field(path: &std::path::Path, key: &str, value: Value) {
    let mut doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    doc[key] = value;
    std::fs::write(path, serde_json::to_vec(&doc).unwrap()).unwrap();
}

/// An `agent_exit` step with a hostile reason, as an agent can append to its ops.jsonl.
fn hostile_step(fleet: &Fleet, agent: &str) {
    let line = serde_json::json!({
        "ts": jiff::Timestamp::now().to_string(),
        "agent": agent,
        "event": "agent_exit",
        "reason": HOSTILE,
        "action": "restart",
    });
    let mut ops = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(fleet.agent_dir(agent).join("ops.jsonl"))
        .unwrap();
    writeln!(ops, "{line}").unwrap();
}

#[test]
fn an_agents_state_ledger_handoffs_messages_and_steps_reach_the_terminal_inert() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("a", ""));
    // The agent writes where it can: a loop, its state, its ledger, a handoff, a message, a
    // step in its ops.
    fleet.run(&["loop", "add", "a", "L1", HOSTILE]).status(0);
    let dir = fleet.agent_dir("a");
    set_field(&dir.join("state.json"), "current_task", HOSTILE.into());
    let body = fleet.path().join("body.md");
    std::fs::write(&body, "Current task: MARKER\nNext: MARKER\n").unwrap();
    fleet
        .run(&["handoff", "save", "a", "--file", body.to_str().unwrap()])
        .status(0);
    let handoff = std::fs::read_dir(dir.join("handoffs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "md"))
        .expect("the saved handoff");
    // Its header is JSON values, its body text as it is.
    let text = std::fs::read_to_string(&handoff).unwrap();
    let (header, body) = text.split_once("\n---\n").unwrap();
    let quoted = serde_json::to_string(HOSTILE).unwrap();
    let header = header.replace("MARKER", &quoted[1..quoted.len() - 1]);
    std::fs::write(
        &handoff,
        format!("{header}\n---\n{}", body.replace("MARKER", HOSTILE)),
    )
    .unwrap();
    // The ledger after the handoff, which writes it too.
    std::fs::write(
        dir.join("ledger.json"),
        serde_json::to_vec(&serde_json::json!({
            "agent": "a", "current_task": HOSTILE, "completed": [HOSTILE],
        }))
        .unwrap(),
    )
    .unwrap();
    fleet.run(&["send", "a", INVISIBLE]).status(0);
    hostile_step(&fleet, "a");

    let shown = inert_run(&fleet, &["state", "show", "a"], 0);
    assert!(
        shown.contains("pwn␛]52;c;cm0gLXJmIH4=␇␛]0;owned"),
        "{shown}"
    );
    assert!(
        shown.contains("\\u{9b}31m\\u{202e}gnp.exe\\u{200b}\\u{e0041}end"),
        "{shown}"
    );
    let described = inert_run(&fleet, &["status", "a"], 3);
    assert!(described.contains("Current task:   pwn␛]52"), "{described}");
    assert!(inert_run(&fleet, &["ledger", "a"], 0).contains("␛[2J"));
    assert!(inert_run(&fleet, &["handoff", "list", "a"], 0).contains("pwn␛]52"));
    let id = handoff.file_stem().unwrap().to_str().unwrap();
    assert!(inert_run(&fleet, &["handoff", "show", id], 0).contains("pwn␛]52"));
    inert_run(&fleet, &["handoff", "search", "calm"], 0);
    assert!(inert_run(&fleet, &["inbox", "a"], 0).contains("calm\\u{202e}gnp.exe"));
    assert!(inert_run(&fleet, &["events"], 0).contains("pwn␛]52"));
    assert!(inert_run(&fleet, &["events", "--all"], 0).contains("pwn␛]52"));
    assert!(inert_run(&fleet, &["logs", "a"], 0).contains("reason=pwn␛]52"));

    // --json: the same text, exactly, escaped.
    let state = inert_json(&fleet, &["state", "show", "a", "--json"]);
    assert_eq!(state["current_task"], HOSTILE, "{state}");
    let status = inert_json(&fleet, &["status", "a", "--json"]);
    assert_eq!(status["agents"][0]["current_task"], HOSTILE, "{status}");
    let ledger = inert_json(&fleet, &["ledger", "a", "--json"]);
    assert_eq!(ledger["current_task"], HOSTILE, "{ledger}");
    let inbox = inert_json(&fleet, &["inbox", "a", "--json"]);
    assert!(inbox.to_string().contains("calm\u{202e}gnp.exe"), "{inbox}");
    let events = inert_json(&fleet, &["events", "--json"]);
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == HOSTILE),
        "{events}"
    );
}

#[test]
fn followed_events_reach_the_terminal_inert_as_text_and_as_json_lines() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("a", ""));
    fleet.run(&["loop", "add", "a", "L1", "a loop"]).status(0);
    for json in [false, true] {
        let out_path = fleet.path().join(format!("follow-{json}.out"));
        let mut args = vec!["events", "--follow"];
        if json {
            args.push("--json");
        }
        let mut child = fleet
            .command(&args)
            .env("CLICOLOR_FORCE", "1")
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Appended until seen: the follower may start reading after the first one.
        wait_until(Duration::from_secs(15), "the followed event", || {
            hostile_step(&fleet, "a");
            std::thread::sleep(Duration::from_millis(300));
            std::fs::read_to_string(&out_path).is_ok_and(|t| t.contains("pwn"))
        });
        let _ = child.kill();
        let _ = child.wait();
        let bytes = std::fs::read(&out_path).unwrap();
        if let Some(why) = danger(&bytes) {
            panic!(
                "events {args:?} holds {why}:\n{}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let text = String::from_utf8(bytes).unwrap();
        if json {
            for line in text.lines() {
                let event: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
                assert_eq!(event["reason"], HOSTILE, "{line}");
            }
        } else {
            assert!(text.contains("pwn␛]52;c;"), "{text}");
        }
    }
}

#[test]
fn what_an_agent_shows_in_its_pane_reaches_logs_inert() {
    let fleet = Fleet::new();
    // Escape sequences tmux acts on itself, and what it keeps on the screen: a bidi override,
    // a zero-width space, a tag character.
    let script = fleet.path().join("hostile.sh");
    std::fs::write(
        &script,
        format!(
            "printf '\\033]52;c;cm0gLXJmIH4=\\007\\033[2J%s\\n' '{INVISIBLE}'\nexec sleep 600\n"
        ),
    )
    .unwrap();
    fleet.toml(&format!(
        "[[agent]]\nname = \"a\"\ncommand = \"sh {}\"\n",
        script.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(15), "the agent's screen", || {
        fleet.run(&["logs", "a"]).stdout().contains("gnp.exe")
    });
    let shown = inert_run(&fleet, &["logs", "a"], 0);
    assert!(
        shown.contains("calm\\u{202e}gnp.exe\\u{200b}\\u{e0041}end"),
        "{shown}"
    );
    fleet.run(&["down"]).status(0);
}

/// `text` as the inside of a TOML basic string: every character as its `\U` escape.
fn toml_escaped(text: &str) -> String {
    text.chars()
        .map(|c| format!("\\U{:08X}", c as u32))
        .collect()
}

#[test]
fn an_error_naming_a_bad_value_reaches_the_terminal_inert() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("a", ""));
    // A name nobody declared, printed back in the error.
    let shown = inert_run(&fleet, &["status", HOSTILE], 1);
    assert!(shown.contains("no agent `pwn␛]52;c;"), "{shown}");
    let error = inert_json(&fleet, &["status", HOSTILE, "--json"]);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(HOSTILE),
        "{error}"
    );
    // A workdir that does not exist, named by its (escaped) path.
    fleet.toml(&format!(
        "[[agent]]\nname = \"a\"\ncommand = \"sleep 600\"\nworkdir = \"/nonexistent/{}\"\n",
        toml_escaped(HOSTILE)
    ));
    let shown = inert_run(&fleet, &["validate"], 1);
    assert!(shown.contains("/nonexistent/pwn␛]52;c;"), "{shown}");
    // A raw ESC in phoenix.toml itself, quoted by the diagnostic.
    let mut raw = std::fs::read(fleet.config()).unwrap();
    raw.extend_from_slice(b"\n[thresholds]\nsilence = \"\x1b]0;owned\x07\x1b[2J\"\n");
    std::fs::write(fleet.config(), raw).unwrap();
    let shown = inert_run(&fleet, &["validate"], 1);
    assert!(shown.contains("␛]0;owned␇"), "{shown}");
}

/// A host whose phoenix answers with escape sequences in every command's stdout and stderr
/// (a host taken over, or a phoenix that does not make its output inert): the operator's
/// phoenix prints what the host printed, and none of it acts on the terminal.
#[test]
fn what_a_host_answers_reaches_the_terminal_inert() {
    use support::hosts::HostedFleet;
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    // The host's `phoenix host` answers as phoenix does, with escapes (JSON `\u` escapes,
    // so the reply is still read) put before what each command printed.
    let script = net.fleet.path().join("hostile-phoenix");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = host ]; then\n  '{}' \"$@\" | sed 's/\"stdout\":\"/&\\\\u001b]52;c;cm0gLXJmIH4=\\\\u0007\\\\u001b[2J\\\\u009b2J\\\\u202ehost-out /g; s/\"stderr\":\"/&\\\\u001b]0;owned\\\\u0007host-err /g'\nelse\n  exec '{}' \"$@\"\nfi\n",
            support::PHOENIX,
            support::PHOENIX
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let header = net.header().replace(
        &format!("phoenix = \"{}\"", support::PHOENIX),
        &format!("phoenix = \"{}\"", script.display()),
    );
    net.fleet.raw_toml(&format!(
        "{header}{}",
        HostedFleet::demo_agent("far1", Some("gpu-1"))
    ));
    net.run(&["apply", "--yes"]);
    wait_until(Duration::from_secs(30), "the host's agent runs", || {
        net.host("gpu-1")
            .status()
            .iter()
            .any(|r| r["state"] == "running")
    });
    let described = inert_run(&net.fleet, &["status", "far1"], 0);
    assert!(
        described.contains("␛]52;c;cm0gLXJmIH4=␇␛[2J\\u{9b}2J\\u{202e}host-out"),
        "{described}"
    );
    assert!(described.contains("␛]0;owned␇host-err"), "{described}");
    for args in [
        &["ledger", "far1"][..],
        &["logs", "far1", "-n", "5"],
        &["handoff", "list", "far1"],
        &["inbox", "far1"],
        &["status"],
        &["events"],
    ] {
        let out = on_terminal(&net.fleet, args);
        assert_inert(args, &out);
    }
}
