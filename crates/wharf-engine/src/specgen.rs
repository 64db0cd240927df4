//! Turning an image's config and a container spec into the OCI config.json the runtime runs:
//! the defaults users of docker, containerd and podman expect (capability set, seccomp
//! profile, masked and read-only /proc paths, /dev/shm of the pod), the image's Entrypoint,
//! Cmd, Env, WorkingDir and User, and the pod's shared namespaces.

use std::path::{Path, PathBuf};

use oci_spec::image::ImageConfiguration;
use oci_spec::runtime::{
    Capabilities, Linux, LinuxCapabilities, LinuxCpu, LinuxDevice, LinuxDeviceCgroup,
    LinuxDeviceType, LinuxMemory, LinuxNamespace, LinuxNamespaceType, LinuxPids, LinuxResources,
    LinuxSeccomp, Mount, PosixRlimit, PosixRlimitBuilder, PosixRlimitType, Process, Root, Spec,
    UserBuilder,
};
use serde_json::json;

use crate::db::Sandbox;
use crate::error::{Error, Result};
use crate::model::{ContainerSpec, SeccompMode};

/// docker's and containerd's default capabilities.
pub const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

const MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

const READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Everything config.json depends on.
pub struct Inputs<'a> {
    /// The container's id.
    pub id: &'a str,
    /// What was asked for.
    pub spec: &'a ContainerSpec,
    /// The image's config.
    pub image: &'a ImageConfiguration,
    /// Where its rootfs is mounted (host path).
    pub rootfs: &'a Path,
    /// Its pod's sandbox.
    pub sandbox: &'a Sandbox,
    /// The pod spec (shared namespaces).
    pub pod: &'a crate::model::PodSpec,
    /// The pod's name (hostname fallback, HOSTNAME env).
    pub hostname: &'a str,
    /// Raise a negative oom_score_adj to 0.
    pub restrict_oom_score_adj: bool,
    /// The pid namespace to join instead of the pod's choice (`/proc/<pid>/ns/pid` of the
    /// target container's process).
    pub pid_ns: Option<&'a str>,
}

/// The capabilities in this process's bounding set (/proc/self/status `CapBnd`): no
/// container gets one the engine cannot pass on (hosts and sandboxes that run Wharf
/// without CAP_SYS_RESOURCE, for one), since the runtime's capset would fail.
pub(crate) fn bounding_set() -> u64 {
    own_caps("CapBnd").unwrap_or(u64::MAX)
}

/// One of this process's capability sets (`CapBnd`, `CapEff`, ... of /proc/self/status).
pub(crate) fn own_caps(set: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(set)?.strip_prefix(':'))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// The capability list after the spec's adds and drops ("ALL" allowed in both).
/// Privileged and "ALL" mean every capability the engine holds (as podman has it); a
/// capability named that the engine does not hold is an error naming it.
pub fn capabilities(spec: &ContainerSpec) -> Result<Vec<String>> {
    let held = bounding_set();
    let is_held = |c: &str| {
        wharf_runtime::caps::number_of_name(c).is_some_and(|n| n < 64 && held & (1 << n) != 0)
    };
    let all: Vec<String> = wharf_runtime::caps::NAMES
        .iter()
        .take(wharf_runtime::caps::last_cap() as usize + 1)
        .filter(|c| is_held(c))
        .map(|s| s.to_string())
        .collect();
    if spec.privileged {
        return Ok(all);
    }
    let norm = |c: &str| -> Result<String> {
        if c.eq_ignore_ascii_case("ALL") {
            return Ok("ALL".into());
        }
        let n = wharf_runtime::caps::number_of_name(c)
            .ok_or_else(|| Error::Invalid(format!("unknown capability {c:?}")))?;
        Ok(wharf_runtime::caps::NAMES[n as usize].to_string())
    };
    let drops: Vec<String> = spec
        .cap_drop
        .iter()
        .map(|c| norm(c))
        .collect::<Result<_>>()?;
    let adds: Vec<String> = spec
        .cap_add
        .iter()
        .map(|c| norm(c))
        .collect::<Result<_>>()?;
    let mut caps: Vec<String> = if drops.iter().any(|d| d == "ALL") {
        Vec::new()
    } else {
        DEFAULT_CAPS
            .iter()
            .map(|s| s.to_string())
            .filter(|c| !drops.contains(c) && is_held(c))
            .collect()
    };
    if adds.iter().any(|a| a == "ALL") {
        caps = all;
    } else {
        for a in adds {
            if !is_held(&a) {
                return Err(Error::Invalid(format!(
                    "capability {a} cannot be granted on this host: Wharf itself does not \
                     hold it (it is not in Wharf's bounding set)"
                )));
            }
            if !caps.contains(&a) {
                caps.push(a);
            }
        }
    }
    Ok(caps)
}

/// Whether the kernel accounts swap for the pod's cgroup: v1 has memory.memsw files in its
/// memory hierarchy (swapaccount=1), v2 memory.swap.max below the root.
fn swap_accounted(pod_cgroup: &str) -> bool {
    let Ok(layout) = wharf_runtime::cgroups::detect() else {
        return false;
    };
    if let Some(memory) = layout.v1.get("memory") {
        return memory.join("memory.memsw.limit_in_bytes").exists();
    }
    // A pod's systemd scope is made with its shim, which may not run yet: then the nearest
    // cgroup that exists answers (every non-root cgroup has the file when swap is counted).
    match &layout.unified {
        Some(u) if layout.is_v2() => Path::new(pod_cgroup.trim_start_matches('/'))
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .map(|a| u.join(a))
            .find(|d| d.is_dir())
            .is_some_and(|d| d.join("memory.swap.max").exists()),
        _ => false,
    }
}

