//! `update` and `events`: changing a running container's resource limits, and watching its
//! resource usage and OOM kills — runc's flags and output.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use oci_spec::runtime::LinuxResources;
use serde::Serialize;
use serde_json::{Map, Value, json};
use wharf_runtime::{Runtime, Status, cgroups::Stats};

/// `update` flags (runc's).
#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// JSON file with the LinuxResources to apply ("-" for stdin); other flags are then ignored.
    #[arg(short = 'r', long)]
    pub resources: Option<PathBuf>,
    /// Block I/O weight (10-1000).
    #[arg(long = "blkio-weight")]
    pub blkio_weight: Option<u16>,
    /// CPU CFS period in microseconds.
    #[arg(long = "cpu-period")]
    pub cpu_period: Option<u64>,
    /// CPU CFS quota in microseconds (-1: unlimited).
    #[arg(long = "cpu-quota", allow_hyphen_values = true)]
    pub cpu_quota: Option<i64>,
    /// CPU CFS burst in microseconds.
    #[arg(long = "cpu-burst")]
    pub cpu_burst: Option<u64>,
    /// CPU shares (relative weight).
    #[arg(long = "cpu-share", visible_alias = "cpu-shares")]
    pub cpu_shares: Option<u64>,
    /// Real-time period in microseconds.
    #[arg(long = "cpu-rt-period")]
    pub cpu_rt_period: Option<u64>,
    /// Real-time runtime in microseconds.
    #[arg(long = "cpu-rt-runtime", allow_hyphen_values = true)]
    pub cpu_rt_runtime: Option<i64>,
    /// CPUs to use (e.g. 0-2,4).
    #[arg(long = "cpuset-cpus")]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes to use.
    #[arg(long = "cpuset-mems")]
    pub cpuset_mems: Option<String>,
    /// SCHED_IDLE for the cgroup (1) or not (0).
    #[arg(long = "cpu-idle")]
    pub cpu_idle: Option<i64>,
    /// Kernel memory limit (obsolete: most kernels ignore it).
    #[arg(long = "kernel-memory", allow_hyphen_values = true)]
    pub kernel_memory: Option<String>,
    /// Kernel TCP buffer memory limit (cgroup v1).
    #[arg(long = "kernel-memory-tcp", allow_hyphen_values = true)]
    pub kernel_memory_tcp: Option<String>,
    /// Memory limit (bytes, or 512k, 100m, 1g; -1: unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Memory reservation (soft limit).
    #[arg(long = "memory-reservation", allow_hyphen_values = true)]
    pub memory_reservation: Option<String>,
    /// Memory + swap limit (-1: unlimited swap).
    #[arg(long = "memory-swap", allow_hyphen_values = true)]
    pub memory_swap: Option<String>,
    /// Maximum number of processes (-1: unlimited).
    #[arg(long = "pids-limit", allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
    /// Intel RDT/CAT L3 cache schema (not supported).
    #[arg(long = "l3-cache-schema")]
    pub l3_cache_schema: Option<String>,
    /// Intel RDT/MBA memory bandwidth schema (not supported).
    #[arg(long = "mem-bw-schema")]
    pub mem_bw_schema: Option<String>,
    /// Container id.
    pub id: String,
}

/// `events` flags.
#[derive(Args, Debug)]
pub struct EventsArgs {
    /// How often to print a stats event (Go duration: 5s, 500ms, 1m).
    #[arg(long, default_value = "5s")]
    pub interval: String,
    /// Print the container's stats once and exit.
    #[arg(long)]
    pub stats: bool,
    /// Container id.
    pub id: String,
}

