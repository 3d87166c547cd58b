//! Validation of the fleet-wide sections: `[fleet]`, `[thresholds]`, the `restart` tables,
//! `[clinic]`, `[notify]`, `[watchdog]`, `[brief]` and `[telemetry]`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::Validator;
use crate::diag::suggest;
use crate::spec::raw::{
    RawBrief, RawClinic, RawFleet, RawNotify, RawNtfy, RawRestart, RawTelemetry, RawThresholds,
    RawWatchdog, RawWebhook, Spanned,
};
use crate::spec::{
    BriefSettings, Cli, ClinicSettings, Fleet, GithubNotify, MAX_WEBHOOK_RETRIES, NotifySettings,
    NtfyNotify, Reload, RestartSettings, RestartWhen, TelemetrySettings, Thresholds,
    WatchdogSettings, WebhookFormat, WebhookNotify, duration, fleet_id, floors,
};

impl Validator<'_> {
    pub(super) fn brief(&mut self, raw: &RawBrief) -> BriefSettings {
        let d = BriefSettings::default();
        let command = self.program(
            &raw.command,
            "[brief]: `command` is empty",
            "the program and its arguments, e.g. [\"claude\", \"-p\"]; leave it out for the built-in generator",
        );
        BriefSettings {
            command,
            timeout: self.duration_min(&raw.timeout, "timeout", d.timeout, floors::TIMEOUT),
        }
    }

    pub(super) fn telemetry(&mut self, raw: &RawTelemetry) -> TelemetrySettings {
        let otlp_endpoint = raw.otlp_endpoint.as_ref().and_then(|e| {
            match otlp_endpoint(e.get_ref()) {
                Ok(url) => Some(url),
                Err(why) => {
                    self.error(
                        format!("[telemetry]: `otlp_endpoint` {why}"),
                        Some(e.span()),
                        "the OTLP/HTTP base URL of a collector, e.g. \"http://localhost:4318\"; phoenix posts to its /v1/logs, /v1/traces and /v1/metrics",
                    );
                    None
                }
            }
        });
        let metrics_interval = self.duration_min(
            &raw.metrics_interval,
            "metrics_interval",
            TelemetrySettings::default().metrics_interval,
            floors::METRICS_INTERVAL,
        );
        TelemetrySettings {
            otlp_endpoint,
            metrics_interval,
        }
    }

    pub(super) fn notify(&mut self, raw: &RawNotify) -> NotifySettings {
        let d = NotifySettings::default();
        let github = raw.github.as_ref().and_then(|g| {
            let repo = g.get_ref().repo.as_ref();
            let valid = repo.is_some_and(|r| {
                let parts: Vec<&str> = r.get_ref().split('/').collect();
                parts.len() == 2
                    && parts.iter().all(|p| {
                        !p.is_empty()
                            && p.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    })
            });
            if !valid {
                self.error(
                    "[notify.github]: `repo` must be `owner/name`".into(),
                    Some(repo.map(|r| r.span()).unwrap_or(g.span())),
                    "e.g. github = { repo = \"acme/fleet\" }; issues are created with the gh CLI",
                );
                return None;
            }
            Some(GithubNotify {
                repo: repo?.get_ref().clone(),
                labels: g.get_ref().labels.clone().unwrap_or_default(),
            })
        });
        let webhook = raw.webhook.as_ref().and_then(|w| self.webhook(w));
        let command = self.program(
            &raw.command,
            "[notify]: `command` is empty",
            "the program and its arguments, e.g. [\"notify-send\", \"phoenix\"]; it gets the message on stdin",
        );
        let ntfy = raw.ntfy.as_ref().and_then(|n| self.ntfy(n));
        NotifySettings {
            github,
            webhook,
            command,
            issue_cooldown: self.duration_min(
                &raw.issue_cooldown,
                "issue_cooldown",
                d.issue_cooldown,
                floors::ISSUE_COOLDOWN,
            ),
            ntfy,
            input_cooldown: self.duration_min(
                &raw.input_cooldown,
                "input_cooldown",
                d.input_cooldown,
                floors::INPUT_COOLDOWN,
            ),
        }
    }

    fn ntfy(&mut self, raw: &Spanned<RawNtfy>) -> Option<NtfyNotify> {
        let n = raw.get_ref();
        let url = match &n.url {
            Some(u) if !is_http_url(u.get_ref()) => {
                self.error(
                    format!(
                        "[notify.ntfy]: `url` = \"{}\" is not an http(s) URL",
                        u.get_ref()
                    ),
                    Some(u.span()),
                    "the topic's URL, e.g. url = \"https://ntfy.sh/my-fleet-alerts\"",
                );
                return None;
            }
            other => other.as_ref().map(|u| u.get_ref().clone()),
        };
        let url_env = match &n.url_env {
            Some(v) if !super::is_env_name(v.get_ref()) => {
                self.error(
                    "[notify.ntfy]: `url_env` must name an environment variable".into(),
                    Some(v.span()),
                    "e.g. url_env = \"PHOENIX_NTFY_URL\" (for a topic whose name is its secret)",
                );
                return None;
            }
            other => other.as_ref().map(|v| v.get_ref().clone()),
        };
        if url.is_none() && url_env.is_none() {
            self.error(
                "[notify.ntfy]: no topic: give `url` or `url_env`".into(),
                Some(raw.span()),
                "e.g. ntfy = { url = \"https://ntfy.sh/my-fleet-alerts\" }, or url_env = \"PHOENIX_NTFY_URL\" for a secret topic",
            );
            return None;
        }
        let priority = match n.priority.as_ref() {
            None => 4,
            Some(p) => match ntfy_priority(p.get_ref()) {
                Some(level) => level,
                None => {
                    self.error(
                        format!("[notify.ntfy]: unknown priority `{}`", p.get_ref()),
                        Some(p.span()),
                        "one of min, low, default, high, urgent (or 1 to 5)",
                    );
                    return None;
                }
            },
        };
        let click = match n.click.as_ref() {
            Some(c) if !is_http_url(c.get_ref()) => {
                self.error(
                    format!("[notify.ntfy]: `click` = \"{}\" is not an http(s) URL", c.get_ref()),
                    Some(c.span()),
                    "where tapping the notification leads, e.g. the dashboard: click = \"https://fleet.example.com/\"",
                );
                return None;
            }
            other => other.map(|c| c.get_ref().clone()),
        };
        let token_env = match n.token_env.as_ref() {
            Some(t) if !super::is_env_name(t.get_ref()) => {
                self.error(
                    "[notify.ntfy]: `token_env` must name an environment variable".into(),
                    Some(t.span()),
                    "the token is a secret: put it in the environment, e.g. token_env = \"PHOENIX_NTFY_TOKEN\"",
                );
                return None;
            }
            other => other.map(|t| t.get_ref().clone()),
        };
        Some(NtfyNotify {
            url,
            url_env,
            priority,
            click,
            token_env,
            timeout: self.duration_min(
                &n.timeout,
                "timeout",
                Duration::from_secs(10),
                floors::TIMEOUT,
            ),
        })
    }

    fn webhook(&mut self, raw: &Spanned<RawWebhook>) -> Option<WebhookNotify> {
        let w = raw.get_ref();
        let url_env = match &w.url_env {
            Some(v) if super::is_env_name(v.get_ref()) => v.get_ref().clone(),
            other => {
                self.error(
                    "[notify.webhook]: `url_env` must name an environment variable".into(),
                    Some(other.as_ref().map(|v| v.span()).unwrap_or(raw.span())),
                    "the URL is a secret: put it in the environment, e.g. url_env = \"PHOENIX_WEBHOOK_URL\"",
                );
                return None;
            }
        };
        let format = match w.format.as_ref().map(|f| (f.get_ref().as_str(), f.span())) {
            None | Some(("json", _)) => WebhookFormat::Json,
            Some(("slack", _)) => WebhookFormat::Slack,
            Some(("telegram", _)) => WebhookFormat::Telegram,
            Some((other, span)) => {
                self.error(
                    format!("[notify.webhook]: unknown format `{other}`"),
                    Some(span),
                    &suggest(other, &["json", "slack", "telegram"]),
                );
                return None;
            }
        };
        if format == WebhookFormat::Telegram && w.chat_id.is_none() {
            self.error(
                "[notify.webhook]: format `telegram` needs `chat_id`".into(),
                Some(raw.span()),
                "the chat the bot writes to, e.g. chat_id = \"-1001234567\"",
            );
            return None;
        }
        Some(WebhookNotify {
            url_env,
            format,
            chat_id: w.chat_id.as_ref().map(|c| c.get_ref().clone()),
            timeout: self.duration_min(
                &w.timeout,
                "timeout",
                Duration::from_secs(10),
                floors::TIMEOUT,
            ),
            // Each retry waits longer and blocks the watchdog pass: a huge count would hang it.
            retries: self.count_in(
                &w.retries,
                "retries",
                1,
                0..=MAX_WEBHOOK_RETRIES,
                "extra attempts after a failed POST (default 1)",
            ),
        })
    }

    pub(super) fn watchdog(&mut self, raw: &RawWatchdog) -> WatchdogSettings {
        let d = WatchdogSettings::default();
        let mut screen_patterns = BTreeMap::new();
        if let Some(p) = &raw.screen_patterns {
            for (cli, phrases) in p.get_ref() {
                // Every CLI's name, from the one table of them, and `all`.
                let keys: Vec<&str> = Cli::NAMES.iter().copied().chain(["all"]).collect();
                if !keys.contains(&cli.as_str()) {
                    self.error(
                        format!("[watchdog] screen_patterns: unknown CLI `{cli}`"),
                        Some(p.span()),
                        &suggest(cli, &keys),
                    );
                    continue;
                }
                if phrases.iter().any(|s| s.trim().is_empty()) {
                    self.error(
                        format!(
                            "[watchdog] screen_patterns.{cli}: an empty phrase matches every screen"
                        ),
                        Some(p.span()),
                        "remove the empty string",
                    );
                    continue;
                }
                screen_patterns.insert(cli.clone(), phrases.clone());
            }
        }
        WatchdogSettings {
            max_revivals: super::count(&raw.max_revivals, d.max_revivals),
            screen_patterns,
        }
    }

    pub(super) fn clinic(&mut self, raw: &RawClinic) -> ClinicSettings {
        let d = ClinicSettings::default();
        let diagnose_command = self.program(
            &raw.diagnose_command,
            "`diagnose_command` is empty",
            "the program and its arguments, e.g. [\"claude\", \"-p\"]; leave it out to diagnose by patterns",
        );
        ClinicSettings {
            max_recoveries: super::count(&raw.max_recoveries, d.max_recoveries),
            diagnose_command,
            diagnose_timeout: self.duration_min(
                &raw.diagnose_timeout,
                "diagnose_timeout",
                d.diagnose_timeout,
                floors::TIMEOUT,
            ),
        }
    }

    pub(super) fn fleet(&mut self, raw: &RawFleet, file: &Path) -> Fleet {
        let name = match &raw.name {
            Some(n) => self.name(n, "fleet name"),
            None => "phoenix".to_string(),
        };
        let id = fleet_id(&name, file);
        let state_dir = match &raw.state_dir {
            Some(d) if d.get_ref().trim().is_empty() => {
                self.error(
                    "`state_dir` is empty".into(),
                    Some(d.span()),
                    "leave it out to use `.phoenix` next to phoenix.toml",
                );
                self.dir.join(".phoenix")
            }
            Some(d) => self.path(d.get_ref()),
            None => self.dir.join(".phoenix"),
        };
        let socket = match &raw.tmux_socket {
            Some(s) => self.tmux_socket(s),
            None => format!("phoenix-{id}"),
        };
        Fleet {
            legacy_socket: raw.tmux_socket.is_none().then(|| format!("phoenix-{name}")),
            name,
            id,
            state_dir,
            socket,
            reconcile_interval: self.reconcile_interval(&raw.reconcile_interval),
            reload: self.reload(&raw.reload),
            ssh_config: raw.ssh_config.as_ref().map(|p| self.path(p.get_ref())),
        }
    }

    fn reload(&mut self, value: &Option<Spanned<String>>) -> Reload {
        let Some(written) = value else {
            return Reload::default();
        };
        Reload::parse(written.get_ref()).unwrap_or_else(|| {
            self.error(
                format!("`reload` cannot be `{}`", written.get_ref()),
                Some(written.span()),
                &format!(
                    "{} (\"apply\": the daemon reconciles toward an edited phoenix.toml at once; \"plan\": it logs the plan and waits for `phoenix apply`)",
                    suggest(written.get_ref(), &Reload::NAMES)
                ),
            );
            Reload::default()
        })
    }

    /// A socket name is a plain file name in tmux's socket directory.
    pub(super) fn tmux_socket(&mut self, value: &Spanned<String>) -> String {
        let s = value.get_ref();
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            && !s.starts_with('.');
        if !ok {
            self.error(
                format!("tmux socket name `{s}` is not valid"),
                Some(value.span()),
                "a socket name is a plain file name: letters, digits, `_`, `-`, `.`",
            );
        }
        s.clone()
    }

    /// Unlike the protections of the other floors, a too short interval only costs CPU:
    /// phoenix raises it to the floor and says so instead of refusing the file.
    fn reconcile_interval(&mut self, value: &Option<Spanned<String>>) -> Duration {
        let interval = self.duration(value, "reconcile_interval", Duration::from_secs(30));
        let floor = floors::RECONCILE_INTERVAL;
        let Some(v) = value.as_ref().filter(|_| interval < floor.min) else {
            return interval;
        };
        let min = duration::format(floor.min);
        self.warn(
            format!(
                "`reconcile_interval` = \"{}\" is below the minimum: phoenix uses {min}",
                v.get_ref()
            ),
            Some(v.span()),
            &format!("write at least \"{min}\": {}", floor.why),
        );
        floor.min
    }

    pub(super) fn thresholds(&mut self, raw: &RawThresholds) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            silence: self.duration_min(&raw.silence, "silence", d.silence, floors::SILENCE),
            error_cascade: self.count_in(
                &raw.error_cascade,
                "error_cascade",
                d.error_cascade,
                1..=u32::MAX,
                "failed tool calls in a row beyond this many are a cascade (default 5); 0 would revive an agent for a single failed call",
            ),
            runaway: self.duration_min(&raw.runaway, "runaway", d.runaway, floors::RUNAWAY),
            stale_after: self.duration_min(
                &raw.stale_after,
                "stale_after",
                d.stale_after,
                floors::STALE_AFTER,
            ),
            resolved_retention: self.duration_min(
                &raw.resolved_retention,
                "resolved_retention",
                d.resolved_retention,
                floors::RESOLVED_RETENTION,
            ),
            repeat: self.count_in(
                &raw.repeat,
                "repeat",
                d.repeat,
                2..=u32::MAX,
                "how many identical tool calls in a row make a loop (default 5)",
            ),
            max_tokens: raw.max_tokens.as_ref().and_then(|v| {
                self.bounded(
                    v,
                    "max_tokens",
                    1..=u64::MAX,
                    "tokens per session before the watchdog stops the agent; leave it out for no limit",
                )
            }),
            waiting: self.duration_min(&raw.waiting, "waiting", d.waiting, floors::WAITING),
            events_retention: self.duration_min(
                &raw.events_retention,
                "events_retention",
                d.events_retention,
                floors::EVENTS_RETENTION,
            ),
        }
    }

    pub(super) fn restart(
        &mut self,
        raw: Option<&RawRestart>,
        base: &RestartSettings,
    ) -> RestartSettings {
        let Some(raw) = raw else {
            return base.clone();
        };
        let max_crashes = self.count_in(
            &raw.max_crashes,
            "max_crashes",
            base.max_crashes,
            1..=u32::MAX,
            "the number of crashes within `crash_window` before safe mode",
        );
        let when = match &raw.when {
            None => base.when,
            Some(written) => match RestartWhen::parse(written.get_ref()) {
                Some(when) => when,
                None => {
                    self.error(
                        format!("`restart.when` cannot be `{}`", written.get_ref()),
                        Some(written.span()),
                        &format!(
                            "{} (\"on-failure\": a crash is restarted, a clean exit waits for a person; \"always\": every exit is; \"never\": none is)",
                            suggest(written.get_ref(), &RestartWhen::NAMES)
                        ),
                    );
                    base.when
                }
            },
        };
        let restart = RestartSettings {
            when,
            cooldown: self.duration_min(&raw.cooldown, "cooldown", base.cooldown, floors::COOLDOWN),
            backoff_max: self.duration_min(
                &raw.backoff_max,
                "backoff_max",
                base.backoff_max,
                floors::BACKOFF_MAX,
            ),
            max_crashes,
            crash_window: self.duration_min(
                &raw.crash_window,
                "crash_window",
                base.crash_window,
                floors::CRASH_WINDOW,
            ),
            life_deadline: self.duration_min(
                &raw.life_deadline,
                "life_deadline",
                base.life_deadline,
                floors::LIFE_DEADLINE,
            ),
            continue_prompt: raw
                .continue_prompt
                .as_ref()
                .map(|p| p.get_ref().trim().to_string())
                .unwrap_or_else(|| base.continue_prompt.clone()),
        };
        // Said where one of the two is written, so an agent inheriting both is not warned
        // about again.
        if restart.cooldown > restart.backoff_max
            && let Some(written) = raw.cooldown.as_ref().or(raw.backoff_max.as_ref())
        {
            let (cooldown, backoff_max) = (
                duration::format(restart.cooldown),
                duration::format(restart.backoff_max),
            );
            self.warn(
                format!(
                    "`cooldown` ({cooldown}) is longer than `backoff_max` ({backoff_max}): every restart waits {backoff_max}"
                ),
                Some(written.span()),
                "the wait starts at `cooldown` and doubles per crash up to `backoff_max`: raise `backoff_max` or lower `cooldown`",
            );
        }
        restart
    }
}

