//! Parsing and validating phoenix.toml, end to end through `parse`.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::diag::FileDiagnostics;

fn parse_str(src: &str) -> Result<Spec, FileDiagnostics> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("phoenix.toml");
    let result = parse(
        src,
        &file,
        LoadOptions {
            check_filesystem: false,
        },
    );
    drop(dir);
    result
}

fn errors(src: &str) -> Vec<crate::diag::Located> {
    parse_str(src).expect_err("should fail").located()
}

/// Each of `expected` is part of some error's message.
fn assert_reported(errs: &[crate::diag::Located], expected: &[&str]) {
    let messages: Vec<_> = errs.iter().map(|e| e.message.as_str()).collect();
    for part in expected {
        assert!(
            messages.iter().any(|m| m.contains(part)),
            "{part}: {messages:?}"
        );
    }
}

#[test]
fn minimal_spec_gets_defaults() {
    let spec = parse_str("[[agent]]\nname = \"a\"\ncommand = \"sleep 100\"\n").unwrap();
    assert_eq!(spec.fleet.name, "phoenix");
    assert!(
        spec.fleet.socket.starts_with("phoenix-phoenix-"),
        "{}",
        spec.fleet.socket
    );
    assert_eq!(spec.fleet.socket, format!("phoenix-{}", spec.fleet.id));
    assert!(spec.fleet.state_dir.ends_with(".phoenix"));
    let a = &spec.agents[0];
    assert_eq!(a.cli, Cli::Custom);
    assert_eq!(a.argv, ["sleep", "100"]);
    assert_eq!((a.session.as_str(), a.window.as_str()), ("phoenix", "a"));
    assert_eq!(spec.thresholds.silence, Duration::from_secs(600));
    assert_eq!(a.restart.max_crashes, 5);
}

#[test]
fn two_config_files_get_their_own_fleet_id_and_socket() {
    let src = "[fleet]\nname = \"same\"\n[[agent]]\nname = \"a\"\ncommand = \"sleep 100\"\n";
    let opts = || LoadOptions {
        check_filesystem: false,
    };
    let one = parse(src, Path::new("/srv/one/phoenix.toml"), opts()).unwrap();
    let two = parse(src, Path::new("/srv/two/phoenix.toml"), opts()).unwrap();
    let again = parse(src, Path::new("/srv/one/phoenix.toml"), opts()).unwrap();
    assert_ne!(one.fleet.id, two.fleet.id);
    assert_ne!(one.fleet.socket, two.fleet.socket);
    assert_eq!(one.fleet.id, again.fleet.id);
    assert!(one.fleet.id.starts_with("same-"));
    // An explicit socket is shared if two files say so; the identity still is not.
    let src = src.replace(
        "name = \"same\"",
        "name = \"same\"\ntmux_socket = \"shared\"",
    );
    let one = parse(&src, Path::new("/srv/one/phoenix.toml"), opts()).unwrap();
    let two = parse(&src, Path::new("/srv/two/phoenix.toml"), opts()).unwrap();
    assert_eq!(one.fleet.socket, two.fleet.socket);
    assert_ne!(one.fleet.id, two.fleet.id);
}

#[test]
fn a_config_reached_through_a_symlink_or_a_relative_path_is_the_same_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("project");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("phoenix.toml"), "").unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    let id = |p: &Path| fleet_id("same", p);
    let direct = id(&real.join("phoenix.toml"));
    assert_eq!(id(&dir.path().join("link/phoenix.toml")), direct);
    assert_eq!(id(&real.join("../project/./phoenix.toml")), direct);
    assert_ne!(id(&dir.path().join("other/phoenix.toml")), direct);
}

#[test]
fn defaults_are_inherited_and_overridden() {
    let spec = parse_str(
        r#"
[fleet]
name = "research"
[defaults]
cli = "claude"
env = { TZ = "UTC", A = "1" }
tmux = { session = "fleet" }
[defaults.restart]
max_crashes = 3
[[agent]]
name = "one"
env = { A = "2" }
[[agent]]
name = "two"
cli = "codex"
command = "codex --full-auto"
tmux = { window = "w2" }
[agent.restart]
cooldown = "100ms"
"#,
    )
    .unwrap();
    let one = spec.agent("one").unwrap();
    assert_eq!(one.cli, Cli::Claude);
    assert_eq!(one.command, "claude");
    assert_eq!(one.env["A"], "2");
    assert_eq!(one.env["TZ"], "UTC");
    assert_eq!(one.session, "fleet");
    assert_eq!(one.restart.max_crashes, 3);
    let two = spec.agent("two").unwrap();
    assert_eq!(two.window, "w2");
    assert_eq!(two.restart.cooldown, Duration::from_millis(100));
    assert_eq!(two.restart.max_crashes, 3);
}

