//! Loading and validating a bundle's config.json.
//!
//! Everything that can be checked before any process or cgroup exists is checked here, so a
//! bad configuration fails fast with a message naming the field, and leaves nothing behind.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::error::{Error, Result, p};

/// A validated bundle: the parsed spec and the absolute path of its rootfs.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Absolute path of the bundle directory.
    pub dir: PathBuf,
    /// The parsed configuration.
    pub spec: Spec,
    /// Absolute path of the root filesystem.
    pub rootfs: PathBuf,
}

/// Read `<bundle>/config.json` and validate it.
pub fn load_bundle(dir: &Path) -> Result<Bundle> {
    let (dir, spec) = read_config(dir)?;
    let rootfs = validate(&spec, &dir)?;
    Ok(Bundle { dir, spec, rootfs })
}

/// Read `<bundle>/config.json` without validating it (what a cleanup needs of a config
/// whose rootfs may be gone): the bundle's absolute path and the parsed spec.
pub fn read_config(dir: &Path) -> Result<(PathBuf, Spec)> {
    let dir = std::path::absolute(dir)
        .map_err(|e| Error::os(format!("resolve bundle path {}", p(dir)), e))?;
    let path = dir.join("config.json");
    let data = std::fs::read(&path).map_err(|e| Error::os(format!("read {}", p(&path)), e))?;
    let spec: Spec =
        serde_json::from_slice(&data).map_err(|e| Error::Config(format!("{}: {e}", p(&path))))?;
    Ok((dir, spec))
}

/// The largest uid or gid a process may run as. Ids above it are refused as runc refuses
/// them: (uid_t)-1 = 4294967295 means "leave unchanged" to setresuid(2), so a container
/// asking for it would silently stay root.
pub const MAX_ID: u32 = i32::MAX as u32;

/// Refuse user and group ids outside 0..=[`MAX_ID`] (process.user of a config, or of an
/// exec).
pub fn check_user(user: &oci_spec::runtime::User) -> Result<()> {
    let extra = user.additional_gids().clone().unwrap_or_default();
    let ids = [("uid", user.uid()), ("gid", user.gid())]
        .into_iter()
        .chain(extra.into_iter().map(|g| ("additionalGids", g)));
    for (what, id) in ids {
        if id > MAX_ID {
            return Err(Error::Config(format!(
                "process.user.{what} {id} is out of range (0-{MAX_ID})"
            )));
        }
    }
    Ok(())
}

