//! The one duration syntax of `xtcq` and `xtcqd`: humantime's (`500ms`, `5s`, `2m`,
//! `1m 30s`), so a unit file, a script and the help texts all say durations the same way.
//!
//! A bare number is seconds (`30` is `30s`), which is what it always meant to `xtcq` and to
//! `xtcqd`'s `--idle-timeout` / `--io-timeout`. Where a bare number once meant something
//! else (`xtcqd --lease-scan-interval 20` was milliseconds), [`parse_with_unit`] refuses it
//! with a message that says the form, rather than silently reading it a thousand times longer.

use std::time::Duration;

/// The longest duration accepted (100 years): longer ones would overflow a deadline.
pub const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A duration such as `500ms`, `2s`, `1m 30s`, or a plain number of seconds; at most 100
/// years. The error says what was wrong and the form to use.
pub fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long a duration"))?
        }
        Ok(_) => return Err(format!("{s:?} is not a duration: seconds must be a number >= 0")),
        Err(_) => humantime::parse_duration(t)
            .map_err(|e| format!("{s:?} is not a duration ({e}); say e.g. 500ms, 2s, 1m"))?,
    };
    if d > MAX {
        return Err(format!("{s:?} is too long a duration: at most 100 years"));
    }
    Ok(d)
}

/// As [`parse`], but a bare number other than 0 is refused: for a flag whose bare numbers
/// used to be another unit, guessing either way would be wrong for someone.
pub fn parse_with_unit(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    match t.parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        Ok(_) => {
            Err(format!("{s:?} has no unit: say {t}ms or {t}s (durations are written like 500ms, 5s, 2m)"))
        }
        Err(_) => parse(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humantime_and_bare_seconds() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse("-1").unwrap_err().contains(">= 0"));
        assert!(parse("soon").unwrap_err().contains("say e.g. 500ms"));
        assert!(parse("101years").unwrap_err().contains("at most 100 years"));
    }

    #[test]
    fn a_bare_number_is_refused_where_its_unit_is_unclear() {
        assert_eq!(parse_with_unit("0"), Ok(Duration::ZERO));
        assert_eq!(parse_with_unit("20ms"), Ok(Duration::from_millis(20)));
        let e = parse_with_unit("20").unwrap_err();
        assert!(e.contains("say 20ms or 20s"), "{e}");
    }
}
