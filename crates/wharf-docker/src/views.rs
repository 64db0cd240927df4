//! Containers, `ps` rows and events as docker shows them in JSON and to `--format`
//! templates: the same key names and layout (`State.Pid`, `Config.Env` as `K=V`,
//! `HostConfig.RestartPolicy.Name`, `NetworkSettings.Ports`, `Names`, `RunningFor`...), so
//! that scripts written against `docker inspect -f` and `docker ps --format` read Wharf's
//! output unchanged. Wharf's own additions (`Pod`, `PodId`, `Bundle`, `NetworkSettings.IPs`)
//! sit beside them under names docker does not use.

use serde_json::{Map, Value, json};
use wharf_engine::ContainerView;
use wharf_engine::db::{Event, PodRow};
use wharf_engine::model::{ContainerState, NetworkMode, PortMapping, RestartPolicy};

/// A time as docker's CLI prints it (`2024-05-01 10:00:00 +0000 UTC`).
pub fn docker_time(rfc3339: &str) -> String {
    let t = rfc3339.trim_end_matches('Z');
    let t = t.split('.').next().unwrap_or(t);
    format!("{} +0000 UTC", t.replacen('T', " ", 1))
}

/// Docker's zero time, for times that have not happened.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// What runs: the entrypoint then the command.
pub fn argv(c: &wharf_engine::db::ContainerRow) -> Vec<String> {
    c.spec
        .entrypoint
        .iter()
        .chain(&c.spec.command)
        .flatten()
        .cloned()
        .collect()
}

fn restart_name(p: RestartPolicy) -> &'static str {
    match p {
        RestartPolicy::Always => "always",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::UnlessStopped => "unless-stopped",
        RestartPolicy::Never => "no",
    }
}

fn network_mode(pod: Option<&PodRow>) -> String {
    match pod.map(|p| &p.spec.network) {
        Some(NetworkMode::None) => "none".into(),
        Some(NetworkMode::Host) => "host".into(),
        Some(NetworkMode::Named(n)) => n.clone(),
        Some(NetworkMode::Default) | None => pod
            .map(|p| p.sandbox.network.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into()),
    }
}

/// `{"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}]}`.
fn port_map(ports: &[PortMapping]) -> Value {
    let mut m = Map::new();
    for p in ports {
        let key = format!("{}/{}", p.container_port, p.protocol.to_lowercase());
        let entry = json!({
            "HostIp": p.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into()),
            "HostPort": p.host_port.to_string(),
        });
        match m.get_mut(&key) {
            Some(Value::Array(a)) => a.push(entry),
            _ => {
                m.insert(key, json!([entry]));
            }
        }
    }
    Value::Object(m)
}

