//! From the raw document to the effective `Spec`: defaults applied, every value checked, each
//! problem a diagnostic pointing at where it was written. The value checks shared by every
//! section live here; the sections and the agents have their own files.

mod agent;
mod hosts;
mod intake;
mod sandbox;
mod sections;
mod usage;
mod workspace;

use std::collections::HashMap;
use std::fmt::Display;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{RawAgent, RawSchedules, RawSpec, Spanned, Whole};
use super::{
    AgentSpec, Fleet, Floor, HostSpec, LoadOptions, RemoteAgent, RestartSettings, Schedule,
    Schedules, Spec, duration, expand_path,
};
use crate::diag::{Diagnostic, FileDiagnostics, Located};

/// The effective spec of `raw`, read from `source` (the text of `file`); every error goes to
/// `diags`, and the spec is only meant to be used when there is none.
pub use intake::{DEFAULT_EVERY, ItemLists};

pub(super) fn spec(
    raw: RawSpec,
    source: &str,
    file: &Path,
    options: LoadOptions,
    schedules: bool,
    items: Option<&ItemLists>,
    diags: &mut Vec<Diagnostic>,
) -> Spec {
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    Validator {
        diags,
        warnings: Vec::new(),
        source,
        dir: &dir,
        options,
        schedules,
        sandbox_profiles: Default::default(),
        items,
    }
    .spec(raw, file)
}

/// A count that has no limits of its own.
fn count<T: Copy>(value: &Option<Spanned<Whole<T>>>, default: T) -> T {
    value.as_ref().map_or(default, |v| v.number())
}

struct Validator<'a> {
    diags: &'a mut Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    source: &'a str,
    dir: &'a Path,
    options: LoadOptions,
    /// Parse `[schedules]` (everything but hooks).
    schedules: bool,
    /// `[sandbox.NAME]` profiles, checked before the agents that name them.
    sandbox_profiles: sandbox::Profiles,
    /// Item lists expanded instead of the stored ones (a list being checked before it is stored).
    items: Option<&'a ItemLists>,
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A valid agent (or session, window) name: letters, digits, `_` and `-`, at most 64. Names
/// end up in tmux targets, paths and hook commands, so anything else is refused.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub const NAME_HINT: &str = "use only letters, digits, `_` and `-` (at most 64 characters): names end up in tmux targets, paths and hook commands";

