//! Services on one host: there is no cluster network or service proxy, but a NodePort (or
//! LoadBalancer) Service's node ports are what a user reaches from outside the node, so
//! each becomes a host port of the pod its selector picks (the first one, in manifest
//! order: a host port has one owner). Other Service types are warned about and skipped.

use wharf_engine::error::{Error, Result};
use wharf_engine::model::PortMapping;

use crate::api;
use crate::document::ParsedPod;
use crate::manifest::{Manifest, NodePortService};

/// Does `svc` pick pod `pp` (its namespace, every selector label)?
fn picks(svc: &NodePortService, pp: &ParsedPod, namespace: &str) -> bool {
    svc.namespace.as_deref().unwrap_or("default") == namespace
        && svc
            .selector
            .iter()
            .all(|(k, v)| pp.pod.metadata.labels.get(k) == Some(v))
}

/// Add the node ports of the Services that pick pod `pp` to `ports`. `shared`: the pod is
/// one of several replicas, which cannot all own a host port.
pub(crate) fn publish(
    m: &Manifest,
    pp: &ParsedPod,
    namespace: &str,
    host_network: bool,
    shared: bool,
    ports: &mut Vec<PortMapping>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    for svc in m.services.iter().filter(|s| picks(s, pp, namespace)) {
        let w = &svc.where_;
        if host_network {
            warnings.push(format!(
                "{w}: pod {} is on the host's network: its ports are the host's already",
                pp.name
            ));
            continue;
        }
        if shared {
            warnings.push(format!(
                "{w}: its node ports are not published: the pods it selects are replicas, and a host port has one owner"
            ));
            continue;
        }
        if let Some(first) = m
            .pods
            .iter()
            .take_while(|q| q.name != pp.name)
            .find(|q| picks(svc, q, namespace))
        {
            warnings.push(format!(
                "{w}: its node ports are published for pod {} only (a host port has one owner), not for {}",
                first.name, pp.name
            ));
            continue;
        }
        for (i, p) in svc.ports.iter().enumerate() {
            let path = format!("{w}: spec.ports[{i}]");
            let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
                "TCP" => "tcp",
                "UDP" => "udp",
                other => {
                    return Err(Error::Invalid(format!(
                        "{path}.protocol {other:?} is not supported (TCP or UDP)"
                    )));
                }
            };
            let target = target_port(pp, p, &path)?;
            let host_port = match p.node_port {
                None | Some(0) => 0,
                Some(n) => u16::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::Invalid(format!("{path}.nodePort {n} is not a port (1-65535)"))
                })?,
            };
            if ports
                .iter()
                .any(|q| host_port != 0 && q.host_port == host_port && q.protocol == protocol)
            {
                warnings.push(format!(
                    "{path}: node port {host_port}/{protocol} is a hostPort of the pod already"
                ));
                continue;
            }
            warnings.push(format!(
                "{path}: node port {}/{protocol} is published on this host, to pod {} port {target}",
                if host_port == 0 {
                    "(picked by the engine: see wharf port)".to_string()
                } else {
                    host_port.to_string()
                },
                pp.name
            ));
            ports.push(PortMapping {
                host_port,
                container_port: target,
                protocol: protocol.into(),
                host_ip: None,
            });
        }
    }
    Ok(())
}

/// A Service port's target: its targetPort (a number, or the name of a container port of
/// the pod), else its port.
fn target_port(pp: &ParsedPod, p: &api::ServicePort, path: &str) -> Result<u16> {
    let n = match &p.target_port {
        None => p.port,
        Some(api::IntOrString::Int(n)) => *n,
        Some(api::IntOrString::String(name)) => match name.parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                let found = pp
                    .pod
                    .spec
                    .containers
                    .iter()
                    .flat_map(|c| &c.ports)
                    .find(|cp| cp.name.as_deref() == Some(name.as_str()));
                match found {
                    Some(cp) => i64::from(cp.container_port),
                    None => {
                        return Err(Error::Invalid(format!(
                            "{path}.targetPort: pod {} has no port named {name:?}",
                            pp.name
                        )));
                    }
                }
            }
        },
    };
    u16::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| Error::Invalid(format!("{path}: {n} is not a port (1-65535)")))
}
