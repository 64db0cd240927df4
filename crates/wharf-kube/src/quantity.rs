//! Kubernetes resource quantities ("500m", "0.5", "128Mi", "1G", "1e3").
//!
//! The grammar is Kubernetes': an optionally signed decimal number followed by a binary SI
//! suffix (Ki Mi Gi Ti Pi Ei), a decimal SI suffix (n u m "" k M G T P E) or a decimal
//! exponent (e3, E-2). The value is kept exact (digits, power of ten, power of two), and
//! conversions round up as Kubernetes' `Value()` and `MilliValue()` do, so "0.1m" of CPU is
//! one millicore and "1.5" bytes are two.

use std::fmt;

/// A parsed quantity: `±digits × 10^exp10 × 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    digits: u128,
    exp10: i32,
    exp2: u32,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError(String);

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Quantity {
    /// Parse a quantity as Kubernetes writes it.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let bad = |why: &str| QuantityError(format!("{s:?} is not a quantity: {why}"));
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_len);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty() {
            return Err(bad("no number"));
        }
        if frac.contains('.') {
            return Err(bad("more than one decimal point"));
        }
        // Leading zeros carry no value; trailing fraction zeros neither.
        let frac = frac.trim_end_matches('0');
        let all: String = format!("{int}{frac}");
        let all = all.trim_start_matches('0');
        if all.len() > 36 {
            return Err(bad("too many digits"));
        }
        let digits: u128 = if all.is_empty() {
            0
        } else {
            all.parse().map_err(|_| bad("not a number"))?
        };
        let mut exp10 = -(frac.len() as i32);
        let mut exp2 = 0;
        match suffix {
            "" => {}
            "Ki" => exp2 = 10,
            "Mi" => exp2 = 20,
            "Gi" => exp2 = 30,
            "Ti" => exp2 = 40,
            "Pi" => exp2 = 50,
            "Ei" => exp2 = 60,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            _ => {
                let exp = suffix.strip_prefix(['e', 'E']).ok_or_else(|| {
                    bad("unknown suffix (use Ki, Mi, Gi, m, k, M, G, ... or e<N>)")
                })?;
                let exp: i32 = exp
                    .parse()
                    .ok()
                    .filter(|e: &i32| e.abs() <= 60)
                    .ok_or_else(|| bad("bad exponent"))?;
                exp10 += exp;
            }
        }
        Ok(Quantity {
            negative: negative && digits != 0,
            digits,
            exp10,
            exp2,
        })
    }

    /// True for values below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The value times 10^`scale`, rounded up (away from zero); None on overflow of i128.
    fn scaled_ceil(&self, scale: i32) -> Option<i128> {
        let mut n: i128 = i128::try_from(self.digits).ok()?;
        n = n.checked_mul(1i128.checked_shl(self.exp2)?)?;
        let e = self.exp10 + scale;
        let magnitude = if e >= 0 {
            n.checked_mul(10i128.checked_pow(e as u32)?)?
        } else if -e > 38 {
            i128::from(n != 0)
        } else {
            let d = 10i128.pow((-e) as u32);
            n / d + i128::from(n % d != 0)
        };
        Some(if self.negative { -magnitude } else { magnitude })
    }

    /// Whole units (bytes for memory), rounded up; None when it does not fit an i64.
    pub fn value(&self) -> Option<i64> {
        self.scaled_ceil(0).and_then(|v| i64::try_from(v).ok())
    }

    /// Thousandths of a unit (millicores for CPU), rounded up; None when it does not fit.
    pub fn milli_value(&self) -> Option<i64> {
        self.scaled_ceil(3).and_then(|v| i64::try_from(v).ok())
    }

    /// `self / divisor` rounded up, as the downward API reports resources.
    pub fn div_ceil(&self, divisor: &Quantity) -> Option<i64> {
        let n = self.scaled_ceil(9)?;
        let d = divisor.scaled_ceil(9)?;
        if d <= 0 {
            return None;
        }
        let q = n / d + i128::from(n % d > 0);
        i64::try_from(q).ok()
    }
}

/// CPU shares for a CPU request, with the kubelet's formula: millicores × 1024 / 1000,
/// at least 2 (the kernel's minimum), at most 262144 (its maximum).
pub fn cpu_shares(milli_cpu: i64) -> u64 {
    (milli_cpu.max(0) as u64 * 1024 / 1000).clamp(2, 262_144)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn cpu_quantities_in_millicores() {
        assert_eq!(q("500m").milli_value(), Some(500));
        assert_eq!(q("0.5").milli_value(), Some(500));
        assert_eq!(q(".25").milli_value(), Some(250));
        assert_eq!(q("2").milli_value(), Some(2000));
        assert_eq!(q("2.").milli_value(), Some(2000));
        assert_eq!(q("1e3").milli_value(), Some(1_000_000));
        assert_eq!(q("1E-3").milli_value(), Some(1));
        // Rounded up like Kubernetes' MilliValue.
        assert_eq!(q("0.1m").milli_value(), Some(1));
        assert_eq!(q("100u").milli_value(), Some(1));
        assert_eq!(q("0").milli_value(), Some(0));
        assert_eq!(q("+1").milli_value(), Some(1000));
    }

    #[test]
    fn memory_quantities_in_bytes() {
        assert_eq!(q("128Mi").value(), Some(128 << 20));
        assert_eq!(q("1G").value(), Some(1_000_000_000));
        assert_eq!(q("1.5Gi").value(), Some(3 << 29));
        assert_eq!(q("64k").value(), Some(64_000));
        assert_eq!(q("1e3").value(), Some(1000));
        assert_eq!(q("1.5").value(), Some(2));
        assert_eq!(q("007").value(), Some(7));
        assert_eq!(q("1Ei").value(), Some(1 << 60));
        assert_eq!(q("8Ei").value(), None, "2^63 does not fit an i64");
        assert!(q("-1Mi").is_negative());
        assert_eq!(q("-1Mi").value(), Some(-(1 << 20)));
        assert!(!q("-0").is_negative());
    }

    #[test]
    fn malformed_quantities_are_rejected() {
        for bad in [
            "", "m", "Mi", "1.2.3", "12MB", "1 Mi", "abc", "1e", "1e1000", "0x10", "1ki",
        ] {
            let e = Quantity::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("is not a quantity"), "{e}");
        }
    }

    #[test]
    fn division_for_the_downward_api() {
        assert_eq!(q("500m").div_ceil(&q("1")), Some(1));
        assert_eq!(q("500m").div_ceil(&q("1m")), Some(500));
        assert_eq!(q("128Mi").div_ceil(&q("1Mi")), Some(128));
        assert_eq!(q("100M").div_ceil(&q("1Mi")), Some(96));
        assert_eq!(q("1").div_ceil(&q("0")), None);
    }

    #[test]
    fn kubelet_cpu_shares() {
        assert_eq!(cpu_shares(1000), 1024);
        assert_eq!(cpu_shares(250), 256);
        assert_eq!(cpu_shares(1), 2);
        assert_eq!(cpu_shares(0), 2);
        assert_eq!(cpu_shares(1_000_000), 262_144);
    }
}
