//! A pod's sandbox without a pause process: its network, IPC and UTS namespaces are created
//! and pinned by bind-mounting their nsfs files, so they outlive any process and containers
//! join them by path; /dev/shm is a tmpfs of the pod; the pod's cgroup parents its
//! containers'. Every step is undone when a later one fails, and teardown is idempotent.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::cgroup_driver::PodUnit;
use crate::db::Sandbox;
use crate::error::{Context, Error, Result};
use crate::model::{NetworkMode, PodSpec};
use crate::paths::Paths;

/// How pods are networked (the engine's network configuration).
#[derive(Debug, Clone, Default)]
pub struct NetOptions {
    /// What a pod asking for the default network gets.
    pub default_network: DefaultNetwork,
    /// CNI configuration directories (default /etc/cni/net.d).
    pub cni_conf_dirs: Option<Vec<PathBuf>>,
    /// CNI plugin directories (default /opt/cni/bin, /usr/lib/cni).
    pub cni_bin_dirs: Option<Vec<PathBuf>>,
    /// libcni's cache (default /var/lib/cni).
    pub cni_cache_dir: Option<PathBuf>,
    /// The namespace that plays "the host" for the built-in bridge and CNI plugins (None:
    /// the engine's own; tests pass one they made).
    pub host_netns: Option<PathBuf>,
    /// The resolvers the DNS responders of user networks forward to (`ip:port`; None: the
    /// pod's `--dns` servers, else the host's), as tests point them at one of their own.
    pub dns_upstream: Option<Vec<String>>,
}

/// The network pods get when they name none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DefaultNetwork {
    /// Wharf's own bridge (`wharf0`): the CLI's default, whatever another tool drops into
    /// the CNI configuration directory (podman's bridge there once took over `wharf play`,
    /// and gave pods two routes for one subnet).
    #[default]
    Builtin,
    /// The first network of the CNI configuration directories (kubelet's convention, for
    /// the CRI daemon), the built-in bridge when there is none.
    FirstCni,
    /// The CNI network of this name.
    Named(String),
}

impl DefaultNetwork {
    /// From the config file's `network.default`: `wharf`/`builtin`, `cni` (the first CNI
    /// network), or a CNI network's name.
    pub fn parse(name: &str) -> DefaultNetwork {
        match name {
            "" | "wharf" | "builtin" => DefaultNetwork::Builtin,
            "cni" => DefaultNetwork::FirstCni,
            n => DefaultNetwork::Named(n.to_string()),
        }
    }
}

