//! What a pass reports: per agent its verdict, findings, decision and what was done.

use serde::Serialize;

use super::health::Finding;
use crate::notify::Sent;
use crate::policy::UnhealthyAction;
use crate::spec::AgentSpec;

/// What one pass did for one agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentReport {
    pub agent: String,
    /// `healthy`, `suspect` (found once, to be confirmed), `unhealthy`, or `skipped`.
    pub verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Confirmed findings (all of them while `suspect`).
    pub findings: Vec<Finding>,
    /// Found for the first time along with confirmed ones: acted on if the next pass agrees.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unconfirmed: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<UnhealthyAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// What was done, e.g. `revival_attempted (started fresh by its wrapper)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_taken: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issue_url: Option<String>,
    pub notifications: Vec<Sent>,
    /// What the agent waits for, when it waits for a person.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_input: Option<crate::state::NeedsInput>,
    pub notes: Vec<String>,
    pub problems: Vec<String>,
}

impl AgentReport {
    /// A report that found nothing yet: `verdict`, with the notes observation left.
    pub(super) fn new(agent: &AgentSpec, verdict: &'static str, notes: Vec<String>) -> AgentReport {
        AgentReport {
            agent: agent.name.clone(),
            verdict,
            skipped: None,
            findings: Vec::new(),
            unconfirmed: Vec::new(),
            action: None,
            reason: None,
            decided_by: None,
            action_taken: None,
            issue_url: None,
            notifications: Vec::new(),
            needs_input: None,
            notes,
            problems: Vec::new(),
        }
    }

    /// An agent whose files could not be read in time: nothing is decided, its memory is left
    /// as it was, and the next pass tries again.
    pub(super) fn not_checked(agent: &AgentSpec, why: String) -> AgentReport {
        AgentReport {
            skipped: Some(why),
            ..AgentReport::new(agent, "skipped", Vec::new())
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ts: String,
    pub fleet: String,
    pub agents: Vec<AgentReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_pruned: Option<usize>,
    /// Why this pass did nothing: another pass (named) was running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Report {
    pub fn unhealthy(&self) -> usize {
        self.agents
            .iter()
            .filter(|a| a.verdict == "unhealthy")
            .count()
    }
}
