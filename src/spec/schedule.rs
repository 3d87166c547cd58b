//! `[schedules]`: when `phoenix run` runs the watchdog and the brief, as parsed cron.

use std::fmt;

use crate::diag::suggest;

#[derive(Debug, Clone)]
pub struct Schedules {
    pub watchdog: Option<Schedule>,
    pub brief: Option<Schedule>,
}

/// A standard 5-field cron expression or a nickname (`@hourly`), parsed.
#[derive(Clone)]
pub struct Schedule {
    pub expr: String,
    pub cron: croner::Cron,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({:?})", self.expr)
    }
}

impl Schedule {
    /// The nicknames cron has always had (croner expands them); `@reboot` has no time.
    pub const NICKNAMES: [&'static str; 6] = [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@hourly",
    ];

    pub fn parse(expr: &str) -> Result<Schedule, String> {
        let expr = expr.trim();
        if expr.starts_with('@') {
            let lower = expr.to_ascii_lowercase();
            if !Self::NICKNAMES.contains(&lower.as_str()) {
                return Err(format!(
                    "unknown cron nickname `{expr}` ({})",
                    suggest(&lower, &Self::NICKNAMES)
                ));
            }
        }
        let fields = expr.split_whitespace().count();
        if fields != 5 && !expr.starts_with('@') {
            return Err(format!(
                "cron expression `{expr}` has {fields} field{}, expected 5",
                if fields == 1 { "" } else { "s" }
            ));
        }
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build();
        // croner's own words ("Component error: Number out of bounds.") name no field: what
        // it refuses is explained field by field, its message kept only for what is not.
        let cron = parser.parse(expr).map_err(|e| match explain(expr) {
            Some(problem) => format!("{problem} (in `{expr}`)"),
            None => format!("invalid cron expression `{expr}`: {e}"),
        })?;
        Ok(Schedule {
            expr: expr.to_string(),
            cron,
        })
    }
}

/// One of the five fields of a cron expression: its name, its range, the names it takes (a
/// name stands for its place: JAN is 1, SUN is 0).
struct Field {
    name: &'static str,
    min: u64,
    max: u64,
    names: &'static [&'static str],
    /// croner's extensions the field takes (`L`ast, closest `W`eekday, `#`nth), left to it.
    extensions: &'static [char],
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
        extensions: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
        extensions: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
        extensions: &['L', 'l', 'W', 'w'],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &MONTHS,
        extensions: &[],
    },
    // 0 and 7 are both Sunday, as in every cron.
    Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: &WEEKDAYS,
        extensions: &['L', 'l', '#'],
    },
];

/// The first problem of a 5-field `expr` in phoenix's words, naming the field and its range;
/// `None` when none of the plain forms (`*`, `N`, `A-B`, `*/S`, `A-B/S`, lists of them) is
/// wrong, e.g. for croner's extensions (`L`, `W`, `#`).
fn explain(expr: &str) -> Option<String> {
    expr.split_whitespace()
        .zip(&FIELDS)
        .find_map(|(text, field)| {
            // croner's `+` before the day of week (day of month AND day of week).
            let text = match field.name {
                "day of week" => text.strip_prefix('+').unwrap_or(text),
                _ => text,
            };
            text.split(',').find_map(|item| field.problem(item).err())
        })
}

impl Field {
    fn range(&self) -> String {
        match self.names.first().zip(self.names.last()) {
            Some((first, last)) => format!("{}-{} (or {first}-{last})", self.min, self.max),
            None => format!("{}-{}", self.min, self.max),
        }
    }

