//! `/containers/...` (but attach and exec, [`super::streams`], [`super::exec`]) and
//! `/commit`: docker's container lifecycle on the engine's typed API.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{Value, json};
use wharf_docker::listing::{PsFilter, epoch, state_name, status};
use wharf_engine::model::ContainerState;
use wharf_engine::{ContainerFilter, PodChoice};

use super::Api;
use super::http::{self, ApiError, Reply, Req};

/// A writer that sends what it gets to a streamed response (from a blocking thread).
pub struct ChannelWriter(pub tokio::sync::mpsc::Sender<Bytes>);

impl std::io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .blocking_send(Bytes::copy_from_slice(buf))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client gone"))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `POST /containers/create?name=`.
pub async fn create(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let name = r
        .q("name")
        .filter(|n| !n.is_empty())
        .map(|n| n.trim_start_matches('/').to_string());
    if let Some(p) = r.q("platform").filter(|p| !p.is_empty()) {
        let host = wharf_engine::images::Platform::host();
        if !p.starts_with(&format!("{}/{}", host.os, host.architecture)) {
            return Err(ApiError::bad(format!(
                "platform {p} is not supported: this host runs {}/{}",
                host.os, host.architecture
            )));
        }
    }
    let req: wharf_docker::CreateRequest = r.json().await?;
    let row = api
        .engine(move |e| {
            if let Some(n) = &name {
                wharf_engine::validate::check(
                    "container name",
                    n,
                    wharf_engine::validate::Rule::ObjectName,
                )?;
                e.check_container_name(n)?;
            }
            if req.image.is_empty() {
                return Err(ApiError::bad(
                    "Config.Image is empty: give the image to run",
                ));
            }
            let img = e.images().resolve(&req.image).map_err(|_| {
                ApiError::not_found(format!("No such image: {}", display_image(&req.image)))
            })?;
            let facts = wharf_docker::ImageFacts::of(&img, e.images().docker_config(&img).as_ref());
            let name = name.unwrap_or_else(|| wharf_engine::paths::generated_name(&req.image));
            let specs = req.to_specs(Some(&name), &facts)?;
            let mut spec = specs.container;
            if let Some(note) = e.apply_container_defaults(&mut spec) {
                crate::log::log(crate::log::Level::Info, &note, &[]);
            }
            let pod = match specs.placement {
                wharf_docker::Placement::Own(p) => PodChoice::Own(p),
                wharf_docker::Placement::WithContainer(c) => {
                    PodChoice::Existing(e.container(&c)?.pod_name)
                }
                wharf_docker::Placement::InPod(p) => PodChoice::Existing(e.pod(&p)?.row.name),
            };
            Ok(e.create(pod, &spec)?)
        })
        .await?;
    Ok(http::json_status(
        StatusCode::CREATED,
        &json!({"Id": row.id, "Warnings": []}),
    ))
}

/// An image reference as docker's errors show it (`busybox:latest`).
fn display_image(image: &str) -> String {
    if image.contains(':') || image.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// docker's `Ports` of a summary.
fn summary_ports(pod: Option<&wharf_engine::db::PodRow>) -> Vec<Value> {
    pod.map(|p| p.spec.ports.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|m| {
            json!({
                "IP": m.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into()),
                "PrivatePort": m.container_port,
                "PublicPort": m.host_port,
                "Type": m.protocol,
            })
        })
        .collect()
}

