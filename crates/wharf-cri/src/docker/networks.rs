//! `/networks/...` on Wharf's user networks (and the built-in `bridge`, `host` and `none`
//! docker always lists), and `/volumes/...` on its named volumes.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use wharf_engine::model::NetworkMode;

use super::Api;
use super::http::{self, ApiError, Reply, Req};

/// The networks every docker host has, as docker shows them.
const BUILTIN: [(&str, &str); 3] = [("bridge", "bridge"), ("host", "host"), ("none", "null")];

/// A stable 64-hex id of a built-in network.
fn builtin_id(name: &str) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}").repeat(4)
}

fn builtin_doc(name: &str, driver: &str, containers: Value) -> Value {
    json!({
        "Name": name, "Id": builtin_id(name), "Created": "0001-01-01T00:00:00Z",
        "Scope": "local", "Driver": driver, "EnableIPv4": true, "EnableIPv6": false,
        "IPAM": {"Driver": "default", "Options": null, "Config": if name == "bridge" {
            json!([{"Subnet": "10.88.0.0/16", "Gateway": "10.88.0.1"}]) } else { json!([]) }},
        "Internal": false, "Attachable": false, "Ingress": false,
        "ConfigFrom": {"Network": ""}, "ConfigOnly": false,
        "Containers": containers, "Options": {}, "Labels": {},
    })
}

/// The containers of the pods on `pods`, as docker's `Containers` of a network.
/// The containers of `pods` with their addresses on user network `network` (None: a
/// built-in network, the pods' first).
fn members(
    e: &wharf_engine::Engine,
    network: Option<&str>,
    pods: &[wharf_engine::db::PodRow],
) -> Result<Value, ApiError> {
    let mut out = serde_json::Map::new();
    for p in pods {
        let containers = e.list_containers(&wharf_engine::ContainerFilter {
            all: true,
            pod: Some(p.id.clone()),
            ..Default::default()
        })?;
        for c in containers.iter().map(|v| &v.row) {
            let ip = wharf_docker::views::first_ipv4(
                network.map_or(p.sandbox.ips.as_slice(), |n| p.sandbox.ips_on(n)),
            );
            out.insert(
                c.id.clone(),
                json!({"Name": c.name, "EndpointID": p.id, "MacAddress": "",
                       "IPv4Address": if ip.is_empty() { String::new() } else { format!("{ip}/24") },
                       "IPv6Address": ""}),
            );
        }
    }
    Ok(Value::Object(out))
}

fn user_doc(n: &wharf_engine::user_networks::UserNetwork, containers: Value) -> Value {
    json!({
        "Name": n.name, "Id": n.id, "Created": n.created, "Scope": "local",
        "Driver": "bridge", "EnableIPv4": true, "EnableIPv6": false,
        "IPAM": {"Driver": "default", "Options": {}, "Config": [{"Subnet": n.subnet, "Gateway": n.gateway}]},
        "Internal": false, "Attachable": true, "Ingress": false,
        "ConfigFrom": {"Network": ""}, "ConfigOnly": false,
        "Containers": containers,
        "Options": {"com.docker.network.bridge.name": n.bridge},
        "Labels": n.labels,
    })
}

/// `GET /networks?filters=` (name, id, label, driver, type).
pub async fn list(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let filters = r.filters()?;
    let docs = api
        .engine(|e| {
            let mut out: Vec<Value> = BUILTIN
                .iter()
                .map(|(n, d)| builtin_doc(n, d, json!({})))
                .collect();
            for n in e.list_networks()? {
                out.push(user_doc(&n, json!({})));
            }
            Ok(out)
        })
        .await?;
    let docs: Vec<Value> = docs
        .into_iter()
        .filter(|d| {
            filters.iter().all(|(k, vals)| {
                vals.is_empty()
                    || vals.iter().any(|v| match k.as_str() {
                        "name" => d["Name"].as_str().is_some_and(|n| n.contains(v.as_str())),
                        "id" => d["Id"].as_str().is_some_and(|i| i.starts_with(v.as_str())),
                        "driver" => d["Driver"] == v.as_str(),
                        "type" => {
                            let builtin = BUILTIN.iter().any(|(n, _)| d["Name"] == *n);
                            (v == "builtin") == builtin
                        }
                        "label" => match v.split_once('=') {
                            Some((lk, lv)) => d["Labels"][lk] == lv,
                            None => !d["Labels"][v.as_str()].is_null(),
                        },
                        "scope" => v == "local",
                        "dangling" => true,
                        _ => true,
                    })
            })
        })
        .collect();
    Ok(http::json(&docs))
}