#[test]
fn restart_when_is_inherited_overridden_and_checked() {
    let spec = parse_str(
        r#"
[fleet]
name = "f"
[defaults.restart]
when = "always"
[[agent]]
name = "one"
command = "x"
[[agent]]
name = "two"
command = "x"
restart = { when = "never" }
"#,
    )
    .unwrap();
    assert_eq!(spec.agent("one").unwrap().restart.when, RestartWhen::Always);
    assert_eq!(spec.agent("two").unwrap().restart.when, RestartWhen::Never);
    let plain =
        parse_str("[fleet]\nname = \"f\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    assert_eq!(
        plain.agent("a").unwrap().restart.when,
        RestartWhen::OnFailure
    );
    let errs = errors(
        "[fleet]\nname = \"f\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\nrestart = { when = \"alway\" }\n",
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].message.contains("`restart.when` cannot be `alway`"),
        "{errs:?}"
    );
    assert_eq!(errs[0].line, 6, "{errs:?}");
    assert!(
        errs[0]
            .hint
            .as_deref()
            .unwrap_or("")
            .contains("did you mean `always`?"),
        "{errs:?}"
    );
}

#[test]
fn unknown_keys_are_all_reported_with_suggestions() {
    let errs = errors(
        "[thresholds]\nsilense = \"10m\"\n[fleet]\nnmae = \"x\"\n[[agent]]\nname = \"a\"\ncomand = \"x\"\n",
    );
    // The misspelt `command` also leaves the agent without one: reported too.
    assert_eq!(errs.len(), 4, "{errs:?}");
    assert_eq!((errs[0].line, errs[0].column), (2, 1));
    assert!(errs[0].message.contains("unknown key `silense`"));
    assert_eq!(errs[0].hint.as_deref(), Some("did you mean `silence`?"));
    assert!(
        errs.iter()
            .any(|e| e.hint.as_deref() == Some("did you mean `command`?"))
    );
}

#[test]
fn semantic_errors_are_all_reported() {
    let errs = errors(
        r#"
[thresholds]
silence = "10x"
[schedules]
watchdog = "* * * *"
[[agent]]
name = "bad name; rm -rf /"
command = "x"
[[agent]]
name = "ok"
cli = "claud"
[[agent]]
name = "ok2"
command = "x"
[[agent]]
name = "ok2"
command = "y"
"#,
    );
    assert_reported(
        &errs,
        &[
            "unknown unit `x`",
            "has 4 fields, expected 5",
            "`bad name; rm -rf /` is not a valid name",
            "unknown cli `claud`",
            "duplicate agent name `ok2`",
        ],
    );
    let dup = errs
        .iter()
        .find(|e| e.message.contains("duplicate"))
        .unwrap();
    assert_eq!(dup.line, 16);
    assert!(dup.hint.as_deref().unwrap().contains("line 13"));
}

#[test]
fn a_duplicate_name_is_reported_with_the_other_errors_of_the_file() {
    let errs = errors(
        r#"
[[agent]]
name = "a"
cli = "claud"

[[agent]]
name = "a"
cli = "bogus"
colour = "red"
"#,
    );
    let shown: Vec<_> = errs
        .iter()
        .map(|e| (e.line, e.message.as_str(), e.hint.as_deref().unwrap_or("")))
        .collect();
    let has = |line: usize, message: &str, hint: &str| {
        assert!(
            shown
                .iter()
                .any(|(l, m, h)| *l == line && m.contains(message) && h.contains(hint)),
            "{line} {message}: {shown:#?}"
        );
    };
    has(4, "unknown cli `claud`", "did you mean `claude`?");
    has(7, "duplicate agent name `a`", "first defined on line 3");
    has(8, "unknown cli `bogus`", "one of: claude");
    has(9, "unknown key `colour` in [[agent]]", "known keys here");
    // An unknown cli is not echoed as a missing command.
    assert_eq!(shown.len(), 4, "{shown:#?}");
}

