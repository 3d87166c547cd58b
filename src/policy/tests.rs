//! Policy layer tests: the sandbox refuses every escape, broken policies fall back, the Lua
//! default agrees with the built-in one.

use super::*;
use crate::spec::RestartWhen;

/// A policies/ dir holding `files` (paths relative to it), and the policies loaded from it.
fn policies_dir(files: &[(&str, &str)]) -> (tempfile::TempDir, Policies) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("policies");
    for (name, source) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, source).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    let policies = Policies::new(Some(&dir));
    (tmp, policies)
}

/// An agent whose `[[agent]] policy` is `policies/<file>`.
fn agent_with(file: &str) -> AgentInfo {
    AgentInfo {
        policy: Some(format!("policies/{file}")),
        ..AgentInfo::default()
    }
}

/// A policies/ dir holding one `custom.lua`, and the policies loaded from it.
fn with_policy(source: &str) -> (tempfile::TempDir, Policies, AgentInfo) {
    let (tmp, policies) = policies_dir(&[("custom.lua", source)]);
    let agent = AgentInfo {
        name: "a".into(),
        ..agent_with("custom.lua")
    };
    (tmp, policies, agent)
}

fn crash() -> ExitInfo {
    ExitInfo {
        code: Some(1),
        crashes_in_window: 1,
        ..ExitInfo::default()
    }
}

/// Run `body` as the body of `on_exit` and return the error it produced.
fn escape(body: &str) -> Error {
    let (_tmp, policies, agent) = with_policy(&format!(
        "function on_exit(agent, exit)\n{body}\nreturn {{ action = \"resume\" }}\nend\n"
    ));
    let d = policies.on_exit(&agent, &crash());
    assert_eq!(d.by, BUILTIN, "the policy's answer must not be used");
    assert_eq!(d.value, builtin::on_exit(&agent, &crash()));
    d.error.expect("an error")
}

#[test]
fn io_is_not_there() {
    let e = escape("local f = io.open('/etc/passwd')");
    assert_eq!(e.failure().kind(), "runtime");
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(e.to_string().contains("policies/custom.lua:2"), "{e}");
    assert!(e.to_string().contains("io"), "{e}");
}

#[test]
fn os_execute_exit_getenv_file_loaders_and_package_are_not_there() {
    for call in [
        "os.execute('true')",
        "os.exit(1)",
        "os.getenv('HOME')",
        "os.remove('x')",
        "dofile('/etc/passwd')",
        "loadfile('/etc/passwd')",
        "package.loadlib('x', 'y')",
        "debug.getinfo(1)",
        "collectgarbage('stop')",
    ] {
        let e = escape(call);
        assert_eq!(e.failure().kind(), "runtime", "{call}: {e}");
    }
}

#[test]
fn bytecode_cannot_be_loaded_or_made() {
    // A Lua 5.4 binary chunk header: `load` in text mode refuses it.
    let e = escape("assert(load('\\27LuaT\\0\\25\\147\\r\\n\\26\\n'))");
    assert!(e.to_string().contains("binary chunk"), "{e}");
    let e = escape("local b = string.dump(function() end)");
    assert_eq!(e.failure().kind(), "runtime", "{e}");
    // Text still loads, with mode and env arguments kept.
    let (_tmp, policies, agent) = with_policy(
        "function on_exit() local f = load('return ...', 'x', 'b', {}) return { action = f('fresh') } end",
    );
    let d = policies.on_exit(&agent, &crash());
    assert_eq!(d.value.action, Start::Fresh, "{:?}", d.error);
}

#[test]
fn a_memory_bomb_is_stopped() {
    let e = escape("local s = string.rep('x', 1024 * 1024 * 1024)");
    assert!(
        matches!(e.failure(), Failure::Memory { .. })
            || e.to_string().contains("too large")
            || e.to_string().contains("memory"),
        "{e}"
    );
    let e = escape("local t = {} for i = 1, 1e9 do t[i] = string.rep('y', 64) .. i end");
    assert!(matches!(
        e.failure(),
        Failure::Memory { .. } | Failure::Budget(_)
    ));
}