/// A network by name, id or id prefix.
fn find(
    e: &wharf_engine::Engine,
    key: &str,
) -> Result<Result<wharf_engine::user_networks::UserNetwork, &'static str>, ApiError> {
    if let Some((n, _)) = BUILTIN
        .iter()
        .find(|(n, _)| *n == key || builtin_id(n).starts_with(key) && key.len() >= 12)
    {
        return Ok(Err(n));
    }
    for n in e.list_networks()? {
        if n.name == key || (key.len() >= 3 && n.id.starts_with(key)) {
            return Ok(Ok(n));
        }
    }
    Err(ApiError::not_found(format!("network {key} not found")))
}

/// `GET /networks/{id}`.
pub async fn inspect(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let key = r.param("id").to_string();
    let doc = api
        .engine(move |e| match find(e, &key)? {
            Ok(n) => {
                let pods = e.network_pods(&n.name)?;
                Ok(user_doc(&n, members(e, Some(&n.name), &pods)?))
            }
            Err(name) => {
                let pods: Vec<_> = e
                    .list_pods(&Default::default())?
                    .into_iter()
                    .map(|p| p.row)
                    .filter(|p| match name {
                        "bridge" => p.spec.network == NetworkMode::Default,
                        "host" => p.spec.network == NetworkMode::Host,
                        _ => p.spec.network == NetworkMode::None,
                    })
                    .collect();
                let d = BUILTIN
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or("", |(_, d)| d);
                Ok(builtin_doc(name, d, members(e, None, &pods)?))
            }
        })
        .await?;
    Ok(http::json(&doc))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct NetworkCreate {
    name: String,
    driver: String,
    internal: bool,
    attachable: bool,
    enable_ipv6: Option<bool>,
    check_duplicate: Option<bool>,
    #[serde(rename = "IPAM")]
    ipam: Option<Ipam>,
    labels: Option<BTreeMap<String, String>>,
    options: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Ipam {
    driver: String,
    config: Option<Vec<IpamConfig>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct IpamConfig {
    subnet: String,
    gateway: String,
    #[serde(rename = "IPRange")]
    ip_range: String,
}

/// `POST /networks/create`.
pub async fn create(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let b: NetworkCreate = r.json().await?;
    if b.name.is_empty() {
        return Err(ApiError::bad("network name is empty"));
    }
    if !matches!(b.driver.as_str(), "" | "bridge") {
        return Err(ApiError::bad(format!(
            "network driver {:?} is not supported: bridge only",
            b.driver
        )));
    }
    if b.internal {
        return Err(ApiError::not_implemented(
            "internal networks (no route out) are not supported yet",
        ));
    }
    if b.enable_ipv6 == Some(true) {
        return Err(ApiError::not_implemented(
            "IPv6 user networks are not supported yet",
        ));
    }
    let _ = (b.attachable, b.check_duplicate, &b.options);
    let ipam = b.ipam.unwrap_or_default();
    if !matches!(ipam.driver.as_str(), "" | "default") {
        return Err(ApiError::bad(format!(
            "IPAM driver {:?} is not supported: default only",
            ipam.driver
        )));
    }
    let cfg = ipam.config.unwrap_or_default();
    let first = cfg.first();
    let subnet = first.map(|c| c.subnet.clone()).filter(|s| !s.is_empty());
    let gateway = first.map(|c| c.gateway.clone()).filter(|s| !s.is_empty());
    if first.is_some_and(|c| !c.ip_range.is_empty()) {
        return Err(ApiError::not_implemented(
            "IPAM IPRange is not supported yet",
        ));
    }
    let labels = b.labels.unwrap_or_default();
    let name = b.name.clone();
    let n = api
        .engine(move |e| {
            if BUILTIN.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::conflict(format!(
                    "network with name {name} already exists"
                )));
            }
            match e.create_network(&name, subnet.as_deref(), gateway.as_deref(), labels) {
                Ok(n) => Ok(n),
                Err(wharf_engine::Error::NameInUse { .. }) => Err(ApiError::conflict(format!(
                    "network with name {name} already exists"
                ))),
                Err(other) => Err(other.into()),
            }
        })
        .await?;
    Ok(http::json_status(
        StatusCode::CREATED,
        &json!({"Id": n.id, "Warning": ""}),
    ))
}

/// `DELETE /networks/{id}`.
pub async fn remove(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let key = r.param("id").to_string();
    api.engine(move |e| match find(e, &key)? {
        Ok(n) => {
            e.remove_network(&n.name)?;
            Ok(http::empty(StatusCode::NO_CONTENT))
        }
        Err(name) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{name} is a pre-defined network and cannot be removed"),
        )),
    })
    .await
}

