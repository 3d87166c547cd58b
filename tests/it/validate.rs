//! `phoenix validate` as a user meets it (friendly durations, cron nicknames, warnings,
//! did-you-mean) and the generated files: `phoenix completions`, `man`, `schema`.

use crate::support;

use support::Fleet;

#[test]
fn validate_accepts_friendly_durations_and_cron_nicknames() {
    let fleet = Fleet::new();
    fleet.toml(
        "[thresholds]\nsilence = \"10 minutes\"\nstale_after = \"2 weeks\"\nrunaway = \"1.5h\"\n\
         [schedules]\nwatchdog = \"@hourly\"\nbrief = \"@daily\"\n\
         [[agent]]\nname = \"a\"\ncommand = \"sleep 100\"\nresume_command = \"sleep {session_id}\"\n",
    );
    fleet
        .run(&["validate"])
        .status(0)
        .stdout_has("ok (1 agent)");
}

#[test]
fn validate_names_every_gap_with_a_hint() {
    let fleet = Fleet::new();
    fleet.toml(
        "[thresholds]\nsilence = \"10 minuts\"\n[schedules]\nbrief = \"@dialy\"\n\
         [defaults.restart]\nmax_crashes = \"5\"\n\
         [[agent]]\nname = \"a\"\ncli = \"cladue\"\n\
         [[agent]]\nname = \"b\"\ncommand = \"my-cli\"\nresume_command = \"my-cli --resume\"\n",
    );
    let run = fleet.run(&["validate", "--json"]);
    run.status(1);
    let errors = run.json()["errors"].as_array().unwrap().clone();
    let shown: Vec<String> = errors
        .iter()
        .map(|e| {
            format!(
                "{} | {}",
                e["message"].as_str().unwrap(),
                e["hint"].as_str().unwrap_or("")
            )
        })
        .collect();
    for needle in [
        "unknown unit `minuts` (did you mean `minutes`?)",
        "unknown cron nickname `@dialy` (did you mean `@daily`?)",
        "expected a whole number from 0 to 4294967295",
        "unknown cli `cladue` | did you mean `claude`?",
        "`resume_command` has no `{session_id}`",
    ] {
        assert!(
            shown.iter().any(|s| s.contains(needle)),
            "{needle} not in {shown:#?}"
        );
    }
    assert!(!shown.iter().any(|s| s.contains("u32")), "{shown:#?}");
}

#[test]
fn doubtful_settings_are_warned_about_but_not_fatal() {
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"10m\"\nbackoff_max = \"5m\"\n\
         [[agent]]\nname = \"a\"\ncommand = \"sleep 100\"\n",
    );
    // `toml` writes [fleet] itself: the interval goes into it.
    let config = std::fs::read_to_string(fleet.config()).unwrap();
    std::fs::write(
        fleet.config(),
        config.replace("[fleet]\n", "[fleet]\nreconcile_interval = \"0s\"\n"),
    )
    .unwrap();
    let run = fleet.run(&["validate"]);
    run.status(0)
        .stdout_has("ok (1 agent)")
        .stderr_has("warning: `reconcile_interval` = \"0s\" is below the minimum: phoenix uses 1s")
        .stderr_has("warning: `cooldown` (10m) is longer than `backoff_max` (5m)")
        .stderr_has("phoenix.toml:7:");
    let json = fleet.run(&["validate", "--json"]);
    json.status(0);
    assert_eq!(json.json()["warnings"].as_array().unwrap().len(), 2);
    // plan says it too, on stderr, and still plans.
    fleet
        .run(&["plan"])
        .status(2)
        .stderr_has("warning: `cooldown` (10m) is longer than `backoff_max` (5m)");
}

#[test]
fn completions_load_in_bash_and_the_man_page_names_the_commands() {
    let fleet = Fleet::new();
    let script = fleet.run(&["completions", "bash"]);
    script.status(0).stdout_has("_phoenix()");
    let path = fleet.path().join("phoenix.bash");
    std::fs::write(&path, script.stdout()).unwrap();
    let loaded = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p phoenix",
            path.display()
        ))
        .output()
        .unwrap();
    assert!(
        loaded.status.success() && String::from_utf8_lossy(&loaded.stdout).contains("phoenix"),
        "{loaded:?}"
    );
    fleet
        .run(&["completions", "zsh"])
        .status(0)
        .stdout_has("#compdef phoenix");
    let page = fleet.run(&["man"]);
    page.status(0)
        .stdout_has(".TH phoenix 1")
        .stdout_has("validate");
    // One page: it names no page of a command (`phoenix-init(1)`) that is not installed.
    assert!(!page.stdout().contains("(1)"), "{}", page.stdout());
    let dir = fleet.path().join("man").join("man1");
    fleet
        .run(&["man", "--dir", dir.to_str().unwrap()])
        .status(0)
        .stdout_has("man pages to");
    for name in ["phoenix.1", "phoenix-init.1", "phoenix-hosts-check.1"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(text.contains(".TH phoenix"), "{name}: {text}");
    }
    let root = std::fs::read_to_string(dir.join("phoenix.1")).unwrap();
    assert!(root.contains("phoenix\\-init(1)"), "{root}");
}