/// The process arguments: Kubernetes/docker rules for entrypoint and command.
pub fn args(spec: &ContainerSpec, image: &ImageConfiguration) -> Result<Vec<String>> {
    let cfg = image.config().clone().unwrap_or_default();
    let (entry, cmd) = match &spec.entrypoint {
        // An explicit entrypoint drops the image's Cmd too.
        Some(e) => (e.clone(), spec.command.clone().unwrap_or_default()),
        None => (
            cfg.entrypoint().clone().unwrap_or_default(),
            spec.command
                .clone()
                .unwrap_or_else(|| cfg.cmd().clone().unwrap_or_default()),
        ),
    };
    let args: Vec<String> = entry.into_iter().chain(cmd).collect();
    if args.is_empty() {
        return Err(Error::Invalid(format!(
            "image {} has no Entrypoint or Cmd and no command was given",
            spec.image
        )));
    }
    Ok(args)
}

/// Read a file of the container's root filesystem (the user database) the one safe way
/// ([`wharf_sys::contained`]): resolved inside the root, a regular file only, at most
/// [`wharf_sys::contained::USER_DB_LIMIT`] bytes. None when there is no such file.
fn read_in_rootfs(rootfs: &Path, path: &str) -> Result<Option<String>> {
    use wharf_sys::contained::{self, ReadError};
    match contained::read_in_dir(rootfs, Path::new(path), contained::USER_DB_LIMIT) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(ReadError::NotFound) => Ok(None),
        Err(e) => Err(Error::Invalid(format!(
            "{path} in the container's root filesystem {e}"
        ))),
    }
}

fn lookup(db: Option<&str>, name: &str, id_field: usize) -> Option<(u32, Option<u32>)> {
    db?.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > id_field && f[0] == name).then(|| {
            let id = f[id_field].parse().ok()?;
            let gid = f.get(3).and_then(|g| g.parse().ok());
            Some((id, gid))
        })?
    })
}

/// Resolve "user[:group]" (names or ids) against the container's /etc/passwd and /etc/group;
/// returns uid, gid and the user's home.
pub fn resolve_user(rootfs: &Path, user: &str) -> Result<(u32, u32, Option<String>)> {
    let passwd = read_in_rootfs(rootfs, "/etc/passwd")?;
    let group = read_in_rootfs(rootfs, "/etc/group")?;
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let (uid, user_gid) = match u.parse::<u32>() {
        Ok(uid) => {
            let gid = passwd.as_deref().and_then(|p| {
                p.lines().find_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    (f.len() > 3 && f[2].parse::<u32>().ok() == Some(uid))
                        .then(|| f[3].parse().ok())?
                })
            });
            (uid, gid)
        }
        Err(_) => lookup(passwd.as_deref(), u, 2).ok_or_else(|| {
            Error::Invalid(format!("user {u:?} not found in the image's /etc/passwd"))
        })?,
    };
    let gid = match g {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => lookup(group.as_deref(), g, 2)
                .map(|(gid, _)| gid)
                .ok_or_else(|| {
                    Error::Invalid(format!("group {g:?} not found in the image's /etc/group"))
                })?,
        },
        None => user_gid.unwrap_or(0),
    };
    // (uid_t)-1 means "unchanged" to setresuid: the container would stay root. Refused as
    // runc refuses it, whether given as a number or found in the image's files.
    for (what, id) in [("uid", uid), ("gid", gid)] {
        if id > wharf_runtime::spec::MAX_ID {
            return Err(Error::Invalid(format!(
                "user {user:?}: {what} {id} is out of range (0-{})",
                wharf_runtime::spec::MAX_ID
            )));
        }
    }
    let home = passwd.as_deref().and_then(|p| {
        p.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 5 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[5].to_string())
        })
    });
    Ok((uid, gid, home))
}

/// The first process's supplementary groups: its primary group, the spec's, and (unless the
/// spec is strict) the groups the image's /etc/group lists its user in, sorted.
pub(crate) fn supplementary_groups(
    rootfs: &Path,
    uid: u32,
    gid: u32,
    spec: &ContainerSpec,
) -> Result<Vec<u32>> {
    let mut groups = vec![gid];
    groups.extend(&spec.groups);
    if !spec.strict_groups {
        groups.extend(image_groups(rootfs, uid)?);
    }
    groups.sort_unstable();
    groups.dedup();
    Ok(groups)
}

/// The groups whose member lists in the image's /etc/group name the user of `uid`.
fn image_groups(rootfs: &Path, uid: u32) -> Result<Vec<u32>> {
    let passwd = read_in_rootfs(rootfs, "/etc/passwd")?.unwrap_or_default();
    let Some(name) = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[0].to_string())
    }) else {
        return Ok(Vec::new());
    };
    let group = read_in_rootfs(rootfs, "/etc/group")?.unwrap_or_default();
    Ok(group
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let members = f.get(3)?;
            members
                .split(',')
                .any(|m| m.trim() == name)
                .then(|| f.get(2)?.parse().ok())?
        })
        .collect())
}

