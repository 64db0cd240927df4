//! Wall-clock timestamps in the formats runc and the CRI use (RFC 3339, UTC).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now as RFC 3339 with nanoseconds, e.g. `2026-11-29T19:57:40.123456789Z` (Go's RFC3339Nano
/// in UTC, which runc writes into `created`).
pub fn now_rfc3339_nano() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_nanos(), true)
}

/// Now as RFC 3339 without fractional seconds (the format runc's JSON log lines carry).
pub fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, 0, false)
}

/// Format seconds since the epoch (UTC) as RFC 3339; trailing zeros of the fraction are
/// trimmed as Go does.
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
}
