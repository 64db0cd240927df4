//! The limits a container's cgroup holds now (after any update) and its OOM-kill counter:
//! what cAdvisor-style metrics report (`container_spec_*`, `container_oom_events_total`)
//! and runc's [`Stats`](super::Stats) shape has no place for. Read from v1 or v2 files,
//! wherever each controller lives.

use std::path::Path;

use super::route::{CPU, MEMORY, Place};
use super::{Cgroup, files};
use crate::error::Result;

/// Current limits, 0 meaning "none" (as cAdvisor reports an unset one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// CFS period, microseconds.
    pub cpu_period: u64,
    /// CFS quota per period, microseconds.
    pub cpu_quota: u64,
    /// CPU shares (on v2 the weight converted back to shares).
    pub cpu_shares: u64,
    /// Memory limit, bytes.
    pub memory: u64,
    /// Memory plus swap limit, bytes.
    pub memory_swap: u64,
    /// Memory reservation (v1 soft limit, v2 memory.low), bytes.
    pub memory_reservation: u64,
    /// Tasks limit.
    pub pids: u64,
    /// Processes the kernel's OOM killer killed in the cgroup.
    pub oom_kills: u64,
    /// Times usage went over the high boundary and was throttled (v2 `memory.events`
    /// `high`; v1 has no such boundary: 0).
    pub memory_high_events: u64,
    /// Times usage was about to go over the limit (v2 `memory.events` `max`; v1's
    /// `memory.failcnt` counts the same).
    pub memory_max_events: u64,
}

/// An unlimited value (u64::MAX, or the v1 page-rounded "unlimited") as 0.
fn limit(v: Option<u64>) -> u64 {
    match v {
        Some(v) if v < i64::MAX as u64 / 2 => v,
        _ => 0,
    }
}

impl Cgroup {
    /// The cgroup's limits as the kernel holds them. Controllers the container has no
    /// directory for read as 0; a file that cannot be read is an error naming it.
    pub fn limits(&self) -> Result<Limits> {
        let mut l = Limits::default();
        match self.place(CPU) {
            Some(Place::V1(dir)) => {
                l.cpu_period = limit(files::read_u64_opt(dir, "cpu.cfs_period_us")?);
                l.cpu_quota = limit(files::read_u64_opt(dir, "cpu.cfs_quota_us")?);
                l.cpu_shares = limit(files::read_u64_opt(dir, "cpu.shares")?);
            }
            Some(Place::V2(dir)) => cpu_v2(dir, &mut l)?,
            None => {}
        }
        match self.place(MEMORY) {
            Some(Place::V1(dir)) => {
                l.memory = limit(files::read_u64_opt(dir, "memory.limit_in_bytes")?);
                l.memory_swap = limit(files::read_u64_opt(dir, "memory.memsw.limit_in_bytes")?);
                l.memory_reservation =
                    limit(files::read_u64_opt(dir, "memory.soft_limit_in_bytes")?);
                l.oom_kills =
                    files::keyed_value(dir, "memory.oom_control", "oom_kill")?.unwrap_or(0);
                l.memory_max_events = files::read_u64_opt(dir, "memory.failcnt")?.unwrap_or(0);
            }
            Some(Place::V2(dir)) => {
                l.memory = limit(files::read_u64_opt(dir, "memory.max")?);
                // v2 counts swap apart; memory plus swap is what the v1-shaped field means.
                let swap = limit(files::read_u64_opt(dir, "memory.swap.max")?);
                l.memory_swap = if l.memory > 0 && swap > 0 {
                    l.memory + swap
                } else {
                    0
                };
                l.memory_reservation = limit(files::read_u64_opt(dir, "memory.low")?);
                l.oom_kills = files::keyed_value(dir, "memory.events", "oom_kill")?.unwrap_or(0);
                l.memory_high_events =
                    files::keyed_value(dir, "memory.events", "high")?.unwrap_or(0);
                l.memory_max_events = files::keyed_value(dir, "memory.events", "max")?.unwrap_or(0);
            }
            None => {}
        }
        if let Some(place) = self.place(super::route::PIDS) {
            l.pids = limit(files::read_u64_opt(place.dir(), "pids.max")?);
        }
        Ok(l)
    }
}

fn cpu_v2(dir: &Path, l: &mut Limits) -> Result<()> {
    if let Ok(max) = files::read(dir, "cpu.max") {
        let mut it = max.split_whitespace();
        l.cpu_quota = limit(it.next().and_then(files::parse_u64));
        l.cpu_period = limit(it.next().and_then(files::parse_u64));
    }
    if let Some(w) = files::read_u64_opt(dir, "cpu.weight")? {
        l.cpu_shares = weight_to_shares(w);
    }
    Ok(())
}

/// A share count that [`super::shares_to_weight`] maps to `weight`. That conversion is
/// monotonic and many-to-one, so the preimage is a range (found by bisection); of it, the
/// roundest value (the multiple of the largest power of two), so that the weights of
/// 1024, 512 or 2048 shares read back as those.
fn weight_to_shares(weight: u64) -> u64 {
    // The first share count whose weight is at least `w`.
    let first = |w: u64| {
        let (mut lo, mut hi) = (2u64, 262_145u64);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if super::shares_to_weight(mid) < w {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let lo = first(weight).min(262_144);
    let hi = (first(weight + 1) - 1).clamp(lo, 262_144);
    (0..=18)
        .rev()
        .map(|bit| (hi >> bit) << bit)
        .find(|&m| m >= lo)
        .unwrap_or(lo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::fake_v2;

    #[test]
    fn weight_converts_back_to_the_shares_it_came_from() {
        for shares in [2, 512, 1024, 2048, 262_144] {
            let w = crate::cgroups::shares_to_weight(shares);
            assert_eq!(crate::cgroups::shares_to_weight(weight_to_shares(w)), w);
        }
        assert_eq!(weight_to_shares(100), 1024);
        assert_eq!(weight_to_shares(59), 512);
        assert_eq!(weight_to_shares(174), 2048);
    }

    #[test]
    fn v2_files_read_as_limits_and_unlimited_as_zero() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &[]);
        let w = |f: &str, v: &str| std::fs::write(dir.join(f), v).unwrap();
        w("cpu.max", "20000 100000\n");
        w("cpu.weight", "100\n");
        w("memory.max", "67108864\n");
        w("memory.swap.max", "max\n");
        w("memory.low", "0\n");
        w("memory.events", "low 0\nhigh 3\nmax 2\noom 1\noom_kill 1\n");
        w("pids.max", "max\n");
        let l = cg.limits().unwrap();
        assert_eq!(
            l,
            Limits {
                cpu_period: 100_000,
                cpu_quota: 20_000,
                cpu_shares: 1024,
                memory: 64 << 20,
                memory_swap: 0,
                memory_reservation: 0,
                pids: 0,
                oom_kills: 1,
                memory_high_events: 3,
                memory_max_events: 2,
            }
        );
    }
}
