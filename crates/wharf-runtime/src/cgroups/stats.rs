//! Resource usage of a container's cgroup, in the JSON shape of runc's `types.Stats` (what
//! `runc events` prints and containerd and other tools parse), read from v1 or v2 files
//! depending on where each controller lives.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::route::{BLKIO, CPU, CPUACCT, CPUSET, HUGETLB, MEMORY, PIDS, Place};
use super::{Cgroup, files};
use crate::error::{Error, Result};

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// runc's types.Stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// CPU usage and throttling.
    pub cpu: Cpu,
    /// cpuset configuration.
    pub cpuset: CpuSet,
    /// Memory usage.
    pub memory: Memory,
    /// Number of tasks.
    pub pids: Pids,
    /// Block I/O.
    pub blkio: Blkio,
    /// Hugetlb usage per page size ("2MB").
    pub hugetlb: BTreeMap<String, Hugetlb>,
    /// Intel RDT (not supported: always empty).
    pub intel_rdt: IntelRdt,
    /// Network interface counters (runc fills these only for interfaces it created: null).
    pub network_interfaces: Option<Vec<serde_json::Value>>,
}

/// cpu.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    /// Usage in nanoseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage: CpuUsage,
    /// CFS throttling.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub throttling: Throttling,
    /// Pressure stall information (`cpu.pressure`; cgroup v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

/// Pressure stall information of one resource, as the kernel keeps it per v2 cgroup
/// (`<resource>.pressure`) and runc reports it: the share of time some (or all) of the
/// cgroup's tasks stalled waiting for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Psi {
    /// Some tasks stalled.
    #[serde(default)]
    pub some: PsiData,
    /// All non-idle tasks stalled at once (the kernel reports zeros for CPU at the root).
    #[serde(default)]
    pub full: PsiData,
}

/// One PSI line: running averages over 10, 60 and 300 s (percent), and the total stall
/// time in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PsiData {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total: u64,
}

/// cpu.usage (nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUsage {
    /// Total.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total: u64,
    /// Per CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu: Vec<u64>,
    /// Per CPU, kernel mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu_kernel: Vec<u64>,
    /// Per CPU, user mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu_user: Vec<u64>,
    /// Kernel mode.
    #[serde(default)]
    pub kernel: u64,
    /// User mode.
    #[serde(default)]
    pub user: u64,
}

/// cpu.throttling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Throttling {
    /// Enforcement periods.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub periods: u64,
    /// Periods in which the cgroup was throttled.
    #[serde(default, rename = "throttledPeriods", skip_serializing_if = "is_zero")]
    pub throttled_periods: u64,
    /// Time throttled, nanoseconds.
    #[serde(default, rename = "throttledTime", skip_serializing_if = "is_zero")]
    pub throttled_time: u64,
}

/// cpuset (v1 files; on v2 only the effective cpus and mems).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u16>,
    #[serde(default)]
    pub cpu_exclusive: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mems: Vec<u16>,
    #[serde(default)]
    pub mem_hardwall: u64,
    #[serde(default)]
    pub mem_exclusive: u64,
    #[serde(default)]
    pub memory_migrate: u64,
    #[serde(default)]
    pub memory_spread_page: u64,
    #[serde(default)]
    pub memory_spread_slab: u64,
    #[serde(default)]
    pub memory_pressure: u64,
    #[serde(default)]
    pub sched_load_balance: u64,
    #[serde(default)]
    pub sched_relax_domain_level: i64,
}

/// One memory counter set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// Limit (u64::MAX when unlimited).
    #[serde(default)]
    pub limit: u64,
    /// Usage.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage: u64,
    /// Peak usage.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max: u64,
    /// Times the limit was hit.
    #[serde(default)]
    pub failcnt: u64,
}

/// memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Page cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache: u64,
    /// Memory.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage: MemoryEntry,
    /// Memory + swap (as on v1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub swap: MemoryEntry,
    /// Kernel memory (v1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kernel: MemoryEntry,
    /// Kernel TCP buffers (v1).
    #[serde(default, rename = "kernelTCP", skip_serializing_if = "is_zero")]
    pub kernel_tcp: MemoryEntry,
    /// memory.stat as it is.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, u64>,
    /// Pressure stall information (`memory.pressure`; cgroup v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

