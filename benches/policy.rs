//! Cost of policy decisions: one call on a reused Lua state (the way the wrapper and the
//! watchdog use it), creating the state, and the built-in Rust defaults for comparison.
//! `cargo bench --bench policy` prints medians in microseconds.

use std::hint::black_box;
use std::time::{Duration, Instant};

use phoenix::policy::{
    self, AgentInfo, Diagnosis, ExitInfo, Finding, Health, Policies, RootCause, ToolCall, Trauma,
    builtin,
};

fn measure(name: &str, runs: usize, mut f: impl FnMut()) {
    for _ in 0..runs / 10 {
        f();
    }
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<52} median {:>8.2} µs   p90 {:>8.2} µs   p99 {:>8.2} µs   ({runs} runs)",
        us(times[runs / 2]),
        us(times[runs * 9 / 10]),
        us(times[runs * 99 / 100]),
    );
}

fn trauma() -> Trauma {
    Trauma {
        agent: AgentInfo::default(),
        original_prompt: Some("Refactor the order book module and keep the tests green".into()),
        error_type: "api_error".into(),
        error_message: r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215439 tokens > 200000 maximum"}}"#.into(),
        stack_trace: "working: step 41\nworking: step 42\n".repeat(40),
        tool_calls: (0..12)
            .map(|i| ToolCall {
                tool: if i % 3 == 0 { "Read" } else { "Bash" }.into(),
                ok: true,
                input: Some(format!("cargo test --package orderbook -- case_{i}")),
                ..ToolCall::default()
            })
            .collect(),
        history_summary: Some("- Read the module\n- Ran the tests\n".repeat(20)),
        available_tools: vec!["Read".into(), "Bash".into(), "Edit".into()],
        exit: Some(ExitInfo {
            code: Some(1),
            crashes_in_window: 1,
            ..ExitInfo::default()
        }),
        recoveries: 0,
    }
}

fn main() {
    let agent = AgentInfo::default();
    let exit = ExitInfo {
        code: Some(1),
        runtime_ms: 42_000,
        crashes_in_window: 2,
        ..ExitInfo::default()
    };
    let health = Health {
        findings: vec![Finding {
            check: "silence".into(),
            reason: "silent_for_15_minutes".into(),
            summary: "no tool call for 15m".into(),
        }],
        ..Health::default()
    };
    let trauma = trauma();
    let diagnosis = Diagnosis {
        root_cause: RootCause::ContextLengthExceeded,
        explanation: "the error mentions \"prompt is too long\"".into(),
        confidence: 0.9,
    };

    println!("creating the state");
    measure("bare sandboxed Lua state", 500, || {
        black_box(policy::bare_state());
    });
    // The state is made on the policy thread: wait for it with a first request.
    measure(
        "Policies::new (thread + state + default policies)",
        500,
        || {
            black_box(Policies::new(None).load_errors());
        },
    );

    println!("one decision on a reused state");
    let policies = Policies::new(None);
    assert!(policies.load_errors().is_empty());
    assert!(!policies.on_exit(&agent, &exit).fell_back());
    measure("on_exit (Lua default)", 5000, || {
        black_box(policies.on_exit(&agent, &exit));
    });
    measure("on_unhealthy (Lua default)", 5000, || {
        black_box(policies.on_unhealthy(&agent, &health));
    });
    measure("diagnose (Lua default, patterns)", 2000, || {
        black_box(policies.diagnose(&trauma));
    });
    measure("prescribe (Lua default)", 5000, || {
        black_box(policies.prescribe(&diagnosis, &trauma));
    });

    // The floor: a policy that does nothing, so what is left is conversion and bookkeeping.
    let dir = std::env::temp_dir().join(format!("phoenix-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("trivial.lua"),
        "function on_exit() return 'resume' end",
    )
    .unwrap();
    let trivial = Policies::new(Some(&dir));
    let trivial_agent = AgentInfo {
        policy: Some(dir.join("trivial.lua").display().to_string()),
        ..AgentInfo::default()
    };
    assert!(!trivial.on_exit(&trivial_agent, &exit).fell_back());
    measure("on_exit (a policy returning a constant)", 5000, || {
        black_box(trivial.on_exit(&trivial_agent, &exit));
    });
    let _ = std::fs::remove_dir_all(&dir);

    println!("built-in Rust defaults, for comparison");
    measure("on_exit (built-in)", 5000, || {
        black_box(builtin::on_exit(&agent, &exit));
    });
    measure("diagnose (built-in)", 5000, || {
        black_box(builtin::diagnose(&trauma));
    });
}
