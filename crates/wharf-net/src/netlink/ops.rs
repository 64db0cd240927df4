//! The rtnetlink requests the library makes: links (bridge, veth, state, alias, bridge-port
//! hairpin), addresses and routes.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::consts::*;
use super::{Attrs, Msg, Netlink, NlResult};

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// IFF_* flags.
    pub flags: u32,
    /// MTU.
    pub mtu: u32,
    /// Index of the bridge (or other master) it is enslaved to.
    pub master: Option<u32>,
    /// Link kind ("bridge", "veth", ...), none for physical devices and lo.
    pub kind: Option<String>,
    /// The alias (ifalias) text.
    pub alias: Option<String>,
    /// Hardware address.
    pub mac: Vec<u8>,
}

impl Link {
    /// Whether the administrative state is up.
    pub fn is_up(&self) -> bool {
        self.flags & IFF_UP != 0
    }
}

/// An interface address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    /// Interface index.
    pub index: u32,
    /// The address.
    pub ip: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

/// A route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination network (the unspecified address for a default route).
    pub dst: IpAddr,
    /// Destination prefix length (0 for a default route).
    pub prefix: u8,
    /// Next hop.
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Routing table id.
    pub table: u32,
}

fn ifinfomsg(family: u8, index: u32, flags: u32, change: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0] = family;
    b[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    b[8..12].copy_from_slice(&flags.to_ne_bytes());
    b[12..16].copy_from_slice(&change.to_ne_bytes());
    b
}

fn family_of(ip: &IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn ip_from(data: &[u8]) -> Option<IpAddr> {
    match data.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(data).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
        _ => None,
    }
}

fn u32_of(data: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(..4)?.try_into().ok()?))
}

fn cstr(data: &[u8]) -> String {
    let s = data.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(s).into_owned()
}

fn parse_link(payload: &[u8]) -> Option<Link> {
    let hdr = payload.get(..16)?;
    let index = i32::from_ne_bytes(hdr[4..8].try_into().ok()?) as u32;
    let flags = u32::from_ne_bytes(hdr[8..12].try_into().ok()?);
    let mut link = Link {
        index,
        name: String::new(),
        flags,
        mtu: 0,
        master: None,
        kind: None,
        alias: None,
        mac: Vec::new(),
    };
    for (ty, data) in Attrs::new(&payload[16..]) {
        match ty {
            IFLA_IFNAME => link.name = cstr(data),
            IFLA_MTU => link.mtu = u32_of(data).unwrap_or(0),
            IFLA_MASTER => link.master = u32_of(data),
            IFLA_IFALIAS => link.alias = Some(cstr(data)),
            IFLA_ADDRESS => link.mac = data.to_vec(),
            IFLA_LINKINFO => {
                for (ity, idata) in Attrs::new(data) {
                    if ity == IFLA_INFO_KIND {
                        link.kind = Some(cstr(idata));
                    }
                }
            }
            _ => {}
        }
    }
    Some(link)
}

/// What a new veth pair looks like: the host end, and the peer created directly inside
/// another namespace under its final name (no rename dance, so no window where a
/// half-configured `vethXXXX` is visible in the pod).
pub struct VethSpec<'a> {
    /// Host-side name.
    pub name: &'a str,
    /// Bridge to enslave the host side to.
    pub master: Option<u32>,
    /// MTU of both ends.
    pub mtu: Option<u32>,
    /// Peer name inside `peer_ns`.
    pub peer_name: &'a str,
    /// Namespace file of the peer.
    pub peer_ns: BorrowedFd<'a>,
    /// MAC address of the peer (None: random).
    pub peer_mac: Option<[u8; 6]>,
}

