//! Pod sandboxes: kubelet's PodSandboxConfig translated into the engine's pod spec (the
//! same one `wharf pod create` and `wharf play` produce), and the engine's pods shown as the
//! CRI shows sandboxes.
//!
//! What kubelet's fields mean here, as they mean to containerd:
//! - `linux.cgroup_parent` (kubelet's `/kubepods/<qos>/pod<uid>`, cgroupfs driver): the
//!   pod's cgroup is made below it; kubelet keeps that cgroup and its limits
//!   (`linux.resources` and `overhead` are kubelet's to apply there, and are not applied
//!   twice);
//! - namespace options: network NODE is the host's network; pid NODE the host's, POD one
//!   shared by the pod's containers, CONTAINER one each; ipc NODE the host's; user POD
//!   the pod's own user namespace with the maps kubelet chose (NODE: the host's);
//! - `dns_config`, `port_mappings` (host port 0: none), `hostname`, `sysctls`, labels and
//!   annotations (returned as given).

use std::collections::BTreeMap;
use std::time::Duration;

use tonic::Status;
use wharf_engine::model::{
    DnsConfig, IdRange, NetworkMode, PodSpec, PodState, PortMapping, UserNamespace,
};
use wharf_engine::{Engine, Error};

use crate::api::*;
use crate::listings::{Listed, Listings};
use crate::meta;
use crate::status::from_engine;

/// The names the default runtime handler is served under whatever the config says: the
/// default, and the names kubelet configs use for it.
pub const DEFAULT_HANDLERS: [&str; 3] = ["", "wharf", "runc"];

/// The engine's pod spec for a sandbox config, asking for runtime handler `handler`, which
/// must be a default name or one of `handlers` (`daemon.runtime-handlers`).
pub fn pod_spec(
    config: &PodSandboxConfig,
    handler: &str,
    handlers: &[String],
) -> Result<PodSpec, Status> {
    let m = config
        .metadata
        .as_ref()
        .filter(|m| !m.name.is_empty())
        .ok_or_else(|| Status::invalid_argument("sandbox config has no metadata name"))?;
    if !DEFAULT_HANDLERS.contains(&handler) && !handlers.iter().any(|h| h == handler) {
        return Err(Status::invalid_argument(format!(
            "runtime handler {handler:?} is not configured (Wharf serves the default handler \
             and the names in daemon.runtime-handlers)"
        )));
    }
    let mut labels: BTreeMap<String, String> = config
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(meta::NAME.into(), m.name.clone());
    labels.insert(meta::UID.into(), m.uid.clone());
    labels.insert(meta::NAMESPACE.into(), m.namespace.clone());
    labels.insert(meta::ATTEMPT.into(), m.attempt.to_string());
    if !config.log_directory.is_empty() {
        labels.insert(meta::LOG_DIRECTORY.into(), config.log_directory.clone());
    }
    if !handler.is_empty() {
        labels.insert(meta::RUNTIME_HANDLER.into(), handler.to_string());
    }
    let linux = config.linux.clone().unwrap_or_default();
    let ns = linux
        .security_context
        .as_ref()
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    let node = NamespaceMode::Node as i32;
    let host_network = ns.network == node;
    let ports = config
        .port_mappings
        .iter()
        .filter(|p| p.host_port > 0)
        .map(|p| port(p, &m.name))
        .collect::<Result<Vec<_>, _>>()?;
    let dns = config.dns_config.clone().unwrap_or_default();
    let userns = user_namespace(&ns, &m.name)?;
    let cgroup_parent = Some(linux.cgroup_parent.clone()).filter(|p| !p.is_empty());
    Ok(PodSpec {
        name: Some(meta::pod_name(m)),
        // None given: the node's, as containerd does.
        hostname: Some(if config.hostname.is_empty() {
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        } else {
            config.hostname.clone()
        }),
        network: if host_network {
            NetworkMode::Host
        } else {
            NetworkMode::Default
        },
        // Host networking has no ports to map: the ports are the host's.
        ports: if host_network { Vec::new() } else { ports },
        dns: DnsConfig {
            servers: dns.servers,
            searches: dns.searches,
            options: dns.options,
        },
        share_pid: ns.pid == NamespaceMode::Pod as i32,
        host_pid: ns.pid == node,
        host_ipc: ns.ipc == node,
        labels,
        namespace: Some(m.namespace.clone()).filter(|n| !n.is_empty()),
        cgroup_parent,
        annotations: config
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        sysctls: linux.sysctls.into_iter().collect(),
        userns,
        ..Default::default()
    })
}