impl Validator<'_> {
    /// A path from the spec: `~` is the home directory, relative means next to phoenix.toml.
    fn path(&self, text: &str) -> PathBuf {
        expand_path(text, self.dir)
    }

    fn error(&mut self, message: String, span: Option<Range<usize>>, hint: &str) {
        self.diags
            .push(Diagnostic::new(message, span).with_hint(hint.to_string()));
    }

    fn warn(&mut self, message: String, span: Option<Range<usize>>, hint: &str) {
        self.warnings
            .push(Diagnostic::new(message, span).with_hint(hint.to_string()));
    }

    fn duration(
        &mut self,
        value: &Option<Spanned<String>>,
        what: &str,
        default: Duration,
    ) -> Duration {
        match value {
            None => default,
            Some(v) => match duration::parse(v.get_ref()) {
                Ok(d) => d,
                Err(e) => {
                    self.error(format!("{what}: {e}"), Some(v.span()), duration::HINT);
                    default
                }
            },
        }
    }

    /// A duration with a floor: zero (or anything below `floor`) would switch a protection
    /// off or make phoenix spin, so it is refused with the minimum and what the key does.
    fn duration_min(
        &mut self,
        value: &Option<Spanned<String>>,
        what: &str,
        default: Duration,
        floor: Floor,
    ) -> Duration {
        let d = self.duration(value, what, default);
        match value {
            Some(v) if d < floor.min => {
                let min = duration::format(floor.min);
                self.error(
                    format!(
                        "`{what}` = \"{}\" is too short: the minimum is {min}",
                        v.get_ref()
                    ),
                    Some(v.span()),
                    &format!("use at least \"{min}\": {}", floor.why),
                );
                default
            }
            _ => d,
        }
    }

    /// A count with a floor (see [`Validator::duration_min`]) and a ceiling.
    fn count_in<T: Copy + PartialOrd + Display>(
        &mut self,
        value: &Option<Spanned<Whole<T>>>,
        what: &str,
        default: T,
        range: RangeInclusive<T>,
        why: &str,
    ) -> T {
        value.as_ref().map_or(default, |v| {
            self.bounded(v, what, range, why).unwrap_or(default)
        })
    }

    /// A written count within `range`; `None` once one outside it is reported.
    fn bounded<T: Copy + PartialOrd + Display>(
        &mut self,
        value: &Spanned<Whole<T>>,
        what: &str,
        range: RangeInclusive<T>,
        why: &str,
    ) -> Option<T> {
        let n = value.number();
        if range.contains(&n) {
            return Some(n);
        }
        let bound = if n < *range.start() {
            format!("at least {}", range.start())
        } else {
            format!("at most {}", range.end())
        };
        self.error(format!("`{what}` must be {bound}"), Some(value.span()), why);
        None
    }

    /// A list naming a program and its arguments; `None` when absent, or once an empty one
    /// (no program) is reported.
    fn program(
        &mut self,
        value: &Option<Spanned<Vec<String>>>,
        empty: &str,
        hint: &str,
    ) -> Option<Vec<String>> {
        let list = value.as_ref()?;
        if list.get_ref().first().is_none_or(|p| p.trim().is_empty()) {
            self.error(empty.to_string(), Some(list.span()), hint);
            return None;
        }
        Some(list.get_ref().clone())
    }

    fn name(&mut self, value: &Spanned<String>, what: &str) -> String {
        if !valid_name(value.get_ref()) {
            self.error(
                format!("{what} `{}` is not a valid name", value.get_ref()),
                Some(value.span()),
                NAME_HINT,
            );
        }
        value.get_ref().clone()
    }

    fn schedule(
        &mut self,
        value: &Option<Spanned<String>>,
        what: &str,
        default: &str,
    ) -> Option<Schedule> {
        let (text, span) = match value {
            Some(v) if v.get_ref().trim().is_empty() || v.get_ref() == "off" => return None,
            Some(v) => (v.get_ref().as_str(), Some(v.span())),
            None => (default, None),
        };
        match Schedule::parse(text) {
            Ok(s) => Some(s),
            Err(e) => {
                self.error(
                    format!("schedule `{what}`: {e}"),
                    span,
                    "standard cron has 5 fields: minute (0-59) hour (0-23) day-of-month (1-31) month (1-12) day-of-week (0-7, 0 and 7 are Sunday), e.g. \"*/5 * * * *\", or a nickname: @hourly, @daily, @weekly, @monthly, @yearly; use \"off\" to disable",
                );
                None
            }
        }
    }

    fn spec(mut self, raw: RawSpec, file: &Path) -> Spec {
        let fleet = self.fleet(&raw.fleet, file);
        let thresholds = self.thresholds(&raw.thresholds);
        let schedules = self.schedules(&raw.schedules);
        let clinic = self.clinic(&raw.clinic);
        let notify = self.notify(&raw.notify);
        let watchdog = self.watchdog(&raw.watchdog);
        let brief = self.brief(&raw.brief);
        let telemetry = self.telemetry(&raw.telemetry);
        let hosts = self.hosts(&raw.hosts, &fleet.name);
        self.sandbox_profiles = self.sandboxes(&raw.sandbox);
        let (agent_sets, generated, retired) = self.agent_sets(&raw, &fleet);
        let (agents, remote_agents) = self.agents(&raw, &fleet, &hosts, generated);
        let retired = retired
            .into_iter()
            .filter(|r| !agents.iter().any(|a| a.name == r.agent))
            .collect();
        let prices = self.prices(&raw.prices);
        Spec {
            warnings: self.located_warnings(file),
            file: file.to_path_buf(),
            dir: self.dir.to_path_buf(),
            fleet,
            thresholds,
            schedules,
            clinic,
            notify,
            watchdog,
            brief,
            telemetry,
            agents,
            hosts,
            remote_agents,
            prices,
            agent_sets,
            retired,
            by_name: Default::default(),
        }
    }

    /// Hooks leave `[schedules]` unparsed: they never schedule anything.
    fn schedules(&mut self, raw: &RawSchedules) -> Schedules {
        if !self.schedules {
            return Schedules {
                watchdog: None,
                brief: None,
            };
        }
        Schedules {
            watchdog: self.schedule(&raw.watchdog, "watchdog", "*/5 * * * *"),
            brief: self.schedule(&raw.brief, "brief", "0 6 * * *"),
        }
    }

    /// Every valid `[[agent]]` with `[defaults]` applied, each with a name and a tmux window
    /// of its own.
    ///
    /// The agents of another host are checked as far as this machine can (their files are
    /// the host's to check) and come back apart: they never start here.
    fn agents(
        &mut self,
        raw: &RawSpec,
        fleet: &Fleet,
        hosts: &[HostSpec],
        generated: Vec<intake::Generated>,
    ) -> (Vec<AgentSpec>, Vec<RemoteAgent>) {
        if let Some(name) = &raw.defaults.name {
            self.error(
                "`name` is not allowed in [defaults]".into(),
                Some(name.span()),
                "each [[agent]] needs its own name",
            );
        }
        if let Some(host) = &raw.defaults.host {
            self.error(
                "`host` is not allowed in [defaults]".into(),
                Some(host.span()),
                "give each [[agent]] that runs on another machine its own `host`",
            );
        }
        let default_restart =
            self.restart(raw.defaults.restart.as_ref(), &RestartSettings::default());
        let mut taken = Taken::default();
        let (mut agents, mut remote) = (Vec::new(), Vec::new());
        let written = raw.agents.iter().map(|a| (a, None));
        let made = generated.iter().map(|g| (&g.raw, Some(&g.origin)));
        for (raw_agent, origin) in written.chain(made) {
            let errors_before = self.diags.len();
            let agent = self.one_agent(raw_agent, raw, fleet, hosts, &default_restart, &mut taken);
            // An agent made from an item: its errors say which set and which item.
            if let Some(origin) = origin {
                for d in &mut self.diags[errors_before..] {
                    d.message = format!(
                        "agent_set `{}`, item `{}`: {}",
                        origin.set, origin.key, d.message
                    );
                }
            }
            match agent {
                Some((agent, Some(host))) => remote.push(RemoteAgent {
                    name: agent.name,
                    host,
                    enabled: agent.enabled,
                }),
                Some((mut agent, None)) => {
                    agent.origin = origin.cloned();
                    agents.push(agent);
                }
                None => {}
            }
        }
        (agents, remote)
    }

    /// One agent checked and its name, window and branch claimed, with the host it runs on.
    fn one_agent(
        &mut self,
        raw_agent: &Spanned<RawAgent>,
        raw: &RawSpec,
        fleet: &Fleet,
        hosts: &[HostSpec],
        default_restart: &RestartSettings,
        taken: &mut Taken,
    ) -> Option<(AgentSpec, Option<String>)> {
        {
            // The name is claimed before the agent's values are checked: a second `a` is
            // reported with every other error of either agent, in the same run.
            let name_free = self.claim_name(taken, raw_agent);
            let host = self.agent_host(raw_agent.get_ref(), hosts);
            let options = self.options;
            if host.is_some() {
                self.options.check_filesystem = false;
            }
            let agent = self.agent(
                raw_agent.get_ref(),
                raw_agent.span(),
                &raw.defaults,
                fleet,
                default_restart,
            );
            self.options = options;
            let agent = agent.filter(|_| name_free)?;
            if !self.claim_window(taken, &agent, raw_agent, host.as_deref())
                || !self.claim_branch(taken, &agent, raw_agent, host.as_deref())
            {
                return None;
            }
            Some((agent, host))
        }
    }

    /// Whether the name written in `raw` is still free (an agent without one has nothing to
    /// claim: that is reported on its own). An earlier agent with errors of its own still
    /// holds its name, so a duplicate is reported whatever else is wrong with either.
    fn claim_name(&mut self, taken: &mut Taken, raw: &Spanned<RawAgent>) -> bool {
        let Some(name) = &raw.get_ref().name else {
            return true;
        };
        if let Some(first) = taken.names.get(name.get_ref()) {
            let (line, _) = crate::diag::line_col(self.source, first.start);
            self.diags.push(
                Diagnostic::new(
                    format!("duplicate agent name `{}`", name.get_ref()),
                    Some(name.span()),
                )
                .with_hint(format!(
                    "first defined on line {line}; agent names must be unique"
                )),
            );
            return false;
        }
        taken.names.insert(name.get_ref().clone(), name.span());
        true
    }

    /// Whether `agent` may join the fleet: an earlier agent must not have its tmux window.
    /// Reported at the name.
    fn claim_window(
        &mut self,
        taken: &mut Taken,
        agent: &AgentSpec,
        raw: &Spanned<RawAgent>,
        host: Option<&str>,
    ) -> bool {
        let name_span = raw.get_ref().name.as_ref().map(|n| n.span());
        // Each host has its own tmux server: a window is taken per host.
        let window = (
            host.map(str::to_string),
            agent.session.clone(),
            agent.window.clone(),
        );
        if let Some(other) = taken.windows.get(&window) {
            self.diags.push(
                Diagnostic::new(
                    format!(
                        "agent `{}` uses tmux window `{}:{}`, already used by agent `{other}`",
                        agent.name, window.1, window.2
                    ),
                    name_span,
                )
                .with_hint("give each agent its own `tmux = { session, window }`"),
            );
            return false;
        }
        taken.windows.insert(window, agent.name.clone());
        true
    }

    /// The warnings with their lines and columns, as `Spec::warnings` keeps them.
    fn located_warnings(&mut self, file: &Path) -> Vec<Located> {
        if self.warnings.is_empty() {
            return Vec::new();
        }
        FileDiagnostics {
            file: file.to_path_buf(),
            source: self.source.to_string(),
            diagnostics: std::mem::take(&mut self.warnings),
        }
        .located()
    }
}

/// What the agents validated so far hold: where each name was written, and which agent has
/// each tmux `(session, window)`.
#[derive(Default)]
struct Taken {
    names: HashMap<String, Range<usize>>,
    /// Keyed by host (`None`: this machine), session and window.
    windows: HashMap<(Option<String>, String, String), String>,
    /// Keyed by host, repository and branch: the agent whose worktree has that branch.
    branches: HashMap<(Option<String>, PathBuf, String), String>,
}