/// `POST /networks/prune`.
pub async fn prune(api: &Arc<Api>, _r: &Req) -> Result<Reply, ApiError> {
    let removed = api.engine(|e| Ok(e.prune_networks()?)).await?;
    Ok(http::json(&json!({"NetworksDeleted": removed})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Connect {
    container: String,
    force: bool,
    endpoint_config: Option<Endpoint>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Endpoint {
    aliases: Option<Vec<String>>,
}

/// `POST /networks/{id}/connect`: the container's pod joins a further user network
/// (eth1, eth2... without a default route, as docker's further endpoints).
pub async fn connect(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let key = r.param("id").to_string();
    let b: Connect = r.json().await?;
    api.engine(move |e| {
        let c = e.container(&b.container)?;
        let name = match find(e, &key)? {
            Ok(n) => n.name,
            Err(builtin) => {
                let on = on_builtin(&c, builtin);
                return Err(if on {
                    already(&c.row.name, builtin)
                } else {
                    ApiError::bad(format!(
                        "container {} cannot join network {builtin}: only user networks can be joined while it lives",
                        c.row.name
                    ))
                });
            }
        };
        let aliases = b
            .endpoint_config
            .and_then(|x| x.aliases)
            .unwrap_or_default();
        match e.connect_network(&c.row.id, &name, &aliases) {
            Ok(()) => Ok(http::empty(StatusCode::OK)),
            Err(wharf_engine::Error::Exists(_)) => Err(already(&c.row.name, &name)),
            Err(err) => Err(err.into()),
        }
    })
    .await
}

/// Whether container `c` is on docker's built-in network `builtin` (bridge: Wharf's default
/// network, whatever its name).
fn on_builtin(c: &wharf_engine::ContainerView, builtin: &str) -> bool {
    match builtin {
        "bridge" => !matches!(c.network.as_str(), "" | "none" | "host"),
        other => c.network == other,
    }
}

/// docker's answer to a container joining a network it is on.
fn already(container: &str, network: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("endpoint with name {container} already exists in network {network}"),
    )
}

/// `POST /networks/{id}/disconnect`: the container's pod leaves a network it joined with
/// `connect` (its first stays: its default route and published ports are there).
pub async fn disconnect(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let key = r.param("id").to_string();
    let b: Connect = r.json().await?;
    let _ = b.force;
    api.engine(move |e| {
        let c = e.container(&b.container)?;
        let name = match find(e, &key)? {
            Ok(n) => n.name,
            Err(builtin) => {
                let on = on_builtin(&c, builtin);
                return Err(if on {
                    ApiError::conflict(format!(
                        "container {} is on network {builtin} since it was made: Wharf keeps a pod on its first network",
                        c.row.name
                    ))
                } else {
                    ApiError::conflict(format!(
                        "container {} is not connected to network {builtin}",
                        c.row.name
                    ))
                });
            }
        };
        e.disconnect_network(&c.row.id, &name)?;
        Ok(http::empty(StatusCode::OK))
    })
    .await
}

fn volume_doc(v: &wharf_engine::named_volumes::Volume) -> Value {
    json!({
        "Name": v.name, "Driver": "local", "Mountpoint": v.mountpoint,
        "CreatedAt": v.created_at, "Labels": v.labels, "Scope": "local", "Options": {},
    })
}

/// `GET /volumes?filters=` (name, label, dangling).
pub async fn volume_list(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let filters = r.filters()?;
    let docs = api
        .engine(move |e| {
            let in_use = e.volumes_in_use()?;
            Ok(e.list_volumes()?
                .iter()
                .filter(|v| {
                    filters.iter().all(|(k, vals)| {
                        vals.iter().all(|f| match k.as_str() {
                            "name" => v.name.contains(f.as_str()),
                            "dangling" => (f == "true" || f == "1") != in_use.contains_key(&v.name),
                            "label" => match f.split_once('=') {
                                Some((lk, lv)) => v.labels.get(lk).is_some_and(|x| x == lv),
                                None => v.labels.contains_key(f),
                            },
                            _ => true,
                        })
                    })
                })
                .map(volume_doc)
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(http::json(&json!({"Volumes": docs, "Warnings": []})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct VolumeCreate {
    name: String,
    driver: String,
    driver_opts: Option<BTreeMap<String, String>>,
    labels: Option<BTreeMap<String, String>>,
}

/// `POST /volumes/create`.
pub async fn volume_create(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let b: VolumeCreate = r.json().await?;
    if !matches!(b.driver.as_str(), "" | "local") {
        return Err(ApiError::bad(format!(
            "volume driver {:?} is not supported: local only",
            b.driver
        )));
    }
    if b.driver_opts.as_ref().is_some_and(|o| !o.is_empty()) {
        return Err(ApiError::not_implemented(
            "volume driver options (DriverOpts) are not supported",
        ));
    }
    let v = api
        .engine(move |e| {
            Ok(e.create_volume(
                Some(b.name.as_str()).filter(|n| !n.is_empty()),
                b.labels.unwrap_or_default(),
                false,
            )?)
        })
        .await?;
    Ok(http::json_status(StatusCode::CREATED, &volume_doc(&v)))
}

/// `GET /volumes/{name}`.
pub async fn volume_inspect(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let v = api
        .engine(move |e| {
            e.volume(&name)
                .map_err(|_| ApiError::not_found(format!("get {name}: no such volume")))
        })
        .await?;
    Ok(http::json(&volume_doc(&v)))
}

/// `DELETE /volumes/{name}?force=`.
pub async fn volume_remove(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    api.engine(move |e| {
        e.volume(&name)
            .map_err(|_| ApiError::not_found(format!("get {name}: no such volume")))?;
        e.remove_volume(&name)?;
        Ok(http::empty(StatusCode::NO_CONTENT))
    })
    .await
}

/// `POST /volumes/prune?filters=` (`all=true`: named ones too).
pub async fn volume_prune(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let all = r
        .filters()?
        .get("all")
        .is_some_and(|v| v.iter().any(|a| a == "true" || a == "1"));
    let removed = api.engine(move |e| Ok(e.prune_volumes(all)?)).await?;
    Ok(http::json(&json!({
        "VolumesDeleted": removed.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "SpaceReclaimed": removed.iter().map(|(_, s)| s).sum::<u64>(),
    })))
}
