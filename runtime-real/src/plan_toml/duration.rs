//! Durations in plan files: number-unit pairs, `"120s"`, `"5m"`, `"1m30s"`,
//! `"500ms"`, `"2h"`; written back in the largest exact unit.

use core_fsm::time::Duration;

/// Parses `"1h"`, `"5m"`, `"120s"`, `"1m30s"`, `"250ms"`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("`{text}` is not a duration; write e.g. \"120s\", \"5m\", \"1m30s\", \"500ms\"");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per_unit = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(millis_per_unit)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| format!("`{text}` is too long"))?;
    }
    Ok(Duration::from_millis(total))
}

/// The shortest text [`parse_duration`] reads back as `duration`.
pub(crate) fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let units = [(3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    for (size, unit) in units {
        if ms != 0 && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = [
            ("120s", 120_000),
            ("5m", 300_000),
            ("1m30s", 90_000),
            ("250ms", 250),
            ("2h", 7_200_000),
            ("0s", 0),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
            assert_eq!(
                parse_duration(&format_duration(Duration::from_millis(ms))),
                Ok(Duration::from_millis(ms))
            );
        }
        for bad in [
            "",
            "120",
            "s",
            "1.5s",
            "10 s",
            "3d",
            "-1s",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