/// pids.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pids {
    /// Tasks now.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub current: u64,
    /// Limit (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit: u64,
}

/// One blkio counter: device, operation (Read, Write, ...), value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlkioEntry {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub major: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub minor: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub op: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub value: u64,
}

/// blkio, in runc's tables (v2 io.stat fills the bytes and serviced ones).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Blkio {
    #[serde(
        default,
        rename = "ioServiceBytesRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_service_bytes_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioServicedRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_serviced_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioQueueRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_queued_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioServiceTimeRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_service_time_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioWaitTimeRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_wait_time_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioMergedRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_merged_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioTimeRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_time_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "sectorsRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub sectors_recursive: Vec<BlkioEntry>,
    /// Pressure stall information (`io.pressure`; cgroup v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

/// Hugetlb usage for one page size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hugetlb {
    /// Bytes in use.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage: u64,
    /// Peak (v1 only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max: u64,
    /// Allocations that failed because of the limit.
    #[serde(default)]
    pub failcnt: u64,
}

/// Intel RDT: not supported, serialised as `{}` like runc's empty struct.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntelRdt {}

impl Cgroup {
    /// Collect the cgroup's statistics. Controllers the container has no directory for are
    /// left at zero; a file that cannot be parsed is an error naming it.
    pub fn stats(&self) -> Result<Stats> {
        let mut s = Stats::default();
        match self.place(CPUACCT) {
            Some(Place::V1(dir)) => cpuacct_v1(dir, &mut s.cpu.usage)?,
            Some(Place::V2(dir)) => cpu_v2(dir, &mut s.cpu)?,
            None => {}
        }
        match self.place(CPU) {
            Some(Place::V1(dir)) => throttling_v1(dir, &mut s.cpu.throttling)?,
            Some(Place::V2(_)) => {}
            // cpu.stat exists in every v2 cgroup, controller enabled or not.
            None => {
                if let Some(dir) = self.unified_dir().filter(|_| self.v2) {
                    cpu_v2(dir, &mut s.cpu)?;
                }
            }
        }
        if let Some(place) = self.place(CPUSET) {
            cpuset(place, &mut s.cpuset)?;
        }
        match self.place(MEMORY) {
            Some(Place::V1(dir)) => memory_v1(dir, &mut s.memory)?,
            Some(Place::V2(dir)) => memory_v2(dir, &mut s.memory)?,
            None => {}
        }
        match self.place(PIDS) {
            Some(place) => pids(place.dir(), &mut s.pids)?,
            None => s.pids.current = self.pids().map(|p| p.len() as u64).unwrap_or(0),
        }
        match self.place(BLKIO) {
            Some(Place::V1(dir)) => blkio_v1(dir, &mut s.blkio)?,
            Some(Place::V2(dir)) => io_v2(dir, &mut s.blkio)?,
            None => {}
        }
        if let Some(place) = self.place(HUGETLB) {
            hugetlb(place, &mut s.hugetlb)?;
        }
        // Every v2 cgroup keeps them, whichever controllers it has (a hybrid host's
        // containers too, in their unified directory); kernels without PSI have no files.
        if let Some(dir) = self.unified_dir() {
            s.cpu.psi = psi(dir, "cpu.pressure")?;
            s.memory.psi = psi(dir, "memory.pressure")?;
            s.blkio.psi = psi(dir, "io.pressure")?;
        }
        Ok(s)
    }
}

/// `<resource>.pressure`: "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and a "full"
/// line. None where the file is missing (no PSI in the kernel, or `psi=0` at boot, where
/// reading it fails with EOPNOTSUPP).
fn psi(dir: &Path, file: &str) -> Result<Option<Psi>> {
    let Ok(text) = files::read(dir, file) else {
        return Ok(None);
    };
    let mut out = Psi::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let data = match fields.next() {
            Some("some") => &mut out.some,
            Some("full") => &mut out.full,
            _ => return Err(parse_err(dir, file, "a line neither some nor full")),
        };
        for kv in fields {
            let parsed = match kv.split_once('=') {
                Some(("avg10", v)) => v.parse().map(|v| data.avg10 = v).is_ok(),
                Some(("avg60", v)) => v.parse().map(|v| data.avg60 = v).is_ok(),
                Some(("avg300", v)) => v.parse().map(|v| data.avg300 = v).is_ok(),
                Some(("total", v)) => v.parse().map(|v| data.total = v).is_ok(),
                // Fields a later kernel may add.
                Some(_) => true,
                None => false,
            };
            if !parsed {
                return Err(parse_err(dir, file, &format!("bad field {kv:?}")));
            }
        }
    }
    Ok(Some(out))
}