/// The network of a pod, opened with the engine's settings.
pub fn network(
    paths: &Paths,
    net: &NetOptions,
    mode: &NetworkMode,
) -> Result<Option<wharf_net::Network>> {
    let sel = match mode {
        NetworkMode::Default => match &net.default_network {
            DefaultNetwork::Builtin => wharf_net::Selection::Builtin,
            DefaultNetwork::FirstCni => wharf_net::Selection::Default,
            DefaultNetwork::Named(n) => wharf_net::Selection::Cni(n.clone()),
        },
        NetworkMode::Named(n) if n == "wharf" || n == "builtin" => wharf_net::Selection::Builtin,
        NetworkMode::Named(n) => match crate::network_records::load(paths, n)? {
            // A user network: the built-in bridge, configured as its record says.
            Some(u) => {
                let cfg =
                    crate::network_records::builtin_config(paths, &u, net.host_netns.clone())?;
                return Ok(Some(wharf_net::Network::Builtin(
                    wharf_net::BuiltinNetwork::new(cfg)?,
                )));
            }
            None => wharf_net::Selection::Cni(n.clone()),
        },
        NetworkMode::None | NetworkMode::Host => return Ok(None),
    };
    let mut cni = wharf_net::CniConfig::new(paths.root.join("net/cni"));
    if let Some(d) = &net.cni_conf_dirs {
        cni.conf_dirs = d.clone();
    }
    if let Some(d) = &net.cni_bin_dirs {
        cni.bin_dirs = d.clone();
    }
    if let Some(d) = &net.cni_cache_dir {
        cni.cache_dir = d.clone();
    }
    cni.host_netns = net.host_netns.clone();
    let mut builtin = wharf_net::BuiltinConfig::new(paths.root.join("net/builtin"));
    builtin.host_netns = net.host_netns.clone();
    Ok(Some(wharf_net::Network::open(&sel, cni, builtin)?))
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// Create IPC and/or UTS namespaces (per `flags`) and pin them at `ipc` / `uts`: a
/// short-lived thread unshares them (IPC and UTS namespaces belong to a thread, and a
/// multi-threaded process may unshare them), sets the pod's hostname there and bind-mounts
/// its own nsfs files, then ends.
///
/// A thread rather than a forked helper: a child would inherit the engine's open files,
/// among them the pod's lock, and keep that lock held for a moment after a killed CLI is
/// gone, so that a reconciling process would take the half-made pod for one still at work.
fn pin_namespaces(
    flags: i32,
    ipc: Option<&Path>,
    uts: Option<&Path>,
    hostname: &str,
) -> Result<()> {
    for p in [ipc, uts].into_iter().flatten() {
        std::fs::File::create(p).ctx(|| format!("create namespace pin {}", p.display()))?;
    }
    let host =
        CString::new(hostname).map_err(|_| Error::Invalid(format!("hostname {hostname:?}")))?;
    std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            // SAFETY: unshare(2) of IPC/UTS changes only the calling thread, which ends here.
            if unsafe { libc::unshare(flags) } != 0 {
                return Err(Error::Os {
                    what: "unshare the pod's IPC/UTS namespaces".into(),
                    err: std::io::Error::last_os_error(),
                });
            }
            if flags & libc::CLONE_NEWUTS != 0
                // SAFETY: a valid C string and its length; this thread's own UTS namespace.
                && unsafe { libc::sethostname(host.as_ptr(), host.as_bytes().len()) } != 0
            {
                return Err(Error::Os {
                    what: format!("set the pod's hostname {hostname:?}"),
                    err: std::io::Error::last_os_error(),
                });
            }
            crate::hooks::step("pinning ipc/uts");
            for (name, path) in [("ipc", ipc), ("uts", uts)] {
                let Some(path) = path else { continue };
                let src = PathBuf::from(format!("/proc/thread-self/ns/{name}"));
                wharf_runtime::sys::mount(
                    Some(&cstr(&src)),
                    &cstr(path),
                    None,
                    libc::MS_BIND,
                    None,
                )
                .ctx(|| format!("pin the pod's {name} namespace at {}", path.display()))?;
            }
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| {
            Err(Error::Other(
                "could not create the pod's IPC/UTS namespaces: the helper thread panicked".into(),
            ))
        })
    })
}

fn unpin(path: &str) -> Result<()> {
    let p = Path::new(path);
    match rustix::mount::unmount(p, rustix::mount::UnmountFlags::DETACH) {
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => {
            return Err(Error::Os {
                what: format!("unmount {path}"),
                err: e.into(),
            });
        }
    }
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Os {
            what: format!("remove {path}"),
            err: e,
        }),
    }
}

/// Everything a sandbox setup needs from the engine.
pub struct Setup<'a> {
    /// Directories.
    pub paths: &'a Paths,
    /// Network settings.
    pub net: &'a NetOptions,
    /// Cgroup parent of all pods ("/wharf", or a slice with systemd).
    pub cgroup_parent: &'a str,
    /// What places the pod's cgroup.
    pub cgroup_driver: crate::cgroup_driver::CgroupDriver,
    /// systemd, for the systemd driver.
    pub systemd: &'a crate::cgroup_driver::SystemdLink,
}

/// Longest hostname the kernel takes (HOST_NAME_MAX).
pub const MAX_HOSTNAME: usize = 64;

/// A pod's hostname: the one its spec names, else its name (cut to what the kernel takes).
pub fn pod_hostname<'a>(spec: &'a PodSpec, name: &'a str) -> &'a str {
    match &spec.hostname {
        Some(h) => h,
        None => {
            let mut end = name.len().min(MAX_HOSTNAME);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            name[..end].trim_end_matches(['.', '-', '_'])
        }
    }
}

