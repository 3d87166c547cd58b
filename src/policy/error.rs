//! How a policy broke: the [`Failure`] kinds, the [`Error`] that says where (script, entry
//! point, line), and the reading of mlua's errors into them.

use serde_json::json;

use super::{BadReturn, sandbox};

/// How a policy broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    #[error("cannot read the policy: {0}")]
    Read(String),
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("{message}")]
    Runtime {
        message: String,
        traceback: Option<String>,
    },
    #[error("stopped: {0}")]
    Budget(String),
    #[error("stopped: out of memory (limit {limit} bytes)")]
    Memory { limit: usize },
    #[error("{0}")]
    BadReturn(BadReturn),
    #[error("`{name}` is {kind}, not a function")]
    NotAFunction { name: String, kind: String },
    #[error("the Lua state could not be created: {0}")]
    State(String),
}

impl Failure {
    /// A short machine-readable kind for events and `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Read(_) => "read",
            Failure::Syntax(_) => "syntax",
            Failure::Runtime { .. } => "runtime",
            Failure::Budget(_) => "budget",
            Failure::Memory { .. } => "memory",
            Failure::BadReturn(_) => "bad_return",
            Failure::NotAFunction { .. } => "not_a_function",
            Failure::State(_) => "state",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// `script` is the name tracebacks use (`policies/recovery.lua`), `function` the entry
    /// point (or `load` while the file itself ran), `line` where it broke if Lua said so.
    #[error("policy `{}`: `{function}`: {source}", location(script, *line))]
    Policy {
        script: String,
        function: String,
        line: Option<u32>,
        source: Failure,
    },
}

fn location(script: &str, line: Option<u32>) -> String {
    match line {
        Some(l) => format!("{script}:{l}"),
        None => script.to_string(),
    }
}

impl Error {
    /// `function` of `script` broke (`load` while the file itself ran), at `line` if known.
    pub(super) fn new(
        script: impl Into<String>,
        function: impl Into<String>,
        line: Option<u32>,
        source: Failure,
    ) -> Error {
        Error::Policy {
            script: script.into(),
            function: function.into(),
            line,
            source,
        }
    }

    pub fn script(&self) -> &str {
        let Error::Policy { script, .. } = self;
        script
    }

    pub fn function(&self) -> &str {
        let Error::Policy { function, .. } = self;
        function
    }

    pub fn line(&self) -> Option<u32> {
        let Error::Policy { line, .. } = self;
        *line
    }

    pub fn failure(&self) -> &Failure {
        let Error::Policy { source, .. } = self;
        source
    }

    /// `policies/recovery.lua:12`, or just the file when the line is unknown.
    pub fn location(&self) -> String {
        location(self.script(), self.line())
    }

    pub fn to_json(&self) -> serde_json::Value {
        let traceback = match self.failure() {
            Failure::Runtime { traceback, .. } => traceback.clone(),
            _ => None,
        };
        json!({
            "script": self.script(), "function": self.function(), "line": self.line(),
            "kind": self.failure().kind(), "message": self.failure().to_string(),
            "traceback": traceback,
        })
    }
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The line of `script` an error message points at: `policies/x.lua:12: …`.
fn line_in(message: &str, script: &str) -> Option<u32> {
    let mut rest = message;
    while let Some(i) = rest.find(script) {
        let after = &rest[i + script.len()..];
        if let Some(digits) = after.strip_prefix(':') {
            let n: String = digits.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(line) = n.parse() {
                return Some(line);
            }
        }
        rest = after;
    }
    None
}

/// Strip `policies/x.lua:12: ` from the front of a message that already says where.
fn strip_location<'a>(message: &'a str, script: &str) -> &'a str {
    if let Some(rest) = message
        .strip_prefix(script)
        .and_then(|r| r.strip_prefix(':'))
        && let Some((digits, tail)) = rest.split_once(':')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return tail.trim_start();
    }
    message
}

/// Turn an mlua error into a [`Failure`] and the script line it points at.
pub(super) fn failure(err: &mlua::Error, script: &str, memory: usize) -> (Failure, Option<u32>) {
    match err {
        mlua::Error::SyntaxError { message, .. } => (
            Failure::Syntax(strip_location(first_line(message), script).to_string()),
            line_in(message, script),
        ),
        mlua::Error::RuntimeError(message) => {
            let (head, traceback) = match message.split_once("\nstack traceback:") {
                Some((h, t)) => (h, Some(format!("stack traceback:{t}"))),
                None => (message.as_str(), None),
            };
            (
                Failure::Runtime {
                    message: strip_location(head.trim(), script).to_string(),
                    traceback,
                },
                line_in(head, script).or_else(|| line_in(message, script)),
            )
        }
        mlua::Error::MemoryError(_) => (Failure::Memory { limit: memory }, None),
        mlua::Error::CallbackError { traceback, cause } => {
            let (inner, line) = failure(cause, script, memory);
            let line = line.or_else(|| line_in(traceback, script));
            match inner {
                Failure::Runtime { message, .. } => (
                    Failure::Runtime {
                        message,
                        traceback: Some(traceback.clone()),
                    },
                    line,
                ),
                other => (other, line),
            }
        }
        mlua::Error::WithContext { cause, .. } => failure(cause, script, memory),
        mlua::Error::ExternalError(e) => {
            if let Some(exceeded) = e.downcast_ref::<sandbox::Exceeded>() {
                let line = line_in(exceeded.at(), script);
                (Failure::Budget(exceeded.to_string()), line)
            } else {
                (
                    Failure::Runtime {
                        message: e.to_string(),
                        traceback: None,
                    },
                    None,
                )
            }
        }
        other => {
            let text = other.to_string();
            (
                Failure::Runtime {
                    message: strip_location(first_line(&text), script).to_string(),
                    traceback: None,
                },
                line_in(&text, script),
            )
        }
    }
}
