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
        let cron = parser
            .parse(expr)
            .map_err(|e| format!("invalid cron expression `{expr}`: {e}"))?;
        Ok(Schedule {
            expr: expr.to_string(),
            cron,
        })
    }
}
