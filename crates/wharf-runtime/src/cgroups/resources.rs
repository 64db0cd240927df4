//! Writing `linux.resources` into a container's cgroup, at create and on update, and merging
//! an update request into the resources a container has.

use std::collections::HashMap;

use oci_spec::runtime::{
    LinuxBlockIo, LinuxCpu, LinuxHugepageLimit, LinuxInterfacePriority, LinuxMemory, LinuxNetwork,
    LinuxResources, LinuxThrottleDevice, LinuxWeightDevice, LinuxWeightDeviceBuilder,
};

use super::{Cgroup, blkio, cpu, devices, hugetlb, memory, network, pids, rdma, unified};
use crate::error::Result;

/// Apply every setting of `res` (create time). Without `devices` the cgroup keeps what it
/// inherits (the kernel's default for a new cgroup, which for runc's rule list is the same:
/// allow-all plus allow rules), so a restricted parent is not a reason to fail.
pub fn apply(cg: &Cgroup, res: &LinuxResources) -> Result<()> {
    set_all(cg, res, res.devices().is_some())
}

/// Apply `new` to a container that had `old`: every setting is written again, as runc does
/// (the kernel keeps what is unchanged), except the device rules, which are enforced anew
/// only when they changed — so an update never touches device access it was not asked to.
pub fn update(cg: &Cgroup, old: &LinuxResources, new: &LinuxResources) -> Result<()> {
    set_all(cg, new, new.devices() != old.devices())
}

fn set_all(cg: &Cgroup, res: &LinuxResources, with_devices: bool) -> Result<()> {
    if let Some(p) = res.pids() {
        pids::set(cg, p)?;
    }
    if let Some(m) = res.memory() {
        memory::set(cg, m)?;
    }
    if let Some(b) = res.block_io() {
        blkio::set(cg, b)?;
    }
    if let Some(c) = res.cpu() {
        cpu::set(cg, c)?;
    }
    if with_devices {
        devices::set(cg, res.devices().as_deref().unwrap_or(&[]))?;
    }
    if let Some(h) = res.hugepage_limits() {
        hugetlb::set(cg, h)?;
    }
    if let Some(r) = res.rdma() {
        rdma::set(cg, r)?;
    }
    if let Some(n) = res.network() {
        network::set(cg, n)?;
    }
    if let Some(u) = res.unified() {
        unified::set(cg, u)?;
    }
    Ok(())
}

/// The resources after an update request, with runc's `update` semantics: what the request
/// sets replaces the old value, what it leaves out stays; per-device lists (weights,
/// throttles), hugepage limits, interface priorities, RDMA and unified entries are updated
/// entry by entry; device rules are replaced as a whole when the request has them.
pub fn merge(old: &LinuxResources, req: &LinuxResources) -> LinuxResources {
    let mut out = old.clone();
    if let Some(m) = req.memory() {
        out.set_memory(Some(merge_memory(old.memory().unwrap_or_default(), m)));
    }
    if let Some(c) = req.cpu() {
        out.set_cpu(Some(merge_cpu(old.cpu().clone().unwrap_or_default(), c)));
    }
    if let Some(p) = req.pids() {
        out.set_pids(Some(*p));
    }
    if let Some(b) = req.block_io() {
        out.set_block_io(Some(merge_blkio(
            old.block_io().clone().unwrap_or_default(),
            b,
        )));
    }
    if let Some(h) = req.hugepage_limits() {
        let mut list = old.hugepage_limits().clone().unwrap_or_default();
        for l in h {
            upsert(&mut list, l.clone(), |a: &LinuxHugepageLimit, b| {
                a.page_size() == b.page_size()
            });
        }
        out.set_hugepage_limits(Some(list));
    }
    if let Some(n) = req.network() {
        out.set_network(Some(merge_network(
            old.network().clone().unwrap_or_default(),
            n,
        )));
    }
    if let Some(r) = req.rdma() {
        let mut map = old.rdma().clone().unwrap_or_default();
        map.extend(r.iter().map(|(k, v)| (k.clone(), *v)));
        out.set_rdma(Some(map));
    }
    if let Some(u) = req.unified() {
        let mut map: HashMap<String, String> = old.unified().clone().unwrap_or_default();
        map.extend(u.iter().map(|(k, v)| (k.clone(), v.clone())));
        out.set_unified(Some(map));
    }
    if let Some(d) = req.devices() {
        out.set_devices(Some(d.clone()));
    }
    out
}

fn upsert<T>(list: &mut Vec<T>, item: T, same: impl Fn(&T, &T) -> bool) {
    match list.iter_mut().rev().find(|x| same(x, &item)) {
        Some(slot) => *slot = item,
        None => list.push(item),
    }
}