#[test]
fn the_schema_phoenix_prints_accepts_the_example_and_refuses_typos() {
    let fleet = Fleet::new();
    let run = fleet.run(&["schema"]);
    run.status(0);
    let schema = run.json();
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("phoenix.toml.example"),
    )
    .unwrap();
    let doc: serde_json::Value = toml::from_str(&example).unwrap();
    let errors = phoenix::spec::schema_check::schema_errors(&schema, &doc);
    assert!(errors.is_empty(), "{errors:#?}");
    let typo: serde_json::Value = toml::from_str("[fleet]\nnmae = \"x\"\n").unwrap();
    let errors = phoenix::spec::schema_check::schema_errors(&schema, &typo);
    assert!(
        errors.iter().any(|e| e.contains("`nmae` is not allowed")),
        "{errors:#?}"
    );
}

#[test]
fn a_misspelt_agent_name_gets_did_you_mean() {
    let fleet = Fleet::new();
    fleet.toml(
        "[[agent]]\nname = \"trades\"\ncommand = \"sleep 100\"\n[[agent]]\nname = \"research\"\ncommand = \"sleep 100\"\n",
    );
    for args in [
        &["status", "trdaes"][..],
        &["ledger", "trdaes"],
        &["loop", "list", "trdaes"],
    ] {
        fleet
            .run(args)
            .status(1)
            .stderr_has("no agent `trdaes`")
            .stderr_has("did you mean `trades`? declared: trades, research");
    }
    fleet
        .run(&["status", "zzz"])
        .status(1)
        .stderr_has("(declared: trades, research)");
}

/// Tab after a command that takes an agent offers the agents of the fleet file the command line
/// names (`-c`, else ./phoenix.toml), a host's agents too; after `--agent` as well; `hosts
/// install` and `move --to` offer the hosts; commands and options still complete as before.
#[test]
fn bash_completion_offers_the_fleets_agents_and_hosts() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[[host]]\nname = \"gpu-1\"\nssh = \"gpu-1\"\n\n{}\n{}\n[[agent]]\nname = \"far\"\ncommand = \"phoenix demo-agent\"\nhost = \"gpu-1\"\n",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("beta", "")
    ));
    let script = fleet.path().join("phoenix.bash");
    std::fs::write(&script, fleet.run(&["completions", "bash"]).stdout()).unwrap();
    let other = fleet.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("fleet.toml"),
        format!(
            "[fleet]\nname = \"other\"\n\n{}",
            Fleet::demo_agent("zulu", "")
        ),
    )
    .unwrap();
    // What bash offers for the words typed so far (the last one being completed).
    let offered = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = std::iter::once(support::PHOENIX)
            .chain(words.iter().copied())
            .map(|w| format!("'{w}'"))
            .collect();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; \
                 _phoenix_with_names \"${{COMP_WORDS[0]}}\" \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display(),
                quoted.join(" "),
                words.len()
            ))
            .current_dir(fleet.path())
            .env_remove("PHOENIX_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        offered_names(&out.stdout)
    };
    assert_eq!(offered(&["restart", ""]), ["alpha", "beta", "far"]);
    assert_eq!(offered(&["attach", "b"]), ["beta"]);
    assert_eq!(offered(&["loop", "list", ""]), ["alpha", "beta", "far"]);
    assert_eq!(offered(&["events", "--agent", "a"]), ["alpha"]);
    assert_eq!(offered(&["hosts", "install", ""]), ["gpu-1"]);
    assert_eq!(offered(&["move", "alpha", "--to", ""]), ["gpu-1"]);
    // The fleet file -c names, not ./phoenix.toml.
    assert_eq!(offered(&["-c", "other/fleet.toml", "stop", ""]), ["zulu"]);
    // After `--`, the command's own words: no agent names.
    assert!(!offered(&["exec", "alpha", "--", ""]).contains(&"alpha".to_string()));
    // Commands and options as before.
    assert!(offered(&["rest"]).contains(&"restart".to_string()));
    assert!(offered(&["restart", "--"]).contains(&"--fresh".to_string()));
    // A directory without a fleet file: nothing to offer, no error in the command line.
    let empty = fleet.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let run = std::process::Command::new(support::PHOENIX)
        .args(["__complete", "agents"])
        .current_dir(&empty)
        .env_remove("PHOENIX_CONFIG")
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    assert!(run.stdout.is_empty() && run.stderr.is_empty(), "{run:?}");
}

/// What a shell's completion printed, a candidate a line (fish adds `\tdescription`), sorted.
fn offered_names(stdout: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_string())
        .filter(|l| !l.is_empty())
        .collect();
    names.sort();
    names
}

