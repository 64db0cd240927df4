//! User bridge networks (`network create`), and name resolution between the pods on one.
//!
//! A user network is an instance of the built-in bridge network with a bridge, subnet,
//! nftables table and lease directory of its own (`wharf-<id>`, 10.89.N.0/24 unless
//! asked otherwise): no external tool is involved, and pods on different networks do not
//! share a bridge. Its record is `<root>/networks/NAME.json`.
//!
//! Names: every pod on a user network finds the others by pod name, by the names of their
//! containers and by their aliases, through its `/etc/hosts`. The engine rewrites the
//! hosts files of a network's pods (in place, so the containers' bind mounts see it) when
//! a pod joins or leaves it or a container is added to or removed from one. Tools that ask
//! a DNS server directly (`nslookup`, an nginx `resolver`, Go and musl programs) get the
//! same names from the pod's DNS responder at 127.0.0.11, docker's embedded DNS: a few
//! sockets in the pod's own shim, which answers from that hosts file and forwards the rest
//! upstream (`wharf_shim::daemon::dns`). Nothing else has to run (no per-network daemon, no
//! new process), names keep resolving while the engine is down, and a newcomer is found
//! at once, by the resolver and by every libc that reads the file again.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;

use crate::engine::Engine;
use crate::error::{Context, Error, Result};
use crate::model::{NetworkMode, PodState};
use crate::network_records::{RESERVED, record_path};
pub use crate::network_records::{UserNetwork, builtin_config, load};
use crate::validate::Rule;

/// One pod's line in its network's part of a hosts file: pod id, address, names.
type PeerEntry = (String, IpAddr, Vec<String>);

/// The marker after which a pod's hosts file lists its networks' other pods ("# pods on
/// network a", "# pods on networks a, b").
const HOSTS_MARKER: &str = "# pods on network";