    /// What is wrong with one item of a list, if anything.
    fn problem(&self, item: &str) -> Result<(), String> {
        let name = self.name;
        if item.is_empty() || item == "*" || item == "?" {
            return Ok(());
        }
        if item.contains(self.extensions) {
            return Ok(());
        }
        let (span, step) = match item.split_once('/') {
            Some((span, step)) => (span, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            if step.contains('/') {
                return Err(format!("{name} `{item}` has more than one `/`"));
            }
            match number(step) {
                None => {
                    return Err(format!(
                        "{name} `{item}`: the step `{step}` is not a number"
                    ));
                }
                Some(0) => return Err(format!("{name} `{item}`: the step must be at least 1")),
                Some(_) => {}
            }
            if span.is_empty() {
                return Err(format!(
                    "{name} `{item}` has nothing to step through: write `*/{step}` or a range, e.g. `{}-{}/{step}`",
                    self.min, self.max
                ));
            }
            if span != "*" && !span.contains('-') {
                return Err(format!(
                    "{name} `{item}`: a step goes with `*` or a range, e.g. `*/{step}` or `{span}-{}/{step}`",
                    self.max
                ));
            }
        }
        if span == "*" {
            return Ok(());
        }
        match span.split('-').collect::<Vec<_>>()[..] {
            [value] => self.value(value).map(drop),
            [start, end] => {
                let (from, to) = (self.value(start)?, self.value(end)?);
                if from > to {
                    return Err(format!(
                        "{name} range `{span}` runs backwards: write the smaller value first"
                    ));
                }
                Ok(())
            }
            _ => Err(format!(
                "{name} `{span}` is not a range: write `A-B`, e.g. `{}-{}`",
                self.min, self.max
            )),
        }
    }

    /// A value of this field, as a number (a name counts as its place).
    fn value(&self, text: &str) -> Result<u64, String> {
        let name = self.name;
        if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
            return Ok(i as u64 + self.min);
        }
        if text.is_empty() {
            return Err(format!("{name}: a range needs a value on each side of `-`"));
        }
        let Some(n) = number(text) else {
            return Err(format!(
                "{name} `{text}` is not a number: use {}",
                self.range()
            ));
        };
        if n < self.min || n > self.max {
            return Err(format!("{name} `{text}` is out of range {}", self.range()));
        }
        Ok(n)
    }
}

/// Digits as a number; too many of them is as out of range as any large number.
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    fn refused(expr: &str) -> String {
        Schedule::parse(expr).expect_err(expr)
    }

    #[test]
    fn a_bad_field_is_named_with_its_range() {
        for (expr, expected) in [
            (
                "61 * * * *",
                "minute `61` is out of range 0-59 (in `61 * * * *`)",
            ),
            ("0 24 * * *", "hour `24` is out of range 0-23"),
            ("0 0 0 * *", "day of month `0` is out of range 1-31"),
            ("0 0 32 * *", "day of month `32` is out of range 1-31"),
            ("0 0 * 13 *", "month `13` is out of range 1-12 (or JAN-DEC)"),
            (
                "0 0 * * 8",
                "day of week `8` is out of range 0-7 (or SUN-SAT)",
            ),
            (
                "0 0 * * MON-9",
                "day of week `9` is out of range 0-7 (or SUN-SAT)",
            ),
            ("0 0,99 * * *", "hour `99` is out of range 0-23"),
            (
                "99999999999999999999 * * * *",
                "minute `99999999999999999999` is out of range 0-59",
            ),
        ] {
            let error = refused(expr);
            assert!(error.contains(expected), "{expr}: {error}");
            assert!(!error.contains("Component error"), "{error}");
        }
    }

    #[test]
    fn a_bad_step_range_or_word_is_explained() {
        for (expr, expected) in [
            ("*/0 * * * *", "minute `*/0`: the step must be at least 1"),
            ("*/x * * * *", "minute `*/x`: the step `x` is not a number"),
            (
                "5/15 * * * *",
                "minute `5/15`: a step goes with `*` or a range, e.g. `*/15` or `5-59/15`",
            ),
            (
                "/15 * * * *",
                "minute `/15` has nothing to step through: write `*/15`",
            ),
            ("*/5/2 * * * *", "minute `*/5/2` has more than one `/`"),
            ("0 20-30/2 * * *", "hour `30` is out of range 0-23"),
            (
                "0 17-9 * * *",
                "hour range `17-9` runs backwards: write the smaller value first",
            ),
            ("0 1-2-3 * * *", "hour `1-2-3` is not a range"),
            (
                "0 -3 * * *",
                "hour: a range needs a value on each side of `-`",
            ),
            ("x * * * *", "minute `x` is not a number: use 0-59"),
            (
                "0 0 * FOO *",
                "month `FOO` is not a number: use 1-12 (or JAN-DEC)",
            ),
            (
                "0 0 * * MONDAY",
                "day of week `MONDAY` is not a number: use 0-7 (or SUN-SAT)",
            ),
            // What croner's extensions get wrong is left in croner's words.
            ("0 0 5L * *", "invalid cron expression `0 0 5L * *`"),
        ] {
            let error = refused(expr);
            assert!(error.contains(expected), "{expr}: {error}");
        }
    }

    #[test]
    fn names_lists_and_croners_extensions_still_parse() {
        for expr in [
            "*/5 * * * *",
            "0 9-17/2 * * MON-FRI",
            "0 0 1,15 jan-mar *",
            "0 0 * * 0,7",
            "0 0 L * *",
            "0 0 * * 5#2",
            "0 0 15W * *",
            "0 0 ? * SUN",
        ] {
            Schedule::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        }
    }
}
