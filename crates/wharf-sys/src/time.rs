//! Wall-clock timestamps in the format runc, the CRI and docker use: RFC 3339 in UTC (Go's
//! RFC3339Nano, trailing zeros of the fraction trimmed), and parsing back what those write.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now with nanoseconds, e.g. `2026-11-29T19:57:40.123456789Z`.
pub fn now_rfc3339_nano() -> String {
    let d = since_epoch(SystemTime::now());
    rfc3339(d.as_secs() as i64, d.subsec_nanos(), true)
}

/// Now without fractional seconds (runc's JSON log lines).
pub fn now_rfc3339() -> String {
    let d = since_epoch(SystemTime::now());
    rfc3339(d.as_secs() as i64, 0, false)
}

/// `t` with nanoseconds.
pub fn format_nano(t: SystemTime) -> String {
    let d = since_epoch(t);
    rfc3339(d.as_secs() as i64, d.subsec_nanos(), true)
}

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Seconds (and nanoseconds) since the epoch as RFC 3339 in UTC; the fraction, when
/// asked for and not zero, loses its trailing zeros as Go's formatting does.
pub fn rfc3339(secs: i64, nanos: u32, with_nanos: bool) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if with_nanos && nanos > 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; None for anything else or a time
/// before the epoch.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut nanos: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        let digits = frac.len().min(9);
        nanos = frac[..digits].parse::<i64>().ok()? * 10i64.pow((9 - digits) as u32);
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    if secs < 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::new(secs as u64, nanos as u32))
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A duration in Go's syntax, as docker, runc and kubelet take them ("5s", "300ms",
/// "1m30s", "1.5h", "0"); None when it is not one.
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * secs;
        rest = &rest[u..];
    }
    Some(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0, 0, true), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400, 0, false), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339(1_700_000_000, 120_000_000, true),
            "2023-11-14T22:13:20.12Z"
        );
        assert_eq!(
            rfc3339(4_102_444_799, 5, true),
            "2099-12-31T23:59:59.000000005Z"
        );
    }

    #[test]
    fn parses_what_it_and_others_write() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 120_000_000);
        assert_eq!(parse_rfc3339(&format_nano(t)), Some(t));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.120000000Z"), Some(t));
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20.12+01:00"), Some(t));
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00Z"),
            Some(UNIX_EPOCH + Duration::from_secs(951_782_400))
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
        // Every day of four centuries round-trips.
        for day in (-3_000..150_000).step_by(7) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m as i64, d as i64), day);
        }
    }
}
