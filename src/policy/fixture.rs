//! Fixtures: one entry-point call written as JSON, so a policy can be unit-tested with
//! `phoenix policy test POLICY FIXTURE.json`:
//! `{"call": "on_exit", "args": {"agent": {…}, "exit": {…}}, "expect": {"action": "fresh"}}`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::*;

/// The example fixtures shipped in policies/fixtures/ (also what `phoenix validate` runs).
pub const EMBEDDED: [(&str, &str); 9] = [
    (
        "on_exit_crash.json",
        include_str!("../../policies/fixtures/on_exit_crash.json"),
    ),
    (
        "on_exit_failed_resume.json",
        include_str!("../../policies/fixtures/on_exit_failed_resume.json"),
    ),
    (
        "on_exit_resume_killed_before_life.json",
        include_str!("../../policies/fixtures/on_exit_resume_killed_before_life.json"),
    ),
    (
        "on_exit_clean.json",
        include_str!("../../policies/fixtures/on_exit_clean.json"),
    ),
    (
        "on_unhealthy_silence.json",
        include_str!("../../policies/fixtures/on_unhealthy_silence.json"),
    ),
    (
        "diagnose_prompt_too_long.json",
        include_str!("../../policies/fixtures/diagnose_prompt_too_long.json"),
    ),
    (
        "diagnose_expired_key.json",
        include_str!("../../policies/fixtures/diagnose_expired_key.json"),
    ),
    (
        "prescribe_hallucinated_tool.json",
        include_str!("../../policies/fixtures/prescribe_hallucinated_tool.json"),
    ),
    (
        "prescribe_transient.json",
        include_str!("../../policies/fixtures/prescribe_transient.json"),
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    OnExit,
    OnUnhealthy,
    Diagnose,
    Prescribe,
}

impl Call {
    pub const NAMES: [&'static str; 4] = ["on_exit", "on_unhealthy", "diagnose", "prescribe"];

    pub fn as_str(self) -> &'static str {
        match self {
            Call::OnExit => "on_exit",
            Call::OnUnhealthy => "on_unhealthy",
            Call::Diagnose => "diagnose",
            Call::Prescribe => "prescribe",
        }
    }

    fn arg_names(self) -> &'static [&'static str] {
        match self {
            Call::OnExit => &["agent", "exit"],
            Call::OnUnhealthy => &["agent", "health"],
            Call::Diagnose => &["trauma"],
            Call::Prescribe => &["diagnosis", "trauma"],
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The arguments of one call, typed.
#[derive(Debug, Clone)]
pub enum Args {
    OnExit(AgentInfo, ExitInfo),
    OnUnhealthy(AgentInfo, Health),
    Diagnose(Trauma),
    Prescribe(Diagnosis, Trauma),
}

#[derive(Debug, Clone)]
pub struct Fixture {
    pub call: Call,
    pub args: Args,
    /// Fields the decision must have, e.g. `{"action": "fresh"}`.
    pub expect: Option<Map<String, Value>>,
    pub description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFixture {
    call: String,
    #[serde(default)]
    args: Map<String, Value>,
    #[serde(default)]
    expect: Option<Map<String, Value>>,
    #[serde(default)]
    description: Option<String>,
}

fn arg<T: for<'de> Deserialize<'de> + Default>(
    args: &Map<String, Value>,
    name: &str,
) -> Result<T, String> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("`args.{name}`: {e}")),
    }
}

impl Fixture {
    pub fn parse(text: &str) -> Result<Fixture, String> {
        let raw: RawFixture = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let call: Call = serde_json::from_value(Value::String(raw.call.clone())).map_err(|_| {
            let hint = match crate::diag::did_you_mean(&raw.call, &Call::NAMES) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("one of: {}", Call::NAMES.join(", ")),
            };
            format!("unknown call `{}` ({hint})", raw.call)
        })?;
        for key in raw.args.keys() {
            if !call.arg_names().contains(&key.as_str()) {
                return Err(format!(
                    "`args.{key}` is not an argument of `{call}` (it takes: {})",
                    call.arg_names().join(", ")
                ));
            }
        }
        let a = &raw.args;
        let args = match call {
            Call::OnExit => Args::OnExit(arg(a, "agent")?, arg(a, "exit")?),
            Call::OnUnhealthy => Args::OnUnhealthy(arg(a, "agent")?, arg(a, "health")?),
            Call::Diagnose => Args::Diagnose(arg(a, "trauma")?),
            Call::Prescribe => {
                let diagnosis = match a.get("diagnosis") {
                    Some(v) => serde_json::from_value(v.clone())
                        .map_err(|e| format!("`args.diagnosis`: {e}"))?,
                    None => return Err("`prescribe` needs `args.diagnosis`".into()),
                };
                Args::Prescribe(diagnosis, arg(a, "trauma")?)
            }
        };
        Ok(Fixture {
            call,
            args,
            expect: raw.expect,
            description: raw.description,
        })
    }
}