/// The cgroup of pod `id` (and its systemd scope with that driver): below its own cgroup
/// parent when it names one (kubelet's pod cgroup, which stays kubelet's), else below the
/// engine's.
pub fn pod_cgroup(s: &Setup<'_>, spec: &PodSpec, id: &str) -> Result<(String, Option<PodUnit>)> {
    crate::cgroup_driver::place(
        s.cgroup_driver,
        s.cgroup_parent,
        spec.cgroup_parent.as_deref(),
        id,
    )
}

/// Create the sandbox of pod `id` (named `name`); `owner`, for a standalone container's
/// pod, names the container it is made for. On error, what was created is removed.
pub fn create(
    s: &Setup<'_>,
    id: &str,
    name: &str,
    spec: &PodSpec,
    owner: Option<&str>,
) -> Result<Sandbox> {
    let (cgroup, unit) = pod_cgroup(s, spec, id)?;
    let mut sb = Sandbox {
        cgroup_owner: owner
            .filter(|_| flat_cgroup(spec, unit.is_some()))
            .map(str::to_string),
        cgroup,
        unit,
        shim_dir: s.paths.shim_dir(id).display().to_string(),
        ..Default::default()
    };
    match create_steps(s, id, name, spec, &mut sb) {
        Ok(()) => Ok(sb),
        Err(e) => {
            let _ = destroy(s, id, spec, &sb);
            Err(e)
        }
    }
}

/// Whether a standalone container's pod takes its container's cgroup (see
/// [`Sandbox::cgroup_owner`]): with the cgroupfs driver (a systemd scope holds the shim
/// that starts it), and with no limits or cgroup parent of the pod's own.
fn flat_cgroup(spec: &PodSpec, systemd_unit: bool) -> bool {
    !systemd_unit && spec.resources.is_none() && spec.cgroup_parent.is_none()
}

/// The cgroup of container `id` in the pod of `sb` (absolute cgroupsPath form): one below
/// the pod's; in a pod whose cgroup is its owner's, the pod's for the owner and one beside
/// it for another.
pub fn container_cgroup(sb: &Sandbox, id: &str) -> String {
    let pod = sb.cgroup.trim_end_matches('/');
    match sb.cgroup_owner.as_deref() {
        Some(owner) if owner == id => pod.to_string(),
        Some(_) => format!("{pod}-{id}"),
        None => format!("{pod}/{id}"),
    }
}

/// The cgroup leaf a pod's shim joins: below the pod's cgroup, as CRI-O puts conmon in the
/// pod's; for a pod whose cgroup is its container's, one below the cgroup parent that such
/// shims share (neither frozen, killed nor limited with the container).
pub fn shim_cgroup(sb: &Sandbox) -> String {
    let base = match &sb.cgroup_owner {
        Some(_) => parent_cgroup(&sb.cgroup),
        None => sb.cgroup.trim_end_matches('/'),
    };
    format!("{base}/wharf-shim")
}

/// The cgroup `cgroup` is below ("" for one at the root).
fn parent_cgroup(cgroup: &str) -> &str {
    cgroup
        .trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(parent, _)| parent)
}