#[test]
fn syntax_errors_have_a_location() {
    let errs = errors("[fleet]\nname = \n");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].line, 2);
}

#[test]
fn type_errors_have_a_location() {
    let errs = errors("[thresholds]\nerror_cascade = \"five\"\n");
    assert_eq!(errs[0].line, 2, "{errs:?}");
}

#[test]
fn bad_cron_values_are_rejected() {
    assert!(Schedule::parse("*/5 * * * *").is_ok());
    assert!(Schedule::parse("0 6 * * 1-5").is_ok());
    assert!(Schedule::parse("61 * * * *").is_err());
    assert!(Schedule::parse("0 */5 * * * *").is_err());
}

#[test]
fn two_agents_cannot_share_a_window() {
    let errs = errors(
        "[[agent]]\nname = \"a\"\ncommand = \"x\"\ntmux = { window = \"w\" }\n[[agent]]\nname = \"b\"\ncommand = \"x\"\ntmux = { window = \"w\" }\n",
    );
    assert!(
        errs[0].message.contains("already used by agent `a`"),
        "{errs:?}"
    );
}

#[test]
fn missing_workdir_is_an_error_when_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("phoenix.toml");
    let src = "[[agent]]\nname = \"a\"\ncommand = \"x\"\nworkdir = \"nope\"\n";
    let errs = parse(src, &file, LoadOptions::default())
        .unwrap_err()
        .located();
    assert!(errs[0].message.contains("does not exist"));
    assert_eq!(errs[0].line, 4);
    assert!(
        parse(
            src,
            &file,
            LoadOptions {
                check_filesystem: false
            }
        )
        .is_ok()
    );
}

#[test]
fn fingerprint_changes_with_launch_fields_only() {
    let spec = parse_str("[[agent]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    let a = spec.agents[0].launch();
    let mut b = a.clone();
    assert_eq!(a.fingerprint(), b.fingerprint());
    b.command = "y".into();
    assert_ne!(a.fingerprint(), b.fingerprint());
    let diff = a.diff(&b);
    assert_eq!(diff.len(), 1);
    assert_eq!(diff[0].field, "command");
}

#[test]
fn unknown_keys_and_bad_values_are_reported_together() {
    let errs = errors("[thresholds]\nsilense = \"10m\"\nrunaway = \"2x\"\n");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].message.contains("unknown key `silense`"));
    assert!(errs[1].message.contains("unknown unit `x`"));
}

#[test]
fn hooks_load_a_spec_whose_schedule_is_broken() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("phoenix.toml");
    std::fs::write(
        &path,
        "[schedules]\nwatchdog = \"every minute\"\n\n[[agent]]\nname = \"a\"\ncommand = \"x\"\nworkdir = \"/nonexistent\"\n",
    )
    .unwrap();
    assert!(load(&path).is_err());
    let spec = load_for_hook(&path).unwrap();
    assert_eq!(spec.agents[0].name, "a");
    assert!(spec.schedules.watchdog.is_none());
}