/// What one fixture produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub call: Call,
    pub by: String,
    pub decision: Value,
    /// Why the policy's answer was not used (the decision is then the built-in default's).
    pub error: Option<Error>,
    pub logs: Vec<String>,
    pub elapsed: Duration,
    pub instructions: u64,
    /// `expect` fields the decision does not match.
    pub mismatches: Vec<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.mismatches.is_empty()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "call": self.call, "by": self.by, "decision": self.decision,
            "fell_back": self.error.is_some(),
            "error": self.error.as_ref().map(Error::to_json),
            "logs": self.logs, "elapsed_us": self.elapsed.as_micros() as u64,
            "instructions": self.instructions, "mismatches": self.mismatches,
            "ok": self.passed(),
        })
    }
}

fn outcome<T: Serialize>(call: Call, d: Decided<T>) -> Outcome {
    Outcome {
        call,
        by: d.by,
        decision: serde_json::to_value(&d.value).unwrap_or(Value::Null),
        error: d.error,
        logs: d.logs,
        elapsed: Duration::ZERO,
        instructions: d.instructions,
        mismatches: Vec::new(),
    }
}

/// Run a fixture against `policy` (the default chain when `None`) without recording events.
pub fn run_quiet(policies: &Policies, policy: Option<&str>, fixture: &Fixture) -> Outcome {
    let (mut result, elapsed) = timed(|| match &fixture.args {
        Args::OnExit(agent, exit) => {
            let d = policies.decide_exit(None, policy, agent, exit);
            outcome(Call::OnExit, d)
        }
        Args::OnUnhealthy(agent, health) => {
            let fallback = || builtin::on_unhealthy(agent, health);
            let d = policies.decide_unhealthy(None, policy, agent, health, fallback);
            outcome(Call::OnUnhealthy, d)
        }
        Args::Diagnose(trauma) => {
            let d = policies.decide_diagnosis(None, policy, trauma);
            outcome(Call::Diagnose, d)
        }
        Args::Prescribe(diagnosis, trauma) => {
            let d = policies.decide_prescription(None, policy, diagnosis, trauma);
            outcome(Call::Prescribe, d)
        }
    });
    result.elapsed = elapsed;
    if let Some(expect) = &fixture.expect {
        result.mismatches = mismatches(&result.decision, expect);
    }
    result
}

/// The `expect` fields that differ from the decision. Numbers compare by value (`10` is
/// `10.0`).
pub fn mismatches(decision: &Value, expect: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, want) in expect {
        let got = decision.get(key).unwrap_or(&Value::Null);
        let same = match (got, want) {
            (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
            (a, b) => a == b,
        };
        if !same {
            out.push(format!("`{key}`: expected {want}, got {got}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_fixture_parses_and_passes_with_the_defaults() {
        let policies = Policies::new(None);
        for (name, text) in EMBEDDED {
            let fixture = Fixture::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let out = run_quiet(&policies, None, &fixture);
            assert!(out.passed(), "{name}: {:?}", out.to_json());
            assert_ne!(out.by, BUILTIN, "{name}: decided by the Lua default");
        }
    }

    #[test]
    fn bad_fixtures_say_what_is_wrong() {
        let e = Fixture::parse(r#"{"call": "on_exti", "args": {}}"#).unwrap_err();
        assert!(e.contains("did you mean `on_exit`?"), "{e}");
        let e = Fixture::parse(r#"{"call": "on_exit", "args": {"health": {}}}"#).unwrap_err();
        assert!(
            e.contains("`args.health` is not an argument of `on_exit`"),
            "{e}"
        );
        let e =
            Fixture::parse(r#"{"call": "on_exit", "args": {"exit": {"code": "x"}}}"#).unwrap_err();
        assert!(e.starts_with("`args.exit`"), "{e}");
    }
}