/// An OTLP/HTTP base URL as written, checked: http or https with a host, no query; without its
/// trailing `/` (the signal paths are appended to it).
pub(crate) fn otlp_endpoint(text: &str) -> Result<String, String> {
    let text = text.trim();
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(format!("must be http or https, not `{other}`")),
        None => return Err(format!("`{text}` has no scheme (http:// or https://)")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("`{text}` has no host"));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!("`{text}` must not have a query or fragment"));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// An `http://` or `https://` URL with a host.
fn is_http_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|r| {
        !r.is_empty() && !r.starts_with('/') && !r.chars().any(char::is_whitespace)
    })
}

/// ntfy's priority names and numbers (1 = min … 5 = urgent, `max` for 5 too).
pub(crate) fn ntfy_priority(text: &str) -> Option<u8> {
    Some(match text.trim().to_ascii_lowercase().as_str() {
        "min" | "1" => 1,
        "low" | "2" => 2,
        "default" | "3" => 3,
        "high" | "4" => 4,
        "urgent" | "max" | "5" => 5,
        _ => return None,
    })
}

#[cfg(test)]
mod telemetry_tests {
    use super::otlp_endpoint;

    #[test]
    fn an_otlp_endpoint_is_an_http_or_https_url_with_a_host() {
        assert_eq!(
            otlp_endpoint("http://localhost:4318/").unwrap(),
            "http://localhost:4318"
        );
        assert_eq!(
            otlp_endpoint("https://otel.example.com/prefix").unwrap(),
            "https://otel.example.com/prefix"
        );
        for bad in [
            "localhost:4318",
            "grpc://x:4317",
            "ftp://x",
            "http://",
            "http://x/?a=1",
            "not a url",
            "",
        ] {
            assert!(otlp_endpoint(bad).is_err(), "{bad}");
        }
    }
}
