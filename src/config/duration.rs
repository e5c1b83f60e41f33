//! The duration syntax of the config file: a whole number followed by ms, s, m or h.

use std::time::Duration;

/// A duration written as `500ms`, `90s`, `2m` or `1h`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" => n.checked_mul(1_000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// Renders a duration in the same syntax [`parse_duration`] accepts.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, ms) in [
            ("500ms", 500),
            ("90s", 90_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("0s", 0),
        ] {
            assert_eq!(
                parse_duration(text),
                Some(Duration::from_millis(ms)),
                "{text}"
            );
            assert_eq!(
                parse_duration(&format_duration(Duration::from_millis(ms))),
                Some(Duration::from_millis(ms))
            );
        }
        for bad in [
            "",
            "90",
            "s",
            "1.5s",
            "-1s",
            "10 d",
            "5sec",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