/// The signal that stops the container: the spec's, else the image's StopSignal, else TERM.
pub fn stop_signal(spec: &ContainerSpec, image: &ImageConfiguration) -> i32 {
    spec.stop_signal
        .clone()
        .or_else(|| {
            image
                .config()
                .as_ref()
                .and_then(|c| c.stop_signal().clone())
        })
        .and_then(|s| wharf_sys::signal::parse(&s))
        .unwrap_or(libc::SIGTERM)
}

/// Mount propagation options a volume may carry.
const PROPAGATIONS: [&str; 6] = [
    "private", "rprivate", "slave", "rslave", "shared", "rshared",
];

/// The container's OCI runtime spec (config.json).
pub fn generate(i: &Inputs<'_>) -> Result<Spec> {
    let spec = i.spec;
    let name = spec.name.as_deref().unwrap_or(i.id);
    if spec.privileged && i.pod.userns.is_some() {
        return Err(Error::Invalid(format!(
            "container {name}: a privileged container cannot run in a pod with its own user \
             namespace"
        )));
    }
    let cfg = i.image.config().clone().unwrap_or_default();
    let args = args(spec, i.image)?;
    let user = spec
        .user
        .clone()
        .or_else(|| cfg.user().clone().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "0".into());
    let in_container = |e: Error| Error::Invalid(format!("container {name}: {e}"));
    let (uid, gid, home) = resolve_user(i.rootfs, &user).map_err(in_container)?;
    if spec.run_as_non_root && uid == 0 {
        return Err(Error::Invalid(format!(
            "container {name} must run as non-root (runAsNonRoot) but its user is root"
        )));
    }
    let cwd = spec
        .workdir
        .clone()
        .or_else(|| cfg.working_dir().clone().filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    let caps = capabilities(spec)?;
    let mut process = Process::default();
    process.set_terminal(Some(spec.tty));
    process.set_user(
        UserBuilder::default()
            .uid(uid)
            .gid(gid)
            .additional_gids(supplementary_groups(i.rootfs, uid, gid, spec).map_err(in_container)?)
            // docker's, containerd's and runc's: not the shim's own 0077.
            .umask(0o022u32)
            .build()
            .map_err(|e| oci_error(name, "user", e))?,
    );
    process.set_args(Some(args));
    process.set_env(Some(environment(i, &cfg, home)));
    process.set_cwd(cwd.into());
    process.set_capabilities(Some(capability_sets(&caps, name)?));
    process.set_no_new_privileges(Some(spec.no_new_privileges));
    // None of the defaults oci-spec fills in (rlimits, an AppArmor profile): the
    // runtime's and the kernel's own apply, as with docker; a profile asked for by name.
    process.set_rlimits(rlimits(spec, name)?);
    process.set_apparmor_profile(spec.apparmor_profile.clone());
    if let Some(adj) = spec.oom_score_adj {
        let adj = if i.restrict_oom_score_adj {
            adj.max(0)
        } else {
            adj
        };
        process.set_oom_score_adj(Some(crate::oom::effective(adj)?.value));
    }
    let mut root = Root::default();
    root.set_path(i.rootfs.to_path_buf());
    root.set_readonly(Some(spec.read_only));
    let mut linux = Linux::default();
    linux.set_cgroups_path(Some(
        crate::sandbox::container_cgroup(i.sandbox, i.id).into(),
    ));
    linux.set_namespaces(Some(namespaces(i)?));
    linux.set_resources(Some(resources(i)?));
    if spec.privileged {
        linux.set_masked_paths(None);
        linux.set_readonly_paths(None);
    } else {
        let defaults = |d: &[&str]| d.iter().map(|p| p.to_string()).collect();
        linux.set_masked_paths(Some(
            spec.masked_paths
                .clone()
                .unwrap_or_else(|| defaults(MASKED)),
        ));
        linux.set_readonly_paths(Some(
            spec.readonly_paths
                .clone()
                .unwrap_or_else(|| defaults(READONLY)),
        ));
    }
    // A volume that propagates mounts needs the container's root to propagate too (as
    // containerd sets it): shared for bidirectional volumes, slave for host-to-container.
    let props = |p: &str| spec.mounts.iter().any(|m| m.options.iter().any(|o| o == p));
    if props("rshared") {
        linux.set_rootfs_propagation(Some("rshared".into()));
    } else if props("rslave") {
        linux.set_rootfs_propagation(Some("rslave".into()));
    }
    let devices: Vec<LinuxDevice> = host_devices(spec)?.into_iter().map(|d| d.0).collect();
    if !devices.is_empty() {
        linux.set_devices(Some(devices));
    }
    if !i.pod.sysctls.is_empty() {
        linux.set_sysctl(Some(i.pod.sysctls.clone().into_iter().collect()));
    }
    linux.set_seccomp(seccomp(spec, &caps)?);
    let mut config = Spec::default();
    config.set_version(wharf_runtime::OCI_VERSION.to_string());
    config.set_hostname(None);
    config.set_process(Some(process));
    config.set_root(Some(root));
    config.set_mounts(Some(mounts(i)?));
    config.set_linux(Some(linux));
    let mut annotations: std::collections::HashMap<String, String> =
        spec.annotations.clone().into_iter().collect();
    annotations.insert(
        "io.wharf.container.name".to_string(),
        spec.name.clone().unwrap_or_default(),
    );
    config.set_annotations(Some(annotations));
    Ok(config)
}

fn oci_error(container: &str, what: &str, e: oci_spec::OciSpecError) -> Error {
    Error::Other(format!("container {container}: {what}: {e}"))
}

/// Environment: the image's, then the spec's (overriding by key), then HOSTNAME, HOME,
/// PATH and (with a terminal) TERM where neither set them.
fn environment(i: &Inputs<'_>, cfg: &oci_spec::image::Config, home: Option<String>) -> Vec<String> {
    let spec = i.spec;
    let mut env: Vec<(String, String)> = cfg
        .env()
        .clone()
        .unwrap_or_default()
        .iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    for (k, v) in &spec.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.insert(
            0,
            ("PATH".into(), DEFAULT_PATH["PATH=".len()..].to_string()),
        );
    }
    if !env.iter().any(|(k, _)| k == "HOSTNAME") {
        env.push(("HOSTNAME".into(), i.hostname.to_string()));
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push(("HOME".into(), home.unwrap_or_else(|| "/".into())));
    }
    if spec.tty && !env.iter().any(|(k, _)| k == "TERM") {
        env.push(("TERM".into(), "xterm".into()));
    }
    env.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The same capabilities bounding, effective and permitted; none inheritable or ambient.
fn capability_sets(caps: &[String], container: &str) -> Result<LinuxCapabilities> {
    let set: Capabilities = caps
        .iter()
        .map(|c| {
            serde_json::from_value(json!(c))
                .map_err(|_| Error::Invalid(format!("container {container}: capability {c}")))
        })
        .collect::<Result<_>>()?;
    let mut sets = LinuxCapabilities::default();
    sets.set_bounding(Some(set.clone()));
    sets.set_effective(Some(set.clone()));
    sets.set_permitted(Some(set));
    sets.set_inheritable(None);
    sets.set_ambient(None);
    Ok(sets)
}

fn mount(
    destination: impl Into<PathBuf>,
    typ: &str,
    source: impl Into<PathBuf>,
    options: &[&str],
) -> Mount {
    let mut m = Mount::default();
    m.set_destination(destination.into());
    m.set_typ(Some(typ.to_string()));
    m.set_source(Some(source.into()));
    m.set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

/// The kernel filesystems, the pod's /dev/shm and name files, and the spec's volumes.
fn mounts(i: &Inputs<'_>) -> Result<Vec<Mount>> {
    let spec = i.spec;
    let name = spec.name.as_deref().unwrap_or(i.id);
    let rw = if spec.privileged { "rw" } else { "ro" };
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", rw]),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", rw],
        ),
    ];
    mounts.push(match &i.sandbox.shm {
        Some(shm) => mount(
            "/dev/shm",
            "bind",
            shm,
            &["rbind", "nosuid", "noexec", "nodev"],
        ),
        None => mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
    });
    if let Some(etc) = &i.sandbox.etc_dir {
        for f in ["hosts", "resolv.conf", "hostname"] {
            let src = PathBuf::from(etc).join(f);
            if src.exists() {
                let mode = if spec.read_only { "ro" } else { "rw" };
                mounts.push(mount(
                    format!("/etc/{f}"),
                    "bind",
                    src,
                    &["rbind", "rprivate", mode],
                ));
            }
        }
    }
    for v in &spec.mounts {
        // Volumes over the kernel's own files would hide them (a masked path) or redirect
        // what the runtime writes there: refused, as runc refuses them inside /proc.
        let dest = wharf_runtime::safe_path::clean_absolute(&v.destination);
        if dest.starts_with("/proc") || dest.starts_with("/sys") {
            return Err(Error::Invalid(format!(
                "container {name}: a volume may not be mounted at {}: it is inside {}",
                v.destination.display(),
                if dest.starts_with("/proc") {
                    "/proc"
                } else {
                    "/sys"
                }
            )));
        }
        let mut options: Vec<&str> = Vec::new();
        let extra = v.options.iter().map(String::as_str);
        let m = match v.kind.as_str() {
            "tmpfs" => {
                options.extend(["nosuid", "nodev"]);
                options.extend(extra);
                if v.readonly {
                    options.push("ro");
                }
                mount(&v.destination, "tmpfs", "tmpfs", &options)
            }
            "bind" => {
                options.push("rbind");
                // Private unless the volume asks for another propagation (the CRI's
                // PROPAGATION_HOST_TO_CONTAINER and BIDIRECTIONAL: rslave, rshared).
                if !v.options.iter().any(|o| PROPAGATIONS.contains(&o.as_str())) {
                    options.push("rprivate");
                }
                options.push(if v.readonly { "ro" } else { "rw" });
                options.extend(extra);
                let mut m = mount(&v.destination, "bind", &v.source, &options);
                if v.options.iter().any(|o| o == "idmap" || o == "ridmap") {
                    idmap(&mut m, i.pod, name)?;
                }
                m
            }
            // e.g. a manifest's volume mount that was not resolved to a host path.
            kind => {
                return Err(Error::Invalid(format!(
                    "container {name}: mount of {} has kind {kind:?}; only bind and tmpfs \
                     mounts can be created",
                    v.destination.display(),
                )));
            }
        };
        mounts.push(m);
    }
    Ok(mounts)
}

