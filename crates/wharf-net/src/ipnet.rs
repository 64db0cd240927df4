//! IP networks in CIDR notation ("10.88.0.0/16", "fd00::1/64"): parsing, containment,
//! overlap and host arithmetic for the IPAM.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::error::Error;

/// An address with a prefix length. The address need not be the network address
/// ("10.88.0.5/16" is an interface address in 10.88.0.0/16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length (0-32 or 0-128).
    pub prefix: u8,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::from(v.to_be_bytes())
    } else {
        IpAddr::from((v as u32).to_be_bytes())
    }
}

impl IpNet {
    /// A network from an address and a prefix length (checked).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<IpNet, Error> {
        if prefix > IpNet::max_prefix_of(&addr) {
            return Err(Error::Invalid(format!(
                "invalid prefix length /{prefix} for {addr}"
            )));
        }
        Ok(IpNet { addr, prefix })
    }

    fn max_prefix_of(addr: &IpAddr) -> u8 {
        if addr.is_ipv4() { 32 } else { 128 }
    }

    /// 32 for IPv4, 128 for IPv6.
    pub fn max_prefix(&self) -> u8 {
        IpNet::max_prefix_of(&self.addr)
    }

    /// Whether this is an IPv6 network.
    pub fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }

    fn host_bits(&self) -> u32 {
        (self.max_prefix() - self.prefix) as u32
    }

    fn mask(&self) -> u128 {
        let bits = self.host_bits();
        let full: u128 = if self.is_ipv6() {
            u128::MAX
        } else {
            u32::MAX as u128
        };
        if bits >= 128 {
            0
        } else {
            full & !((1u128 << bits) - 1)
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        from_u128(to_u128(self.addr) & self.mask(), self.is_ipv6())
    }

    /// The same network, with the address at its network address.
    pub fn trunc(&self) -> IpNet {
        IpNet {
            addr: self.network(),
            prefix: self.prefix,
        }
    }

    /// Whether `ip` is inside this network.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        ip.is_ipv6() == self.is_ipv6() && to_u128(*ip) & self.mask() == to_u128(self.network())
    }

    /// Whether the two networks share any address.
    pub fn overlaps(&self, other: &IpNet) -> bool {
        if self.is_ipv6() != other.is_ipv6() {
            return false;
        }
        let shorter = if self.prefix <= other.prefix {
            self
        } else {
            other
        };
        let longer = if self.prefix <= other.prefix {
            other
        } else {
            self
        };
        shorter.contains(&longer.network())
    }

    /// The address `n` places after the network address (None past the end).
    pub fn nth(&self, n: u128) -> Option<IpAddr> {
        let bits = self.host_bits();
        if bits < 128 && n >> bits != 0 {
            return None;
        }
        Some(from_u128(to_u128(self.network()) + n, self.is_ipv6()))
    }

    /// The position of `ip` in this network (its host part), if inside.
    pub fn offset_of(&self, ip: &IpAddr) -> Option<u128> {
        self.contains(ip)
            .then(|| to_u128(*ip) - to_u128(self.network()))
    }

    /// The number of host positions usable for interfaces: for IPv4 the network and
    /// broadcast addresses are excluded (except in /31 and /32).
    pub fn host_range(&self) -> (u128, u128) {
        let bits = self.host_bits();
        let last = if bits >= 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        };
        if !self.is_ipv6() && bits >= 2 {
            (1, last - 1)
        } else if self.is_ipv6() && bits >= 1 {
            (1, last)
        } else {
            (0, last)
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for IpNet {
    type Err = Error;

    fn from_str(s: &str) -> Result<IpNet, Error> {
        let bad = || Error::Invalid(format!("invalid CIDR {s:?}: expected ADDRESS/PREFIX"));
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        IpNet::new(addr, prefix)
    }
}

impl serde::Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for IpNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<IpNet, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn parse_display_and_network() {
        let net = n("10.88.3.7/16");
        assert_eq!(net.to_string(), "10.88.3.7/16");
        assert_eq!(net.network().to_string(), "10.88.0.0");
        assert_eq!(net.trunc(), n("10.88.0.0/16"));
        assert_eq!(n("fd00:1::5/64").network().to_string(), "fd00:1::");
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "::/129", "10.0.0.0/-1"] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
        assert_eq!(n("0.0.0.0/0").network().to_string(), "0.0.0.0");
        assert_eq!(n("::/0").network().to_string(), "::");
    }

    #[test]
    fn containment_and_overlap() {
        let net = n("10.88.0.0/16");
        assert!(net.contains(&"10.88.255.255".parse().unwrap()));
        assert!(!net.contains(&"10.89.0.0".parse().unwrap()));
        assert!(!net.contains(&"::1".parse().unwrap()));
        assert!(net.overlaps(&n("10.88.5.0/24")));
        assert!(n("10.88.5.0/24").overlaps(&net));
        assert!(net.overlaps(&n("10.0.0.0/8")));
        assert!(!net.overlaps(&n("10.89.0.0/16")));
        assert!(!net.overlaps(&n("fd00::/8")));
        assert!(n("0.0.0.0/0").contains(&"1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn host_arithmetic() {
        let net = n("10.88.0.0/16");
        assert_eq!(net.nth(1).unwrap().to_string(), "10.88.0.1");
        assert_eq!(net.nth(65535).unwrap().to_string(), "10.88.255.255");
        assert_eq!(net.nth(65536), None);
        assert_eq!(net.host_range(), (1, 65534));
        assert_eq!(net.offset_of(&"10.88.1.2".parse().unwrap()), Some(258));
        assert_eq!(n("10.0.0.0/31").host_range(), (0, 1));
        let v6 = n("fd00::/64");
        assert_eq!(v6.nth(2).unwrap().to_string(), "fd00::2");
        assert_eq!(v6.host_range(), (1, u64::MAX as u128));
        assert_eq!(n("::/0").host_range().1, u128::MAX);
    }
}
