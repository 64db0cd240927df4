//! Container and pod statistics as kubelet reads them (its summary API and eviction
//! manager): CPU time, memory usage and working set (usage less inactive file pages, as
//! cAdvisor and containerd count it), the writable layer's usage, and the pod's total.

use tonic::Status;
use wharf_engine::Engine;
use wharf_engine::db::{ContainerRow, PodRow};
use wharf_engine::model::ContainerState;

use crate::api::*;
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

/// One container's usage (zeros once it stopped: its cgroup is gone).
pub fn container_stats(e: &Engine, row: &ContainerRow) -> Result<ContainerStats, Status> {
    let now = meta::now_nanos();
    let running = row.state == ContainerState::Running;
    let cg = if running {
        e.container_stats(&row.id).map_err(from_engine)?
    } else {
        None
    };
    let io = cg.as_ref().and_then(|s| io_usage(&s.blkio.psi, now));
    let (cpu, mem) = match &cg {
        Some(s) => {
            let usage = s.memory.usage.usage;
            let rss = ["total_rss", "anon"]
                .iter()
                .find_map(|k| s.memory.raw.get(*k).copied())
                .unwrap_or(0);
            let faults = |k: &[&str]| k.iter().find_map(|k| s.memory.raw.get(*k).copied());
            (
                CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: value(s.cpu.usage.total),
                    psi: psi(&s.cpu.psi),
                    ..Default::default()
                },
                MemoryUsage {
                    timestamp: now,
                    working_set_bytes: value(working_set(s)),
                    usage_bytes: value(usage),
                    rss_bytes: value(rss),
                    page_faults: faults(&["total_pgfault", "pgfault"]).and_then(value),
                    major_page_faults: faults(&["total_pgmajfault", "pgmajfault"]).and_then(value),
                    psi: psi(&s.memory.psi),
                    ..Default::default()
                },
            )
        }
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
    Ok(ContainerStats {
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
    })
}

/// A pod's usage: its containers', summed.
pub fn pod_stats(e: &Engine, pod: &PodRow) -> Result<PodSandboxStats, Status> {
    let now = meta::now_nanos();
    let mut containers = Vec::new();
    for c in e
        .list_containers(&wharf_engine::ContainerFilter {
            all: true,
            pod: Some(pod.id.clone()),
            ..Default::default()
        })
        .map_err(from_engine)?
    {
        containers.push(container_stats(e, &c.row)?);
    }
    let sum = |f: &dyn Fn(&ContainerStats) -> Option<u64>| -> u64 {
        containers.iter().filter_map(f).sum()
    };
    let cpu = sum(&|c| c.cpu.as_ref()?.usage_core_nano_seconds.map(|v| v.value));
    let ws = sum(&|c| c.memory.as_ref()?.working_set_bytes.map(|v| v.value));
    let usage = sum(&|c| c.memory.as_ref()?.usage_bytes.map(|v| v.value));
    // Stall times overlap between containers, so the pod's come from its own cgroup.
    let own = e.pod_cgroup_stats(pod);
    let own_psi = |f: fn(&wharf_engine::stats::Stats) -> &Option<wharf_engine::stats::Psi>| {
        own.as_ref().and_then(|s| psi(f(s)))
    };
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
                usage_core_nano_seconds: value(cpu),
                psi: own_psi(|s| &s.cpu.psi),
                ..Default::default()
            }),
            memory: Some(MemoryUsage {
                timestamp: now,
                working_set_bytes: value(ws),
                usage_bytes: value(usage),
                psi: own_psi(|s| &s.memory.psi),
                ..Default::default()
            }),
            network: network(e, pod, now),
            containers,
            io,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The pod's interfaces: eth0 (what CNI plugins and the built-in bridge name the pod's
/// interface) as the default, the others besides. None on the host's network.
fn network(e: &Engine, pod: &PodRow, now: i64) -> Option<NetworkUsage> {
    let counters = e.pod_network_counters(&pod.id).ok()?;
    let mut all: Vec<NetworkInterfaceUsage> = counters
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
        default_interface: Some(all.remove(default)),
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
        .map(|row| container_stats(e, row))
        .filter(|r| !gone(r))
        .collect()
}

/// Stats of the ready pods a filter selects (ListPodSandboxStats and its stream).
pub fn list_pods(
    e: &Engine,
    listings: &Listings,
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
        .map(|pod| pod_stats(e, pod))
        .filter(|r| !gone(r))
        .collect()
}