fn create_steps(
    s: &Setup<'_>,
    id: &str,
    name: &str,
    spec: &PodSpec,
    sb: &mut Sandbox,
) -> Result<()> {
    let hostname = pod_hostname(spec, name).to_string();
    let run = s.paths.pod_run(id);
    std::fs::create_dir_all(run.join("ns")).ctx(|| format!("create {}", run.display()))?;
    std::fs::create_dir_all(s.paths.shim_dir(id)).ctx(|| "create the shim directory".into())?;
    crate::hooks::step("dirs");
    // Cgroup: the pod's limits apply to all its containers together. A systemd scope is
    // made with the pod's shim, its first process (cgroup_driver.rs); its limits are
    // checked now.
    if sb.cgroup_owner.is_some() {
        // The container's cgroup is made with it; the parent, which its shim joins, now.
        let parent = parent_cgroup(&sb.cgroup);
        if !parent.is_empty() {
            let cg = crate::cgroup_driver::resolve(parent, id)?;
            if !cg.paths.values().all(|d| d.is_dir()) {
                cg.create()?;
            }
        }
    } else if sb.unit.is_none() {
        let cg = crate::cgroup_driver::resolve(&sb.cgroup, id)?;
        cg.create()?;
        if let Some(res) = &spec.resources {
            wharf_runtime::cgroups::apply_resources(&cg, res)?;
        }
    } else if let Some(res) = &spec.resources {
        wharf_systemd::split_resources(res)?;
    }
    crate::hooks::step("cgroup");
    // IPC and UTS namespaces, pinned; with the pod's own user namespace, which owns them
    // and its network namespace.
    let ipc = (!spec.host_ipc).then(|| run.join("ns/ipc"));
    let uts = run.join("ns/uts");
    let mut userns_net = None;
    if let Some(userns) = &spec.userns {
        let user = run.join("ns/user");
        sb.userns = Some(user.display().to_string());
        let pins = crate::userns::Pins {
            user: &user,
            ipc: ipc.as_deref(),
            uts: &uts,
        };
        let own_net = spec.network != NetworkMode::Host;
        userns_net = crate::userns::create_namespaces(userns, &pins, &hostname, own_net)?;
    } else {
        let flags = libc::CLONE_NEWUTS | if ipc.is_some() { libc::CLONE_NEWIPC } else { 0 };
        pin_namespaces(flags, ipc.as_deref(), Some(&uts), &hostname)?;
    }
    crate::hooks::step("pinned ipc/uts");
    sb.ipcns = ipc.map(|p| p.display().to_string());
    sb.utsns = Some(uts.display().to_string());
    // The files the pod's root must own: its host uid and gid (0 without a user namespace).
    let (root_uid, root_gid) = spec
        .userns
        .as_ref()
        .and_then(|u| u.root())
        .unwrap_or((0, 0));
    let owner = if spec.userns.is_some() {
        format!(",uid={root_uid},gid={root_gid}")
    } else {
        String::new()
    };
    // /dev/shm of the pod.
    if !spec.host_ipc {
        let shm = run.join("shm");
        std::fs::create_dir_all(&shm).ctx(|| format!("create {}", shm.display()))?;
        let size = spec.shm_size.unwrap_or(64 << 20);
        let data = CString::new(format!("mode=1777,size={size}{owner}")).unwrap();
        wharf_runtime::sys::mount(
            Some(c"shm"),
            &cstr(&shm),
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(&data),
        )
        .ctx(|| format!("mount the pod's /dev/shm at {}", shm.display()))?;
        sb.shm = Some(shm.display().to_string());
    }
    crate::hooks::step("shm");
    // Network.
    let mut ips = Vec::new();
    if spec.network != NetworkMode::Host {
        let ns = match &userns_net {
            Some(fd) => wharf_net::netns::pin_existing(&s.paths.run, id, fd.0.as_fd())?,
            None => wharf_net::netns::create(&s.paths.run, id)?,
        };
        drop(userns_net.take());
        sb.netns = Some(ns.path.display().to_string());
        crate::hooks::step("netns");
        if let Some(net) = network(s.paths, s.net, &spec.network)? {
            let opts = wharf_net::AttachOptions {
                port_mappings: spec
                    .ports
                    .iter()
                    .map(|p| {
                        Ok(wharf_net::PortMapping {
                            host_port: p.host_port,
                            container_port: p.container_port,
                            protocol: match p.protocol.as_str() {
                                "udp" => wharf_net::Protocol::Udp,
                                "sctp" => wharf_net::Protocol::Sctp,
                                _ => wharf_net::Protocol::Tcp,
                            },
                            host_ip: match &p.host_ip {
                                Some(ip) => Some(ip.parse().map_err(|_| {
                                    Error::Invalid(format!(
                                        "invalid host address {ip:?} in a port mapping"
                                    ))
                                })?),
                                None => None,
                            },
                        })
                    })
                    .collect::<Result<_>>()?,
                hostname: Some(hostname.clone()),
                ..Default::default()
            };
            sb.network = net.name().to_string();
            let att = net.attach(id, &ns.path, &opts)?;
            ips = att.ips.iter().map(|i| i.address.addr).collect();
        } else if !spec.ports.is_empty() {
            return Err(Error::Invalid(
                "port mappings need a network (not --network none)".into(),
            ));
        }
    }
    sb.ips = ips.iter().map(|i| i.to_string()).collect();
    crate::network_connect::attach_all(s, id, &spec.extra_networks, &hostname, sb)?;
    crate::hooks::step("network attached");
    // A pod on a user network asks its shim's DNS responder (docker's embedded DNS), which
    // answers the network's names and forwards the rest to the pod's servers or the host's.
    let user_network = !spec.extra_networks.is_empty()
        || matches!(&spec.network, NetworkMode::Named(n)
            if crate::network_records::load(s.paths, n).ok().flatten().is_some());
    if user_network && sb.netns.is_some() {
        let upstream = match &s.net.dns_upstream {
            // ip:port, or an address alone for port 53.
            Some(u) => u
                .iter()
                .map(|a| match a.parse::<std::net::IpAddr>() {
                    Ok(ip) => std::net::SocketAddr::new(ip, 53).to_string(),
                    Err(_) => a.clone(),
                })
                .collect(),
            None if !spec.dns.servers.is_empty() => spec
                .dns
                .servers
                .iter()
                .filter_map(|ip| ip.parse::<std::net::IpAddr>().ok())
                .map(|ip| std::net::SocketAddr::new(ip, 53).to_string())
                .collect(),
            None => wharf_net::dns::host_resolvers()
                .into_iter()
                .map(|ip| std::net::SocketAddr::new(ip, 53).to_string())
                .collect(),
        };
        sb.dns_upstream = Some(upstream);
    }
    // Name files, on a small tmpfs of the pod's own: the containers write them (they are
    // read-write binds, as docker's are), and what they write must neither fill the host's
    // /run nor grow what the engine reads back.
    let etc = s.paths.pod_etc(id);
    mount_etc(&etc, &owner)?;
    crate::hooks::step("etc tmpfs");
    let mut names = wharf_net::dns::PodNames::new(hostname, ips);
    if sb.dns_upstream.is_some() {
        names.dns.servers = Some(vec![std::net::IpAddr::V4(wharf_shim::daemon::dns::ADDRESS)]);
        if spec.dns.options.is_empty() {
            names.dns.options = Some(vec!["ndots:0".into()]);
        }
    } else if !spec.dns.servers.is_empty() {
        names.dns.servers = Some(
            spec.dns
                .servers
                .iter()
                .map(|s| {
                    s.parse()
                        .map_err(|_| Error::Invalid(format!("invalid DNS server {s:?}")))
                })
                .collect::<Result<_>>()?,
        );
    }
    if !spec.dns.searches.is_empty() {
        names.dns.searches = Some(spec.dns.searches.clone());
    }
    if !spec.dns.options.is_empty() {
        names.dns.options = Some(spec.dns.options.clone());
    }
    for (ip, hosts) in &spec.extra_hosts {
        if let Ok(ip) = ip.parse() {
            names.extra_hosts.push((ip, hosts.clone()));
        }
    }
    wharf_net::dns::write_files(&etc, &names)?;
    if spec.userns.is_some() {
        chown_files(&etc, root_uid, root_gid)?;
    }
    crate::hooks::step("dns files");
    sb.etc_dir = Some(etc.display().to_string());
    Ok(())
}

