//! A pod on more than one user network: docker's `network connect` and `disconnect`, and
//! create requests that name several networks (`docker run --network a --network b`,
//! compose services with several networks).
//!
//! A pod's first network is the one it is made with (`PodSpec::network`, interface eth0,
//! its default route, its published ports). Every further one is a user network joined
//! through another interface (eth1, eth2...) that reaches only that network's subnet, as
//! docker's non-primary endpoints do. What the pod asked for is kept in its spec
//! (`extra_networks`), so `system restore` joins them again; what was set up is in its
//! sandbox (`Sandbox::extra_networks`), so teardown leaves them all. Names: the pod's
//! hosts file lists the pods of every network it is on (see [`crate::user_networks`]).

use std::path::Path;

use crate::db::{Attachment, PodRow, Sandbox};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::{ExtraNetwork, NetworkMode, PodState};
use crate::sandbox::{NetOptions, Setup};
use crate::validate::{Rule, check, check_all};

/// The user network `name`, ready to attach pods to; `Invalid` if `name` is no user
/// network (docker's `bridge`, `host`, `none` or a CNI network cannot be a second one).
fn user_network(
    paths: &crate::paths::Paths,
    net: &NetOptions,
    name: &str,
) -> Result<wharf_net::Network> {
    match crate::network_records::load(paths, name)? {
        Some(u) => {
            let cfg = crate::network_records::builtin_config(paths, &u, net.host_netns.clone())?;
            Ok(wharf_net::Network::Builtin(wharf_net::BuiltinNetwork::new(
                cfg,
            )?))
        }
        None => Err(Error::NotFound {
            kind: "network",
            name: name.to_string(),
        }),
    }
}

