use super::*;
use crate::agent_cli::{ALL, claude, codex, copilot, gemini};

fn words(line: &str) -> Vec<String> {
    shlex::split(line).unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// What phoenix sets for `cli` started as `line`, sandboxed, at its newest proven version.
fn sandboxed(cli: Cli, line: &str) -> OwnSandbox {
    let version = cli.adapter().proven().last().map(|p| p.version);
    plan(cli, true, words(line), &no_env, version)
}

fn at(cli: Cli, line: &str, version: Option<Version>) -> OwnSandbox {
    plan(cli, true, words(line), &no_env, version)
}

#[test]
fn unsandboxed_agents_get_nothing_changed_and_nothing_said() {
    for cli in ALL {
        let argv = words("prog --model x");
        let env = |_: &str| Some("true".to_string());
        for version in cli
            .adapter()
            .proven()
            .iter()
            .map(|p| Some(p.version))
            .chain([None])
        {
            assert_eq!(
                plan(cli, false, argv.clone(), &env, version),
                OwnSandbox::unchanged(argv.clone()),
                "{cli}"
            );
        }
    }
}

#[test]
fn claude_code_gets_its_sandbox_off_through_settings_in_every_proven_version() {
    for p in claude::PROVEN {
        let got = at(
            Cli::Claude,
            "claude --dangerously-skip-permissions",
            Some(p.version),
        );
        assert_eq!(
            got.argv,
            [
                "claude",
                "--settings",
                r#"{"sandbox":{"enabled":false}}"#,
                "--dangerously-skip-permissions"
            ]
        );
        assert!(got.env.is_empty());
        let note = got.note.unwrap();
        assert!(
            note.contains("off") && note.contains("--settings"),
            "{note}"
        );
    }
    // Not known, or a full path to the binary: the same.
    let got = at(Cli::Claude, "/opt/cc/bin/claude.exe", None);
    assert_eq!(got.argv[1..], ["--settings", claude::OWN_SANDBOX_OFF]);
}

#[test]
fn claude_codes_own_inline_settings_get_the_key_added_and_its_own_choice_is_kept() {
    // Claude Code reads only the last --settings: a second one would drop the agent's.
    let got = sandboxed(
        Cli::Claude,
        r#"claude --settings '{"model":"opus","sandbox":{"autoAllowBashIfSandboxed":true}}' -p hi"#,
    );
    assert_eq!(got.argv.len(), 5, "{:?}", got.argv);
    let merged: serde_json::Value = serde_json::from_str(&got.argv[2]).unwrap();
    assert_eq!(
        merged,
        serde_json::json!({"model": "opus", "sandbox": {"autoAllowBashIfSandboxed": true, "enabled": false}})
    );
    assert!(got.note.unwrap().contains("the agent's own `--settings`"));
    // The `=` form keeps its shape.
    let got = sandboxed(Cli::Claude, r#"claude '--settings={"model":"opus"}'"#);
    assert_eq!(
        got.argv[1],
        r#"--settings={"model":"opus","sandbox":{"enabled":false}}"#
    );
    // The agent's own choice stays, and the plan says it.
    let mine = r#"claude --settings '{"sandbox":{"enabled":true}}'"#;
    let got = sandboxed(Cli::Claude, mine);
    assert_eq!(got.argv, words(mine));
    let note = got.note.unwrap();
    assert!(note.contains("kept") && note.contains("true"), "{note}");
    // A settings file is the agent's: left alone, and said.
    let got = sandboxed(Cli::Claude, "claude --settings /etc/cc.json");
    assert_eq!(got.argv, words("claude --settings /etc/cc.json"));
    assert!(got.note.unwrap().contains("/etc/cc.json"));
}

#[test]
fn no_flag_goes_to_another_program_than_the_cli() {
    for (cli, line) in [
        (Cli::Claude, "npx claude"),
        (Cli::Codex, "env X=1 codex"),
        (Cli::Copilot, "./run-copilot.sh"),
    ] {
        let got = sandboxed(cli, line);
        assert_eq!(got.argv, words(line), "{cli}");
        let note = got.note.unwrap();
        assert!(note.contains("cannot add"), "{note}");
    }
    // Words after `--` are the CLI's prompt, never its flags.
    let got = sandboxed(Cli::Codex, "codex -- 'run with --sandbox read-only'");
    assert_eq!(got.argv[1..3], codex::OWN_SANDBOX_OFF);
}

#[test]
fn codex_gets_its_sandbox_off_unless_its_command_chooses_one() {
    for p in codex::PROVEN {
        let got = at(Cli::Codex, "codex --no-daemon -m o3", Some(p.version));
        assert_eq!(
            got.argv,
            [
                "codex",
                "--sandbox",
                "danger-full-access",
                "--no-daemon",
                "-m",
                "o3"
            ]
        );
        assert!(got.env.is_empty());
        assert!(got.note.unwrap().contains("off"));
    }
    for (line, kept) in [
        ("codex --dangerously-bypass-approvals-and-sandbox", "off"),
        ("codex --yolo", "off"),
        ("codex -s danger-full-access", "off"),
        ("codex --sandbox=workspace-write", "kept"),
        ("codex -s read-only", "kept"),
        ("codex -c sandbox_mode=\"workspace-write\"", "kept"),
        ("codex --config=default_permissions=\":workspace\"", "kept"),
        ("codex -csandbox_mode=read-only", "kept"),
    ] {
        let got = sandboxed(Cli::Codex, line);
        assert_eq!(got.argv, words(line), "{line}");
        let note = got.note.unwrap();
        assert!(note.contains(kept), "{line}: {note}");
    }
    // Another key of `-c` chooses nothing.
    let got = sandboxed(Cli::Codex, "codex -c model=\"o3\"");
    assert_eq!(got.argv[1..3], codex::OWN_SANDBOX_OFF);
}

#[test]
fn codex_resume_keeps_the_sandbox_phoenix_chose() {
    let base = sandboxed(Cli::Codex, "codex --no-daemon").argv;
    let resumed = Cli::Codex.adapter().resume_argv(base, "s1").unwrap();
    assert_eq!(
        resumed,
        [
            "codex",
            "resume",
            "s1",
            "--sandbox",
            "danger-full-access",
            "--no-daemon"
        ]
    );
    let base = sandboxed(Cli::Claude, "claude").argv;
    let resumed = Cli::Claude.adapter().resume_argv(base, "s1").unwrap();
    assert_eq!(
        resumed,
        [
            "claude",
            "--settings",
            claude::OWN_SANDBOX_OFF,
            "--resume",
            "s1"
        ]
    );
}

#[test]
fn gemini_cli_gets_its_sandbox_off_through_its_environment() {
    let off = (
        gemini::OWN_SANDBOX_OFF.0.to_string(),
        gemini::OWN_SANDBOX_OFF.1.to_string(),
    );
    for p in gemini::PROVEN {
        let got = at(Cli::Gemini, "gemini --yolo", Some(p.version));
        assert_eq!(got.argv, words("gemini --yolo"));
        assert_eq!(got.env, std::slice::from_ref(&off));
        assert!(got.note.unwrap().contains("GEMINI_SANDBOX=false"));
    }
    // The flag is outranked by the variable, and the plan says so.
    let got = sandboxed(Cli::Gemini, "gemini --sandbox");
    assert_eq!(got.env, std::slice::from_ref(&off));
    assert!(
        got.note
            .unwrap()
            .contains("outranks the agent's own `--sandbox`")
    );
    // The agent's own variable: off already, nothing to add; anything else is replaced, said.
    let env = |v: &'static str| move |k: &str| (k == "GEMINI_SANDBOX").then(|| v.to_string());
    let got = plan(Cli::Gemini, true, words("gemini"), &env("0"), None);
    assert!(got.env.is_empty());
    assert!(
        got.note
            .unwrap()
            .contains("as the agent's environment says")
    );
    let got = plan(Cli::Gemini, true, words("gemini"), &env("docker"), None);
    assert_eq!(got.env, [off]);
    assert!(
        got.note
            .unwrap()
            .contains("in place of the agent's own `GEMINI_SANDBOX=docker`")
    );
}

#[test]
fn copilot_cli_gets_no_sandbox_only_from_the_version_seen_to_take_it() {
    let got = sandboxed(Cli::Copilot, "copilot --yolo");
    assert_eq!(got.argv, ["copilot", copilot::OWN_SANDBOX_OFF, "--yolo"]);
    for version in [None, Some(Version(1, 0, 90))] {
        let got = at(Cli::Copilot, "copilot --yolo", version);
        assert_eq!(got.argv, words("copilot --yolo"));
        assert!(got.note.unwrap().contains("only for 1.0.102 and later"));
    }
    let got = sandboxed(Cli::Copilot, "copilot --sandbox");
    assert_eq!(got.argv, words("copilot --sandbox"));
    assert!(got.note.unwrap().contains("kept"));
}

#[test]
fn clis_without_a_sandbox_of_their_own_get_nothing_but_a_note() {
    for cli in [Cli::Pi, Cli::Opencode] {
        let got = sandboxed(cli, "prog --x");
        assert_eq!(got.argv, words("prog --x"));
        assert!(got.env.is_empty());
        assert!(got.note.unwrap().contains("no sandbox of its own"), "{cli}");
    }
    assert_eq!(
        sandboxed(Cli::Custom, "bot"),
        OwnSandbox::unchanged(words("bot"))
    );
}

#[test]
fn an_agents_own_env_comes_before_the_inherited_one() {
    let spec = crate::spec::parse(
        "[[agent]]\nname = \"g\"\ncli = \"gemini\"\nenv = { GEMINI_SANDBOX = \"false\" }\n",
        std::path::Path::new("/fleet/phoenix.toml"),
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .unwrap();
    let agent = &spec.agents[0];
    let inherited = |_: &str| Some("docker".to_string());
    let got = for_agent(agent, true, words("gemini"), &inherited, None);
    assert!(got.env.is_empty(), "the agent's own `false` stands");
    assert!(
        got.note
            .unwrap()
            .contains("as the agent's environment says")
    );
    let got = for_agent(agent, false, words("gemini"), &inherited, None);
    assert_eq!(got, OwnSandbox::unchanged(words("gemini")));
}
