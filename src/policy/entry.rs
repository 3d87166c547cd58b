//! The entry points a policy answers (`on_exit`, `on_unhealthy`, `diagnose`, `prescribe`),
//! each with its arguments and its built-in default, and `check`, which runs the shipped
//! fixtures through a policy chain.

use mlua::{Lua, MultiValue};
use serde::Serialize;

use super::engine::{args2, to_lua};
use super::*;

impl Policies {
    /// What the wrapper does after the agent CLI exited.
    pub fn on_exit(&self, agent: &AgentInfo, exit: &ExitInfo) -> Decided<ExitDecision> {
        self.decide_exit(Some(&agent.name), agent.policy.as_deref(), agent, exit)
    }

    /// What the watchdog does about an unhealthy agent.
    pub fn on_unhealthy(&self, agent: &AgentInfo, health: &Health) -> Decided<UnhealthyDecision> {
        self.on_unhealthy_with(agent, health, || builtin::on_unhealthy(agent, health))
    }

    /// `on_unhealthy` with any serialisable health report and the caller's own default, so
    /// the watchdog can keep its types.
    pub fn on_unhealthy_with<H: Serialize>(
        &self,
        agent: &AgentInfo,
        health: &H,
        fallback: impl FnOnce() -> UnhealthyDecision,
    ) -> Decided<UnhealthyDecision> {
        let (record, policy) = (Some(agent.name.as_str()), agent.policy.as_deref());
        self.decide_unhealthy(record, policy, agent, health, fallback)
    }

    /// Classify a failure.
    pub fn diagnose(&self, trauma: &Trauma) -> Decided<Diagnosis> {
        let agent = &trauma.agent;
        self.decide_diagnosis(Some(&agent.name), agent.policy.as_deref(), trauma)
    }

    /// Choose a treatment for a diagnosed failure.
    pub fn prescribe(&self, diagnosis: &Diagnosis, trauma: &Trauma) -> Decided<Prescription> {
        let agent = &trauma.agent;
        self.decide_prescription(
            Some(&agent.name),
            agent.policy.as_deref(),
            diagnosis,
            trauma,
        )
    }

    // The entry points asked of any policy chain: `record` and `policy` as for `decide`.

    pub(crate) fn decide_exit(
        &self,
        record: Option<&str>,
        policy: Option<&str>,
        agent: &AgentInfo,
        exit: &ExitInfo,
    ) -> Decided<ExitDecision> {
        let fallback = || builtin::on_exit(agent, exit);
        self.decide2(record, policy, "on_exit", agent, exit, fallback)
    }

    pub(crate) fn decide_unhealthy<H: Serialize>(
        &self,
        record: Option<&str>,
        policy: Option<&str>,
        agent: &AgentInfo,
        health: &H,
        fallback: impl FnOnce() -> UnhealthyDecision,
    ) -> Decided<UnhealthyDecision> {
        let health = serde_json::to_value(health).unwrap_or(serde_json::Value::Null);
        self.decide2(record, policy, "on_unhealthy", agent, &health, fallback)
    }

    pub(crate) fn decide_diagnosis(
        &self,
        record: Option<&str>,
        policy: Option<&str>,
        trauma: &Trauma,
    ) -> Decided<Diagnosis> {
        let t = trauma.clone();
        let args = move |lua: &Lua| Ok(MultiValue::from_iter([to_lua(lua, &t)?]));
        self.decide(record, policy, "diagnose", args, || {
            builtin::diagnose(trauma)
        })
    }

    pub(crate) fn decide_prescription(
        &self,
        record: Option<&str>,
        policy: Option<&str>,
        diagnosis: &Diagnosis,
        trauma: &Trauma,
    ) -> Decided<Prescription> {
        let fallback = || builtin::prescribe(diagnosis, trauma);
        self.decide2(record, policy, "prescribe", diagnosis, trauma, fallback)
    }

    /// `decide` for an entry point that takes two arguments.
    fn decide2<A, B, T>(
        &self,
        record: Option<&str>,
        policy: Option<&str>,
        function: &'static str,
        a: &A,
        b: &B,
        fallback: impl FnOnce() -> T,
    ) -> Decided<T>
    where
        A: Serialize + Clone + Send + 'static,
        B: Serialize + Clone + Send + 'static,
        T: FromPolicy + Send + 'static,
    {
        let (a, b) = (a.clone(), b.clone());
        let args = move |lua: &Lua| args2(lua, &a, &b);
        self.decide(record, policy, function, args, fallback)
    }

    /// Run every built-in fixture through the policy chain of `policy` (the default when
    /// `None`) and return every way it broke: load errors, runtime errors, bad returns,
    /// budgets. Nothing is recorded: this is `phoenix validate`.
    pub fn check(&self, policy: Option<&str>) -> Vec<Error> {
        let selector = policy.map(str::to_string);
        let mut errors = self
            .on_worker(policy, "load", move |e| e.chain_errors(selector.as_deref()))
            .unwrap_or_else(|e| vec![e]);
        if errors
            .iter()
            .any(|e| matches!(e.failure(), Failure::State(_)))
        {
            return errors;
        }
        for (name, text) in fixture::EMBEDDED {
            let fixture = match fixture::Fixture::parse(text) {
                Ok(f) => f,
                Err(e) => panic!("built-in fixture `{name}` is invalid: {e}"),
            };
            if let Some(e) = fixture::run_quiet(self, policy, &fixture).error
                && !errors.contains(&e)
            {
                errors.push(e);
            }
        }
        errors
    }
}