#[test]
fn notify_watchdog_and_new_thresholds() {
    let spec = parse_str(
        r#"
[thresholds]
repeat = 3
max_tokens = 1000
events_retention = "7d"
[notify]
github = { repo = "acme/fleet", labels = ["watchdog"] }
webhook = { url_env = "HOOK_URL", format = "telegram", chat_id = "-100", timeout = "2s", retries = 2 }
command = ["notify-send", "phoenix"]
issue_cooldown = "30m"
[watchdog]
max_revivals = 2
screen_patterns = { claude = ["Please run /login"] }
[[agent]]
name = "a"
command = "x"
"#,
    )
    .unwrap();
    assert_eq!(spec.thresholds.repeat, 3);
    assert_eq!(spec.thresholds.max_tokens, Some(1000));
    assert_eq!(
        spec.thresholds.events_retention,
        Duration::from_secs(7 * 86_400)
    );
    let github = spec.notify.github.as_ref().unwrap();
    assert_eq!(
        (github.repo.as_str(), github.labels.len()),
        ("acme/fleet", 1)
    );
    let hook = spec.notify.webhook.as_ref().unwrap();
    assert_eq!(hook.format, WebhookFormat::Telegram);
    assert_eq!((hook.timeout, hook.retries), (Duration::from_secs(2), 2));
    assert_eq!(spec.notify.issue_cooldown, Duration::from_secs(1800));
    assert_eq!(spec.watchdog.max_revivals, 2);
    assert_eq!(
        spec.watchdog.screen_patterns["claude"],
        ["Please run /login"]
    );

    let defaults = parse_str("[[agent]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    assert!(defaults.notify.is_empty());
    assert_eq!(defaults.thresholds.repeat, 5);
    assert_eq!(defaults.watchdog.max_revivals, 1);

    let errs = errors(
        "[notify]\ngithub = { repo = \"nope\" }\nwebhook = { url_env = \"URL\", format = \"teams\" }\n\
         [watchdog]\nscreen_patterns = { claud = [\"x\"] }\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n",
    );
    assert_reported(
        &errs,
        &[
            "owner/name",
            "unknown format `teams`",
            "unknown CLI `claud`",
        ],
    );
}

#[test]
fn every_type_error_is_reported_with_the_other_problems() {
    let errs = errors(
        "[thresholds]\nerror_cascade = \"5\"\nsilence = \"10 q\"\nrepeat = \"x\"\n\
         [[agent]]\nname = \"a b\"\ncommand = \"x\"\nenabled = \"yes\"\n",
    );
    let lines: Vec<(usize, &str)> = errs.iter().map(|e| (e.line, e.message.as_str())).collect();
    assert_eq!(errs.len(), 5, "{lines:?}");
    for line in [2, 3, 4, 6, 8] {
        assert!(
            errs.iter().any(|e| e.line == line),
            "line {line}: {lines:?}"
        );
    }
}

#[test]
fn a_resume_command_without_the_session_id_is_refused() {
    let errs = errors(
        "[[agent]]\nname = \"a\"\ncommand = \"my-cli\"\nresume_command = \"my-cli --resume\"\n",
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(
        errs[0].message,
        "agent `a`: `resume_command` has no `{session_id}`"
    );
    assert_eq!(errs[0].line, 4);
    assert!(
        errs[0]
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("\"my-cli --resume {session_id}\"")),
        "{errs:?}"
    );
    // In [defaults] too, and inside a longer argument.
    assert!(
        parse_str(
            "[defaults]\nresume_command = \"x --last\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n"
        )
        .is_err()
    );
    let spec = parse_str(
        "[[agent]]\nname = \"a\"\ncommand = \"x\"\nresume_command = \"x --session={session_id}\"\n",
    )
    .unwrap();
    assert_eq!(
        spec.agents[0].resume_argv.as_deref(),
        Some(&["x".to_string(), "--session={session_id}".to_string()][..])
    );
}

#[test]
fn friendly_durations_are_accepted_where_durations_are() {
    let spec = parse_str(
        "[thresholds]\nsilence = \"10 minutes\"\nstale_after = \"2 weeks\"\nrunaway = \"1.5h\"\n[defaults.restart]\ncooldown = \"30s\"\ncrash_window = \"1h30m\"\n",
    )
    .unwrap();
    assert_eq!(spec.thresholds.silence, Duration::from_secs(600));
    assert_eq!(
        spec.thresholds.stale_after,
        Duration::from_secs(14 * 86_400)
    );
    assert_eq!(spec.thresholds.runaway, Duration::from_secs(5400));
    let errs = errors("[thresholds]\nsilence = \"10 minuts\"\nrunaway = \"90\"\n");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].message.contains("did you mean `minutes`?"),
        "{errs:?}"
    );
    assert!(errs[1].message.contains("missing unit"), "{errs:?}");
    assert!(errs[1].hint.as_deref().unwrap().contains("\"10 minutes\""));
}

#[test]
fn cron_nicknames_are_accepted() {
    for nick in [
        "@hourly",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
        "@annually",
        "@DAILY",
    ] {
        let spec = parse_str(&format!("[schedules]\nwatchdog = \"{nick}\"\n"))
            .unwrap_or_else(|e| panic!("{nick}: {e}"));
        assert!(spec.schedules.watchdog.is_some(), "{nick}");
    }
    let errs = errors("[schedules]\nbrief = \"@dialy\"\nwatchdog = \"@reboot\"\n");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0]
            .message
            .contains("unknown cron nickname `@dialy` (did you mean `@daily`?)"),
        "{errs:?}"
    );
    assert!(
        errs[1].message.contains("unknown cron nickname `@reboot`"),
        "{errs:?}"
    );
}