#[test]
fn an_infinite_loop_is_stopped_within_milliseconds() {
    let started = std::time::Instant::now();
    let e = escape("while true do end");
    let took = started.elapsed();
    assert_eq!(e.failure().kind(), "budget", "{e}");
    assert_eq!(e.line(), Some(2), "{e}");
    // The budget is 5M instructions or 250ms; a debug build under load stays well below 1s.
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // A loop that catches the budget error cannot keep going either.
    let e = escape("while true do pcall(function() while true do end end) end");
    assert_eq!(e.failure().kind(), "budget", "{e}");
}

#[test]
fn deep_recursion_is_refused() {
    let e = escape("local function f(n) return 1 + f(n + 1) end f(1)");
    assert!(
        e.to_string().contains("stack overflow") || e.failure().kind() != "runtime",
        "{e}"
    );
    let e = escape("local function g() return string.gsub('a', 'a', g) end g()");
    assert!(e.to_string().contains("overflow"), "{e}");
}

#[test]
fn require_only_reaches_policies() {
    let (_tmp, policies) = policies_dir(&[
        ("lib/extra.lua", "return { action = 'fresh' }"),
        (
            "custom.lua",
            "local extra = require('lib.extra')\nfunction on_exit() return extra end",
        ),
    ]);
    let d = policies.on_exit(&agent_with("custom.lua"), &crash());
    assert_eq!(d.value.action, Start::Fresh, "{:?}", d.error);
    for name in ["../secret", "/etc/passwd", "os", "lib..extra"] {
        let e = escape(&format!("require('{name}')"));
        assert!(
            e.to_string().contains("not a valid name") || e.to_string().contains("not found"),
            "{name}: {e}"
        );
    }
}

#[test]
fn every_kind_of_broken_policy_falls_back_with_its_location() {
    let cases: [(&str, &str, Option<u32>); 5] = [
        (
            "syntax",
            "function on_exit(agent, exit)\n  return {\nend\n",
            Some(3),
        ),
        (
            "runtime",
            "function on_exit(agent, exit)\n  return agent.nope.deeper\nend\n",
            Some(2),
        ),
        (
            "bad_return",
            "function on_exit(agent, exit)\n  return { action = 'restart' }\nend\n",
            Some(1),
        ),
        (
            "bad_return",
            "function on_exit(agent, exit)\n  return { action = 'fresh', delay = 'soon' }\nend\n",
            Some(1),
        ),
        ("not_a_function", "on_exit = 42\n", None),
    ];
    for (kind, source, line) in cases {
        let (_tmp, policies, agent) = with_policy(source);
        let d = policies.on_exit(&agent, &crash());
        let e = d.error.unwrap_or_else(|| panic!("{kind}: no error"));
        assert_eq!(e.failure().kind(), kind, "{e}");
        assert_eq!(e.line(), line, "{e}");
        assert_eq!(e.script(), "policies/custom.lua");
        assert_eq!(d.value, builtin::on_exit(&agent, &crash()));
    }
}

#[test]
fn bad_returns_name_the_function_and_field() {
    let (_tmp, policies, agent) =
        with_policy("function on_exit(agent, exit)\n  return { action = 'restart' }\nend\n");
    let e = policies.on_exit(&agent, &crash()).error.unwrap();
    let text = e.to_string();
    assert!(text.contains("policies/custom.lua:1"), "{text}");
    assert!(text.contains("`on_exit`"), "{text}");
    assert!(text.contains("field `action`"), "{text}");
    assert!(text.contains("unknown action `restart`"), "{text}");
}

#[test]
fn a_fallback_is_a_critical_event() {
    let (tmp, mut policies, agent) =
        with_policy("function on_exit(agent, exit)\n  error('boom')\nend\n");
    let fleet = crate::state::FleetDir::new(tmp.path().join(".phoenix"));
    policies.record_events_in(fleet.clone());
    let d = policies.on_exit(&agent, &crash());
    assert!(d.fell_back());
    let text = std::fs::read_to_string(fleet.critical_events_path()).unwrap();
    let event: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(event["event"], "policy_error");
    assert_eq!(event["agent"], "a");
    assert_eq!(event["details"]["line"], 2);
    assert!(
        event["reason"]
            .as_str()
            .unwrap()
            .contains("policies/custom.lua:2"),
        "{event}"
    );
}

