//! The built-in defaults: what every entry point decides when no policy answers (or a policy
//! breaks). `policies/recovery.lua` says the same in Lua; a test keeps the two in step.

use std::time::Duration;

use super::types::*;
use crate::spec::RestartWhen;

/// Wait `cooldown · 2^(n-1)`, capped at `backoff_max`.
pub fn backoff(restart: &RestartInfo, attempt: u32) -> Duration {
    let factor = 2f64.powi(attempt.saturating_sub(1).min(30) as i32);
    let secs = (restart.cooldown.as_secs_f64() * factor).min(restart.backoff_max.as_secs_f64());
    Duration::from_secs_f64(secs.max(0.0))
}

/// What a shell reports for a command it found but could not run (126) or did not find (127).
pub const CANNOT_RUN: [i32; 2] = [126, 127];

/// Hybrid resume (Phoenix Protocol v2.0): a clean exit waits for a person (unless
/// `restart.when = "always"`: then it resumes after the cooldown); a command that cannot run
/// too; a crash resumes the session after a backoff, unless the CLI refused to resume it (then
/// fresh); too many crashes within the window stop the loop; `restart.when = "never"` leaves
/// every exit stopped.
pub fn on_exit(agent: &AgentInfo, exit: &ExitInfo) -> ExitDecision {
    let decide = |action, delay, reason: String| ExitDecision {
        action,
        delay,
        reason: Some(reason),
    };
    if agent.restart.when == RestartWhen::Never {
        return decide(
            Start::SafeMode,
            Duration::ZERO,
            format!(
                "{}; restart.when = \"never\": left stopped until `phoenix restart`",
                exit.describe()
            ),
        );
    }
    if exit.is_clean() && agent.restart.when == RestartWhen::Always {
        let (action, next) = match (exit.fresh_requested, &exit.session_id) {
            (true, _) => (Start::Fresh, "starting fresh, as requested"),
            (false, Some(_)) => (Start::Resume, "resuming"),
            (false, None) => (Start::Resume, "restarting"),
        };
        return decide(
            action,
            agent.restart.cooldown,
            format!("exited cleanly; restart.when = \"always\": {next}"),
        );
    }
    if exit.is_clean() {
        return decide(
            Start::SafeMode,
            Duration::ZERO,
            "exited cleanly: left stopped until `phoenix restart`".into(),
        );
    }
    // The command itself cannot run: no restart fixes that, a person has to.
    if !exit.showed_life
        && exit.signal.is_none()
        && let Some(code) = exit.code.filter(|c| CANNOT_RUN.contains(c))
    {
        let what = if code == 127 {
            "not found"
        } else {
            "not executable"
        };
        return decide(
            Start::SafeMode,
            Duration::ZERO,
            format!(
                "the agent's command cannot be run (exit {code}: {what}): fix `command` in phoenix.toml"
            ),
        );
    }
    let restart = &agent.restart;
    let crashes = exit.crashes_in_window.max(1);
    let count = format!(
        "crash {crashes} of {} within {}",
        restart.max_crashes,
        crate::spec::duration::format(restart.crash_window)
    );
    if crashes >= restart.max_crashes {
        return decide(
            Start::SafeMode,
            Duration::ZERO,
            format!("{count}: crash loop stopped"),
        );
    }
    // The backoff starts over after a session that did work: a resumed session that worked
    // and was killed again is no crash loop (its wait doubled from kill to kill).
    let delay = backoff(restart, backoff_count(exit, crashes));
    if exit.fresh_requested {
        return decide(
            Start::Fresh,
            delay,
            format!("{count}; a fresh start was requested"),
        );
    }
    // Only the CLI's own refusal says a session cannot be resumed. A resume that showed no
    // life because it was killed (a signal, the operator, the machine) or had no time is
    // still the conversation: resumed again, the crash limit above ending a loop.
    if exit.resumed && exit.resume_refused {
        return decide(
            Start::Fresh,
            delay,
            format!("{count}; the CLI cannot resume the session: starting fresh"),
        );
    }
    let next = if exit.session_id.is_some() {
        "resuming"
    } else {
        "restarting"
    };
    decide(Start::Resume, delay, format!("{count}: {next}"))
}

