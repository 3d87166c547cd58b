//! `[clinic] diagnose_command`: an external diagnostician (for example an LLM CLI in print
//! mode). It gets the rendered TraumaContext on stdin and answers with a JSON diagnosis.
//! It is run from an argv, never through a shell, and killed when it takes too long.

use std::process::Command;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::policy::{Diagnosis, FromPolicy};
use crate::process::RunError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommandError {
    #[error("cannot start `{program}`: {error}")]
    Spawn { program: String, error: String },
    #[error("`{program}` took longer than {}s and was killed", timeout.as_secs_f64())]
    Timeout { program: String, timeout: Duration },
    #[error("`{program}` failed ({status})")]
    Failed { program: String, status: String },
    #[error("`{program}` answered without a JSON object: {answer:?}")]
    NoJson { program: String, answer: String },
    #[error("`{program}` answered with an invalid diagnosis: {reason}")]
    Invalid { program: String, reason: String },
}

/// Read a diagnosis out of an answer. Fields other than the diagnosis' own are ignored: a
/// model may add some.
pub fn parse_answer(program: &str, answer: &str) -> Result<Diagnosis, CommandError> {
    let Some(Value::Object(map)) = crate::text::json_object(answer) else {
        return Err(CommandError::NoJson {
            program: program.to_string(),
            answer: crate::text::shorten(answer, 200),
        });
    };
    let known: Map<String, Value> = map
        .into_iter()
        .filter(|(k, _)| Diagnosis::FIELDS.contains(&k.as_str()))
        .collect();
    Diagnosis::from_policy(&Value::Object(known)).map_err(|e| CommandError::Invalid {
        program: program.to_string(),
        reason: e.to_string(),
    })
}

/// Run `argv` with `input` on stdin; its stdout must hold the diagnosis.
pub fn diagnose(
    argv: &[String],
    input: &str,
    timeout: Duration,
) -> Result<Diagnosis, CommandError> {
    let program = argv.first().cloned().unwrap_or_default();
    let mut command = Command::new(&program);
    command.args(&argv[1..]);
    match crate::process::run(command, input.as_bytes(), timeout) {
        Ok(done) if done.status.success() => parse_answer(&program, &done.stdout),
        Ok(done) => Err(CommandError::Failed {
            program,
            status: done.describe_status(),
        }),
        Err(RunError::Timeout) => Err(CommandError::Timeout { program, timeout }),
        Err(RunError::Spawn(e)) => Err(CommandError::Spawn {
            program,
            error: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::policy::RootCause;

    #[test]
    fn answers_in_prose_and_fences_are_read() {
        let d = parse_answer(
            "llm",
            "Sure! Here it is:\n```json\n{\"root_cause\": \"transient_error\", \"explanation\": \"503\", \"confidence\": 0.7, \"extra\": 1}\n```",
        )
        .unwrap();
        assert_eq!(d.root_cause, RootCause::TransientError);
        assert!(matches!(
            parse_answer("llm", "no idea"),
            Err(CommandError::NoJson { .. })
        ));
        assert!(matches!(
            parse_answer("llm", r#"{"root_cause": "gremlins"}"#),
            Err(CommandError::Invalid { .. })
        ));
    }

    #[test]
    fn the_command_gets_stdin_and_a_slow_one_is_killed() {
        let argv: Vec<String> = [
            "sh",
            "-c",
            "cat >/dev/null; echo '{\"root_cause\": \"logic_error\", \"confidence\": 1}'",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let d = diagnose(&argv, "context", Duration::from_secs(10)).unwrap();
        assert_eq!(d.root_cause, RootCause::LogicError);
        let slow: Vec<String> = ["sleep", "5"].iter().map(|s| s.to_string()).collect();
        let started = Instant::now();
        let e = diagnose(&slow, "", Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, CommandError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