#[test]
fn missing_entry_points_come_from_the_default_policy() {
    let (_tmp, policies, agent) = with_policy("function on_exit() return 'resume' end");
    assert_eq!(
        policies.on_exit(&agent, &crash()).value.action,
        Start::Resume
    );
    let d = policies.diagnose(&Trauma {
        agent: agent.clone(),
        error_message: "prompt is too long".into(),
        ..Trauma::default()
    });
    assert_eq!(d.by, "builtin:policies/recovery.lua");
    assert_eq!(d.value.root_cause, RootCause::ContextLengthExceeded);
}

#[test]
fn a_file_of_the_same_name_overrides_the_default() {
    // Only the patterns: the default recovery.lua requires them.
    let (_tmp, policies) = policies_dir(&[(
        "patterns.lua",
        "return { { cause = 'quota_exhausted', statuses = {}, phrases = { 'prompt is too long' } } }",
    )]);
    let d = policies.diagnose(&Trauma {
        error_message: "Prompt is too long".into(),
        ..Trauma::default()
    });
    assert_eq!(d.value.root_cause, RootCause::QuotaExhausted);
}

#[test]
fn one_state_serves_many_calls_and_keeps_policies_apart() {
    let (tmp, policies) = policies_dir(&[
        ("a.lua", "function on_exit() return 'resume' end"),
        ("b.lua", "function on_exit() return 'fresh' end"),
    ]);
    let action = |file: &str| policies.on_exit(&agent_with(file), &crash()).value.action;
    for _ in 0..100 {
        assert_eq!(action("a.lua"), Start::Resume);
        assert_eq!(action("b.lua"), Start::Fresh);
    }
    // After a memory bomb the state still works.
    std::fs::write(
        tmp.path().join("policies/c.lua"),
        "function on_exit() local s = string.rep('x', 1 << 30) end",
    )
    .unwrap();
    assert!(policies.on_exit(&agent_with("c.lua"), &crash()).fell_back());
    assert_eq!(action("a.lua"), Start::Resume);
}

#[test]
fn helpers_log_match_and_thresholds() {
    let (_tmp, policies, agent) = with_policy(
        r#"
        function on_exit(agent, exit)
          phoenix.log("silence is", agent.thresholds.silence)
          print("via print")
          local hit = phoenix.match("API Error: 529 Overloaded", { "nope", "overloaded" })
          local code = phoenix.status("API Error: 529 Overloaded")
          assert(phoenix.now() > 1.7e9)
          assert(os.time() > 0 and os.clock() >= 0 and os.date("%Y") ~= nil)
          assert(phoenix.duration("2m") == 120)
          return { action = "resume", reason = hit .. " " .. code }
        end
        "#,
    );
    let d = policies.on_exit(&agent, &crash());
    assert!(d.error.is_none(), "{:?}", d.error);
    assert_eq!(d.value.reason.as_deref(), Some("overloaded 529"));
    assert_eq!(d.logs, ["silence is 600", "via print"]);
}

#[test]
fn reload_keeps_the_last_good_policy() {
    let (tmp, mut policies, agent) = with_policy("function on_exit() return 'resume' end");
    assert_eq!(
        policies.on_exit(&agent, &crash()).value.action,
        Start::Resume
    );
    std::fs::write(tmp.path().join("policies/custom.lua"), "function on_exit(").unwrap();
    let errors = policies.reload();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        policies.on_exit(&agent, &crash()).value.action,
        Start::Resume
    );
    std::fs::write(
        tmp.path().join("policies/custom.lua"),
        "function on_exit() return 'fresh' end",
    )
    .unwrap();
    assert!(policies.reload().is_empty());
    assert_eq!(
        policies.on_exit(&agent, &crash()).value.action,
        Start::Fresh
    );
}

