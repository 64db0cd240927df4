//! `linux.resources.cpu`: shares, quota, burst, period, realtime runtime/period, idle (the
//! cpu controller) and cpus, mems (the cpuset controller).
//!
//! As in runc, 0 means "leave as is" for shares, quota, period and the realtime values.
//! The kernel checks some pairs against each other (period vs quota vs burst, rt period vs
//! rt runtime), so a write it refuses with EINVAL is retried after its partner is set.

use std::path::Path;

use oci_spec::runtime::LinuxCpu;

use super::route::{CPU, CPUSET, Place};
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.cpu";

/// Apply the cpu and cpuset settings.
pub(super) fn set(cg: &Cgroup, c: &LinuxCpu) -> Result<()> {
    if cpu_is_set(c) {
        match cg.place_for(CPU, S)? {
            Place::V1(dir) => set_v1(dir, c)?,
            Place::V2(dir) => set_v2(dir, c)?,
        }
    }
    set_cpuset(cg, c)
}

fn cpu_is_set(c: &LinuxCpu) -> bool {
    c.shares().is_some_and(|v| v != 0)
        || c.quota().is_some_and(|v| v != 0)
        || c.period().is_some_and(|v| v != 0)
        || c.burst().is_some()
        || c.idle().is_some()
        || c.realtime_runtime().is_some_and(|v| v != 0)
        || c.realtime_period().is_some_and(|v| v != 0)
}

fn einval(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

fn set_v1(dir: &Path, c: &LinuxCpu) -> Result<()> {
    if let Some(shares) = c.shares().filter(|s| *s != 0) {
        files::write(
            dir,
            "cpu.shares",
            &shares.to_string(),
            &format!("{S}.shares"),
        )?;
        // The kernel clamps shares silently; say so instead.
        let got = files::read_u64(dir, "cpu.shares")?;
        if shares > got {
            return Err(Error::Other(format!(
                "{S}.shares: the maximum allowed cpu-shares is {got}"
            )));
        } else if shares < got {
            return Err(Error::Other(format!(
                "{S}.shares: the minimum allowed cpu-shares is {got}"
            )));
        }
    }
    let quota = c.quota().unwrap_or(0);
    let mut retry_period = None;
    if let Some(period) = c.period().filter(|p| *p != 0) {
        let v = period.to_string();
        if let Err(e) = files::write_raw(&dir.join("cpu.cfs_period_us"), &v) {
            if !einval(&e) || quota == 0 {
                return Err(write_err("period", &v, dir, "cpu.cfs_period_us", e));
            }
            retry_period = Some(v);
        }
    }
    let mut retry_burst = None;
    if let Some(burst) = c.burst() {
        let v = burst.to_string();
        match files::write_raw(&dir.join("cpu.cfs_burst_us"), &v) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::log::warn(&format!(
                "{S}.burst is ignored: this kernel has no cpu.cfs_burst_us"
            )),
            Err(e) if einval(&e) && quota != 0 => retry_burst = Some(v),
            Err(e) => return Err(write_err("burst", &v, dir, "cpu.cfs_burst_us", e)),
        }
    }
    if quota != 0 {
        files::write(
            dir,
            "cpu.cfs_quota_us",
            &quota.to_string(),
            &format!("{S}.quota"),
        )?;
        if let Some(v) = retry_period {
            files::write(dir, "cpu.cfs_period_us", &v, &format!("{S}.period"))?;
        }
        if let Some(v) = retry_burst {
            files::write(dir, "cpu.cfs_burst_us", &v, &format!("{S}.burst"))?;
        }
    }
    if let Some(idle) = c.idle() {
        files::write(dir, "cpu.idle", &idle.to_string(), &format!("{S}.idle"))?;
    }
    set_v1_realtime(dir, c)
}

/// Real-time bandwidth; set before any process joins (a SCHED_RR task cannot join a cgroup
/// without rt runtime).
fn set_v1_realtime(dir: &Path, c: &LinuxCpu) -> Result<()> {
    let runtime = c.realtime_runtime().unwrap_or(0);
    let mut retry_period = None;
    if let Some(period) = c.realtime_period().filter(|p| *p != 0) {
        let v = period.to_string();
        if let Err(e) = files::write_raw(&dir.join("cpu.rt_period_us"), &v) {
            if !einval(&e) || runtime == 0 {
                return Err(write_err("realtimePeriod", &v, dir, "cpu.rt_period_us", e));
            }
            retry_period = Some(v);
        }
    }
    if runtime != 0 {
        files::write(
            dir,
            "cpu.rt_runtime_us",
            &runtime.to_string(),
            &format!("{S}.realtimeRuntime"),
        )?;
        if let Some(v) = retry_period {
            files::write(dir, "cpu.rt_period_us", &v, &format!("{S}.realtimePeriod"))?;
        }
    }
    Ok(())
}

