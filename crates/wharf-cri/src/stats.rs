//! Container and pod statistics as kubelet reads them (its summary API and eviction
//! manager): CPU time and rate, memory usage, working set (usage less inactive file pages,
//! as cAdvisor and containerd count it) and what is left below the limit, pressure stalls,
//! the writable layer's usage, and the pod's own totals and process count.

use tonic::Status;
use wharf_engine::Engine;
use wharf_engine::db::{ContainerRow, PodRow};
use wharf_engine::model::ContainerState;

use crate::api::*;
use crate::cpu_rate::CpuRates;
use crate::listings::Listings;
use crate::meta;
use crate::status::from_engine;

fn value(v: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value: v })
}

/// The working set: usage less inactive file pages, as cAdvisor and containerd count it
/// (what kubelet evicts by).
pub fn working_set(s: &wharf_engine::stats::Stats) -> u64 {
    let inactive = ["total_inactive_file", "inactive_file"]
        .iter()
        .find_map(|k| s.memory.raw.get(*k).copied())
        .unwrap_or(0);
    s.memory.usage.usage.saturating_sub(inactive)
}

/// A cgroup's pressure stall information as the CRI carries it (KEP-4205): the kernel
/// counts the total in microseconds, the CRI in nanoseconds. None where the cgroup keeps no
/// PSI (cgroup v1, or a kernel without `CONFIG_PSI`).
fn psi(p: &Option<wharf_engine::stats::Psi>) -> Option<PsiStats> {
    let data = |d: &wharf_engine::stats::PsiData| PsiData {
        total: d.total.saturating_mul(1000),
        avg10: d.avg10,
        avg60: d.avg60,
        avg300: d.avg300,
    };
    p.as_ref().map(|p| PsiStats {
        full: Some(data(&p.full)),
        some: Some(data(&p.some)),
    })
}

/// The CRI's I/O usage, which holds nothing but the I/O PSI.
fn io_usage(p: &Option<wharf_engine::stats::Psi>, now: i64) -> Option<IoUsage> {
    psi(p).map(|p| IoUsage {
        timestamp: now,
        psi: Some(p),
    })
}

/// Bytes left before the memory limit (`limit` 0 or "unlimited": none, and then no value,
/// as cAdvisor leaves it out).
fn available(limit: u64, working_set: u64) -> Option<UInt64Value> {
    (limit > 0 && limit < i64::MAX as u64 / 2).then(|| UInt64Value {
        value: limit.saturating_sub(working_set),
    })
}

/// A cgroup's memory as the CRI carries it; `limit` its memory limit (0: none).
fn memory_usage(s: &wharf_engine::stats::Stats, limit: u64, now: i64) -> MemoryUsage {
    let raw = |k: &[&str]| k.iter().find_map(|k| s.memory.raw.get(*k).copied());
    let ws = working_set(s);
    MemoryUsage {
        timestamp: now,
        working_set_bytes: value(ws),
        available_bytes: available(limit, ws),
        usage_bytes: value(s.memory.usage.usage),
        rss_bytes: value(raw(&["total_rss", "anon"]).unwrap_or(0)),
        page_faults: raw(&["total_pgfault", "pgfault"]).and_then(value),
        major_page_faults: raw(&["total_pgmajfault", "pgmajfault"]).and_then(value),
        psi: psi(&s.memory.psi),
    }
}

/// One container's usage (zeros once it stopped: its cgroup is gone).
pub fn container_stats(
    e: &Engine,
    rates: &CpuRates,
    row: &ContainerRow,
) -> Result<ContainerStats, Status> {
    Ok(container_stats_and_processes(e, rates, row)?.0)
}

