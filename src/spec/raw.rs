//! The phoenix.toml document exactly as written: every field optional, spans kept for errors.
//! Unknown keys are not rejected by serde here but by the sibling `keys` module, which reads
//! the same field lists: that way every unknown key is reported, not just the first.
//! The same structs give `phoenix schema` its JSON Schema, so the schema cannot drift either.

use std::collections::BTreeMap;
use std::ops::Range;

use schemars::JsonSchema;
use serde::Deserialize;

/// `toml::Spanned` (a value and where it was written) that also describes itself in the JSON
/// Schema as the value it wraps (see `schema_of_wrapped`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(transparent)]
pub struct Spanned<T>(toml::Spanned<T>);

impl<T> Spanned<T> {
    pub fn get_ref(&self) -> &T {
        self.0.get_ref()
    }

    pub fn span(&self) -> Range<usize> {
        self.0.span()
    }

    /// `value` written where this was (a template's rendering keeps its template's place).
    pub fn with(&self, value: T) -> Spanned<T> {
        Spanned::from_parts(self.span(), value)
    }

    pub fn from_parts(span: Range<usize>, value: T) -> Spanned<T> {
        Spanned(toml::Spanned::new(span, value))
    }
}

/// A count: a whole number that fits `T`. Its errors say "a whole number", not serde's Rust
/// type name (`expected u32`), which meant nothing to someone editing phoenix.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Whole<T>(pub T);

macro_rules! whole {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for Whole<$t> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = Whole<$t>;

                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(f, "a whole number from 0 to {}", <$t>::MAX)
                    }

                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                        <$t>::try_from(v).map(Whole).map_err(|_| {
                            E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                        })
                    }

                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                        <$t>::try_from(v)
                            .map(Whole)
                            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
                    }
                }
                d.deserialize_u64(V)
            }
        }
    };
}

impl<T: Copy> Spanned<Whole<T>> {
    pub fn number(&self) -> T {
        self.get_ref().0
    }
}

whole!(u32);
whole!(u64);

/// Both wrappers describe themselves in the JSON Schema as the value they wrap (toml's
/// `Spanned` has no `JsonSchema` of its own).
macro_rules! schema_of_wrapped {
    ($($wrapper:ident),*) => {$(
        impl<T: JsonSchema> JsonSchema for $wrapper<T> {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                T::schema_name()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                T::json_schema(generator)
            }
        }
    )*};
}