fn merge_memory(old: LinuxMemory, req: &LinuxMemory) -> LinuxMemory {
    let mut m = old;
    if req.limit().is_some() {
        m.set_limit(req.limit());
        // "Unlimited memory" with no word on swap lifts the swap limit too (runc).
        if req.limit() == Some(-1) && req.swap().is_none() {
            m.set_swap(None);
        }
    }
    let or = |new: Option<i64>, cur: Option<i64>| new.or(cur);
    m.set_swap(or(req.swap(), m.swap()));
    m.set_reservation(or(req.reservation(), m.reservation()));
    m.set_kernel(or(req.kernel(), m.kernel()));
    m.set_kernel_tcp(or(req.kernel_tcp(), m.kernel_tcp()));
    m.set_swappiness(req.swappiness().or(m.swappiness()));
    m.set_disable_oom_killer(req.disable_oom_killer().or(m.disable_oom_killer()));
    m.set_use_hierarchy(req.use_hierarchy().or(m.use_hierarchy()));
    // A check asked for by this update, not remembered for the next one.
    m.set_check_before_update(req.check_before_update());
    m
}

fn merge_cpu(old: LinuxCpu, req: &LinuxCpu) -> LinuxCpu {
    let mut c = old;
    c.set_shares(req.shares().or(c.shares()));
    c.set_quota(req.quota().or(c.quota()));
    c.set_period(req.period().or(c.period()));
    c.set_burst(req.burst().or(c.burst()));
    c.set_idle(req.idle().or(c.idle()));
    c.set_realtime_runtime(req.realtime_runtime().or(c.realtime_runtime()));
    c.set_realtime_period(req.realtime_period().or(c.realtime_period()));
    if let Some(v) = req.cpus().clone().filter(|v| !v.is_empty()) {
        c.set_cpus(Some(v));
    }
    if let Some(v) = req.mems().clone().filter(|v| !v.is_empty()) {
        c.set_mems(Some(v));
    }
    c
}

fn merge_blkio(old: LinuxBlockIo, req: &LinuxBlockIo) -> LinuxBlockIo {
    let mut b = old;
    b.set_weight(req.weight().or(b.weight()));
    b.set_leaf_weight(req.leaf_weight().or(b.leaf_weight()));
    if let Some(wds) = req.weight_device() {
        let mut list = b.weight_device().clone().unwrap_or_default();
        for wd in wds {
            match list
                .iter_mut()
                .rev()
                .find(|x| x.major() == wd.major() && x.minor() == wd.minor())
            {
                Some(slot) => {
                    *slot = weight_device(
                        slot.major(),
                        slot.minor(),
                        wd.weight().or(slot.weight()),
                        wd.leaf_weight().or(slot.leaf_weight()),
                    );
                }
                None => list.push(*wd),
            }
        }
        b.set_weight_device(Some(list));
    }
    let merge_list = |cur: &Option<Vec<LinuxThrottleDevice>>,
                      new: &Option<Vec<LinuxThrottleDevice>>|
     -> Option<Vec<LinuxThrottleDevice>> {
        let Some(new) = new else {
            return cur.clone();
        };
        let mut list = cur.clone().unwrap_or_default();
        for td in new {
            upsert(&mut list, *td, |a, b| {
                a.major() == b.major() && a.minor() == b.minor()
            });
        }
        Some(list)
    };
    b.set_throttle_read_bps_device(merge_list(
        b.throttle_read_bps_device(),
        req.throttle_read_bps_device(),
    ));
    b.set_throttle_write_bps_device(merge_list(
        b.throttle_write_bps_device(),
        req.throttle_write_bps_device(),
    ));
    b.set_throttle_read_iops_device(merge_list(
        b.throttle_read_iops_device(),
        req.throttle_read_iops_device(),
    ));
    b.set_throttle_write_iops_device(merge_list(
        b.throttle_write_iops_device(),
        req.throttle_write_iops_device(),
    ));
    b
}

fn weight_device(major: i64, minor: i64, w: Option<u16>, leaf: Option<u16>) -> LinuxWeightDevice {
    let mut b = LinuxWeightDeviceBuilder::default()
        .major(major)
        .minor(minor);
    if let Some(w) = w {
        b = b.weight(w);
    }
    if let Some(l) = leaf {
        b = b.leaf_weight(l);
    }
    b.build().expect("every field is set or optional")
}