/// Give bind mount `m` the id maps of the pod's user namespace (option `idmap`): files
/// keep on the host the owners they show inside, so that the pod's root owns what the
/// host's root owns, without a chown.
fn idmap(m: &mut Mount, pod: &crate::model::PodSpec, name: &str) -> Result<()> {
    let Some(ns) = &pod.userns else {
        return Err(Error::Invalid(format!(
            "container {name}: volume {} asks for an id-mapped mount (idmap), which needs              a pod with its own user namespace (--userns=auto)",
            m.destination().display()
        )));
    };
    let lines = |map: &[crate::model::IdRange]| {
        map.iter()
            .map(|r| {
                oci_spec::runtime::LinuxIdMappingBuilder::default()
                    .container_id(r.container_id)
                    .host_id(r.host_id)
                    .size(r.size)
                    .build()
                    .expect("all fields set")
            })
            .collect::<Vec<_>>()
    };
    m.set_uid_mappings(Some(lines(&ns.uid_map)));
    m.set_gid_mappings(Some(lines(&ns.gid_map)));
    Ok(())
}

fn namespace(typ: LinuxNamespaceType, path: Option<&String>) -> LinuxNamespace {
    let mut ns = LinuxNamespace::default();
    ns.set_typ(typ);
    ns.set_path(path.map(PathBuf::from));
    ns
}

