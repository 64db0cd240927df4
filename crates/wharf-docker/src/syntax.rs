//! docker's string syntaxes, as `docker run` flags and the API's string fields take them:
//! port mappings (`-p`, `PortBindings` keys), volumes (`-v`, `Binds`), mounts (`--mount`),
//! tmpfs (`--tmpfs`, `Tmpfs`), devices, extra hosts, restart policies, sizes, ulimits,
//! durations and security options. One parser each, for every front end.

use std::path::{Path, PathBuf};

use wharf_engine::model::{DeviceMapping, PortMapping, RestartPolicy, SeccompMode, VolumeMount};

/// A value that does not follow docker's syntax; the message names it and says how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// What a parser returns.
pub type Result<T> = std::result::Result<T, Invalid>;

macro_rules! invalid {
    ($($t:tt)*) => { return Err(Invalid(format!($($t)*))) };
}

/// `--restart`: the policy, and for `on-failure:N` the most restarts.
pub fn restart(s: &str) -> Result<(RestartPolicy, Option<u32>)> {
    let (name, max) = match s.split_once(':') {
        Some((n, m)) => (n, Some(m)),
        None => (s, None),
    };
    let policy = restart_name(name).ok_or_else(|| {
        Invalid(format!(
            "invalid restart policy {name:?}: no, always, unless-stopped or on-failure[:max-retries]"
        ))
    })?;
    let max = match (policy, max) {
        (_, None) => None,
        (RestartPolicy::OnFailure, Some(m)) => match m.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => invalid!("invalid restart policy {s:?}: max-retries must be a whole number"),
        },
        (_, Some(_)) => {
            invalid!("invalid restart policy {s:?}: only on-failure takes a max-retries")
        }
    };
    Ok((policy, max))
}

/// A restart policy by docker's name (`""` and `no` are docker's "never").
pub fn restart_name(name: &str) -> Option<RestartPolicy> {
    Some(match name {
        "no" | "never" | "" => RestartPolicy::Never,
        "always" => RestartPolicy::Always,
        "unless-stopped" => RestartPolicy::UnlessStopped,
        "on-failure" => RestartPolicy::OnFailure,
        _ => return None,
    })
}

/// `-p`, with docker's ranges: `9000-9001:9000-9001` (as many host as container ports),
/// one mapping per port.
pub fn ports(s: &str) -> Result<Vec<PortMapping>> {
    let (spec, proto) = s.split_once('/').unwrap_or((s, "tcp"));
    let parts: Vec<&str> = spec.rsplitn(3, ':').collect();
    let (ctr, host) = match parts.as_slice() {
        [c, h, ..] if !h.is_empty() => (*c, *h),
        _ => return Ok(vec![port(s)?]),
    };
    let range = |r: &str| -> Result<Option<(u16, u16)>> {
        let Some((a, b)) = r.split_once('-') else {
            return Ok(None);
        };
        let bad = || Invalid(format!("invalid port range {r:?} in {s:?}"));
        let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if a == 0 || a > b {
            return Err(bad());
        }
        Ok(Some((a, b)))
    };
    match (range(host)?, range(ctr)?) {
        (None, None) => Ok(vec![port(s)?]),
        (Some(h), Some(c)) if h.1 - h.0 == c.1 - c.0 => {
            let ip = parts.get(2).map(|ip| format!("{ip}:")).unwrap_or_default();
            (0..=(h.1 - h.0))
                .map(|i| port(&format!("{ip}{}:{}/{proto}", h.0 + i, c.0 + i)))
                .collect()
        }
        _ => invalid!(
            "invalid port mapping {s:?}: a host port range needs a container port range of \
             the same length"
        ),
    }
}

/// One `-p [ip:][host:]container[/proto]` (no host port: one the engine picks).
pub fn port(s: &str) -> Result<PortMapping> {
    let (spec, proto) = match s.split_once('/') {
        Some((a, p)) => (a, p.to_ascii_lowercase()),
        None => (s, "tcp".to_string()),
    };
    if proto != "tcp" && proto != "udp" && proto != "sctp" {
        invalid!("invalid port mapping {s:?}: protocol must be tcp, udp or sctp");
    }
    let parts: Vec<&str> = spec.rsplitn(3, ':').collect();
    let (ip, host, ctr) = match parts.as_slice() {
        [ctr] => (None, "", *ctr),
        [ctr, host] => (None, *host, *ctr),
        [ctr, host, ip] => (Some(ip.trim_matches(['[', ']']).to_string()), *host, *ctr),
        _ => invalid!("invalid port mapping {s:?}: use [ip:][hostPort:]containerPort[/proto]"),
    };
    let parse = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Invalid(format!("invalid port {p:?} in {s:?}"))),
    };
    Ok(PortMapping {
        host_port: if host.is_empty() { 0 } else { parse(host)? },
        container_port: parse(ctr)?,
        protocol: proto,
        host_ip: ip.filter(|i| !i.is_empty()),
    })
}