/// The size of a pod's name-file tmpfs: room for the hosts file of a user network of a few
/// thousand pods, and all a container can write into its hosts, resolv.conf and hostname
/// (past it, ENOSPC inside the container and nowhere else).
pub const ETC_SIZE: u64 = 1 << 20;

/// Give the files of directory `dir` (the pod's name files) to the pod's root.
fn chown_files(dir: &Path, uid: u32, gid: u32) -> Result<()> {
    for e in std::fs::read_dir(dir).ctx(|| format!("read {}", dir.display()))? {
        let path = e.ctx(|| format!("read {}", dir.display()))?.path();
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
            .ctx(|| format!("give {} to the pod's root", path.display()))?;
    }
    Ok(())
}

/// Mount the pod's name-file tmpfs at `etc` (made first); `owner` adds the `uid=`/`gid=`
/// options of a pod with its own user namespace.
fn mount_etc(etc: &Path, owner: &str) -> Result<()> {
    std::fs::create_dir_all(etc).ctx(|| format!("create {}", etc.display()))?;
    let data = CString::new(format!("mode=0755,size={ETC_SIZE},nr_inodes=64{owner}")).unwrap();
    wharf_runtime::sys::mount(
        Some(c"wharf-etc"),
        &cstr(etc),
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(&data),
    )
    .ctx(|| format!("mount the pod's name files at {}", etc.display()))
}