/// docker ps's PORTS: `0.0.0.0:8080->80/tcp, ...`.
pub fn ports_column(ports: &[PortMapping]) -> String {
    ports
        .iter()
        .map(|p| {
            format!(
                "{}:{}->{}/{}",
                p.host_ip.as_deref().unwrap_or("0.0.0.0"),
                p.host_port,
                p.container_port,
                p.protocol.to_lowercase()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `docker inspect` of a container. `pid` is its init's host pid while it runs; `pod` its
/// pod's record (ports, DNS, restart policy, network live there).
pub fn container(
    v: &ContainerView,
    pid: Option<i32>,
    pod: Option<&PodRow>,
    health: Option<&wharf_shim::protocol::HealthState>,
) -> Value {
    let c = &v.row;
    // What the container was given: the pod's IP in place of a played manifest's podIP.
    let given = pod.map(|p| wharf_engine::pod_ip::given(&c.spec, p));
    let s: &wharf_engine::model::ContainerSpec = given.as_deref().unwrap_or(&c.spec);
    let running = c.shown_state() == ContainerState::Running;
    let paused = c.state == ContainerState::Paused;
    let argv = argv(c);
    let exit = c.exit.as_ref();
    let etc = pod.and_then(|p| p.sandbox.etc_dir.clone());
    let etc_file = |f: &str| etc.as_ref().map(|d| format!("{d}/{f}")).unwrap_or_default();
    let pod_spec = pod.map(|p| &p.spec);
    let ports = pod_spec.map(|p| p.ports.as_slice()).unwrap_or_default();
    let binds: Vec<String> = s
        .mounts
        .iter()
        .filter(|m| m.kind == "bind")
        .map(|m| {
            format!(
                "{}:{}{}",
                m.source.display(),
                m.destination.display(),
                if m.readonly { ":ro" } else { "" }
            )
        })
        .collect();
    let tmpfs: Map<String, Value> = s
        .mounts
        .iter()
        .filter(|m| m.kind == "tmpfs")
        .map(|m| {
            (
                m.destination.display().to_string(),
                json!(m.options.join(",")),
            )
        })
        .collect();
    let mounts: Vec<Value> = s
        .mounts
        .iter()
        .map(|m| {
            json!({
                "Type": m.kind,
                "Source": m.source,
                "Destination": m.destination,
                "Mode": if m.readonly { "ro" } else { "" },
                "RW": !m.readonly,
                "Propagation": if m.kind == "bind" { "rprivate" } else { "" },
            })
        })
        .collect();
    let env: Vec<String> = s.env.iter().map(|(k, val)| format!("{k}={val}")).collect();
    let ip = first_ipv4(&v.ips);
    let mut networks = Map::new();
    if !v.network.is_empty() {
        networks.insert(
            v.network.clone(),
            json!({"IPAddress": ip, "NetworkID": v.network,
                   "Aliases": pod_spec.map(|p| p.network_aliases.clone()).unwrap_or_default()}),
        );
    }
    // Its further networks (`network connect`).
    for a in pod
        .map(|p| p.sandbox.extra_networks.as_slice())
        .unwrap_or_default()
    {
        let aliases = pod_spec
            .and_then(|p| p.extra_networks.iter().find(|x| x.name == a.network))
            .map(|x| x.aliases.clone())
            .unwrap_or_default();
        networks.insert(
            a.network.clone(),
            json!({
                "IPAddress": first_ipv4(&a.ips),
                "NetworkID": a.network,
                "Aliases": aliases,
            }),
        );
    }
    let nano_cpus = s.cpus.map_or(0, |c| (c * 1e9).round() as i64);
    let state = json!({
        "Status": if c.restarting { "restarting".to_string() } else { c.shown_state().to_string() },
        "Running": running,
        "Paused": paused,
        "Restarting": c.restarting,
        "OOMKilled": exit.is_some_and(|e| e.oom_killed),
        "Dead": false,
        "Pid": pid.filter(|_| running || paused).unwrap_or(0),
        "ExitCode": exit.map_or(0, |e| e.code),
        "Error": exit.and_then(|e| e.message.clone()).unwrap_or_default(),
        "StartedAt": c.started_at.clone().unwrap_or_else(|| ZERO_TIME.into()),
        "FinishedAt": exit.map_or_else(|| ZERO_TIME.into(), |e| e.finished_at.clone()),
        // Wharf's: the signal that ended it and why it ended.
        "Signal": exit.and_then(|e| e.signal),
        "Reason": exit.and_then(|e| e.reason.clone()),
    });
    let mut state = state;
    if let Some(h) = health {
        state["Health"] = json!(h);
    }
    let mut log_config = Map::new();
    if let Some(n) = pod_spec.and_then(|p| p.log_max_size) {
        log_config.insert("max-size".into(), json!(n.to_string()));
    }
    if let Some(n) = pod_spec.and_then(|p| p.log_max_files) {
        log_config.insert("max-file".into(), json!(n.to_string()));
    }
    let host_config = json!({
        // docker's null for none.
        "Binds": (!binds.is_empty()).then_some(binds),
        "NetworkMode": network_mode(pod),
        "PortBindings": port_map(ports),
        "RestartPolicy": {
            "Name": restart_name(pod_spec.map(|p| p.restart).unwrap_or_default()),
            "MaximumRetryCount": pod_spec.and_then(|p| p.max_restarts).unwrap_or(0),
        },
        "AutoRemove": s.auto_remove,
        "Privileged": s.privileged,
        "CapAdd": s.cap_add,
        "CapDrop": s.cap_drop,
        "ReadonlyRootfs": s.read_only,
        "Memory": s.memory.unwrap_or(0),
        "MemorySwap": s.memory_swap.unwrap_or(0),
        "MemoryReservation": s.memory_reservation.unwrap_or(0),
        "NanoCpus": nano_cpus,
        "CpuShares": s.cpu_shares.unwrap_or(0),
        "PidsLimit": s.pids_limit,
        "OomScoreAdj": s.oom_score_adj.unwrap_or(0),
        "Init": s.init,
        "Tmpfs": tmpfs,
        "ShmSize": pod_spec.and_then(|p| p.shm_size).unwrap_or(64 << 20),
        "Devices": s.devices.iter().map(|d| json!({
            "PathOnHost": d.host_path,
            "PathInContainer": d.container_path,
            "CgroupPermissions": d.permissions,
        })).collect::<Vec<_>>(),
        "Dns": pod_spec.map(|p| p.dns.servers.clone()).unwrap_or_default(),
        "DnsSearch": pod_spec.map(|p| p.dns.searches.clone()).unwrap_or_default(),
        "DnsOptions": pod_spec.map(|p| p.dns.options.clone()).unwrap_or_default(),
        "ExtraHosts": pod_spec.map(|p| p.extra_hosts.iter().flat_map(|(ip, names)| {
            names.iter().map(move |name| format!("{name}:{ip}"))
        }).collect::<Vec<_>>()).unwrap_or_default(),
        "Sysctls": pod_spec.map(|p| p.sysctls.clone()).unwrap_or_default(),
        "Ulimits": s.ulimits.iter().map(|(n, soft, hard)| json!({
            "Name": n, "Soft": soft, "Hard": hard,
        })).collect::<Vec<_>>(),
        "PidMode": if pod_spec.is_some_and(|p| p.host_pid) { "host" } else { "" },
        "IpcMode": if pod_spec.is_some_and(|p| p.host_ipc) { "host" } else { "private" },
        // The shim's log file, read by `logs` as docker reads its json-file driver's
        // (docker-py fetches a run's output only from drivers it knows it can read).
        "LogConfig": {"Type": "json-file", "Config": log_config},
    });
    json!({
        "Id": c.id,
        "Created": c.created_at,
        "Path": argv.first().cloned().unwrap_or_default(),
        "Args": argv.get(1..).unwrap_or_default(),
        "State": state,
        "Image": c.image_id,
        "ResolvConfPath": etc_file("resolv.conf"),
        "HostnamePath": etc_file("hostname"),
        "HostsPath": etc_file("hosts"),
        "LogPath": v.log_path,
        "Name": format!("/{}", c.name),
        "RestartCount": c.restart_count,
        "Driver": "overlay",
        "Platform": "linux",
        "AppArmorProfile": s.apparmor_profile.clone().unwrap_or_default(),
        "HostConfig": host_config,
        "Mounts": mounts,
        "Config": {
            "Hostname": pod_spec.and_then(|p| p.hostname.clone()).unwrap_or_else(|| c.id[..12].to_string()),
            "User": s.user.clone().unwrap_or_default(),
            "Tty": s.tty,
            "OpenStdin": s.stdin,
            "Env": env,
            "Cmd": s.command,
            "Image": c.image_name,
            "WorkingDir": s.workdir.clone().unwrap_or_default(),
            "Entrypoint": s.entrypoint,
            "Labels": s.labels,
            "StopSignal": s.stop_signal.clone().unwrap_or_else(|| "SIGTERM".into()),
            "StopTimeout": s.stop_timeout,
        },
        "NetworkSettings": {
            "IPAddress": ip,
            "Ports": port_map(ports),
            "Networks": networks,
            "IPs": v.ips,
        },
        "Pod": v.pod_name,
        "PodId": c.pod_id,
        "Bundle": v.bundle,
    })
}

/// One `docker ps` row (JSON and templates): the columns by docker's names, plus
/// `Label` (a map, for `{{.Label "key"}}`) and Wharf's `Pod`/`PodId`.
pub fn ps_row(
    v: &ContainerView,
    pod: Option<&PodRow>,
    status: String,
    running_for: String,
    pod_column: String,
) -> Value {
    let c = &v.row;
    let cmd = argv(c).join(" ");
    let labels = c
        .spec
        .labels
        .iter()
        .map(|(k, val)| format!("{k}={val}"))
        .collect::<Vec<_>>()
        .join(",");
    let mounts = c
        .spec
        .mounts
        .iter()
        .map(|m| m.destination.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    json!({
        "ID": &c.id[..12],
        "Image": c.image_name,
        "Command": format!("\"{cmd}\""),
        "CreatedAt": docker_time(&c.created_at),
        "RunningFor": running_for,
        "Ports": ports_column(pod.map(|p| p.spec.ports.as_slice()).unwrap_or_default()),
        "State": if c.restarting { "restarting".to_string() } else { c.shown_state().to_string() },
        "Status": status,
        "Size": "0B",
        "Names": c.name,
        "Labels": labels,
        "Label": c.spec.labels,
        "Mounts": mounts,
        "Networks": pod.map_or_else(
            || v.network.clone(),
            |p| p.sandbox.networks().collect::<Vec<_>>().join(","),
        ),
        "LocalVolumes": "0",
        "Pod": pod_column,
        "PodId": c.pod_id,
    })
}

/// Column titles of ps fields, for `table` templates.
pub fn ps_headers() -> Value {
    json!({
        "ID": "CONTAINER ID", "Image": "IMAGE", "Command": "COMMAND", "CreatedAt": "CREATED AT",
        "RunningFor": "CREATED", "Ports": "PORTS", "State": "STATE", "Status": "STATUS",
        "Size": "SIZE", "Names": "NAMES", "Labels": "LABELS", "Label": {}, "Mounts": "MOUNTS",
        "Networks": "NETWORKS", "LocalVolumes": "LOCAL VOLUMES", "Pod": "POD", "PodId": "POD ID",
    })
}

/// docker's action for one of Wharf's event kinds.
pub fn docker_action(kind: &str) -> &str {
    match kind {
        "created" => "create",
        "started" => "start",
        "exited" => "die",
        "removed" => "destroy",
        "paused" => "pause",
        "unpaused" => "unpause",
        "renamed" => "rename",
        "restarted" => "restart",
        "stopped" => "stop",
        "died" => "die",
        other => other,
    }
}

/// An event as `docker events --format json` prints it.
pub fn event(e: &Event) -> Value {
    let nanos = wharf_sys::time::parse_rfc3339(&e.time)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let action = docker_action(&e.kind_of_event);
    let mut attrs = Map::new();
    attrs.insert("name".into(), json!(e.name));
    if let Value::Object(m) = &e.attrs {
        for (k, v) in m {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            attrs.insert(k.clone(), Value::String(v));
        }
    }
    let mut doc = json!({
        "status": action,
        "id": e.id,
        "Type": e.object,
        "Action": action,
        "Actor": {"ID": e.id, "Attributes": &attrs},
        "scope": "local",
        "time": (nanos / 1_000_000_000) as u64,
        "timeNano": nanos as u64,
    });
    if let Some(image) = attrs.get("image") {
        doc["from"] = image.clone();
    }
    doc
}

/// `snake_case` keys as `PascalCase` (one key style across a document), except inside
/// maps of the user's own keys (labels, annotations, sysctls).
pub fn pascal_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let user_keys = matches!(k.as_str(), "labels" | "annotations" | "sysctls");
                    let v = if user_keys { v } else { pascal_keys(v) };
                    (pascal(&k), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(pascal_keys).collect()),
        other => other,
    }
}

fn pascal(k: &str) -> String {
    k.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

/// An image name as docker shows it: `busybox:latest` for `docker.io/library/busybox:latest`,
/// The first IPv4 address of a pod's addresses (docker's `IPAddress`), "" when it has
/// none.
pub fn first_ipv4(ips: &[String]) -> String {
    ips.iter()
        .find(|a| !a.contains(':'))
        .cloned()
        .unwrap_or_default()
}

/// `me/app:1` for `docker.io/me/app:1`, other registries' names whole.
pub fn familiar(name: &str) -> String {
    let n = name.strip_prefix("docker.io/").unwrap_or(name);
    n.strip_prefix("library/").unwrap_or(n).to_string()
}

/// `docker image inspect`'s document (Id, RepoTags, RepoDigests, Created from the image's
/// config, Config, RootFS...), with Wharf's store details beside it (Digest, ChainID,
/// Manifest, LayerDirs).
pub fn image(details: &wharf_engine::images::ImageDetails) -> serde_json::Value {
    let (img, layers) = (&details.image, &details.layer_dirs);
    let repo_digests: Vec<String> = img
        .names
        .iter()
        .filter_map(|n| {
            let repo = n.split('@').next()?;
            let repo = match repo.rfind(':') {
                Some(i) if !repo[i..].contains('/') => &repo[..i],
                _ => repo,
            };
            Some(format!("{repo}@{}", img.manifest_digest))
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let created = img
        .config
        .created()
        .clone()
        .unwrap_or_else(|| wharf_sys::time::rfc3339(img.created_at, 0, false));
    serde_json::json!({
        "Id": img.id.to_string(),
        "RepoTags": img.names.iter().filter(|n| !n.contains('@')).collect::<Vec<_>>(),
        "RepoDigests": repo_digests,
        "Created": created,
        "Author": img.config.author().clone().unwrap_or_default(),
        "Architecture": img.config.architecture().to_string(),
        "Os": img.config.os().to_string(),
        "Size": img.size,
        "Config": match &details.docker_config {
            Some(c) => serde_json::Value::Object(c.clone()),
            None => serde_json::to_value(img.config.config()).unwrap_or_default(),
        },
        "RootFS": {
            "Type": "layers",
            "Layers": img.diff_ids.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        },
        "Names": img.names,
        "Digest": img.manifest_digest.to_string(),
        "MediaType": img.manifest_media_type,
        "ChainID": img.top_chain_id.as_ref().map(|c| c.to_string()),
        "Manifest": img.manifest,
        "LayerDirs": layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_pascal_case_but_user_keys_stay() {
        let v = pascal_keys(
            json!({"host_pid": true, "labels": {"app_name": "x"}, "dns": {"servers": []}}),
        );
        assert_eq!(
            v,
            json!({"HostPid": true, "Labels": {"app_name": "x"}, "Dns": {"Servers": []}})
        );
    }
}
