//! Budgets that hold in C code too, through the real binary: Lua standard functions whose
//! work grows with an argument, template filters with size arguments, and the structured-file
//! guard on valid files nested deeper than its parsers go.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Fleet;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const QUICK: Duration = Duration::from_secs(30);

fn base(fleet: &Fleet) {
    std::fs::create_dir_all(fleet.path().join("wc")).unwrap();
    fleet.toml(
        "[[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\nenabled = false\nguard_structured_files = true\n",
    );
}

/// `string.rep("", math.maxinteger)` and `table.move({}, 1, 2^62, 1, {})` left two threads at
/// 100 % for the wrapper's life: the instruction hook never fires inside C.
#[test]
fn lua_c_loops_sized_by_an_argument_fail_within_the_budget_and_fall_back() {
    let fleet = Fleet::new();
    base(&fleet);
    let fixture = format!("{REPO}/policies/fixtures/on_exit_crash.json");
    for call in [
        "string.rep('', math.maxinteger)",
        "table.move({}, 1, 2^62, 1, {})",
        "table.concat({}, '', 1, 2^62)",
        "table.insert(setmetatable({}, {__len = function() return 2^62 end}), 1, 'x')",
    ] {
        std::fs::write(
            fleet.path().join("c_loop.lua"),
            format!("function on_exit(agent, exit)\n  {call}\n  return 'fresh'\nend\n"),
        )
        .unwrap();
        let started = Instant::now();
        let run = fleet.run_within(&["policy", "test", "c_loop.lua", &fixture, "--json"], QUICK);
        let took = started.elapsed();
        run.status(1);
        let out = run.json();
        assert_eq!(out["error"]["kind"], "budget", "{call}: {out}");
        // (`table.insert` runs as Lua: the budget stops it inside phoenix's own chunk.)
        if !call.starts_with("table.insert") {
            assert_eq!(out["error"]["line"], 2, "{call}: {out}");
        }
        // The built-in decision, as for any other policy error.
        assert_eq!(out["decision"]["action"], "resume", "{call}: {out}");
        assert!(took < Duration::from_secs(10), "{call}: {took:?}");
        assert!(
            out["elapsed_us"].as_u64().unwrap() < 2_000_000,
            "{call}: {}",
            out["elapsed_us"]
        );
    }
}

/// `tojson(indent=100000000)` wrote its indent on every line and level before the fuel saw
/// the output: the hook, `handoff save` and `validate` aborted (exit 134).
#[test]
fn a_template_with_a_huge_indent_is_an_error_not_an_abort() {
    let fleet = Fleet::new();
    base(&fleet);
    let templates = fleet.path().join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    let huge = "{{ [[[[[[[[1, 2]]]]]]]]|tojson(indent=100000000) }}\n";
    std::fs::write(templates.join("handoff.md.j2"), huge).unwrap();
    let run = fleet.run_within(&["validate"], QUICK);
    run.status(1);
    assert!(
        run.stderr().contains("templates/handoff.md.j2")
            && run.stderr().contains("an indent of 100000000"),
        "{}",
        run.stderr()
    );
    // `handoff save` renders the handoff: the built-in template is used, and it says why.
    let mut child = fleet
        .command(&["handoff", "save", "c", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Summary: the parser is done\n\nNext: the lexer\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let code = out.status.code();
    assert!(
        code.is_some() && code != Some(134),
        "handoff save ended with {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(code, Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // And the session-start hook, which renders the startup context, finishes with output.
    std::fs::write(templates.join("startup.md.j2"), huge).unwrap();
    let start = br#"{"hook_event_name":"SessionStart","session_id":"s1","source":"startup"}"#;
    fleet
        .run_within_input(
            &["hook", "session-start", "--agent", "c", "--cli", "claude"],
            start,
            QUICK,
        )
        .status(0);
}

/// A valid TOML or YAML file nested deeper than 200 levels was reverted as invalid.
#[test]
fn the_guard_keeps_valid_files_nested_deeper_than_its_parsers_go() {
    let fleet = Fleet::new();
    base(&fleet);
    let wc = fleet.path().join("wc");
    let depth = 250;
    let deep_toml = format!("a = {}1{}\n", "[".repeat(depth), "]".repeat(depth));
    let mut deep_yaml = String::new();
    for level in 0..depth {
        deep_yaml.push_str(&format!("{}k:\n", "  ".repeat(level)));
    }
    deep_yaml.push_str(&format!("{}v: 1\n", "  ".repeat(depth)));
    let deep_json = format!("{}1{}", "[".repeat(depth * 4), "]".repeat(depth * 4));
    for (name, before, after) in [
        ("conf.toml", "a = 1\n".to_string(), deep_toml),
        ("conf.yaml", "a: 1\n".to_string(), deep_yaml),
        ("conf.json", "{\"a\": 1}".to_string(), deep_json),
    ] {
        let file = wc.join(name);
        std::fs::write(&file, &before).unwrap();
        let edit = json!({"session_id": "s", "cwd": wc, "hook_event_name": "PreToolUse",
                          "tool_name": "Write", "tool_input": {"file_path": file, "content": after}});
        fleet
            .run_within_input(
                &["hook", "pre-tool", "--agent", "c", "--cli", "claude"],
                edit.to_string().as_bytes(),
                QUICK,
            )
            .status(0);
        std::fs::write(&file, &after).unwrap();
        let mut post = edit.clone();
        post["hook_event_name"] = json!("PostToolUse");
        let run = fleet.run_within_input(
            &["hook", "heartbeat", "--agent", "c", "--cli", "claude"],
            post.to_string().as_bytes(),
            QUICK,
        );
        run.status(0);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            after,
            "{name} was reverted: {}",
            run.stdout()
        );
        let told = run.stdout();
        assert!(!told.contains("restored"), "{name}: {told}");
        if name == "conf.toml" {
            let v: Value = serde_json::from_str(told.trim()).unwrap();
            assert!(told.contains("too deeply to check"), "{name}: {v}");
        }
        assert!(
            !fleet
                .ops("c")
                .iter()
                .any(|o| o["event"] == "guard_restored"),
            "{name}"
        );
    }
}
