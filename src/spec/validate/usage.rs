//! Validation of what spending is about: `[prices]` (USD per million tokens per model) and an
//! agent's `budget` (per day, inherited from `[defaults]` key by key).

use std::collections::BTreeMap;

use super::Validator;
use crate::spec::raw::{RawBudget, RawPrice, Spanned};
use crate::spec::{Budget, Price};

const PRICE_HINT: &str = "USD per million tokens, e.g. input = 3.0 (0 for a free model)";

impl Validator<'_> {
    /// `[prices]`: every model's table, with `cache_write` and `cache_read` defaulting to the
    /// input price (a model without a prompt cache bills those tokens as input).
    pub(super) fn prices(
        &mut self,
        raw: &BTreeMap<String, Spanned<RawPrice>>,
    ) -> BTreeMap<String, Price> {
        let mut prices = BTreeMap::new();
        for (model, table) in raw {
            let p = table.get_ref();
            let what = |key: &str| format!("prices.\"{model}\".{key}");
            let mut required = |v: &Option<Spanned<f64>>, key: &str| match v {
                Some(v) => self.non_negative(v, &what(key), PRICE_HINT),
                None => {
                    self.error(
                        format!("[prices.\"{model}\"] has no `{key}`"),
                        Some(table.span()),
                        "give both `input` and `output` (cache prices default to the input price)",
                    );
                    None
                }
            };
            let (input, output) = (required(&p.input, "input"), required(&p.output, "output"));
            let mut optional = |v: &Option<Spanned<f64>>, key: &str| match v {
                Some(v) => self.non_negative(v, &what(key), PRICE_HINT),
                None => input,
            };
            let cache_write = optional(&p.cache_write, "cache_write");
            let cache_read = optional(&p.cache_read, "cache_read");
            if model.trim().is_empty() {
                self.error(
                    "[prices] has a table without a model name".into(),
                    Some(table.span()),
                    "name the model as its CLI records it, e.g. [prices.\"claude-opus-4-6\"]",
                );
                continue;
            }
            if let (Some(input), Some(output), Some(cache_write), Some(cache_read)) =
                (input, output, cache_write, cache_read)
            {
                let price = Price {
                    input,
                    output,
                    cache_write,
                    cache_read,
                };
                prices.insert(model.clone(), price);
            }
        }
        prices
    }

    /// The agent's budget: each key its own, else `[defaults]`'s; `None` when neither sets one.
    pub(super) fn budget(
        &mut self,
        own: Option<&RawBudget>,
        defaults: Option<&RawBudget>,
        name: &str,
    ) -> Option<Budget> {
        let tokens = own
            .and_then(|b| b.tokens_per_day.as_ref())
            .or_else(|| defaults.and_then(|b| b.tokens_per_day.as_ref()));
        let usd = own
            .and_then(|b| b.usd_per_day.as_ref())
            .or_else(|| defaults.and_then(|b| b.usd_per_day.as_ref()));
        let hint = format!("what agent `{name}` may spend in a day before the watchdog stops it");
        let hint = hint.as_str();
        let budget = Budget {
            tokens_per_day: tokens
                .and_then(|t| self.bounded(t, "budget.tokens_per_day", 1..=u64::MAX, hint)),
            usd_per_day: usd.and_then(|u| {
                let what = "budget.usd_per_day";
                let v = self.non_negative(u, what, hint)?;
                if v == 0.0 {
                    self.error(format!("`{what}` must be above 0"), Some(u.span()), hint);
                    return None;
                }
                Some(v)
            }),
        };
        (budget.tokens_per_day.is_some() || budget.usd_per_day.is_some()).then_some(budget)
    }

    /// A written amount that is a finite number, 0 or more.
    fn non_negative(&mut self, value: &Spanned<f64>, what: &str, hint: &str) -> Option<f64> {
        let v = *value.get_ref();
        if v.is_finite() && v >= 0.0 {
            return Some(v);
        }
        self.error(
            format!("`{what}` must be a number, 0 or more"),
            Some(value.span()),
            hint,
        );
        None
    }
}