/// The pod's user namespace: mode POD with kubelet's maps, NODE (or none) the host's.
fn user_namespace(ns: &NamespaceOption, pod: &str) -> Result<Option<UserNamespace>, Status> {
    let Some(u) = &ns.userns_options else {
        return Ok(None);
    };
    let map = |ids: &[IdMapping]| {
        ids.iter()
            .map(|m| IdRange {
                container_id: m.container_id,
                host_id: m.host_id,
                size: m.length,
            })
            .collect()
    };
    match NamespaceMode::try_from(u.mode) {
        Ok(NamespaceMode::Node) => Ok(None),
        Ok(NamespaceMode::Pod) => Ok(Some(UserNamespace {
            uid_map: map(&u.uids),
            gid_map: map(&u.gids),
        })),
        _ => Err(Status::invalid_argument(format!(
            "pod {pod}: user namespace mode {} is not supported (POD or NODE)",
            u.mode
        ))),
    }
}

/// A pod's user namespace as the CRI reports it.
fn userns_options(spec: &PodSpec) -> Option<crate::api::UserNamespace> {
    let map = |ids: &[IdRange]| {
        ids.iter()
            .map(|r| IdMapping {
                host_id: r.host_id,
                container_id: r.container_id,
                length: r.size,
            })
            .collect()
    };
    Some(match &spec.userns {
        Some(u) => crate::api::UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: map(&u.uid_map),
            gids: map(&u.gid_map),
        },
        None => crate::api::UserNamespace {
            mode: NamespaceMode::Node as i32,
            ..Default::default()
        },
    })
}

fn port(p: &crate::api::PortMapping, pod: &str) -> Result<PortMapping, Status> {
    let range = |n: i32, what: &str| {
        u16::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            Status::invalid_argument(format!("pod {pod}: {what} {n} is not a valid port"))
        })
    };
    Ok(PortMapping {
        host_port: range(p.host_port, "host port")?,
        container_port: range(p.container_port, "container port")?,
        protocol: match Protocol::try_from(p.protocol) {
            Ok(Protocol::Udp) => "udp",
            Ok(Protocol::Sctp) => "sctp",
            _ => "tcp",
        }
        .to_string(),
        host_ip: Some(p.host_ip.clone()).filter(|ip| !ip.is_empty()),
    })
}

/// RunPodSandbox.
pub fn run(
    e: &Engine,
    req: RunPodSandboxRequest,
    handlers: &[String],
) -> Result<RunPodSandboxResponse, Status> {
    let config = req
        .config
        .ok_or_else(|| Status::invalid_argument("RunPodSandbox without a sandbox config"))?;
    let spec = pod_spec(&config, &req.runtime_handler, handlers)?;
    let pod = e.create_pod(&spec).map_err(from_engine)?;
    Ok(RunPodSandboxResponse {
        pod_sandbox_id: pod.id,
    })
}

/// StopPodSandbox: containers still running are killed (kubelet stopped each with its
/// grace period before, so none is given here, as containerd gives none), its network
/// goes; stopping an unknown or stopped one is fine.
pub fn stop(e: &Engine, id: &str) -> Result<(), Status> {
    match e.stop_sandbox(id, Some(Duration::ZERO)) {
        Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
        Err(err) => Err(from_engine(err)),
    }
}

/// RemovePodSandbox: with its containers, running ones killed; an unknown one is fine.
pub fn remove(e: &Engine, id: &str) -> Result<(), Status> {
    match e.remove_pod_with_containers(id, true) {
        Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
        Err(err) => Err(from_engine(err)),
    }
}

fn state(s: PodState) -> i32 {
    if s.ready() {
        PodSandboxState::SandboxReady as i32
    } else {
        PodSandboxState::SandboxNotready as i32
    }
}

fn namespace_options(spec: &PodSpec) -> NamespaceOption {
    let mode = |host: bool, shared: bool| {
        if host {
            NamespaceMode::Node
        } else if shared {
            NamespaceMode::Pod
        } else {
            NamespaceMode::Container
        }
    } as i32;
    NamespaceOption {
        network: mode(spec.network == NetworkMode::Host, true),
        pid: mode(spec.host_pid, spec.share_pid),
        ipc: mode(spec.host_ipc, true),
        userns_options: userns_options(spec),
        ..Default::default()
    }
}

/// A pod as ListPodSandbox shows it.
pub fn sandbox(pod: &wharf_engine::db::PodRow) -> PodSandbox {
    PodSandbox {
        id: pod.id.clone(),
        metadata: Some(meta::pod_metadata(&pod.spec.labels)),
        state: state(pod.state),
        created_at: meta::nanos(Some(&pod.created_at)),
        labels: meta::user_labels(&pod.spec.labels),
        annotations: meta::to_map(&pod.spec.annotations),
        runtime_handler: handler(pod),
    }
}