/// One container's usage and its number of processes.
fn container_stats_and_processes(
    e: &Engine,
    rates: &CpuRates,
    row: &ContainerRow,
) -> Result<(ContainerStats, u64), Status> {
    let now = meta::now_nanos();
    let running = row.state == ContainerState::Running;
    let usage = if running {
        e.container_usage(&row.id).map_err(from_engine)?
    } else {
        None
    };
    let io = usage
        .as_ref()
        .and_then(|u| io_usage(&u.stats.blkio.psi, now));
    let (cpu, mem, processes) = match &usage {
        Some(wharf_engine::ContainerUsage {
            stats: s,
            limits,
            pids,
        }) => (
            CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: value(s.cpu.usage.total),
                usage_nano_cores: rates.rate(&row.id, now, s.cpu.usage.total).and_then(value),
                psi: psi(&s.cpu.psi),
            },
            memory_usage(s, limits.memory, now),
            pids.len() as u64,
        ),
        None => (
            CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: value(0),
                ..Default::default()
            },
            MemoryUsage {
                timestamp: now,
                working_set_bytes: value(0),
                ..Default::default()
            },
            0,
        ),
    };
    let writable = e.writable_layer(row).ok().map(|upper| {
        let (bytes, inodes) = crate::images::usage(&upper);
        FilesystemUsage {
            timestamp: now,
            fs_id: Some(FilesystemIdentifier {
                mountpoint: upper.display().to_string(),
            }),
            used_bytes: value(bytes),
            inodes_used: value(inodes),
        }
    });
    let stats = ContainerStats {
        attributes: Some(ContainerAttributes {
            id: row.id.clone(),
            metadata: Some(meta::container_metadata(&row.spec.labels)),
            labels: meta::user_labels(&row.spec.labels),
            annotations: meta::to_map(&row.spec.annotations),
        }),
        cpu: Some(cpu),
        memory: Some(mem),
        writable_layer: writable,
        io,
        ..Default::default()
    };
    Ok((stats, processes))
}

/// A pod's usage. CPU and memory are its own cgroup's, which holds its containers and
/// counts what containers that exited or restarted used, as kubelet's cAdvisor reads a
/// pod (the sum of the containers' where that cgroup cannot be read); the number of
/// processes is its containers'.
pub fn pod_stats(e: &Engine, rates: &CpuRates, pod: &PodRow) -> Result<PodSandboxStats, Status> {
    let now = meta::now_nanos();
    let mut containers = Vec::new();
    let mut processes = 0;
    for c in e
        .list_containers(&wharf_engine::ContainerFilter {
            all: true,
            pod: Some(pod.id.clone()),
            ..Default::default()
        })
        .map_err(from_engine)?
    {
        let (stats, procs) = container_stats_and_processes(e, rates, &c.row)?;
        containers.push(stats);
        processes += procs;
    }
    let sum = |f: &dyn Fn(&ContainerStats) -> Option<u64>| -> u64 {
        containers.iter().filter_map(f).sum()
    };
    let own = e.pod_cgroup_stats(pod);
    let (cpu_total, memory) = match &own {
        Some(s) => (
            s.cpu.usage.total,
            memory_usage(s, s.memory.usage.limit, now),
        ),
        None => (
            sum(&|c| c.cpu.as_ref()?.usage_core_nano_seconds.map(|v| v.value)),
            MemoryUsage {
                timestamp: now,
                working_set_bytes: value(sum(&|c| {
                    c.memory.as_ref()?.working_set_bytes.map(|v| v.value)
                })),
                usage_bytes: value(sum(&|c| c.memory.as_ref()?.usage_bytes.map(|v| v.value))),
                ..Default::default()
            },
        ),
    };
    let mut memory = memory;
    // A pod cgroup without a limit of its own is bounded by its running containers' when
    // each of them has one (kubelet's cgroupfs pods often hold the limits at the container
    // level); exited ones (no usage read) use nothing.
    let running: Vec<&MemoryUsage> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref().filter(|m| m.usage_bytes.is_some()))
        .collect();
    if memory.available_bytes.is_none()
        && !running.is_empty()
        && running.iter().all(|m| m.available_bytes.is_some())
    {
        memory.available_bytes = value(
            running
                .iter()
                .filter_map(|m| m.available_bytes.map(|v| v.value))
                .sum(),
        );
    }
    let io = own.as_ref().and_then(|s| io_usage(&s.blkio.psi, now));
    Ok(PodSandboxStats {
        attributes: Some(PodSandboxAttributes {
            id: pod.id.clone(),
            metadata: Some(meta::pod_metadata(&pod.spec.labels)),
            labels: meta::user_labels(&pod.spec.labels),
            annotations: meta::to_map(&pod.spec.annotations),
        }),
        linux: Some(LinuxPodSandboxStats {
            cpu: Some(CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: value(cpu_total),
                usage_nano_cores: rates.rate(&pod.id, now, cpu_total).and_then(value),
                psi: own.as_ref().and_then(|s| psi(&s.cpu.psi)),
            }),
            memory: Some(memory),
            network: network(e, pod, now),
            process: Some(ProcessUsage {
                timestamp: now,
                process_count: value(processes),
            }),
            containers,
            io,
        }),
        ..Default::default()
    })
}

