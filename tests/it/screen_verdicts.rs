//! Screen verdicts (wedged, waiting for a person) rest on the CLI's own dialog only: drawn
//! where the CLI draws it (the bottom of the visible screen, in place of its input box),
//! while a turn runs (the hooks say a prompt came and no Stop since), and not words the
//! transcript holds. Claude-like and Gemini-like agents here are shell scripts that draw
//! their screens and fire their hooks through `phoenix hook …`, as the real CLIs do.
//!
//! What happened before: a Claude Code agent whose answer ended with "Do you want to
//! proceed?" sat idle, was killed about three minutes later, revived under that question,
//! and put in safe mode three minutes after that.

use crate::support;

use serde_json::Value;
use support::{Fleet, PHOENIX, read_jsonl, wait_until_explained};

/// Claude Code's input box, as it draws it below the conversation (also while it works).
const INPUT_BOX: &str = "\
╭──────────────────────────────────────────────────────────────╮
│ >                                                            │
╰──────────────────────────────────────────────────────────────╯
  ? for shortcuts";

/// Claude Code's permission dialog, drawn in place of its input box.
const PERMISSION_DIALOG: &str = "\
● Bash(rm -rf build)

╭──────────────────────────────────────────────────────────────╮
│ Bash command                                                 │
│                                                              │
│   rm -rf build                                               │
│   Remove the build directory                                 │
│                                                              │
│ Do you want to proceed?                                      │
│ ❯ 1. Yes                                                     │
│   2. Yes, and don't ask again for rm commands in /repo       │
│   3. No, and tell Claude what to do differently (esc)        │
╰──────────────────────────────────────────────────────────────╯";

