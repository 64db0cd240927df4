//! `/_ping`, `/version`, `/info`, `/events`, `/system/df` and `/auth`.

use std::collections::HashSet;
use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{Value, json};
use wharf_engine::ContainerFilter;
use wharf_engine::model::ContainerState;

use super::http::{self, ApiError, Reply, Req};
use super::{Api, MAX_VERSION, MIN_VERSION};

/// `GET|HEAD /_ping`: what a client negotiates its API version from (the headers every
/// response carries: `Api-Version`, `Ostype`...).
pub fn ping(r: &Req) -> Reply {
    let mut reply = if r.method == hyper::Method::HEAD {
        http::empty(StatusCode::OK)
    } else {
        http::text(StatusCode::OK, "OK")
    };
    let h = reply.headers_mut();
    h.insert("Builder-Version", "1".parse().expect("a header value"));
    h.insert(
        "Cache-Control",
        "no-cache, no-store, must-revalidate"
            .parse()
            .expect("a header value"),
    );
    h.insert("Pragma", "no-cache".parse().expect("a header value"));
    h.insert("Swarm", "inactive".parse().expect("a header value"));
    reply
}

fn kernel() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `GET /version`.
pub async fn version(_api: &Arc<Api>) -> Result<Reply, ApiError> {
    let v = env!("CARGO_PKG_VERSION");
    let api_version = format!("{}.{}", MAX_VERSION.0, MAX_VERSION.1);
    let min = format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1);
    Ok(http::json(&json!({
        "Platform": {"Name": "Wharf"},
        "Components": [{
            "Name": "Engine",
            "Version": v,
            "Details": {
                "ApiVersion": api_version, "MinAPIVersion": min, "Os": "linux",
                "Arch": arch(), "KernelVersion": kernel(), "GitCommit": "", "GoVersion": "",
                "BuildTime": "", "Experimental": "false",
            },
        }],
        "Version": v,
        "ApiVersion": api_version,
        "MinAPIVersion": min,
        "GitCommit": "",
        "GoVersion": "",
        "Os": "linux",
        "Arch": arch(),
        "KernelVersion": kernel(),
        "BuildTime": "",
    })))
}

