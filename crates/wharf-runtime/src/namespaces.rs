//! Namespaces: which to create at clone time, which to join by path, and the id maps and
//! time offsets written from outside before the container's init proceeds.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use oci_spec::runtime::{LinuxIdMapping, LinuxNamespace, LinuxNamespaceType, Spec};

use crate::error::{Context, Error, Result, p};

/// The clone flag of a namespace type.
pub fn flag(t: LinuxNamespaceType) -> u64 {
    (match t {
        LinuxNamespaceType::Mount => libc::CLONE_NEWNS,
        LinuxNamespaceType::Cgroup => libc::CLONE_NEWCGROUP,
        LinuxNamespaceType::Uts => libc::CLONE_NEWUTS,
        LinuxNamespaceType::Ipc => libc::CLONE_NEWIPC,
        LinuxNamespaceType::User => libc::CLONE_NEWUSER,
        LinuxNamespaceType::Pid => libc::CLONE_NEWPID,
        LinuxNamespaceType::Network => libc::CLONE_NEWNET,
        LinuxNamespaceType::Time => libc::CLONE_NEWTIME,
    }) as u64
}

/// The name of a namespace type under /proc/PID/ns.
pub fn proc_name(t: LinuxNamespaceType) -> &'static str {
    match t {
        LinuxNamespaceType::Mount => "mnt",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "net",
        LinuxNamespaceType::Time => "time",
    }
}

/// The name of a namespace type as config.json spells it (for messages).
pub fn config_name(t: LinuxNamespaceType) -> &'static str {
    match t {
        LinuxNamespaceType::Mount => "mount",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "network",
        LinuxNamespaceType::Time => "time",
    }
}

/// The order in which namespaces are joined: the user namespace first (it grants the
/// capabilities the other joins need), the mount namespace last but one (paths resolve in it
/// afterwards), pid and time only affect children.
pub const JOIN_ORDER: [LinuxNamespaceType; 8] = [
    LinuxNamespaceType::User,
    LinuxNamespaceType::Ipc,
    LinuxNamespaceType::Uts,
    LinuxNamespaceType::Network,
    LinuxNamespaceType::Pid,
    LinuxNamespaceType::Time,
    LinuxNamespaceType::Cgroup,
    LinuxNamespaceType::Mount,
];

/// How the container's namespaces come to be.
#[derive(Debug, Default)]
pub struct Plan {
    /// CLONE_NEW* flags for the clone of the init.
    pub clone_flags: u64,
    /// Namespaces to join, opened, in join order (the init calls setns on each).
    pub join: Vec<(LinuxNamespaceType, OwnedFd)>,
    /// pid namespace to join before the clone (setns on the runtime affects only children).
    pub join_pid: Option<OwnedFd>,
    /// time namespace to join before the clone (likewise).
    pub join_time: Option<OwnedFd>,
    /// Unshare the cgroup namespace in the init after it joined its cgroups (v1/hybrid, where
    /// the namespace root is fixed when it is created).
    pub late_cgroup_ns: bool,
    /// A new time namespace is created by the runtime (unshare + offsets) before the clone.
    pub new_time: bool,
    /// The namespaces cannot all be had from one clone: a user namespace is joined while
    /// others are created (they must belong to it), or one is created while others are
    /// joined (those joins need the host's privileges). An intermediate process joins,
    /// unshares, then clones the init (see `intermediate.rs`).
    pub intermediate: bool,
}

impl Plan {
    /// Plan the namespaces of `spec`; `v2_clone_into_cgroup` says whether clone3 places the
    /// init in its cgroup (so a cgroup namespace created at clone time is rooted correctly).
    pub fn new(spec: &Spec, v2_clone_into_cgroup: bool) -> Result<Plan> {
        let nss = crate::spec::namespaces(spec);
        let mut plan = Plan::default();
        let joins_user = nss
            .iter()
            .any(|n| n.typ() == LinuxNamespaceType::User && n.path().is_some());
        let new_user = nss
            .iter()
            .any(|n| n.typ() == LinuxNamespaceType::User && n.path().is_none());
        let joins_other = nss
            .iter()
            .any(|n| n.typ() != LinuxNamespaceType::User && n.path().is_some());
        plan.intermediate =
            (joins_user && nss.iter().any(|n| n.path().is_none())) || (new_user && joins_other);
        for t in JOIN_ORDER {
            let Some(ns) = nss.iter().find(|n| n.typ() == t) else {
                continue;
            };
            match ns.path() {
                Some(path) => {
                    let fd = open_ns(ns, path)?;
                    match t {
                        LinuxNamespaceType::Pid => plan.join_pid = Some(fd),
                        LinuxNamespaceType::Time => plan.join_time = Some(fd),
                        _ => plan.join.push((t, fd)),
                    }
                }
                None => match t {
                    LinuxNamespaceType::Cgroup if !v2_clone_into_cgroup || plan.intermediate => {
                        plan.late_cgroup_ns = true
                    }
                    LinuxNamespaceType::Time => plan.new_time = true,
                    _ => plan.clone_flags |= flag(t),
                },
            }
        }
        Ok(plan)
    }
}