fn parse_err(dir: &Path, file: &str, what: &str) -> Error {
    Error::Other(format!(
        "cannot parse {} ({what})",
        dir.join(file).display()
    ))
}

fn numbers(dir: &Path, file: &str) -> Result<Vec<u64>> {
    files::read_ctx(dir, file)?
        .split_whitespace()
        .map(|v| v.parse().map_err(|_| parse_err(dir, file, "not a number")))
        .collect()
}

fn cpuacct_v1(dir: &Path, u: &mut CpuUsage) -> Result<()> {
    u.total = files::read_u64(dir, "cpuacct.usage")?;
    u.percpu = numbers(dir, "cpuacct.usage_percpu")?;
    // cpuacct.stat is in clock ticks.
    // SAFETY: sysconf has no preconditions.
    let hz = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    };
    let stat = files::read_ctx(dir, "cpuacct.stat")?;
    for (k, v) in files::key_values(&stat) {
        match k {
            "user" => u.user = v * 1_000_000_000 / hz,
            "system" => u.kernel = v * 1_000_000_000 / hz,
            _ => {}
        }
    }
    if let Ok(all) = files::read(dir, "cpuacct.usage_all") {
        // "cpu user system" header, then one line per CPU, in nanoseconds.
        for line in all.lines().skip(1) {
            let f: Vec<u64> = line
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            if f.len() >= 3 {
                u.percpu_user.push(f[1]);
                u.percpu_kernel.push(f[2]);
            }
        }
    }
    Ok(())
}

fn throttling_v1(dir: &Path, t: &mut Throttling) -> Result<()> {
    let Ok(text) = files::read(dir, "cpu.stat") else {
        return Ok(());
    };
    for (k, v) in files::key_values(&text) {
        match k {
            "nr_periods" => t.periods = v,
            "nr_throttled" => t.throttled_periods = v,
            "throttled_time" => t.throttled_time = v,
            _ => {}
        }
    }
    Ok(())
}

fn cpu_v2(dir: &Path, c: &mut Cpu) -> Result<()> {
    let text = files::read_ctx(dir, "cpu.stat")?;
    for (k, v) in files::key_values(&text) {
        match k {
            "usage_usec" => c.usage.total = v * 1000,
            "user_usec" => c.usage.user = v * 1000,
            "system_usec" => c.usage.kernel = v * 1000,
            "nr_periods" => c.throttling.periods = v,
            "nr_throttled" => c.throttling.throttled_periods = v,
            "throttled_usec" => c.throttling.throttled_time = v * 1000,
            _ => {}
        }
    }
    Ok(())
}

/// "0-3,7" -> [0, 1, 2, 3, 7].
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<u16>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn cpuset(place: Place<'_>, c: &mut CpuSet) -> Result<()> {
    let list = |dir: &Path, file: &str| -> Result<Vec<u16>> {
        match files::read(dir, file) {
            Ok(t) => parse_cpu_list(&t).ok_or_else(|| parse_err(dir, file, "not a CPU list")),
            Err(_) => Ok(Vec::new()),
        }
    };
    let num = |dir: &Path, file: &str| files::read(dir, file).ok().and_then(|t| t.parse().ok());
    match place {
        Place::V1(dir) => {
            c.cpus = list(dir, "cpuset.cpus")?;
            c.mems = list(dir, "cpuset.mems")?;
            c.cpu_exclusive = num(dir, "cpuset.cpu_exclusive").unwrap_or(0);
            c.mem_hardwall = num(dir, "cpuset.mem_hardwall").unwrap_or(0);
            c.mem_exclusive = num(dir, "cpuset.mem_exclusive").unwrap_or(0);
            c.memory_migrate = num(dir, "cpuset.memory_migrate").unwrap_or(0);
            c.memory_spread_page = num(dir, "cpuset.memory_spread_page").unwrap_or(0);
            c.memory_spread_slab = num(dir, "cpuset.memory_spread_slab").unwrap_or(0);
            c.memory_pressure = num(dir, "cpuset.memory_pressure").unwrap_or(0);
            c.sched_load_balance = num(dir, "cpuset.sched_load_balance").unwrap_or(0);
            c.sched_relax_domain_level = files::read(dir, "cpuset.sched_relax_domain_level")
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
        }
        Place::V2(dir) => {
            c.cpus = list(dir, "cpuset.cpus.effective")?;
            c.mems = list(dir, "cpuset.mems.effective")?;
        }
    }
    Ok(())
}