fn mem_total() -> u64 {
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

fn os_name() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

/// `/info`'s RegistryConfig: docker.io and each registry of the config file, with its
/// mirrors and whether it is spoken to securely, as docker lists its `registry-mirrors`
/// and `insecure-registries` (tools read it to tell why a pull went where it went).
fn registry_config(cfg: &wharf_engine::images::RegistriesConfig) -> serde_json::Value {
    let index = |name: &str, official: bool| {
        let host = cfg.registries.get(name);
        json!({
            "Name": name,
            "Mirrors": host.map(|h| h.mirrors.clone()).unwrap_or_default(),
            "Secure": !host.is_some_and(|h| h.insecure),
            "Official": official,
        })
    };
    let mut configs = serde_json::Map::new();
    configs.insert("docker.io".into(), index("docker.io", true));
    for name in cfg.registries.keys() {
        if name != "docker.io" {
            configs.insert(name.clone(), index(name, false));
        }
    }
    json!({
        "AllowNondistributableArtifactsCIDRs": null,
        "AllowNondistributableArtifactsHostnames": null,
        "IndexConfigs": configs,
        "InsecureRegistryCIDRs": ["::1/128", "127.0.0.0/8"],
        "Mirrors": configs["docker.io"]["Mirrors"],
    })
}

/// `GET /info`.
pub async fn info(api: &Arc<Api>) -> Result<Reply, ApiError> {
    let (containers, images, root, cgroups) = api
        .engine(|e| {
            let c = e.list_containers(&ContainerFilter {
                all: true,
                ..Default::default()
            })?;
            let images: HashSet<String> = e.images().list()?.into_iter().map(|i| i.id).collect();
            let cgroups = wharf_engine::host::cgroups(e.options().cgroup_driver);
            Ok((c, images.len(), e.paths().root.clone(), cgroups))
        })
        .await?;
    let count = |s: ContainerState| containers.iter().filter(|c| c.row.state == s).count();
    let hostname = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    Ok(http::json(&json!({
        "ID": hostname,
        "Containers": containers.len(),
        "ContainersRunning": count(ContainerState::Running),
        "ContainersPaused": count(ContainerState::Paused),
        "ContainersStopped": containers.len() - count(ContainerState::Running) - count(ContainerState::Paused),
        "Images": images,
        "Driver": "overlay2",
        "DriverStatus": [["Backing Filesystem", "extfs"]],
        "Plugins": {
            "Volume": ["local"],
            "Network": ["bridge", "host", "none"],
            "Authorization": null,
            "Log": ["json-file", "local"],
        },
        "MemoryLimit": true,
        "SwapLimit": true,
        "CpuCfsPeriod": true,
        "CpuCfsQuota": true,
        "CPUShares": true,
        "CPUSet": true,
        "PidsLimit": true,
        "IPv4Forwarding": true,
        "Debug": false,
        "NFd": 0,
        "OomKillDisable": false,
        "NGoroutines": 0,
        "SystemTime": wharf_sys::time::now_rfc3339_nano(),
        "LoggingDriver": "json-file",
        "CgroupDriver": cgroups.driver.as_str(),
        "CgroupVersion": cgroups.version.as_str(),
        "NEventsListener": 0,
        "KernelVersion": kernel(),
        "OperatingSystem": os_name(),
        "OSVersion": "",
        "OSType": "linux",
        "Architecture": std::env::consts::ARCH,
        "IndexServerAddress": "https://index.docker.io/v1/",
        "RegistryConfig": registry_config(&api.engines.options().registries),
        "NCPU": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "MemTotal": mem_total(),
        "DockerRootDir": root,
        "HttpProxy": "", "HttpsProxy": "", "NoProxy": "",
        "Name": hostname,
        "Labels": [],
        "ExperimentalBuild": false,
        "ServerVersion": env!("CARGO_PKG_VERSION"),
        "Runtimes": {"runc": {"path": "wharf"}},
        "DefaultRuntime": "runc",
        "Swarm": {"NodeID": "", "NodeAddr": "", "LocalNodeState": "inactive", "ControlAvailable": false, "Error": "", "RemoteManagers": null},
        "LiveRestoreEnabled": true,
        "Isolation": "",
        "InitBinary": "",
        "SecurityOptions": ["name=seccomp,profile=builtin"],
        "Warnings": [],
    })))
}

/// `GET /events`: docker's event messages, as they happen (`since`, `until`, `filters`:
/// type, event, container, image, label, network, volume).
pub async fn events(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let since = r.q("since").map(parse_time).transpose()?.flatten();
    let until = r.q("until").map(parse_time).transpose()?.flatten();
    let filters = r.filters()?;
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    // A follower holds an engine for as long as the client listens: a thread of its own.
    std::thread::spawn(move || {
        let Ok(engine) = wharf_engine::Engine::open(opts) else {
            return;
        };
        let follow = until.is_none_or(|u| u > std::time::SystemTime::now());
        let mut feed = engine.events(wharf_engine::EventOptions { since, follow });
        loop {
            let Ok(Some(batch)) = feed.next_batch() else {
                return;
            };
            for e in batch {
                let t = wharf_sys::time::parse_rfc3339(&e.time);
                if let (Some(u), Some(t)) = (until, t)
                    && t > u
                {
                    return;
                }
                let doc = wharf_docker::views::event(&e);
                if !passes(&doc, &filters) {
                    continue;
                }
                if tx.blocking_send(http::line(&doc)).is_err() {
                    return;
                }
            }
            if !follow {
                return;
            }
        }
    });
    Ok(http::streamed("application/json", rx))
}

/// Whether an event passes docker's event filters.
fn passes(doc: &Value, filters: &std::collections::HashMap<String, Vec<String>>) -> bool {
    let attr = |k: &str| {
        doc["Actor"]["Attributes"][k]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    filters.iter().all(|(k, vals)| {
        vals.is_empty()
            || vals.iter().any(|v| match k.as_str() {
                "type" => doc["Type"] == v.as_str(),
                "event" => doc["Action"]
                    .as_str()
                    .is_some_and(|a| a == v || a.split(':').next() == Some(v.as_str())),
                "container" => {
                    doc["Type"] == "container"
                        && (doc["id"]
                            .as_str()
                            .is_some_and(|id| id.starts_with(v.as_str()))
                            || attr("name") == *v)
                }
                "image" => attr("image") == *v || doc["from"] == v.as_str(),
                "label" => match v.split_once('=') {
                    Some((lk, lv)) => attr(lk) == lv,
                    None => !attr(v).is_empty(),
                },
                "network" | "volume" => {
                    doc["Type"] == k.as_str() && (doc["id"] == v.as_str() || attr("name") == *v)
                }
                _ => true,
            })
    })
}

/// docker's `since`/`until`: unix seconds (with a fraction), an RFC 3339 time or a Go
/// duration before now.
fn parse_time(s: &str) -> Result<Option<std::time::SystemTime>, ApiError> {
    if s.is_empty() {
        return Ok(None);
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Ok(Some(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(secs.max(0.0)),
        ));
    }
    if let Some(t) = wharf_sys::time::parse_rfc3339(s) {
        return Ok(Some(t));
    }
    if let Some(d) = wharf_sys::time::parse_go_duration(s) {
        return Ok(Some(std::time::SystemTime::now() - d));
    }
    Err(ApiError::bad(format!(
        "invalid time {s:?}: unix seconds, RFC 3339 or a duration"
    )))
}

/// `GET /system/df`.
pub async fn df(api: &Arc<Api>, _r: &Req) -> Result<Reply, ApiError> {
    let doc = api
        .engine(|e| {
            let containers = e.list_containers(&ContainerFilter {
                all: true,
                ..Default::default()
            })?;
            let used: HashSet<String> = containers.iter().map(|c| c.row.image_id.clone()).collect();
            let mut seen = HashSet::new();
            let mut images = Vec::new();
            let mut layers = 0u64;
            for i in e.images().list()? {
                if !seen.insert(i.id.clone()) {
                    continue;
                }
                layers += i.size;
                let count = containers.iter().filter(|c| c.row.image_id == i.id).count();
                images.push(json!({
                    "Id": i.id, "ParentId": "", "RepoTags": i.name.iter().collect::<Vec<_>>(),
                    "RepoDigests": [], "Created": i.created_at, "Size": i.size,
                    "SharedSize": 0, "VirtualSize": i.size, "Labels": {},
                    "Containers": if used.contains(&i.id) { count as i64 } else { 0 },
                }));
            }
            let ctrs: Vec<Value> = containers
                .iter()
                .map(|c| {
                    json!({
                        "Id": c.row.id, "Names": [format!("/{}", c.row.name)],
                        "Image": c.row.image_name, "ImageID": c.row.image_id,
                        "Command": wharf_docker::views::argv(&c.row).join(" "),
                        "Created": wharf_docker::listing::epoch(&c.row.created_at).unwrap_or(0),
                        "State": wharf_docker::listing::state_name(&c.row),
                        "Status": wharf_docker::listing::status(&c.row),
                        "SizeRw": e.writable_size(&c.row.id).unwrap_or(0),
                        "SizeRootFs": 0, "Labels": c.row.spec.labels, "Mounts": [],
                    })
                })
                .collect();
            let in_use = e.volumes_in_use()?;
            let vols: Vec<Value> = e
                .list_volumes()?
                .iter()
                .map(|v| {
                    json!({
                        "Name": v.name, "Driver": "local", "Mountpoint": v.mountpoint,
                        "CreatedAt": v.created_at, "Labels": v.labels, "Scope": "local",
                        "Options": null,
                        "UsageData": {
                            "Size": wharf_engine::named_volumes::volume_size(v),
                            "RefCount": in_use.get(&v.name).map_or(0, Vec::len),
                        },
                    })
                })
                .collect();
            let cache: Vec<Value> = e
                .build_cache()
                .into_iter()
                .map(|c| {
                    let at = wharf_sys::time::rfc3339(c.created, 0, false);
                    json!({
                        "ID": &c.key[..c.key.len().min(25)], "Parent": "", "Type": "regular",
                        "Description": format!("step image {}", c.image),
                        "InUse": false, "Shared": false, "Size": c.size,
                        "CreatedAt": at, "LastUsedAt": at, "UsageCount": 1,
                    })
                })
                .collect();
            Ok(json!({
                "LayersSize": layers, "Images": images, "Containers": ctrs,
                "Volumes": vols, "BuildCache": cache,
            }))
        })
        .await?;
    Ok(http::json(&doc))
}

/// `POST /auth`: the credentials are checked against the registry (docker login).
pub async fn auth(api: &Arc<Api>, r: &mut Req) -> Result<Reply, ApiError> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Body {
        username: String,
        password: String,
        serveraddress: String,
    }
    let b: Body = r.json().await?;
    if b.username.is_empty() {
        return Err(ApiError::bad("username is empty"));
    }
    let server = if b.serveraddress.is_empty() {
        "docker.io"
    } else {
        b.serveraddress.as_str()
    };
    let host = wharf_engine::registry::login_host(server);
    let creds = wharf_engine::images::Credentials {
        username: b.username,
        password: b.password,
    };
    let registries = api.engines.options().registries;
    tokio::task::spawn_blocking(move || {
        wharf_engine::registry::check_login(&registries, &host, creds)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e.to_string()))?;
    Ok(http::json(
        &json!({"Status": "Login Succeeded", "IdentityToken": ""}),
    ))
}