fn open_ns(ns: &LinuxNamespace, path: &Path) -> Result<OwnedFd> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| format!("open {} namespace {}", config_name(ns.typ()), p(path)))?;
    // A path that is not a namespace of the right type would be joined as nothing.
    let want = flag(ns.typ()) as i32;
    // SAFETY: NS_GET_NSTYPE takes no argument and returns the type of an nsfs fd.
    let got = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&fd), NS_GET_NSTYPE) };
    if got != want {
        return Err(Error::Config(format!(
            "linux.namespaces: {} is not a {} namespace",
            p(path),
            config_name(ns.typ())
        )));
    }
    Ok(fd)
}

const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// setns into an opened namespace.
pub fn join(t: LinuxNamespaceType, fd: &OwnedFd) -> Result<()> {
    // SAFETY: setns(2) on an open namespace descriptor we own; it changes only the calling
    // thread's namespaces (or fails with EINVAL for a mismatching type).
    let ret = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(fd), flag(t) as i32) };
    if ret == -1 {
        return Err(Error::os(
            format!("join {} namespace", config_name(t)),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The calling process's own namespace of type `name`, to return to after a temporary join.
pub fn own(name: &str) -> Result<OwnedFd> {
    rustix::fs::open(
        format!("/proc/self/ns/{name}"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| format!("open /proc/self/ns/{name}"))
}

/// Write uid_map and gid_map of `pid` from outside its user namespace.
pub fn write_id_maps(pid: i32, uid: &[LinuxIdMapping], gid: &[LinuxIdMapping]) -> Result<()> {
    let fmt = |maps: &[LinuxIdMapping]| {
        maps.iter()
            .map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size()))
            .collect::<String>()
    };
    for (file, maps) in [("uid_map", uid), ("gid_map", gid)] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, fmt(maps))
            .ctx(|| format!("write {path} (linux.{}Mappings)", &file[..3]))?;
    }
    Ok(())
}

/// Create a new time namespace for the runtime's future children, with the offsets of the
/// config (they can only be written before any process enters it).
pub fn unshare_time(
    offsets: &std::collections::HashMap<String, oci_spec::runtime::LinuxTimeOffset>,
) -> Result<()> {
    crate::sys::unshare(libc::CLONE_NEWTIME).ctx(|| "unshare the time namespace".into())?;
    let mut text = String::new();
    for (clock, off) in offsets {
        text.push_str(&format!(
            "{clock} {} {}\n",
            off.secs().unwrap_or(0),
            off.nanosecs().unwrap_or(0)
        ));
    }
    if !text.is_empty() {
        std::fs::write("/proc/self/timens_offsets", text)
            .ctx(|| "write /proc/self/timens_offsets (linux.timeOffsets)".into())?;
    }
    Ok(())
}

/// Restores a namespace of the runtime process when dropped (after a join or unshare that
/// only meant to affect the container's init).
pub struct Restore {
    t: LinuxNamespaceType,
    fd: OwnedFd,
}

impl Restore {
    /// Remember the current namespace of type `t`.
    pub fn save(t: LinuxNamespaceType) -> Result<Restore> {
        let name = match t {
            LinuxNamespaceType::Pid => "pid_for_children",
            LinuxNamespaceType::Time => "time_for_children",
            other => proc_name(other),
        };
        Ok(Restore { t, fd: own(name)? })
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // SAFETY: setns(2) back into the namespace this thread was in, by a descriptor we
        // opened before leaving it.
        let _ = unsafe {
            libc::setns(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd.as_fd()),
                flag(self.t) as i32,
            )
        };
    }
}