fn merge_network(old: LinuxNetwork, req: &LinuxNetwork) -> LinuxNetwork {
    let mut n = old;
    n.set_class_id(req.class_id().or(n.class_id()));
    if let Some(prios) = req.priorities() {
        let mut list: Vec<LinuxInterfacePriority> = n.priorities().clone().unwrap_or_default();
        for p in prios {
            upsert(&mut list, p.clone(), |a, b| a.name() == b.name());
        }
        n.set_priorities(Some(list));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(json: &str) -> LinuxResources {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn update_keeps_what_it_does_not_mention() {
        let old = res(r#"{
            "memory": {"limit": 100, "swap": 200, "swappiness": 10},
            "cpu": {"shares": 512, "quota": 1000, "period": 100000, "cpus": "0"},
            "pids": {"limit": 10},
            "blockIO": {"weight": 100,
                        "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 10}]},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 10}],
            "unified": {"hugetlb.2MB.max": "10"},
            "devices": [{"allow": false, "access": "rwm"}]
        }"#);
        let req = res(r#"{
            "memory": {"limit": 300},
            "cpu": {"quota": 2000, "cpus": ""},
            "blockIO": {"throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 20},
                                                  {"major": 8, "minor": 16, "rate": 5}]},
            "hugepageLimits": [{"pageSize": "1GB", "limit": 0}],
            "unified": {"io.weight": "50"}
        }"#);
        let m = merge(&old, &req);
        let mem = m.memory().unwrap();
        assert_eq!(
            (mem.limit(), mem.swap(), mem.swappiness()),
            (Some(300), Some(200), Some(10))
        );
        let cpu = m.cpu().clone().unwrap();
        assert_eq!(
            (cpu.shares(), cpu.quota(), cpu.period()),
            (Some(512), Some(2000), Some(100000))
        );
        assert_eq!(cpu.cpus().as_deref(), Some("0"));
        assert_eq!(m.pids().unwrap().limit(), 10);
        let b = m.block_io().clone().unwrap();
        let rates: Vec<_> = b
            .throttle_read_bps_device()
            .clone()
            .unwrap()
            .iter()
            .map(|t| (t.minor(), t.rate()))
            .collect();
        assert_eq!(rates, [(0, 20), (16, 5)]);
        assert_eq!(b.weight(), Some(100));
        assert_eq!(m.hugepage_limits().as_ref().unwrap().len(), 2);
        assert_eq!(m.unified().as_ref().unwrap().len(), 2);
        assert_eq!(m.devices(), old.devices());
    }

    #[test]
    fn v2_create_then_update_end_to_end() {
        use crate::cgroups::tests::{fake_v2, read_lines};
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(
            t.path(),
            &[
                "pids.max",
                "memory.max",
                "memory.swap.max",
                "memory.low",
                "io.weight",
                "io.max",
                "cpu.weight",
                "cpu.max",
                "cpuset.cpus",
                "cpuset.mems",
                "hugetlb.2MB.max",
                "rdma.max",
                "memory.high",
            ],
        );
        let res = res(r#"{
            "pids": {"limit": 10},
            "memory": {"limit": 1048576, "swap": 2097152, "reservation": 524288},
            "blockIO": {"weight": 1000, "throttleWriteBpsDevice": [{"major": 8, "minor": 0, "rate": 5}]},
            "cpu": {"shares": 2048, "quota": 10000, "period": 20000, "cpus": "1", "mems": "0"},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 2097152}],
            "rdma": {"mlx4_0": {"hcaHandles": 3}},
            "unified": {"memory.high": "900000"}
        }"#);
        apply(&cg, &res).unwrap();
        let expect = [
            ("pids.max", "10"),
            ("memory.max", "1048576"),
            ("memory.swap.max", "1048576"),
            ("memory.low", "524288"),
            ("io.weight", "10000"),
            ("io.max", "8:0 wbps=5"),
            ("cpu.weight", "174"),
            ("cpu.max", "10000 20000"),
            ("cpuset.cpus", "1"),
            ("cpuset.mems", "0"),
            ("hugetlb.2MB.max", "2097152"),
            ("rdma.max", "mlx4_0 hca_handle=3"),
            ("memory.high", "900000"),
        ];
        for (file, want) in expect {
            assert_eq!(read_lines(&dir, file), [want], "{file}");
        }
        // Every controller was enabled for the container on the way down.
        let ctl = read_lines(&t.path().join("unified/parent"), "cgroup.subtree_control");
        for c in ["pids", "memory", "io", "cpu", "cpuset", "hugetlb", "rdma"] {
            assert!(ctl.contains(&format!("+{c}")), "{c} not enabled: {ctl:?}");
        }
        // An update rewrites the merged set (runc does too): pids and quota change.
        let merged = merge(
            &res,
            &super::tests::res(r#"{"pids": {"limit": 20}, "cpu": {"quota": 5000}}"#),
        );
        update(&cg, &res, &merged).unwrap();
        assert_eq!(read_lines(&dir, "pids.max"), ["10", "20"]);
        assert_eq!(read_lines(&dir, "cpu.max"), ["10000 20000", "5000 20000"]);
        assert_eq!(read_lines(&dir, "memory.max"), ["1048576", "1048576"]);
    }

    #[test]
    fn unlimited_memory_drops_the_old_swap_limit() {
        let old = res(r#"{"memory": {"limit": 100, "swap": 200}}"#);
        let m = merge(&old, &res(r#"{"memory": {"limit": -1}}"#));
        assert_eq!(m.memory().unwrap().swap(), None);
        assert_eq!(m.memory().unwrap().limit(), Some(-1));
    }
}