#[test]
fn count_errors_say_a_whole_number_not_a_rust_type() {
    for (value, shown) in [
        ("\"5\"", "string \"5\""),
        ("-1", "integer `-1`"),
        ("2.5", "floating point `2.5`"),
        ("4294967296", "integer `4294967296`"),
    ] {
        let errs = errors(&format!("[defaults.restart]\nmax_crashes = {value}\n"));
        assert_eq!(errs.len(), 1, "{value}: {errs:?}");
        let m = &errs[0].message;
        assert!(m.contains(shown), "{value}: {m}");
        assert!(
            m.contains("expected a whole number from 0 to 4294967295"),
            "{value}: {m}"
        );
        assert!(!m.contains("u32"), "{value}: {m}");
    }
    let errs = errors("[thresholds]\nmax_tokens = -5\n");
    assert!(errs[0].message.contains("a whole number"), "{errs:?}");
    assert!(!errs[0].message.contains("u64"), "{errs:?}");
}

#[test]
fn unknown_values_get_did_you_mean() {
    for (src, hint) in [
        (
            "[[agent]]\nname = \"a\"\ncli = \"Claude\"\n",
            "did you mean `claude`?",
        ),
        (
            "[[agent]]\nname = \"a\"\ncli = \"gemeni\"\n",
            "did you mean `gemini`?",
        ),
        (
            "[[agent]]\nname = \"a\"\ncli = \"vim\"\n",
            "one of: claude, codex, gemini, pi, opencode, copilot, custom",
        ),
        (
            "[notify]\nwebhook = { url_env = \"U\", format = \"slak\" }\n",
            "did you mean `slack`?",
        ),
        (
            "[watchdog]\nscreen_patterns = { codx = [\"x\"] }\n",
            "did you mean `codex`?",
        ),
        (
            "[[agent]]\nname = \"a\"\ncommand = \"x\"\nnotify = [\"webhok\"]\n",
            "did you mean `webhook`?",
        ),
    ] {
        let errs = errors(src);
        assert!(
            errs.iter()
                .any(|e| e.hint.as_deref().is_some_and(|h| h.contains(hint))),
            "{src}: {errs:?}"
        );
    }
}