/// Remove everything of a pod's sandbox: network attachment, pinned namespaces, /dev/shm,
/// cgroup, directories. Idempotent, and tolerant of a half-made sandbox.
pub fn destroy(s: &Setup<'_>, id: &str, spec: &PodSpec, sb: &Sandbox) -> Result<()> {
    let net = start_network_teardown(s, id, spec, sb);
    let rest = destroy_all_but_network(s, id, sb);
    let net = net.finish();
    rest.and(net)
}

/// A network teardown running on its own thread.
pub struct NetworkTeardown(Option<std::thread::JoinHandle<Result<()>>>);

impl NetworkTeardown {
    /// Wait for it and return its outcome.
    pub fn finish(self) -> Result<()> {
        match self.0 {
            None => Ok(()),
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(Error::Other("network teardown panicked".into()))),
        }
    }
}

/// Start detaching the pod from its network and removing its network namespace, on a
/// thread of its own: deleting a veth waits for the kernel (RCU grace periods, ~10 ms),
/// time the rest of a pod's removal can use.
pub fn start_network_teardown(
    s: &Setup<'_>,
    id: &str,
    spec: &PodSpec,
    sb: &Sandbox,
) -> NetworkTeardown {
    if spec.network == NetworkMode::Host {
        return NetworkTeardown(None);
    }
    let (paths, net, mode) = (s.paths.clone(), s.net.clone(), spec.network.clone());
    let id = id.to_string();
    let netns = sb.netns.clone();
    let extra: Vec<String> = sb
        .extra_networks
        .iter()
        .map(|a| a.network.clone())
        .collect();
    NetworkTeardown(Some(std::thread::spawn(move || {
        crate::hooks::step("destroy: network thread started");
        let mut first: Option<Error> = None;
        for name in &extra {
            let ns = netns.as_deref().map(Path::new);
            if let Err(e) = crate::network_connect::detach(&paths, &net, &id, ns, name) {
                first.get_or_insert(e);
            }
        }
        if let Ok(Some(network)) = network(&paths, &net, &mode)
            && let Err(e) = network.detach(&id, netns.as_deref().map(Path::new))
        {
            first = Some(e.into());
        }
        crate::hooks::step("destroy: network detached");
        let path = netns.unwrap_or_else(|| paths.netns_dir().join(&id).display().to_string());
        if let Err(e) = wharf_net::netns::remove_path(Path::new(&path)) {
            first.get_or_insert(e.into());
        }
        first.map_or(Ok(()), Err)
    })))
}

/// Everything of [`destroy`] but the network.
pub fn destroy_all_but_network(s: &Setup<'_>, id: &str, sb: &Sandbox) -> Result<()> {
    let mut first: Option<Error> = None;
    let mut keep = |r: Result<()>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    let run = s.paths.pod_run(id);
    for p in [
        run.join("ns/ipc"),
        run.join("ns/uts"),
        run.join("ns/pid"),
        run.join("ns/user"),
    ] {
        keep(unpin(&p.display().to_string()));
    }
    for tmpfs in [run.join("shm"), s.paths.pod_etc(id)] {
        match rustix::mount::unmount(&tmpfs, rustix::mount::UnmountFlags::DETACH) {
            Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => keep(Err(Error::Os {
                what: format!("unmount {}", tmpfs.display()),
                err: e.into(),
            })),
        }
    }
    crate::hooks::step("destroy: unpinned");
    if sb.unit.is_some() {
        keep(s.systemd.remove(sb));
    }
    if sb.cgroup_owner.is_some() {
        // Its shim is not in the cgroup killed below: one that did not go when asked is
        // killed by its recorded pid.
        kill_shim(sb);
    }
    // The pod's cgroup, and those of the containers that joined a pod whose cgroup is its
    // owner's (beside it): what still runs in them is killed, then they go.
    let own = (!sb.cgroup.is_empty()).then(|| (sb.cgroup.clone(), id));
    let joined = sb
        .joined
        .iter()
        .map(|j| (container_cgroup(sb, j), j.as_str()));
    for (path, name) in own.into_iter().chain(joined) {
        if let Ok(cg) = crate::cgroup_driver::resolve(&path, name) {
            let _ = cg.signal_all(libc::SIGKILL);
            keep(cg.destroy().map_err(Into::into));
        }
    }
    if sb.cgroup_owner.is_some() {
        remove_shared_shim_leaf(sb, id);
    }
    crate::hooks::step("destroy: cgroup removed");
    match std::fs::remove_dir_all(&run) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => keep(Err(Error::Os {
            what: format!("remove {}", run.display()),
            err: e,
        })),
    }
    first.map_or(Ok(()), Err)
}

