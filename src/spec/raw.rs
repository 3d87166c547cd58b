//! The phoenix.toml document exactly as written: every field optional, spans kept for errors.
//! Unknown keys are not rejected by serde here but by `check_keys` in the parent module, which
//! reads the same field lists: that way every unknown key is reported, not just the first.
//! The same structs give `phoenix schema` its JSON Schema, so the schema cannot drift either.

use std::collections::BTreeMap;
use std::ops::Range;

use schemars::JsonSchema;
use serde::Deserialize;

/// `toml::Spanned` (a value and where it was written) that also describes itself in the JSON
/// Schema as the value it wraps; toml's own type has no `JsonSchema`.
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
}

impl<T: JsonSchema> JsonSchema for Spanned<T> {
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

        impl JsonSchema for Whole<$t> {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                <$t>::schema_name()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <$t>::json_schema(generator)
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

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSpec {
    #[serde(default)]
    pub fleet: RawFleet,
    #[serde(default)]
    pub defaults: RawAgent,
    #[serde(default)]
    pub thresholds: RawThresholds,
    #[serde(default)]
    pub schedules: RawSchedules,
    #[serde(default)]
    pub clinic: RawClinic,
    #[serde(default)]
    pub notify: RawNotify,
    #[serde(default)]
    pub watchdog: RawWatchdog,
    #[serde(default)]
    pub brief: RawBrief,
    #[serde(default, rename = "agent")]
    pub agents: Vec<Spanned<RawAgent>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawFleet {
    pub name: Option<Spanned<String>>,
    pub state_dir: Option<Spanned<String>>,
    pub tmux_socket: Option<Spanned<String>>,
    pub reconcile_interval: Option<Spanned<String>>,
}

/// Used both for `[defaults]` and for each `[[agent]]`; `name` is only allowed in the latter.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawAgent {
    pub name: Option<Spanned<String>>,
    pub cli: Option<Spanned<String>>,
    pub command: Option<Spanned<String>>,
    /// How to resume a session (for `custom` CLIs, or to override the built-in form);
    /// `{session_id}` is replaced by the recorded id.
    pub resume_command: Option<Spanned<String>>,
    pub workdir: Option<Spanned<String>>,
    pub env: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    pub tmux: Option<RawTmux>,
    pub enabled: Option<bool>,
    pub restart: Option<RawRestart>,
    pub guard_structured_files: Option<bool>,
    pub tap: Option<bool>,
    pub notify: Option<Spanned<Vec<String>>>,
    pub policy: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawTmux {
    pub session: Option<Spanned<String>>,
    pub window: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawRestart {
    pub cooldown: Option<Spanned<String>>,
    pub backoff_max: Option<Spanned<String>>,
    pub max_crashes: Option<Spanned<Whole<u32>>>,
    pub crash_window: Option<Spanned<String>>,
    pub life_deadline: Option<Spanned<String>>,
    pub continue_prompt: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawThresholds {
    pub silence: Option<Spanned<String>>,
    pub error_cascade: Option<Spanned<Whole<u32>>>,
    pub runaway: Option<Spanned<String>>,
    pub stale_after: Option<Spanned<String>>,
    pub resolved_retention: Option<Spanned<String>>,
    pub repeat: Option<Spanned<Whole<u32>>>,
    pub max_tokens: Option<Spanned<Whole<u64>>>,
    pub events_retention: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSchedules {
    pub watchdog: Option<Spanned<String>>,
    pub brief: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct RawClinic {
    pub max_recoveries: Option<Spanned<Whole<u32>>>,
    pub diagnose_command: Option<Spanned<Vec<String>>>,
    pub diagnose_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawNotify {
    pub github: Option<Spanned<RawGithub>>,
    pub webhook: Option<Spanned<RawWebhook>>,
    pub command: Option<Spanned<Vec<String>>>,
    pub issue_cooldown: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawGithub {
    pub repo: Option<Spanned<String>>,
    pub labels: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawWebhook {
    pub url_env: Option<Spanned<String>>,
    pub format: Option<Spanned<String>>,
    pub chat_id: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub retries: Option<Spanned<Whole<u32>>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawBrief {
    pub command: Option<Spanned<Vec<String>>>,
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawWatchdog {
    pub max_revivals: Option<Spanned<Whole<u32>>>,
    pub screen_patterns: Option<Spanned<BTreeMap<String, Vec<String>>>>,
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
