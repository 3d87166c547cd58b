//! Human durations as written in phoenix.toml: "30s", "10m", "2h", "14d", "1h30m", "0s".

use std::time::Duration;

pub const HINT: &str = "write a number and a unit, e.g. \"30s\", \"10m\", \"2h\" or \"14d\" (units: ms, s, m, h, d, w)";

pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("invalid duration `{text}`: expected a number"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration `{text}`: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" | "sec" | "secs" => Duration::from_secs(number),
            "m" | "min" | "mins" => Duration::from_secs(number.saturating_mul(60)),
            "h" | "hr" | "hrs" => Duration::from_secs(number.saturating_mul(3600)),
            "d" | "day" | "days" => Duration::from_secs(number.saturating_mul(86_400)),
            "w" => Duration::from_secs(number.saturating_mul(7 * 86_400)),
            "" => return Err(format!("invalid duration `{text}`: missing unit")),
            other => return Err(format!("invalid duration `{text}`: unknown unit `{other}`")),
        };
        total = total.saturating_add(part);
    }
    Ok(total)
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
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        assert!(parse("10").unwrap_err().contains("missing unit"));
        assert!(parse("10x").unwrap_err().contains("unknown unit `x`"));
        assert!(parse("m").unwrap_err().contains("expected a number"));
        assert!(parse("").is_err());
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