fn memory_v1(dir: &Path, m: &mut Memory) -> Result<()> {
    let stat = files::read_ctx(dir, "memory.stat")?;
    m.raw = files::key_values(&stat)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    m.cache = m.raw.get("cache").copied().unwrap_or(0);
    let entry = |prefix: &str| -> Result<MemoryEntry> {
        let f = |name: &str| format!("{prefix}{name}");
        if !files::exists(dir, &f("usage_in_bytes")) {
            return Ok(MemoryEntry::default());
        }
        Ok(MemoryEntry {
            usage: files::read_u64(dir, &f("usage_in_bytes"))?,
            max: files::read_u64(dir, &f("max_usage_in_bytes"))?,
            failcnt: files::read_u64(dir, &f("failcnt"))?,
            limit: files::read_u64(dir, &f("limit_in_bytes"))?,
        })
    };
    m.usage = entry("memory.")?;
    m.swap = entry("memory.memsw.")?;
    m.kernel = entry("memory.kmem.")?;
    m.kernel_tcp = entry("memory.kmem.tcp.")?;
    Ok(())
}

fn memory_v2(dir: &Path, m: &mut Memory) -> Result<()> {
    let stat = files::read_ctx(dir, "memory.stat")?;
    m.raw = files::key_values(&stat)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    m.cache = m.raw.get("file").copied().unwrap_or(0);
    m.usage = MemoryEntry {
        usage: files::read_u64(dir, "memory.current")?,
        limit: files::read_u64(dir, "memory.max")?,
        // memory.peak: Linux 5.19+.
        max: files::read_u64_opt(dir, "memory.peak")?.unwrap_or(0),
        // Times the limit was hit.
        failcnt: files::keyed_value(dir, "memory.events", "max")?.unwrap_or(0),
    };
    // v2 counts swap alone; report memory+swap as v1 (and runc) do.
    if let Some(swap) = files::read_u64_opt(dir, "memory.swap.current")? {
        let limit = files::read_u64(dir, "memory.swap.max")?;
        m.swap = MemoryEntry {
            usage: swap + m.usage.usage,
            limit: if limit == u64::MAX || m.usage.limit == u64::MAX {
                u64::MAX
            } else {
                limit + m.usage.limit
            },
            max: 0,
            failcnt: files::keyed_value(dir, "memory.swap.events", "max")?.unwrap_or(0),
        };
    }
    Ok(())
}

fn pids(dir: &Path, p: &mut Pids) -> Result<()> {
    p.current = files::read_u64(dir, "pids.current")?;
    let max = files::read_u64(dir, "pids.max")?;
    // "max" is reported as 0, as runc does.
    p.limit = if max == u64::MAX { 0 } else { max };
    Ok(())
}

/// "8:0 Read 1234" lines (the "Total" line is skipped).
fn blkio_entries(dir: &Path, file: &str) -> Result<Option<Vec<BlkioEntry>>> {
    let Ok(text) = files::read(dir, file) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split([' ', ':']).collect();
        if f.len() == 2 && f[0] == "Total" {
            continue;
        }
        let bad = || parse_err(dir, file, "malformed line");
        if f.len() < 3 {
            return Err(bad());
        }
        let (op, value) = if f.len() >= 4 {
            (f[2].to_string(), f[3])
        } else {
            (String::new(), f[2])
        };
        out.push(BlkioEntry {
            major: f[0].parse().map_err(|_| bad())?,
            minor: f[1].parse().map_err(|_| bad())?,
            op,
            value: value.parse().map_err(|_| bad())?,
        });
    }
    Ok(Some(out))
}