/// `update`.
pub fn update(rt: &Runtime, a: &UpdateArgs) -> Result<()> {
    // No Intel RDT support: runc's messages for a host without it.
    if a.l3_cache_schema.as_deref().is_some_and(|s| !s.is_empty()) {
        bail!("Intel RDT/CAT: l3 cache schema is not enabled");
    }
    if a.mem_bw_schema.as_deref().is_some_and(|s| !s.is_empty()) {
        bail!("Intel RDT/MBA: memory bandwidth schema is not enabled");
    }
    let req = match &a.resources {
        Some(path) => read_resources(path)?,
        None => from_flags(a)?,
    };
    if req
        .memory()
        .is_some_and(|m| m.kernel().is_some() || m.kernel_tcp().is_some())
    {
        wharf_runtime::log::warn("kernel memory settings are obsolete; most kernels ignore them");
    }
    rt.update(&a.id, &req)?;
    Ok(())
}

fn read_resources(path: &PathBuf) -> Result<LinuxResources> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("read resources from stdin")?;
    } else {
        text = std::fs::read_to_string(path)
            .with_context(|| format!("read resources from {}", path.display()))?;
    }
    serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "resources {}: not a LinuxResources JSON object: {e}",
            if path.as_os_str() == "-" {
                "from stdin".to_string()
            } else {
                path.display().to_string()
            }
        )
    })
}

/// The request the flags describe, as LinuxResources JSON (so the runtime-spec field names
/// and types are checked by the same parser as `-r`).
fn from_flags(a: &UpdateArgs) -> Result<LinuxResources> {
    let mut memory = Map::new();
    for (flag, key, value) in [
        ("memory", "limit", &a.memory),
        ("memory-reservation", "reservation", &a.memory_reservation),
        ("memory-swap", "swap", &a.memory_swap),
        ("kernel-memory", "kernel", &a.kernel_memory),
        ("kernel-memory-tcp", "kernelTCP", &a.kernel_memory_tcp),
    ] {
        if let Some(v) = value {
            let bytes = if v == "-1" {
                -1
            } else {
                ram_in_bytes(v).with_context(|| format!("invalid value for {flag}"))?
            };
            memory.insert(key.into(), json!(bytes));
        }
    }
    let mut cpu = Map::new();
    let mut put = |key: &str, v: Option<Value>| {
        if let Some(v) = v {
            cpu.insert(key.into(), v);
        }
    };
    put("shares", a.cpu_shares.map(Value::from));
    put("quota", a.cpu_quota.map(Value::from));
    put("period", a.cpu_period.map(Value::from));
    put("burst", a.cpu_burst.map(Value::from));
    put("realtimeRuntime", a.cpu_rt_runtime.map(Value::from));
    put("realtimePeriod", a.cpu_rt_period.map(Value::from));
    put("idle", a.cpu_idle.map(Value::from));
    put("cpus", a.cpuset_cpus.clone().map(Value::from));
    put("mems", a.cpuset_mems.clone().map(Value::from));
    let mut res = Map::new();
    if !memory.is_empty() {
        res.insert("memory".into(), Value::Object(memory));
    }
    if !cpu.is_empty() {
        res.insert("cpu".into(), Value::Object(cpu));
    }
    if let Some(w) = a.blkio_weight.filter(|w| *w != 0) {
        res.insert("blockIO".into(), json!({ "weight": w }));
    }
    if let Some(l) = a.pids_limit {
        res.insert("pids".into(), json!({ "limit": l }));
    }
    Ok(serde_json::from_value(Value::Object(res))?)
}

/// A size as docker's units.RAMInBytes reads it: a number, optionally with a binary unit
/// (k, m, g, t, p; an "i" and a "b" may follow), e.g. "512", "64k", "100m", "1.5GiB".
pub fn ram_in_bytes(s: &str) -> Result<i64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| anyhow!("invalid size: {s:?}"))?;
    let unit = unit.trim_start().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        "t" => 1024f64.powi(4),
        "p" => 1024f64.powi(5),
        _ => bail!("invalid size: {s:?}"),
    };
    Ok((num * mult) as i64)
}

/// A Go duration ("5s", "300ms", "1m30s", "1.5h").
pub fn parse_go_duration(s: &str) -> Result<Duration> {
    wharf_sys::time::parse_go_duration(s).ok_or_else(|| anyhow!("invalid duration {s:?}"))
}