#[test]
fn check_reports_broken_policies_up_front() {
    let (_tmp, policies, _) =
        with_policy("function diagnose(t)\n  return { root_cause = 7 }\nend\n");
    let errors = policies.check(Some("policies/custom.lua"));
    assert!(!errors.is_empty());
    assert!(
        errors.iter().all(|e| e.function() == "diagnose"),
        "{errors:?}"
    );
    assert!(Policies::new(None).check(None).is_empty());
}

// The Lua default and the Rust built-in must decide alike: the built-in is what a broken
// policy falls back to, and people read the Lua one.

#[test]
fn the_lua_default_agrees_with_the_builtin_on_exits() {
    let policies = Policies::new(None);
    for when in [
        RestartWhen::OnFailure,
        RestartWhen::Always,
        RestartWhen::Never,
    ] {
        let mut agent = AgentInfo::default();
        agent.restart.when = when;
        agrees_on_exits(&policies, &agent);
    }
}

fn agrees_on_exits(policies: &Policies, agent: &AgentInfo) {
    for (code, signal, crashes, fresh, resumed, runtime_ms, showed_life, refused) in [
        (Some(0), None, 0, false, true, 1, true, false),
        (Some(1), None, 1, false, false, 600_000, true, false),
        (Some(1), None, 3, false, true, 600_000, true, false),
        (Some(1), None, 5, false, false, 600_000, true, false),
        (None, Some(15), 1, false, true, 2_000, true, false),
        (None, Some(9), 2, false, true, 600_000, false, false),
        (Some(2), None, 1, true, false, 600_000, true, false),
        (Some(127), None, 1, false, false, 5, false, false),
        (Some(126), None, 1, false, true, 5, false, false),
        (Some(127), None, 1, false, false, 5, true, false),
        (Some(1), None, 1, false, true, 2_000, false, false),
        (Some(1), None, 1, false, true, 2_000, false, true),
        (Some(1), None, 1, false, true, 2_000, true, true),
        (None, Some(9), 1, false, true, 2_000, false, false),
    ] {
        let exit = ExitInfo {
            code,
            signal,
            crashes_in_window: crashes,
            // Known after a session that worked (1), and not known (0).
            crashes_since_work: u32::from(resumed),
            fresh_requested: fresh,
            resumed,
            runtime_ms,
            showed_life,
            session_id: resumed.then(|| "s1".to_string()),
            resume_refused: refused,
        };
        let d = policies.on_exit(agent, &exit);
        assert!(d.error.is_none(), "{:?}", d.error);
        assert_eq!(
            d.value,
            builtin::on_exit(agent, &exit),
            "{exit:?} {agent:?}"
        );
    }
}

/// `restart.when`: a clean exit waits for a person unless "always"; "never" restarts nothing.
#[test]
fn restart_when_decides_which_exits_start_again() {
    let clean = ExitInfo {
        code: Some(0),
        session_id: Some("s1".into()),
        ..ExitInfo::default()
    };
    let with = |when| {
        let mut agent = AgentInfo::default();
        agent.restart.when = when;
        agent
    };
    let on_failure = with(RestartWhen::OnFailure);
    assert_eq!(
        builtin::on_exit(&on_failure, &clean).action,
        Start::SafeMode
    );
    assert_eq!(
        builtin::on_exit(&on_failure, &crash()).action,
        Start::Resume
    );
    let always = with(RestartWhen::Always);
    let again = builtin::on_exit(&always, &clean);
    assert_eq!(again.action, Start::Resume);
    assert_eq!(again.delay, always.restart.cooldown);
    assert_eq!(builtin::on_exit(&always, &crash()).action, Start::Resume);
    let never = with(RestartWhen::Never);
    for exit in [clean, crash()] {
        let d = builtin::on_exit(&never, &exit);
        assert_eq!(d.action, Start::SafeMode, "{exit:?}");
        assert!(d.reason.unwrap().contains("\"never\""));
    }
}