fn handler(pod: &wharf_engine::db::PodRow) -> String {
    pod.spec
        .labels
        .get(meta::RUNTIME_HANDLER)
        .cloned()
        .unwrap_or_default()
}

/// A pod's status as PodSandboxStatus shows it.
pub fn sandbox_status(pod: &wharf_engine::db::PodRow) -> PodSandboxStatus {
    let ips = &pod.sandbox.ips;
    PodSandboxStatus {
        id: pod.id.clone(),
        metadata: Some(meta::pod_metadata(&pod.spec.labels)),
        state: state(pod.state),
        created_at: meta::nanos(Some(&pod.created_at)),
        network: Some(PodSandboxNetworkStatus {
            ip: ips.first().cloned().unwrap_or_default(),
            additional_ips: ips
                .iter()
                .skip(1)
                .map(|ip| PodIp { ip: ip.clone() })
                .collect(),
        }),
        linux: Some(LinuxPodSandboxStatus {
            namespaces: Some(Namespace {
                options: Some(namespace_options(&pod.spec)),
            }),
        }),
        labels: meta::user_labels(&pod.spec.labels),
        annotations: meta::to_map(&pod.spec.annotations),
        runtime_handler: handler(pod),
    }
}

/// PodSandboxStatus, with containerd's kind of verbose info: the sandbox's namespaces,
/// cgroup, shim and network as the engine recorded them.
pub fn status(
    e: &Engine,
    req: PodSandboxStatusRequest,
) -> Result<PodSandboxStatusResponse, Status> {
    let pod = e.pod(&req.pod_sandbox_id).map_err(from_engine)?.row;
    let mut info = std::collections::HashMap::new();
    if req.verbose {
        let sb = &pod.sandbox;
        info.insert(
            "info".to_string(),
            serde_json::json!({
                "name": pod.name,
                "state": pod.state.as_str(),
                "pid": sb.pause_pid,
                "cgroup": sb.cgroup,
                "netNamespace": sb.netns,
                "ipcNamespace": sb.ipcns,
                "utsNamespace": sb.utsns,
                "pidNamespace": sb.pidns,
                "network": sb.network,
                "ips": sb.ips,
                "shimDir": sb.shim_dir,
                "etcDir": sb.etc_dir,
                "runtimeHandler": handler(&pod),
                "config": pod.spec,
            })
            .to_string(),
        );
    }
    Ok(PodSandboxStatusResponse {
        status: Some(sandbox_status(&pod)),
        info,
        containers_statuses: Vec::new(),
        timestamp: meta::now_nanos(),
    })
}

/// What `take` makes of each pod a CRI filter selects (id or prefix, state, labels), from
/// the kept listing; the CLI's pods are left out.
fn select<T>(
    e: &Engine,
    listings: &Listings,
    f: &PodSandboxFilter,
    take: impl Fn(&Listed<wharf_engine::db::PodRow, PodSandbox>) -> T,
) -> Result<Vec<T>, Status> {
    Ok(filtered(&listings.pods(e)?, f, take))
}

fn filtered<T>(
    pods: &[Listed<wharf_engine::db::PodRow, PodSandbox>],
    f: &PodSandboxFilter,
    take: impl Fn(&Listed<wharf_engine::db::PodRow, PodSandbox>) -> T,
) -> Vec<T> {
    pods.iter()
        .filter(|p| {
            p.cri.id.starts_with(&f.id)
                && f.state.as_ref().is_none_or(|st| st.state == p.cri.state)
                && meta::selected(&p.cri.labels, &f.label_selector)
        })
        .map(take)
        .collect()
}

/// The rows of the pods a CRI filter selects.
pub fn rows(
    e: &Engine,
    listings: &Listings,
    f: &PodSandboxFilter,
) -> Result<Vec<wharf_engine::db::PodRow>, Status> {
    select(e, listings, f, |p| p.row.clone())
}

/// ListPodSandbox, through the engine (which lists again where the kept listing is stale).
pub fn list(
    e: &Engine,
    listings: &Listings,
    req: ListPodSandboxRequest,
) -> Result<ListPodSandboxResponse, Status> {
    Ok(answer(&listings.pods(e)?, req))
}

/// ListPodSandbox's answer from the listing of every CRI pod.
pub fn answer(
    pods: &[Listed<wharf_engine::db::PodRow, PodSandbox>],
    req: ListPodSandboxRequest,
) -> ListPodSandboxResponse {
    let f = req.filter.unwrap_or_default();
    ListPodSandboxResponse {
        items: filtered(pods, &f, |p| p.cri.clone()),
    }
}
