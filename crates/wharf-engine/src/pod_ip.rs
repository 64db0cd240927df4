//! The pod's IP address in a container's environment and command. A played manifest's
//! `status.podIP` exists only once the pod's network is up, so the plan leaves
//! [`POD_IP_PLACEHOLDER`] in the container's spec and the engine puts the address in at
//! each bundle: at creation, and again when the pod is restored with another address.

use std::borrow::Cow;
use std::net::UdpSocket;

use crate::db::PodRow;
use crate::model::{ContainerSpec, NetworkMode};

/// Stands for the pod's IP address in env values, entrypoint and command.
pub const POD_IP_PLACEHOLDER: &str = "{{wharf:pod-ip}}";

/// Whether `spec` refers to the pod's IP.
fn uses_pod_ip(spec: &ContainerSpec) -> bool {
    spec.env.iter().any(|(_, v)| v.contains(POD_IP_PLACEHOLDER))
        || spec
            .entrypoint
            .iter()
            .chain(&spec.command)
            .flatten()
            .any(|a| a.contains(POD_IP_PLACEHOLDER))
}

/// `spec` as its container is given it in `pod`: the pod's address in place of
/// [`POD_IP_PLACEHOLDER`]. The address is looked up, and the spec copied, only when the
/// spec refers to it (a host-network pod's costs a socket).
pub fn given<'a>(spec: &'a ContainerSpec, pod: &PodRow) -> Cow<'a, ContainerSpec> {
    if uses_pod_ip(spec) {
        Cow::Owned(with_pod_ip(spec, &pod_ip(pod)))
    } else {
        Cow::Borrowed(spec)
    }
}

/// `spec` with the pod's IP address `ip` in place of [`POD_IP_PLACEHOLDER`].
fn with_pod_ip(spec: &ContainerSpec, ip: &str) -> ContainerSpec {
    let mut out = spec.clone();
    let sub = |s: &mut String| {
        if s.contains(POD_IP_PLACEHOLDER) {
            *s = s.replace(POD_IP_PLACEHOLDER, ip);
        }
    };
    out.env.iter_mut().for_each(|(_, v)| sub(v));
    out.entrypoint.iter_mut().flatten().for_each(sub);
    out.command.iter_mut().flatten().for_each(sub);
    out
}

/// The address of `pod`: its first network address; with the host's network, the address
/// this host would use to reach the outside (kubelet's node IP); none without a network.
fn pod_ip(pod: &PodRow) -> String {
    match pod.sandbox.ips.first() {
        Some(ip) => ip.split('/').next().unwrap_or(ip).to_string(),
        None if pod.spec.network == NetworkMode::Host => host_address(),
        None => String::new(),
    }
}

/// Connecting a UDP socket sends nothing; without a route it is the loopback address.
fn host_address() -> String {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placeholder_becomes_the_address_in_env_entrypoint_and_command() {
        let spec = ContainerSpec {
            env: vec![
                ("POD_IP".into(), POD_IP_PLACEHOLDER.into()),
                ("OTHER".into(), "x".into()),
            ],
            entrypoint: Some(vec![format!("--listen={POD_IP_PLACEHOLDER}:9090")]),
            command: Some(vec!["plain".into()]),
            ..Default::default()
        };
        assert!(uses_pod_ip(&spec));
        let out = with_pod_ip(&spec, "10.88.0.7");
        assert!(!uses_pod_ip(&out));
        assert_eq!(out.env[0].1, "10.88.0.7");
        assert_eq!(out.env[1].1, "x");
        assert_eq!(out.entrypoint.unwrap()[0], "--listen=10.88.0.7:9090");
        assert_eq!(out.command.unwrap()[0], "plain");
    }
}