fn blkio_v1(dir: &Path, b: &mut Blkio) -> Result<()> {
    // The first family whose first file exists wins, as in runc: BFQ, CFQ, throttle.
    if let Some(v) = blkio_entries(dir, "blkio.bfq.io_serviced_recursive")? {
        b.io_serviced_recursive = v;
        b.io_service_bytes_recursive =
            blkio_entries(dir, "blkio.bfq.io_service_bytes_recursive")?.unwrap_or_default();
        return Ok(());
    }
    if let Some(v) = blkio_entries(dir, "blkio.sectors_recursive")? {
        b.sectors_recursive = v;
        let more = [
            (
                "blkio.io_service_time_recursive",
                &mut b.io_service_time_recursive,
            ),
            (
                "blkio.io_wait_time_recursive",
                &mut b.io_wait_time_recursive,
            ),
            ("blkio.io_merged_recursive", &mut b.io_merged_recursive),
            ("blkio.io_queued_recursive", &mut b.io_queued_recursive),
            ("blkio.time_recursive", &mut b.io_time_recursive),
            ("blkio.io_serviced_recursive", &mut b.io_serviced_recursive),
            (
                "blkio.io_service_bytes_recursive",
                &mut b.io_service_bytes_recursive,
            ),
        ];
        for (file, target) in more {
            *target = blkio_entries(dir, file)?.unwrap_or_default();
        }
        return Ok(());
    }
    b.io_serviced_recursive =
        blkio_entries(dir, "blkio.throttle.io_serviced_recursive")?.unwrap_or_default();
    b.io_service_bytes_recursive =
        blkio_entries(dir, "blkio.throttle.io_service_bytes_recursive")?.unwrap_or_default();
    Ok(())
}

fn io_v2(dir: &Path, b: &mut Blkio) -> Result<()> {
    let Ok(text) = files::read(dir, "io.stat") else {
        return Ok(());
    };
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some((major, minor)) = f.next().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else {
            return Err(parse_err(dir, "io.stat", "bad device number"));
        };
        for kv in f {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let (op, table) = match k {
                "rbytes" => ("Read", &mut b.io_service_bytes_recursive),
                "wbytes" => ("Write", &mut b.io_service_bytes_recursive),
                "rios" => ("Read", &mut b.io_serviced_recursive),
                "wios" => ("Write", &mut b.io_serviced_recursive),
                _ => continue,
            };
            table.push(BlkioEntry {
                major,
                minor,
                op: op.into(),
                value: v
                    .parse()
                    .map_err(|_| parse_err(dir, "io.stat", "bad counter"))?,
            });
        }
    }
    Ok(())
}

