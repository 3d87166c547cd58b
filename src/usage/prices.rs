//! What tokens cost: a built-in table per model, under the `[prices]` of phoenix.toml. A
//! model found in neither is *unpriced*: its tokens are counted and its cost is unknown, never 0.
//!
//! A model is found by its name as the CLI records it, or by that name without a dated
//! snapshot suffix (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`). There is no matching
//! by family: a model this table does not name is not guessed at.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::agent_cli::usage::Tokens;
use crate::spec::Price;

/// USD per million tokens: (model, input, output, cache write, cache read).
///
/// Standard tier, list prices, read 2026-11 from stored copies of the vendors' pages:
/// - Anthropic, platform.claude.com/docs/en/about-claude/pricing: cache writes at the 5-minute
///   rate (1-hour writes cost more), no long-context or fast-mode surcharges, no batch
///   discount. Sonnet 5.5's cache read is the one cut on 2026-10-07.
/// - OpenAI, developers.openai.com/api/docs/pricing (as quoted in June 2026) and the Codex rate
///   card of the OpenAI Help Center (checked 2026-05-13, 25 credits = $1): there is no charge
///   for writing the cache, so a cache write costs what input does.
/// - Google, ai.google.dev/gemini-api/docs/pricing (Gemini 3.1 Pro Preview as of 2026-03-28):
///   prompts up to 200k tokens; implicit caching has no write charge; thinking is output.
///
/// Everything else, or other rates (batch, priority, a gateway's), goes in `[prices]`.
const BUILT_IN: &[(&str, f64, f64, f64, f64)] = &[
    // Anthropic.
    ("claude-opus-5-5", 4.0, 20.0, 5.0, 0.20),
    ("claude-opus-5", 5.0, 25.0, 6.25, 0.50),
    ("claude-opus-4-8", 5.0, 25.0, 6.25, 0.50),
    ("claude-opus-4-7", 5.0, 25.0, 6.25, 0.50),
    ("claude-opus-4-6", 5.0, 25.0, 6.25, 0.50),
    ("claude-opus-4-5", 5.0, 25.0, 6.25, 0.50),
    ("claude-opus-4-1", 15.0, 75.0, 18.75, 1.50),
    ("claude-opus-4-0", 15.0, 75.0, 18.75, 1.50),
    ("claude-opus-4", 15.0, 75.0, 18.75, 1.50),
    ("claude-sonnet-5-5", 2.0, 10.0, 2.50, 0.10),
    ("claude-sonnet-5", 2.0, 10.0, 2.50, 0.20),
    ("claude-sonnet-4-6", 3.0, 15.0, 3.75, 0.30),
    ("claude-sonnet-4-5", 3.0, 15.0, 3.75, 0.30),
    ("claude-sonnet-4-0", 3.0, 15.0, 3.75, 0.30),
    ("claude-sonnet-4", 3.0, 15.0, 3.75, 0.30),
    ("claude-3-7-sonnet", 3.0, 15.0, 3.75, 0.30),
    ("claude-haiku-5-5", 0.10, 0.50, 0.125, 0.01),
    ("claude-haiku-4-5", 1.0, 5.0, 1.25, 0.10),
    ("claude-3-5-haiku", 0.80, 4.0, 1.0, 0.08),
    ("claude-3-haiku", 0.25, 1.25, 0.30, 0.03),
    // OpenAI.
    ("gpt-5.5", 5.0, 30.0, 5.0, 0.50),
    ("gpt-5.4", 2.50, 15.0, 2.50, 0.25),
    ("gpt-5.4-mini", 0.75, 4.50, 0.75, 0.075),
    ("gpt-5.4-nano", 0.20, 1.25, 0.20, 0.02),
    ("gpt-5.3-codex", 1.75, 14.0, 1.75, 0.175),
    ("gpt-5.2", 1.75, 14.0, 1.75, 0.175),
    ("gpt-5.2-codex", 1.75, 14.0, 1.75, 0.175),
    ("gpt-5.1", 1.25, 10.0, 1.25, 0.125),
    ("gpt-5.1-codex", 1.25, 10.0, 1.25, 0.125),
    ("gpt-5.1-codex-max", 1.25, 10.0, 1.25, 0.125),
    ("gpt-5.1-codex-mini", 0.25, 2.0, 0.25, 0.025),
    ("gpt-5", 1.25, 10.0, 1.25, 0.125),
    ("gpt-5-codex", 1.25, 10.0, 1.25, 0.125),
    ("gpt-5-mini", 0.25, 2.0, 0.25, 0.025),
    ("gpt-5-nano", 0.05, 0.40, 0.05, 0.005),
    // Google.
    ("gemini-3.1-pro-preview", 2.0, 12.0, 2.0, 0.20),
    ("gemini-2.5-pro", 1.25, 10.0, 1.25, 0.125),
    ("gemini-2.5-flash", 0.30, 2.50, 0.30, 0.03),
    ("gemini-2.5-flash-lite", 0.10, 0.40, 0.10, 0.01),
];

/// Where a price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PriceSource {
    /// `[prices]` in phoenix.toml.
    Config,
    BuiltIn,
}

