//! `[clinic] diagnose_command`: an external diagnostician (for example an LLM CLI in print
//! mode). It gets the rendered TraumaContext on stdin and answers with a JSON diagnosis.
//! It is run from an argv, never through a shell, and killed when it takes too long.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::policy::{Diagnosis, FromPolicy};

/// Largest answer read; an LLM that rambles on is cut off, not buffered forever.
const MAX_ANSWER: u64 = 1 << 20;

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

/// The first JSON object in `text` (answers often come wrapped in prose or code fences).
pub fn json_object(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str(trimmed) {
        return Some(v);
    }
    let mut start = 0;
    while let Some(i) = text[start..].find('{') {
        let from = start + i;
        let mut stream = serde_json::Deserializer::from_str(&text[from..]).into_iter::<Value>();
        if let Some(Ok(v @ Value::Object(_))) = stream.next() {
            return Some(v);
        }
        start = from + 1;
    }
    None
}

/// Read a diagnosis out of an answer. Fields other than the diagnosis' own are ignored: a
/// model may add some.
pub fn parse_answer(program: &str, answer: &str) -> Result<Diagnosis, CommandError> {
    let Some(Value::Object(map)) = json_object(answer) else {
        return Err(CommandError::NoJson {
            program: program.to_string(),
            answer: crate::clinic::triage::shorten(answer, 200),
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
    let mut child = Command::new(&program)
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Its own process group, so a timeout kills whatever it started too.
        .process_group(0)
        .spawn()
        .map_err(|e| CommandError::Spawn {
            program: program.clone(),
            error: e.to_string(),
        })?;
    let mut stdin = child.stdin.take();
    let input = input.to_string();
    // Writing and reading on threads: a command that answers before reading all of its input
    // must not deadlock with us.
    let writer = std::thread::spawn(move || {
        if let Some(stdin) = stdin.as_mut() {
            let _ = stdin.write_all(input.as_bytes());
        }
    });
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        if let Some(stdout) = stdout.as_mut() {
            let _ = stdout.take(MAX_ANSWER).read_to_string(&mut out);
        }
        out
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.kill();
                let _ = child.wait();
                return Err(CommandError::Timeout { program, timeout });
            }
        }
    };
    let _ = writer.join();
    let answer = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(CommandError::Failed {
            program,
            status: status.to_string(),
        });
    }
    parse_answer(&program, &answer)
}

#[cfg(test)]
mod tests {
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