schema_of_wrapped!(Spanned, Whole);

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSpec {
    #[serde(default)]
    /// The fleet: its name, state dir, tmux socket, reconcile interval.
    pub fleet: RawFleet,
    #[serde(default)]
    /// Inherited by every [[agent]] (every agent key but `name`).
    pub defaults: RawAgent,
    #[serde(default)]
    /// What the watchdog counts as unhealthy.
    pub thresholds: RawThresholds,
    #[serde(default)]
    /// When `phoenix run` runs the watchdog and the brief: 5-field cron, @hourly, @daily, … or "off".
    pub schedules: RawSchedules,
    #[serde(default)]
    /// Recovery after a crash: limits and an optional diagnostician.
    pub clinic: RawClinic,
    #[serde(default)]
    /// Where reports and failure messages go.
    pub notify: RawNotify,
    #[serde(default)]
    /// How the watchdog heals.
    pub watchdog: RawWatchdog,
    #[serde(default)]
    /// How briefs are generated.
    pub brief: RawBrief,
    #[serde(default)]
    /// Export of events over OpenTelemetry (OTLP/HTTP). Off unless `otlp_endpoint` is set.
    pub telemetry: RawTelemetry,
    /// The agents: one [[agent]] table each.
    #[serde(default, rename = "agent")]
    pub agents: Vec<Spanned<RawAgent>>,
    /// Other machines, reached over ssh, each running its own phoenix for the agents declared
    /// with its name in `host`: one [[host]] table each.
    #[serde(default, rename = "host")]
    pub hosts: Vec<Spanned<RawHost>>,
    /// Prices per model in USD per million tokens, over phoenix's built-in table: one table
    /// per model name, e.g. [prices."my-model"].
    #[serde(default)]
    pub prices: BTreeMap<String, Spanned<RawPrice>>,
    /// Sandbox profiles: one table per profile name, e.g. [sandbox.strict]; an agent (or
    /// [defaults]) names one with `sandbox = "strict"`. Its CLI and hooks then run inside
    /// bubblewrap with only what the profile allows.
    #[serde(default)]
    pub sandbox: BTreeMap<String, Spanned<RawSandbox>>,
    /// Agents made from a source of work items (issues, a JSON file): one [[agent_set]]
    /// table each, its `template` an [[agent]] whose strings are templates over `item`.
    #[serde(default, rename = "agent_set")]
    pub agent_sets: Vec<Spanned<RawAgentSet>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawAgentSet {
    /// The set's name (letters, digits, `_`, `-`); required.
    pub name: Option<Spanned<String>>,
    /// Where the items come from: { command = [argv…] } (a program printing a JSON array of
    /// objects, run without a shell) or { file = "work.json" } (the same array in a file).
    pub source: Option<Spanned<RawSource>>,
    /// Each item's key, a template over `item`, e.g. "{{ item.number }}"; required. Keys are
    /// unique and valid names.
    pub key: Option<Spanned<String>>,
    /// At most this many of the set's agents at once; the rest wait. Default: no limit.
    pub max: Option<Spanned<Whole<u32>>>,
    /// How often `phoenix run` reads the source again, e.g. "2m" (the default); at least "10s".
    pub every: Option<Spanned<String>>,
    /// What the agent is told about its item in its startup context, a template over `item`
    /// and `key`. Default: the item's title, url and body.
    pub context: Option<Spanned<String>>,
    /// Run once when an agent of the set enters safe mode: argv, each a template over `item`
    /// and `key`, never through a shell.
    pub on_failed: Option<Spanned<Vec<String>>>,
    /// Run once when an agent of the set reports done (`->continuity:done`, or its CLI's own
    /// end of task): argv templates like `on_failed`.
    pub on_done: Option<Spanned<Vec<String>>>,
    /// The agent each item gets: the keys of [[agent]], every string a template over `item`
    /// and `key`; `name` is required.
    pub template: Option<Spanned<RawAgent>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSource {
    /// A program and its arguments printing a JSON array of objects on stdout (at most 8 MiB,
    /// within 60 s), e.g. ["gh", "issue", "list", "--json", "number,title,body,url"].
    pub command: Option<Spanned<Vec<String>>>,
    /// A file holding a JSON array of objects (relative to this file).
    pub file: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSandbox {
    /// Paths visible read-only. Default ["/"]: the whole filesystem, less what is hidden.
    pub read: Option<Spanned<Vec<String>>>,
    /// Paths writable. Default ["{workdir}"]; the agent's own state dir, a private /tmp and
    /// the CLI's own session files are always writable.
    pub write: Option<Spanned<Vec<String>>>,
    /// Paths hidden (an empty directory or file in their place), on top of the defaults:
    /// ~/.ssh, ~/.aws, ~/.gnupg, ~/.config/gh, ~/.netrc, ~/.docker, the fleet's state and
    /// every other agent's state dir and workdir, phoenix.toml.
    pub hide: Option<Spanned<Vec<String>>>,
    /// Paths read-only even inside a writable path, on top of the defaults: the hook and
    /// settings files phoenix wrote for the CLI, .git/hooks, .git/config.
    pub protect: Option<Spanned<Vec<String>>>,
    /// "none" (no network), "allow" (only the hosts in `allow`, through phoenix's proxy) or
    /// "host" (any host, through phoenix's proxy). Default "none". The sandbox always has a
    /// network namespace of its own.
    pub network: Option<Spanned<String>>,
    /// With network = "allow": host names (`api.anthropic.com`), `*.domain` or `host:port`.
    pub allow: Option<Spanned<Vec<String>>>,
    /// Limits for the agent's processes: { processes, memory = "4G", open_files }.
    pub limits: Option<RawLimits>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawLimits {
    /// Processes and threads at once (a cgroup `pids.max` where writable, else RLIMIT_NPROC).
    pub processes: Option<Spanned<Whole<u64>>>,
    /// Memory, e.g. "4G" or "512M" (a cgroup `memory.max` where writable, else RLIMIT_DATA).
    pub memory: Option<Spanned<String>>,
    /// Open files per process (RLIMIT_NOFILE).
    pub open_files: Option<Spanned<Whole<u64>>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawPrice {
    /// USD per million input tokens (required).
    pub input: Option<Spanned<f64>>,
    /// USD per million output tokens, reasoning included (required).
    pub output: Option<Spanned<f64>>,
    /// USD per million tokens written to a prompt cache. Default: the input price.
    pub cache_write: Option<Spanned<f64>>,
    /// USD per million tokens read from a prompt cache. Default: the input price.
    pub cache_read: Option<Spanned<f64>>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawBudget {
    /// Tokens per day (all kinds) before the agent is stopped.
    pub tokens_per_day: Option<Spanned<Whole<u64>>>,
    /// Estimated USD per day before the agent is stopped.
    pub usd_per_day: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawHost {
    /// The host's name, used by the agents' `host` key (letters, digits, `_`, `-`).
    pub name: Option<Spanned<String>>,
    /// What `ssh` is given: `user@host`, a ~/.ssh/config alias or `ssh://user@host:port`.
    pub ssh: Option<Spanned<String>>,
    /// Where the host keeps its slice of the fleet. Default "~/.phoenix-hosts/<fleet name>".
    pub dir: Option<Spanned<String>>,
    /// The phoenix program on the host. Default: where `phoenix hosts install` put it, else
    /// "phoenix" (on the remote PATH).
    pub phoenix: Option<Spanned<String>>,
    /// The host's private tmux server (`tmux -L`). Default: phoenix-<name>-<hash of its dir>.
    pub tmux_socket: Option<Spanned<String>>,
    /// The phoenix `phoenix hosts install` copies there, on this machine, relative to this
    /// file: a static build for a host whose glibc is older than this machine's
    /// (`target/x86_64-unknown-linux-musl/release/phoenix`). Default: the phoenix running.
    pub binary: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawFleet {
    /// The fleet's name and default tmux session (letters, digits, `_`, `-`). Default "phoenix".
    pub name: Option<Spanned<String>>,
    /// Where phoenix keeps state, relative to this file. Default ".phoenix".
    pub state_dir: Option<Spanned<String>>,
    /// The private tmux server (`tmux -L`). Default phoenix-<name>-<hash of this file's path>.
    pub tmux_socket: Option<Spanned<String>>,
    /// How often `phoenix run` reconciles, e.g. "30s" (the default); at least "1s".
    pub reconcile_interval: Option<Spanned<String>>,
    /// What `phoenix run` does with an edited phoenix.toml: "apply" (reconcile toward it at
    /// once) or "plan" (log the plan, wait for `phoenix apply`). Default "apply".
    pub reload: Option<Spanned<String>>,
    /// An ssh config file for reaching the [[host]]s (`ssh -F`). Default: ssh's own.
    pub ssh_config: Option<Spanned<String>>,
}

/// Used both for `[defaults]` and for each `[[agent]]`; `name` is only allowed in the latter.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawAgent {
    /// The agent's name (letters, digits, `_`, `-`); required in [[agent]].
    pub name: Option<Spanned<String>>,
    /// claude | codex | gemini | pi | custom (the default).
    pub cli: Option<Spanned<String>>,
    /// The base command, e.g. "claude --model opus"; default: the cli's name.
    pub command: Option<Spanned<String>>,
    /// How to resume a session (for `custom` CLIs, or to override the built-in form);
    /// `{session_id}` is replaced by the recorded id.
    pub resume_command: Option<Spanned<String>>,
    /// Where the agent runs (relative to this file; default: its directory).
    pub workdir: Option<Spanned<String>>,
    /// A git worktree of its own instead of a `workdir`: { repo, branch, base, worktrees }.
    pub workspace: Option<Spanned<RawWorkspace>>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    /// The agent's tmux session and window.
    pub tmux: Option<RawTmux>,
    /// false keeps the agent declared but stopped. Default true.
    pub enabled: Option<bool>,
    /// Restart behaviour after a crash.
    pub restart: Option<RawRestart>,
    /// Restore .json/.toml/.yaml files an edit left unparsable. Default false.
    pub guard_structured_files: Option<bool>,
    /// Read the pane's output for ->continuity: commands. Default true.
    pub tap: Option<bool>,
    /// This agent's channels: github, webhook, command. Default: all configured.
    pub notify: Option<Spanned<Vec<String>>>,
    /// A Lua policy file of its own. Default: policies/recovery.lua.
    pub policy: Option<Spanned<String>>,
    /// The [[host]] the agent runs on; absent: this machine. Not allowed in [defaults].
    pub host: Option<Spanned<String>>,
    /// What the agent may spend per day (the local calendar day) before the watchdog stops
    /// it for a person.
    pub budget: Option<RawBudget>,
    /// The [sandbox.NAME] profile its CLI runs inside; "none": no sandbox (overrides
    /// [defaults]). Default: none.
    pub sandbox: Option<Spanned<String>>,
    /// What the agent may do through phoenix's MCP server (`phoenix mcp`): { allow = [...] }.
    pub mcp: Option<RawMcp>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawMcp {
    /// read | message | control. Default ["read", "message"].
    pub allow: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawWorkspace {
    /// The git repository (relative to this file); required.
    pub repo: Option<Spanned<String>>,
    /// The agent's branch; `{name}` is the agent's name. Default "agent/{name}".
    pub branch: Option<Spanned<String>>,
    /// What a new branch starts from. Default: the branch the repo has checked out.
    pub base: Option<Spanned<String>>,
    /// The directory holding the worktrees, one per agent (relative to the repo).
    /// Default ".worktrees" inside the repo.
    pub worktrees: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawTmux {
    /// The tmux session. Default: the fleet name.
    pub session: Option<Spanned<String>>,
    /// The tmux window. Default: the agent name.
    pub window: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawRestart {
    /// Which exits are restarted: "on-failure" (a crash; a clean exit waits for a person),
    /// "always" (a clean exit too), "never". Default "on-failure".
    pub when: Option<Spanned<String>>,
    /// Wait before a restart, doubled per crash up to backoff_max. Default "10s", at least "100ms".
    pub cooldown: Option<Spanned<String>>,
    /// The longest wait between restarts. Default "5m".
    pub backoff_max: Option<Spanned<String>>,
    /// Crashes within crash_window before safe mode. Default 5.
    pub max_crashes: Option<Spanned<Whole<u32>>>,
    /// The window max_crashes counts in. Default "1h", at least "1m".
    pub crash_window: Option<Spanned<String>>,
    /// A start must show life within this long. Default "60s".
    pub life_deadline: Option<Spanned<String>>,
    /// Typed into a hooked CLI after an interruption; "" waits for a person.
    pub continue_prompt: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawThresholds {
    /// No sign of life for this long while working is unhealthy. Default "10m".
    pub silence: Option<Spanned<String>>,
    /// Consecutive failed tool calls that make a cascade. Default 5.
    pub error_cascade: Option<Spanned<Whole<u32>>>,
    /// Working this long without finishing a turn. Default "2h".
    pub runaway: Option<Spanned<String>>,
    /// Open loops older than this are stale. Default "14d".
    pub stale_after: Option<Spanned<String>>,
    /// Resolved items are kept this long. Default "7d".
    pub resolved_retention: Option<Spanned<String>>,
    /// The same tool call this many times in a row is a loop. Default 5.
    pub repeat: Option<Spanned<Whole<u32>>>,
    /// Tokens per session before the watchdog stops the agent. Default: no limit.
    pub max_tokens: Option<Spanned<Whole<u64>>>,
    /// critical_events.jsonl keeps this long. Default "30d".
    pub events_retention: Option<Spanned<String>>,
    /// Idle at its prompt with open loops this long: the agent needs a person. Default "30m".
    pub waiting: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSchedules {
    /// Default "*/5 * * * *".
    pub watchdog: Option<Spanned<String>>,
    /// Default "0 6 * * *".
    pub brief: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct RawClinic {
    /// Recoveries per task before safe mode. Default 2.
    pub max_recoveries: Option<Spanned<Whole<u32>>>,
    /// Gets the failure on stdin, answers with a JSON diagnosis.
    pub diagnose_command: Option<Spanned<Vec<String>>>,
    /// Default "2m".
    pub diagnose_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawNotify {
    /// Issues through the gh CLI.
    pub github: Option<Spanned<RawGithub>>,
    /// An HTTP POST (json, slack or telegram body).
    pub webhook: Option<Spanned<RawWebhook>>,
    /// Any program; the message arrives on its stdin.
    pub command: Option<Spanned<Vec<String>>>,
    /// At most one new GitHub issue per fleet within this long. Default "1h".
    pub issue_cooldown: Option<Spanned<String>>,
    /// A push to an ntfy topic.
    pub ntfy: Option<Spanned<RawNtfy>>,
    /// At most one "needs a human" notification per agent within this long. Default "10m".
    pub input_cooldown: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawNtfy {
    /// The topic URL, e.g. "https://ntfy.sh/my-fleet" (this or `url_env`).
    pub url: Option<Spanned<String>>,
    /// The environment variable holding the topic URL (this or `url`).
    pub url_env: Option<Spanned<String>>,
    /// min | low | default | high | urgent, or 1 to 5. Default "high".
    pub priority: Option<Spanned<String>>,
    /// Where tapping the notification leads. Default: the dashboard of a running `phoenix serve`.
    pub click: Option<Spanned<String>>,
    /// The environment variable holding an access token (sent as a bearer token).
    pub token_env: Option<Spanned<String>>,
    /// How long one POST may take. Default "10s".
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawGithub {
    /// owner/name (required).
    pub repo: Option<Spanned<String>>,
    /// Labels for each issue.
    pub labels: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawWebhook {
    /// The environment variable holding the URL (required).
    pub url_env: Option<Spanned<String>>,
    /// json (the default) | slack | telegram.
    pub format: Option<Spanned<String>>,
    /// The Telegram chat (required for telegram).
    pub chat_id: Option<Spanned<String>>,
    /// How long one POST may take. Default "10s".
    pub timeout: Option<Spanned<String>>,
    /// Extra attempts after a failed POST, 0 to 10. Default 1.
    pub retries: Option<Spanned<Whole<u32>>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawBrief {
    /// Gets the prompt on stdin; answers with the brief. Default: the built-in generator.
    pub command: Option<Spanned<Vec<String>>>,
    /// Default "5m".
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawWatchdog {
    /// Revivals per task. Default 1.
    pub max_revivals: Option<Spanned<Whole<u32>>>,
    /// Extra stuck-screen phrases per CLI (claude, codex, gemini, pi, custom, all).
    pub screen_patterns: Option<Spanned<BTreeMap<String, Vec<String>>>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawTelemetry {
    /// The OTLP/HTTP base URL (http or https), e.g. "http://localhost:4318"; phoenix posts
    /// protobuf to its /v1/logs, /v1/traces and /v1/metrics. Default: no export.
    pub otlp_endpoint: Option<Spanned<String>>,
    /// How often the fleet's metrics are sampled and exported. Default "60s".
    pub metrics_interval: Option<Spanned<String>>,
}

/// The field names serde knows for a struct, read from its `Deserialize` impl so that the
/// key check below can never drift from the structs above.
pub fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldRecorder(&mut fields));
    fields
}

struct FieldRecorder<'a>(&'a mut &'static [&'static str]);

#[derive(Debug)]
struct Recorded;

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fields recorded")
    }
}
impl std::error::Error for Recorded {}
impl serde::de::Error for Recorded {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Recorded
    }
}

impl<'de> serde::Deserializer<'de> for FieldRecorder<'_> {
    type Error = Recorded;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Recorded> {
        Err(Recorded)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Recorded> {
        *self.0 = fields;
        Err(Recorded)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_come_from_serde() {
        assert_eq!(
            fields_of::<RawSchedules>(),
            &["watchdog", "brief"] as &[&str]
        );
        assert!(fields_of::<RawSpec>().contains(&"agent"));
    }
}