/// `GET /containers/json`: docker's container summaries, newest first.
pub async fn list(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let mut filters = Vec::new();
    for (k, vals) in r.filters()? {
        for v in vals {
            let f = PsFilter::parse(&k, &v)
                .map_err(|why| ApiError::bad(format!("invalid filter {k}={v}: {why}")))?;
            filters.push((k.clone(), f));
        }
    }
    let all = r.flag("all", false) || filters.iter().any(|(_, f)| f.needs_all());
    let limit = r.int("limit")?.filter(|n| *n > 0).map(|n| n as usize);
    let size = r.flag("size", false);
    let docs = api
        .engine(move |e| {
            let mut rows: Vec<_> = e
                .list_containers(&ContainerFilter {
                    all: all || limit.is_some(),
                    ..Default::default()
                })?
                .into_iter()
                // docker's rule: a key's values match any of them, but labels all must;
                // different keys all must.
                .filter(|v| {
                    filters.iter().all(|(k, f)| {
                        k == "label" && f.matches(v)
                            || k != "label"
                                && filters
                                    .iter()
                                    .filter(|(k2, _)| k2 == k)
                                    .any(|(_, f)| f.matches(v))
                    })
                })
                .collect();
            rows.sort_by(|a, b| b.row.created_at.cmp(&a.row.created_at));
            if let Some(n) = limit {
                rows.truncate(n);
            }
            let pods: HashMap<String, wharf_engine::db::PodRow> = e
                .list_pods(&Default::default())?
                .into_iter()
                .map(|p| (p.row.id.clone(), p.row))
                .collect();
            Ok(rows
                .iter()
                .map(|v| {
                    let c = &v.row;
                    let pod = pods.get(&c.pod_id);
                    let mut st = status(c);
                    if c.state == ContainerState::Running
                        && let Some(h) = pod.and_then(|p| e.container_health(c, p))
                    {
                        st.push_str(&match h.status.as_str() {
                            "starting" => " (health: starting)".to_string(),
                            other => format!(" ({other})"),
                        });
                    }
                    let ip = wharf_docker::views::first_ipv4(&v.ips);
                    let mut networks = serde_json::Map::new();
                    let net_name = if v.network.is_empty() { "none".to_string() } else { v.network.clone() };
                    networks.insert(
                        net_name.clone(),
                        json!({"IPAddress": ip, "NetworkID": net_name, "Aliases": null}),
                    );
                    for a in pod.map(|p| p.sandbox.extra_networks.as_slice()).unwrap_or_default() {
                        networks.insert(
                            a.network.clone(),
                            json!({"IPAddress": wharf_docker::views::first_ipv4(&a.ips), "NetworkID": a.network, "Aliases": null}),
                        );
                    }
                    let mut doc = json!({
                        "Id": c.id,
                        "Names": [format!("/{}", c.name)],
                        "Image": c.image_name,
                        "ImageID": c.image_id,
                        "Command": wharf_docker::views::argv(c).join(" "),
                        "Created": epoch(&c.created_at).unwrap_or(0),
                        "Ports": summary_ports(pod),
                        "Labels": c.spec.labels,
                        "State": state_name(c),
                        "Status": st,
                        "HostConfig": {"NetworkMode": net_name},
                        "NetworkSettings": {"Networks": networks},
                        "Mounts": c.spec.mounts.iter().map(|m| json!({
                            "Type": m.kind, "Name": if m.kind == "volume" { json!(m.source) } else { json!(null) },
                            "Source": m.source, "Destination": m.destination,
                            "RW": !m.readonly, "Mode": if m.readonly { "ro" } else { "" },
                        })).collect::<Vec<_>>(),
                    });
                    if size {
                        doc["SizeRw"] = json!(e.writable_size(&c.id).unwrap_or(0));
                        doc["SizeRootFs"] = json!(0);
                    }
                    doc
                })
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(http::json(&docs))
}

/// `GET /containers/{id}/json`.
pub async fn inspect(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let doc = api.engine(move |e| inspect_doc(e, &id)).await?;
    Ok(http::json(&doc))
}

/// A container's inspect document.
pub fn inspect_doc(e: &wharf_engine::Engine, key: &str) -> Result<Value, ApiError> {
    let st = e.container_status(key)?;
    let pod = e.pod(&st.view.row.pod_id).ok();
    let health = pod
        .as_ref()
        .and_then(|p| e.container_health(&st.view.row, &p.row));
    Ok(wharf_docker::views::container(
        &st.view,
        st.pid,
        pod.as_ref().map(|p| &p.row),
        health.as_ref(),
    ))
}

/// `POST /containers/{id}/start` (304 when it runs already).
pub async fn start(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    api.engine(move |e| {
        let c = e.container(&id)?;
        if matches!(
            c.row.state,
            ContainerState::Running | ContainerState::Paused
        ) {
            return Ok(http::empty(StatusCode::NOT_MODIFIED));
        }
        if let Err(err) = e.start(&c.row.id, false) {
            // docker's AutoRemove holds for a container that could not start too (its
            // client waits for the removal).
            if c.row.spec.auto_remove {
                let _ = e.remove_with_volumes(&c.row.id, true);
            }
            return Err(err.into());
        }
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

fn grace(r: &Req) -> Result<Option<Duration>, ApiError> {
    Ok(r.int("t")?
        .or(r.int("timeout")?)
        .filter(|t| *t >= 0)
        .map(|t| Duration::from_secs(t as u64)))
}

/// `POST /containers/{id}/stop?t=` (304 when it does not run).
pub async fn stop(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let t = grace(r)?;
    api.engine(move |e| {
        let c = e.container(&id)?;
        if !matches!(
            c.row.state,
            ContainerState::Running | ContainerState::Paused
        ) {
            return Ok(http::empty(StatusCode::NOT_MODIFIED));
        }
        e.stop(&c.row.id, t)?;
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// `POST /containers/{id}/restart?t=`.
pub async fn restart(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let t = grace(r)?;
    api.engine(move |e| {
        let c = e.container(&id)?;
        if matches!(
            c.row.state,
            ContainerState::Running | ContainerState::Paused
        ) {
            e.stop(&c.row.id, t)?;
        }
        e.start(&c.row.id, false)?;
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// `POST /containers/{id}/kill?signal=`.
pub async fn kill(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let sig = r.q("signal").filter(|s| !s.is_empty()).unwrap_or("SIGKILL");
    let signal = wharf_sys::signal::parse(sig)
        .ok_or_else(|| ApiError::bad(format!("invalid signal: {sig}")))?;
    api.engine(move |e| {
        let c = e.container(&id)?;
        if !matches!(
            c.row.state,
            ContainerState::Running | ContainerState::Paused
        ) {
            return Err(ApiError::conflict(format!(
                "Container {} is not running",
                c.row.id
            )));
        }
        e.kill(&c.row.id, signal)?;
        // As docker does: after SIGKILL, the answer comes once the container stopped (a
        // client's next inspect sees it exited).
        if signal == libc::SIGKILL {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_secs(10)
                && e.container(&c.row.id)
                    .is_ok_and(|v| v.row.state == ContainerState::Running && !v.row.restarting)
            {
                e.release_pod_locks();
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// `POST /containers/{id}/pause|unpause`.
pub async fn pause(api: &Arc<Api>, r: &Req, paused: bool) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    api.engine(move |e| {
        e.set_paused(&id, paused)?;
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// `POST /containers/{id}/wait?condition=not-running|next-exit|removed`: the headers at
/// once (docker's clients start the container only once they have them), the exit code
/// when it comes.
pub async fn wait(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let condition = r.q("condition").unwrap_or("not-running").to_string();
    if !matches!(
        condition.as_str(),
        "" | "not-running" | "next-exit" | "removed"
    ) {
        return Err(ApiError::bad(format!(
            "invalid condition {condition:?}: not-running, next-exit or removed"
        )));
    }
    // Known now (404 now), and its exit as it is now: next-exit waits for a later one.
    let before = {
        let id = id.clone();
        api.engine(move |e| Ok(e.container(&id)?.row)).await?
    };
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        let Ok(e) = wharf_engine::Engine::open(opts) else {
            return;
        };
        let doc = match wait_for(&e, &before, &condition, &|| tx.is_closed()) {
            Ok(Some(code)) => json!({"StatusCode": code, "Error": null}),
            // The client went away: nobody to tell.
            Ok(None) => return,
            Err(msg) => json!({"StatusCode": -1, "Error": {"Message": msg}}),
        };
        let _ = tx.blocking_send(http::line(&doc));
    });
    Ok(http::streamed("application/json", rx))
}

/// How long one wait on the shim lasts before the client is looked at again.
const WAIT_SLICE: Duration = Duration::from_secs(1);

/// The exit code `condition` waits for; `None` when `client_gone` says the client left
/// first (a `docker run -d` may leave its wait behind; its thread ends with it).
fn wait_for(
    e: &wharf_engine::Engine,
    before: &wharf_engine::db::ContainerRow,
    condition: &str,
    client_gone: &dyn Fn() -> bool,
) -> Result<Option<i64>, String> {
    let first_exit = before.exit.as_ref().map(|x| x.finished_at.clone());
    let mut code = None;
    loop {
        if client_gone() {
            return Ok(None);
        }
        let row = match e.container(&before.id) {
            Ok(v) => v.row,
            // Gone: removed (by its own --rm, or someone).
            Err(wharf_engine::Error::NotFound { .. }) => {
                // Its exit seen here, else the one recorded before its removal (a
                // container that ran and went between two looks).
                let recorded = || e.last_exit_code(&before.id).ok().flatten();
                return Ok(Some(
                    code.or_else(|| {
                        (condition != "next-exit" || first_exit.is_none())
                            .then(recorded)
                            .flatten()
                    })
                    .or(before.exit.as_ref().map(|x| x.code as i64))
                    .unwrap_or(0),
                ));
            }
            Err(err) => return Err(err.to_string()),
        };
        e.release_pod_locks();
        let exited_now = row.exit.as_ref().map(|x| x.finished_at.clone());
        let running =
            matches!(row.state, ContainerState::Running | ContainerState::Paused) || row.restarting;
        if running {
            let waited = e.wait_for(&row.id, Some(WAIT_SLICE));
            e.release_pod_locks();
            match waited {
                Ok(Some(x)) => code = Some(x.code as i64),
                Ok(None) | Err(wharf_engine::Error::NotFound { .. }) => continue,
                Err(err) => return Err(err.to_string()),
            }
            if condition == "removed" {
                continue;
            }
            return Ok(Some(code.unwrap_or(0)));
        }
        let new_exit = exited_now.is_some() && exited_now != first_exit;
        match condition {
            "next-exit" | "removed" if !new_exit && code.is_none() => {}
            "removed" => {}
            _ => {
                return Ok(Some(
                    code.or(row.exit.as_ref().map(|x| x.code as i64))
                        .unwrap_or(0),
                ));
            }
        }
        if condition == "removed" && code.is_none() && new_exit {
            code = row.exit.as_ref().map(|x| x.code as i64);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// `DELETE /containers/{id}?force=&v=`.
pub async fn remove(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let (force, volumes) = (r.flag("force", false), r.flag("v", false));
    if r.flag("link", false) {
        return Err(ApiError::bad("links are not supported: nothing to remove"));
    }
    api.engine(move |e| {
        let c = e.container(&id)?;
        if c.row.state == ContainerState::Running && !force {
            return Err(ApiError::conflict(format!(
                "cannot remove container \"/{}\": container is running: stop the container before removing or force remove",
                c.row.name
            )));
        }
        if volumes {
            e.remove_with_volumes(&c.row.id, force)?;
        } else {
            e.remove(&c.row.id, force)?;
        }
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// docker's multiplexed stream frame: stream 1 stdout, 2 stderr.
pub fn frame(stream: u8, data: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(8 + data.len());
    b.extend_from_slice(&[stream, 0, 0, 0]);
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    Bytes::from(b)
}

/// `GET /containers/{id}/logs`: multiplexed frames (raw for a terminal), `follow`,
/// `since`, `until`, `tail`, `timestamps`.
pub async fn logs(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let (out, err) = (r.flag("stdout", false), r.flag("stderr", false));
    if !out && !err {
        return Err(ApiError::bad(
            "Bad parameters: you must choose at least one stream",
        ));
    }
    let follow = r.flag("follow", false);
    let timestamps = r.flag("timestamps", false);
    let tail = match r.q("tail") {
        None | Some("" | "all") => None,
        Some(n) => Some(
            n.parse::<usize>()
                .map_err(|_| ApiError::bad(format!("invalid tail {n:?}: a number or all")))?,
        ),
    };
    let since = r
        .q("since")
        .filter(|s| !s.is_empty() && *s != "0")
        .map(secs)
        .transpose()?;
    let until = r
        .q("until")
        .filter(|s| !s.is_empty() && *s != "0")
        .map(secs)
        .transpose()?;
    let tty = {
        let id = id.clone();
        api.engine(move |e| Ok(e.container(&id)?.row.spec.tty))
            .await?
    };
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::spawn(move || {
        let Ok(e) = wharf_engine::Engine::open(opts) else {
            return;
        };
        let lo = wharf_engine::LogOptions {
            tail,
            since,
            follow,
        };
        let client = tx.clone();
        let _ = e.container_logs_while(
            &id,
            &lo,
            |entry| {
                if let Some(u) = until
                    && wharf_sys::time::parse_rfc3339(&entry.time).is_some_and(|t| t > u)
                {
                    return false;
                }
                let stream = if entry.stream == "stderr" { 2 } else { 1 };
                if (stream == 1 && !out) || (stream == 2 && !err) {
                    return true;
                }
                let mut data = Vec::new();
                if timestamps {
                    data.extend_from_slice(entry.time.as_bytes());
                    data.push(b' ');
                }
                data.extend_from_slice(&entry.content);
                if !entry.partial {
                    data.push(b'\n');
                }
                let chunk = if tty {
                    Bytes::from(data)
                } else {
                    frame(stream, &data)
                };
                tx.blocking_send(chunk).is_ok()
            },
            || !client.is_closed(),
        );
    });
    Ok(http::streamed(
        if tty {
            "application/vnd.docker.raw-stream"
        } else {
            "application/vnd.docker.multiplexed-stream"
        },
        rx,
    ))
}

/// docker's times for logs: unix seconds (with a fraction) or RFC 3339.
fn secs(s: &str) -> Result<std::time::SystemTime, ApiError> {
    if let Ok(f) = s.parse::<f64>() {
        return Ok(std::time::UNIX_EPOCH + Duration::from_secs_f64(f.max(0.0)));
    }
    wharf_sys::time::parse_rfc3339(s)
        .ok_or_else(|| ApiError::bad(format!("invalid time {s:?}: unix seconds or RFC 3339")))
}

/// `GET /containers/{id}/top`.
pub async fn top(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let procs = api
        .engine(move |e| {
            let c = e.container(&id)?;
            if c.row.state != ContainerState::Running && c.row.state != ContainerState::Paused {
                return Err(ApiError::conflict(format!(
                    "Container {} is not running",
                    c.row.id
                )));
            }
            Ok(e.container_processes(&c.row.id)?)
        })
        .await?;
    let rows: Vec<Vec<String>> = procs
        .iter()
        .map(|p| {
            let stime = wharf_sys::time::rfc3339(p.started as i64, 0, false);
            vec![
                p.user.clone(),
                p.pid.to_string(),
                p.ppid.to_string(),
                "0".into(),
                stime.get(11..16).unwrap_or_default().to_string(),
                "?".into(),
                format!(
                    "{:02}:{:02}:{:02}",
                    p.cpu_seconds / 3600,
                    p.cpu_seconds / 60 % 60,
                    p.cpu_seconds % 60
                ),
                p.command.clone(),
            ]
        })
        .collect();
    Ok(http::json(&json!({
        "Titles": ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"],
        "Processes": rows,
    })))
}

/// docker's stats document of a container's cgroup and its pod's network.
fn stats_doc(e: &wharf_engine::Engine, v: &wharf_engine::ContainerView, prev: &Value) -> Value {
    let s = e.container_stats(&v.row.id).ok().flatten();
    let st = s
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or_default());
    let g = |p: &str| {
        st.as_ref()
            .and_then(|v| v.pointer(p))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let system = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| {
            let l = t.lines().next()?.to_string();
            let total: u64 = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse::<u64>().ok())
                .sum();
            Some(total * 1_000_000_000 / rustix::param::clock_ticks_per_second().max(1))
        })
        .unwrap_or(0);
    let limit = match g("/memory/usage/limit") {
        0 | u64::MAX => system_memory(),
        l if l > (1 << 60) => system_memory(),
        l => l,
    };
    let mut networks = serde_json::Map::new();
    if let Ok(pod) = e.pod(&v.row.pod_id)
        && let Ok(counters) = e.pod_network_counters(&pod.row.id)
    {
        for c in counters {
            networks.insert(
                c.name.clone(),
                json!({
                    "rx_bytes": c.rx_bytes, "rx_packets": c.rx_packets, "rx_errors": c.rx_errors,
                    "rx_dropped": c.rx_dropped, "tx_bytes": c.tx_bytes, "tx_packets": c.tx_packets,
                    "tx_errors": c.tx_errors, "tx_dropped": c.tx_dropped,
                }),
            );
        }
    }
    let cache = g("/memory/cache");
    json!({
        "read": wharf_sys::time::now_rfc3339_nano(),
        "preread": prev.get("read").cloned().unwrap_or(json!("0001-01-01T00:00:00Z")),
        "name": format!("/{}", v.row.name),
        "id": v.row.id,
        "pids_stats": {"current": g("/pids/current"), "limit": g("/pids/limit")},
        "blkio_stats": {"io_service_bytes_recursive": null, "io_serviced_recursive": null},
        "num_procs": 0,
        "storage_stats": {},
        "cpu_stats": {
            "cpu_usage": {
                "total_usage": g("/cpu/usage/total"),
                "usage_in_kernelmode": g("/cpu/usage/kernel"),
                "usage_in_usermode": g("/cpu/usage/user"),
            },
            "system_cpu_usage": system,
            "online_cpus": cpus,
            "throttling_data": {
                "periods": g("/cpu/throttling/periods"),
                "throttled_periods": g("/cpu/throttling/throttled_periods"),
                "throttled_time": g("/cpu/throttling/throttled_time"),
            },
        },
        "precpu_stats": prev.get("cpu_stats").cloned().unwrap_or(json!({"cpu_usage": {"total_usage": 0}, "throttling_data": {}})),
        "memory_stats": {
            "usage": g("/memory/usage/usage"),
            "max_usage": g("/memory/usage/max"),
            "limit": limit,
            "stats": {"cache": cache, "total_inactive_file": g("/memory/raw/total_inactive_file"), "inactive_file": g("/memory/raw/inactive_file")},
        },
        "networks": networks,
    })
}

fn system_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// `GET /containers/{id}/stats?stream=&one-shot=`.
pub async fn stats(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let stream = r.flag("stream", true);
    let one_shot = r.flag("one-shot", false);
    let view = {
        let id = id.clone();
        api.engine(move |e| Ok(e.container(&id)?)).await?
    };
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    std::thread::spawn(move || {
        let Ok(e) = wharf_engine::Engine::open(opts) else {
            return;
        };
        let mut prev = Value::Null;
        // Not streamed, docker takes two samples a second apart (for a CPU percentage),
        // unless one-shot.
        if !stream && !one_shot {
            prev = stats_doc(&e, &view, &Value::Null);
            std::thread::sleep(Duration::from_secs(1));
        }
        loop {
            let running = e
                .container(&view.row.id)
                .is_ok_and(|v| v.row.state == ContainerState::Running);
            let doc = stats_doc(&e, &view, &prev);
            e.release_pod_locks();
            if tx.blocking_send(http::line(&doc)).is_err() || !stream || !running {
                return;
            }
            prev = doc;
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    Ok(http::streamed("application/json", rx))
}

/// `GET /containers/{id}/changes`: Kind 0 modified, 1 added, 2 deleted.
pub async fn changes(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let changes = api.engine(move |e| Ok(e.diff(&id)?)).await?;
    let docs: Vec<Value> = changes
        .iter()
        .map(|c| json!({"Path": c.path, "Kind": match c.kind { 'A' => 1, 'D' => 2, _ => 0 }}))
        .collect();
    Ok(http::json(&docs))
}

/// `GET /containers/{id}/export`: its root filesystem as a tar stream.
pub async fn export(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    {
        let id = id.clone();
        api.engine(move |e| Ok(e.container(&id)?)).await?;
    }
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        let Ok(e) = wharf_engine::Engine::open(opts) else {
            return;
        };
        let _ = e.export(
            &id,
            std::io::BufWriter::with_capacity(64 << 10, ChannelWriter(tx)),
        );
    });
    Ok(http::streamed("application/x-tar", rx))
}

/// `POST /containers/{id}/rename?name=`.
pub async fn rename(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let name = r
        .q("name")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad("rename needs a name"))?
        .trim_start_matches('/')
        .to_string();
    api.engine(move |e| {
        e.rename(&id, &name)?;
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// `POST /containers/{id}/update`: memory, swap, CPUs, shares and pids of a running
/// container.
pub async fn update(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let hc: wharf_docker::create::HostConfig = r.json().await?;
    api.engine(move |e| {
        use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxPids, LinuxResources};
        let mut res = LinuxResources::default();
        res.set_devices(None);
        if hc.memory > 0 || hc.memory_swap != 0 {
            let mut m = LinuxMemory::default();
            m.set_limit(Some(hc.memory).filter(|m| *m > 0));
            m.set_swap(Some(hc.memory_swap).filter(|s| *s != 0));
            res.set_memory(Some(m));
        }
        if hc.nano_cpus > 0 || hc.cpu_shares > 0 || hc.cpu_quota > 0 {
            let mut c = LinuxCpu::default();
            if hc.nano_cpus > 0 {
                c.set_period(Some(100_000));
                c.set_quota(Some(hc.nano_cpus / 10_000));
            } else if hc.cpu_quota > 0 {
                c.set_period(Some(if hc.cpu_period > 0 {
                    hc.cpu_period as u64
                } else {
                    100_000
                }));
                c.set_quota(Some(hc.cpu_quota));
            }
            c.set_shares(Some(hc.cpu_shares as u64).filter(|s| *s > 0));
            res.set_cpu(Some(c));
        }
        if let Some(p) = hc.pids_limit {
            let mut pids = LinuxPids::default();
            pids.set_limit(if p <= 0 { -1 } else { p });
            res.set_pids(Some(pids));
        }
        let c = e.container(&id)?;
        if c.row.state == ContainerState::Running || c.row.state == ContainerState::Paused {
            e.update_resources(&c.row.id, &res)?;
        }
        Ok(http::json(&json!({"Warnings": []})))
    })
    .await
}

/// `POST /containers/prune`: every container that does not run.
pub async fn prune(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let filters = r.filters()?;
    let labels: Vec<(String, Option<String>)> = filters
        .get("label")
        .into_iter()
        .flatten()
        .map(|l| match l.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (l.clone(), None),
        })
        .collect();
    let doc = api
        .engine(move |e| {
            let mut deleted = Vec::new();
            let mut space = 0u64;
            for v in e.list_containers(&ContainerFilter {
                all: true,
                ..Default::default()
            })? {
                if matches!(
                    v.row.state,
                    ContainerState::Running | ContainerState::Paused
                ) || v.row.restarting
                {
                    continue;
                }
                if !labels.iter().all(|(k, val)| {
                    v.row
                        .spec
                        .labels
                        .get(k)
                        .is_some_and(|have| val.as_ref().is_none_or(|w| w == have))
                }) {
                    continue;
                }
                space += e.writable_size(&v.row.id).unwrap_or(0);
                if e.remove(&v.row.id, false).is_ok() {
                    deleted.push(v.row.id.clone());
                }
            }
            Ok(json!({"ContainersDeleted": deleted, "SpaceReclaimed": space}))
        })
        .await?;
    Ok(http::json(&doc))
}

/// docker's `X-Docker-Container-Path-Stat` of a path in a container.
fn path_stat(e: &wharf_engine::Engine, id: &str, path: &str) -> Result<String, ApiError> {
    let st = e.path_stat(id, path)?;
    let doc = json!({
        "name": st.name, "size": st.size, "mode": st.mode, "mtime": st.mtime,
        "linkTarget": st.link_target,
    });
    Ok(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        doc.to_string(),
    ))
}

/// `GET|HEAD|PUT /containers/{id}/archive?path=`: `docker cp`, with `wharf cp`'s path
/// safety (everything resolved inside the container's root, never through its links).
pub async fn archive(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let path = r
        .q("path")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::bad("archive needs a path"))?
        .to_string();
    match r.method {
        hyper::Method::HEAD | hyper::Method::GET => {
            let head = r.method == hyper::Method::HEAD;
            let stat = {
                let (id, path) = (id.clone(), path.clone());
                api.engine(move |e| path_stat(e, &id, &path)).await?
            };
            let mut reply = if head {
                http::empty(StatusCode::OK)
            } else {
                let opts = api.engines.options();
                let (tx, rx) = tokio::sync::mpsc::channel(16);
                std::thread::spawn(move || {
                    let Ok(e) = wharf_engine::Engine::open(opts) else {
                        return;
                    };
                    let name = path
                        .trim_end_matches('/')
                        .rsplit('/')
                        .next()
                        .filter(|n| !n.is_empty() && *n != ".")
                        .unwrap_or("")
                        .to_string();
                    let _ = e.copy_out(
                        &id,
                        &path,
                        &name,
                        std::io::BufWriter::with_capacity(64 << 10, ChannelWriter(tx)),
                    );
                });
                http::streamed("application/x-tar", rx)
            };
            reply.headers_mut().insert(
                "X-Docker-Container-Path-Stat",
                stat.parse()
                    .map_err(|_| ApiError::internal("path stat header"))?,
            );
            Ok(reply)
        }
        _ => {
            let no_overwrite = r.flag("noOverwriteDirNonDir", false);
            // docker's daemon keeps the owners the archive gives (its CLI has set them);
            // copyUIDGID asks for the container's user instead: root here.
            let keep_owners = !r.flag("copyUIDGID", false);
            let chunks = r.body_chunks();
            // docker's noOverwriteDirNonDir: the engine's copy never replaces a directory by
            // a file or a file by a directory, whatever the flag says.
            let _ = no_overwrite;
            api.engine(move |e| {
                e.copy_in(&id, &path, http::ChunkReader::new(chunks), keep_owners)?;
                Ok(http::empty(StatusCode::OK))
            })
            .await
        }
    }
}

/// `POST /commit?container=&repo=&tag=&comment=&author=&pause=&changes=`.
pub async fn commit(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let container = r
        .q("container")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ApiError::bad("commit needs a container"))?
        .to_string();
    let name = match (r.q("repo").filter(|s| !s.is_empty()), r.q("tag")) {
        (Some(repo), Some(tag)) if !tag.is_empty() => Some(format!("{repo}:{tag}")),
        (Some(repo), _) => Some(repo.to_string()),
        _ => None,
    };
    let comment = r.q("comment").map(str::to_string).filter(|s| !s.is_empty());
    let author = r.q("author").map(str::to_string).filter(|s| !s.is_empty());
    let pause = r.flag("pause", true);
    let changes: Vec<String> = r.query_all.get("changes").cloned().unwrap_or_default();
    let changes: Vec<String> = changes
        .iter()
        .flat_map(|c| c.split('\n').map(str::to_string))
        .filter(|c| !c.trim().is_empty())
        .collect();
    let _config: Value = r.json().await.unwrap_or(Value::Null);
    let id = api
        .engine(move |e| {
            let img = e.commit(
                &container,
                &wharf_engine::files::CommitRequest {
                    name: name.as_deref(),
                    changes: &changes,
                    comment: comment.as_deref(),
                    author: author.as_deref(),
                    pause,
                },
            )?;
            Ok(img.id.to_string())
        })
        .await?;
    Ok(http::json_status(StatusCode::CREATED, &json!({"Id": id})))
}