impl Netlink {
    /// The raw NFT_MSG_NEWTABLE answer for nf_tables table `name` of family inet (its
    /// attributes, including the comment), or None if there is no such table. Needs a
    /// socket opened with NETLINK_NETFILTER. One round trip, no ruleset parsing: the cheap
    /// way to learn whether a table we wrote is still in place.
    pub fn nft_inet_table(&mut self, name: &str) -> NlResult<Option<Vec<u8>>> {
        const NFNL_SUBSYS_NFTABLES: u16 = 10;
        const NFT_MSG_GETTABLE: u16 = 1;
        const NFTA_TABLE_NAME: u16 = 1;
        const NFPROTO_INET: u8 = 1;
        // struct nfgenmsg: family, version, resource id (big endian).
        let msg = Msg::new((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE, 0)
            .raw(&[NFPROTO_INET, 0, 0, 0])
            .attr_str(NFTA_TABLE_NAME, name);
        match self.fetch(msg) {
            Ok(mut msgs) => Ok(msgs.pop()),
            Err(e) if e.errno == libc::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The interface called `name`, if it exists.
    pub fn link_by_name(&mut self, name: &str) -> NlResult<Option<Link>> {
        let msg = Msg::new(RTM_GETLINK, 0)
            .raw(&ifinfomsg(0, 0, 0, 0))
            .attr_str(IFLA_IFNAME, name);
        match self.fetch(msg) {
            Ok(msgs) => Ok(msgs.first().and_then(|p| parse_link(p))),
            Err(e) if e.errno == libc::ENODEV => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every interface.
    pub fn links(&mut self) -> NlResult<Vec<Link>> {
        let msg = Msg::new(RTM_GETLINK, NLM_F_DUMP).raw(&ifinfomsg(0, 0, 0, 0));
        Ok(self
            .fetch(msg)?
            .iter()
            .filter_map(|p| parse_link(p))
            .collect())
    }

    /// Create a bridge with a fixed MAC (a bridge otherwise takes the lowest MAC of its
    /// ports, changing as pods come and go, which breaks the pods' ARP caches).
    pub fn create_bridge(&mut self, name: &str, mac: [u8; 6], mtu: Option<u32>) -> NlResult<()> {
        let mut msg = Msg::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL)
            .raw(&ifinfomsg(0, 0, 0, 0))
            .attr_str(IFLA_IFNAME, name)
            .attr(IFLA_ADDRESS, &mac);
        if let Some(mtu) = mtu {
            msg = msg.attr_u32(IFLA_MTU, mtu);
        }
        let (msg, li) = msg.nest(IFLA_LINKINFO);
        let msg = msg.attr_str(IFLA_INFO_KIND, "bridge").end_nest(li);
        self.request(msg)
    }

    /// Create a veth pair: the host end up and enslaved to its bridge, the peer (down) in
    /// its namespace.
    pub fn create_veth(&mut self, spec: &VethSpec<'_>) -> NlResult<()> {
        let mut msg = Msg::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL)
            .raw(&ifinfomsg(0, 0, IFF_UP, IFF_UP))
            .attr_str(IFLA_IFNAME, spec.name);
        if let Some(mtu) = spec.mtu {
            msg = msg.attr_u32(IFLA_MTU, mtu);
        }
        if let Some(master) = spec.master {
            msg = msg.attr_u32(IFLA_MASTER, master);
        }
        let (msg, li) = msg.nest(IFLA_LINKINFO);
        let msg = msg.attr_str(IFLA_INFO_KIND, "veth");
        let (msg, data) = msg.nest(IFLA_INFO_DATA);
        let (msg, peer) = msg.nest(VETH_INFO_PEER);
        let mut msg = msg
            .raw(&ifinfomsg(0, 0, 0, 0))
            .attr_str(IFLA_IFNAME, spec.peer_name)
            .attr_u32(IFLA_NET_NS_FD, spec.peer_ns.as_raw_fd() as u32);
        if let Some(mtu) = spec.mtu {
            msg = msg.attr_u32(IFLA_MTU, mtu);
        }
        if let Some(mac) = spec.peer_mac {
            msg = msg.attr(IFLA_ADDRESS, &mac);
        }
        let msg = msg.end_nest(peer).end_nest(data).end_nest(li);
        self.request(msg)
    }

    /// Bring an interface up.
    pub fn set_up(&mut self, index: u32) -> NlResult<()> {
        self.request(Msg::new(RTM_NEWLINK, 0).raw(&ifinfomsg(0, index, IFF_UP, IFF_UP)))
    }

    /// Set an interface's alias (shown by `ip link`; says which pod a veth belongs to).
    pub fn set_alias(&mut self, index: u32, alias: &str) -> NlResult<()> {
        self.request(
            Msg::new(RTM_NEWLINK, 0)
                .raw(&ifinfomsg(0, index, 0, 0))
                .attr_str(IFLA_IFALIAS, alias),
        )
    }

    /// Turn on hairpin mode of a bridge port, so a frame may leave through the port it came
    /// in on (a pod reaching itself through its own mapped host port).
    pub fn set_hairpin(&mut self, index: u32) -> NlResult<()> {
        let msg = Msg::new(RTM_SETLINK, 0).raw(&ifinfomsg(AF_BRIDGE, index, 0, 0));
        let (msg, at) = msg.nest(IFLA_PROTINFO);
        let msg = msg.attr(IFLA_BRPORT_MODE, &[1]).end_nest(at);
        self.request(msg)
    }

    /// Delete the interface called `name`; false if there was none (deleting is idempotent).
    /// Deleting one end of a veth pair deletes the other end too.
    pub fn delete_link(&mut self, name: &str) -> NlResult<bool> {
        let msg = Msg::new(RTM_DELLINK, 0)
            .raw(&ifinfomsg(0, 0, 0, 0))
            .attr_str(IFLA_IFNAME, name);
        match self.request(msg) {
            Ok(()) => Ok(true),
            Err(e) if e.errno == libc::ENODEV => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Add an address. `nodad` skips IPv6 duplicate address detection, so the address is
    /// usable at once (the IPAM guarantees uniqueness on the bridge).
    pub fn add_address(&mut self, index: u32, ip: IpAddr, prefix: u8, nodad: bool) -> NlResult<()> {
        let mut hdr = [0u8; 8];
        hdr[0] = family_of(&ip);
        hdr[1] = prefix;
        hdr[4..8].copy_from_slice(&index.to_ne_bytes());
        let bytes = ip_bytes(&ip);
        let mut msg = Msg::new(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL)
            .raw(&hdr)
            .attr(IFA_LOCAL, &bytes)
            .attr(IFA_ADDRESS, &bytes);
        if let IpAddr::V4(v4) = ip
            && prefix < 31
        {
            let host_mask = u32::MAX >> prefix;
            let bcast = std::net::Ipv4Addr::from(u32::from(v4) | host_mask);
            msg = msg.attr(IFA_BROADCAST, &bcast.octets());
        }
        if nodad {
            msg = msg.attr_u32(IFA_FLAGS, IFA_F_NODAD);
        }
        self.request(msg)
    }

    /// Delete an address; false if it was not there.
    pub fn delete_address(&mut self, index: u32, ip: IpAddr, prefix: u8) -> NlResult<bool> {
        let mut hdr = [0u8; 8];
        hdr[0] = family_of(&ip);
        hdr[1] = prefix;
        hdr[4..8].copy_from_slice(&index.to_ne_bytes());
        let msg = Msg::new(RTM_DELADDR, 0)
            .raw(&hdr)
            .attr(IFA_LOCAL, &ip_bytes(&ip));
        match self.request(msg) {
            Ok(()) => Ok(true),
            Err(e) if e.errno == libc::EADDRNOTAVAIL => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every address (of both families).
    pub fn addresses(&mut self) -> NlResult<Vec<Addr>> {
        let msg = Msg::new(RTM_GETADDR, NLM_F_DUMP).raw(&[0u8; 8]);
        let mut out = Vec::new();
        for p in self.fetch(msg)? {
            let Some(hdr) = p.get(..8) else { continue };
            let prefix = hdr[1];
            let index = u32::from_ne_bytes(hdr[4..8].try_into().unwrap());
            let (mut local, mut address) = (None, None);
            for (ty, data) in Attrs::new(&p[8..]) {
                match ty {
                    IFA_LOCAL => local = ip_from(data),
                    IFA_ADDRESS => address = ip_from(data),
                    _ => {}
                }
            }
            if let Some(ip) = local.or(address) {
                out.push(Addr { index, ip, prefix });
            }
        }
        Ok(out)
    }

    /// Add a route in the main table. `dst` None is the default route.
    pub fn add_route(
        &mut self,
        dst: Option<(IpAddr, u8)>,
        gateway: IpAddr,
        oif: Option<u32>,
    ) -> NlResult<()> {
        let mut hdr = [0u8; 12];
        hdr[0] = family_of(&gateway);
        hdr[1] = dst.map_or(0, |d| d.1);
        hdr[4] = RT_TABLE_MAIN;
        hdr[5] = RTPROT_STATIC;
        hdr[6] = RT_SCOPE_UNIVERSE;
        hdr[7] = RTN_UNICAST;
        let mut msg = Msg::new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL).raw(&hdr);
        if let Some((ip, prefix)) = dst
            && prefix > 0
        {
            msg = msg.attr(RTA_DST, &ip_bytes(&ip));
        }
        msg = msg.attr(RTA_GATEWAY, &ip_bytes(&gateway));
        if let Some(oif) = oif {
            msg = msg.attr_u32(RTA_OIF, oif);
        }
        self.request(msg)
    }

    /// Every route of one family (`libc::AF_INET` or `libc::AF_INET6`), all tables.
    pub fn routes(&mut self, family: i32) -> NlResult<Vec<Route>> {
        let mut hdr = [0u8; 12];
        hdr[0] = family as u8;
        let msg = Msg::new(RTM_GETROUTE, NLM_F_DUMP).raw(&hdr);
        let unspecified = if family == libc::AF_INET6 {
            IpAddr::from([0u8; 16])
        } else {
            IpAddr::from([0u8; 4])
        };
        let mut out = Vec::new();
        for p in self.fetch(msg)? {
            let Some(h) = p.get(..12) else { continue };
            let mut r = Route {
                dst: unspecified,
                prefix: h[1],
                gateway: None,
                oif: None,
                table: h[4] as u32,
            };
            for (ty, data) in Attrs::new(&p[12..]) {
                match ty {
                    RTA_DST => r.dst = ip_from(data).unwrap_or(unspecified),
                    RTA_GATEWAY => r.gateway = ip_from(data),
                    RTA_OIF => r.oif = u32_of(data),
                    RTA_TABLE => r.table = u32_of(data).unwrap_or(r.table),
                    _ => {}
                }
            }
            out.push(r);
        }
        Ok(out)
    }
}