#[test]
fn the_lua_default_agrees_with_the_builtin_on_unhealthy_agents() {
    let policies = Policies::new(None);
    let agent = AgentInfo::default();
    for (checks, revivals) in [
        (vec![], 0),
        (vec!["runaway"], 0),
        (vec!["silence"], 0),
        (vec!["silence", "runaway"], 1),
        (vec!["process"], 0),
    ] {
        let health = Health {
            findings: checks
                .iter()
                .map(|c| Finding {
                    check: c.to_string(),
                    ..Finding::default()
                })
                .collect(),
            revivals_for_task: revivals,
            ..Health::default()
        };
        let d = policies.on_unhealthy(&agent, &health);
        assert!(d.error.is_none(), "{:?}", d.error);
        assert_eq!(
            d.value,
            builtin::on_unhealthy(&agent, &health),
            "{health:?}"
        );
    }
}

#[test]
fn the_lua_default_agrees_with_the_builtin_on_diagnoses_and_prescriptions() {
    let policies = Policies::new(None);
    let errors = [
        "prompt is too long: 215439 tokens > 200000 maximum",
        "context_window_exceeded: Codex ran out of room in the model's context window.",
        "The input token count (1300000) exceeds the maximum number of tokens allowed (1048576).",
        "API Error: 401 invalid x-api-key",
        "Error: 403 Forbidden request",
        "You exceeded your current quota",
        "model not found: claude-opus-9",
        r#"API Error: 404 {"type":"error","error":{"type":"not_found_error","message":"model: claude-nope-4"},"request_id":"req_1"}"#,
        "There's an issue with the selected model (claude-x.1). It may not exist or you may not have access to it.",
        "models/gemini-9-pro is not found for API version v1beta",
        "API Error: 404 not_found_error",
        "It seems like you don't have access to gemini-3.8-flash.\nYour admin might have disabled the access.",
        "The model `gpt-9` does not exist or you do not have access to it. model_not_found",
        "API Error: 529 Overloaded",
        "HTTP 503 from upstream: request failed",
        "read ECONNRESET",
        "No such tool available: WebBrowse",
        "InputValidationError: missing required parameter",
        "thread 'main' panicked at src/main.rs:3:5",
        "the task is ambiguous",
        "a perfectly ordinary sentence",
    ];
    for (i, text) in errors.iter().enumerate() {
        let trauma = Trauma {
            error_type: "api_error".into(),
            error_message: text.to_string(),
            available_tools: vec!["Bash".into(), "Read".into()],
            tool_calls: vec![ToolCall {
                tool: if i % 2 == 0 { "Bash" } else { "Made" }.into(),
                ok: false,
                ..ToolCall::default()
            }],
            recoveries: (i % 3) as u32,
            ..Trauma::default()
        };
        let d = policies.diagnose(&trauma);
        assert!(d.error.is_none(), "{:?}", d.error);
        assert_eq!(d.value, builtin::diagnose(&trauma), "{text}");
        let p = policies.prescribe(&d.value, &trauma);
        assert!(p.error.is_none(), "{:?}", p.error);
        assert_eq!(p.value, builtin::prescribe(&d.value, &trauma), "{text}");
    }
}

#[test]
fn policies_can_move_to_another_thread() {
    fn send<T: Send>(_: &T) {}
    let policies = Policies::new(None);
    send(&policies);
    let handle = std::thread::spawn(move || {
        policies
            .on_exit(&AgentInfo::default(), &crash())
            .value
            .action
    });
    assert_eq!(handle.join().unwrap(), Start::Resume);
}

/// A backtracking pattern is one call into C, where the instruction hook never fires: the
/// copy of the matcher runs first and stops it on the budget, so no thread is left spinning
/// and the same state answers the next call.
#[test]
fn a_catastrophic_pattern_is_stopped_by_the_budget() {
    let (_tmp, policies, agent) = with_policy(
        "function on_exit(agent, exit)\n  if exit.code == 1 then string.find(string.rep('a', 200), '.-.-.-b') end\n  \
         if exit.code == 3 then for _ in ('a'):rep(300):gmatch('a-a-a-a-b') do end end\n  \
         if exit.code == 4 then pcall(string.gsub, ('a'):rep(300), 'a*a*a*a*b', 'x') end\n  return 'resume'\nend\n",
    );
    for code in [1, 3, 4] {
        let exit = ExitInfo {
            code: Some(code),
            ..crash()
        };
        let started = std::time::Instant::now();
        let d = policies.on_exit(&agent, &exit);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let e = d.error.expect("stopped");
        assert_eq!(e.failure().kind(), "budget", "{e}");
        assert!(e.to_string().contains("budget of"), "{e}");
        assert!(e.to_string().contains("policies/custom.lua"), "{e}");
        assert_eq!(d.value, builtin::on_exit(&agent, &exit));
    }
    assert_eq!(ABANDONED.load(Ordering::Acquire), 0, "no worker given up");
    let other = ExitInfo {
        code: Some(2),
        ..crash()
    };
    let d = policies.on_exit(&agent, &other);
    assert_eq!(d.value.action, Start::Resume, "{:?}", d.error);
}

