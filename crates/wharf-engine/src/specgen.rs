//! Turning an image's config and a container spec into the OCI config.json the runtime runs:
//! the defaults users of docker, containerd and podman expect (capability set, seccomp
//! profile, masked and read-only /proc paths, /dev/shm of the pod), the image's Entrypoint,
//! Cmd, Env, WorkingDir and User, and the pod's shared namespaces.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use oci_spec::image::ImageConfiguration;
use serde_json::{Value, json};

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
}

/// The capability list after the spec's adds and drops ("ALL" allowed in both).
pub fn capabilities(spec: &ContainerSpec) -> Result<Vec<String>> {
    let all: Vec<String> = wharf_runtime::caps::NAMES
        .iter()
        .take(wharf_runtime::caps::last_cap() as usize + 1)
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
            .filter(|c| !drops.contains(c))
            .collect()
    };
    if adds.iter().any(|a| a == "ALL") {
        caps = all;
    } else {
        for a in adds {
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
    match &layout.unified {
        Some(u) if layout.is_v2() => u
            .join(pod_cgroup.trim_start_matches('/'))
            .join("memory.swap.max")
            .exists(),
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

/// Read a file of the container's rootfs without following a symlink out of it.
fn read_in_rootfs(rootfs: &Path, path: &str) -> Option<String> {
    let root = rustix::fs::open(
        rootfs,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let fd = wharf_runtime::safe_path::open_in_root(
        root.as_fd(),
        Path::new(path),
        rustix::fs::OFlags::RDONLY,
    )
    .ok()?;
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).ok()?;
    Some(s)
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
    let passwd = read_in_rootfs(rootfs, "/etc/passwd");
    let group = read_in_rootfs(rootfs, "/etc/group");
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

/// The full config.json.
pub fn generate(i: &Inputs<'_>) -> Result<Value> {
    let spec = i.spec;
    let cfg = i.image.config().clone().unwrap_or_default();
    let args = args(spec, i.image)?;
    let user = spec
        .user
        .clone()
        .or_else(|| cfg.user().clone().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "0".into());
    let (uid, gid, home) = resolve_user(i.rootfs, &user)?;
    if spec.run_as_non_root && uid == 0 {
        return Err(Error::Invalid(format!(
            "container {} must run as non-root (runAsNonRoot) but its user is root",
            spec.name.as_deref().unwrap_or(i.id)
        )));
    }
    // Environment: image's, then the spec's (overriding by key), then HOSTNAME/HOME/PATH.
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
    let cwd = spec
        .workdir
        .clone()
        .or_else(|| cfg.working_dir().clone().filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    let caps = capabilities(spec)?;
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", if spec.privileged { "rw" } else { "ro" }]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", if spec.privileged { "rw" } else { "ro" }]}),
    ];
    match &i.sandbox.shm {
        Some(shm) => mounts.push(json!({"destination": "/dev/shm", "type": "bind", "source": shm, "options": ["rbind", "nosuid", "noexec", "nodev"]})),
        None => mounts.push(json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]})),
    }
    if let Some(etc) = &i.sandbox.etc_dir {
        for f in ["hosts", "resolv.conf", "hostname"] {
            let src = PathBuf::from(etc).join(f);
            if src.exists() {
                mounts.push(json!({"destination": format!("/etc/{f}"), "type": "bind", "source": src, "options": ["rbind", "rprivate", if spec.read_only { "ro" } else { "rw" }]}));
            }
        }
    }
    for v in &spec.mounts {
        // Volumes over the kernel's own files would hide them (a masked path) or redirect
        // what the runtime writes there: refused, as runc refuses them inside /proc.
        let dest = wharf_runtime::safe_path::clean_absolute(&v.destination);
        if dest.starts_with("/proc") || dest.starts_with("/sys") {
            return Err(Error::Invalid(format!(
                "container {}: a volume may not be mounted at {}: it is inside {}",
                spec.name.as_deref().unwrap_or(i.id),
                v.destination.display(),
                if dest.starts_with("/proc") {
                    "/proc"
                } else {
                    "/sys"
                }
            )));
        }
        if v.kind != "tmpfs" && v.kind != "bind" {
            // e.g. a manifest's volume mount that was not resolved to a host path.
            return Err(Error::Invalid(format!(
                "container {}: mount of {} has kind {:?}; only bind and tmpfs mounts can be created",
                spec.name.as_deref().unwrap_or(i.id),
                v.destination.display(),
                v.kind
            )));
        }
        let mut options: Vec<String> = Vec::new();
        if v.kind == "tmpfs" {
            options.extend(["nosuid".into(), "nodev".into()]);
            options.extend(v.options.iter().cloned());
            if v.readonly {
                options.push("ro".into());
            }
            mounts.push(json!({"destination": v.destination, "type": "tmpfs", "source": "tmpfs", "options": options}));
        } else {
            options.extend(["rbind".into(), "rprivate".into()]);
            options.push(if v.readonly { "ro".into() } else { "rw".into() });
            options.extend(v.options.iter().cloned());
            mounts.push(json!({"destination": v.destination, "type": "bind", "source": v.source, "options": options}));
        }
    }
    // Namespaces: the pod's network, IPC and UTS; PID shared only when asked.
    let mut namespaces = vec![json!({"type": "mount"}), json!({"type": "cgroup"})];
    let ns = |t: &str, path: &Option<String>| match path {
        Some(p) => json!({"type": t, "path": p}),
        None => json!({"type": t}),
    };
    if i.sandbox.netns.is_some() || i.pod.network != crate::model::NetworkMode::Host {
        namespaces.push(ns("network", &i.sandbox.netns));
    }
    if !i.pod.host_ipc {
        namespaces.push(ns("ipc", &i.sandbox.ipcns));
    }
    namespaces.push(ns("uts", &i.sandbox.utsns));
    if !i.pod.host_pid {
        match &i.sandbox.pidns {
            Some(pin) if i.pod.share_pid => namespaces.push(json!({"type": "pid", "path": pin})),
            _ if i.pod.share_pid => {
                return Err(Error::Other(
                    "the pod's shared pid namespace is not pinned (its init never started): \
                     remove the pod and create it again"
                        .into(),
                ));
            }
            _ => namespaces.push(json!({"type": "pid"})),
        }
    }
    let mut resources = json!({
        "devices": if spec.privileged {
            json!([{"allow": true, "access": "rwm"}])
        } else {
            json!([{"allow": false, "access": "rwm"}])
        }
    });
    if spec.memory.is_some() || spec.memory_reservation.is_some() {
        let mut m = serde_json::Map::new();
        if let Some(l) = spec.memory {
            m.insert("limit".into(), json!(l));
            if swap_accounted(&i.sandbox.cgroup) {
                let swap = spec.memory_swap.unwrap_or(l.saturating_mul(2));
                if swap != -1 && swap < l {
                    return Err(Error::Invalid(format!(
                        "memory+swap limit {swap} must not be below the memory limit {l}"
                    )));
                }
                m.insert("swap".into(), json!(swap));
            }
        }
        if let Some(r) = spec.memory_reservation {
            m.insert("reservation".into(), json!(r));
        }
        resources["memory"] = Value::Object(m);
    }
    if spec.cpus.is_some() || spec.cpu_shares.is_some() {
        let mut c = serde_json::Map::new();
        if let Some(cpus) = spec.cpus {
            c.insert("period".into(), json!(100_000u64));
            c.insert("quota".into(), json!((cpus * 100_000.0).round() as i64));
        }
        if let Some(s) = spec.cpu_shares {
            c.insert("shares".into(), json!(s));
        }
        resources["cpu"] = Value::Object(c);
    }
    if let Some(p) = spec.pids_limit {
        resources["pids"] = json!({"limit": p});
    }
    let seccomp =
        match (&spec.seccomp, spec.privileged) {
            (_, true) | (SeccompMode::Unconfined, _) => None,
            (SeccompMode::RuntimeDefault, false) => Some(crate::seccomp_default::profile(&caps)),
            (SeccompMode::Localhost(path), false) => {
                let data = std::fs::read(path).map_err(|e| Error::Os {
                    what: format!("read seccomp profile {}", path.display()),
                    err: e,
                })?;
                Some(serde_json::from_slice(&data).map_err(|e| {
                    Error::Invalid(format!("seccomp profile {}: {e}", path.display()))
                })?)
            }
        };
    let mut linux = json!({
        "cgroupsPath": format!("{}/{}", i.sandbox.cgroup, i.id),
        "namespaces": namespaces,
        "resources": resources,
    });
    if !spec.privileged {
        linux["maskedPaths"] = json!(MASKED);
        linux["readonlyPaths"] = json!(READONLY);
    }
    if let Some(s) = seccomp {
        linux["seccomp"] = s;
    }
    let env_list: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut config = json!({
        "ociVersion": wharf_runtime::OCI_VERSION,
        "process": {
            "terminal": spec.tty,
            "user": {"uid": uid, "gid": gid, "additionalGids": spec.groups},
            "args": args,
            "env": env_list,
            "cwd": cwd,
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": spec.no_new_privileges,
        },
        "root": {"path": i.rootfs, "readonly": spec.read_only},
        "mounts": mounts,
        "linux": linux,
        "annotations": {"io.wharf.container.name": spec.name.clone().unwrap_or_default()},
    });
    if let Some(adj) = spec.oom_score_adj {
        config["process"]["oomScoreAdj"] = json!(crate::oom::effective(adj)?.value);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn users_resolve_inside_the_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nweb:x:33:44::/srv:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("etc/group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        assert_eq!(
            resolve_user(dir.path(), "web").unwrap(),
            (33, 44, Some("/srv".into()))
        );
        assert_eq!(resolve_user(dir.path(), "web:staff").unwrap().1, 50);
        assert_eq!(resolve_user(dir.path(), "1234:7").unwrap(), (1234, 7, None));
        assert!(resolve_user(dir.path(), "nobody").is_err());
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
