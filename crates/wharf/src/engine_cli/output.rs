//! What the read-only commands print: `ps`, `logs`, `inspect`, `stats`, `top`, `pod ls`,
//! `pod inspect`, `events`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use wharf_engine::db::ContainerRow;
use wharf_engine::model::ContainerState;
use wharf_engine::{
    ContainerFilter, ContainerView, Engine, LogEntry, LogOptions, PodFilter, PodView,
};

/// Seconds since the epoch of an RFC 3339 time.
fn epoch(t: &str) -> Option<u64> {
    wharf_sys::time::parse_rfc3339(t)?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

fn ago(t: &str) -> String {
    let Some(then) = epoch(t) else {
        return t.to_string();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let s = now.saturating_sub(then);
    match s {
        0..=1 => "Less than a second".into(),
        2..=59 => format!("{s} seconds"),
        60..=119 => "About a minute".into(),
        120..=3599 => format!("{} minutes", s / 60),
        3600..=7199 => "About an hour".into(),
        7200..=172_799 => format!("{} hours", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

fn status(c: &ContainerRow) -> String {
    if let (true, Some(e)) = (c.restarting, &c.exit) {
        return format!("Restarting ({}) {} ago", e.code, ago(&e.finished_at));
    }
    match c.state {
        ContainerState::Running => format!(
            "Up {}",
            c.started_at.as_deref().map(ago).unwrap_or_default()
        ),
        ContainerState::Exited => match &c.exit {
            Some(e) => format!(
                "Exited ({}){}{} {} ago",
                e.code,
                if e.oom_killed { " OOMKilled" } else { "" },
                // Why, when it was not the process's own doing (e.g. ShimDied).
                match e.reason.as_deref() {
                    None | Some("Completed" | "Error" | "OOMKilled") => String::new(),
                    Some(r) => format!(" {r}"),
                },
                ago(&e.finished_at)
            ),
            None => "Exited".into(),
        },
        ContainerState::Created => "Created".into(),
        ContainerState::Paused => format!(
            "Up {} (Paused)",
            c.started_at.as_deref().map(ago).unwrap_or_default()
        ),
        ContainerState::Unknown => "Unknown".into(),
    }
}

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map(Vec::len).unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i + 1 == cols {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        s.push('\n');
    }
    s
}

fn container_json(v: &ContainerView) -> Value {
    let c = &v.row;
    json!({
        "Id": c.id,
        "Name": c.name,
        "Pod": v.pod_name,
        "PodId": c.pod_id,
        "Image": c.image_name,
        "ImageId": c.image_id,
        "Created": c.created_at,
        "State": {
            "Status": if c.restarting { "restarting".to_string() } else { c.state.to_string() },
            "Restarting": c.restarting,
            "StartedAt": c.started_at,
            "ExitCode": c.exit.as_ref().map(|e| e.code),
            "Signal": c.exit.as_ref().and_then(|e| e.signal),
            "FinishedAt": c.exit.as_ref().map(|e| e.finished_at.clone()),
            "OOMKilled": c.exit.as_ref().is_some_and(|e| e.oom_killed),
            "Reason": c.exit.as_ref().and_then(|e| e.reason.clone()),
            "Error": c.exit.as_ref().and_then(|e| e.message.clone()).unwrap_or_default(),
            "RestartCount": c.restart_count,
        },
        "Config": c.spec,
        "Bundle": v.bundle,
        "LogPath": v.log_path,
        "NetworkSettings": {"Network": v.network, "IPs": v.ips},
    })
}

/// One `ps --filter KEY=VALUE`, as docker reads it.
enum PsFilter {
    Id(String),
    Name(String),
    Label(String, Option<String>),
    Ancestor(String),
    Status(String),
}

impl PsFilter {
    fn parse(s: &str) -> Result<PsFilter> {
        let Some((k, v)) = s.split_once('=') else {
            bail!("invalid --filter {s:?}: use KEY=VALUE");
        };
        Ok(match k {
            "id" => PsFilter::Id(v.to_string()),
            "name" => PsFilter::Name(v.to_string()),
            "label" => match v.split_once('=') {
                Some((k, v)) => PsFilter::Label(k.to_string(), Some(v.to_string())),
                None => PsFilter::Label(v.to_string(), None),
            },
            "ancestor" => PsFilter::Ancestor(v.to_string()),
            "status" => match v {
                "created" | "running" | "paused" | "restarting" | "exited" => {
                    PsFilter::Status(v.to_string())
                }
                _ => bail!(
                    "invalid --filter {s:?}: status is created, running, paused, restarting \
                     or exited"
                ),
            },
            _ => bail!("invalid --filter {s:?}: id, name, label, ancestor or status"),
        })
    }

    fn matches(&self, c: &ContainerRow) -> bool {
        match self {
            PsFilter::Id(p) => c.id.starts_with(p.as_str()),
            // docker matches a part of the name.
            PsFilter::Name(n) => c.name.contains(n.as_str()),
            PsFilter::Label(k, v) => c
                .spec
                .labels
                .get(k)
                .is_some_and(|have| v.as_ref().is_none_or(|v| v == have)),
            PsFilter::Ancestor(i) => {
                c.image_name == *i
                    || c.image_name.split(':').next() == Some(i.as_str())
                    || c.image_id
                        .trim_start_matches("sha256:")
                        .starts_with(i.trim_start_matches("sha256:"))
            }
            PsFilter::Status(s) => {
                let now = if c.restarting {
                    "restarting".to_string()
                } else {
                    c.state.to_string()
                };
                now == *s
            }
        }
    }
}

/// `wharf ps`.
pub fn ps(
    engine: &Engine,
    all: bool,
    quiet: bool,
    format: &str,
    pod: Option<&str>,
    filters: &[String],
) -> Result<i32> {
    let filters: Vec<PsFilter> = filters
        .iter()
        .map(|f| PsFilter::parse(f))
        .collect::<Result<_>>()?;
    // A status filter looks at every container, as docker's does without -a.
    let all = all || filters.iter().any(|f| matches!(f, PsFilter::Status(_)));
    let rows: Vec<_> = engine
        .list_containers(&ContainerFilter {
            all,
            pod: pod.map(str::to_string),
            ..Default::default()
        })?
        .into_iter()
        .filter(|v| filters.iter().all(|f| f.matches(&v.row)))
        .collect();
    let mut out = std::io::stdout().lock();
    if quiet {
        for v in &rows {
            writeln!(out, "{}", &v.row.id[..12])?;
        }
        return Ok(0);
    }
    match format {
        "json" => {
            let v: Vec<Value> = rows.iter().map(container_json).collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        "table" => {
            let mut t = vec![
                [
                    "CONTAINER ID",
                    "IMAGE",
                    "COMMAND",
                    "CREATED",
                    "STATUS",
                    "NAMES",
                    "POD",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for v in &rows {
                let c = &v.row;
                // What runs: the entrypoint then the command (as docker ps shows it).
                let cmd = c
                    .spec
                    .entrypoint
                    .iter()
                    .chain(&c.spec.command)
                    .flatten()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(" ");
                let cmd = if cmd.chars().count() > 20 {
                    format!("{}…", cmd.chars().take(19).collect::<String>())
                } else {
                    cmd
                };
                t.push(vec![
                    c.id[..12].to_string(),
                    c.image_name.clone(),
                    format!("\"{cmd}\""),
                    format!("{} ago", ago(&c.created_at)),
                    status(c),
                    c.name.clone(),
                    pod_column(v),
                ]);
            }
            write!(out, "{}", table(&t))?;
        }
        other => bail!("invalid --format {other:?}: table or json"),
    }
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
    follow: bool,
    tail: Option<usize>,
    since: Option<&str>,
    timestamps: bool,
) -> Result<i32> {
    let opts = LogOptions {
        tail,
        since: since.map(since_time).transpose()?,
        follow,
    };
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    engine.container_logs(key, &opts, |e: &LogEntry| {
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

/// `wharf inspect`.
pub fn inspect(engine: &Engine, objects: &[String], tree: bool, format: &str) -> Result<i32> {
    if tree {
        for o in objects {
            let pod = engine.pod_of(o)?;
            let t = engine.pod_tree(&pod)?;
            if format == "json" {
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
        return Ok(0);
    }
    let mut out = Vec::new();
    for o in objects {
        match engine.container_status(o) {
            Ok(st) => {
                let mut v = container_json(&st.view);
                // docker's: the container's init on the host, 0 when it is not running
                // (scripts run `nsenter -t PID`).
                let running = st.view.row.state == wharf_engine::model::ContainerState::Running;
                v["State"]["Pid"] = json!(st.pid.filter(|_| running).unwrap_or(0));
                v["State"]["Running"] = json!(running);
                out.push(v)
            }
            Err(wharf_engine::Error::NotFound { .. }) => match engine.pod(o) {
                Ok(p) => out.push(pod_json(&p)),
                Err(wharf_engine::Error::NotFound { .. }) => {
                    return Err(wharf_engine::Error::NotFound {
                        kind: "container or pod",
                        name: o.clone(),
                    }
                    .into());
                }
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
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
        "Spec": r.spec, "Sandbox": r.sandbox, "Containers": containers,
    })
}

/// `wharf pod inspect`.
pub fn inspect_pods(engine: &Engine, pods: &[String]) -> Result<()> {
    let v: Vec<Value> = pods
        .iter()
        .map(|p| engine.pod(p).map(|p| pod_json(&p)))
        .collect::<Result<_, _>>()?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// `wharf pod ls`.
pub fn pods(engine: &Engine, format: &str, quiet: bool) -> Result<()> {
    let pods = engine.list_pods(&PodFilter::default())?;
    if quiet {
        for p in &pods {
            println!("{}", &p.row.id[..12]);
        }
        return Ok(());
    }
    match format {
        "json" => {
            let v: Vec<Value> = pods.iter().map(pod_json).collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        "table" => {
            let mut t = vec![
                [
                    "POD ID",
                    "NAME",
                    "STATUS",
                    "CREATED",
                    "IP",
                    "# OF CONTAINERS",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for p in &pods {
                let r = &p.row;
                t.push(vec![
                    r.id[..12].to_string(),
                    r.name.clone(),
                    r.state.to_string(),
                    format!("{} ago", ago(&r.created_at)),
                    r.sandbox.ips.join(","),
                    p.containers.len().to_string(),
                ]);
            }
            print!("{}", table(&t));
        }
        other => bail!("invalid --format {other:?}: table or json"),
    }
    Ok(())
}

fn cgroup_stats(engine: &Engine, c: &ContainerRow) -> Option<Value> {
    serde_json::to_value(engine.container_stats(&c.id).ok()??).ok()
}

/// `wharf stats`.
pub fn stats(engine: &Engine, keys: &[String], no_stream: bool, format: &str) -> Result<i32> {
    let mut prev: std::collections::HashMap<String, (u64, std::time::Instant)> = Default::default();
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
        let mut t = vec![
            ["CONTAINER ID", "NAME", "CPU %", "MEM USAGE / LIMIT", "PIDS"]
                .map(String::from)
                .to_vec(),
        ];
        let mut js = Vec::new();
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
            let limit = s["memory"]["usage"]["limit"].as_u64().unwrap_or(0);
            let pids = s["pids"]["current"].as_u64().unwrap_or(0);
            let lim = if limit == 0 || limit >= 1 << 62 {
                "max".to_string()
            } else {
                human(limit)
            };
            t.push(vec![
                c.id[..12].to_string(),
                c.name.clone(),
                format!("{cpu_pct:.2}%"),
                format!("{} / {lim}", human(usage)),
                pids.to_string(),
            ]);
            js.push(json!({"id": c.id, "name": c.name, "cpu_percent": cpu_pct, "memory_usage": usage, "memory_limit": limit, "pids": pids, "raw": s}));
        }
        if format == "json" {
            println!("{}", serde_json::to_string(&js)?);
        } else {
            if !no_stream {
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", table(&t));
        }
        std::io::stdout().flush()?;
        if no_stream {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn human(n: u64) -> String {
    let f = n as f64;
    if f >= 1_073_741_824.0 {
        format!("{:.2}GiB", f / 1_073_741_824.0)
    } else if f >= 1_048_576.0 {
        format!("{:.2}MiB", f / 1_048_576.0)
    } else if f >= 1024.0 {
        format!("{:.2}KiB", f / 1024.0)
    } else {
        format!("{n}B")
    }
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

/// `wharf top`.
pub fn top(engine: &Engine, key: &str, format: &str) -> Result<i32> {
    if !matches!(format, "table" | "json") {
        bail!("unknown format {format:?}: use table or json");
    }
    let procs = engine.container_processes(key)?;
    if format == "json" {
        let v: Vec<Value> = procs
            .iter()
            .map(|p| {
                json!({"pid": p.pid, "user": p.uid.to_string(), "time": cpu_time(p.cpu_seconds), "command": p.command})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let mut t = vec![
        ["PID", "USER", "TIME", "COMMAND"]
            .map(String::from)
            .to_vec(),
    ];
    for p in &procs {
        t.push(vec![
            p.pid.to_string(),
            p.uid.to_string(),
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

/// `wharf events`: what the store holds (since a time), then, with `follow`, each new
/// event as the engine pushes it.
pub fn events(engine: &Engine, follow: bool, format: &str, since: Option<&str>) -> Result<i32> {
    let since = since.map(since_time).transpose()?;
    let mut feed = engine.events(wharf_engine::EventOptions { since, follow });
    while let Some(batch) = feed.next_batch()? {
        for e in batch {
            if format == "json" {
                println!("{}", serde_json::to_string(&e)?);
            } else {
                println!(
                    "{} {} {} {} (name={})",
                    e.time,
                    e.object,
                    e.kind_of_event,
                    &e.id[..12.min(e.id.len())],
                    e.name
                );
            }
        }
        std::io::stdout().flush()?;
    }
    Ok(0)
}