/// A `__gc` finalizer runs when the collector gets to it, with Lua's hooks off: one that
/// never returned spun a thread forever. They are refused when the metatable is set; the call
/// falls back with that reason, and the next calls answer.
#[test]
fn a_finalizer_is_refused() {
    let (tmp, policies, agent) = with_policy(
        "function on_exit(agent, exit)\n  \
         setmetatable({}, {__gc = function() while true do pcall(function() while true do end end) end end})\n  \
         if exit.code == 1 then error('fails after making garbage') end\n  return 'resume'\nend\n",
    );
    let started = std::time::Instant::now();
    for code in [1, 2, 1, 2, 2] {
        let exit = ExitInfo {
            code: Some(code),
            ..crash()
        };
        let e = policies.on_exit(&agent, &exit).error.expect("refused");
        assert!(e.to_string().contains("may not use `__gc`"), "{e}");
        assert!(e.to_string().contains("policies/custom.lua:2"), "{e}");
    }
    // Set on a metatable that has none, `__gc` marks nothing and never runs.
    std::fs::write(
        tmp.path().join("policies/custom.lua"),
        "function on_exit(agent, exit)\n  local mt = {}\n  setmetatable({}, mt)\n  \
         mt.__gc = function() while true do end end\n  return 'resume'\nend\n",
    )
    .unwrap();
    let mut policies = policies;
    policies.reload();
    for _ in 0..3 {
        let d = policies.on_exit(&agent, &crash());
        assert_eq!(d.value.action, Start::Resume, "{:?}", d.error);
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ABANDONED.load(Ordering::Acquire), 0, "no worker given up");
}

#[test]
fn a_delay_of_nan_or_infinity_falls_back_with_the_reason() {
    for bad in ["0/0", "1/0", "-1/0", "-(0/0)"] {
        let (_tmp, policies, agent) = with_policy(&format!(
            "function on_exit(agent, exit) return {{ action = 'resume', delay = {bad} }} end"
        ));
        let d = policies.on_exit(&agent, &crash());
        assert_eq!(d.by, BUILTIN, "{bad}: the policy's answer must not be used");
        assert_eq!(d.value, builtin::on_exit(&agent, &crash()));
        let error = d.error.expect("a recorded reason");
        assert_eq!(error.failure().kind(), "bad_return", "{bad}");
        let message = error.to_string();
        assert!(message.contains("field `delay`"), "{bad}: {message}");
        assert!(
            message.contains("is not a finite number"),
            "{bad}: {message}"
        );
    }
    // Negative delays and a NaN confidence are refused the same way.
    let (_tmp, policies, agent) =
        with_policy("function on_exit() return { action = 'resume', delay = -5 } end");
    let d = policies.on_exit(&agent, &crash());
    assert!(d.fell_back(), "{:?}", d.value);
    let (_tmp, policies, agent) = with_policy(
        "function diagnose() return { root_cause = 'logic_error', confidence = 0/0 } end",
    );
    let d = policies.diagnose(&Trauma {
        agent,
        ..Trauma::default()
    });
    assert!(
        d.error
            .as_ref()
            .is_some_and(|e| e.to_string().contains("field `confidence`")),
        "{:?}",
        d.error
    );
}