/// A fleet with two local agents, one on a host, and another fleet file in `other/`.
fn fleet_for_completion() -> Fleet {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[[host]]\nname = \"gpu-1\"\nssh = \"gpu-1\"\n\n{}\n{}\n[[agent]]\nname = \"far\"\ncommand = \"phoenix demo-agent\"\nhost = \"gpu-1\"\n",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("beta", "")
    ));
    let other = fleet.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("fleet.toml"),
        format!(
            "[fleet]\nname = \"other\"\n\n{}",
            Fleet::demo_agent("zulu", "")
        ),
    )
    .unwrap();
    fleet
}

/// `PATH` with phoenix's directory first: the shells complete the command `phoenix`.
fn path_with_phoenix() -> std::ffi::OsString {
    let dir = std::path::Path::new(support::PHOENIX).parent().unwrap();
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap()
}

fn installed(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn fish_completion_offers_the_fleets_agents_and_hosts() {
    if !installed("fish") {
        eprintln!("skipped: fish is not installed (.ci/run installs it)");
        return;
    }
    let fleet = fleet_for_completion();
    let script = fleet.path().join("phoenix.fish");
    std::fs::write(&script, fleet.run(&["completions", "fish"]).stdout()).unwrap();
    // What fish offers for the command line typed so far (`complete -C`).
    let offered = |line: &str| -> Vec<String> {
        let out = std::process::Command::new("fish")
            .arg("--no-config")
            .arg("-c")
            .arg(format!(
                "source '{}'; complete -C '{line}'",
                script.display()
            ))
            .current_dir(fleet.path())
            .env("PATH", path_with_phoenix())
            .env_remove("PHOENIX_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        // `name<TAB>description`
        offered_names(&out.stdout)
    };
    assert_eq!(offered("phoenix restart "), ["alpha", "beta", "far"]);
    assert_eq!(offered("phoenix attach b"), ["beta"]);
    assert_eq!(offered("phoenix loop list "), ["alpha", "beta", "far"]);
    assert_eq!(offered("phoenix events --agent a"), ["alpha"]);
    assert_eq!(offered("phoenix hosts install "), ["gpu-1"]);
    assert!(offered("phoenix move alpha --to ").contains(&"gpu-1".to_string()));
    assert_eq!(offered("phoenix -c other/fleet.toml stop "), ["zulu"]);
    assert!(offered("phoenix rest").contains(&"restart".to_string()));
}

#[test]
fn zsh_completion_asks_the_fleet_for_its_names() {
    if !installed("zsh") {
        eprintln!("skipped: zsh is not installed (.ci/run installs it)");
        return;
    }
    let fleet = fleet_for_completion();
    let text = fleet.run(&["completions", "zsh"]).stdout();
    // Every argument that names an agent or a host asks for the names (none is left to
    // zsh's `_default`, which offers files).
    for line in text.lines() {
        let spec = line.trim_start_matches('\'').trim_start_matches('*');
        let names_one = [
            "::agent ",
            ":agent ",
            "::agents ",
            ":host ",
            "--agent=",
            "--to=",
            "--host=",
        ]
        .iter()
        .any(|p| spec.starts_with(p));
        if names_one {
            assert!(line.contains(":_phoenix_fleet_"), "{line}");
        }
    }
    let restart = text
        .lines()
        .skip_while(|l| l.trim() != "(restart)")
        .take_while(|l| l.trim() != ";;")
        .collect::<Vec<_>>()
        .join("\n");
    assert!(restart.contains("_phoenix_fleet_agents"), "{restart}");
    let script = fleet.path().join("_phoenix");
    std::fs::write(&script, &text).unwrap();
    // The function the specs call, with the command line zsh completes in BUFFER; compadd
    // (zsh's, which only works inside a completion) prints what it is given instead.
    let offered = |line: &str, function: &str| -> Vec<String> {
        let out = std::process::Command::new("zsh")
            .arg("-f")
            .arg("-c")
            .arg(format!(
                "autoload -U compinit && compinit -u -D; source '{}'; \
                 compadd() {{ print -l -- \"${{(@P)argv[-1]}}\" }}; \
                 BUFFER='{line}'; {function}",
                script.display()
            ))
            .current_dir(fleet.path())
            .env("PATH", path_with_phoenix())
            .env_remove("PHOENIX_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        offered_names(&out.stdout)
    };
    assert_eq!(
        offered("phoenix restart ", "_phoenix_fleet_agents"),
        ["alpha", "beta", "far"]
    );
    assert_eq!(
        offered("phoenix move alpha --to ", "_phoenix_fleet_hosts"),
        ["gpu-1"]
    );
    assert_eq!(
        offered("phoenix -c other/fleet.toml stop ", "_phoenix_fleet_agents"),
        ["zulu"]
    );
}