/// Kill the pod's shim if it still runs (the pid it recorded, if that process is still
/// the one that recorded it).
fn kill_shim(sb: &Sandbox) {
    if let Some(fd) = crate::supervisor::shim_pidfd(Path::new(&sb.shim_dir))
        && rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL).is_ok()
    {
        // Gone from its cgroup before the shared leaf is removed below.
        crate::supervisor::wait_for_exit(&fd);
    }
}

/// Remove the leaf that shims of one-container pods share once no shim is left in it (the
/// kernel refuses while one is: EBUSY), so that an engine with no pods leaves no cgroup.
/// It exists on the unified hierarchy only: on v1 hierarchies such shims sit in the cgroup
/// parent itself (the shim's `join_cgroup`).
fn remove_shared_shim_leaf(sb: &Sandbox, id: &str) {
    if let Ok(cg) = crate::cgroup_driver::resolve(&shim_cgroup(sb), id)
        && let Some(leaf) = cg.paths.get(wharf_runtime::cgroups::UNIFIED)
    {
        let _ = std::fs::remove_dir(leaf);
    }
}

/// Remove pod `id`'s directory (`<root>/pods/<id>`: its record, its volumes, its marks),
/// once the pod itself goes. A sandbox that dies leaves it: the pod may be restored with
/// its disk volumes. The volumes' mounts go first, so nothing is deleted through one.
pub fn remove_pod_dir(s: &Setup<'_>, id: &str) -> Result<()> {
    wharf_shim::liveness::forget(&s.paths.shims_alive(), id);
    let dir = s.paths.pod_dir(id);
    crate::pod_volumes::remove_volumes(&dir.join(crate::pod_volumes::VOLUMES))?;
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Os {
            what: format!("remove {}", dir.display()),
            err: e,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_of_one_container_places_it_in_its_cgroup_and_others_and_the_shim_beside() {
        let nested = Sandbox {
            cgroup: "/wharf/p1".into(),
            ..Default::default()
        };
        assert_eq!(container_cgroup(&nested, "c1"), "/wharf/p1/c1");
        assert_eq!(shim_cgroup(&nested), "/wharf/p1/wharf-shim");
        let flat = Sandbox {
            cgroup: "/wharf/p2".into(),
            cgroup_owner: Some("c2".into()),
            ..Default::default()
        };
        assert_eq!(container_cgroup(&flat, "c2"), "/wharf/p2");
        assert_eq!(container_cgroup(&flat, "c3"), "/wharf/p2-c3");
        assert_eq!(shim_cgroup(&flat), "/wharf/wharf-shim");
    }

    #[test]
    fn only_a_cgroupfs_pod_with_no_limits_or_parent_of_its_own_takes_its_containers() {
        let plain = PodSpec::default();
        assert!(flat_cgroup(&plain, false));
        assert!(!flat_cgroup(&plain, true), "a systemd scope holds the shim");
        let limited = PodSpec {
            resources: Some(Default::default()),
            ..Default::default()
        };
        assert!(!flat_cgroup(&limited, false));
        let kubelets = PodSpec {
            cgroup_parent: Some("/kubepods/pod1".into()),
            ..Default::default()
        };
        assert!(!flat_cgroup(&kubelets, false));
    }
}
