//! Human durations as written in phoenix.toml: "30s", "10m", "1h30m", "1.5h", "10 minutes",
//! "2 weeks", "0s" — jiff's friendly format (and ISO 8601 "PT10M"), days and weeks as 24 h
//! and 7 d. A real parser instead of the hand-written one that knew only `<n><unit>` runs.

use std::time::Duration;

pub const HINT: &str = "write a number and a unit, e.g. \"30s\", \"10m\", \"1.5h\", \"10 minutes\" or \"2 weeks\" (units: ms, s, m, h, d, w, or their long names)";

/// The unit names jiff's friendly format knows up to weeks (for naming a misspelt one).
// Long plurals first: a misspelt "minuts" is closest to "minutes" and "minute" alike.
const UNITS: &[&str] = &[
    "weeks",
    "week",
    "wks",
    "wk",
    "w",
    "days",
    "day",
    "d",
    "hours",
    "hour",
    "hrs",
    "hr",
    "h",
    "minutes",
    "minute",
    "mins",
    "min",
    "m",
    "seconds",
    "second",
    "secs",
    "sec",
    "s",
    "milliseconds",
    "millisecond",
    "millis",
    "milli",
    "msecs",
    "msec",
    "ms",
    "microseconds",
    "microsecond",
    "micros",
    "micro",
    "usecs",
    "usec",
    "us",
    "nanoseconds",
    "nanosecond",
    "nanos",
    "nano",
    "nsecs",
    "nsec",
    "ns",
    "ago",
];

pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let invalid = |why: &str| format!("invalid duration `{text}`: {why}");
    // jiff's own message for a bare number ("expected to find unit designator") reads as
    // jargon; this is the mistake people make most.
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(invalid("missing unit"));
    }
    let span: jiff::Span = text.parse().map_err(|e: jiff::Error| {
        // jiff's message names what it expected in general; a misspelt unit is the usual
        // cause, and naming it (with the likely fix) says more.
        let unknown = text
            .split(|c: char| !c.is_alphabetic())
            .find(|word| !word.is_empty() && !UNITS.contains(word));
        match unknown {
            Some(word) => match crate::diag::did_you_mean(word, UNITS) {
                Some(fix) => invalid(&format!("unknown unit `{word}` (did you mean `{fix}`?)")),
                None => invalid(&format!("unknown unit `{word}`")),
            },
            None => {
                let e = e.to_string();
                invalid(e.rsplit(": ").next().unwrap_or(&e))
            }
        }
    })?;
    if span.is_negative() {
        return Err(invalid("a duration cannot be negative"));
    }
    if span.get_years() != 0 || span.get_months() != 0 {
        return Err(invalid(
            "months and years have no fixed length; use days or weeks",
        ));
    }
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|_| invalid("too long"))?;
    Duration::try_from(signed).map_err(|_| invalid("a duration cannot be negative"))
}

/// The shortest exact human form: 600s → "10m", 90s → "1m30s".
pub fn format(d: Duration) -> String {
    let mut secs = d.as_secs();
    let millis = d.subsec_millis();
    if secs == 0 {
        return if millis == 0 {
            "0s".to_string()
        } else {
            format!("{millis}ms")
        };
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_people_write() {
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("14d"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse("30 secs"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5 mins"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("3 days"), Ok(Duration::from_secs(3 * 86_400)));
    }

    #[test]
    fn friendly_forms_are_understood() {
        assert_eq!(parse("10 minutes"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("2 weeks"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1 hour, 30 minutes"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("PT10M"), Ok(Duration::from_secs(600)));
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        assert!(parse("10").unwrap_err().contains("missing unit"));
        assert!(parse("1.5").unwrap_err().contains("missing unit"));
        assert!(parse("10x").unwrap_err().contains("unknown unit `x`"));
        assert!(
            parse("10 minuts")
                .unwrap_err()
                .contains("unknown unit `minuts` (did you mean `minutes`?)")
        );
        assert!(parse("m").unwrap_err().contains("invalid duration `m`"));
        assert!(parse("").is_err());
        assert!(parse("-5s").unwrap_err().contains("negative"));
        assert!(parse("5s ago").unwrap_err().contains("negative"));
        assert!(parse("1mo").unwrap_err().contains("days or weeks"));
        assert!(parse("2 years").unwrap_err().contains("days or weeks"));
    }

    #[test]
    fn formats_round_trip() {
        for s in ["10m", "2h", "14d", "1m30s", "0s"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
        // Sub-second values once came out as "500s".
        assert_eq!(format(Duration::from_millis(500)), "500ms");
        assert_eq!(format(Duration::from_millis(250)), "250ms");
    }
}