/// What the backoff counts: the crashes since the last run that did work, else (not known)
/// all of them in the window.
pub fn backoff_count(exit: &ExitInfo, crashes: u32) -> u32 {
    match exit.crashes_since_work {
        0 => crashes,
        n => n.min(crashes).max(1),
    }
}

/// Revive once per task; runaway work and repeated failures go to a person.
pub fn on_unhealthy(_agent: &AgentInfo, health: &Health) -> UnhealthyDecision {
    let decide = |action, reason: &str| UnhealthyDecision {
        action,
        reason: Some(reason.to_string()),
    };
    if health.findings.is_empty() {
        return decide(UnhealthyAction::Ignore, "nothing found");
    }
    let only_runaway = health.findings.iter().all(|f| f.check == "runaway");
    if only_runaway {
        return decide(
            UnhealthyAction::Notify,
            "long-running work is reported, not interrupted",
        );
    }
    if health.revivals_for_task >= health.max_revivals {
        return decide(
            UnhealthyAction::SafeMode,
            "already revived for this task: unrecoverable",
        );
    }
    decide(
        UnhealthyAction::Revive,
        "first failure of this task: revive",
    )
}

/// One root cause and the phrases that give it away (lowercase, matched as plain text).
pub struct Pattern {
    pub cause: RootCause,
    pub statuses: &'static [u16],
    pub phrases: &'static [&'static str],
}

/// Checked in order: the causes a restart cannot fix come first, so that "429 quota
/// exceeded" is quota and not a transient rate limit.
pub const PATTERNS: &[Pattern] = &[
    Pattern {
        cause: RootCause::InvalidCredentials,
        statuses: &[401, 403],
        phrases: &[
            "invalid api key",
            "invalid x-api-key",
            "invalid_api_key",
            "api key not valid",
            "authentication_error",
            "authentication failed",
            "unauthorized",
            "token has expired",
            "token expired",
            "please run /login",
            "not logged in",
            "invalid credentials",
            "permission_error",
        ],
    },
    Pattern {
        cause: RootCause::QuotaExhausted,
        statuses: &[],
        phrases: &[
            "insufficient_quota",
            "exceeded your current quota",
            "quota exceeded",
            "quota has been exhausted",
            "credit balance is too low",
            "usage limit reached",
            "billing",
        ],
    },
    Pattern {
        cause: RootCause::ModelUnavailable,
        statuses: &[],
        phrases: &[
            "model_not_found",
            "model not found",
            "unknown model",
            "invalid model",
            "model is not available",
            "model does not exist",
            "does not have access to model",
            "no such model",
            // Anthropic's 404 for a model it does not know: `"type":"not_found_error",
            // "message":"model: claude-x"`; Claude Code's own wording; Gemini's 404.
            "not_found_error",
            "issue with the selected model",
            "is not found for api version",
            // Gemini CLI's dialog after a 404 for its model.
            "you don't have access to gemini",
        ],
    },
    Pattern {
        cause: RootCause::ContextLengthExceeded,
        statuses: &[413],
        phrases: &[
            "prompt is too long",
            "context_length_exceeded",
            "context_window_exceeded",
            "context length",
            "context window",
            "maximum context",
            "too many tokens",
            "input is too long",
            "request_too_large",
            "token limit",
            "exceeds the maximum number of tokens",
        ],
    },
    Pattern {
        cause: RootCause::HallucinatedTool,
        statuses: &[],
        phrases: &[
            "unknown tool",
            "no such tool",
            "tool not found",
            "not a valid tool",
            "invalid tool name",
            "unrecognized tool",
            "no tool named",
            "tool does not exist",
        ],
    },
    Pattern {
        cause: RootCause::InvalidToolArguments,
        statuses: &[],
        phrases: &[
            "inputvalidationerror",
            "invalid input",
            "invalid arguments",
            "invalid parameters",
            "validation error",
            "missing required",
            "required parameter",
            "unexpected parameter",
            "does not match schema",
            "schema validation",
        ],
    },
    Pattern {
        cause: RootCause::TransientError,
        statuses: &[408, 429, 500, 502, 503, 504, 529],
        phrases: &[
            "rate limit",
            "rate_limit",
            "overloaded",
            "timed out",
            "timeout",
            "connection reset",
            "econnreset",
            "econnrefused",
            "connection refused",
            "socket hang up",
            "network error",
            "service unavailable",
            "bad gateway",
            "internal server error",
            "temporarily unavailable",
        ],
    },
    Pattern {
        cause: RootCause::AmbiguousInstruction,
        statuses: &[],
        phrases: &[
            "ambiguous",
            "unclear what",
            "could you clarify",
            "please clarify",
            "which one do you mean",
            "need more information",
        ],
    },
    Pattern {
        cause: RootCause::LogicError,
        statuses: &[],
        phrases: &[
            "panicked at",
            "traceback (most recent call last)",
            "assertion failed",
            "assertionerror",
            "typeerror",
            "referenceerror",
            "segmentation fault",
            "tests failed",
            "test failed",
            "exception",
        ],
    },
];