/// Its own mount and cgroup namespaces; the pod's network, IPC and UTS; PID shared only
/// when the pod shares it.
fn namespaces(i: &Inputs<'_>) -> Result<Vec<LinuxNamespace>> {
    use LinuxNamespaceType as T;
    let sb = i.sandbox;
    let mut out = vec![namespace(T::Mount, None), namespace(T::Cgroup, None)];
    if sb.netns.is_some() || i.pod.network != crate::model::NetworkMode::Host {
        out.push(namespace(T::Network, sb.netns.as_ref()));
    }
    if !i.pod.host_ipc {
        out.push(namespace(T::Ipc, sb.ipcns.as_ref()));
    }
    out.push(namespace(T::Uts, sb.utsns.as_ref()));
    if let Some(user) = &sb.userns {
        out.push(namespace(T::User, Some(user)));
    }
    if let Some(target) = i.pid_ns {
        out.push(namespace(T::Pid, Some(&target.to_string())));
    } else if !i.pod.host_pid {
        match &sb.pidns {
            Some(pin) if i.pod.share_pid => out.push(namespace(T::Pid, Some(pin))),
            _ if i.pod.share_pid => {
                return Err(Error::Other(
                    "the pod's shared pid namespace is not pinned (its init never started): \
                     remove the pod and create it again"
                        .into(),
                ));
            }
            _ => out.push(namespace(T::Pid, None)),
        }
    }
    Ok(out)
}

/// The spec's host devices as the runtime creates them, each with its cgroup access. A
/// host path that is not a device node is refused, naming it.
fn host_devices(spec: &ContainerSpec) -> Result<Vec<(LinuxDevice, String)>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let name = spec.name.as_deref().unwrap_or("container");
    spec.devices
        .iter()
        .map(|d| {
            let m = std::fs::metadata(&d.host_path).map_err(|e| {
                Error::Invalid(format!(
                    "container {name}: device {}: {e}",
                    d.host_path.display()
                ))
            })?;
            let typ = if m.file_type().is_char_device() {
                LinuxDeviceType::C
            } else if m.file_type().is_block_device() {
                LinuxDeviceType::B
            } else {
                return Err(Error::Invalid(format!(
                    "container {name}: {} is not a device node",
                    d.host_path.display()
                )));
            };
            let access = if d.permissions.is_empty() {
                "rwm".to_string()
            } else if d.permissions.chars().all(|c| "rwm".contains(c)) {
                d.permissions.clone()
            } else {
                return Err(Error::Invalid(format!(
                    "container {name}: device permissions {:?}: use a subset of rwm",
                    d.permissions
                )));
            };
            let rdev = m.rdev();
            let mut dev = LinuxDevice::default();
            dev.set_path(d.container_path.clone());
            dev.set_typ(typ);
            dev.set_major(rustix::fs::major(rdev) as i64);
            dev.set_minor(rustix::fs::minor(rdev) as i64);
            dev.set_file_mode(Some(m.mode() & 0o7777));
            dev.set_uid(Some(0));
            dev.set_gid(Some(0));
            Ok((dev, access))
        })
        .collect()
}