/// Check a spec against the rules runc enforces; returns the absolute rootfs path.
pub fn validate(spec: &Spec, bundle: &Path) -> Result<PathBuf> {
    let bad = |msg: String| Err(Error::Config(msg));
    let root = match spec.root() {
        Some(root) => root,
        None => return bad("root must be set".into()),
    };
    let rootfs = bundle.join(root.path());
    match std::fs::metadata(&rootfs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return bad(format!("root.path {} is not a directory", p(&rootfs))),
        Err(e) => return bad(format!("root.path {}: {e}", p(&rootfs))),
    }
    // process may be absent at create: then `start` fails (runtime-spec: REQUIRED for start).
    if let Some(process) = spec.process() {
        check_user(process.user())?;
        if process.args().as_ref().is_none_or(|a| a.is_empty()) {
            return bad("process.args must not be empty".into());
        }
        if !process.cwd().is_absolute() {
            return bad(format!(
                "process.cwd {:?} is not an absolute path",
                process.cwd()
            ));
        }
    }
    let linux = spec.linux().clone().unwrap_or_default();
    let namespaces = linux.namespaces().clone().unwrap_or_default();
    let mut seen = HashSet::new();
    for ns in &namespaces {
        if !seen.insert(ns.typ()) {
            return bad(format!(
                "linux.namespaces: namespace type {} appears twice",
                crate::namespaces::config_name(ns.typ())
            ));
        }
        if let Some(path) = ns.path() {
            if !path.is_absolute() {
                return bad(format!(
                    "linux.namespaces: {} path {} is not absolute",
                    crate::namespaces::config_name(ns.typ()),
                    p(path)
                ));
            }
            if let Err(e) = std::fs::metadata(path) {
                return bad(format!(
                    "linux.namespaces: {} path {}: {e}",
                    crate::namespaces::config_name(ns.typ()),
                    p(path)
                ));
            }
        }
    }
    let has_new = |t| {
        namespaces
            .iter()
            .any(|n| n.typ() == t && n.path().is_none())
    };
    let has = |t| namespaces.iter().any(|n| n.typ() == t);
    if spec.hostname().as_ref().is_some_and(|h| !h.is_empty()) && !has(LinuxNamespaceType::Uts) {
        return bad("hostname requires a private UTS namespace".into());
    }
    if spec.domainname().as_ref().is_some_and(|h| !h.is_empty()) && !has(LinuxNamespaceType::Uts) {
        return bad("domainname requires a private UTS namespace".into());
    }
    let maps = linux.uid_mappings().as_ref().is_some_and(|m| !m.is_empty())
        || linux.gid_mappings().as_ref().is_some_and(|m| !m.is_empty());
    if has_new(LinuxNamespaceType::User) {
        if !maps {
            return bad(
                "a new user namespace needs linux.uidMappings and linux.gidMappings".into(),
            );
        }
    } else if maps {
        return bad("linux.uidMappings/gidMappings require a new user namespace".into());
    }
    if linux.time_offsets().as_ref().is_some_and(|t| !t.is_empty()) {
        if !has_new(LinuxNamespaceType::Time) {
            return bad("linux.timeOffsets require a new time namespace".into());
        }
        for clock in linux.time_offsets().as_ref().unwrap().keys() {
            if clock != "monotonic" && clock != "boottime" {
                return bad(format!(
                    "linux.timeOffsets: unknown clock {clock:?} (monotonic or boottime)"
                ));
            }
        }
    }
    if let Some(sysctl) = linux.sysctl() {
        for key in sysctl.keys() {
            check_sysctl(key, &has_new, &has)?;
        }
    }
    if let Some(mounts) = spec.mounts() {
        for m in mounts {
            let dest = m.destination();
            if dest.as_os_str().is_empty() {
                return bad("mounts: a mount has an empty destination".into());
            }
            if escapes_root(dest) {
                return bad(format!(
                    "mounts: destination {} escapes the container's root",
                    p(dest)
                ));
            }
            check_proc_mount(m)?;
        }
    }
    if let Some(prop) = linux.rootfs_propagation()
        && !prop.is_empty()
        && crate::mounts::propagation_flag(prop).is_none()
    {
        return bad(format!(
            "linux.rootfsPropagation {prop:?} is not a propagation mode"
        ));
    }
    if let Some(hooks) = spec.hooks() {
        let all = [
            ("prestart", hooks.prestart()),
            ("createRuntime", hooks.create_runtime()),
            ("createContainer", hooks.create_container()),
            ("startContainer", hooks.start_container()),
            ("poststart", hooks.poststart()),
            ("poststop", hooks.poststop()),
        ];
        for (kind, list) in all {
            for hook in list.iter().flatten() {
                if !hook.path().is_absolute() {
                    return bad(format!(
                        "hooks.{kind}: path {} is not absolute",
                        p(hook.path())
                    ));
                }
                if hook.timeout().is_some_and(|t| t <= 0) {
                    return bad(format!(
                        "hooks.{kind}: {} has a timeout that is not positive",
                        p(hook.path())
                    ));
                }
            }
        }
    }
    if let Some(persona) = linux.personality()
        && let Some(flag) = persona.flags().iter().flatten().next()
    {
        return bad(format!("linux.personality: flag {flag:?} is not supported"));
    }
    Ok(rootfs)
}

/// Files below /proc that may be mounted over, as runc allows (what lxcfs provides).
const PROC_MOUNT_ALLOWED: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/swaps",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/slabinfo",
    "/proc/net/dev",
    "/proc/sys/kernel/ns_last_pid",
];