/// The pod's interfaces: eth0 (what CNI plugins and the built-in bridge name the pod's
/// interface) as the default, and every interface in the list, the default among them.
/// The CRI's comment says the list excludes the default, but kubelet copies it to its
/// summary API's `interfaces` as it is, where cAdvisor (and so every consumer of the
/// summary) lists them all; a pod with one interface would otherwise show none there.
/// None on the host's network.
fn network(e: &Engine, pod: &PodRow, now: i64) -> Option<NetworkUsage> {
    let counters = e.pod_network_counters(&pod.id).ok()?;
    let all: Vec<NetworkInterfaceUsage> = counters
        .into_iter()
        .map(|i| NetworkInterfaceUsage {
            name: i.name,
            rx_bytes: value(i.rx_bytes),
            rx_errors: value(i.rx_errors),
            tx_bytes: value(i.tx_bytes),
            tx_errors: value(i.tx_errors),
        })
        .collect();
    let default = all.iter().position(|i| i.name == "eth0").unwrap_or(0);
    (!all.is_empty()).then(|| NetworkUsage {
        timestamp: now,
        default_interface: Some(all[default].clone()),
        interfaces: all,
    })
}

/// Whether a listed object was removed before its stats were read (then it is left out).
fn gone<T>(r: &Result<T, Status>) -> bool {
    r.as_ref().is_err_and(|s| s.code() == tonic::Code::NotFound)
}

/// Stats of the running containers a filter selects (ListContainerStats and its stream).
pub fn list_containers(
    e: &Engine,
    listings: &Listings,
    rates: &CpuRates,
    f: ContainerStatsFilter,
) -> Result<Vec<ContainerStats>, Status> {
    let filter = ContainerFilter {
        id: f.id,
        pod_sandbox_id: f.pod_sandbox_id,
        label_selector: f.label_selector,
        state: Some(ContainerStateValue {
            state: crate::api::ContainerState::ContainerRunning as i32,
        }),
    };
    crate::containers::rows(e, listings, &filter)?
        .iter()
        .map(|row| container_stats(e, rates, row))
        .filter(|r| !gone(r))
        .collect()
}

/// Stats of the ready pods a filter selects (ListPodSandboxStats and its stream).
pub fn list_pods(
    e: &Engine,
    listings: &Listings,
    rates: &CpuRates,
    f: PodSandboxStatsFilter,
) -> Result<Vec<PodSandboxStats>, Status> {
    let filter = PodSandboxFilter {
        id: f.id,
        label_selector: f.label_selector,
        state: Some(PodSandboxStateValue {
            state: PodSandboxState::SandboxReady as i32,
        }),
    };
    crate::sandboxes::rows(e, listings, &filter)?
        .iter()
        .map(|pod| pod_stats(e, rates, pod))
        .filter(|r| !gone(r))
        .collect()
}