/// A port key of docker's maps (`80/tcp`, `80`): the port and its protocol.
pub fn port_key(k: &str) -> Result<(u16, String)> {
    let (p, proto) = k.split_once('/').unwrap_or((k, "tcp"));
    let proto = proto.to_ascii_lowercase();
    match (p.parse::<u16>(), proto.as_str()) {
        (Ok(n), "tcp" | "udp" | "sctp") if n > 0 => Ok((n, proto)),
        _ => invalid!("invalid port {k:?}: use PORT[/tcp|udp|sctp]"),
    }
}

/// Sizes like docker's: 64m, 1g, 512k, plain bytes.
pub fn size(s: &str) -> Result<i64> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('b') => return size(&t[..t.len() - 1]),
        Some('k') => (&t[..t.len() - 1], 1i64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    match num.parse::<f64>() {
        Ok(n) if n >= 0.0 => Ok((n * mul as f64) as i64),
        _ => invalid!("invalid size {s:?}: a number of bytes, or with k, m or g"),
    }
}

/// `-v host:container[:ro|rw]`, `-v NAME:/container/path[:ro]` (a named volume) or
/// `-v /container/path` (an anonymous one), as docker takes them.
pub fn volume(s: &str) -> Result<VolumeMount> {
    let parts: Vec<&str> = s.split(':').collect();
    let (src, dst, opts) = match parts.as_slice() {
        [dst] => ("", *dst, ""),
        [src, dst] => (*src, *dst, ""),
        [src, dst, opts] => (*src, *dst, *opts),
        _ => invalid!("invalid volume {s:?}: use /host/path:/container/path[:ro] or NAME:/path"),
    };
    if !dst.starts_with('/') {
        invalid!("invalid volume {s:?}: the container path must be absolute");
    }
    if src.starts_with('.') {
        invalid!("invalid volume {s:?}: a host path must be absolute (a volume name has no '/')");
    }
    let named = !src.starts_with('/');
    if !named && !Path::new(src).exists() {
        invalid!("volume {s:?}: host path {src} does not exist");
    }
    let mut readonly = false;
    let mut options = Vec::new();
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        match o {
            "ro" => readonly = true,
            "rw" => readonly = false,
            "z" | "Z" | "nocopy" => {}
            p @ ("private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared") => {
                options.push(p.to_string())
            }
            // podman's: the volume id-mapped with the pod's user namespace.
            "idmap" if !named => options.push("idmap".into()),
            other => invalid!("invalid volume option {other:?} in {s:?}"),
        }
    }
    Ok(VolumeMount {
        source: PathBuf::from(src),
        destination: PathBuf::from(dst),
        readonly,
        kind: if named {
            wharf_engine::named_volumes::KIND.into()
        } else {
            "bind".into()
        },
        options,
    })
}

/// `--tmpfs PATH[:OPTIONS]` (and the API's `Tmpfs` map): noexec unless `exec` is asked
/// for, as docker mounts it.
pub fn tmpfs(path: &str, opts: &str) -> Result<VolumeMount> {
    if !path.starts_with('/') {
        invalid!("invalid tmpfs {path:?}: the path must be absolute");
    }
    let mut options: Vec<String> = opts
        .split(',')
        .filter(|o| !o.is_empty())
        .map(String::from)
        .collect();
    if !options.iter().any(|o| o == "exec" || o == "noexec") {
        options.push("noexec".into());
    }
    let readonly = options.iter().any(|o| o == "ro");
    options.retain(|o| o != "ro" && o != "rw");
    Ok(VolumeMount {
        source: PathBuf::from("tmpfs"),
        destination: PathBuf::from(path),
        readonly,
        kind: "tmpfs".into(),
        options,
    })
}