#[test]
fn doubtful_values_are_warnings_not_errors() {
    let spec = parse_str(
        "[fleet]\nreconcile_interval = \"0s\"\n[defaults.restart]\ncooldown = \"10m\"\nbackoff_max = \"5m\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n[[agent]]\nname = \"b\"\ncommand = \"x\"\n[agent.restart]\nbackoff_max = \"1s\"\n",
    )
    .expect("warnings do not fail the file");
    // Raised to the floor instead of spinning.
    assert_eq!(spec.fleet.reconcile_interval, Duration::from_secs(1));
    let w: Vec<_> = spec
        .warnings
        .iter()
        .map(|w| (w.line, w.message.as_str()))
        .collect();
    assert_eq!(
        w,
        [
            (
                2,
                "`reconcile_interval` = \"0s\" is below the minimum: phoenix uses 1s"
            ),
            (
                4,
                "`cooldown` (10m) is longer than `backoff_max` (5m): every restart waits 5m"
            ),
            // Agent `a` inherits [defaults.restart] and is not warned about twice; `b`
            // writes its own backoff_max.
            (
                13,
                "`cooldown` (10m) is longer than `backoff_max` (1s): every restart waits 1s"
            ),
        ]
    );
    assert!(spec.warnings.iter().all(|w| w.hint.is_some()));
    let clean = parse_str("[[agent]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    assert!(clean.warnings.is_empty());
}

/// Every duration key that switches a protection off (or makes phoenix spin) at zero: the
/// section, the key, and the floor the error names.
const FLOORED: &[(&str, &str, &str)] = &[
    ("[defaults.restart]", "cooldown", "100ms"),
    ("[defaults.restart]", "backoff_max", "100ms"),
    ("[defaults.restart]", "crash_window", "1m"),
    ("[defaults.restart]", "life_deadline", "1s"),
    ("[thresholds]", "silence", "1s"),
    ("[thresholds]", "runaway", "1s"),
    ("[thresholds]", "stale_after", "1m"),
    ("[thresholds]", "resolved_retention", "1m"),
    ("[thresholds]", "events_retention", "1h"),
    ("[clinic]", "diagnose_timeout", "1s"),
    ("[notify]", "issue_cooldown", "1s"),
    ("[brief]", "timeout", "1s"),
];

#[test]
fn zero_durations_are_refused_with_the_minimum_and_where() {
    for (section, key, min) in FLOORED {
        for zero in ["0s", "0ms", "0m"] {
            let src = format!("# a comment\n{section}\n{key} = \"{zero}\"\n");
            let errs = errors(&src);
            assert_eq!(errs.len(), 1, "{key} = {zero}: {errs:?}");
            let e = &errs[0];
            assert_eq!((e.line, e.column), (3, key.len() + 4), "{key}: {e:?}");
            assert_eq!(
                e.message,
                format!("`{key}` = \"{zero}\" is too short: the minimum is {min}")
            );
            assert!(
                e.hint
                    .as_deref()
                    .is_some_and(|h| h.starts_with(&format!("use at least \"{min}\""))),
                "{key}: {e:?}"
            );
        }
        // The floor itself is fine; just below it is not.
        parse_str(&format!("{section}\n{key} = \"{min}\"\n"))
            .unwrap_or_else(|e| panic!("{key} = {min} is the minimum: {e}"));
        let below = duration::parse(min).unwrap() - Duration::from_millis(1);
        let below = format!("{}ms", below.as_millis());
        assert!(
            parse_str(&format!("{section}\n{key} = \"{below}\"\n")).is_err(),
            "{key} = {below}"
        );
    }
}

#[test]
fn an_agents_own_restart_table_has_the_same_floors() {
    let errs = errors(
        "[[agent]]\nname = \"a\"\ncommand = \"x\"\n[agent.restart]\ncrash_window = \"0s\"\ncooldown = \"0s\"\n",
    );
    let keys: Vec<_> = errs.iter().map(|e| (e.line, e.message.as_str())).collect();
    assert_eq!(
        keys,
        [
            (5, "`crash_window` = \"0s\" is too short: the minimum is 1m"),
            (6, "`cooldown` = \"0s\" is too short: the minimum is 100ms"),
        ]
    );
}

#[test]
fn counts_that_switch_a_protection_off_are_refused() {
    for (src, message) in [
        (
            "[defaults.restart]\nmax_crashes = 0\n",
            "`max_crashes` must be at least 1",
        ),
        (
            "[thresholds]\nerror_cascade = 0\n",
            "`error_cascade` must be at least 1",
        ),
        (
            "[thresholds]\nmax_tokens = 0\n",
            "`max_tokens` must be at least 1",
        ),
        ("[thresholds]\nrepeat = 1\n", "`repeat` must be at least 2"),
        (
            "[notify]\nwebhook = { url_env = \"U\", retries = 4000000000 }\n",
            "`retries` must be at most 10",
        ),
    ] {
        let errs = errors(src);
        assert_eq!(errs.len(), 1, "{src}: {errs:?}");
        assert_eq!(errs[0].message, message, "{src}");
        assert_eq!(errs[0].line, 2, "{src}");
        assert!(errs[0].hint.is_some(), "{src}");
    }
    // Zero revivals or recoveries is stricter, not off: allowed.
    let spec = parse_str("[watchdog]\nmax_revivals = 0\n[clinic]\nmax_recoveries = 0\n").unwrap();
    assert_eq!(spec.watchdog.max_revivals, 0);
    assert_eq!(spec.clinic.max_recoveries, 0);
}

#[test]
fn paths_are_shown_without_dot_and_dot_dot_steps() {
    use super::tidy;
    let cases = [
        ("/srv/./work", "/srv/work"),
        ("/srv/a/../work/.", "/srv/work"),
        ("/../srv", "/srv"),
        ("a/../../b", "../b"),
        ("./a/..", "."),
    ];
    for (given, shown) in cases {
        assert_eq!(tidy(Path::new(given)), Path::new(shown), "{given}");
    }
    // `link/..` is the link target's parent, not the link's: that `..` stays.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("deep/target");
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("link")).unwrap();
    let through_link = dir.path().join("link/../x");
    assert_eq!(tidy(&through_link), through_link);

    let s = parse_str(
        "[fleet]\nstate_dir = \"./state/../st\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\nworkdir = \"./w/./v/..\"\n",
    )
    .unwrap();
    assert_eq!(s.fleet.state_dir, s.dir.join("st"));
    assert_eq!(s.agents[0].workdir, s.dir.join("w"));
}

