//! `--max-rate N/s|N/min|N/h` and `--burst N`: a queue's rate limit as the CLI reads and
//! prints it (the daemon and the segment keep it as an interval between claims).

use xtcq_proto::{RateLimit, MAX_RATE_BURST, MAX_RATE_INTERVAL_NS};

const UNITS: [(&str, u64); 5] = [
    ("s", 1_000_000_000),
    ("sec", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `N/s`, `N/min` or `N/h` (`N` a positive number, decimals allowed) into the interval
/// between claims, in ns; `none` is 0 (no limit).
pub fn parse_max_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s == "none" {
        return Ok(0);
    }
    let Some((n, unit)) = s.split_once('/') else {
        return Err(format!("{s:?} has no unit: give a rate such as 200/s, 30/min or 5/h, or `none`"));
    };
    let Some(&(_, per_ns)) = UNITS.iter().find(|(u, _)| *u == unit.trim()) else {
        return Err(format!("{s:?}: the unit is /s, /min or /h (e.g. 200/s)"));
    };
    let n: f64 = match n.trim().parse() {
        Ok(n) if f64::is_finite(n) && n > 0.0 => n,
        Ok(_) => return Err(format!("{s:?}: a rate is more than 0; to stop the queue, pause it")),
        Err(_) => return Err(format!("{s:?}: give a number of jobs per unit, e.g. 200/s")),
    };
    let interval = per_ns as f64 / n;
    if interval < 1.0 {
        return Err(format!("{s:?} is more than one claim a nanosecond; give a lower rate, or `none`"));
    }
    if interval > MAX_RATE_INTERVAL_NS as f64 {
        return Err(format!("{s:?} is slower than one claim a day; give a faster rate, or pause the queue"));
    }
    Ok(interval.round() as u64)
}

/// Parses `--burst N`: 1 to [`MAX_RATE_BURST`].
pub fn parse_burst(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_RATE_BURST)).contains(&n) => Ok(n as u32),
        _ => Err(format!("{s:?}: give a whole number of claims from 1 to {MAX_RATE_BURST}")),
    }
}

/// A rate limit as `xtcq stats` prints it: `200/s, burst 1`.
pub fn describe(r: RateLimit) -> String {
    let per_s = 1e9 / r.interval_ns.max(1) as f64;
    let pace = if per_s >= 1.0 {
        format!("{}/s", trim(per_s))
    } else if per_s * 60.0 >= 1.0 {
        format!("{}/min", trim(per_s * 60.0))
    } else {
        format!("{}/h", trim(per_s * 3600.0))
    };
    format!("{pace}, burst {}", r.burst)
}

/// At most three decimals, none when whole.
fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_into_intervals_and_print_back() {
        assert_eq!(parse_max_rate("200/s"), Ok(5_000_000));
        assert_eq!(parse_max_rate("30/min"), Ok(2_000_000_000));
        assert_eq!(parse_max_rate(" 0.5/s "), Ok(2_000_000_000));
        assert_eq!(parse_max_rate("1/h"), Ok(3_600_000_000_000));
        assert_eq!(parse_max_rate("none"), Ok(0));
        for bad in ["200", "0/s", "-1/s", "x/s", "5/day", "0.001/h", "2000000000/s", "inf/s", "NaN/s"] {
            assert!(parse_max_rate(bad).is_err(), "{bad}");
        }
        assert!(parse_max_rate("200").unwrap_err().contains("no unit"));
        assert_eq!(describe(RateLimit { interval_ns: 5_000_000, burst: 1 }), "200/s, burst 1");
        assert_eq!(describe(RateLimit { interval_ns: 2_000_000_000, burst: 3 }), "30/min, burst 3");
        assert_eq!(describe(RateLimit { interval_ns: 3_600_000_000_000, burst: 1 }), "1/h, burst 1");
        assert_eq!(parse_burst("10"), Ok(10));
        assert!(parse_burst("0").is_err() && parse_burst("-3").is_err() && parse_burst("x").is_err());
    }
}