/// The first of `phrases` found in `text`, ignoring case.
pub fn match_text<'a>(text: &str, phrases: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = text.to_lowercase();
    phrases
        .into_iter()
        .find(|p| !p.is_empty() && lower.contains(&p.to_lowercase()))
}

/// HTTP status codes mentioned in error text: a standalone 4xx/5xx number on a line that
/// talks about an error, a status, HTTP or an API (so `line 404` in a stack trace is not one).
pub fn statuses(text: &str) -> Vec<u16> {
    let mut found = Vec::new();
    for line in text.lines() {
        let lower = line.to_lowercase();
        if !["error", "status", "http", "api", "request"]
            .iter()
            .any(|w| lower.contains(w))
        {
            continue;
        }
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_digit() {
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let standalone = (start == 0 || !bytes[start - 1].is_ascii_alphanumeric())
                    && (i == bytes.len() || !bytes[i].is_ascii_alphanumeric())
                    && (start == 0 || !b".:".contains(&bytes[start - 1]));
                if i - start == 3
                    && standalone
                    && let Ok(n) = line[start..i].parse::<u16>()
                    && (400..600).contains(&n)
                    && !found.contains(&n)
                {
                    found.push(n);
                }
            } else {
                i += 1;
            }
        }
    }
    found
}

/// The model an error names (`model: claude-x`, `selected model (claude-x)`,
/// `models/gemini-x`, `have access to gemini-x`, OpenAI's ``the model `gpt-x` does not
/// exist``), for a person to fix. `policies/recovery.lua` reads it alike.
pub fn model_named(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    [
        "model:",
        "selected model (",
        "models/",
        "have access to ",
        "the model `",
    ]
    .iter()
    .find_map(|start| {
        let at = lower.find(start)? + start.len();
        let name: String = text[at..]
            .trim_start_matches(' ')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "._-@:".contains(*c))
            .collect();
        let name = name.trim_end_matches([':', '.']).to_string();
        // Model names carry a version or a dash; "it" or "model" is no name.
        name.contains(|c: char| c.is_ascii_digit() || c == '-')
            .then_some(name)
    })
}

/// Classify a failure by the patterns above.
pub fn diagnose(trauma: &Trauma) -> Diagnosis {
    let text = trauma.error_text();
    let codes = statuses(&text);
    for p in PATTERNS {
        if let Some(phrase) = match_text(&text, p.phrases.iter().copied()) {
            let mut explanation = format!("the error mentions \"{phrase}\"");
            if p.cause == RootCause::ModelUnavailable
                && let Some(model) = model_named(&text)
            {
                explanation = format!("the model `{model}` is not available ({explanation})");
            }
            return Diagnosis {
                root_cause: p.cause,
                explanation,
                confidence: 0.9,
            };
        }
        if let Some(code) = codes.iter().find(|c| p.statuses.contains(c)) {
            return Diagnosis {
                root_cause: p.cause,
                explanation: format!("the error carries HTTP status {code}"),
                confidence: 0.8,
            };
        }
    }
    // A failed call to a tool the agent never used successfully is most likely made up.
    if let Some(call) = trauma.tool_calls.iter().rev().find(|c| !c.ok)
        && !trauma.available_tools.is_empty()
        && !trauma.available_tools.contains(&call.tool)
    {
        return Diagnosis {
            root_cause: RootCause::HallucinatedTool,
            explanation: format!(
                "the last failed call used `{}`, which is not among the tools that worked",
                call.tool
            ),
            confidence: 0.6,
        };
    }
    Diagnosis {
        root_cause: RootCause::Unknown,
        explanation: "no known pattern in the error text".into(),
        confidence: 0.2,
    }
}

