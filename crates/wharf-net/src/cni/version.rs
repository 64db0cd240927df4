//! CNI spec versions: parsing, comparison, and which ones Wharf speaks.

use crate::error::{Error, Result};

/// Versions of the CNI spec whose configurations Wharf runs (results of 0.1.0/0.2.0 plugins
/// are also understood, see [`super::result`]).
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A spec version as (major, minor, patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// Parse "1.0.0" (also "1.0").
    pub fn parse(s: &str) -> Result<Version> {
        let bad = || Error::Invalid(format!("invalid CNI version {s:?}"));
        let mut it = s.split('.').map(|p| p.parse::<u32>().map_err(|_| bad()));
        let major = it.next().ok_or_else(bad)??;
        let minor = it.next().ok_or_else(bad)??;
        let patch = it.next().transpose()?.unwrap_or(0);
        if it.next().is_some() {
            return Err(bad());
        }
        Ok(Version(major, minor, patch))
    }

    /// Whether this version is at least `other`.
    pub fn at_least(&self, other: Version) -> bool {
        *self >= other
    }
}

/// 0.4.0: CHECK appears.
pub const V0_4_0: Version = Version(0, 4, 0);
/// 1.1.0: STATUS and GC appear.
pub const V1_1_0: Version = Version(1, 1, 0);

/// Whether Wharf runs configurations of version `v`.
pub fn is_supported(v: &str) -> bool {
    SUPPORTED.contains(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        assert!(Version::parse("1.1.0").unwrap() > Version::parse("1.0.0").unwrap());
        assert!(Version::parse("0.4.0").unwrap().at_least(V0_4_0));
        assert!(!Version::parse("0.3.1").unwrap().at_least(V0_4_0));
        assert_eq!(Version::parse("1.0").unwrap(), Version(1, 0, 0));
        assert!(Version::parse("1.x").is_err());
        assert!(Version::parse("1.0.0.0").is_err());
        assert!(is_supported("1.0.0") && !is_supported("0.2.0"));
    }
}
