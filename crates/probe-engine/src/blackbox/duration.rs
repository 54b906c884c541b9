//! Go's durations (`time.ParseDuration`), as the exporters read a module's `timeout` and the web
//! config's `rate_limit.interval`:
//! decimal numbers, each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), in a row
//! (`1m30s`, `1.5s`, `300ms`), or a bare `0`. Not humantime's: `5 s` or `1d` are not Go's.

use std::time::Duration;

/// The longest timeout accepted: no probe waits a day.
const MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses a Go duration.
///
/// # Errors
/// Why `text` is not one (negative durations included: neither a timeout nor an interval can
/// be).
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err("a duration here cannot be negative".to_owned());
    }
    if rest.is_empty() {
        return Err("expected a number with a unit, such as 5s or 1m30s".to_owned());
    }
    let mut total = 0f64;
    let mut chars = rest.char_indices().peekable();
    while chars.peek().is_some() {
        let start = chars.peek().map_or(0, |(i, _)| *i);
        let mut end = start;
        while let Some((i, c)) = chars.peek().copied() {
            if c.is_ascii_digit() || c == '.' {
                end = i + c.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let number = &rest[start..end];
        if number.is_empty() || number == "." {
            return Err("expected a number with a unit, such as 5s or 1m30s".to_owned());
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{number:?} is not a number"))?;
        let unit_start = end;
        let mut unit_end = end;
        while let Some((i, c)) = chars.peek().copied() {
            if c.is_ascii_digit() || c == '.' {
                break;
            }
            unit_end = i + c.len_utf8();
            chars.next();
        }
        let nanos = match &rest[unit_start..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("missing unit after {number:?}")),
            unit => return Err(format!("unknown unit {unit:?} (ns, us, ms, s, m, h)")),
        };
        total += value * nanos;
    }
    let nanos = total.round();
    if !nanos.is_finite() || nanos > MAX.as_nanos() as f64 {
        return Err("longer than a day".to_owned());
    }
    // In range: checked against a day just above.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_reads_them() {
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for bad in ["", "5", "5 s", "1d", "-1s", "s", "1.2.3s", ".s", "25h"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