#[test]
fn budgets_inherit_key_by_key_and_prices_default_their_cache_rates() {
    let spec = parse_str(
        "[defaults]\nbudget = { tokens_per_day = 1000, usd_per_day = 2.5 }\n\
         [prices.\"my-model\"]\ninput = 1\noutput = 4.0\ncache_read = 0.1\n\
         [[agent]]\nname = \"a\"\ncommand = \"x\"\nbudget = { usd_per_day = 1 }\n\
         [[agent]]\nname = \"b\"\ncommand = \"x\"\n",
    )
    .unwrap();
    let budget = |name: &str| spec.agent(name).unwrap().budget;
    assert_eq!(
        budget("a"),
        Some(Budget {
            tokens_per_day: Some(1000),
            usd_per_day: Some(1.0)
        })
    );
    assert_eq!(budget("b").unwrap().usd_per_day, Some(2.5));
    let p = spec.prices["my-model"];
    assert_eq!(
        (p.input, p.output, p.cache_write, p.cache_read),
        (1.0, 4.0, 1.0, 0.1)
    );
    let none = parse_str("[[agent]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    assert_eq!(none.agents[0].budget, None);
    assert!(none.prices.is_empty());
}

#[test]
fn bad_budgets_and_prices_are_reported_where_written() {
    let errs = errors(
        "[prices.\"m\"]\ninput = -1.0\n[prices.\"n\"]\ninput = 1\noutput = 1\ncahce_read = 1\n\
         [[agent]]\nname = \"a\"\ncommand = \"x\"\nbudget = { tokens_per_day = 0, usd_per_day = 0, tokens = 5 }\n",
    );
    assert_reported(
        &errs,
        &[
            "`prices.\"m\".input` must be a number, 0 or more",
            "[prices.\"m\"] has no `output`",
            "unknown key `cahce_read` in a [prices] table",
            "`budget.tokens_per_day` must be at least 1",
            "`budget.usd_per_day` must be above 0",
            "unknown key `tokens` in the `budget` table",
        ],
    );
    assert!(errs.iter().all(|e| e.line > 0), "{errs:?}");
}

#[test]
fn a_workspace_gives_the_agent_its_worktree_as_workdir() {
    let s = parse_str(
        "[defaults]\nworkspace = { repo = \"/src/my app\", base = \"main\" }\n\
         [[agent]]\nname = \"auth\"\ncommand = \"x\"\n\
         [[agent]]\nname = \"ui\"\ncommand = \"x\"\nworkspace = { repo = \"/src/app\", branch = \"wip/{name}-1\", worktrees = \"~/wt\" }\n\
         [[agent]]\nname = \"plain\"\ncommand = \"x\"\nworkdir = \"/srv\"\n",
    )
    .unwrap();
    let auth = s.agent("auth").unwrap();
    let ws = auth.workspace.as_ref().unwrap();
    assert_eq!(ws.repo, Path::new("/src/my app"));
    assert_eq!(ws.branch, "agent/auth");
    assert_eq!(ws.base.as_deref(), Some("main"));
    assert_eq!(ws.path, Path::new("/src/my app/.worktrees/auth"));
    assert_eq!(auth.workdir, ws.path);
    let ui = s.agent("ui").unwrap().workspace.clone().unwrap();
    assert_eq!(ui.branch, "wip/ui-1");
    assert_eq!(ui.base, None);
    let home = std::env::var("HOME").unwrap();
    assert_eq!(ui.path, Path::new(&home).join("wt/ui"));
    // Its own `workdir` overrides the `[defaults]` workspace.
    let plain = s.agent("plain").unwrap();
    assert!(plain.workspace.is_none());
    assert_eq!(plain.workdir, Path::new("/srv"));
}

#[test]
fn workspace_mistakes_are_reported_where_written() {
    let errs = errors(
        "[[agent]]\nname = \"a\"\ncommand = \"x\"\nworkdir = \"/srv\"\nworkspace = { repo = \"/r\" }\n\
         [[agent]]\nname = \"b\"\ncommand = \"x\"\nworkspace = { repo = \"/r\", branch = \"x; rm -rf ~\" }\n\
         [[agent]]\nname = \"c\"\ncommand = \"x\"\nworkspace = { repo = \"/r\", branch = \"--upload-pack=evil\" }\n\
         [[agent]]\nname = \"d\"\ncommand = \"x\"\nworkspace = { branch = \"x\" }\n\
         [[agent]]\nname = \"e\"\ncommand = \"x\"\nworkspace = { repo = \"/r\", branch = \"same\" }\n\
         [[agent]]\nname = \"f\"\ncommand = \"x\"\nworkspace = { repo = \"/r\", branch = \"same\" }\n\
         [[agent]]\nname = \"g\"\ncommand = \"x\"\nworkspace = { repo = \"/r\", base = \"-b\", brnch = \"x\" }\n",
    );
    assert_reported(
        &errs,
        &[
            "agent `a`: `workspace` and `workdir` exclude each other",
            "agent `b`: workspace branch `x; rm -rf ~` contains ' '",
            "agent `c`: workspace branch `--upload-pack=evil` starts with `-`",
            "agent `d`: `workspace` has no `repo`",
            "agent `f`: branch `same` of `/r` is already agent `e`'s",
            "agent `g`: workspace base `-b` starts with `-`",
            "unknown key `brnch` in the `workspace` table",
        ],
    );
    let line_of = |part: &str| errs.iter().find(|e| e.message.contains(part)).unwrap().line;
    assert_eq!(line_of("agent `b`"), 9);
    assert_eq!(line_of("agent `c`"), 13);
}

#[test]
fn a_workspace_repo_must_be_a_git_repository_when_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plain")).unwrap();
    let src = "[[agent]]\nname = \"a\"\ncommand = \"x\"\nworkspace = { repo = \"plain\" }\n\
               [[agent]]\nname = \"b\"\ncommand = \"x\"\nworkspace = { repo = \"gone\" }\n";
    let errs = parse(
        src,
        &dir.path().join("phoenix.toml"),
        LoadOptions::default(),
    )
    .unwrap_err()
    .located();
    assert_reported(
        &errs,
        &[
            "is not a git repository",
            "workspace repo `",
            "does not exist",
        ],
    );
}

