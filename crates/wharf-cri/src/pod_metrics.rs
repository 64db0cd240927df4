//! ListMetricDescriptors and ListPodSandboxMetrics: the `container_*` metrics kubelet's
//! `/metrics/cadvisor` endpoint serves when it takes them from the runtime rather than from
//! cAdvisor (its PodAndContainerStatsFromCRI mode).
//!
//! The names, meanings and label keys are cAdvisor's, so the dashboards and alerts written
//! for it keep working: every metric carries `container`, `id`, `image`, `name`,
//! `namespace` and `pod`, plus its own (`interface`, `device`, ...). Values are read live
//! (timestamp 0) from the container's cgroup, its processes, its writable layer and the
//! pod's network namespace. The CRI carries whole numbers only, so the `_seconds` ones are
//! whole seconds, as other runtimes send them.
//!
//! Network counters belong to the pod (its containers share its namespace); everything
//! else to each running container.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tonic::Status;
use wharf_engine::Engine;
use wharf_engine::db::{ContainerRow, PodRow};
use wharf_engine::model::ContainerState;
use wharf_engine::stats::{Limits, Stats};

use crate::api::*;
use crate::listings::Listings;
use crate::meta;
use crate::status::from_engine;

/// The labels every metric carries, in the order of their values.
const BASE_LABELS: [&str; 6] = ["container", "id", "image", "name", "namespace", "pod"];

/// One metric family: its name, help, kind and the labels it adds to [`BASE_LABELS`].
struct Family {
    name: &'static str,
    help: &'static str,
    counter: bool,
    labels: &'static [&'static str],
}

