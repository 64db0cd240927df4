//! Wharf's pod networking: network namespaces, CNI plugins, a built-in bridge network that
//! needs nothing installed, and the pod's DNS/hosts files.
//!
//! # What the engine calls, per pod
//!
//! ```no_run
//! use std::path::Path;
//! use wharf_net::{AttachOptions, BuiltinConfig, CniConfig, Network, PortMapping, Selection};
//! use wharf_net::{dns, netns};
//!
//! # fn main() -> wharf_net::Result<()> {
//! let root = Path::new("/var/lib/wharf");
//! // 1. The pod's namespace, pinned at /run/wharf/netns/<pod> (containers join it by path).
//! let ns = netns::create(Path::new(netns::DEFAULT_RUN_DIR), "pod-1234")?;
//! // 2. Its network: the default CNI network if /etc/cni/net.d has one, else the built-in
//! //    bridge network (wharf0, 10.88.0.0/16).
//! let net = Network::open(
//!     &Selection::Default,
//!     CniConfig::new(root.join("net/cni")),
//!     BuiltinConfig::new(root.join("net/builtin")),
//! )?;
//! let opts = AttachOptions {
//!     port_mappings: vec![PortMapping { host_port: 8080, container_port: 80,
//!         protocol: Default::default(), host_ip: None }],
//!     ..Default::default()
//! };
//! let att = net.attach("pod-1234", &ns.path, &opts)?;
//! // 3. Name files, bind-mounted into every container of the pod.
//! let names = dns::PodNames::new("web", att.ips.iter().map(|i| i.address.addr).collect());
//! dns::write_files(&root.join("pods/pod-1234/etc"), &names)?;
//! // ... and when the pod goes (idempotent; also after a restart or a half-done attach):
//! net.detach("pod-1234", Some(&ns.path))?;
//! netns::remove_path(&ns.path)?;
//! # Ok(()) }
//! ```
//!
//! Host-network pods skip all of this. At engine start, [`BuiltinNetwork::recover`]
//! repairs what a crash left (half-attached pods, orphan leases and veths, rules), and
//! [`cni::CniNetwork::gc`] removes CNI attachments of pods that no longer exist.
//!
//! # Modules
//! - [`netns`]: create/pin/remove namespaces (`<run>/netns/<name>`, shared-propagation
//!   mount point like `ip netns`), lo up.
//! - [`builtin`]: the built-in network: bridge, a veth per pod created straight into the
//!   pod as eth0, IPAM with leases on disk, default route, nftables masquerade, port
//!   mappings (TCP/UDP, optional host address) and hairpin in Wharf's own table.
//! - [`cni`]: configuration lists, plugin execution (deadline, errors with code/msg/
//!   details), ADD/DEL/CHECK/STATUS/GC/VERSION, libcni's result cache, per-network locks,
//!   runtime capabilities (portMappings, bandwidth, ipRanges, mac, ips, dns).
//! - [`network`]: one [`Network`] type over both.
//! - [`dns`]: resolv.conf (host's minus loopback servers, overridable), hosts, hostname.
//! - [`netlink`]: the small rtnetlink client the above use; [`nft`]: applying nftables
//!   rulesets through libnftables (dlopen'd) or the `nft` command.
//!
//! # Which namespace is "the host"
//! [`BuiltinConfig::host_netns`] and [`CniConfig::host_netns`] name the namespace where the
//! bridge, the host ends of veths, the firewall rules and the CNI plugins live. None (the
//! engine's case) is the caller's own namespace; tests and the benchmark pass a namespace
//! they created, so nothing touches the machine's own network.
//!
//! # Threads
//! Work inside another namespace runs on a short-lived helper thread that setns(2)es and
//! is joined before the call returns ([`netns::run_in`]); CNI plugins and the `nft`
//! fallback join the host namespace between fork and exec. No thread outlives a call and
//! the library keeps no threads in its state, so a single-threaded caller (the runtime's
//! clone path needs that) is single-threaded again after every call. Calls are safe from
//! several threads and processes at once: each network serializes its changes with a lock
//! file.
//!
//! # Files
//! - pinned namespaces: `<run>/netns/<name>` (default run dir /run/wharf);
//! - built-in network: `<state>/lock`, `<state>/ipam/<ip>` (lease = file, content = pod id),
//!   `<state>/pods/<pod>.json` (what was set up, written before the first change);
//! - CNI: `<cache>/results/<network>-<pod>-<ifname>` in libcni's format (default cache
//!   /var/lib/cni), `<lock dir>/<network>.lock`.

// Unsafe code lives in two modules only, where each block says why it is sound.
#![deny(unsafe_code)]

pub mod builtin;
pub mod cni;
pub mod counters;
pub mod dns;
pub mod error;
pub mod ipnet;
pub mod netlink;
pub mod netns;
pub mod network;
// libnftables is C, loaded with dlopen: resolving its symbols and calling them is unsafe.
#[allow(unsafe_code)]
pub mod nft;
// The system calls rustix cannot make safe: unshare(2), the pre_exec hook that joins a
// namespace in a forked child, and the setsockopt and ioctl rustix has no wrapper for.
#[allow(unsafe_code)]
pub mod sys;
pub mod sysctl;
pub mod types;

pub use builtin::{BuiltinConfig, BuiltinNetwork};
pub use cni::{CniConfig, CniNetwork};
pub use error::{Context, Error, Result};
pub use ipnet::IpNet;
pub use netns::{NetNs, NsHandle};
pub use network::{Network, Selection};
pub use types::{AttachOptions, Attachment, PortMapping, Protocol};