/// The prices in force: phoenix.toml's `[prices]` over the built-in table.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    overrides: BTreeMap<String, Price>,
}

impl Prices {
    pub fn new(overrides: &BTreeMap<String, Price>) -> Prices {
        Prices {
            overrides: overrides.clone(),
        }
    }

    /// The price of `model`, and where it came from; `None`: unpriced.
    pub fn of(&self, model: &str) -> Option<(Price, PriceSource)> {
        let names = [Some(model), without_date(model)];
        for name in names.into_iter().flatten() {
            if let Some(p) = self.overrides.get(name) {
                return Some((*p, PriceSource::Config));
            }
        }
        names.into_iter().flatten().find_map(|name| {
            BUILT_IN.iter().find(|row| row.0 == name).map(
                |&(_, input, output, cache_write, cache_read)| {
                    let price = Price {
                        input,
                        output,
                        cache_write,
                        cache_read,
                    };
                    (price, PriceSource::BuiltIn)
                },
            )
        })
    }

    /// What `tokens` of `model` cost in USD; `None`: the model is unpriced.
    pub fn cost(&self, model: &str, tokens: &Tokens) -> Option<f64> {
        self.of(model).map(|(p, _)| cost(&p, tokens))
    }
}

/// `tokens` at `price`, in USD.
pub fn cost(price: &Price, tokens: &Tokens) -> f64 {
    let per_kind = [
        (tokens.input, price.input),
        (tokens.output, price.output),
        (tokens.cache_write, price.cache_write),
        (tokens.cache_read, price.cache_read),
    ];
    per_kind
        .iter()
        .map(|&(n, usd)| n as f64 * usd / 1_000_000.0)
        .sum()
}

/// `model` without a dated snapshot suffix (`-20250929`, `-2025-09-29`), if it has one.
fn without_date(model: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (head, tail) = model.rsplit_once('-')?;
    if tail.len() == 8 && digits(tail) {
        return Some(head);
    }
    // `-YYYY-MM-DD`: three numeric parts.
    let mut parts = model.rsplitn(4, '-');
    let (d, m, y, head) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (y.len() == 4 && m.len() == 2 && d.len() == 2 && digits(y) && digits(m) && digits(d))
        .then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input: u64, output: u64, cache_write: u64, cache_read: u64) -> Tokens {
        Tokens {
            input,
            output,
            cache_write,
            cache_read,
        }
    }

    #[test]
    fn built_in_prices_by_name_and_dated_snapshot() {
        let prices = Prices::default();
        let million = tokens(1_000_000, 1_000_000, 1_000_000, 1_000_000);
        let opus = prices.cost("claude-opus-4-6", &million).unwrap();
        assert!((opus - (5.0 + 25.0 + 6.25 + 0.5)).abs() < 1e-9, "{opus}");
        assert_eq!(
            prices.of("claude-sonnet-4-5-20250929").map(|p| p.1),
            Some(PriceSource::BuiltIn)
        );
        assert_eq!(
            prices.of("claude-opus-4-20250514").unwrap().0.input,
            15.0,
            "Opus 4, not 4.5"
        );
        assert_eq!(prices.of("gpt-4o-2024-08-06"), None);
        assert!(prices.of("gpt-5-codex").is_some());
        assert!(prices.of("gemini-3.1-pro-preview").is_some());
    }

    #[test]
    fn unknown_models_are_unpriced_never_free() {
        let prices = Prices::default();
        assert_eq!(prices.cost("claude-scripted", &tokens(10, 5, 0, 0)), None);
        assert_eq!(prices.cost("claude-opus-4-9", &tokens(10, 5, 0, 0)), None);
        assert_eq!(prices.cost("unknown", &Tokens::default()), None);
    }

    #[test]
    fn config_prices_override_the_table_and_price_new_models() {
        let mut overrides = BTreeMap::new();
        let p = |input, output| Price {
            input,
            output,
            cache_write: input,
            cache_read: input / 10.0,
        };
        overrides.insert("claude-opus-4-6".to_string(), p(1.0, 2.0));
        overrides.insert("my-model".to_string(), p(0.0, 0.0));
        let prices = Prices::new(&overrides);
        let (price, source) = prices.of("claude-opus-4-6").unwrap();
        assert_eq!((price.output, source), (2.0, PriceSource::Config));
        assert_eq!(
            prices.cost("my-model", &tokens(1000, 1000, 0, 0)),
            Some(0.0),
            "a model priced at 0 on purpose is free"
        );
        assert_eq!(
            prices.of("claude-opus-4-6-20260101").unwrap().1,
            PriceSource::Config
        );
    }

    #[test]
    fn a_date_suffix_is_only_a_date() {
        assert_eq!(
            without_date("claude-haiku-4-5-20251001"),
            Some("claude-haiku-4-5")
        );
        assert_eq!(without_date("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(without_date("gemini-2.5-pro"), None);
        assert_eq!(without_date("claude-opus-4-6"), None);
        assert_eq!(without_date("x-12345678a"), None);
    }
}
