//! The built-in default network, used when no CNI configuration exists: a Linux bridge
//! (default `wharf0`) in the host namespace, one veth pair per pod with the pod end created
//! directly inside the pod's namespace as `eth0`, addresses leased from a subnet (default
//! 10.88.0.0/16, optionally an IPv6 subnet too) with leases on disk, a default route via
//! the bridge, and nftables rules in Wharf's own table for masquerade, port mappings and
//! hairpin. Everything is done in-process over netlink (and libnftables when present); no
//! helper program runs.
//!
//! Every operation holds the network's lock file, so concurrent pods (also from other
//! processes: the CLI and the daemon share the state) never race.
//!
//! Failure handling: a pod's record is written (phase `attaching`) before anything is
//! created, every later step is undone by the same idempotent teardown that `detach`
//! runs, and [`BuiltinNetwork::recover`] finishes that teardown for pods a crash left
//! half-attached.

mod firewall;
mod ipam;
mod record;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use crate::ipnet::IpNet;
use crate::netlink::{Netlink, VethSpec};
use crate::netns::{self, NsHandle};
use crate::nft;
use crate::sys::FileLock;
use crate::types::{
    AttachOptions, Attachment, Interface, IpConfig, Protocol, RouteConfig, format_mac, parse_mac,
};

pub use ipam::Ipam;
pub use record::{Phase, PodRecord};

/// Default network name.
pub const DEFAULT_NAME: &str = "wharf";
/// Default bridge name.
pub const DEFAULT_BRIDGE: &str = "wharf0";
/// Default IPv4 subnet.
pub const DEFAULT_SUBNET: &str = "10.88.0.0/16";

/// Configuration of a built-in network.
#[derive(Debug, Clone)]
pub struct BuiltinConfig {
    /// Network name (reported in attachments, part of veth aliases).
    pub name: String,
    /// Bridge interface name.
    pub bridge: String,
    /// IPv4 subnet.
    pub subnet: IpNet,
    /// IPv4 gateway (the bridge's address); default: the subnet's first address.
    pub gateway: Option<IpAddr>,
    /// IPv6 subnet for dual-stack pods (None: IPv4 only).
    pub subnet6: Option<IpNet>,
    /// IPv6 gateway; default: the subnet's first address.
    pub gateway6: Option<IpAddr>,
    /// MTU of the bridge and veths (None: the kernel's default, 1500).
    pub mtu: Option<u32>,
    /// Where leases, pod records and the lock live (the engine passes `<root>/net/<name>`).
    pub state_dir: PathBuf,
    /// The namespace playing "the host": where the bridge, veth host ends and firewall
    /// rules live. None: the caller's own namespace (the engine's case); tests pass a
    /// namespace they made.
    pub host_netns: Option<PathBuf>,
    /// Name of Wharf's nftables table (family inet).
    pub nft_table: String,
    /// How nftables rules are applied.
    pub nft_backend: nft::Backend,
}

impl BuiltinConfig {
    /// The defaults (`wharf0`, 10.88.0.0/16, IPv4 only, table `inet wharf`), state in
    /// `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> BuiltinConfig {
        BuiltinConfig {
            name: DEFAULT_NAME.into(),
            bridge: DEFAULT_BRIDGE.into(),
            subnet: DEFAULT_SUBNET.parse().expect("valid default subnet"),
            gateway: None,
            subnet6: None,
            gateway6: None,
            mtu: None,
            state_dir: state_dir.into(),
            host_netns: None,
            nft_table: DEFAULT_NAME.into(),
            nft_backend: nft::Backend::Auto,
        }
    }
}

/// What [`BuiltinNetwork::recover`] cleaned up.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Pods whose setup a crash interrupted, now torn down.
    pub half_attached: Vec<String>,
    /// Leases without a pod record, released.
    pub orphan_leases: Vec<IpAddr>,
    /// Host veths of pods without a record, deleted.
    pub orphan_veths: Vec<String>,
}

/// The family-specific part of the configuration, resolved.
#[derive(Clone, Copy)]
struct Family {
    subnet: IpNet,
    gateway: IpAddr,
}

/// A built-in network, ready to attach pods.
pub struct BuiltinNetwork {
    cfg: BuiltinConfig,
    families: Vec<Family>,
    host: NsHandle,
    ipam: Ipam,
    records: record::Records,
}