/// Standard functions whose work in C grows with an argument: the instruction hook never
/// fires inside them, so each pays for its work before it runs. Every case is stopped by the
/// budget at once (no worker thread is left spinning), falls back to the built-in decision,
/// and the same state answers the next call.
#[test]
fn c_loops_sized_by_an_argument_are_stopped_by_the_budget() {
    let cases = [
        "string.rep('', math.maxinteger)",
        "string.rep('', 2^62, '')",
        "(''):rep(2^62)",
        "table.move({}, 1, 2^62, 1, {})",
        "table.move({}, math.mininteger + 1, -1, 1, {})",
        "table.concat(setmetatable({}, {__len = function() return math.maxinteger end, __index = function() return '' end}))",
        "table.concat({}, '', 1, 2^62)",
        "table.unpack({}, 1, 1e8)",
        "table.insert(setmetatable({}, {__len = function() return 2^62 end}), 1, 'x')",
        "table.remove(setmetatable({}, {__len = function() return 2^62 end}), 1)",
        "table.sort(setmetatable({}, {__len = function() return 2^30 end}))",
        "string.pack('c1000000000', '')",
        "os.date(('%c'):rep(4e6 // 2))",
        "pcall(string.rep, '', math.maxinteger) string.rep('', math.maxinteger)",
    ];
    let mut source = String::from("function on_exit(agent, exit)\n");
    for (i, case) in cases.iter().enumerate() {
        source.push_str(&format!("  if exit.code == {} then {case} end\n", i + 10));
    }
    source.push_str("  return 'resume'\nend\n");
    let (_tmp, policies, agent) = with_policy(&source);
    for (i, case) in cases.iter().enumerate() {
        let exit = ExitInfo {
            code: Some(i as i32 + 10),
            ..crash()
        };
        let started = std::time::Instant::now();
        let d = policies.on_exit(&agent, &exit);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "{case}: took {took:?}");
        let e = d.error.unwrap_or_else(|| panic!("{case}: not stopped"));
        assert!(
            matches!(e.failure(), Failure::Budget(_) | Failure::Memory { .. }),
            "{case}: {e}"
        );
        assert_eq!(d.value, builtin::on_exit(&agent, &exit), "{case}");
    }
    assert_eq!(ABANDONED.load(Ordering::Acquire), 0, "no worker given up");
    let d = policies.on_exit(
        &agent,
        &ExitInfo {
            code: Some(2),
            ..crash()
        },
    );
    assert_eq!(d.value.action, Start::Resume, "{:?}", d.error);
}

/// The wrapped functions still do what Lua's do.
#[test]
fn the_bounded_table_and_string_functions_keep_their_meaning() {
    let (_tmp, policies, agent) = with_policy(
        r##"
        function on_exit(agent, exit)
          local t = {1, 2, 3}
          table.insert(t, 4)
          table.insert(t, 1, 0)
          assert(table.concat(t, ",") == "0,1,2,3,4", table.concat(t, ","))
          assert(table.remove(t) == 4 and table.remove(t, 1) == 0)
          assert(table.concat(t, ",") == "1,2,3")
          assert(not pcall(table.insert, t, 9, 1), "position out of bounds")
          assert(not pcall(table.insert, t, 1, 2, 3), "wrong number of arguments")
          assert(table.remove({}) == nil)
          local u = table.move({1, 2, 3}, 1, 3, 2, {})
          assert(u[2] == 1 and u[4] == 3)
          local a, b, c = table.unpack({1, 2, 3})
          assert(a == 1 and c == 3)
          assert(select("#", table.unpack({1, 2, 3}, 2)) == 2)
          local s = {3, 1, 2}
          table.sort(s)
          assert(table.concat(s) == "123")
          table.sort(s, function(x, y) return x > y end)
          assert(table.concat(s) == "321")
          local m = setmetatable({}, {__len = function() return 3 end, __index = function(_, i) return 4 - i end})
          assert(table.concat(m, "") == "321")
          assert(("ab"):rep(3, "-") == "ab-ab-ab" and string.rep("x", 0) == "")
          assert(string.unpack("i4", string.pack("i4", 7)) == 7)
          assert(#os.date("%Y-%m-%d", 0) == 10)
          assert(load("return 1 + 1")() == 2)
          return "fresh"
        end
        "##,
    );
    let d = policies.on_exit(&agent, &crash());
    assert_eq!(d.value.action, Start::Fresh, "{:?}", d.error);
}