/// A mount on /proc itself must be procfs, and nothing may be mounted inside /proc but
/// the files lxcfs replaces (runc's rule): a mount there would hide the kernel's files or
/// redirect the runtime's own writes to them.
fn check_proc_mount(m: &oci_spec::runtime::Mount) -> Result<()> {
    let dest = crate::safe_path::clean_absolute(m.destination());
    if !dest.starts_with("/proc") {
        return Ok(());
    }
    if dest == Path::new("/proc") {
        return match m.typ().as_deref() {
            Some("proc") => Ok(()),
            other => Err(Error::Config(format!(
                "mounts: {} on /proc must be of type proc, not {}",
                m.source()
                    .as_ref()
                    .map(|s| p(s).to_string())
                    .unwrap_or_default(),
                other.unwrap_or("none")
            ))),
        };
    }
    if PROC_MOUNT_ALLOWED.iter().any(|a| dest == Path::new(a)) {
        return Ok(());
    }
    Err(Error::Config(format!(
        "mounts: destination {} is inside /proc, where only procfs itself and the files lxcfs \
         provides may be mounted",
        p(m.destination())
    )))
}

/// Whether a path climbs above its root lexically (`../x`, `/a/../../x`). Symlinks are not
/// considered here: they are resolved inside the root when the mount is made.
fn escapes_root(path: &Path) -> bool {
    let mut depth = 0i32;
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

fn check_sysctl(
    key: &str,
    has_new: &dyn Fn(LinuxNamespaceType) -> bool,
    has: &dyn Fn(LinuxNamespaceType) -> bool,
) -> Result<()> {
    let ipc = [
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
    ];
    let (needs, what) = if ipc.contains(&key) || key.starts_with("fs.mqueue.") {
        (LinuxNamespaceType::Ipc, "IPC")
    } else if key.starts_with("net.") {
        (LinuxNamespaceType::Network, "network")
    } else if key == "kernel.hostname" || key == "kernel.domainname" {
        (LinuxNamespaceType::Uts, "UTS")
    } else {
        return Err(Error::Config(format!(
            "linux.sysctl: {key} is not namespaced and cannot be set in a container"
        )));
    };
    // Joining an existing namespace by path is fine: it is still not the host's.
    if has_new(needs) || has(needs) {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "linux.sysctl: {key} requires a private {what} namespace"
        )))
    }
}

/// The namespace entries of a spec, in the order the kernel needs to join them.
pub fn namespaces(spec: &Spec) -> Vec<oci_spec::runtime::LinuxNamespace> {
    spec.linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default()
}

/// The configuration `spec` writes: runc's defaults (a shell on a terminal, the standard
/// mounts, namespaces, masked and read-only paths), with Wharf's hostname.
pub const DEFAULT_CONFIG: &str = r#"{
  "ociVersion": "1.2.0",
  "process": {
    "terminal": true,
    "user": { "uid": 0, "gid": 0 },
    "args": ["sh"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
    "cwd": "/",
    "capabilities": {
      "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
      "effective": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
      "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
      "ambient": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    },
    "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024 }],
    "noNewPrivileges": true
  },
  "root": { "path": "rootfs", "readonly": true },
  "hostname": "wharf",
  "mounts": [
    { "destination": "/proc", "type": "proc", "source": "proc" },
    { "destination": "/dev", "type": "tmpfs", "source": "tmpfs",
      "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] },
    { "destination": "/dev/pts", "type": "devpts", "source": "devpts",
      "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"] },
    { "destination": "/dev/shm", "type": "tmpfs", "source": "shm",
      "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] },
    { "destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
      "options": ["nosuid", "noexec", "nodev"] },
    { "destination": "/sys", "type": "sysfs", "source": "sysfs",
      "options": ["nosuid", "noexec", "nodev", "ro"] },
    { "destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
      "options": ["nosuid", "noexec", "nodev", "relatime", "ro"] }
  ],
  "linux": {
    "resources": { "devices": [{ "allow": false, "access": "rwm" }] },
    "namespaces": [
      { "type": "pid" }, { "type": "network" }, { "type": "ipc" },
      { "type": "uts" }, { "type": "mount" }, { "type": "cgroup" }
    ],
    "maskedPaths": [
      "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
      "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"
    ],
    "readonlyPaths": [
      "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
    ]
  }
}
"#;