const fn gauge(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Family {
    Family {
        name,
        help,
        counter: false,
        labels,
    }
}

const fn counter(
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
) -> Family {
    Family {
        name,
        help,
        counter: true,
        labels,
    }
}

const DEVICE: &[&str] = &["device"];
const INTERFACE: &[&str] = &["interface"];

/// Every family Wharf reports. The pressure (PSI) ones only where the container's cgroup
/// keeps PSI (cgroup v2).
const FAMILIES: &[Family] = &[
    counter(
        "container_pressure_cpu_stalled_seconds_total",
        "Total time all non-idle tasks of the container stalled waiting for CPU.",
        &[],
    ),
    counter(
        "container_pressure_cpu_waiting_seconds_total",
        "Total time some task of the container waited for CPU.",
        &[],
    ),
    counter(
        "container_pressure_memory_stalled_seconds_total",
        "Total time all non-idle tasks of the container stalled waiting for memory.",
        &[],
    ),
    counter(
        "container_pressure_memory_waiting_seconds_total",
        "Total time some task of the container waited for memory.",
        &[],
    ),
    counter(
        "container_pressure_io_stalled_seconds_total",
        "Total time all non-idle tasks of the container stalled waiting for I/O.",
        &[],
    ),
    counter(
        "container_pressure_io_waiting_seconds_total",
        "Total time some task of the container waited for I/O.",
        &[],
    ),
    counter(
        "container_blkio_device_usage_total",
        "Block device I/O by device and operation, in bytes.",
        &["device", "major", "minor", "operation"],
    ),
    counter(
        "container_cpu_cfs_periods_total",
        "Number of elapsed CFS enforcement periods.",
        &[],
    ),
    counter(
        "container_cpu_cfs_throttled_periods_total",
        "Number of CFS periods in which the container was throttled.",
        &[],
    ),
    counter(
        "container_cpu_cfs_throttled_seconds_total",
        "Total time the container was throttled, in seconds.",
        &[],
    ),
    counter(
        "container_cpu_system_seconds_total",
        "Cumulative CPU time spent in the kernel, in seconds.",
        &[],
    ),
    counter(
        "container_cpu_usage_seconds_total",
        "Cumulative CPU time consumed, in seconds.",
        &["cpu"],
    ),
    counter(
        "container_cpu_user_seconds_total",
        "Cumulative CPU time spent in user mode, in seconds.",
        &[],
    ),
    gauge(
        "container_file_descriptors",
        "Number of open file descriptors of the container's processes.",
        &[],
    ),
    gauge(
        "container_fs_inodes_free",
        "Free inodes of the filesystem holding the pod's writable layers.",
        DEVICE,
    ),
    gauge(
        "container_fs_inodes_total",
        "Inodes of the filesystem holding the pod's writable layers.",
        DEVICE,
    ),
    gauge(
        "container_fs_io_current",
        "I/Os of the container queued on the device.",
        DEVICE,
    ),
    counter(
        "container_fs_io_time_seconds_total",
        "Cumulative time the device spent on the container's I/O, in seconds.",
        DEVICE,
    ),
    counter(
        "container_fs_io_time_weighted_seconds_total",
        "Cumulative time the container's I/Os spent queued and in service, in seconds.",
        DEVICE,
    ),
    gauge(
        "container_fs_limit_bytes",
        "Size of the filesystem holding the writable layer, in bytes.",
        DEVICE,
    ),
    counter(
        "container_fs_reads_bytes_total",
        "Cumulative bytes read from the device.",
        DEVICE,
    ),
    counter(
        "container_fs_read_seconds_total",
        "Cumulative time the container's reads took to be served, in seconds.",
        DEVICE,
    ),
    counter(
        "container_fs_reads_merged_total",
        "Cumulative reads of the container merged with others.",
        DEVICE,
    ),
    counter(
        "container_fs_reads_total",
        "Cumulative reads completed on the device.",
        DEVICE,
    ),
    counter(
        "container_fs_sector_reads_total",
        "Cumulative sectors read on the device.",
        DEVICE,
    ),
    counter(
        "container_fs_sector_writes_total",
        "Cumulative sectors written on the device.",
        DEVICE,
    ),
    gauge(
        "container_fs_usage_bytes",
        "Bytes the container's writable layer uses.",
        DEVICE,
    ),
    counter(
        "container_fs_writes_bytes_total",
        "Cumulative bytes written to the device.",
        DEVICE,
    ),
    counter(
        "container_fs_write_seconds_total",
        "Cumulative time the container's writes took to be served, in seconds.",
        DEVICE,
    ),
    counter(
        "container_fs_writes_merged_total",
        "Cumulative writes of the container merged with others.",
        DEVICE,
    ),
    counter(
        "container_fs_writes_total",
        "Cumulative writes completed on the device.",
        DEVICE,
    ),
    gauge(
        "container_hugetlb_max_usage_bytes",
        "Peak hugepage usage by page size, in bytes.",
        &["size"],
    ),
    gauge(
        "container_hugetlb_usage_bytes",
        "Hugepage usage by page size, in bytes.",
        &["size"],
    ),
    gauge(
        "container_last_seen",
        "Last time the runtime saw the container, in seconds since the epoch.",
        &[],
    ),
    gauge(
        "container_memory_cache",
        "Page cache memory, in bytes.",
        &[],
    ),
    counter(
        "container_memory_events_high_total",
        "Times memory usage went over the high boundary and was throttled.",
        &[],
    ),
    counter(
        "container_memory_events_max_total",
        "Times memory usage was about to go over the limit.",
        &[],
    ),
    gauge(
        "container_memory_failcnt",
        "Number of times memory usage hit the limit.",
        &[],
    ),
    counter(
        "container_memory_failures_total",
        "Cumulative page faults by type and scope.",
        &["failure_type", "scope"],
    ),
    gauge(
        "container_memory_kernel_usage",
        "Kernel memory charged to the container, in bytes.",
        &[],
    ),
    gauge(
        "container_memory_mapped_file",
        "Size of memory-mapped files, in bytes.",
        &[],
    ),
    gauge(
        "container_memory_max_usage_bytes",
        "Peak memory usage, in bytes.",
        &[],
    ),
    gauge(
        "container_memory_rss",
        "Anonymous and swap cache memory, in bytes.",
        &[],
    ),
    gauge("container_memory_swap", "Swap usage, in bytes.", &[]),
    gauge(
        "container_memory_usage_bytes",
        "Current memory usage, page cache included, in bytes.",
        &[],
    ),
    gauge(
        "container_memory_working_set_bytes",
        "Current working set (usage less inactive file pages), in bytes.",
        &[],
    ),
    counter(
        "container_network_receive_bytes_total",
        "Cumulative bytes received.",
        INTERFACE,
    ),
    counter(
        "container_network_receive_errors_total",
        "Cumulative errors while receiving.",
        INTERFACE,
    ),
    counter(
        "container_network_receive_packets_dropped_total",
        "Cumulative packets dropped while receiving.",
        INTERFACE,
    ),
    counter(
        "container_network_receive_packets_total",
        "Cumulative packets received.",
        INTERFACE,
    ),
    counter(
        "container_network_transmit_bytes_total",
        "Cumulative bytes transmitted.",
        INTERFACE,
    ),
    counter(
        "container_network_transmit_errors_total",
        "Cumulative errors while transmitting.",
        INTERFACE,
    ),
    counter(
        "container_network_transmit_packets_dropped_total",
        "Cumulative packets dropped while transmitting.",
        INTERFACE,
    ),
    counter(
        "container_network_transmit_packets_total",
        "Cumulative packets transmitted.",
        INTERFACE,
    ),
    counter(
        "container_oom_events_total",
        "Number of processes the OOM killer killed in the container.",
        &[],
    ),
    gauge(
        "container_processes",
        "Number of processes in the container.",
        &[],
    ),
    gauge(
        "container_sockets",
        "Number of open sockets of the container's processes.",
        &[],
    ),
    gauge(
        "container_spec_cpu_period",
        "CFS period of the container, in microseconds.",
        &[],
    ),
    gauge(
        "container_spec_cpu_quota",
        "CFS quota of the container per period, in microseconds.",
        &[],
    ),
    gauge(
        "container_spec_cpu_shares",
        "CPU shares of the container.",
        &[],
    ),
    gauge(
        "container_spec_memory_limit_bytes",
        "Memory limit of the container, in bytes (0: none).",
        &[],
    ),
    gauge(
        "container_spec_memory_reservation_limit_bytes",
        "Memory reservation of the container, in bytes (0: none).",
        &[],
    ),
    gauge(
        "container_spec_memory_swap_limit_bytes",
        "Memory plus swap limit of the container, in bytes (0: none).",
        &[],
    ),
    gauge(
        "container_start_time_seconds",
        "Start time of the container, in seconds since the epoch.",
        &[],
    ),
    gauge(
        "container_threads",
        "Number of threads in the container.",
        &[],
    ),
    gauge(
        "container_threads_max",
        "Maximum number of threads allowed in the container (0: no limit).",
        &[],
    ),
    gauge(
        "container_ulimits_soft",
        "Soft resource limits of the container's first process.",
        &["ulimit"],
    ),
];

/// ListMetricDescriptors.
pub fn descriptors() -> Vec<MetricDescriptor> {
    FAMILIES
        .iter()
        .map(|f| MetricDescriptor {
            name: f.name.to_string(),
            help: f.help.to_string(),
            label_keys: BASE_LABELS
                .iter()
                .chain(f.labels)
                .map(|k| k.to_string())
                .collect(),
        })
        .collect()
}

/// Metrics under construction for one object: its base label values and what was read.
struct Sink {
    base: [String; 6],
    metrics: Vec<Metric>,
}

impl Sink {
    fn push(&mut self, name: &str, extra: &[&str], value: u64) {
        let Some(f) = FAMILIES.iter().find(|f| f.name == name) else {
            debug_assert!(false, "metric {name} has no family");
            return;
        };
        debug_assert_eq!(f.labels.len(), extra.len(), "labels of {name}");
        self.metrics.push(Metric {
            name: name.to_string(),
            timestamp: 0,
            metric_type: if f.counter {
                MetricType::Counter
            } else {
                MetricType::Gauge
            } as i32,
            label_values: self
                .base
                .iter()
                .cloned()
                .chain(extra.iter().map(|v| v.to_string()))
                .collect(),
            value: Some(UInt64Value { value }),
        });
    }
}

const NANOS: u64 = 1_000_000_000;

/// ListPodSandboxMetrics: every ready pod, with its running containers.
pub fn list(e: &Engine, listings: &Listings) -> Result<Vec<PodSandboxMetrics>, Status> {
    let ready = PodSandboxFilter {
        state: Some(PodSandboxStateValue {
            state: PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    let mut out = Vec::new();
    let devices = DeviceNames::default();
    for pod in crate::sandboxes::rows(e, listings, &ready)? {
        match pod_metrics(e, &pod, &devices) {
            Ok(m) => out.push(m),
            // Removed meanwhile: left out.
            Err(s) if s.code() == tonic::Code::NotFound => {}
            Err(s) => return Err(s),
        }
    }
    Ok(out)
}

fn pod_metrics(
    e: &Engine,
    pod: &PodRow,
    devices: &DeviceNames,
) -> Result<PodSandboxMetrics, Status> {
    let pm = meta::pod_metadata(&pod.spec.labels);
    let mut sink = Sink {
        base: [
            String::new(),
            pod.id.clone(),
            String::new(),
            pod.name.clone(),
            pm.namespace.clone(),
            pm.name.clone(),
        ],
        metrics: Vec::new(),
    };
    // A namespace that went with a pod removed meanwhile reads as no interfaces.
    for i in e.pod_network_counters(&pod.id).unwrap_or_default() {
        let ifc = [i.name.as_str()];
        for (name, v) in [
            ("container_network_receive_bytes_total", i.rx_bytes),
            ("container_network_receive_packets_total", i.rx_packets),
            ("container_network_receive_errors_total", i.rx_errors),
            (
                "container_network_receive_packets_dropped_total",
                i.rx_dropped,
            ),
            ("container_network_transmit_bytes_total", i.tx_bytes),
            ("container_network_transmit_packets_total", i.tx_packets),
            ("container_network_transmit_errors_total", i.tx_errors),
            (
                "container_network_transmit_packets_dropped_total",
                i.tx_dropped,
            ),
        ] {
            sink.push(name, &ifc, v);
        }
    }
    let mut containers = Vec::new();
    let running = e
        .list_containers(&wharf_engine::ContainerFilter {
            pod: Some(pod.id.clone()),
            ..Default::default()
        })
        .map_err(from_engine)?;
    for c in running
        .iter()
        .filter(|c| c.row.state == ContainerState::Running)
    {
        if let Some(m) = container_metrics(e, &pm, &c.row, devices)? {
            containers.push(m);
        }
    }
    // The filesystem's inodes are the pod's (all its containers' layers share them), as
    // cAdvisor reports them for the machine rather than per container.
    if let Some(upper) = running.iter().find_map(|c| e.writable_layer(&c.row).ok()) {
        filesystem_inodes(&mut sink, &upper, devices);
    }
    Ok(PodSandboxMetrics {
        pod_sandbox_id: pod.id.clone(),
        metrics: sink.metrics,
        container_metrics: containers,
    })
}

/// A running container's metrics (None when it stopped while being read).
fn container_metrics(
    e: &Engine,
    pod: &PodSandboxMetadata,
    row: &ContainerRow,
    devices: &DeviceNames,
) -> Result<Option<ContainerMetrics>, Status> {
    let Some(wharf_engine::ContainerUsage {
        stats: s,
        limits: l,
        pids,
    }) = e.container_usage(&row.id).map_err(from_engine)?
    else {
        return Ok(None);
    };
    let mut sink = Sink {
        base: [
            meta::container_metadata(&row.spec.labels).name,
            row.id.clone(),
            row.image_name.clone(),
            row.name.clone(),
            pod.namespace.clone(),
            pod.name.clone(),
        ],
        metrics: Vec::new(),
    };
    cpu(&mut sink, &s);
    memory(&mut sink, &s, &l);
    processes(&mut sink, &s, &l, &pids);
    let upper = e.writable_layer(row).ok();
    let layer_device = upper
        .as_deref()
        .and_then(|u| std::fs::metadata(u).ok())
        .map(|md| {
            (
                rustix::fs::major(md.dev()) as u64,
                rustix::fs::minor(md.dev()) as u64,
            )
        })
        // an anonymous device (tmpfs, a btrfs subvolume) is no block device
        .filter(|(major, _)| *major != 0);
    blkio(&mut sink, &s, layer_device);
    pressure(&mut sink, &s);
    for (size, h) in &s.hugetlb {
        sink.push("container_hugetlb_usage_bytes", &[size], h.usage);
        sink.push("container_hugetlb_max_usage_bytes", &[size], h.max);
    }
    if let Some(upper) = &upper {
        writable_layer(&mut sink, upper, devices);
    }
    let secs = |ns: i64| (ns.max(0) as u64) / NANOS;
    sink.push("container_last_seen", &[], secs(meta::now_nanos()));
    sink.push(
        "container_start_time_seconds",
        &[],
        secs(meta::nanos(row.started_at.as_deref())),
    );
    for (name, v) in [
        ("container_spec_cpu_period", l.cpu_period),
        ("container_spec_cpu_quota", l.cpu_quota),
        ("container_spec_cpu_shares", l.cpu_shares),
        ("container_spec_memory_limit_bytes", l.memory),
        (
            "container_spec_memory_reservation_limit_bytes",
            l.memory_reservation,
        ),
        ("container_spec_memory_swap_limit_bytes", l.memory_swap),
    ] {
        sink.push(name, &[], v);
    }
    Ok(Some(ContainerMetrics {
        container_id: row.id.clone(),
        metrics: sink.metrics,
    }))
}

/// cAdvisor's PSI families: "waiting" is the kernel's `some` total, "stalled" its `full`
/// (microseconds there, whole seconds here).
fn pressure(sink: &mut Sink, s: &Stats) {
    for (resource, psi) in [
        ("cpu", &s.cpu.psi),
        ("memory", &s.memory.psi),
        ("io", &s.blkio.psi),
    ] {
        let Some(psi) = psi else { continue };
        for (kind, data) in [("waiting", &psi.some), ("stalled", &psi.full)] {
            let name = format!("container_pressure_{resource}_{kind}_seconds_total");
            sink.push(&name, &[], data.total / 1_000_000);
        }
    }
}

fn cpu(sink: &mut Sink, s: &Stats) {
    let u = &s.cpu.usage;
    let t = &s.cpu.throttling;
    sink.push(
        "container_cpu_usage_seconds_total",
        &["total"],
        u.total / NANOS,
    );
    sink.push("container_cpu_user_seconds_total", &[], u.user / NANOS);
    sink.push("container_cpu_system_seconds_total", &[], u.kernel / NANOS);
    sink.push("container_cpu_cfs_periods_total", &[], t.periods);
    sink.push(
        "container_cpu_cfs_throttled_periods_total",
        &[],
        t.throttled_periods,
    );
    sink.push(
        "container_cpu_cfs_throttled_seconds_total",
        &[],
        t.throttled_time / NANOS,
    );
}

fn memory(sink: &mut Sink, s: &Stats, l: &Limits) {
    let m = &s.memory;
    // v1 names the hierarchy's totals `total_*`; v2 has one set of names.
    let raw = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| m.raw.get(*k).copied())
            .unwrap_or(0)
    };
    sink.push("container_memory_usage_bytes", &[], m.usage.usage);
    sink.push(
        "container_memory_working_set_bytes",
        &[],
        crate::stats::working_set(s),
    );
    sink.push("container_memory_max_usage_bytes", &[], m.usage.max);
    sink.push("container_memory_failcnt", &[], m.usage.failcnt);
    sink.push("container_memory_cache", &[], m.cache);
    sink.push("container_memory_rss", &[], raw(&["total_rss", "anon"]));
    sink.push(
        "container_memory_mapped_file",
        &[],
        raw(&["total_mapped_file", "file_mapped"]),
    );
    sink.push("container_memory_swap", &[], raw(&["total_swap", "swap"]));
    let kernel = if m.kernel.usage > 0 {
        m.kernel.usage
    } else {
        raw(&["kernel"])
    };
    sink.push("container_memory_kernel_usage", &[], kernel);
    for (kind, own, total) in [
        ("pgfault", "pgfault", "total_pgfault"),
        ("pgmajfault", "pgmajfault", "total_pgmajfault"),
    ] {
        sink.push(
            "container_memory_failures_total",
            &[kind, "container"],
            raw(&[own]),
        );
        sink.push(
            "container_memory_failures_total",
            &[kind, "hierarchy"],
            raw(&[total, own]),
        );
    }
    sink.push("container_oom_events_total", &[], l.oom_kills);
    sink.push(
        "container_memory_events_high_total",
        &[],
        l.memory_high_events,
    );
    sink.push(
        "container_memory_events_max_total",
        &[],
        l.memory_max_events,
    );
}

fn processes(sink: &mut Sink, s: &Stats, l: &Limits, pids: &[i32]) {
    let (mut fds, mut sockets) = (0u64, 0u64);
    for pid in pids {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in dir.flatten() {
            fds += 1;
            if std::fs::read_link(e.path())
                .is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
            {
                sockets += 1;
            }
        }
    }
    sink.push("container_processes", &[], pids.len() as u64);
    sink.push("container_threads", &[], s.pids.current);
    sink.push("container_threads_max", &[], l.pids);
    sink.push("container_file_descriptors", &[], fds);
    sink.push("container_sockets", &[], sockets);
    if let Some(soft) = pids.first().and_then(|p| open_files_soft_limit(*p)) {
        sink.push("container_ulimits_soft", &["max_open_files"], soft);
    }
}

/// The soft RLIMIT_NOFILE of process `pid`, from /proc/<pid>/limits.
fn open_files_soft_limit(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What a device served the container, from the cgroup's block I/O accounting.
#[derive(Default)]
struct DeviceIo {
    read_bytes: u64,
    write_bytes: u64,
    reads: u64,
    writes: u64,
    reads_merged: u64,
    writes_merged: u64,
    read_ns: u64,
    write_ns: u64,
    wait_ns: u64,
    queued: u64,
    io_ms: u64,
}

/// The per-device families (cAdvisor's `container_fs_*` and
/// `container_blkio_device_usage_total`). The device holding the writable layer
/// (`layer_device`) is always reported, at zero when the container did no I/O on it, as
/// cAdvisor reports a container's filesystem devices. The counters only cgroup v1 with a
/// CFQ or BFQ scheduler keeps (merges, service and wait times, queue) read 0 where the
/// kernel does not count them, as cAdvisor reports them on cgroup v2. Sectors read and
/// written read 0 always: v2 does not count them, and v1's one sectors count does not say
/// which way they went.
fn blkio(sink: &mut Sink, s: &Stats, layer_device: Option<(u64, u64)>) {
    use std::collections::BTreeMap;
    let mut per_dev: BTreeMap<(u64, u64), DeviceIo> = BTreeMap::new();
    if let Some(d) = layer_device {
        per_dev.entry(d).or_default();
    }
    let b = &s.blkio;
    let by_op = |entries: &[wharf_engine::stats::BlkioEntry],
                 per_dev: &mut BTreeMap<(u64, u64), DeviceIo>,
                 f: fn(&mut DeviceIo, &str, u64)| {
        for e in entries {
            f(
                per_dev.entry((e.major, e.minor)).or_default(),
                &e.op,
                e.value,
            );
        }
    };
    fn read_write(op: &str, read: &mut u64, write: &mut u64, v: u64) {
        match op {
            "Read" | "read" => *read += v,
            "Write" | "write" => *write += v,
            _ => {}
        }
    }
    fn total(op: &str) -> bool {
        matches!(op, "" | "Total" | "total")
    }
    by_op(&b.io_service_bytes_recursive, &mut per_dev, |d, op, v| {
        read_write(op, &mut d.read_bytes, &mut d.write_bytes, v)
    });
    by_op(&b.io_serviced_recursive, &mut per_dev, |d, op, v| {
        read_write(op, &mut d.reads, &mut d.writes, v)
    });
    by_op(&b.io_merged_recursive, &mut per_dev, |d, op, v| {
        read_write(op, &mut d.reads_merged, &mut d.writes_merged, v)
    });
    by_op(&b.io_service_time_recursive, &mut per_dev, |d, op, v| {
        read_write(op, &mut d.read_ns, &mut d.write_ns, v)
    });
    by_op(&b.io_wait_time_recursive, &mut per_dev, |d, op, v| {
        if total(op) {
            d.wait_ns += v
        }
    });
    by_op(&b.io_queued_recursive, &mut per_dev, |d, op, v| {
        if total(op) {
            d.queued += v
        }
    });
    by_op(&b.io_time_recursive, &mut per_dev, |d, op, v| {
        if total(op) {
            d.io_ms += v
        }
    });
    for ((major, minor), d) in per_dev {
        let name = block_device_name(major, minor);
        let (maj, min) = (major.to_string(), minor.to_string());
        for (op, v) in [("Read", d.read_bytes), ("Write", d.write_bytes)] {
            sink.push(
                "container_blkio_device_usage_total",
                &[&name, &maj, &min, op],
                v,
            );
        }
        let dev = [name.as_str()];
        for (family, v) in [
            ("container_fs_reads_bytes_total", d.read_bytes),
            ("container_fs_writes_bytes_total", d.write_bytes),
            ("container_fs_reads_total", d.reads),
            ("container_fs_writes_total", d.writes),
            ("container_fs_reads_merged_total", d.reads_merged),
            ("container_fs_writes_merged_total", d.writes_merged),
            ("container_fs_sector_reads_total", 0),
            ("container_fs_sector_writes_total", 0),
            ("container_fs_read_seconds_total", d.read_ns / NANOS),
            ("container_fs_write_seconds_total", d.write_ns / NANOS),
            (
                "container_fs_io_time_weighted_seconds_total",
                (d.read_ns + d.write_ns + d.wait_ns) / NANOS,
            ),
            ("container_fs_io_time_seconds_total", d.io_ms / 1000),
            ("container_fs_io_current", d.queued),
        ] {
            sink.push(family, &dev, v);
        }
    }
}

/// `/dev/<name>` of a block device, as its uevent names it (else "major:minor").
fn block_device_name(major: u64, minor: u64) -> String {
    std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
        .ok()
        .and_then(|u| {
            u.lines()
                .find_map(|l| l.strip_prefix("DEVNAME="))
                .map(|n| format!("/dev/{n}"))
        })
        .unwrap_or_else(|| format!("{major}:{minor}"))
}

/// The writable layer: its usage, and the size of the filesystem holding it.
fn writable_layer(sink: &mut Sink, upper: &Path, devices: &DeviceNames) {
    let Ok(md) = std::fs::metadata(upper) else {
        return;
    };
    let device = devices.name(md.dev());
    let dev = [device.as_str()];
    let (bytes, _) = crate::images::usage(upper);
    sink.push("container_fs_usage_bytes", &dev, bytes);
    // The filesystem's inodes are reported for the pod (see `pod_metrics`).
    if let Ok(v) = rustix::fs::statvfs(upper) {
        sink.push("container_fs_limit_bytes", &dev, v.f_blocks * v.f_frsize);
    }
}

/// The total and free inodes of the filesystem holding `upper`, by its device.
fn filesystem_inodes(sink: &mut Sink, upper: &Path, devices: &DeviceNames) {
    let (Ok(md), Ok(v)) = (std::fs::metadata(upper), rustix::fs::statvfs(upper)) else {
        return;
    };
    let device = devices.name(md.dev());
    sink.push("container_fs_inodes_total", &[&device], v.f_files);
    sink.push("container_fs_inodes_free", &[&device], v.f_ffree);
}

/// Device labels by device number, found once per listing: the pods' writable layers
/// mostly sit on one filesystem, and mountinfo, which names it, grows with every pod's
/// mounts. Read twice per container, it took 37% of the daemon's CPU over a `cri_pod`
/// run with 100 pods, most of it in ListPodSandboxMetrics.
#[derive(Default)]
struct DeviceNames(std::cell::RefCell<std::collections::HashMap<u64, String>>);

impl DeviceNames {
    fn name(&self, dev: u64) -> String {
        let mut known = self.0.borrow_mut();
        known.entry(dev).or_insert_with(|| device_name(dev)).clone()
    }
}

/// A filesystem's device label: its mount's source (e.g. /dev/vda1), else major:minor.
fn device_name(dev: u64) -> String {
    mount_source(dev)
        .unwrap_or_else(|| format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev)))
}

/// The source of the mount whose device is `dev` (e.g. /dev/vda1), from mountinfo.
fn mount_source(dev: u64) -> Option<String> {
    let want = format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev));
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let mut f = l.split(' ');
        (f.nth(2)? == want).then_some(())?;
        let (_, after) = l.split_once(" - ")?;
        after.split(' ').nth(1).map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_named_once_with_help_and_cadvisor_labels() {
        let d = descriptors();
        let mut names: Vec<_> = d.iter().map(|d| d.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), d.len());
        for m in &d {
            assert!(!m.help.is_empty(), "{}", m.name);
            assert_eq!(
                m.label_keys[..6],
                BASE_LABELS.map(String::from),
                "{}",
                m.name
            );
            // Prometheus names counters `_total`.
            if FAMILIES.iter().any(|f| f.name == m.name && f.counter) {
                assert!(m.name.ends_with("_total"), "{}", m.name);
            }
        }
    }

    #[test]
    fn a_metric_carries_the_base_and_its_own_label_values() {
        let mut s = Sink {
            base: ["c", "id", "img", "n", "ns", "p"].map(String::from),
            metrics: Vec::new(),
        };
        s.push("container_network_receive_bytes_total", &["eth0"], 42);
        let m = &s.metrics[0];
        assert_eq!(m.label_values, ["c", "id", "img", "n", "ns", "p", "eth0"]);
        assert_eq!(m.metric_type, MetricType::Counter as i32);
        assert_eq!(m.value, Some(UInt64Value { value: 42 }));
    }

    #[test]
    fn pressure_totals_become_cadvisors_waiting_and_stalled_seconds() {
        use wharf_engine::stats::{Psi, PsiData};
        let mut sink = Sink {
            base: ["c", "id", "img", "n", "ns", "p"].map(String::from),
            metrics: Vec::new(),
        };
        let mut s = Stats::default();
        let data = |total| PsiData {
            total,
            ..Default::default()
        };
        s.memory.psi = Some(Psi {
            some: data(3_500_000),
            full: data(1_200_000),
        });
        pressure(&mut sink, &s);
        let got: Vec<(&str, u64)> = sink
            .metrics
            .iter()
            .map(|m| (m.name.as_str(), m.value.as_ref().unwrap().value))
            .collect();
        // Memory only: without PSI files (cpu, io here) no metric, rather than zeros.
        assert_eq!(
            got,
            [
                ("container_pressure_memory_waiting_seconds_total", 3),
                ("container_pressure_memory_stalled_seconds_total", 1),
            ]
        );
    }
}