/// The interface a pod's next network gets: one past the highest in use (eth0 is its
/// first network's), so one left and joined again does not collide.
fn next_ifname(sb: &Sandbox) -> String {
    let last = sb
        .extra_networks
        .iter()
        .filter_map(|a| a.ifname.strip_prefix("eth")?.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    format!("eth{}", last + 1)
}

/// Join pod `id` (its network namespace at `netns`) to user network `name` through
/// interface `ifname`, without a default route.
pub(crate) fn attach(
    s: &Setup<'_>,
    id: &str,
    netns: &Path,
    name: &str,
    ifname: &str,
    hostname: &str,
) -> Result<Attachment> {
    let network = user_network(s.paths, s.net, name)?;
    let opts = wharf_net::AttachOptions {
        ifname: ifname.to_string(),
        hostname: Some(hostname.to_string()),
        default_route: false,
        ..Default::default()
    };
    let att = network.attach(id, netns, &opts)?;
    Ok(Attachment {
        network: name.to_string(),
        ifname: ifname.to_string(),
        ips: att.ips.iter().map(|i| i.address.addr.to_string()).collect(),
    })
}

/// Take pod `id` off user network `name` (nothing to do when the network is gone).
pub(crate) fn detach(
    paths: &crate::paths::Paths,
    net: &NetOptions,
    id: &str,
    netns: Option<&Path>,
    name: &str,
) -> Result<()> {
    match user_network(paths, net, name) {
        Ok(network) => Ok(network.detach(id, netns)?),
        Err(Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Join a new pod to the further networks of its spec, after its first (sandbox creation
/// and restore); each joined one is recorded in `sb` as it comes, so a failure part way
/// leaves to the caller's teardown exactly what was made.
pub(crate) fn attach_all(
    s: &Setup<'_>,
    id: &str,
    extra: &[ExtraNetwork],
    hostname: &str,
    sb: &mut Sandbox,
) -> Result<()> {
    if extra.is_empty() {
        return Ok(());
    }
    let Some(netns) = sb.netns.clone() else {
        return Err(Error::Invalid(
            "a pod on the host's network cannot join other networks".into(),
        ));
    };
    for x in extra {
        let ifname = next_ifname(sb);
        let att = attach(s, id, Path::new(&netns), &x.name, &ifname, hostname)?;
        sb.extra_networks.push(att);
    }
    Ok(())
}

impl Engine {
    /// Join container `key`'s pod to user network `network`, answering there to `aliases`
    /// too, while it lives (docker's `network connect`). Its pod's other containers join
    /// with it: they share its network namespace.
    pub fn connect_network(&self, key: &str, network: &str, aliases: &[String]) -> Result<()> {
        check_all("network alias", aliases, Rule::HostAlias)?;
        check("network name", network, Rule::NetworkName)?;
        let row = self.db.find_container(key)?;
        let (_lock, mut pod) = self.lock_and_read(&row.pod_id, || self.db.find_pod(&row.pod_id))?;
        // The network exists (404 before anything else).
        let record =
            crate::network_records::load(&self.paths, network)?.ok_or_else(|| Error::NotFound {
                kind: "network",
                name: network.to_string(),
            })?;
        if pod.sandbox.networks().any(|n| n == network) {
            return Err(Error::Exists(format!(
                "endpoint with name {} already exists in network {network}",
                row.name
            )));
        }
        let netns = match (&pod.spec.network, &pod.sandbox.netns) {
            (NetworkMode::Host, _) | (_, None) => {
                return Err(Error::Invalid(format!(
                    "container {} uses the host's network: it cannot join network {network}",
                    row.name
                )));
            }
            (_, Some(ns)) => ns.clone(),
        };
        if !matches!(pod.state, PodState::Created | PodState::Running) {
            return Err(Error::Precondition(format!(
                "container {}: its pod is {}; it joins networks while it is up",
                row.name,
                pod.state.as_str()
            )));
        }
        let hostname = crate::sandbox::pod_hostname(&pod.spec, &pod.name).to_string();
        let att = attach(
            &self.setup(),
            &pod.id,
            Path::new(&netns),
            network,
            &next_ifname(&pod.sandbox),
            &hostname,
        )?;
        pod.spec.extra_networks.push(ExtraNetwork {
            name: network.to_string(),
            aliases: aliases.to_vec(),
        });
        pod.sandbox.extra_networks.push(att);
        if let Err(e) = self.save_networks(&pod) {
            let _ = detach(
                &self.paths,
                &self.opts.net,
                &pod.id,
                Some(Path::new(&netns)),
                network,
            );
            return Err(e);
        }
        let _ = self.db.event(
            "connect",
            "network",
            &record.id,
            network,
            serde_json::json!({"container": row.id, "type": "bridge"}),
        );
        let _ = self.refresh_network_names(network);
        Ok(())
    }

    /// Take container `key`'s pod off user network `network` (docker's `network
    /// disconnect`). A pod's first network stays: its default route and published ports
    /// are there.
    pub fn disconnect_network(&self, key: &str, network: &str) -> Result<()> {
        let row = self.db.find_container(key)?;
        let (_lock, mut pod) = self.lock_and_read(&row.pod_id, || self.db.find_pod(&row.pod_id))?;
        if pod.sandbox.network == network && !network.is_empty() {
            return Err(Error::Precondition(format!(
                "container {} joined network {network} when it was made: Wharf keeps a pod on its first network (its default route and published ports are there)",
                row.name
            )));
        }
        let Some(i) = pod
            .sandbox
            .extra_networks
            .iter()
            .position(|a| a.network == network)
        else {
            return Err(Error::Precondition(format!(
                "container {} is not connected to network {network}",
                row.name
            )));
        };
        let network_id = crate::network_records::load(&self.paths, network)?
            .map(|r| r.id)
            .unwrap_or_default();
        detach(
            &self.paths,
            &self.opts.net,
            &pod.id,
            pod.sandbox.netns.as_deref().map(Path::new),
            network,
        )?;
        pod.sandbox.extra_networks.remove(i);
        pod.spec.extra_networks.retain(|x| x.name != network);
        self.save_networks(&pod)?;
        let _ = self.db.event(
            "disconnect",
            "network",
            &network_id,
            network,
            serde_json::json!({"container": row.id, "type": "bridge"}),
        );
        // The network's pods forget it; it forgets the network's pods.
        let _ = self.refresh_network_names(network);
        let _ = self.refresh_pod_names(&pod);
        Ok(())
    }

    /// Keep a pod's networks (spec and sandbox) in the store and its ledger file.
    fn save_networks(&self, pod: &PodRow) -> Result<()> {
        self.db.update_pod_spec(&pod.id, &pod.spec, &pod.sandbox)?;
        crate::ledger::save_pod(&self.paths, pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_count_past_the_highest_in_use() {
        let mut sb = Sandbox::default();
        assert_eq!(next_ifname(&sb), "eth1");
        sb.extra_networks.push(Attachment {
            network: "a".into(),
            ifname: "eth1".into(),
            ips: vec![],
        });
        sb.extra_networks.push(Attachment {
            network: "b".into(),
            ifname: "eth3".into(),
            ips: vec![],
        });
        assert_eq!(next_ifname(&sb), "eth4");
    }
}
