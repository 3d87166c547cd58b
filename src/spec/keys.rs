//! Unknown keys: every section's keys checked against the raw struct that reads it, so that
//! each misspelt key is reported (with a suggestion), not just the first.

use toml::de::{DeTable, DeValue};

use super::raw::{
    RawAgent, RawAgentSet, RawBrief, RawBudget, RawClinic, RawFleet, RawGithub, RawHost, RawLimits,
    RawNotify, RawNtfy, RawPrice, RawRestart, RawSandbox, RawSchedules, RawSource, RawSpec,
    RawTelemetry, RawThresholds, RawTmux, RawWatchdog, RawWebhook, RawWorkspace, fields_of,
};
use crate::diag::{Diagnostic, did_you_mean};

/// Sections of the document whose keys are checked, each tied to the struct that reads it.
#[derive(Clone, Copy)]
enum Section {
    Root,
    Fleet,
    Defaults,
    Agent,
    Tmux,
    Restart,
    Thresholds,
    Schedules,
    Clinic,
    Notify,
    Github,
    Webhook,
    Ntfy,
    Watchdog,
    Brief,
    Telemetry,
    Host,
    Budget,
    Workspace,
    /// `[prices]`: its keys are model names, each a `Price` table.
    Prices,
    Price,
    /// `[sandbox]`: its keys are profile names, each a `Sandbox` table.
    Sandboxes,
    Sandbox,
    Limits,
    AgentSet,
    Source,
    /// `[agent_set.template]`: the keys of [[agent]].
    Template,
}

impl Section {
    fn fields(self) -> &'static [&'static str] {
        match self {
            Section::Root => fields_of::<RawSpec>(),
            Section::Fleet => fields_of::<RawFleet>(),
            Section::Defaults | Section::Agent | Section::Template => fields_of::<RawAgent>(),
            Section::AgentSet => fields_of::<RawAgentSet>(),
            Section::Source => fields_of::<RawSource>(),
            Section::Tmux => fields_of::<RawTmux>(),
            Section::Restart => fields_of::<RawRestart>(),
            Section::Thresholds => fields_of::<RawThresholds>(),
            Section::Schedules => fields_of::<RawSchedules>(),
            Section::Clinic => fields_of::<RawClinic>(),
            Section::Notify => fields_of::<RawNotify>(),
            Section::Github => fields_of::<RawGithub>(),
            Section::Webhook => fields_of::<RawWebhook>(),
            Section::Ntfy => fields_of::<RawNtfy>(),
            Section::Watchdog => fields_of::<RawWatchdog>(),
            Section::Brief => fields_of::<RawBrief>(),
            Section::Telemetry => fields_of::<RawTelemetry>(),
            Section::Host => fields_of::<RawHost>(),
            Section::Budget => fields_of::<RawBudget>(),
            Section::Workspace => fields_of::<RawWorkspace>(),
            Section::Prices => &[],
            Section::Price => fields_of::<RawPrice>(),
            Section::Sandboxes => &[],
            Section::Sandbox => fields_of::<RawSandbox>(),
            Section::Limits => fields_of::<RawLimits>(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Section::Root => "the top level",
            Section::Fleet => "[fleet]",
            Section::Defaults => "[defaults]",
            Section::Agent => "[[agent]]",
            Section::Tmux => "the `tmux` table",
            Section::Restart => "the `restart` table",
            Section::Thresholds => "[thresholds]",
            Section::Schedules => "[schedules]",
            Section::Clinic => "[clinic]",
            Section::Notify => "[notify]",
            Section::Github => "[notify.github]",
            Section::Webhook => "[notify.webhook]",
            Section::Ntfy => "[notify.ntfy]",
            Section::Watchdog => "[watchdog]",
            Section::Brief => "[brief]",
            Section::Telemetry => "[telemetry]",
            Section::Host => "[[host]]",
            Section::Budget => "the `budget` table",
            Section::Workspace => "the `workspace` table",
            Section::Prices => "[prices]",
            Section::Price => "a [prices] table",
            Section::Sandboxes => "[sandbox]",
            Section::Sandbox => "a [sandbox] profile",
            Section::Limits => "the `limits` table",
            Section::AgentSet => "[[agent_set]]",
            Section::Source => "the `source` table of [[agent_set]]",
            Section::Template => "[agent_set.template]",
        }
    }

    fn child(self, key: &str) -> Option<Section> {
        match (self, key) {
            (Section::Root, "fleet") => Some(Section::Fleet),
            (Section::Root, "defaults") => Some(Section::Defaults),
            (Section::Root, "agent") => Some(Section::Agent),
            (Section::Root, "thresholds") => Some(Section::Thresholds),
            (Section::Root, "schedules") => Some(Section::Schedules),
            (Section::Root, "clinic") => Some(Section::Clinic),
            (Section::Root, "notify") => Some(Section::Notify),
            (Section::Root, "watchdog") => Some(Section::Watchdog),
            (Section::Root, "brief") => Some(Section::Brief),
            (Section::Root, "telemetry") => Some(Section::Telemetry),
            (Section::Root, "host") => Some(Section::Host),
            (Section::Root, "prices") => Some(Section::Prices),
            (Section::Root, "sandbox") => Some(Section::Sandboxes),
            (Section::Root, "agent_set") => Some(Section::AgentSet),
            (Section::AgentSet, "source") => Some(Section::Source),
            (Section::AgentSet, "template") => Some(Section::Template),
            (Section::Sandboxes, _) => Some(Section::Sandbox),
            (Section::Sandbox, "limits") => Some(Section::Limits),
            // Any model name.
            (Section::Prices, _) => Some(Section::Price),
            (Section::Defaults | Section::Agent | Section::Template, "budget") => {
                Some(Section::Budget)
            }
            (Section::Defaults | Section::Agent | Section::Template, "workspace") => {
                Some(Section::Workspace)
            }
            (Section::Notify, "github") => Some(Section::Github),
            (Section::Notify, "webhook") => Some(Section::Webhook),
            (Section::Notify, "ntfy") => Some(Section::Ntfy),
            (Section::Defaults | Section::Agent | Section::Template, "tmux") => Some(Section::Tmux),
            (Section::Defaults | Section::Agent | Section::Template, "restart") => {
                Some(Section::Restart)
            }
            _ => None,
        }
    }
}

/// Report every unknown key in the document, at any depth.
pub(super) fn check_all(document: &DeTable<'_>, diags: &mut Vec<Diagnostic>) {
    check_keys(document, Section::Root, diags);
}

fn check_keys(table: &DeTable<'_>, section: Section, diags: &mut Vec<Diagnostic>) {
    let known = section.fields();
    // A table whose keys are names (models), not fields.
    let named = matches!(section, Section::Prices | Section::Sandboxes);
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        if !named && !known.contains(&name) {
            let mut d = Diagnostic::new(
                format!("unknown key `{name}` in {}", section.label()),
                Some(key.span()),
            );
            d.hint = Some(match did_you_mean(name, known) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("known keys here: {}", known.join(", ")),
            });
            diags.push(d);
            continue;
        }
        let Some(child) = section.child(name) else {
            continue;
        };
        match value.get_ref() {
            DeValue::Table(t) => check_keys(t, child, diags),
            DeValue::Array(items) => {
                for item in items.iter() {
                    if let DeValue::Table(t) = item.get_ref() {
                        check_keys(t, child, diags);
                    }
                }
            }
            _ => {}
        }
    }
}