/// Devices (all, privileged; none else, but the spec's own), memory, CPU and pids limits.
fn resources(i: &Inputs<'_>) -> Result<LinuxResources> {
    let spec = i.spec;
    let mut r = LinuxResources::default();
    let mut devices = LinuxDeviceCgroup::default();
    devices.set_allow(spec.privileged);
    devices.set_access(Some("rwm".into()));
    let mut rules = vec![devices];
    for d in host_devices(spec)? {
        let mut rule = LinuxDeviceCgroup::default();
        rule.set_allow(true);
        rule.set_typ(Some(d.0.typ()));
        rule.set_major(Some(d.0.major()));
        rule.set_minor(Some(d.0.minor()));
        rule.set_access(Some(d.1));
        rules.push(rule);
    }
    r.set_devices(Some(rules));
    if spec.memory.is_some() || spec.memory_reservation.is_some() {
        let mut m = LinuxMemory::default();
        if let Some(l) = spec.memory {
            m.set_limit(Some(l));
            if swap_accounted(&i.sandbox.cgroup) {
                let swap = spec.memory_swap.unwrap_or(l.saturating_mul(2));
                if swap != -1 && swap < l {
                    return Err(Error::Invalid(format!(
                        "memory+swap limit {swap} must not be below the memory limit {l}"
                    )));
                }
                m.set_swap(Some(swap));
            }
        }
        m.set_reservation(spec.memory_reservation);
        r.set_memory(Some(m));
    }
    if spec.cpus.is_some()
        || spec.cpu_shares.is_some()
        || spec.cpuset_cpus.is_some()
        || spec.cpuset_mems.is_some()
    {
        let mut c = LinuxCpu::default();
        if let Some(cpus) = spec.cpus {
            c.set_period(Some(100_000));
            c.set_quota(Some((cpus * 100_000.0).round() as i64));
        }
        c.set_shares(spec.cpu_shares);
        c.set_cpus(spec.cpuset_cpus.clone());
        c.set_mems(spec.cpuset_mems.clone());
        r.set_cpu(Some(c));
    }
    if let Some(p) = spec.pids_limit {
        let mut pids = LinuxPids::default();
        pids.set_limit(p);
        r.set_pids(Some(pids));
    }
    if !spec.unified.is_empty() {
        r.set_unified(Some(
            spec.unified
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ));
    }
    Ok(r)
}