/// A mount of docker's `--mount` flag and the API's `Mounts`, once its fields are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountFields {
    /// bind, volume or tmpfs.
    pub kind: String,
    /// Host path (bind) or volume name (volume; empty: an anonymous one).
    pub source: Option<String>,
    /// Path in the container.
    pub target: String,
    /// Read-only.
    pub readonly: bool,
    /// A bind's propagation.
    pub propagation: Option<String>,
    /// A path inside the volume.
    pub subpath: Option<String>,
    /// A tmpfs's size in bytes.
    pub tmpfs_size: Option<i64>,
    /// A tmpfs's mode.
    pub tmpfs_mode: Option<u32>,
}

/// `--mount type=bind|volume|tmpfs,...` (docker's keys; `src`/`dst`/`destination` too).
pub fn mount_flag(s: &str) -> Result<MountFields> {
    let mut m = MountFields {
        kind: wharf_engine::named_volumes::KIND.into(),
        ..Default::default()
    };
    let mut target = None;
    for field in s.split(',').filter(|f| !f.is_empty()) {
        let (k, v) = field.split_once('=').unwrap_or((field, ""));
        match (k, v) {
            ("type", t) => m.kind = t.to_string(),
            ("source" | "src", v) => m.source = Some(v.to_string()),
            ("target" | "dst" | "destination", v) => target = Some(v.to_string()),
            ("readonly" | "ro", "" | "true" | "1") => m.readonly = true,
            ("readonly" | "ro", "false" | "0") => m.readonly = false,
            (
                "bind-propagation",
                p @ ("private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared"),
            ) => m.propagation = Some(p.to_string()),
            ("volume-subpath", p) if !p.is_empty() => m.subpath = Some(p.to_string()),
            ("volume-nocopy", _) => {}
            ("tmpfs-size", n) => m.tmpfs_size = Some(size(n)?),
            ("tmpfs-mode", mode) if u32::from_str_radix(mode, 8).is_ok() => {
                m.tmpfs_mode = u32::from_str_radix(mode, 8).ok()
            }
            _ => invalid!("invalid --mount {s:?}: unknown or bad field {field:?}"),
        }
    }
    m.target = target.unwrap_or_default();
    mount(&m).map_err(|e| Invalid(format!("--mount {s:?}: {e}")))?;
    Ok(m)
}

/// The engine's volume mount of a docker mount.
pub fn mount(m: &MountFields) -> Result<VolumeMount> {
    if !m.target.starts_with('/') {
        invalid!("invalid mount: an absolute target is required");
    }
    if m.subpath.is_some() && m.kind != "volume" {
        invalid!("invalid mount: a subpath is for a volume");
    }
    let mut options: Vec<String> = m.propagation.iter().cloned().collect();
    match m.kind.as_str() {
        "bind" => {
            let Some(src) = m.source.as_deref().filter(|s| !s.is_empty()) else {
                invalid!("invalid mount: a bind mount needs a source");
            };
            if !src.starts_with('/') {
                invalid!("invalid mount: a bind mount's source {src:?} must be an absolute path");
            }
            if !Path::new(src).exists() {
                invalid!("invalid mount: bind source path does not exist: {src}");
            }
            Ok(VolumeMount {
                source: src.into(),
                destination: m.target.clone().into(),
                readonly: m.readonly,
                kind: "bind".into(),
                options,
            })
        }
        "volume" => {
            let src = m.source.clone().unwrap_or_default();
            if src.starts_with('/') {
                invalid!("invalid mount: a volume's source is its name, not a path");
            }
            // A path inside the volume, which must be there (docker's rule).
            if let Some(p) = &m.subpath {
                options.push(wharf_engine::image_volumes::subpath_option(p.clone()));
                options.push(wharf_engine::pod_volumes::MUST_EXIST.to_string());
            }
            Ok(VolumeMount {
                source: src.into(),
                destination: m.target.clone().into(),
                readonly: m.readonly,
                kind: wharf_engine::named_volumes::KIND.into(),
                options,
            })
        }
        "tmpfs" => {
            if m.source.as_deref().is_some_and(|s| !s.is_empty()) {
                invalid!("invalid mount: a tmpfs has no source");
            }
            let mut opts = Vec::new();
            if let Some(n) = m.tmpfs_size {
                opts.push(format!("size={n}"));
            }
            if let Some(mode) = m.tmpfs_mode {
                opts.push(format!("mode={mode:o}"));
            }
            let mut v = tmpfs(&m.target, &opts.join(","))?;
            v.readonly = m.readonly;
            Ok(v)
        }
        other => invalid!("invalid mount: type {other:?} is not bind, volume or tmpfs"),
    }
}