/// One line of `events` output: {"type":..., "id":..., "data":...}.
#[derive(Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Stats>,
}

fn emit(out: &mut impl Write, kind: &str, id: &str, data: Option<&Stats>) -> Result<()> {
    serde_json::to_writer(&mut *out, &Event { kind, id, data })?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// `events`: with --stats one stats event; otherwise a stats event every interval and an
/// "oom" event for each OOM kill, until the container's cgroup goes away.
pub fn events(rt: &Runtime, a: &EventsArgs) -> Result<()> {
    let interval = parse_go_duration(&a.interval)?;
    if interval.is_zero() {
        bail!("duration interval must be greater than 0");
    }
    let (st, status) = rt.state(&a.id)?;
    if status == Status::Stopped {
        bail!("container with id {} is not running", a.id);
    }
    let mut out = std::io::stdout().lock();
    if a.stats {
        let stats = st.cgroup.stats()?;
        return emit(&mut out, "stats", &a.id, Some(&stats));
    }
    let mut watcher = st.cgroup.oom_watcher()?;
    let mut next = Instant::now() + interval;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        if wait_readable(watcher.fd(), wait)? {
            let update = watcher.read()?;
            for _ in 0..update.ooms {
                emit(&mut out, "oom", &a.id, None)?;
            }
            if update.gone {
                return Ok(());
            }
        }
        if Instant::now() >= next {
            match st.cgroup.stats() {
                Ok(stats) => emit(&mut out, "stats", &a.id, Some(&stats))?,
                Err(e) => wharf_runtime::log::log("error", &format!("stats of {}: {e}", a.id)),
            }
            next += interval;
        }
    }
}

fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, timeout: Duration) -> Result<bool> {
    use rustix::event::{PollFd, PollFlags, poll};
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    match poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(anyhow!("wait for OOM events: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_like_docker() {
        assert_eq!(ram_in_bytes("1024").unwrap(), 1024);
        assert_eq!(ram_in_bytes("64k").unwrap(), 64 << 10);
        assert_eq!(ram_in_bytes("100m").unwrap(), 100 << 20);
        assert_eq!(ram_in_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(ram_in_bytes("1.5g").unwrap(), 3 << 29);
        assert_eq!(ram_in_bytes("2 MB").unwrap(), 2 << 20);
        assert!(ram_in_bytes("10x").is_err());
        assert!(ram_in_bytes("m").is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(
            parse_go_duration("300ms").unwrap(),
            Duration::from_millis(300)
        );
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5x").is_err());
    }

    #[test]
    fn flags_become_resources() {
        let a = UpdateArgs {
            resources: None,
            blkio_weight: Some(300),
            cpu_period: Some(100_000),
            cpu_quota: Some(-1),
            cpu_burst: None,
            cpu_shares: Some(512),
            cpu_rt_period: None,
            cpu_rt_runtime: None,
            cpuset_cpus: Some("0".into()),
            cpuset_mems: None,
            cpu_idle: None,
            kernel_memory: None,
            kernel_memory_tcp: None,
            memory: Some("64m".into()),
            memory_reservation: None,
            memory_swap: Some("-1".into()),
            pids_limit: Some(20),
            l3_cache_schema: None,
            mem_bw_schema: None,
            id: "c".into(),
        };
        let r = from_flags(&a).unwrap();
        let m = r.memory().unwrap();
        assert_eq!((m.limit(), m.swap()), (Some(64 << 20), Some(-1)));
        let c = r.cpu().clone().unwrap();
        assert_eq!(
            (c.shares(), c.quota(), c.period()),
            (Some(512), Some(-1), Some(100_000))
        );
        assert_eq!(c.cpus().as_deref(), Some("0"));
        assert_eq!(r.block_io().clone().unwrap().weight(), Some(300));
        assert_eq!(r.pids().unwrap().limit(), 20);
    }
}