fn hugetlb(place: Place<'_>, out: &mut BTreeMap<String, Hugetlb>) -> Result<()> {
    for size in super::hugetlb::page_sizes() {
        let h = match place {
            Place::V1(dir) => {
                let f = |n: &str| format!("hugetlb.{size}.{n}");
                Hugetlb {
                    usage: files::read_u64_opt(dir, &f("usage_in_bytes"))?.unwrap_or(0),
                    max: files::read_u64_opt(dir, &f("max_usage_in_bytes"))?.unwrap_or(0),
                    failcnt: files::read_u64_opt(dir, &f("failcnt"))?.unwrap_or(0),
                }
            }
            Place::V2(dir) => {
                // Reservations count what a task may fault in later too: prefer them (runc).
                let usage =
                    match files::read_u64_opt(dir, &format!("hugetlb.{size}.rsvd.current"))? {
                        Some(v) => v,
                        None => files::read_u64_opt(dir, &format!("hugetlb.{size}.current"))?
                            .unwrap_or(0),
                    };
                Hugetlb {
                    usage,
                    max: 0,
                    failcnt: files::keyed_value(dir, &format!("hugetlb.{size}.events"), "max")?
                        .unwrap_or(0),
                }
            }
        };
        out.insert(size, h);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::fake_v2;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,7\n"), Some(vec![0, 1, 2, 3, 7]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
    }

    #[test]
    fn v2_stats_from_files() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &[]);
        let w = |f: &str, s: &str| std::fs::write(dir.join(f), s).unwrap();
        w(
            "cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 10\nnr_throttled 2\nthrottled_usec 7\n",
        );
        w("memory.stat", "anon 4096\nfile 8192\n");
        w("memory.current", "12288\n");
        w("memory.max", "max\n");
        w("memory.peak", "20000\n");
        w("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
        w("memory.swap.current", "100\n");
        w("memory.swap.max", "max\n");
        w("pids.current", "3\n");
        w("pids.max", "max\n");
        w(
            "io.stat",
            "8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n",
        );
        w("cpuset.cpus.effective", "0-1\n");
        w("cpuset.mems.effective", "0\n");
        w(
            "memory.pressure",
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=4242\nfull avg10=0.75 avg60=0.00 avg300=0.00 total=99\n",
        );
        w(
            "cpu.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        );
        let s = cg.stats().unwrap();
        let mem_psi = s.memory.psi.clone().expect("memory.pressure read");
        assert_eq!(mem_psi.some.avg10, 1.5);
        assert_eq!(mem_psi.some.avg60, 0.25);
        assert_eq!(mem_psi.some.total, 4242);
        assert_eq!(mem_psi.full.avg10, 0.75);
        assert_eq!(mem_psi.full.total, 99);
        assert_eq!(s.cpu.psi.as_ref().map(|p| p.some.total), Some(7));
        // No io.pressure (a kernel without PSI has none): no PSI, not an error.
        assert_eq!(s.blkio.psi, None);
        assert_eq!(s.cpu.usage.total, 1_500_000);
        assert_eq!(s.cpu.usage.user, 1_000_000);
        assert_eq!(s.cpu.usage.kernel, 500_000);
        assert_eq!(s.cpu.throttling.throttled_periods, 2);
        assert_eq!(s.cpu.throttling.throttled_time, 7000);
        assert_eq!(s.memory.cache, 8192);
        assert_eq!(s.memory.usage.usage, 12288);
        assert_eq!(s.memory.usage.limit, u64::MAX);
        assert_eq!(s.memory.usage.max, 20000);
        assert_eq!(s.memory.usage.failcnt, 3);
        assert_eq!(s.memory.swap.usage, 12388);
        assert_eq!(s.memory.raw["anon"], 4096);
        assert_eq!(s.pids.current, 3);
        assert_eq!(s.pids.limit, 0);
        assert_eq!(s.cpuset.cpus, vec![0, 1]);
        assert_eq!(
            s.blkio.io_service_bytes_recursive,
            vec![
                BlkioEntry {
                    major: 8,
                    minor: 0,
                    op: "Read".into(),
                    value: 10
                },
                BlkioEntry {
                    major: 8,
                    minor: 0,
                    op: "Write".into(),
                    value: 20
                },
            ]
        );
        // runc's JSON names and omissions.
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["cpu"]["throttling"]["throttledPeriods"], 2);
        assert_eq!(v["memory"]["usage"]["limit"], u64::MAX);
        assert_eq!(v["blkio"]["ioServiceBytesRecursive"][0]["op"], "Read");
        assert!(v["blkio"].get("ioQueueRecursive").is_none());
        assert!(v["pids"].get("limit").is_none());
        assert!(v["memory"].get("kernel").is_none());
        assert_eq!(v["intel_rdt"], serde_json::json!({}));
        assert!(v["network_interfaces"].is_null());
        // runc's PSI shape.
        assert_eq!(v["memory"]["psi"]["some"]["total"], 4242);
        assert_eq!(v["memory"]["psi"]["full"]["avg10"], 0.75);
        assert!(v["blkio"].get("psi").is_none());
    }

    #[test]
    fn a_malformed_pressure_file_is_named() {
        let t = tempfile::tempdir().unwrap();
        let (_, dir) = fake_v2(t.path(), &[]);
        std::fs::write(
            dir.join("io.pressure"),
            "some avg10=x avg60=0 avg300=0 total=1\n",
        )
        .unwrap();
        let e = psi(&dir, "io.pressure").unwrap_err().to_string();
        assert!(e.contains("io.pressure") && e.contains("avg10=x"), "{e}");
    }

    #[test]
    fn v2_unreadable_file_is_named() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &[]);
        std::fs::write(dir.join("cpu.stat"), "usage_usec 1\n").unwrap();
        std::fs::write(dir.join("memory.stat"), "anon 1\n").unwrap();
        std::fs::write(dir.join("memory.current"), "lots\n").unwrap();
        let err = cg.stats().unwrap_err().to_string();
        assert!(err.contains("memory.current"), "{err}");
    }
}
