//! OCI resources as the unit properties systemd sets them from.
//!
//! What systemd has a property for is given to systemd, which then owns the file (it writes
//! it again at every reload, so a value written behind its back would not last). What it
//! has none for (unified keys, hugetlb, throttles, device rules...) stays in the resources
//! the engine writes to the cgroup's files itself.

use oci_spec::runtime::LinuxResources;

use crate::{Error, Result};

/// A property's value, in the D-Bus types systemd reads for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `t`
    U64(u64),
    /// `b`
    Bool(bool),
    /// `s`
    Str(String),
    /// `ay` (a bitmask: CPUs, memory nodes)
    Bytes(Vec<u8>),
    /// `au` (pids)
    U32s(Vec<u32>),
}

/// One unit property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// systemd's name for it (systemd.resource-control(5)).
    pub name: &'static str,
    /// Its value.
    pub value: Value,
}

impl Property {
    fn u64(name: &'static str, v: u64) -> Property {
        Property {
            name,
            value: Value::U64(v),
        }
    }
}

/// systemd's "infinity" for limits.
const INFINITY: u64 = u64::MAX;

/// A limit where -1 (and, for pids, 0) means none.
fn limit(v: i64) -> u64 {
    if v < 0 { INFINITY } else { v as u64 }
}

/// Split `res` into the properties systemd sets and the resources left for the cgroup's
/// files.
pub fn split_resources(res: &LinuxResources) -> Result<(Vec<Property>, LinuxResources)> {
    let mut props = Vec::new();
    let mut rest = res.clone();
    if let Some(m) = res.memory() {
        let mut left = *m;
        if let Some(l) = m.limit() {
            props.push(Property::u64("MemoryMax", limit(l)));
            left.set_limit(None);
            // OCI's swap is memory plus swap; systemd's MemorySwapMax is the swap alone.
            if let Some(s) = m.swap() {
                let swap = if s < 0 || l < 0 {
                    INFINITY
                } else {
                    (s as u64).saturating_sub(l as u64)
                };
                props.push(Property::u64("MemorySwapMax", swap));
                left.set_swap(None);
            }
        }
        if let Some(r) = m.reservation() {
            props.push(Property::u64("MemoryLow", limit(r)));
            left.set_reservation(None);
        }
        rest.set_memory(Some(left));
    }
    if let Some(c) = res.cpu() {
        let mut left = c.clone();
        if let Some(s) = c.shares().filter(|s| *s > 0) {
            props.push(Property::u64(
                "CPUWeight",
                wharf_runtime::cgroups::shares_to_weight(s),
            ));
            left.set_shares(None);
        }
        if let Some(q) = c.quota() {
            let period = c.period().filter(|p| *p > 0).unwrap_or(100_000);
            // systemd keeps the quota per second of CPU time, in steps of 10 ms: round up,
            // so the container gets at least what it asked for (as runc does).
            let per_sec = if q <= 0 {
                INFINITY
            } else {
                (q as u64 * 1_000_000 / period).div_ceil(10_000) * 10_000
            };
            props.push(Property::u64("CPUQuotaPerSecUSec", per_sec));
            props.push(Property::u64("CPUQuotaPeriodUSec", period));
            left.set_quota(None);
            left.set_period(None);
        }
        if let Some(cpus) = c.cpus().as_deref().filter(|s| !s.is_empty()) {
            props.push(Property {
                name: "AllowedCPUs",
                value: Value::Bytes(bitmask(cpus)?),
            });
            left.set_cpus(None);
        }
        if let Some(mems) = c.mems().as_deref().filter(|s| !s.is_empty()) {
            props.push(Property {
                name: "AllowedMemoryNodes",
                value: Value::Bytes(bitmask(mems)?),
            });
            left.set_mems(None);
        }
        rest.set_cpu(Some(left));
    }
    if let Some(p) = res.pids() {
        let max = if p.limit() <= 0 {
            INFINITY
        } else {
            p.limit() as u64
        };
        props.push(Property::u64("TasksMax", max));
        rest.set_pids(None);
    }
    if let Some(b) = res.block_io()
        && let Some(w) = b.weight().filter(|w| *w > 0)
    {
        props.push(Property::u64(
            "IOWeight",
            wharf_runtime::cgroups::blkio_weight_to_io_weight(w),
        ));
        let mut left = b.clone();
        left.set_weight(None);
        rest.set_block_io(Some(left));
    }
    Ok((props, rest))
}

