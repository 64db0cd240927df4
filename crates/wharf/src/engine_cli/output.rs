//! What the read-only commands print: `ps`, `logs`, `inspect`, `stats`, `top`, `pod ls`,
//! `pod inspect`, `events`.

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::HashMap;

use super::docker_json;
use crate::format::{self, Format};
use wharf_docker::listing::{PsFilter, ago, seconds_since, status};
use wharf_engine::db::ContainerRow;
use wharf_engine::model::ContainerState;
use wharf_engine::{ContainerFilter, Engine, LogEntry, LogOptions, PodFilter, PodView};

/// kubectl's AGE: `45s`, `3m12s` (under 10 minutes), `25m`, `5h`, `3d`.
pub(super) fn age(t: &str) -> String {
    let Some(s) = seconds_since(t) else {
        return "<unknown>".into();
    };
    match s {
        0..=119 => format!("{s}s"),
        120..=599 if s % 60 != 0 => format!("{}m{}s", s / 60, s % 60),
        120..=10_799 => format!("{}m", s / 60),
        10_800..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// One container's state for `play --status`: `Running, ready`, `Waiting:
/// CrashLoopBackOff (...)`, `Terminated: Completed (exit code 0)`, its restarts and the
/// last probe or hook failure.
pub(super) fn container_state_line(c: &wharf_kube::ContainerStatus) -> String {
    use wharf_kube::ContainerState as S;
    let mut line = match &c.state {
        S::Running { started_at } => format!(
            "Running{}, {}ready{}",
            started_at
                .as_deref()
                .map(|t| format!(" for {}", age(t)))
                .unwrap_or_default(),
            if c.ready { "" } else { "not " },
            if c.started { "" } else { ", not started" }
        ),
        S::Waiting { reason, message } => format!(
            "Waiting: {reason}{}",
            message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        S::Terminated {
            exit_code,
            reason,
            message,
            ..
        } => format!(
            "Terminated: {reason} (exit code {exit_code}){}",
            message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    };
    if c.restart_count > 0 {
        line.push_str(&format!(", restarts {}", c.restart_count));
    }
    if let Some(f) = &c.probe_failure {
        line.push_str(&format!("; last failure: {f}"));
    }
    line
}

pub(super) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map(Vec::len).unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    // Cells padded by hand: a `format!` per cell was a quarter of printing 1000 rows.
    let mut s = String::with_capacity(rows.len() * (widths.iter().sum::<usize>() + 3 * cols));
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            s.push_str(c);
            if i + 1 < cols {
                let pad = widths[i] - c.chars().count() + 3;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.push('\n');
    }
    s
}

/// `wharf ps`.
pub fn ps(
    engine: &Engine,
    (all, last): (bool, Option<usize>),
    (quiet, no_trunc): (bool, bool),
    format: &str,
    pod: Option<&str>,
    filters: &[String],
) -> Result<i32> {
    wharf_engine::hooks::step("ps: begin");
    let filters: Vec<PsFilter> = filters
        .iter()
        .map(|f| {
            let Some((k, v)) = f.split_once('=') else {
                bail!("invalid --filter {f:?}: use KEY=VALUE");
            };
            PsFilter::parse(k, v).map_err(|why| anyhow::anyhow!("invalid --filter {f:?}: {why}"))
        })
        .collect::<Result<_>>()?;
    // A status filter looks at every container, as docker's does without -a.
    let all = all || last.is_some() || filters.iter().any(PsFilter::needs_all);
    // The process ends once this is printed: the listing is left for the kernel to take
    // back with the rest of the heap, not freed row by row first (5% of a `ps` of 1000
    // containers).
    let listing =
        std::mem::ManuallyDrop::new(engine.list_containers_and_pods(&ContainerFilter {
            all,
            pod: pod.map(str::to_string),
            ..Default::default()
        })?);
    let (listed, pods) = &*listing;
    wharf_engine::hooks::step("ps: listed");
    let mut rows: Vec<_> = listed
        .iter()
        .filter(|v| filters.iter().all(|f| f.matches(v)))
        .collect();
    // Newest first, as docker lists them; -n N / -l keep the newest (of every state).
    // (References are sorted: a row is large.)
    rows.sort_by(|a, b| b.row.created_at.cmp(&a.row.created_at));
    if let Some(n) = last {
        rows.truncate(n);
    }
    let mut out = std::io::stdout().lock();
    let id_len = if no_trunc { usize::MAX } else { 12 };
    let short = |id: &str| id[..id.len().min(id_len)].to_string();
    if quiet {
        for v in &rows {
            writeln!(out, "{}", short(&v.row.id))?;
        }
        return Ok(0);
    }
    let fmt = Format::parse(format)?;
    // docker's STATUS, with the health of a container that has a check.
    let status = |v: &wharf_engine::ContainerView| {
        let mut s = status(&v.row);
        if v.row.state == ContainerState::Running
            && let Some(h) = pods
                .get(&v.row.pod_id)
                .and_then(|p| engine.container_health(&v.row, p))
        {
            s.push_str(&match h.status.as_str() {
                "starting" => " (health: starting)".to_string(),
                other => format!(" ({other})"),
            });
        }
        s
    };
    if let Format::Table = fmt {
        let mut t = vec![
            [
                "CONTAINER ID",
                "IMAGE",
                "COMMAND",
                "CREATED",
                "STATUS",
                "PORTS",
                "NAMES",
                "POD",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for v in &rows {
            let c = &v.row;
            // What runs: the entrypoint then the command (as docker ps shows it).
            let cmd = docker_json::argv(c).join(" ");
            let cmd = if !no_trunc && cmd.chars().count() > 20 {
                format!("{}…", cmd.chars().take(19).collect::<String>())
            } else {
                cmd
            };
            t.push(vec![
                short(&c.id),
                c.image_name.clone(),
                format!("\"{cmd}\""),
                format!("{} ago", ago(&c.created_at)),
                status(v),
                wharf_docker::views::ports_column(
                    pods.get(&c.pod_id)
                        .map(|p| p.spec.ports.as_slice())
                        .unwrap_or_default(),
                ),
                c.name.clone(),
                pod_column(v),
            ]);
        }
        write!(out, "{}", table(&t))?;
        return Ok(0);
    }
    let docs: Vec<Value> = rows
        .iter()
        .map(|v| {
            let mut row = docker_json::ps_row(
                v,
                pods.get(&v.row.pod_id),
                status(v),
                format!("{} ago", ago(&v.row.created_at)),
                pod_column(v),
            );
            row["ID"] = json!(short(&v.row.id));
            row
        })
        .collect();
    format::print_rows(&mut out, &fmt, &docker_json::ps_headers(), &docs)?;
    Ok(0)
}

/// The POD column: a Kubernetes pod's containers (kubelet labels them with their pod's
/// namespace and name, through the CRI) show as `namespace/name`, others by pod name.
fn pod_column(v: &wharf_engine::ContainerView) -> String {
    let label = |k: &str| v.row.spec.labels.get(k).filter(|s| !s.is_empty());
    match (
        label("io.kubernetes.pod.namespace"),
        label("io.kubernetes.pod.name"),
    ) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        _ => v.pod_name.clone(),
    }
}

fn since_time(s: &str) -> Result<SystemTime> {
    if let Some(t) = wharf_sys::time::parse_rfc3339(s) {
        return Ok(t);
    }
    let invalid = || format!("invalid time {s:?}: RFC 3339, a Unix time, or a duration like 10m");
    // A bare number is a Unix time (seconds, maybe with a fraction), as docker reads it.
    if let Ok(secs) = s.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok(std::time::UNIX_EPOCH + Duration::from_secs_f64(secs));
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().with_context(invalid)?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => bail!(invalid()),
    };
    Ok(SystemTime::now() - Duration::from_secs(secs))
}

/// `wharf logs`.
pub fn logs(
    engine: &Engine,
    key: &str,
    (follow, tail): (bool, Option<usize>),
    (since, until): (Option<&str>, Option<&str>),
    timestamps: bool,
) -> Result<i32> {
    let until = until.map(since_time).transpose()?;
    let opts = LogOptions {
        tail,
        since: since.map(since_time).transpose()?,
        // Following stops at the end time: nothing later is wanted.
        follow: follow && until.is_none_or(|u| u > SystemTime::now()),
    };
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    engine.container_logs(key, &opts, |e: &LogEntry| {
        if let Some(u) = until
            && wharf_sys::time::parse_rfc3339(&e.time).is_some_and(|t| t > u)
        {
            // Entries come in time order: the rest are later still.
            return false;
        }
        let mut line = Vec::new();
        if timestamps {
            line.extend_from_slice(e.time.as_bytes());
            line.push(b' ');
        }
        line.extend_from_slice(&e.content);
        if !e.partial {
            line.push(b'\n');
        }
        if e.stream == "stderr" {
            stderr.lock().write_all(&line).is_ok()
        } else {
            let mut o = stdout.lock();
            o.write_all(&line).is_ok() && o.flush().is_ok()
        }
    })?;
    Ok(0)
}

/// `wharf inspect`: containers, else pods, else images (`kind` narrows it, as docker's
/// `--type`), as docker-shaped JSON or through a template.
pub fn inspect(
    engine: &Engine,
    objects: &[String],
    tree: bool,
    format: Option<&str>,
    kind: Option<&str>,
) -> Result<i32> {
    if tree {
        return inspect_tree(engine, objects, format == Some("json"));
    }
    let fmt = Format::parse(format.unwrap_or("json"))?;
    if let Some(k) = kind
        && !matches!(k, "container" | "pod" | "image")
    {
        bail!("invalid --type {k:?}: container, pod or image");
    }
    let wants = |k: &str| kind.is_none_or(|want| want == k);
    let mut docs = Vec::new();
    for o in objects {
        if wants("container") {
            match engine.container_status(o) {
                Ok(st) => {
                    let pod = engine.pod(&st.view.row.pod_id).ok();
                    let health = pod
                        .as_ref()
                        .and_then(|p| engine.container_health(&st.view.row, &p.row));
                    docs.push(docker_json::container(
                        &st.view,
                        st.pid,
                        pod.as_ref().map(|p| &p.row),
                        health.as_ref(),
                    ));
                    continue;
                }
                Err(wharf_engine::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if wants("pod") {
            match engine.pod(o) {
                Ok(p) => {
                    docs.push(pod_json(&p));
                    continue;
                }
                Err(wharf_engine::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if wants("image")
            && let Ok(doc) = crate::image_cli::inspect_json(&engine.images(), o)
        {
            docs.push(doc);
            continue;
        }
        return Err(wharf_engine::Error::NotFound {
            kind: match kind {
                Some("container") => "container",
                Some("pod") => "pod",
                Some(_) => "image",
                None => "container, pod or image",
            },
            name: o.clone(),
        }
        .into());
    }
    format::print_documents(&fmt, &docs)?;
    Ok(0)
}

fn inspect_tree(engine: &Engine, objects: &[String], json: bool) -> Result<i32> {
    for o in objects {
        let pod = engine.pod_of(o)?;
        let t = engine.pod_tree(&pod)?;
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"pod": pod.name, "id": pod.id, "sandbox": pod.sandbox, "tree": t})
                )?
            );
        } else {
            let mut s = format!("pod {} ({})\n", pod.name, &pod.id[..12]);
            s.push_str(&format!(
                "sandbox: net {} ipc {} uts {}{}\n",
                pod.sandbox.netns.as_deref().unwrap_or("host"),
                pod.sandbox.ipcns.as_deref().unwrap_or("host"),
                pod.sandbox.utsns.as_deref().unwrap_or("-"),
                match (&pod.sandbox.pidns, pod.sandbox.pause_pid) {
                    (Some(ns), Some(p)) => format!(" pid {ns} (shared, init pid {p})"),
                    (Some(ns), None) => format!(" pid {ns} (shared)"),
                    _ => String::new(),
                }
            ));
            wharf_engine::tree::render(&t, &mut s, "", true, true);
            print!("{s}");
        }
    }
    Ok(0)
}

fn pod_json(p: &PodView) -> Value {
    let containers: Vec<Value> = p
        .containers
        .iter()
        .map(|(id, name, init)| json!({"Id": id, "Name": name, "Init": init}))
        .collect();
    let r = &p.row;
    json!({
        "Id": r.id, "Name": r.name, "Created": r.created_at, "State": r.state,
        "Spec": docker_json::pascal_keys(json!(r.spec)),
        "Sandbox": docker_json::pascal_keys(json!(r.sandbox)),
        "Containers": containers,
        "Status": wharf_kube::pod_status(p),
    })
}

/// `wharf pod inspect`.
pub fn inspect_pods(engine: &Engine, pods: &[String], format: Option<&str>) -> Result<()> {
    let v: Vec<Value> = pods
        .iter()
        .map(|p| engine.pod(p).map(|p| pod_json(&p)))
        .collect::<Result<_, _>>()?;
    format::print_documents(&Format::parse(format.unwrap_or("json"))?, &v)
}

/// What `pod ls` shows as a pod's status: kubectl's STATUS column (`Running`,
/// `Init:0/1`, `CrashLoopBackOff`, `Completed`); the engine's state for a pod without
/// containers (`created`), or a stopped or dead one.
fn pod_summary(p: &PodView, k: &wharf_kube::PodStatus) -> String {
    use wharf_engine::model::PodState;
    if !p.containers.is_empty() && !matches!(p.row.state, PodState::Stopped | PodState::Dead) {
        k.summary.clone()
    } else {
        p.row.state.to_string()
    }
}

/// `wharf pod ls`.
pub fn pods(engine: &Engine, format: &str, quiet: bool) -> Result<()> {
    // Opened with `Reconcile::Listing`: the listing reconciles what it shows. Left for the
    // kernel to take back with the process, as `ps` leaves its own: freeing 1000 pods
    // row by row was 15% of a `pod ls`.
    let listing = std::mem::ManuallyDrop::new(engine.list_pods_reconciled(&PodFilter::default())?);
    let (pods, report) = &*listing;
    super::print_reconciled(report);
    if quiet {
        for p in pods {
            println!("{}", &p.row.id[..12]);
        }
        return Ok(());
    }
    match Format::parse(format)? {
        Format::Json => {
            // podman's layout: one array.
            let v: Vec<Value> = pods.iter().map(pod_json).collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Template { template, table } => {
            let rows: Vec<Value> = pods
                .iter()
                .map(|p| {
                    let r = &p.row;
                    let k = wharf_kube::pod_status(p);
                    json!({
                        "ID": &r.id[..12], "Id": r.id, "Name": r.name,
                        "Status": pod_summary(p, &k), "State": r.state.to_string(),
                        "Ready": format!("{}/{}", k.ready.0, k.ready.1),
                        "Restarts": k.restarts,
                        "Phase": k.phase,
                        "Created": format!("{} ago", ago(&r.created_at)),
                        "CreatedAt": format::docker_time(&r.created_at),
                        "IP": r.sandbox.ips.join(","), "NumberOfContainers": p.containers.len(),
                        "Containers": p.containers.iter().map(|c| c.1.clone()).collect::<Vec<_>>(),
                        "Labels": r.spec.labels, "Networks": r.sandbox.network,
                    })
                })
                .collect();
            let headers = json!({
                "ID": "POD ID", "Id": "POD ID", "Name": "NAME", "Status": "STATUS",
                "State": "STATE", "Ready": "READY", "Restarts": "RESTARTS", "Phase": "PHASE",
                "Created": "CREATED", "CreatedAt": "CREATED AT", "IP": "IP",
                "NumberOfContainers": "# OF CONTAINERS", "Containers": "CONTAINERS",
                "Labels": "LABELS", "Networks": "NETWORKS",
            });
            print!(
                "{}",
                format::render_items(&template, table, &headers, &rows)?
            );
        }
        Format::Table => {
            let mut t = vec![
                [
                    "POD ID",
                    "NAME",
                    "STATUS",
                    "READY",
                    "RESTARTS",
                    "CREATED",
                    "IP",
                    "# OF CONTAINERS",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for p in pods {
                let r = &p.row;
                let k = wharf_kube::pod_status(p);
                t.push(vec![
                    r.id[..12].to_string(),
                    r.name.clone(),
                    pod_summary(p, &k),
                    format!("{}/{}", k.ready.0, k.ready.1),
                    k.restarts.to_string(),
                    format!("{} ago", ago(&r.created_at)),
                    r.sandbox.ips.join(","),
                    p.containers.len().to_string(),
                ]);
            }
            print!("{}", table(&t));
        }
    }
    Ok(())
}

fn cgroup_stats(engine: &Engine, c: &ContainerRow) -> Option<Value> {
    serde_json::to_value(engine.container_stats(&c.id).ok()??).ok()
}

/// `wharf stats`: docker's columns (CPU %, memory usage / limit and %, network and block
/// I/O, pids), a table refreshed each second or one sample; JSON and templates by docker's
/// key names.
pub fn stats(engine: &Engine, keys: &[String], no_stream: bool, format: &str) -> Result<i32> {
    let fmt = Format::parse(format)?;
    // An unlimited container's limit is the machine's memory, as docker shows it.
    let host_memory = host_memory_bytes();
    let mut prev: HashMap<String, (u64, std::time::Instant)> = Default::default();
    loop {
        let rows: Vec<ContainerRow> = if keys.is_empty() {
            engine
                .list_containers(&ContainerFilter::default())?
                .into_iter()
                .map(|v| v.row)
                .collect()
        } else {
            keys.iter()
                .map(|k| engine.container(k).map(|v| v.row))
                .collect::<Result<_, _>>()?
        };
        let mut docs = Vec::new();
        for c in &rows {
            let Some(s) = cgroup_stats(engine, c) else {
                continue;
            };
            let cpu_total = s["cpu"]["usage"]["total"].as_u64().unwrap_or(0);
            let now = std::time::Instant::now();
            let cpu_pct = match prev.get(&c.id) {
                Some((p, t)) => {
                    let dt = now.duration_since(*t).as_nanos().max(1) as f64;
                    (cpu_total.saturating_sub(*p) as f64) / dt * 100.0
                }
                None => 0.0,
            };
            prev.insert(c.id.clone(), (cpu_total, now));
            let usage = s["memory"]["usage"]["usage"].as_u64().unwrap_or(0);
            let limit = match s["memory"]["usage"]["limit"].as_u64().unwrap_or(0) {
                0 => host_memory,
                l if l >= 1 << 62 => host_memory,
                l => l.min(host_memory.max(1)),
            };
            let pids = s["pids"]["current"].as_u64().unwrap_or(0);
            let (rx, tx) = engine
                .pod_network_counters(&c.pod_id)
                .unwrap_or_default()
                .iter()
                .filter(|i| i.name != "lo")
                .fold((0, 0), |(r, t), i| (r + i.rx_bytes, t + i.tx_bytes));
            let io = |op: &str| {
                s["blkio"]["ioServiceBytesRecursive"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter(|e| {
                                e["op"].as_str().is_some_and(|o| o.eq_ignore_ascii_case(op))
                            })
                            .filter_map(|e| e["value"].as_u64())
                            .sum::<u64>()
                    })
                    .unwrap_or(0)
            };
            let mem_pct = if limit > 0 {
                usage as f64 / limit as f64 * 100.0
            } else {
                0.0
            };
            docs.push(json!({
                "Container": c.name,
                "ID": c.id,
                "Name": c.name,
                "CPUPerc": format!("{cpu_pct:.2}%"),
                "MemUsage": format!("{} / {}", human(usage), human(limit)),
                "MemPerc": format!("{mem_pct:.2}%"),
                "NetIO": format!("{} / {}", si(rx), si(tx)),
                "BlockIO": format!("{} / {}", si(io("read")), si(io("write"))),
                "PIDs": pids.to_string(),
                // Not in docker's table: pressure stall information (cgroup v2), the
                // share of the last 10 s some or all of the container's tasks waited.
                "CPUPressure": pressure(&s["cpu"]["psi"]),
                "MemPressure": pressure(&s["memory"]["psi"]),
                "IOPressure": pressure(&s["blkio"]["psi"]),
            }));
        }
        let mut out = std::io::stdout().lock();
        match &fmt {
            Format::Table => {
                let mut t = vec![
                    [
                        "CONTAINER ID",
                        "NAME",
                        "CPU %",
                        "MEM USAGE / LIMIT",
                        "MEM %",
                        "NET I/O",
                        "BLOCK I/O",
                        "PIDS",
                    ]
                    .map(String::from)
                    .to_vec(),
                ];
                for d in &docs {
                    let cell = |k: &str| d[k].as_str().unwrap_or_default().to_string();
                    t.push(vec![
                        cell("ID")[..12].to_string(),
                        cell("Name"),
                        cell("CPUPerc"),
                        cell("MemUsage"),
                        cell("MemPerc"),
                        cell("NetIO"),
                        cell("BlockIO"),
                        cell("PIDs"),
                    ]);
                }
                if !no_stream {
                    write!(out, "\x1b[2J\x1b[H")?;
                }
                write!(out, "{}", table(&t))?;
            }
            fmt => {
                let headers = json!({
                    "Container": "CONTAINER", "ID": "CONTAINER ID", "Name": "NAME",
                    "CPUPerc": "CPU %", "MemUsage": "MEM USAGE / LIMIT", "MemPerc": "MEM %",
                    "NetIO": "NET I/O", "BlockIO": "BLOCK I/O", "PIDs": "PIDS",
                });
                format::print_rows(&mut out, fmt, &headers, &docs)?;
            }
        }
        out.flush()?;
        if no_stream {
            return Ok(0);
        }
        drop(out);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// MemTotal of /proc/meminfo, in bytes.
fn host_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// Memory as docker shows it (`1.355MiB`).
/// A PSI object (runc's shape) as `some 1.50% full 0.75%` (avg10), or `--` without PSI.
fn pressure(psi: &Value) -> String {
    match (psi["some"]["avg10"].as_f64(), psi["full"]["avg10"].as_f64()) {
        (Some(some), Some(full)) => format!("some {some:.2}% full {full:.2}%"),
        _ => "--".into(),
    }
}

fn human(n: u64) -> String {
    format::size(n, true, 4)
}

/// I/O as docker shows it (`1.05kB`).
fn si(n: u64) -> String {
    format::size(n, false, 3)
}

/// `wharf port`: `80/tcp -> 0.0.0.0:8080` per published port, or the host side of one.
pub fn ports(engine: &Engine, container: &str, port: Option<&str>) -> Result<i32> {
    let view = engine.container(container)?;
    let pod = engine.pod(&view.row.pod_id)?;
    let want = port.map(|p| {
        let (n, proto) = p.split_once('/').unwrap_or((p, "tcp"));
        (n.to_string(), proto.to_ascii_lowercase())
    });
    let mut found = false;
    for m in &pod.row.spec.ports {
        let host = format!(
            "{}:{}",
            m.host_ip.as_deref().unwrap_or("0.0.0.0"),
            m.host_port
        );
        match &want {
            None => println!("{}/{} -> {host}", m.container_port, m.protocol),
            Some((n, proto)) if *n == m.container_port.to_string() && *proto == m.protocol => {
                println!("{host}")
            }
            Some(_) => continue,
        }
        found = true;
    }
    match (want, found) {
        (Some((n, proto)), false) => {
            anyhow::bail!("no public port {n}/{proto} published for {container}")
        }
        _ => Ok(0),
    }
}

/// `wharf top`: docker's columns (UID by the container's user names, PID, PPID, C,
/// STIME, TTY, TIME, CMD), or JSON.
pub fn top(engine: &Engine, key: &str, format: &str) -> Result<i32> {
    if !matches!(format, "table" | "json") {
        bail!("unknown format {format:?}: use table or json");
    }
    let procs = engine.container_processes(key)?;
    if format == "json" {
        let v: Vec<Value> = procs
            .iter()
            .map(|p| {
                json!({"UID": p.user, "PID": p.pid, "PPID": p.ppid, "TIME": cpu_time(p.cpu_seconds), "CMD": p.command})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let mut t = vec![
        ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"]
            .map(String::from)
            .to_vec(),
    ];
    for p in &procs {
        let stime = wharf_sys::time::rfc3339(p.started as i64, 0, false);
        t.push(vec![
            p.user.clone(),
            p.pid.to_string(),
            p.ppid.to_string(),
            "0".into(),
            stime.get(11..16).unwrap_or_default().to_string(),
            "?".into(),
            cpu_time(p.cpu_seconds),
            p.command.clone(),
        ]);
    }
    print!("{}", table(&t));
    Ok(0)
}

fn cpu_time(secs: u64) -> String {
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// `wharf events`: what the store holds (since a time, until a time), then, with
/// `follow`, each new event as the engine pushes it; docker's `--filter` keys and its JSON
/// and template keys (`{{.Action}} {{.Actor.Attributes.name}}`).
pub fn events(
    engine: &Engine,
    follow: bool,
    format: &str,
    since: Option<&str>,
    until: Option<&str>,
    filters: &[String],
) -> Result<i32> {
    let since = since.map(since_time).transpose()?;
    let until = until.map(since_time).transpose()?;
    let filters = filters
        .iter()
        .map(|f| EventFilter::parse(f))
        .collect::<Result<Vec<_>>>()?;
    let fmt = match format {
        "text" => Format::Table,
        other => Format::parse(other)?,
    };
    // With an end time the command ends there, following or not.
    let follow = follow && until.is_none_or(|u| u > SystemTime::now());
    let mut feed = engine.events(wharf_engine::EventOptions { since, follow });
    while let Some(batch) = feed.next_batch()? {
        let mut out = std::io::stdout().lock();
        for e in batch {
            if let Some(u) = until
                && wharf_sys::time::parse_rfc3339(&e.time).is_some_and(|t| t > u)
            {
                return Ok(0);
            }
            // Filters of one key match any of their values; different keys all must match.
            if !filters
                .iter()
                .all(|f| filters.iter().any(|g| g.key() == f.key() && g.matches(&e)))
            {
                continue;
            }
            match &fmt {
                Format::Table => writeln!(
                    out,
                    "{} {} {} {} (name={})",
                    e.time,
                    e.object,
                    e.kind_of_event,
                    &e.id[..12.min(e.id.len())],
                    e.name
                )?,
                Format::Json => {
                    writeln!(out, "{}", serde_json::to_string(&docker_json::event(&e))?)?
                }
                Format::Template { template, .. } => {
                    writeln!(out, "{}", template.render(&docker_json::event(&e))?)?
                }
            }
        }
        out.flush()?;
        if until.is_some_and(|u| SystemTime::now() >= u) {
            return Ok(0);
        }
    }
    Ok(0)
}

/// One `events --filter KEY=VALUE` (docker's keys).
enum EventFilter {
    Type(String),
    Event(String),
    Container(String),
    Pod(String),
    Image(String),
}

impl EventFilter {
    fn parse(s: &str) -> Result<EventFilter> {
        let Some((k, v)) = s.split_once('=') else {
            bail!("invalid --filter {s:?}: use KEY=VALUE");
        };
        let v = v.to_string();
        Ok(match k {
            "type" => EventFilter::Type(v),
            "event" | "status" => EventFilter::Event(v),
            "container" => EventFilter::Container(v),
            "pod" => EventFilter::Pod(v),
            "image" => EventFilter::Image(v),
            _ => bail!("invalid --filter {s:?}: type, event, container, pod or image"),
        })
    }

    fn key(&self) -> &'static str {
        match self {
            EventFilter::Type(_) => "type",
            EventFilter::Event(_) => "event",
            EventFilter::Container(_) => "container",
            EventFilter::Pod(_) => "pod",
            EventFilter::Image(_) => "image",
        }
    }

    fn matches(&self, e: &wharf_engine::db::Event) -> bool {
        let named = |want: &str| e.name == want || (want.len() >= 3 && e.id.starts_with(want));
        match self {
            EventFilter::Type(t) => e.object == *t,
            EventFilter::Event(a) => {
                e.kind_of_event == *a || docker_json::docker_action(&e.kind_of_event) == a
            }
            EventFilter::Container(c) => e.object == "container" && named(c),
            EventFilter::Pod(p) => {
                (e.object == "pod" && named(p)) || e.attrs["pod"].as_str() == Some(p.as_str())
            }
            EventFilter::Image(i) => {
                let img = e.attrs["image"].as_str().unwrap_or_default();
                img == i || img.split(':').next() == Some(i.as_str())
            }
        }
    }
}