fn set_v2(dir: &Path, c: &LinuxCpu) -> Result<()> {
    if c.realtime_runtime().is_some_and(|v| v != 0) || c.realtime_period().is_some_and(|v| v != 0) {
        return Err(Error::Unsupported(format!(
            "{S}.realtimeRuntime/realtimePeriod: cgroup v2 has no real-time group scheduling \
             settings (cpu.rt_runtime_us exists only in cgroup v1)"
        )));
    }
    if let Some(idle) = c.idle() {
        files::write(dir, "cpu.idle", &idle.to_string(), &format!("{S}.idle"))?;
    }
    if let Some(shares) = c.shares().filter(|s| *s != 0) {
        files::write(
            dir,
            "cpu.weight",
            &shares_to_weight(shares).to_string(),
            &format!("{S}.shares"),
        )?;
    }
    let quota = c.quota().unwrap_or(0);
    let period = c.period().unwrap_or(0);
    let mut retry_burst = None;
    if let Some(burst) = c.burst() {
        let v = burst.to_string();
        match files::write_raw(&dir.join("cpu.max.burst"), &v) {
            Ok(()) => {}
            Err(e) if einval(&e) && quota != 0 => retry_burst = Some(v),
            Err(e) => return Err(write_err("burst", &v, dir, "cpu.max.burst", e)),
        }
    }
    if quota != 0 || period != 0 {
        let q = if quota > 0 {
            quota.to_string()
        } else {
            "max".into()
        };
        // The kernel's default period, documented in cgroup-v2.rst.
        let p = if period == 0 { 100_000 } else { period };
        files::write(dir, "cpu.max", &format!("{q} {p}"), &format!("{S}.quota"))?;
        if let Some(v) = retry_burst {
            files::write(dir, "cpu.max.burst", &v, &format!("{S}.burst"))?;
        }
    }
    Ok(())
}

/// cpu.shares (2..262144, default 1024) as cpu.weight (1..10000, default 100), with the
/// curve current runc uses: it maps the minimum, default and maximum exactly.
pub fn shares_to_weight(shares: u64) -> u64 {
    match shares {
        0 => 0,
        1..=2 => 1,
        262_144.. => 10_000,
        s => {
            let l = (s as f64).log2();
            let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
            10f64.powf(exponent).ceil() as u64
        }
    }
}

fn set_cpuset(cg: &Cgroup, c: &LinuxCpu) -> Result<()> {
    let cpus = c.cpus().as_deref().filter(|s| !s.is_empty());
    let mems = c.mems().as_deref().filter(|s| !s.is_empty());
    if cpus.is_none() && mems.is_none() {
        return Ok(());
    }
    let place = cg.place_for(CPUSET, &format!("{S}.cpus/mems"))?;
    let dir = place.dir();
    if let Some(v) = cpus {
        files::write(dir, "cpuset.cpus", v, &format!("{S}.cpus"))?;
    }
    if let Some(v) = mems {
        files::write(dir, "cpuset.mems", v, &format!("{S}.mems"))?;
    }
    Ok(())
}

fn write_err(field: &str, value: &str, dir: &Path, file: &str, e: std::io::Error) -> Error {
    Error::os(
        format!(
            "{S}.{field}: write {value:?} to {}",
            dir.join(file).display()
        ),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::{fake_v2, read_lines};
    use oci_spec::runtime::LinuxCpuBuilder;

    #[test]
    fn shares_to_weight_matches_runc() {
        assert_eq!(shares_to_weight(0), 0);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 100);
        assert_eq!(shares_to_weight(512), 59);
        assert_eq!(shares_to_weight(2048), 174);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }

    #[test]
    fn v2_weight_max_burst_idle_and_cpuset() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(
            t.path(),
            &[
                "cpu.weight",
                "cpu.max",
                "cpu.max.burst",
                "cpu.idle",
                "cpuset.cpus",
                "cpuset.mems",
            ],
        );
        let c = LinuxCpuBuilder::default()
            .shares(1024u64)
            .quota(50_000i64)
            .burst(10_000u64)
            .idle(0i64)
            .cpus("0-1")
            .mems("0")
            .build()
            .unwrap();
        set(&cg, &c).unwrap();
        assert_eq!(read_lines(&dir, "cpu.weight"), ["100"]);
        assert_eq!(read_lines(&dir, "cpu.max"), ["50000 100000"]);
        assert_eq!(read_lines(&dir, "cpu.max.burst"), ["10000"]);
        assert_eq!(read_lines(&dir, "cpu.idle"), ["0"]);
        assert_eq!(read_lines(&dir, "cpuset.cpus"), ["0-1"]);
        assert_eq!(read_lines(&dir, "cpuset.mems"), ["0"]);
        // A period alone keeps the quota unlimited.
        let c = LinuxCpuBuilder::default()
            .period(250_000u64)
            .build()
            .unwrap();
        set(&cg, &c).unwrap();
        assert_eq!(read_lines(&dir, "cpu.max").last().unwrap(), "max 250000");
    }

    #[test]
    fn v2_realtime_is_refused_clearly() {
        let t = tempfile::tempdir().unwrap();
        let (cg, _) = fake_v2(t.path(), &["cpu.max"]);
        let c = LinuxCpuBuilder::default()
            .realtime_runtime(1000i64)
            .build()
            .unwrap();
        let err = set(&cg, &c).unwrap_err().to_string();
        assert!(err.contains("realtimeRuntime"), "{err}");
        assert!(err.contains("cgroup v2"), "{err}");
    }
}