impl Engine {
    /// Make a user network; its subnet is the first free 10.89.N.0/24 unless given.
    pub fn create_network(
        &self,
        name: &str,
        subnet: Option<&str>,
        gateway: Option<&str>,
        labels: BTreeMap<String, String>,
    ) -> Result<UserNetwork> {
        crate::validate::check("network name", name, crate::validate::Rule::NetworkName)?;
        if RESERVED.contains(&name) {
            return Err(Error::Invalid(format!(
                "invalid network name {name:?}: not one of {}",
                RESERVED.join(", ")
            )));
        }
        crate::validate::check_all("label key", labels.keys(), crate::validate::Rule::Key)?;
        let existing = self.list_networks()?;
        if let Some(n) = existing.iter().find(|n| n.name == name) {
            return Err(Error::NameInUse {
                kind: "network",
                name: name.into(),
                id: n.id.clone(),
            });
        }
        let taken: Vec<wharf_net::IpNet> = existing
            .iter()
            .filter_map(|n| n.subnet.parse().ok())
            .collect();
        let subnet: wharf_net::IpNet = match subnet {
            Some(s) => s.parse().map_err(|_| {
                Error::Invalid(format!(
                    "invalid --subnet {s:?}: use CIDR like 10.90.0.0/24"
                ))
            })?,
            None => (0..=255u8)
                .map(|n| {
                    format!("10.89.{n}.0/24")
                        .parse::<wharf_net::IpNet>()
                        .expect("valid")
                })
                .find(|c| !taken.iter().any(|t| t.overlaps(c)))
                .ok_or_else(|| {
                    Error::Other("no free subnet in 10.89.0.0/16: give --subnet".into())
                })?,
        };
        if subnet.is_ipv6() || subnet.prefix > 30 {
            return Err(Error::Invalid(format!(
                "invalid --subnet {subnet}: an IPv4 subnet of /30 or larger"
            )));
        }
        let subnet = subnet.trunc();
        if let Some(t) = taken.iter().find(|t| t.overlaps(&subnet)) {
            return Err(Error::Exists(format!(
                "subnet {subnet} overlaps network {}'s {t}",
                existing
                    .iter()
                    .find(|n| n.subnet == t.to_string())
                    .map_or("?", |n| n.name.as_str())
            )));
        }
        let gateway: IpAddr = match gateway {
            Some(g) => g
                .parse()
                .ok()
                .filter(|g: &IpAddr| subnet.contains(g))
                .ok_or_else(|| {
                    Error::Invalid(format!("invalid --gateway {g:?}: an address in {subnet}"))
                })?,
            None => subnet
                .nth(1)
                .ok_or_else(|| Error::Invalid(format!("subnet {subnet} is too small")))?,
        };
        let id = crate::paths::new_id();
        let n = UserNetwork {
            name: name.into(),
            id: id.clone(),
            created: wharf_sys::time::now_rfc3339(),
            subnet: subnet.to_string(),
            gateway: gateway.to_string(),
            bridge: format!("wharf-{}", &id[..8]),
            labels,
        };
        let path = record_path(&self.paths, name);
        std::fs::create_dir_all(path.parent().expect("has a parent"))
            .ctx(|| "creating the networks directory".into())?;
        // create_new: a concurrent create of the same name fails here.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    Error::Exists(format!("network {name} was just made by another command"))
                }
                _ => Error::Os {
                    what: format!("creating network {name}"),
                    err: e,
                },
            })?;
        if let Err(e) = f.write_all(&serde_json::to_vec_pretty(&n).expect("json")) {
            let _ = std::fs::remove_file(&path);
            return Err(Error::Os {
                what: format!("creating network {name}"),
                err: e,
            });
        }
        Ok(n)
    }

    /// User network `name`.
    pub fn network_info(&self, name: &str) -> Result<UserNetwork> {
        load(&self.paths, name)?.ok_or_else(|| Error::NotFound {
            kind: "network",
            name: name.into(),
        })
    }

    /// Every user network, by name.
    pub fn list_networks(&self) -> Result<Vec<UserNetwork>> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.paths.root.join("networks")) else {
            return Ok(out);
        };
        for e in rd.flatten() {
            let f = e.file_name();
            if let Some(name) = f.to_str().and_then(|f| f.strip_suffix(".json"))
                && let Ok(Some(n)) = load(&self.paths, name)
            {
                out.push(n);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The pods (names) on network `name`.
    pub fn network_pods(&self, name: &str) -> Result<Vec<crate::db::PodRow>> {
        Ok(self
            .db
            .pods()?
            .into_iter()
            .filter(|p| {
                matches!(&p.spec.network, NetworkMode::Named(n) if n == name)
                    || p.spec.extra_networks.iter().any(|x| x.name == name)
            })
            .collect())
    }

    /// Remove a user network: its bridge, firewall table, leases and record. Refused while
    /// a pod is on it.
    pub fn remove_network(&self, name: &str) -> Result<()> {
        let n = self.network_info(name)?;
        let pods = self.network_pods(name)?;
        if !pods.is_empty() {
            let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            return Err(Error::Precondition(format!(
                "network {name} has active endpoints: {}",
                names.join(", ")
            )));
        }
        let cfg = builtin_config(&self.paths, &n, self.opts.net.host_netns.clone())?;
        let state = cfg.state_dir.clone();
        wharf_net::BuiltinNetwork::new(cfg)?.remove()?;
        let _ = std::fs::remove_dir_all(&state);
        std::fs::remove_file(record_path(&self.paths, name))
            .ctx(|| format!("removing network {name}"))
    }

    /// Remove the user networks no pod is on; returns their names.
    pub fn prune_networks(&self) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for n in self.list_networks()? {
            if self.network_pods(&n.name)?.is_empty() && self.remove_network(&n.name).is_ok() {
                removed.push(n.name);
            }
        }
        Ok(removed)
    }

    /// Rewrite the hosts files of the pods on user network `name`: each lists the pods of
    /// every user network it is on (pod name, aliases there, container names) after its
    /// own lines.
    pub(crate) fn refresh_network_names(&self, name: &str) -> Result<()> {
        if load(&self.paths, name)?.is_none() {
            return Ok(());
        }
        // One lock for all networks: a pod on two networks has one file, written from both.
        let _lock = self.lock_names()?;
        let mut peers = BTreeMap::new();
        let mut first = None;
        for p in self.network_pods(name)? {
            if matches!(p.state, PodState::Creating | PodState::Dead) {
                continue;
            }
            if let Err(e) = self.write_names(&p, &mut peers) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Rewrite one pod's list of the pods on its user networks (after it left one).
    pub(crate) fn refresh_pod_names(&self, pod: &crate::db::PodRow) -> Result<()> {
        let _lock = self.lock_names()?;
        self.write_names(pod, &mut BTreeMap::new())
    }

    fn lock_names(&self) -> Result<wharf_sys::lock::FileLock> {
        let path = self.paths.run.join("networks/names.lock");
        wharf_sys::lock::FileLock::exclusive(&path)
            .ctx(|| format!("locking the networks' names ({})", path.display()))
    }

    /// The pods on user network `name` as its hosts lines say them: (pod id, its IPv4
    /// address there, its names there).
    fn network_entries(&self, name: &str) -> Result<Vec<PeerEntry>> {
        let mut entries = Vec::new();
        for p in self.network_pods(name)? {
            if matches!(p.state, PodState::Creating | PodState::Dead) {
                continue;
            }
            let Some(ip) = p
                .sandbox
                .ips_on(name)
                .iter()
                .find_map(|i| i.parse::<IpAddr>().ok().filter(IpAddr::is_ipv4))
            else {
                continue;
            };
            let aliases = if p.spec.network == NetworkMode::Named(name.to_string()) {
                &p.spec.network_aliases
            } else {
                p.spec
                    .extra_networks
                    .iter()
                    .find(|x| x.name == name)
                    .map_or(&p.spec.network_aliases, |x| &x.aliases)
            };
            // Only names that pass the rule of hosts names: a record written before the rule
            // existed cannot put a line into its neighbours' files.
            let mut names = Vec::new();
            let containers = self.db.containers(Some(&p.id))?;
            for n in std::iter::once(&p.name)
                .chain(aliases)
                .chain(containers.iter().map(|c| &c.name))
            {
                if Rule::HostAlias.allows(n) && !names.contains(n) {
                    names.push(n.clone());
                }
            }
            if !names.is_empty() {
                entries.push((p.id.clone(), ip, names));
            }
        }
        Ok(entries)
    }

    /// Write pod `p`'s hosts file: its own lines, then the pods of each of its user
    /// networks (`peers` keeps each network's entries across the pods of one refresh).
    fn write_names(
        &self,
        p: &crate::db::PodRow,
        peers: &mut BTreeMap<String, Vec<PeerEntry>>,
    ) -> Result<()> {
        let Some(etc) = &p.sandbox.etc_dir else {
            return Ok(());
        };
        let mut networks = Vec::new();
        for n in p.sandbox.networks() {
            if load(&self.paths, n)?.is_some() {
                networks.push(n.to_string());
            }
        }
        let hosts = Path::new(etc).join("hosts");
        // The pod's containers write this file: read the bounded, safe way.
        let Ok(bytes) = wharf_sys::contained::read_file(&hosts, crate::sandbox::ETC_SIZE) else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut out = match text.find(HOSTS_MARKER) {
            Some(i) => text[..i].to_string(),
            None => text.to_string(),
        };
        match networks.len() {
            0 => {}
            1 => out.push_str(&format!("{HOSTS_MARKER} {}\n", networks[0])),
            _ => out.push_str(&format!("{HOSTS_MARKER}s {}\n", networks.join(", "))),
        }
        for n in &networks {
            if !peers.contains_key(n) {
                peers.insert(n.clone(), self.network_entries(n)?);
            }
            for (id, ip, names) in &peers[n] {
                if *id != p.id {
                    out.push_str(&wharf_net::dns::hosts_line(*ip, names)?);
                }
            }
        }
        // In place: the containers' /etc/hosts is a bind mount of this very file. A pod
        // whose containers filled their name files' tmpfs keeps what it wrote (its own
        // doing); the other pods are still written.
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&hosts)
            .and_then(|mut f| f.write_all(out.as_bytes()))
            .ctx(|| format!("writing {}", hosts.display()))
    }

    /// [`Engine::refresh_network_names`] for each user network of a pod's `spec` (best
    /// effort: a failure to update a name never fails what changed it).
    pub(crate) fn refresh_names_of_networks(&self, spec: &crate::model::PodSpec) {
        if let NetworkMode::Named(n) = &spec.network {
            let _ = self.refresh_network_names(n);
        }
        for x in &spec.extra_networks {
            let _ = self.refresh_network_names(&x.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network_records::valid;

    #[test]
    fn names_and_reserved_words() {
        assert!(valid("backend") && valid("my_net.1"));
        assert!(!valid("") && !valid("-x") && !valid("a/b"));
        assert!(RESERVED.contains(&"bridge"));
    }
}