/// The wedge phrases of `health::SCREEN_PATTERNS`, as a model's answer may well hold them.
const WEDGE_WORDS: &str = "\
● The logs you sent show why the nightly job stopped:
  API Error: 529 {\"type\":\"overloaded_error\"} at 02:14, then
  Rate limit reached for the org, and later Usage limit reached.
  The bot's token failed too: Invalid API key · Please run /login
  (OAuth token has expired). Its menu offered 1. Keep trying / 2. Stop,
  and the other tool asked Allow command? and Allow execution, then
  Apply this change? while Waiting for approval.
  Do you want to make this edit to the cron file?
  Do you want to proceed?";

/// What one scripted agent does: its CLI, and the shell lines after its session start.
struct Scene {
    name: &'static str,
    cli: &'static str,
    body: String,
}

/// The hook call of a script: `$1` the hook, `$2` its payload.
const HOOK_FN: &str = "hook() { printf '%s' \"$2\" | \"$P\" hook \"$1\" --agent \"$PHOENIX_AGENT\" --cli \"$CLI\" >/dev/null 2>&1; }";

fn script(fleet: &Fleet, scene: &Scene) -> std::path::PathBuf {
    let transcript = fleet.path().join(format!("{}.jsonl", scene.name));
    let path = fleet.path().join(format!("{}.sh", scene.name));
    let text = format!(
        "#!/bin/sh\nP='{PHOENIX}'\nCLI='{cli}'\nT='{t}'\n{HOOK_FN}\n: > \"$T\"\n\
         hook session-start '{{\"session_id\":\"s-1\",\"hook_event_name\":\"SessionStart\",\"source\":\"startup\",\"transcript_path\":\"{t}\"}}'\n\
         {body}\nexec sleep 1000\n",
        cli = scene.cli,
        t = transcript.display(),
        body = scene.body,
    );
    std::fs::write(&path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Shell lines: draw `text` (as is, through a quoted here-document).
fn draw(text: &str) -> String {
    format!("cat <<'SCREEN'\n{text}\nSCREEN\n")
}

/// Shell lines: the prompt `prompt` submitted (its hook; Gemini's is BeforeAgent).
fn prompt(cli: &str, prompt: &str) -> String {
    let event = if cli == "gemini" {
        "BeforeAgent"
    } else {
        "UserPromptSubmit"
    };
    format!(
        "hook prompt '{{\"session_id\":\"s-1\",\"hook_event_name\":\"{event}\",\"prompt\":\"{prompt}\"}}'\n"
    )
}

/// Shell lines: the turn ends (Stop).
fn stop() -> String {
    "hook stop '{\"session_id\":\"s-1\",\"hook_event_name\":\"Stop\"}'\n".to_string()
}

/// Shell lines: the model's answer `text` recorded in the transcript, as Claude Code does.
fn said(text: &str) -> String {
    let record = serde_json::json!({
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
    });
    format!("cat >> \"$T\" <<'RECORD'\n{record}\nRECORD\n")
}

/// The model's words without the CLI's marks (`● `) and indentation.
fn words(screen: &str) -> String {
    screen
        .lines()
        .map(|l| l.trim_start_matches(['●', ' ']))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A resumed session's replay of the turns before it: a long conversation (it scrolls far
/// up) full of the phrases.
fn replay() -> String {
    let mut text = String::new();
    for k in 0..8 {
        text.push_str(&format!("> step {k} of the migration\n\n{WEDGE_WORDS}\n\n"));
    }
    text
}

fn scenes() -> Vec<Scene> {
    let answer =
        "● Here is the plan: move the tables first, then the readers.\n  Do you want to proceed?";
    let quoted = "● The docs page now shows the dialog as users see it:\n  \
                  \"Do you want to proceed?\" with 1. Yes and\n  \
                  \"3. No, and tell Claude what to do differently (esc)\"\n\n\
                  ✻ Thinking… (esc to interrupt)";
    vec![
        // Idle after an answer that ends with the question, its input box below.
        Scene {
            name: "answered",
            cli: "claude",
            body: format!(
                "{}{}{}{}{}",
                draw("> plan the migration\n"),
                prompt("claude", "plan the migration"),
                said(&words(answer)),
                draw(&format!("{answer}\n\n{INPUT_BOX}")),
                stop(),
            ),
        },
        // Idle, every wedge phrase in its last answer, the question the last line on screen
        // (no input box drawn at all).
        Scene {
            name: "phrases",
            cli: "claude",
            body: format!(
                "{}{}{}{}{}",
                draw("> why did the nightly job stop?\n"),
                prompt("claude", "why did the nightly job stop?"),
                said(&words(WEDGE_WORDS)),
                draw(WEDGE_WORDS),
                stop(),
            ),
        },
        // A resumed session replays its earlier turns (into the scrollback and the screen),
        // gets the continue prompt, answers, and sits idle.
        Scene {
            name: "replayed",
            cli: "claude",
            body: format!(
                "{}{}{}{}{}",
                draw(&replay()),
                prompt("claude", "Continue the task where it stopped"),
                said("Done: the migration is complete."),
                draw(&format!(
                    "> Continue the task where it stopped\n\n● Done: the migration is complete.\n\n{INPUT_BOX}"
                )),
                stop(),
            ),
        },
        // A turn a person interrupted: Claude Code runs no Stop for it, and says a minute
        // later that it idles at its prompt (Notification `idle_prompt`). The question is
        // the last line on screen, and no transcript says who wrote it.
        Scene {
            name: "interrupted",
            cli: "claude",
            body: format!(
                "{}{}{}sleep 11
{}",
                draw(
                    "> plan the migration
"
                ),
                prompt("claude", "plan the migration"),
                draw(&format!(
                    "{answer}
  ⎿  Interrupted by user"
                )),
                "hook notification '{\"session_id\":\"s-1\",\"hook_event_name\":\"Notification\",\
                 \"message\":\"Claude is waiting for your input\",\"notification_type\":\"idle_prompt\"}'\n",
            ),
        },
        // Mid-turn, a replay above it and the model quoting the dialog above the input box.
        Scene {
            name: "quoting",
            cli: "claude",
            body: format!(
                "{}{}{}{}",
                draw(&replay()),
                prompt("claude", "document the permission dialog"),
                said(&words(quoted)),
                draw(&format!(
                    "> document the permission dialog\n\n{quoted}\n\n{INPUT_BOX}"
                )),
            ),
        },
        // Mid-turn, the CLI's permission dialog where it draws it (its hook not run).
        Scene {
            name: "asking",
            cli: "claude",
            body: format!(
                "{}{}{}",
                draw("> clean the build\n\n● I'll remove the build directory.\n"),
                prompt("claude", "clean the build"),
                draw(PERMISSION_DIALOG),
            ),
        },
        // Mid-turn, Gemini CLI's choice after a 404 for its model: no hook fires until a
        // person chooses. A wedge.
        Scene {
            name: "stuck",
            cli: "gemini",
            body: format!(
                "{}{}",
                prompt("gemini", "summarise the changelog"),
                draw(
                    " > summarise the changelog\n\
                     ╭──────────────────────────────────────────────────────────────╮\n\
                     │ It seems like you don't have access to gemini-3.8-flash.     │\n\
                     │ Your admin might have disabled the access.                   │\n\
                     │ ● 1. Keep trying                                             │\n\
                     │   2. Stop                                                    │\n\
                     ╰──────────────────────────────────────────────────────────────╯"
                ),
            ),
        },
    ]
}

fn watchdog(fleet: &Fleet) -> Value {
    let run = fleet.run(&["watchdog", "--once", "--json"]);
    assert!(
        matches!(run.code(), Some(0 | 1)),
        "watchdog failed:\n{}\n{}",
        run.stdout(),
        run.stderr()
    );
    run.json()
}

fn verdict<'a>(report: &'a Value, agent: &str) -> &'a Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap_or_else(|| panic!("no {agent} in {report}"))
}

fn status(fleet: &Fleet, agent: &str) -> Value {
    std::fs::read_to_string(fleet.agent_dir(agent).join("state.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .map_or(Value::Null, |s| s["status"].clone())
}

fn screen(fleet: &Fleet, agent: &str) -> String {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    fleet
        .tmux(&["capture-pane", "-p", "-J", "-t", &pane])
        .unwrap_or_default()
}

fn read_json(path: &std::path::Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

fn ops_named(fleet: &Fleet, agent: &str, event: &str) -> usize {
    fleet
        .ops(agent)
        .iter()
        .filter(|o| o["event"] == event)
        .count()
}

/// Idle agents whose screens hold every wedge phrase (their answers, a replay of old turns)
/// are left alone pass after pass; mid-turn, the model quoting the dialog above the input
/// box is no dialog, while the CLI's real dialogs are still found: Claude's permission box
/// needs a person (and is no wedge), Gemini's choice after a 404 is a wedge.
#[test]
fn only_the_clis_own_dialog_mid_turn_makes_a_screen_verdict() {
    let fleet = Fleet::new();
    let scenes = scenes();
    let mut toml = String::new();
    for scene in &scenes {
        let work = fleet.path().join(format!("w-{}", scene.name));
        std::fs::create_dir_all(&work).unwrap();
        toml.push_str(&format!(
            "[[agent]]\nname = \"{}\"\ncli = \"{}\"\ncommand = \"{}\"\nworkdir = \"{}\"\n\n",
            scene.name,
            scene.cli,
            script(&fleet, scene).display(),
            work.display()
        ));
    }
    fleet.toml(&toml);
    fleet.run(&["apply", "--yes"]).status(0);
    let names: Vec<&str> = scenes.iter().map(|s| s.name).collect();
    fleet.wait_running(&names);
    let idle = ["answered", "phrases", "replayed", "interrupted"];
    let last_line = |agent: &str| match agent {
        "answered" | "replayed" | "quoting" => "? for shortcuts",
        "phrases" => "Do you want to proceed?",
        "interrupted" => "Interrupted by user",
        "asking" => "tell Claude what to do differently",
        _ => "2. Stop",
    };
    for name in &names {
        wait_until_explained(
            std::time::Duration::from_secs(40),
            "the scene drawn and its turn where the hooks put it",
            || {
                let want = if idle.contains(name) {
                    "idle"
                } else {
                    "working"
                };
                status(&fleet, name) == want && screen(&fleet, name).contains(last_line(name))
            },
            || format!("{name}: {}\n{}", status(&fleet, name), screen(&fleet, name)),
        );
    }
    let ended = fleet.ops("interrupted");
    assert!(
        ended
            .iter()
            .any(|o| o["event"] == "turn_complete" && o["by"] == "idle_prompt"),
        "the CLI idle at its prompt ended the turn: {ended:?}"
    );
    let replayed = fleet
        .tmux(&[
            "capture-pane",
            "-p",
            "-J",
            "-S",
            "-400",
            "-t",
            fleet.agent_status("replayed")["pane"].as_str().unwrap(),
        ])
        .unwrap();
    assert!(
        replayed.matches("Do you want to proceed?").count() >= 8,
        "the replay is in the scrollback: {replayed}"
    );

    // Pass 1 sets the baseline, pass 2 reads the screens, pass 3 sees them unchanged, pass
    // 4 would confirm a finding, pass 5 act on it again.
    let reports: Vec<Value> = (0..5).map(|_| watchdog(&fleet)).collect();
    for (pass, report) in reports.iter().enumerate() {
        for agent in idle.iter().chain(&["quoting"]) {
            let a = verdict(report, agent);
            assert_eq!(a["verdict"], "healthy", "pass {pass}: {a}");
            assert!(a.get("needs_input").is_none(), "pass {pass}: {a}");
            assert!(a.get("action").is_none(), "pass {pass}: {a}");
        }
        let asking = verdict(report, "asking");
        assert_eq!(
            asking["verdict"], "healthy",
            "a person's approval is no wedge: pass {pass}: {asking}"
        );
    }
    // The CLI's real dialogs, mid-turn, are still found.
    let asking = verdict(&reports[2], "asking");
    assert_eq!(
        asking["needs_input"]["reason"], "approval_prompt",
        "{asking}"
    );
    assert!(
        asking["needs_input"]["message"]
            .as_str()
            .unwrap()
            .contains("Do you want to proceed?"),
        "{asking}"
    );
    let stuck = verdict(&reports[2], "stuck");
    assert_eq!(stuck["verdict"], "suspect", "{stuck}");
    assert_eq!(stuck["findings"][0]["check"], "screen", "{stuck}");
    assert_eq!(verdict(&reports[3], "stuck")["verdict"], "unhealthy");

    // Nobody but the wedged one was killed, revived or put in safe mode.
    for agent in idle.iter().chain(&["quoting", "asking"]) {
        assert_eq!(ops_named(&fleet, agent, "agent_exit"), 0, "{agent}");
        assert_eq!(ops_named(&fleet, agent, "agent_start"), 1, "{agent}");
        assert_eq!(ops_named(&fleet, agent, "safe_mode"), 0, "{agent}");
        let ledger = read_json(&fleet.agent_dir(agent).join("restarts.json"));
        assert!(ledger["safe_mode"].is_null(), "{agent}: {ledger}");
    }
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let unhealthy: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "session_unhealthy")
        .collect();
    assert!(
        unhealthy.iter().all(|e| e["agent"] == "stuck"),
        "{unhealthy:?}"
    );
    assert!(!unhealthy.is_empty());
    // The idle agents' answers are still on their screens, untouched.
    for agent in idle {
        assert!(
            screen(&fleet, agent).contains(last_line(agent)),
            "{agent}: {}",
            screen(&fleet, agent)
        );
    }
}