/// Map a root cause to a treatment.
pub fn prescribe(diagnosis: &Diagnosis, trauma: &Trauma) -> Prescription {
    let p = |action, reminder: Option<String>, delay, reason: &str| Prescription {
        action,
        modified_prompt: None,
        reminder,
        delay,
        reason: Some(reason.to_string()),
    };
    let attempt = trauma.recoveries + 1;
    match diagnosis.root_cause {
        RootCause::ModelUnavailable => {
            let which = match model_named(&trauma.error_text()) {
                Some(model) => format!("the model `{model}`"),
                None => "the agent's model".to_string(),
            };
            Prescription::abort(format!(
                "{which} cannot be used: {}",
                trauma.agent.model_fix
            ))
        }
        // The cause is said beside the reason wherever it is shown (`clinic: CAUSE: REASON`).
        cause if cause.needs_a_person() => {
            Prescription::abort("a restart cannot fix this; a person has to".to_string())
        }
        RootCause::ContextLengthExceeded => p(
            PrescriptionAction::SummarizeHistory,
            None,
            None,
            "the context is full: clear, don't compact",
        ),
        RootCause::HallucinatedTool => p(
            PrescriptionAction::ModifyPrompt,
            Some(if trauma.available_tools.is_empty() {
                "Use only the tools you have been given; do not invent tool names.".to_string()
            } else {
                format!(
                    "Use only these tools: {}. Do not invent tool names.",
                    trauma.available_tools.join(", ")
                )
            }),
            None,
            "a tool that does not exist was called",
        ),
        RootCause::InvalidToolArguments => p(
            PrescriptionAction::ModifyPrompt,
            Some(
                "A tool call was rejected for its arguments. Check each tool's required parameters and their types before calling it.".into(),
            ),
            None,
            "a tool was called with invalid arguments",
        ),
        RootCause::AmbiguousInstruction => p(
            PrescriptionAction::ModifyPrompt,
            Some(
                "The instruction was ambiguous. Pick the most reasonable interpretation, state it, and record the open question instead of stopping.".into(),
            ),
            None,
            "the instruction was ambiguous",
        ),
        RootCause::LogicError => p(
            PrescriptionAction::ModifyPrompt,
            Some(
                "The previous attempt failed with the error below. Find its cause before trying the same thing again.".into(),
            ),
            None,
            "the previous attempt failed with an error",
        ),
        RootCause::TransientError | RootCause::Unknown => p(
            PrescriptionAction::Retry,
            None,
            Some(backoff(&trauma.agent.restart, attempt)),
            "retry after a backoff",
        ),
        _ => Prescription::abort("unhandled root cause"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trauma(error: &str) -> Trauma {
        Trauma {
            error_type: "api_error".into(),
            error_message: error.into(),
            ..Trauma::default()
        }
    }

    #[test]
    fn realistic_errors_get_their_root_cause() {
        let cases = [
            (
                r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215439 tokens > 200000 maximum"}}"#,
                RootCause::ContextLengthExceeded,
            ),
            (
                "context_window_exceeded: Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying.",
                RootCause::ContextLengthExceeded,
            ),
            (
                r#"[API Error: {"error":{"code":400,"status":"INVALID_ARGUMENT","message":"The input token count (1300000) exceeds the maximum number of tokens allowed (1048576)."}}]"#,
                RootCause::ContextLengthExceeded,
            ),
            (
                r#"API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
                RootCause::InvalidCredentials,
            ),
            (
                "OAuth token has expired. Please obtain a new token or refresh your existing token.",
                RootCause::InvalidCredentials,
            ),
            (
                r#"Error: 429 {"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}"#,
                RootCause::QuotaExhausted,
            ),
            (
                r#"API Error: 404 {"type":"error","error":{"type":"not_found_error","message":"model: claude-opus-9"}} model not found"#,
                RootCause::ModelUnavailable,
            ),
            (
                r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                RootCause::TransientError,
            ),
            (
                "API Error: 503 upstream connect error",
                RootCause::TransientError,
            ),
            ("read ECONNRESET", RootCause::TransientError),
            (
                "<tool_use_error>Error: No such tool available: WebBrowse</tool_use_error>",
                RootCause::HallucinatedTool,
            ),
            (
                "InputValidationError: Edit failed due to the following issue: The required parameter `old_string` is missing",
                RootCause::InvalidToolArguments,
            ),
            (
                "thread 'main' panicked at src/lib.rs:10:5: index out of bounds",
                RootCause::LogicError,
            ),
            (
                "The request is ambiguous: there are two `config.toml` files",
                RootCause::AmbiguousInstruction,
            ),
            ("something odd happened", RootCause::Unknown),
        ];
        for (text, cause) in cases {
            assert_eq!(diagnose(&trauma(text)).root_cause, cause, "{text}");
        }
    }

    #[test]
    fn status_codes_need_an_error_context() {
        assert_eq!(statuses("API Error: 401 unauthorized"), [401]);
        assert_eq!(statuses("at foo.py line 404"), Vec::<u16>::new());
        assert_eq!(statuses("error at src/x.rs:429:5"), Vec::<u16>::new());
    }

    #[test]
    fn each_root_cause_gets_its_prescription() {
        let t = Trauma {
            available_tools: vec!["Bash".into(), "Read".into()],
            ..trauma("")
        };
        let rx = |cause| {
            prescribe(
                &Diagnosis {
                    root_cause: cause,
                    explanation: String::new(),
                    confidence: 1.0,
                },
                &t,
            )
        };
        use PrescriptionAction::*;
        assert_eq!(
            rx(RootCause::ContextLengthExceeded).action,
            SummarizeHistory
        );
        let hallucinated = rx(RootCause::HallucinatedTool);
        assert_eq!(hallucinated.action, ModifyPrompt);
        assert!(hallucinated.reminder.unwrap().contains("Bash, Read"));
        assert_eq!(rx(RootCause::InvalidToolArguments).action, ModifyPrompt);
        assert_eq!(rx(RootCause::TransientError).action, Retry);
        assert_eq!(
            rx(RootCause::TransientError).delay,
            Some(Duration::from_secs(10))
        );
        for cause in [
            RootCause::InvalidCredentials,
            RootCause::ModelUnavailable,
            RootCause::QuotaExhausted,
        ] {
            assert_eq!(rx(cause).action, Abort, "{cause}");
        }
    }

    #[test]
    fn hybrid_resume_defaults() {
        let agent = AgentInfo::default();
        let exit = |code, crashes, resumed, runtime_ms| ExitInfo {
            code,
            crashes_in_window: crashes,
            resumed,
            runtime_ms,
            session_id: Some("s1".into()),
            ..ExitInfo::default()
        };
        let clean = on_exit(&agent, &exit(Some(0), 0, true, 1));
        assert_eq!(clean.action, Start::SafeMode);
        // A crash of a long run resumes after the doubled cooldown.
        let crash = on_exit(&agent, &exit(Some(1), 2, true, 600_000));
        assert_eq!(crash.action, Start::Resume);
        assert_eq!(crash.delay, Duration::from_secs(20));
        assert_eq!(
            crash.reason.as_deref(),
            Some("crash 2 of 5 within 1h: resuming")
        );
        // A resume starts fresh only when the CLI refused it; one that never showed life (it
        // was killed first) is resumed again, however long it ran, and so is one that did
        // (a hook, a turn), however soon it died.
        let mut lifeless = exit(Some(1), 1, true, 600_000);
        lifeless.showed_life = false;
        assert_eq!(on_exit(&agent, &lifeless).action, Start::Resume);
        lifeless.resume_refused = true;
        assert_eq!(on_exit(&agent, &lifeless).action, Start::Fresh);
        let quick = on_exit(&agent, &exit(Some(1), 1, true, 2_000));
        assert_eq!(quick.action, Start::Resume);
        // A quick crash of a fresh start is resumed: there is nothing to give up on yet.
        assert_eq!(
            on_exit(&agent, &exit(Some(1), 1, false, 2_000)).action,
            Start::Resume
        );
        let mut fresh = exit(Some(1), 1, false, 600_000);
        fresh.fresh_requested = true;
        assert_eq!(on_exit(&agent, &fresh).action, Start::Fresh);
        assert_eq!(
            on_exit(&agent, &exit(Some(1), 5, false, 600_000)).action,
            Start::SafeMode
        );
    }

    #[test]
    fn a_command_that_cannot_run_goes_to_safe_mode_at_once() {
        let agent = AgentInfo::default();
        for code in [126, 127] {
            let exit = ExitInfo {
                code: Some(code),
                showed_life: false,
                crashes_in_window: 1,
                ..ExitInfo::default()
            };
            let d = on_exit(&agent, &exit);
            assert_eq!(d.action, Start::SafeMode, "{code}");
            assert!(d.reason.unwrap().contains("fix `command` in phoenix.toml"));
        }
        // A CLI that ran and then exited 127 itself is a crash like any other.
        let ran = ExitInfo {
            code: Some(127),
            crashes_in_window: 1,
            ..ExitInfo::default()
        };
        assert_eq!(on_exit(&agent, &ran).action, Start::Resume);
        // Without a session there is nothing to resume: the reason says restarting.
        assert_eq!(
            on_exit(&agent, &ran).reason.as_deref(),
            Some("crash 1 of 5 within 1h: restarting")
        );
    }

    /// Anthropic's 404 for an unknown model: a person has to fix the model, at once, and is
    /// told which model and where.
    #[test]
    fn model_not_found_names_the_model_and_stops_for_a_person() {
        // Diagnosed as an unavailable model, named in the explanation.
        let diagnosed = |error_type: &str, error_message: &str, model: &str| {
            let trauma = Trauma {
                error_type: error_type.into(),
                error_message: error_message.into(),
                ..Trauma::default()
            };
            let d = diagnose(&trauma);
            assert_eq!(d.root_cause, RootCause::ModelUnavailable, "{error_message}");
            let named = format!("`{model}`");
            assert!(d.explanation.contains(&named), "{}", d.explanation);
            (d, trauma)
        };
        let (d, trauma) = diagnosed(
            "api_error",
            r#"API Error: 404 {"type":"error","error":{"type":"not_found_error","message":"model: claude-nope-4"},"request_id":"req_1"}"#,
            "claude-nope-4",
        );
        let p = prescribe(&d, &trauma);
        assert_eq!(p.action, PrescriptionAction::Abort);
        assert_eq!(
            p.reason.as_deref(),
            Some(
                "the model `claude-nope-4` cannot be used: fix the model the agent's `command` in phoenix.toml gives, or the one its CLI's own settings give"
            )
        );
        assert_eq!(
            model_named("There's an issue with the selected model (claude-x.1). It may not exist"),
            Some("claude-x.1".into())
        );
        assert_eq!(
            model_named("models/gemini-9 is not found"),
            Some("gemini-9".into())
        );
        assert_eq!(
            model_named("The model `gpt-9` does not exist or you do not have access to it.")
                .as_deref(),
            Some("gpt-9")
        );
        assert_eq!(model_named("no model here"), None);
        assert_eq!(model_named("you do not have access to it"), None);
        // What Gemini CLI 0.61 shows (a dialog, the turn waits) when the API answers 404.
        diagnosed(
            "screen",
            "It seems like you don't have access to gemini-3.8-flash.\nYour admin might have disabled the access.",
            "gemini-3.8-flash",
        );
    }

    #[test]
    fn a_banner_in_the_pane_is_not_the_error() {
        // Claude Code's screen mentions billing; a kill -9 is still undiagnosed, not a quota.
        let trauma = Trauma {
            error_type: "signal".into(),
            error_message: "signal 9".into(),
            stack_trace: "Claude Code v2 · API Usage Billing\n> refactor the parser".into(),
            ..Trauma::default()
        };
        assert_eq!(diagnose(&trauma).root_cause, RootCause::Unknown);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = RestartInfo::default();
        assert_eq!(backoff(&r, 1), Duration::from_secs(10));
        assert_eq!(backoff(&r, 3), Duration::from_secs(40));
        assert_eq!(backoff(&r, 20), Duration::from_secs(300));
    }
}