/// Validate a pod id: it names files and appears in interface aliases.
pub fn validate_pod_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid pod id {id:?}: 1-128 letters, digits, '-', '_' or '.'"
        )))
    }
}

fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn resolve_family(subnet: IpNet, gateway: Option<IpAddr>, what: &str) -> Result<Family> {
    let subnet = subnet.trunc();
    let (lo, hi) = subnet.host_range();
    if hi < lo + 1 {
        return Err(Error::Invalid(format!(
            "{what} subnet {subnet} is too small: it needs a gateway and at least one pod"
        )));
    }
    let gateway = match gateway {
        Some(g) => {
            if !subnet.offset_of(&g).is_some_and(|o| o >= lo && o <= hi) {
                return Err(Error::Invalid(format!(
                    "{what} gateway {g} is not a usable address of subnet {subnet}"
                )));
            }
            g
        }
        None => subnet.nth(lo).expect("first host"),
    };
    Ok(Family { subnet, gateway })
}

impl BuiltinNetwork {
    /// Check the configuration and open the host namespace.
    pub fn new(cfg: BuiltinConfig) -> Result<BuiltinNetwork> {
        crate::types::validate_ifname(&cfg.bridge)?;
        if cfg.subnet.is_ipv6() {
            return Err(Error::Invalid(format!(
                "built-in network {}: subnet {} must be IPv4 (use subnet6 for IPv6)",
                cfg.name, cfg.subnet
            )));
        }
        let valid_table = !cfg.nft_table.is_empty()
            && cfg.nft_table.len() < 64
            && cfg
                .nft_table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_table {
            return Err(Error::Invalid(format!(
                "invalid nftables table name {:?}",
                cfg.nft_table
            )));
        }
        let mut families = vec![resolve_family(cfg.subnet, cfg.gateway, "IPv4")?];
        if let Some(s6) = cfg.subnet6 {
            if !s6.is_ipv6() {
                return Err(Error::Invalid(format!(
                    "built-in network {}: subnet6 {s6} is not IPv6",
                    cfg.name
                )));
            }
            families.push(resolve_family(s6, cfg.gateway6, "IPv6")?);
        }
        let host = NsHandle::open(cfg.host_netns.as_deref())?;
        Ok(BuiltinNetwork {
            ipam: Ipam::new(cfg.state_dir.join("ipam")),
            records: record::Records::new(cfg.state_dir.join("pods")),
            families,
            host,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BuiltinConfig {
        &self.cfg
    }

    /// The lease store (for inspection).
    pub fn ipam(&self) -> &Ipam {
        &self.ipam
    }

    fn lock(&self) -> Result<FileLock> {
        crate::sys::lock_exclusive(&self.cfg.state_dir.join("lock"))
    }

    /// The host-side veth name of a pod: "wh" + 12 hex digits of a hash of network and pod.
    pub fn host_veth_name(&self, pod_id: &str) -> String {
        format!(
            "wh{:012x}",
            fnv64(&[&self.cfg.name, pod_id]) & 0xffff_ffff_ffff
        )
    }

    fn alias_prefix(&self) -> String {
        format!("wharf:{}:", self.cfg.name)
    }

    fn bridge_mac(&self) -> [u8; 6] {
        let h = fnv64(&["bridge", &self.cfg.name, &self.cfg.bridge]).to_be_bytes();
        // Locally administered, unicast.
        [(h[0] & 0xfe) | 0x02, h[1], h[2], h[3], h[4], h[5]]
    }

    /// Connect a pod: its namespace at `netns_path` gets `opts.ifname` with an address from
    /// the subnet, a default route and the port mappings. On failure nothing is left.
    pub fn attach(
        &self,
        pod_id: &str,
        netns_path: &Path,
        opts: &AttachOptions,
    ) -> Result<Attachment> {
        validate_pod_id(pod_id)?;
        opts.validate()?;
        if opts.bandwidth.is_some() || !opts.ip_ranges.is_empty() {
            return Err(Error::Invalid(format!(
                "pod {pod_id}: bandwidth limits and IP ranges need a CNI network (the built-in network has neither)"
            )));
        }
        if let Some(pm) = opts
            .port_mappings
            .iter()
            .find(|p| p.protocol == Protocol::Sctp)
        {
            return Err(Error::Invalid(format!(
                "pod {pod_id}: SCTP port mapping {}:{} needs a CNI network (the built-in network maps TCP and UDP)",
                pm.host_port, pm.container_port
            )));
        }
        let peer_mac = opts.mac.as_deref().map(parse_mac).transpose()?;
        let pod_ns = netns::open(netns_path)?;
        let _lock = self.lock()?;

        if let Some(existing) = self.records.get(pod_id)? {
            return Err(Error::Conflict(format!(
                "pod {pod_id} is already attached to network {} (namespace {})",
                self.cfg.name,
                existing.netns.display()
            )));
        }
        let others = self.records.all()?;
        for pm in &opts.port_mappings {
            if let Some(host_ip) = pm.host_ip
                && !self
                    .families
                    .iter()
                    .any(|f| f.subnet.is_ipv6() == host_ip.is_ipv6())
            {
                return Err(Error::Invalid(format!(
                    "pod {pod_id}: port mapping {}:{} binds {host_ip}, but network {} has no {} subnet",
                    pm.host_port,
                    pm.container_port,
                    self.cfg.name,
                    if host_ip.is_ipv6() { "IPv6" } else { "IPv4" }
                )));
            }
            for other in &others {
                if let Some(o) = other.port_mappings.iter().find(|o| o.conflicts_with(pm)) {
                    return Err(Error::Conflict(format!(
                        "pod {pod_id}: host port {}/{} is already mapped to pod {} (port {})",
                        pm.host_port,
                        pm.protocol.as_str(),
                        other.pod_id,
                        o.container_port
                    )));
                }
            }
        }

        let mut rec = PodRecord {
            pod_id: pod_id.into(),
            phase: Phase::Attaching,
            netns: netns_path.into(),
            ifname: opts.ifname.clone(),
            host_veth: self.host_veth_name(pod_id),
            ips: Vec::new(),
            mac: None,
            port_mappings: opts.port_mappings.clone(),
        };
        match self.setup(&mut rec, &others, opts, &pod_ns, peer_mac) {
            Ok(att) => Ok(att),
            Err(e) => {
                let undo = self.teardown(pod_id, Some(&rec));
                match undo {
                    Ok(()) => Err(e),
                    // The same cause (nftables missing, say) is said once.
                    Err(u) if u.to_string() == e.to_string() => Err(e),
                    Err(u) => Err(Error::Multiple(vec![
                        e.to_string(),
                        format!("undoing the failed attach of pod {pod_id} also failed: {u}"),
                    ])),
                }
            }
        }
    }

    fn setup(
        &self,
        rec: &mut PodRecord,
        others: &[PodRecord],
        opts: &AttachOptions,
        pod_ns: &std::os::fd::OwnedFd,
        peer_mac: Option<[u8; 6]>,
    ) -> Result<Attachment> {
        use std::os::fd::AsFd;
        // Leases first, then the record: a crash in between leaves a lease without a
        // record, which recovery releases.
        for fam in &self.families {
            let reserved = [fam.gateway];
            let wanted = opts
                .ips
                .iter()
                .find(|ip| ip.is_ipv6() == fam.subnet.is_ipv6());
            let ip = match wanted {
                Some(ip) => self
                    .ipam
                    .lease_exact(&fam.subnet, &reserved, *ip, &rec.pod_id)?,
                None => self.ipam.lease_next(&fam.subnet, &reserved, &rec.pod_id)?,
            };
            rec.ips.push(IpNet::new(ip, fam.subnet.prefix)?);
        }
        if let Some(ip) = opts.ips.iter().find(|ip| {
            !self
                .families
                .iter()
                .any(|f| f.subnet.is_ipv6() == ip.is_ipv6())
        }) {
            return Err(Error::Invalid(format!(
                "pod {}: requested address {ip} has no matching subnet in network {}",
                rec.pod_id, self.cfg.name
            )));
        }
        self.records.put(rec)?;

        let mut pods: Vec<PodRecord> = others.to_vec();
        pods.push(rec.clone());
        let (bridge_mac, veth_mac) = netns::run_in(self.host.fd(), || -> Result<_> {
            let mut nl =
                Netlink::open().ctx(|| "open a netlink socket in the host namespace".into())?;
            let bridge = self.ensure_bridge(&mut nl)?;
            nl.create_veth(&VethSpec {
                name: &rec.host_veth,
                master: Some(bridge.index),
                mtu: self.cfg.mtu,
                peer_name: &rec.ifname,
                peer_ns: pod_ns.as_fd(),
                peer_mac,
            })
            .map_err(|e| {
                e.ctx(format!(
                    "pod {}: create veth {} with peer {} in {}",
                    rec.pod_id,
                    rec.host_veth,
                    rec.ifname,
                    rec.netns.display()
                ))
            })?;
            let veth = nl
                .link_by_name(&rec.host_veth)
                .map_err(|e| e.ctx(format!("look up {}", rec.host_veth)))?
                .ok_or_else(|| Error::NotFound(format!("veth {} vanished", rec.host_veth)))?;
            nl.set_hairpin(veth.index)
                .map_err(|e| e.ctx(format!("turn on hairpin mode of {}", rec.host_veth)))?;
            nl.set_alias(
                veth.index,
                &format!("{}{}", self.alias_prefix(), rec.pod_id),
            )
            .map_err(|e| e.ctx(format!("set the alias of {}", rec.host_veth)))?;
            self.update_firewall(&pods, rec, true)?;
            Ok((bridge.mac, veth.mac))
        })?;

        let mut nl = Netlink::open_in(pod_ns.as_fd())
            .ctx(|| format!("open a netlink socket in {}", rec.netns.display()))?;
        let pod_link = self.configure_pod(&mut nl, rec, opts.default_route)?;
        rec.mac = Some(format_mac(&pod_link.mac));
        rec.phase = Phase::Attached;
        self.records.put(rec)?;
        let mut att = self.attachment(rec, &bridge_mac, &veth_mac);
        if !opts.default_route {
            att.routes.clear();
        }
        Ok(att)
    }

    fn attachment(&self, rec: &PodRecord, bridge_mac: &[u8], veth_mac: &[u8]) -> Attachment {
        let mut att = Attachment {
            network: self.cfg.name.clone(),
            interfaces: vec![
                Interface {
                    name: self.cfg.bridge.clone(),
                    mac: format_mac(bridge_mac),
                    ..Default::default()
                },
                Interface {
                    name: rec.host_veth.clone(),
                    mac: format_mac(veth_mac),
                    ..Default::default()
                },
                Interface {
                    name: rec.ifname.clone(),
                    mac: rec.mac.clone().unwrap_or_default(),
                    sandbox: Some(rec.netns.clone()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        for (fam, ip) in self.families.iter().zip(&rec.ips) {
            att.ips.push(IpConfig {
                address: *ip,
                gateway: Some(fam.gateway),
                interface: Some(2),
            });
            let default = if fam.subnet.is_ipv6() {
                "::/0"
            } else {
                "0.0.0.0/0"
            };
            att.routes.push(RouteConfig {
                dst: default.parse().expect("valid default route"),
                gw: Some(fam.gateway),
            });
        }
        att
    }

    /// Create the bridge with its gateway addresses if missing (checking the subnet
    /// against the host's routes first), make sure it is up, and turn on forwarding.
    fn ensure_bridge(&self, nl: &mut Netlink) -> Result<crate::netlink::Link> {
        let name = &self.cfg.bridge;
        let link = nl
            .link_by_name(name)
            .map_err(|e| e.ctx(format!("look up bridge {name}")))?;
        let link = match link {
            Some(l) if l.kind.as_deref() != Some("bridge") => {
                return Err(Error::Conflict(format!(
                    "interface {name} exists and is not a bridge ({}); choose another bridge name",
                    l.kind.as_deref().unwrap_or("no link kind")
                )));
            }
            Some(l) => l,
            None => self.create_bridge(nl)?,
        };
        let have = nl.addresses().map_err(|e| e.ctx("list addresses"))?;
        for fam in &self.families {
            let present = have.iter().any(|a| {
                a.index == link.index && a.ip == fam.gateway && a.prefix == fam.subnet.prefix
            });
            if !present {
                match nl.add_address(
                    link.index,
                    fam.gateway,
                    fam.subnet.prefix,
                    fam.subnet.is_ipv6(),
                ) {
                    Err(e) if e.errno != libc::EEXIST => {
                        return Err(e.ctx(format!(
                            "add {}/{} to {name}",
                            fam.gateway, fam.subnet.prefix
                        )));
                    }
                    _ => {}
                }
            }
        }
        if !link.is_up() {
            nl.set_up(link.index)
                .map_err(|e| e.ctx(format!("bring up {name}")))?;
        }
        crate::sysctl::ensure("net/ipv4/ip_forward", "1")?;
        // Host ports reachable on 127.0.0.1 (see the firewall's localnet guard).
        crate::sysctl::ensure(&format!("net/ipv4/conf/{name}/route_localnet"), "1")?;
        if self.cfg.subnet6.is_some() {
            crate::sysctl::ensure("net/ipv6/conf/all/forwarding", "1")?;
        }
        Ok(link)
    }

    fn create_bridge(&self, nl: &mut Netlink) -> Result<crate::netlink::Link> {
        let name = &self.cfg.bridge;
        for fam in &self.families {
            let family = if fam.subnet.is_ipv6() {
                libc::AF_INET6
            } else {
                libc::AF_INET
            };
            let routes = nl.routes(family).map_err(|e| e.ctx("list routes"))?;
            for r in routes {
                // Local and broadcast tables describe addresses, not reachability; the
                // default route overlaps everything by definition.
                if r.prefix == 0 || r.table == 255 || (r.dst.is_ipv6() && r.dst.is_multicast()) {
                    continue;
                }
                let Ok(dst) = IpNet::new(r.dst, r.prefix) else {
                    continue;
                };
                if dst.is_ipv6() && dst.addr.to_string().starts_with("fe80") {
                    continue;
                }
                if dst.overlaps(&fam.subnet) {
                    return Err(Error::Conflict(format!(
                        "network {}: subnet {} collides with the host route to {dst}{}; configure another subnet",
                        self.cfg.name,
                        fam.subnet,
                        r.oif
                            .map(|i| format!(" (interface index {i})"))
                            .unwrap_or_default()
                    )));
                }
            }
        }
        nl.create_bridge(name, self.bridge_mac(), self.cfg.mtu)
            .map_err(|e| e.ctx(format!("create bridge {name}")))?;
        let link = nl
            .link_by_name(name)
            .map_err(|e| e.ctx(format!("look up bridge {name}")))?
            .ok_or_else(|| Error::NotFound(format!("bridge {name} vanished after creation")))?;
        Ok(link)
    }

    /// Inside the pod: lo and the interface up, addresses, default routes.
    fn configure_pod(
        &self,
        nl: &mut Netlink,
        rec: &PodRecord,
        default_route: bool,
    ) -> Result<crate::netlink::Link> {
        let ns = rec.netns.display();
        nl.set_up(1)
            .map_err(|e| e.ctx(format!("bring up lo in {ns}")))?;
        let link = nl
            .link_by_name(&rec.ifname)
            .map_err(|e| e.ctx(format!("look up {} in {ns}", rec.ifname)))?
            .ok_or_else(|| Error::NotFound(format!("{} missing in {ns}", rec.ifname)))?;
        nl.set_up(link.index)
            .map_err(|e| e.ctx(format!("bring up {} in {ns}", rec.ifname)))?;
        for ip in &rec.ips {
            nl.add_address(link.index, ip.addr, ip.prefix, ip.is_ipv6())
                .map_err(|e| e.ctx(format!("add {ip} to {} in {ns}", rec.ifname)))?;
        }
        for (fam, _) in self.families.iter().zip(&rec.ips).filter(|_| default_route) {
            nl.add_route(None, fam.gateway, Some(link.index))
                .map_err(|e| e.ctx(format!("add the default route via {} in {ns}", fam.gateway)))?;
        }
        Ok(link)
    }

    fn fw_spec<'a>(&'a self, pods: &'a [PodRecord]) -> firewall::Spec<'a> {
        firewall::Spec {
            table: &self.cfg.nft_table,
            bridge: &self.cfg.bridge,
            subnet: self.families[0].subnet,
            subnet6: self.families.get(1).map(|f| f.subnet),
            pods,
        }
    }

    /// Write Wharf's whole table for `pods` (one atomic transaction). Called on the host
    /// namespace's thread (or in the caller's own namespace).
    fn apply_firewall(&self, pods: &[PodRecord]) -> Result<()> {
        nft::run(
            &self.cfg.nft_backend,
            None,
            &firewall::ruleset(&self.fw_spec(pods)),
        )
        .map_err(|e| match e {
            Error::Firewall(m) => Error::Firewall(format!("network {}: {m}", self.cfg.name)),
            other => other,
        })?;
        Ok(())
    }

    /// Whether Wharf's table is in place with the current shape (one netlink round trip,
    /// no ruleset parsing). Called on the host namespace's thread.
    fn table_current(&self) -> bool {
        let tag = firewall::shape_tag(&self.fw_spec(&[]));
        Netlink::open_protocol(libc::NETLINK_NETFILTER)
            .ok()
            .and_then(|mut nl| nl.nft_inet_table(&self.cfg.nft_table).ok().flatten())
            .is_some_and(|raw| raw.windows(tag.len()).any(|w| w == tag.as_bytes()))
    }

    /// Update the rules for one pod coming (`add`) or going, given every pod that stays
    /// or is attaching (`pods`). When the table in the kernel has the current shape only
    /// the pod's map entries change (nothing at all for a pod without port mappings);
    /// otherwise (no table, another configuration's or version's, or the entry update
    /// failed because the maps were edited behind our back) the whole table is written
    /// again from the records.
    fn update_firewall(&self, pods: &[PodRecord], pod: &PodRecord, add: bool) -> Result<()> {
        if self.table_current() {
            let spec = self.fw_spec(pods);
            let script = if add {
                firewall::add_pod(&spec, pod)
            } else {
                firewall::remove_pod(&spec, pod)
            };
            let Some(script) = script else { return Ok(()) };
            if nft::run(&self.cfg.nft_backend, None, &script).is_ok() {
                return Ok(());
            }
        }
        self.apply_firewall(pods)
    }

    /// Disconnect a pod: delete its veth pair, drop its port mappings, release its
    /// addresses and record. Idempotent, and works for pods whose attach was interrupted
    /// or whose namespace is already gone (`netns_path` is not needed; kept for symmetry
    /// with CNI, where plugins get it).
    pub fn detach(&self, pod_id: &str, _netns_path: Option<&Path>) -> Result<()> {
        validate_pod_id(pod_id)?;
        let _lock = self.lock()?;
        let rec = self.records.get(pod_id)?;
        self.teardown(pod_id, rec.as_ref())
    }

    /// Undo everything attach may have done for `pod_id`; every step is attempted, errors
    /// are collected. The caller holds the lock.
    fn teardown(&self, pod_id: &str, rec: Option<&PodRecord>) -> Result<()> {
        let mut errors = Vec::new();
        let veth = rec
            .map(|r| r.host_veth.clone())
            .unwrap_or_else(|| self.host_veth_name(pod_id));
        let remaining: Vec<PodRecord> = match self.records.all() {
            Ok(all) => all.into_iter().filter(|r| r.pod_id != pod_id).collect(),
            Err(e) => {
                errors.push(e.to_string());
                Vec::new()
            }
        };
        let host = netns::run_in(self.host.fd(), || -> Result<Vec<String>> {
            let mut errs = Vec::new();
            match Netlink::open() {
                Ok(mut nl) => {
                    if let Err(e) = nl.delete_link(&veth) {
                        errs.push(e.ctx(format!("delete veth {veth}")).to_string());
                    }
                }
                Err(e) => errs.push(format!("open a netlink socket in the host namespace: {e}")),
            }
            let fw = match rec {
                Some(r) => self.update_firewall(&remaining, r, false),
                // Rules derive from records (written before, removed after the rules):
                // a pod without a record has none.
                None => Ok(()),
            };
            if let Err(e) = fw {
                errs.push(e.to_string());
            }
            Ok(errs)
        });
        match host {
            Ok(errs) => errors.extend(errs),
            Err(e) => errors.push(e.to_string()),
        }
        let release = match rec {
            Some(r) => r
                .ips
                .iter()
                .try_for_each(|ip| self.ipam.release(&ip.addr, pod_id)),
            None => self.ipam.release_all_of(pod_id),
        };
        if let Err(e) = release {
            errors.push(e.to_string());
        }
        // The record goes last, and only if everything else worked: a failed step stays
        // recorded, so the next detach or recovery retries it.
        if errors.is_empty() {
            self.records.remove(pod_id)?;
            Ok(())
        } else {
            Err(Error::Multiple(errors))
        }
    }

    /// The attachments recorded for pods (complete ones only).
    pub fn attachments(&self) -> Result<Vec<(String, Attachment)>> {
        let recs = self.records.all()?;
        Ok(recs
            .into_iter()
            .filter(|r| r.phase == Phase::Attached)
            .map(|r| {
                let att = self.attachment(&r, &self.bridge_mac(), &[]);
                (r.pod_id, att)
            })
            .collect())
    }

    /// Check that a pod's network is intact: its record is complete, its veth exists on the
    /// bridge, its addresses are leased to it.
    pub fn check(&self, pod_id: &str) -> Result<()> {
        validate_pod_id(pod_id)?;
        let _lock = self.lock()?;
        let rec = self
            .records
            .get(pod_id)?
            .filter(|r| r.phase == Phase::Attached)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "pod {pod_id} is not attached to network {}",
                    self.cfg.name
                ))
            })?;
        for ip in &rec.ips {
            if self.ipam.owner_of(&ip.addr).as_deref() != Some(pod_id) {
                return Err(Error::Invalid(format!(
                    "pod {pod_id}: address {ip} is not leased to it"
                )));
            }
        }
        netns::run_in(self.host.fd(), || -> Result<()> {
            let mut nl = Netlink::open().ctx(|| "open a netlink socket".into())?;
            let bridge = nl
                .link_by_name(&self.cfg.bridge)
                .map_err(|e| e.ctx("look up the bridge"))?
                .ok_or_else(|| Error::NotFound(format!("bridge {} is missing", self.cfg.bridge)))?;
            let veth = nl
                .link_by_name(&rec.host_veth)
                .map_err(|e| e.ctx("look up the veth"))?
                .ok_or_else(|| {
                    Error::NotFound(format!("pod {pod_id}: veth {} is missing", rec.host_veth))
                })?;
            if veth.master != Some(bridge.index) {
                return Err(Error::Invalid(format!(
                    "pod {pod_id}: veth {} is not a port of {}",
                    rec.host_veth, self.cfg.bridge
                )));
            }
            Ok(())
        })
    }

    /// Repair what a crash left: finish tearing down pods whose attach was interrupted,
    /// release leases and delete veths that no pod record owns, and rewrite the firewall
    /// table from the records. Run it when the engine starts.
    pub fn recover(&self) -> Result<Recovery> {
        let _lock = self.lock()?;
        let mut out = Recovery::default();
        for rec in self.records.all()? {
            if rec.phase == Phase::Attaching {
                self.teardown(&rec.pod_id, Some(&rec))?;
                out.half_attached.push(rec.pod_id);
            }
        }
        let recs = self.records.all()?;
        let known = |id: &str| recs.iter().any(|r| r.pod_id == id);
        for (ip, owner) in self.ipam.leases()? {
            if !known(&owner) {
                self.ipam.release(&ip, &owner)?;
                out.orphan_leases.push(ip);
            }
        }
        let prefix = self.alias_prefix();
        out.orphan_veths = netns::run_in(self.host.fd(), || -> Result<Vec<String>> {
            let mut nl = Netlink::open().ctx(|| "open a netlink socket".into())?;
            let mut deleted = Vec::new();
            for l in nl.links().map_err(|e| e.ctx("list interfaces"))? {
                let owner = l
                    .alias
                    .as_deref()
                    .and_then(|a| a.strip_prefix(prefix.as_str()));
                if let Some(owner) = owner
                    && !known(owner)
                {
                    nl.delete_link(&l.name)
                        .map_err(|e| e.ctx(format!("delete orphan veth {}", l.name)))?;
                    deleted.push(l.name);
                }
            }
            if nl
                .link_by_name(&self.cfg.bridge)
                .map_err(|e| e.ctx("look up the bridge"))?
                .is_some()
            {
                // Rewrite the whole table: recovery repairs drift in the chains too.
                self.apply_firewall(&recs)?;
            }
            Ok(deleted)
        })?;
        Ok(out)
    }

    /// Remove the network from the host: bridge and firewall table. Refused while pods
    /// are attached. Leases and records are files in the state dir and stay (empty).
    pub fn remove(&self) -> Result<()> {
        let _lock = self.lock()?;
        let recs = self.records.all()?;
        if let Some(r) = recs.first() {
            return Err(Error::Conflict(format!(
                "network {} still has pods attached ({} and {} more)",
                self.cfg.name,
                r.pod_id,
                recs.len() - 1
            )));
        }
        netns::run_in(self.host.fd(), || -> Result<()> {
            let mut nl = Netlink::open().ctx(|| "open a netlink socket".into())?;
            nl.delete_link(&self.cfg.bridge)
                .map_err(|e| e.ctx(format!("delete bridge {}", self.cfg.bridge)))?;
            nft::run(
                &self.cfg.nft_backend,
                None,
                &firewall::delete_table(&self.cfg.nft_table),
            )
            .map(drop)
        })
    }
}