#[test]
fn ntfy_and_waiting_are_read_and_their_mistakes_located() {
    let spec = parse_str(
        "[thresholds]\nwaiting = \"45m\"\n[notify]\ninput_cooldown = \"0s\"\n\
         ntfy = { url = \"https://ntfy.sh/fleet-alerts\", priority = \"urgent\" }\n\
         [[agent]]\nname = \"a\"\ncommand = \"x\"\nnotify = [\"ntfy\"]\n",
    )
    .unwrap();
    assert_eq!(spec.thresholds.waiting, Duration::from_secs(45 * 60));
    assert_eq!(spec.notify.input_cooldown, Duration::ZERO);
    let ntfy = spec.notify.ntfy.as_ref().unwrap();
    assert_eq!(ntfy.url.as_deref(), Some("https://ntfy.sh/fleet-alerts"));
    assert_eq!((ntfy.priority, ntfy.click.as_deref()), (5, None));
    assert_eq!(Thresholds::default().waiting, Duration::from_secs(30 * 60));

    let errs = errors(
        "[thresholds]\nwaiting = \"0s\"\n[notify]\n\
         ntfy = { url = \"ntfy.sh/x\", priority = \"loud\" }\n\
         [notify.webhook]\nurl_env = \"U\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n",
    );
    assert_reported(
        &errs,
        &[
            "`waiting` = \"0s\" is too short",
            "[notify.ntfy]: `url` = \"ntfy.sh/x\" is not an http(s) URL",
        ],
    );
    let url = errs.iter().find(|e| e.message.contains("ntfy")).unwrap();
    assert_eq!(url.line, 4, "{url:?}");
    let errs = errors(
        "[notify]\nntfy = { priority = \"loud\" }\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n",
    );
    assert_reported(&errs, &["[notify.ntfy]: no topic"]);
    let errs = errors(
        "[notify]\nntfy = { url = \"https://ntfy.sh/a\", priority = \"loud\", clik = \"x\" }\n\
         [[agent]]\nname = \"a\"\ncommand = \"x\"\n",
    );
    assert_reported(&errs, &["unknown key `clik` in [notify.ntfy]"]);
}