/// `--device HOST[:CONTAINER[:PERMISSIONS]]`.
pub fn device(s: &str) -> Result<DeviceMapping> {
    let parts: Vec<&str> = s.split(':').collect();
    let (host, container, perms) = match parts.as_slice() {
        [h] => (*h, *h, "rwm"),
        [h, c] if c.starts_with('/') => (*h, *c, "rwm"),
        [h, p] => (*h, *h, *p),
        [h, c, p] => (*h, *c, *p),
        _ => invalid!("invalid device {s:?}: use HOST[:CONTAINER[:PERMISSIONS]]"),
    };
    device_mapping(host, container, perms).map_err(|e| Invalid(format!("{e} (in {s:?})")))
}

/// A device mapping from its three parts (the API's `Devices` entries).
pub fn device_mapping(host: &str, container: &str, perms: &str) -> Result<DeviceMapping> {
    let container = if container.is_empty() {
        host
    } else {
        container
    };
    let perms = if perms.is_empty() { "rwm" } else { perms };
    if !host.starts_with('/') || !container.starts_with('/') {
        invalid!("invalid device: device paths must be absolute");
    }
    if !perms.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        invalid!("invalid device: permissions are a combination of r, w and m, not {perms:?}");
    }
    Ok(DeviceMapping {
        host_path: PathBuf::from(host),
        container_path: PathBuf::from(container),
        permissions: perms.to_string(),
    })
}

/// `--add-host HOST:IP` (docker's spelling; `HOST=IP` too), as (ip, [host]).
pub fn add_host(s: &str) -> Result<(String, Vec<String>)> {
    let (host, ip) = s
        .split_once('=')
        .or_else(|| s.split_once(':'))
        .ok_or_else(|| Invalid(format!("invalid --add-host {s:?}: use HOST:IP")))?;
    let ip = ip.trim_matches(['[', ']']);
    if ip == "host-gateway" {
        invalid!("invalid --add-host {s:?}: host-gateway is not supported; give the address");
    }
    // An IPv6 address holds colons: HOST:IP splits at the first one.
    if ip.parse::<std::net::IpAddr>().is_err() || host.is_empty() {
        invalid!("invalid --add-host {s:?}: {ip:?} is not an IP address");
    }
    Ok((ip.to_string(), vec![host.to_string()]))
}

/// `--ulimit NAME=SOFT[:HARD]` (-1: unlimited).
pub fn ulimit(s: &str) -> Result<(String, u64, u64)> {
    wharf_engine::defaults::parse_ulimit(s)
        .map_err(|e| Invalid(e.replacen("invalid ulimit", "invalid --ulimit", 1)))
}

/// docker's durations: `30s`, `1m30s`, `500ms`, `2h`, `1.5s` (Go's syntax), in
/// milliseconds.
pub fn duration_ms(s: &str) -> Result<u64> {
    wharf_sys::time::parse_go_duration(s)
        .map(|d| d.as_millis() as u64)
        .ok_or_else(|| Invalid(format!("invalid duration {s:?}: like 30s, 1m30s or 500ms")))
}

/// What `--security-opt` values set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityOpts {
    /// The seccomp profile.
    pub seccomp: SeccompMode,
    /// An AppArmor profile (None: unconfined).
    pub apparmor: Option<String>,
    /// no_new_privs.
    pub no_new_privileges: bool,
}