/// A cpuset list ("0-3,8") as systemd's bitmask: bit N of byte N/8 for CPU or node N.
fn bitmask(list: &str) -> Result<Vec<u8>> {
    let bad = || Error::Invalid(format!("invalid cpu or memory-node list {list:?}"));
    let mut bytes = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>(), b.parse::<usize>()),
            None => (part.parse(), part.parse()),
        };
        let (lo, hi) = (lo.map_err(|_| bad())?, hi.map_err(|_| bad())?);
        if lo > hi || hi >= 8192 {
            return Err(bad());
        }
        for n in lo..=hi {
            if bytes.len() <= n / 8 {
                bytes.resize(n / 8 + 1, 0);
            }
            bytes[n / 8] |= 1 << (n % 8);
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(json: &str) -> LinuxResources {
        serde_json::from_str(json).unwrap()
    }

    fn find<'a>(props: &'a [Property], name: &str) -> Option<&'a Value> {
        props.iter().find(|p| p.name == name).map(|p| &p.value)
    }

    #[test]
    fn what_systemd_has_a_property_for_goes_to_systemd_and_the_rest_stays() {
        let r = res(
            r#"{"memory": {"limit": 268435456, "swap": 536870912, "swappiness": 10},
            "cpu": {"shares": 1024, "quota": 50000, "period": 100000, "cpus": "0-2,5"},
            "pids": {"limit": 64}, "blockIO": {"weight": 500},
            "unified": {"memory.high": "200000000"},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 0}]}"#,
        );
        let (props, rest) = split_resources(&r).unwrap();
        assert_eq!(find(&props, "MemoryMax"), Some(&Value::U64(268435456)));
        assert_eq!(find(&props, "MemorySwapMax"), Some(&Value::U64(268435456)));
        assert_eq!(find(&props, "CPUWeight"), Some(&Value::U64(100)));
        assert_eq!(
            find(&props, "CPUQuotaPerSecUSec"),
            Some(&Value::U64(500_000))
        );
        assert_eq!(
            find(&props, "CPUQuotaPeriodUSec"),
            Some(&Value::U64(100_000))
        );
        assert_eq!(
            find(&props, "AllowedCPUs"),
            Some(&Value::Bytes(vec![0b0010_0111]))
        );
        assert_eq!(find(&props, "TasksMax"), Some(&Value::U64(64)));
        assert_eq!(find(&props, "IOWeight"), Some(&Value::U64(4950)));
        let m = rest.memory().as_ref().unwrap();
        assert_eq!(
            (m.limit(), m.swap(), m.swappiness()),
            (None, None, Some(10))
        );
        let c = rest.cpu().as_ref().unwrap();
        assert_eq!((c.shares(), c.quota(), c.cpus()), (None, None, &None));
        assert!(rest.pids().is_none());
        assert_eq!(rest.unified().as_ref().unwrap().len(), 1);
        assert_eq!(rest.hugepage_limits().as_ref().unwrap().len(), 1);
    }

    #[test]
    fn no_limit_is_infinity_and_quotas_round_up_to_systemd_steps() {
        let r = res(
            r#"{"memory": {"limit": -1, "swap": -1}, "cpu": {"quota": 12345},
            "pids": {"limit": -1}}"#,
        );
        let (props, _) = split_resources(&r).unwrap();
        assert_eq!(find(&props, "MemoryMax"), Some(&Value::U64(u64::MAX)));
        assert_eq!(find(&props, "MemorySwapMax"), Some(&Value::U64(u64::MAX)));
        assert_eq!(find(&props, "TasksMax"), Some(&Value::U64(u64::MAX)));
        assert_eq!(
            find(&props, "CPUQuotaPerSecUSec"),
            Some(&Value::U64(130_000))
        );
        assert!(split_resources(&res(r#"{"cpu": {"cpus": "3-1"}}"#)).is_err());
    }
}