/// The names `--ulimit` takes (docker's), each an RLIMIT_* of setrlimit(2).
pub const ULIMITS: &[&str] = &[
    "as",
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// The process's rlimits: those the spec names (None when it names none: the shim's
/// own are inherited).
fn rlimits(spec: &ContainerSpec, name: &str) -> Result<Option<Vec<PosixRlimit>>> {
    if spec.ulimits.is_empty() {
        return Ok(None);
    }
    spec.ulimits
        .iter()
        .map(|(limit, soft, hard)| {
            let bad =
                |why: String| Error::Invalid(format!("container {name}: ulimit {limit}: {why}"));
            if !ULIMITS.contains(&limit.as_str()) {
                return Err(bad(format!("not one of {}", ULIMITS.join(", "))));
            }
            if soft > hard {
                return Err(bad(format!(
                    "soft limit {soft} is above the hard limit {hard}"
                )));
            }
            let typ: PosixRlimitType =
                serde_json::from_value(json!(format!("RLIMIT_{}", limit.to_uppercase())))
                    .map_err(|e| bad(e.to_string()))?;
            PosixRlimitBuilder::default()
                .typ(typ)
                .soft(*soft)
                .hard(*hard)
                .build()
                .map_err(|e| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The seccomp profile: none privileged or unconfined, the default one (with the rules
/// its capabilities lift), or a profile file of the host.
fn seccomp(spec: &ContainerSpec, caps: &[String]) -> Result<Option<LinuxSeccomp>> {
    let profile = match (&spec.seccomp, spec.privileged) {
        (_, true) | (SeccompMode::Unconfined, _) => return Ok(None),
        (SeccompMode::RuntimeDefault, false) => crate::seccomp_default::profile(caps),
        (SeccompMode::Localhost(path), false) => {
            let data = std::fs::read(path).map_err(|e| Error::Os {
                what: format!("read seccomp profile {}", path.display()),
                err: e,
            })?;
            let profile: LinuxSeccomp = serde_json::from_slice(&data)
                .map_err(|e| Error::Invalid(format!("seccomp profile {}: {e}", path.display())))?;
            return Ok(Some(profile));
        }
    };
    serde_json::from_value(profile)
        .map(Some)
        .map_err(|e| Error::Other(format!("the default seccomp profile: {e}")))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A rootfs with /etc/passwd and /etc/group, and pod name files.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("rootfs/etc")).unwrap();
        std::fs::write(
            dir.path().join("rootfs/etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nweb:x:33:44::/srv:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("rootfs/etc/group"), "root:x:0:\n").unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        for f in ["hosts", "resolv.conf", "hostname"] {
            std::fs::write(dir.path().join("etc").join(f), "x").unwrap();
        }
        dir
    }

    fn cases(dir: &Path) -> Vec<(ContainerSpec, crate::model::PodSpec, Sandbox)> {
        use crate::model::{NetworkMode, PodSpec, VolumeMount};
        let base = ContainerSpec {
            name: Some("web".into()),
            command: Some(vec!["sleep".into(), "1".into()]),
            ..Default::default()
        };
        let sandbox = Sandbox {
            netns: Some("/run/netns/x".into()),
            ipcns: Some("/run/p/ns/ipc".into()),
            utsns: Some("/run/p/ns/uts".into()),
            shm: Some("/run/p/shm".into()),
            etc_dir: Some(dir.join("etc").display().to_string()),
            cgroup: "/wharf-unit/pod".into(),
            pidns: Some("/run/p/ns/pid".into()),
            ..Default::default()
        };
        let full = ContainerSpec {
            env: vec![("A".into(), "1".into()), ("PATH".into(), "/x".into())],
            workdir: Some("/srv".into()),
            user: Some("web".into()),
            groups: vec![5, 6],
            tty: true,
            mounts: vec![
                VolumeMount {
                    source: "/data".into(),
                    destination: "/data".into(),
                    readonly: true,
                    kind: "bind".into(),
                    options: vec!["nosuid".into()],
                },
                VolumeMount {
                    source: PathBuf::new(),
                    destination: "/scratch".into(),
                    readonly: false,
                    kind: "tmpfs".into(),
                    options: vec!["size=1m".into()],
                },
            ],
            memory: Some(64 << 20),
            memory_reservation: Some(32 << 20),
            cpus: Some(1.5),
            cpu_shares: Some(512),
            pids_limit: Some(100),
            oom_score_adj: Some(500),
            cap_add: vec!["NET_ADMIN".into()],
            cap_drop: vec!["CHOWN".into()],
            read_only: true,
            no_new_privileges: true,
            ..base.clone()
        };
        let privileged = ContainerSpec {
            privileged: true,
            seccomp: SeccompMode::Unconfined,
            ..base.clone()
        };
        let shared = PodSpec {
            share_pid: true,
            host_ipc: true,
            ..Default::default()
        };
        let host = PodSpec {
            network: NetworkMode::Host,
            host_pid: true,
            ..Default::default()
        };
        let bare = Sandbox {
            shm: None,
            etc_dir: None,
            netns: None,
            ..sandbox.clone()
        };
        vec![
            (base.clone(), PodSpec::default(), sandbox.clone()),
            (full, shared.clone(), sandbox.clone()),
            (privileged, host, bare),
            (base, shared, sandbox),
        ]
    }

    #[test]
    fn the_spec_carries_every_setting() {
        let dir = fixture();
        let image: ImageConfiguration = serde_json::from_value(json!({
            "architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
            "config": {"Env": ["PATH=/bin", "B=2"], "WorkingDir": "/w", "User": "33"}
        }))
        .unwrap();
        let specs: Vec<Spec> = cases(dir.path())
            .iter()
            .map(|(spec, pod, sandbox)| {
                generate(&Inputs {
                    id: "0123",
                    spec,
                    image: &image,
                    rootfs: &dir.path().join("rootfs"),
                    sandbox,
                    pod,
                    hostname: "web",
                    restrict_oom_score_adj: false,
                    pid_ns: None,
                })
                .unwrap()
            })
            .collect();
        // The defaults: the image's user, directory and environment; no rlimits.
        let p = specs[0].process().as_ref().unwrap();
        assert_eq!((p.user().uid(), p.user().gid()), (33, 44));
        assert_eq!(p.cwd(), Path::new("/w"));
        assert_eq!(
            p.env().as_deref().unwrap(),
            ["PATH=/bin", "B=2", "HOSTNAME=web", "HOME=/srv"]
        );
        assert!(p.rlimits().is_none() && p.oom_score_adj().is_none());
        let linux = specs[0].linux().as_ref().unwrap();
        assert!(linux.seccomp().is_some() && linux.masked_paths().is_some());
        // Everything set.
        let full = &specs[1];
        let p = full.process().as_ref().unwrap();
        // The spec's groups with the primary one (44), as containerd and docker list them.
        assert_eq!(p.user().additional_gids().as_deref(), Some(&[5, 6, 44][..]));
        assert_eq!(p.terminal(), Some(true));
        assert!(
            p.env()
                .as_ref()
                .unwrap()
                .contains(&"TERM=xterm".to_string())
        );
        assert!(p.env().as_ref().unwrap().contains(&"PATH=/x".to_string()));
        assert_eq!(p.no_new_privileges(), Some(true));
        let caps = p
            .capabilities()
            .as_ref()
            .unwrap()
            .bounding()
            .clone()
            .unwrap();
        assert!(caps.contains(&oci_spec::runtime::Capability::NetAdmin));
        assert!(!caps.contains(&oci_spec::runtime::Capability::Chown));
        assert_eq!(full.root().as_ref().unwrap().readonly(), Some(true));
        let r = full.linux().as_ref().unwrap().resources().clone().unwrap();
        let m = r.memory().unwrap();
        assert_eq!(
            (m.limit(), m.reservation()),
            (Some(64 << 20), Some(32 << 20))
        );
        let c = r.cpu().clone().unwrap();
        assert_eq!(
            (c.quota(), c.period(), c.shares()),
            (Some(150_000), Some(100_000), Some(512))
        );
        assert_eq!(r.pids().unwrap().limit(), 100);
        let mounts = full.mounts().as_ref().unwrap();
        let data = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/data"))
            .unwrap();
        assert_eq!(
            data.options().as_deref().unwrap(),
            ["rbind", "rprivate", "ro", "nosuid"]
        );
        let scratch = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/scratch"))
            .unwrap();
        assert_eq!(scratch.typ().as_deref(), Some("tmpfs"));
        assert_eq!(
            scratch.options().as_deref().unwrap(),
            ["nosuid", "nodev", "size=1m"]
        );
        // A shared pid namespace is joined by its pin; host IPC has none of its own.
        let ns = full.linux().as_ref().unwrap().namespaces().clone().unwrap();
        let pid = ns
            .iter()
            .find(|n| n.typ() == LinuxNamespaceType::Pid)
            .unwrap();
        assert_eq!(pid.path().as_deref(), Some(Path::new("/run/p/ns/pid")));
        assert!(ns.iter().all(|n| n.typ() != LinuxNamespaceType::Ipc));
        // Privileged: all devices, no masks, no seccomp; the host's network and pids.
        let linux = specs[2].linux().as_ref().unwrap();
        assert!(linux.masked_paths().is_none() && linux.readonly_paths().is_none());
        assert!(linux.seccomp().is_none());
        assert!(
            linux
                .resources()
                .as_ref()
                .unwrap()
                .devices()
                .as_ref()
                .unwrap()[0]
                .allow()
        );
        let ns = linux.namespaces().clone().unwrap();
        assert!(ns.iter().all(|n| !matches!(
            n.typ(),
            LinuxNamespaceType::Network | LinuxNamespaceType::Pid
        )));
    }

    #[test]
    fn caps_add_and_drop() {
        let mut s = ContainerSpec::default();
        assert_eq!(capabilities(&s).unwrap().len(), DEFAULT_CAPS.len());
        s.cap_drop = vec!["ALL".into()];
        s.cap_add = vec!["net_admin".into()];
        assert_eq!(capabilities(&s).unwrap(), vec!["CAP_NET_ADMIN".to_string()]);
        s.cap_add = vec!["CAP_NOPE".into()];
        assert!(capabilities(&s).is_err());
    }

    #[test]
    fn entrypoint_and_command_follow_docker() {
        let image: ImageConfiguration = serde_json::from_value(json!({
            "architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
            "config": {"Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"]}
        }))
        .unwrap();
        let mut s = ContainerSpec::default();
        assert_eq!(args(&s, &image).unwrap(), ["/bin/sh", "-c", "echo hi"]);
        s.command = Some(vec!["date".into()]);
        assert_eq!(args(&s, &image).unwrap(), ["/bin/sh", "-c", "date"]);
        s.entrypoint = Some(vec!["/bin/true".into()]);
        s.command = None;
        assert_eq!(args(&s, &image).unwrap(), ["/bin/true"]);
    }

    #[test]
    fn stop_signals_by_any_name_the_image_uses() {
        let image = |sig: &str| -> ImageConfiguration {
            serde_json::from_value(json!({
                "architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
                "config": {"StopSignal": sig}
            }))
            .unwrap()
        };
        let mut s = ContainerSpec::default();
        // systemd images stop with SIGRTMIN+3 (37 with glibc's numbering, as docker's).
        assert_eq!(stop_signal(&s, &image("SIGRTMIN+3")), 37);
        assert_eq!(stop_signal(&s, &image("SIGQUIT")), libc::SIGQUIT);
        assert_eq!(stop_signal(&s, &image("9")), libc::SIGKILL);
        assert_eq!(stop_signal(&s, &image("SIGPWR")), libc::SIGPWR);
        s.stop_signal = Some("USR1".into());
        assert_eq!(stop_signal(&s, &image("SIGQUIT")), libc::SIGUSR1);
    }

    /// A container root holding just these /etc/passwd and /etc/group.
    pub(crate) fn rootfs_with(passwd: &str, group: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/passwd"), passwd).unwrap();
        std::fs::write(dir.path().join("etc/group"), group).unwrap();
        dir
    }

    #[test]
    fn users_resolve_inside_the_rootfs() {
        let dir = rootfs_with(
            "root:x:0:0::/root:/bin/sh\nweb:x:33:44::/srv:/bin/sh\n",
            "root:x:0:\nstaff:x:50:\n",
        );
        assert_eq!(
            resolve_user(dir.path(), "web").unwrap(),
            (33, 44, Some("/srv".into()))
        );
        assert_eq!(resolve_user(dir.path(), "web:staff").unwrap().1, 50);
        assert_eq!(resolve_user(dir.path(), "1234:7").unwrap(), (1234, 7, None));
        assert!(resolve_user(dir.path(), "nobody").is_err());
    }

    #[test]
    fn image_groups_merge_unless_strict() {
        let dir = rootfs_with(
            "root:x:0:0::/root:/bin/sh\nweb:x:33:44::/srv:/bin/sh\n",
            "root:x:0:\nstaff:x:50:root,web\nother:x:60:root\n",
        );
        let mut spec = ContainerSpec {
            groups: vec![1234],
            ..Default::default()
        };
        assert_eq!(
            supplementary_groups(dir.path(), 33, 44, &spec).unwrap(),
            vec![44, 50, 1234]
        );
        spec.strict_groups = true;
        assert_eq!(
            supplementary_groups(dir.path(), 33, 44, &spec).unwrap(),
            vec![44, 1234]
        );
        // A uid the image does not know is in no image group.
        spec.strict_groups = false;
        assert_eq!(
            supplementary_groups(dir.path(), 77, 77, &spec).unwrap(),
            vec![77, 1234]
        );
    }

    /// (uid_t)-1 leaves the ids unchanged: the container would stay root. Every spelling of
    /// an id above 2147483647 is refused, from the command line or the image's files.
    #[test]
    fn ids_out_of_range_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "evil:x:4294967295:0::/:/bin/sh
big:x:2147483648:0::/:/bin/sh
",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("etc/group"),
            "evilg:x:4294967295:
",
        )
        .unwrap();
        for user in [
            "4294967295",
            "2147483648",
            "0:4294967295",
            "evil",
            "big",
            "0:evilg",
            "4294967295:0",
        ] {
            let e = resolve_user(dir.path(), user).unwrap_err().to_string();
            assert!(e.contains("out of range"), "{user}: {e}");
        }
        assert_eq!(
            resolve_user(dir.path(), "2147483647:2147483647").unwrap().0,
            2147483647
        );
    }
}