/// docker's `--security-opt` values (`seccomp=unconfined|FILE`, `apparmor=...`,
/// `no-new-privileges[:true]`; SELinux `label=...` is refused: Wharf does not label).
pub fn security_opts(opts: &[String]) -> Result<SecurityOpts> {
    let mut out = SecurityOpts::default();
    for o in opts {
        match o.split_once('=').or_else(|| o.split_once(':')) {
            Some(("seccomp", "unconfined")) => out.seccomp = SeccompMode::Unconfined,
            Some(("seccomp", path)) => out.seccomp = SeccompMode::Localhost(path.into()),
            Some(("apparmor", "unconfined")) => out.apparmor = None,
            Some(("apparmor", profile)) if !profile.is_empty() => {
                out.apparmor = Some(profile.to_string())
            }
            Some(("no-new-privileges", "true")) => out.no_new_privileges = true,
            Some(("no-new-privileges", "false")) => out.no_new_privileges = false,
            None if o == "no-new-privileges" => out.no_new_privileges = true,
            _ => invalid!(
                "unsupported security option {o:?} (seccomp=unconfined|<file>, \
                 apparmor=unconfined|<profile>, no-new-privileges)"
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_sizes_volumes_and_durations() {
        let p = port("127.0.0.1:8080:80/udp").unwrap();
        assert_eq!(
            (p.host_port, p.container_port, p.protocol.as_str()),
            (8080, 80, "udp")
        );
        assert_eq!(p.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(port("80:8080").unwrap().host_ip, None);
        assert!(port("x:80").is_err());
        let r = ports("127.0.0.1:9000-9002:8000-8002/udp").unwrap();
        assert_eq!(
            r.iter()
                .map(|p| (p.host_port, p.container_port, p.protocol.as_str()))
                .collect::<Vec<_>>(),
            [
                (9000, 8000, "udp"),
                (9001, 8001, "udp"),
                (9002, 8002, "udp")
            ]
        );
        assert!(r.iter().all(|p| p.host_ip.as_deref() == Some("127.0.0.1")));
        for (spec, ip) in [("80", None), ("127.0.0.1::80", Some("127.0.0.1"))] {
            let p = &ports(spec).unwrap()[0];
            assert_eq!((p.host_port, p.container_port), (0, 80), "{spec}");
            assert_eq!(p.host_ip.as_deref(), ip, "{spec}");
        }
        assert!(port("0:80").is_err());
        for bad in ["9000-9001:80", "9001-9000:80-81", "9000-9001:80-82"] {
            assert!(ports(bad).is_err(), "{bad}");
        }
        assert_eq!(port_key("80/tcp").unwrap(), (80, "tcp".into()));
        assert_eq!(port_key("53/UDP").unwrap(), (53, "udp".into()));
        assert!(port_key("x/tcp").is_err() && port_key("80/icmp").is_err());
        assert_eq!(size("64m").unwrap(), 64 << 20);
        assert_eq!(size("1.5g").unwrap(), 3 << 29);
        assert_eq!(size("512").unwrap(), 512);
        assert!(size("-1").is_err() && size("x").is_err());
        assert_eq!(duration_ms("1m30s").unwrap(), 90_000);
        assert_eq!(duration_ms("500ms").unwrap(), 500);
        assert_eq!(duration_ms("1.5s").unwrap(), 1500);
        assert!(duration_ms("10").is_err() && duration_ms("5x").is_err());
        assert!(volume("./rel:/x").is_err());
        assert_eq!(volume("data:/x").unwrap().kind, "volume");
        assert_eq!(volume("/x").unwrap().source, PathBuf::new());
        assert!(volume("/tmp:/data:ro").unwrap().readonly);
        assert_eq!(volume("/tmp:/data:rshared").unwrap().options, ["rshared"]);
    }

    #[test]
    fn mounts_devices_hosts_and_policies() {
        let m = mount_flag("type=tmpfs,dst=/run,tmpfs-size=1m,tmpfs-mode=1770").unwrap();
        let v = mount(&m).unwrap();
        assert_eq!(v.kind, "tmpfs");
        assert!(
            v.options.contains(&"size=1048576".to_string()),
            "{:?}",
            v.options
        );
        assert!(
            v.options.contains(&"mode=1770".to_string()),
            "{:?}",
            v.options
        );
        assert!(mount_flag("type=bind,dst=/x").is_err());
        assert!(mount_flag("type=volume,src=/abs,dst=/x").is_err());
        assert!(mount_flag("type=bind,src=/tmp,dst=/x,volume-subpath=a").is_err());
        assert!(mount_flag("type=nfs,dst=/x").is_err());
        let d = device("/dev/fuse:/dev/f:rw").unwrap();
        assert_eq!(d.permissions, "rw");
        assert!(device("/dev/fuse:xyz").is_err());
        assert_eq!(
            add_host("db:10.0.0.1").unwrap(),
            ("10.0.0.1".into(), vec!["db".into()])
        );
        assert_eq!(add_host("v6:[fd00::1]").unwrap().0, "fd00::1");
        assert!(add_host("db:host-gateway").is_err());
        assert_eq!(
            restart("on-failure:3").unwrap(),
            (RestartPolicy::OnFailure, Some(3))
        );
        assert!(restart("always:3").is_err() && restart("sometimes").is_err());
        let s = security_opts(&["seccomp=unconfined".into(), "no-new-privileges".into()]).unwrap();
        assert_eq!(s.seccomp, SeccompMode::Unconfined);
        assert!(s.no_new_privileges);
        assert!(security_opts(&["systempaths=unconfined".into()]).is_err());
    }
}
