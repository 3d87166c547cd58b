//! Tokens and cost per agent: read from each CLI's own session record (`agent_cli::usage`),
//! kept in an incremental per-agent ledger (`ledger`, each byte of a session file read once),
//! priced per model (`prices`: a built-in table under phoenix.toml's `[prices]`), and summed
//! per agent and per day (`report`). The watchdog's spend and budget checks, `phoenix status`
//! and `phoenix usage` all read this one ledger.
//!
//! Days are local calendar days (the time zone phoenix runs in); the ledger keeps hours.

pub mod ledger;
pub mod prices;
pub mod report;
pub mod source;

use std::collections::BTreeMap;

use serde::Serialize;

pub use crate::agent_cli::usage::Tokens;
pub use ledger::{Update, update};
pub use prices::Prices;

/// Tokens of every kind, with their sum (as JSON documents show them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counted {
    #[serde(flatten)]
    pub tokens: Tokens,
    pub total: u64,
}

impl From<Tokens> for Counted {
    fn from(tokens: Tokens) -> Counted {
        Counted {
            tokens,
            total: tokens.total(),
        }
    }
}

/// Tokens of several models and what they cost: the priced models' cost, and the models
/// without a price (their tokens are counted, their cost is unknown: never taken as 0).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spent {
    pub tokens: Counted,
    /// USD of the priced models; `None` when no model of these is priced.
    pub cost_usd: Option<f64>,
    pub unpriced_models: Vec<String>,
}

impl Spent {
    /// The sum of `by_model`, priced with `prices`.
    pub fn of(by_model: &BTreeMap<String, Tokens>, prices: &Prices) -> Spent {
        let mut tokens = Tokens::default();
        let mut cost: Option<f64> = None;
        let mut unpriced = Vec::new();
        for (model, t) in by_model {
            tokens.add(t);
            match prices.cost(model, t) {
                Some(usd) => *cost.get_or_insert(0.0) += usd,
                None => unpriced.push(model.clone()),
            }
        }
        Spent {
            tokens: tokens.into(),
            cost_usd: cost.map(round_usd),
            unpriced_models: unpriced,
        }
    }

    /// This and `other` together.
    pub fn plus(&self, other: &Spent) -> Spent {
        let mut tokens = self.tokens.tokens;
        tokens.add(&other.tokens.tokens);
        let cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(round_usd(a.unwrap_or(0.0) + b.unwrap_or(0.0))),
        };
        let mut unpriced_models = self.unpriced_models.clone();
        for m in &other.unpriced_models {
            if !unpriced_models.contains(m) {
                unpriced_models.push(m.clone());
            }
        }
        Spent {
            tokens: tokens.into(),
            cost_usd,
            unpriced_models,
        }
    }

    /// `$1.23`, `$1.23 + unpriced`, or `unpriced`; `-` for nothing spent.
    pub fn cost_text(&self) -> String {
        match (self.cost_usd, self.unpriced_models.is_empty()) {
            (None, true) => "-".into(),
            (None, false) => "unpriced".into(),
            (Some(usd), true) => usd_text(usd),
            (Some(usd), false) => format!("{} + unpriced", usd_text(usd)),
        }
    }
}

/// One agent's usage today, as `phoenix status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Today {
    /// The local day (`YYYY-MM-DD`).
    pub day: String,
    #[serde(flatten)]
    pub spent: Spent,
}

impl Today {
    pub fn of(update: &Update, prices: &Prices) -> Today {
        Today {
            day: update.day.clone(),
            spent: Spent::of(&update.today, prices),
        }
    }
}

/// USD to the micro-dollar: sums of many small costs print as they should (0.3, not
/// 0.30000000000000004).
pub fn round_usd(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

/// `$0.0123`, `$1.23`, `$1,234.50`: cents, or four decimals below a dollar.
pub fn usd_text(usd: f64) -> String {
    if usd > 0.0 && usd < 1.0 {
        return format!("${usd:.4}");
    }
    let cents = (usd * 100.0).round() as u64;
    format!("${}.{:02}", thousands(cents / 100), cents % 100)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.2M`, `34.5k`, `812`: a token count at a glance.
pub fn short_count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}

fn zone() -> jiff::tz::TimeZone {
    jiff::tz::TimeZone::system()
}

/// The local day (`YYYY-MM-DD`) of a time (seconds since the epoch).
pub fn local_day(at: i64) -> String {
    jiff::Timestamp::from_second(at)
        .map(|t| t.to_zoned(zone()).date().to_string())
        .unwrap_or_default()
}

/// The start of the local hour a time falls in (seconds since the epoch).
pub fn hour_start(at: i64) -> i64 {
    jiff::Timestamp::from_second(at)
        .ok()
        .and_then(|t| {
            let z = t.to_zoned(zone());
            z.with()
                .minute(0)
                .second(0)
                .subsec_nanosecond(0)
                .build()
                .ok()
        })
        .map_or(at - at.rem_euclid(3600), |z| z.timestamp().as_second())
}

/// The start of the local day a time falls in (seconds since the epoch).
pub fn day_start(at: i64) -> i64 {
    jiff::Timestamp::from_second(at)
        .ok()
        .and_then(|t| t.to_zoned(zone()).start_of_day().ok())
        .map_or(at - at.rem_euclid(86_400), |z| z.timestamp().as_second())
}

fn timestamp(at: i64) -> String {
    jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn seconds(ts: &str) -> Option<i64> {
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpriced_models_are_named_not_counted_as_free() {
        let mut by_model = BTreeMap::new();
        let t = |input| Tokens {
            input,
            ..Tokens::default()
        };
        by_model.insert("claude-opus-4-6".to_string(), t(1_000_000));
        by_model.insert("claude-scripted".to_string(), t(10));
        let spent = Spent::of(&by_model, &Prices::default());
        assert_eq!(spent.tokens.total, 1_000_010);
        assert_eq!(spent.cost_usd, Some(5.0));
        assert_eq!(spent.unpriced_models, ["claude-scripted"]);
        assert_eq!(spent.cost_text(), "$5.00 + unpriced");
        by_model.remove("claude-opus-4-6");
        let spent = Spent::of(&by_model, &Prices::default());
        assert_eq!(
            (spent.cost_usd, spent.cost_text()),
            (None, "unpriced".into())
        );
        assert_eq!(
            Spent::of(&BTreeMap::new(), &Prices::default()).cost_text(),
            "-"
        );
    }

    #[test]
    fn amounts_for_people() {
        assert_eq!(usd_text(0.01234), "$0.0123");
        assert_eq!(usd_text(1234.5), "$1,234.50");
        assert_eq!(usd_text(0.0), "$0.00");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(short_count(34_500), "34.5k");
        assert_eq!(short_count(812), "812");
        assert_eq!(round_usd(0.1 + 0.2), 0.3);
    }

    #[test]
    fn hours_and_days_are_local() {
        let at = "2026-11-25T12:34:56Z".parse::<jiff::Timestamp>().unwrap();
        let hour = hour_start(at.as_second());
        assert!(hour <= at.as_second() && at.as_second() - hour < 3600);
        assert_eq!(hour % 60, 0);
        assert!(day_start(at.as_second()) <= hour);
        assert_eq!(
            local_day(day_start(at.as_second())),
            local_day(at.as_second())
        );
    }
}
