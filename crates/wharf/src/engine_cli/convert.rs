//! From command-line flags to the engine's pod and container specs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use wharf_engine::model::{
    ContainerSpec, DeviceMapping, NetworkMode, PodSpec, PortMapping, RestartPolicy, SeccompMode,
    VolumeMount,
};

use super::args::RunArgs;

/// `--network`.
pub fn network(s: &str) -> NetworkMode {
    match s {
        "" | "default" | "bridge" => NetworkMode::Default,
        "none" => NetworkMode::None,
        "host" => NetworkMode::Host,
        name => NetworkMode::Named(name.to_string()),
    }
}

/// `--restart`: the policy, and for `on-failure:N` the most restarts.
pub fn restart(s: &str) -> Result<(RestartPolicy, Option<u32>)> {
    let (name, max) = match s.split_once(':') {
        Some((n, m)) => (n, Some(m)),
        None => (s, None),
    };
    let policy = match name {
        "no" | "never" | "" => RestartPolicy::Never,
        "always" => RestartPolicy::Always,
        "unless-stopped" => RestartPolicy::UnlessStopped,
        "on-failure" => RestartPolicy::OnFailure,
        other => bail!(
            "invalid --restart {other:?}: no, always, unless-stopped or on-failure[:max-retries]"
        ),
    };
    let max = match (policy, max) {
        (_, None) => None,
        (RestartPolicy::OnFailure, Some(m)) => match m.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => bail!("invalid --restart {s:?}: max-retries must be a whole number"),
        },
        (_, Some(_)) => bail!("invalid --restart {s:?}: only on-failure takes a max-retries"),
    };
    Ok((policy, max))
}

/// `-p [ip:]host:container[/proto]`.
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
        let (a, b): (u16, u16) = (
            a.parse()
                .with_context(|| format!("invalid port range {r:?} in {s:?}"))?,
            b.parse()
                .with_context(|| format!("invalid port range {r:?} in {s:?}"))?,
        );
        if a == 0 || a > b {
            bail!("invalid port range {r:?} in {s:?}");
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
        _ => bail!(
            "invalid port mapping {s:?}: a host port range needs a container port range of \
             the same length"
        ),
    }
}

/// One `-p [ip:]host:container[/proto]`.
pub fn port(s: &str) -> Result<PortMapping> {
    let (spec, proto) = match s.split_once('/') {
        Some((a, p)) => (a, p.to_ascii_lowercase()),
        None => (s, "tcp".to_string()),
    };
    if proto != "tcp" && proto != "udp" && proto != "sctp" {
        bail!("invalid port mapping {s:?}: protocol must be tcp, udp or sctp");
    }
    let parts: Vec<&str> = spec.rsplitn(3, ':').collect();
    // `80` and `ip::80`: a host port the engine picks (docker's ephemeral range).
    let (ip, host, ctr) = match parts.as_slice() {
        [ctr] => (None, "", *ctr),
        [ctr, host] => (None, *host, *ctr),
        [ctr, host, ip] => (Some(ip.trim_matches(['[', ']']).to_string()), *host, *ctr),
        _ => bail!("invalid port mapping {s:?}: use [ip:][hostPort:]containerPort[/proto]"),
    };
    let parse = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => bail!("invalid port {p:?} in {s:?}"),
    };
    Ok(PortMapping {
        host_port: if host.is_empty() { 0 } else { parse(host)? },
        container_port: parse(ctr)?,
        protocol: proto,
        host_ip: ip.filter(|i| !i.is_empty()),
    })
}

/// Sizes like docker's: 64m, 1g, 512k, plain bytes.
pub fn size(s: &str) -> Result<i64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('b') => return size(&s[..s.len() - 1]),
        Some('k') => (&s[..s.len() - 1], 1i64 << 10),
        Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: f64 = num.parse().with_context(|| format!("invalid size {s:?}"))?;
    Ok((n * mul as f64) as i64)
}

/// `-v host:container[:ro|rw]`.
/// `-v NAME:/container/path[:ro]` is a named volume, `-v /container/path` an anonymous
/// one (docker's).
pub fn volume(s: &str) -> Result<VolumeMount> {
    let parts: Vec<&str> = s.split(':').collect();
    let (src, dst, opts) = match parts.as_slice() {
        [dst] => ("", *dst, ""),
        [src, dst] => (*src, *dst, ""),
        [src, dst, opts] => (*src, *dst, *opts),
        _ => bail!("invalid volume {s:?}: use /host/path:/container/path[:ro] or NAME:/path"),
    };
    if !dst.starts_with('/') {
        bail!("invalid volume {s:?}: the container path must be absolute");
    }
    let named = !src.starts_with('/') && !src.starts_with('.');
    if src.starts_with('.') {
        bail!("invalid volume {s:?}: a host path must be absolute (a volume name has no '/')");
    }
    if !named && !std::path::Path::new(src).exists() {
        bail!("volume {s:?}: host path {src} does not exist");
    }
    let mut readonly = false;
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        match o {
            "ro" => readonly = true,
            "rw" => readonly = false,
            "z" | "Z" => {}
            other => bail!("invalid volume option {other:?} in {s:?}"),
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
        options: Vec::new(),
    })
}

/// `--tmpfs PATH[:OPTIONS]`: noexec unless `exec` is asked for, as docker mounts it.
pub fn tmpfs(s: &str) -> Result<VolumeMount> {
    let (path, opts) = s.split_once(':').unwrap_or((s, ""));
    if !path.starts_with('/') {
        bail!("invalid --tmpfs {s:?}: the path must be absolute");
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

/// `--mount type=bind|tmpfs,...` (docker's keys; `src`/`dst`/`destination` spellings too).
pub fn mount(s: &str) -> Result<VolumeMount> {
    let mut kind = wharf_engine::named_volumes::KIND;
    let (mut source, mut target, mut readonly) = (None, None, false);
    let mut options = Vec::new();
    let mut subpath = None;
    for field in s.split(',').filter(|f| !f.is_empty()) {
        let (k, v) = field.split_once('=').unwrap_or((field, ""));
        match (k, v) {
            ("type", t) => kind = t,
            ("source" | "src", v) => source = Some(v.to_string()),
            ("target" | "dst" | "destination", v) => target = Some(v.to_string()),
            ("readonly" | "ro", "" | "true" | "1") => readonly = true,
            ("readonly" | "ro", "false" | "0") => readonly = false,
            (
                "bind-propagation",
                p @ ("private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared"),
            ) => options.push(p.to_string()),
            ("volume-subpath", p) if !p.is_empty() => subpath = Some(p.to_string()),
            ("tmpfs-size", n) => options.push(format!("size={}", size(n)?)),
            ("tmpfs-mode", m) if u32::from_str_radix(m, 8).is_ok() => {
                options.push(format!("mode={m}"))
            }
            _ => bail!("invalid --mount {s:?}: unknown or bad field {field:?}"),
        }
    }
    let Some(target) = target.filter(|t| t.starts_with('/')) else {
        bail!("invalid --mount {s:?}: an absolute target= is required");
    };
    if subpath.is_some() && kind != "volume" {
        bail!("invalid --mount {s:?}: volume-subpath is for type=volume");
    }
    match kind {
        "bind" => {
            let Some(src) = source else {
                bail!("invalid --mount {s:?}: a bind mount needs source=");
            };
            let mut v =
                volume(&format!("{src}:{target}")).with_context(|| format!("--mount {s:?}"))?;
            v.readonly = readonly;
            v.options = options;
            Ok(v)
        }
        "volume" => {
            let src = source.unwrap_or_default();
            if src.starts_with('/') {
                bail!("invalid --mount {s:?}: a volume's source is its name, not a path");
            }
            let mut v =
                volume(&format!("{src}:{target}")).with_context(|| format!("--mount {s:?}"))?;
            if src.is_empty() {
                v.source = PathBuf::new();
            }
            v.readonly = readonly;
            // A path inside the volume, which must be there (docker's rule).
            if let Some(p) = subpath {
                v.options
                    .push(wharf_engine::image_volumes::subpath_option(p));
                v.options
                    .push(wharf_engine::pod_volumes::MUST_EXIST.to_string());
            }
            Ok(v)
        }
        "tmpfs" => {
            if source.is_some() {
                bail!("invalid --mount {s:?}: a tmpfs has no source");
            }
            let mut v = tmpfs(&target)?;
            v.options.extend(options);
            v.readonly = readonly;
            Ok(v)
        }
        other => bail!("invalid --mount {s:?}: type {other:?} is not bind, volume or tmpfs"),
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
        _ => bail!("invalid --device {s:?}: use HOST[:CONTAINER[:PERMISSIONS]]"),
    };
    if !host.starts_with('/') || !container.starts_with('/') {
        bail!("invalid --device {s:?}: device paths must be absolute");
    }
    if perms.is_empty() || !perms.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        bail!("invalid --device {s:?}: permissions are a combination of r, w and m");
    }
    Ok(DeviceMapping {
        host_path: PathBuf::from(host),
        container_path: PathBuf::from(container),
        permissions: perms.to_string(),
    })
}

/// `--add-host HOST:IP` (docker's spelling; `HOST=IP` too).
pub fn add_host(s: &str) -> Result<(String, Vec<String>)> {
    let (host, ip) = s
        .split_once('=')
        .or_else(|| s.split_once(':'))
        .ok_or_else(|| anyhow::anyhow!("invalid --add-host {s:?}: use HOST:IP"))?;
    if ip == "host-gateway" {
        bail!("invalid --add-host {s:?}: host-gateway is not supported; give the address");
    }
    // An IPv6 address holds colons: HOST:IP splits at the first one.
    if ip.parse::<std::net::IpAddr>().is_err() || host.is_empty() {
        bail!("invalid --add-host {s:?}: {ip:?} is not an IP address");
    }
    Ok((ip.to_string(), vec![host.to_string()]))
}

/// `--ulimit NAME=SOFT[:HARD]` (-1: unlimited), as docker takes it.
pub fn ulimit(s: &str) -> Result<(String, u64, u64)> {
    wharf_engine::defaults::parse_ulimit(s)
        .map_err(|e| anyhow::anyhow!("{}", e.replacen("invalid ulimit", "invalid --ulimit", 1)))
}

/// The limits `wharf update` sets (what it leaves out stays as it is).
pub fn update_resources(
    memory: Option<&str>,
    memory_swap: Option<&str>,
    cpus: Option<f64>,
    cpu_shares: Option<u64>,
    pids_limit: Option<i64>,
) -> Result<oci_spec::runtime::LinuxResources> {
    use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxPids, LinuxResources};
    if memory.is_none()
        && memory_swap.is_none()
        && cpus.is_none()
        && cpu_shares.is_none()
        && pids_limit.is_none()
    {
        bail!(
            "nothing to update: give at least one of --memory, --memory-swap, --cpus, --cpu-shares, --pids-limit"
        );
    }
    let mut res = LinuxResources::default();
    res.set_devices(None);
    let limit = memory.map(size).transpose()?;
    let swap = match memory_swap {
        Some("-1") => Some(-1),
        Some(s) => Some(size(s)?),
        None => None,
    };
    if let (Some(m), Some(s)) = (limit, swap)
        && s != -1
        && s < m
    {
        bail!("--memory-swap must be at least --memory");
    }
    if limit.is_some() || swap.is_some() {
        let mut mem = LinuxMemory::default();
        mem.set_limit(limit);
        mem.set_swap(swap);
        res.set_memory(Some(mem));
    }
    if cpus.is_some() || cpu_shares.is_some() {
        let mut cpu = LinuxCpu::default();
        if let Some(c) = cpus {
            if c <= 0.0 {
                bail!("--cpus must be above 0");
            }
            cpu.set_period(Some(100_000));
            cpu.set_quota(Some((c * 100_000.0) as i64));
        }
        cpu.set_shares(cpu_shares);
        res.set_cpu(Some(cpu));
    }
    if let Some(p) = pids_limit {
        let mut pids = LinuxPids::default();
        pids.set_limit(if p <= 0 { -1 } else { p });
        res.set_pids(Some(pids));
    }
    Ok(res)
}

/// `k=v` pairs of a repeated flag, each checked.
pub fn pairs(flag: &str, items: &[String]) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|i| match i.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("invalid {flag} {i:?}: use KEY=VALUE"),
        })
        .collect()
}

/// Check `--oom-score-adj` and say so when this host makes the container's value higher.
fn oom_score_adj(wanted: i32) -> Result<i32> {
    let got = wharf_engine::oom::effective(wanted)?;
    if got.clamped {
        eprintln!(
            "wharf: warning: --oom-score-adj {wanted} raised to {}: this host does not allow \
             lowering it (no CAP_SYS_RESOURCE)",
            got.value
        );
    }
    Ok(wanted)
}

/// The most an env file may hold (docker sets no limit; `--env-file /dev/zero` then grows
/// until the machine runs out of memory).
const MAX_ENV_FILE_BYTES: usize = 1 << 20;

/// Read `r` as UTF-8 text of at most `limit` bytes; more is an error naming `what`.
pub fn read_bounded(r: impl std::io::Read, limit: usize, what: &str) -> Result<String> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    r.take(limit as u64 + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("read {what}"))?;
    if buf.len() > limit {
        bail!("{what} is larger than {limit} bytes");
    }
    String::from_utf8(buf).with_context(|| format!("{what} is not UTF-8 text"))
}

fn env(a: &RunArgs) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for f in &a.env_file {
        let what = format!("env file {}", f.display());
        let file = std::fs::File::open(f).with_context(|| format!("read {what}"))?;
        let text = read_bounded(file, MAX_ENV_FILE_BYTES, &what)?;
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            out.push(kv(line));
        }
    }
    for e in &a.env {
        out.push(kv(e));
    }
    Ok(out)
}

pub fn kv(s: &str) -> (String, String) {
    match s.split_once('=') {
        Some((k, v)) => (k.to_string(), v.to_string()),
        None => (s.to_string(), std::env::var(s).unwrap_or_default()),
    }
}

/// The container spec of `wharf run`.
pub fn container_spec(a: &RunArgs) -> Result<ContainerSpec> {
    if a.rm && restart(&a.restart)?.0 != RestartPolicy::Never {
        bail!("conflicting options: --restart and --rm");
    }
    let mut seccomp = SeccompMode::RuntimeDefault;
    let mut apparmor = None;
    for o in &a.security_opt {
        match o.split_once('=').or_else(|| o.split_once(':')) {
            Some(("seccomp", "unconfined")) => seccomp = SeccompMode::Unconfined,
            Some(("seccomp", path)) => seccomp = SeccompMode::Localhost(path.into()),
            Some(("apparmor", "unconfined")) => apparmor = None,
            Some(("apparmor", profile)) if !profile.is_empty() => {
                apparmor = Some(profile.to_string())
            }
            Some(("no-new-privileges", "true")) | None if o == "no-new-privileges" => {}
            _ => bail!(
                "unsupported --security-opt {o:?} (seccomp=unconfined|<file>, \
                 apparmor=unconfined|<profile>, no-new-privileges)"
            ),
        }
    }
    Ok(ContainerSpec {
        name: a.name.clone(),
        image: a.image.clone(),
        entrypoint: a
            .entrypoint
            .as_ref()
            .map(|e| e.split_whitespace().map(String::from).collect()),
        command: (!a.command.is_empty()).then(|| a.command.clone()),
        env: env(a)?,
        workdir: a.workdir.clone(),
        user: a.user.clone(),
        tty: a.tty,
        stdin: a.interactive,
        mounts: a
            .volumes
            .iter()
            .map(|v| volume(v))
            .chain(a.tmpfs.iter().map(|t| tmpfs(t)))
            .chain(a.mount.iter().map(|m| mount(m)))
            .collect::<Result<_>>()?,
        devices: a.device.iter().map(|d| device(d)).collect::<Result<_>>()?,
        labels: pairs("--label", &a.label)?,
        ulimits: a.ulimit.iter().map(|u| ulimit(u)).collect::<Result<_>>()?,
        memory: a.memory.as_deref().map(size).transpose()?,
        memory_swap: match a.memory_swap.as_deref() {
            Some("-1") => Some(-1),
            Some(s) => Some(size(s)?),
            None => None,
        },
        cpus: match (a.cpus, a.cpu_quota) {
            (Some(_), Some(_)) => bail!("--cpus and --cpu-quota set the same limit: give one"),
            (_, Some(q)) if q > 0 => Some(q as f64 / a.cpu_period.unwrap_or(100_000).max(1) as f64),
            (cpus, _) => cpus,
        },
        cpu_shares: a.cpu_shares,
        cpuset_cpus: a.cpuset_cpus.clone(),
        cpuset_mems: a.cpuset_mems.clone(),
        memory_reservation: a.memory_reservation.as_deref().map(size).transpose()?,
        groups: a
            .group_add
            .iter()
            .map(|g| {
                g.parse::<u32>()
                    .with_context(|| format!("invalid --group-add {g:?}: a numeric group id"))
            })
            .collect::<Result<_>>()?,
        pids_limit: a.pids_limit,
        oom_score_adj: a.oom_score_adj.map(oom_score_adj).transpose()?,
        privileged: a.privileged,
        cap_add: a.cap_add.clone(),
        cap_drop: a.cap_drop.clone(),
        read_only: a.read_only,
        no_new_privileges: a
            .security_opt
            .iter()
            .any(|o| o.starts_with("no-new-privileges")),
        seccomp,
        apparmor_profile: apparmor,
        stop_signal: a.stop_signal.clone(),
        stop_timeout: a.stop_timeout,
        // Attached, the CLI removes it when it exits; detached, its shim does.
        auto_remove: a.rm && a.detach,
        health: health(a)?,
        ..Default::default()
    })
}

/// `--log-driver` (the default only) and `--log-opt max-size=/max-file=`.
fn log_opts(a: &RunArgs) -> Result<(Option<u64>, Option<u32>)> {
    if let Some(d) = &a.log_driver
        && !matches!(d.as_str(), "json-file" | "k8s-file" | "local")
    {
        bail!("invalid --log-driver {d:?}: the log is a file the shim writes (json-file)");
    }
    let (mut size, mut files) = (None, None);
    for o in &a.log_opt {
        match o.split_once('=') {
            Some(("max-size", v)) => {
                let n = self::size(v)?;
                if n < 1024 {
                    bail!("invalid --log-opt {o:?}: max-size must be at least 1k");
                }
                size = Some(n as u64);
            }
            Some(("max-file", v)) => match v.parse::<u32>() {
                Ok(n) if n >= 1 => files = Some(n),
                _ => bail!("invalid --log-opt {o:?}: max-file is a number of files, 1 or more"),
            },
            _ => bail!("invalid --log-opt {o:?}: max-size=SIZE or max-file=N"),
        }
    }
    Ok((size, files))
}

/// `--pid`/`--ipc`: true for `host`; the container's own (the default) otherwise.
fn namespace_mode(flag: &str, v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("" | "private" | "shareable") => Ok(false),
        Some("host") => Ok(true),
        Some(other) => bail!("invalid {flag} {other:?}: host, or the container's own"),
    }
}

/// docker's durations: `30s`, `1m30s`, `500ms`, `2h` (Go's syntax, as `wharf runtime`
/// reads it), in milliseconds.
pub fn duration_ms(flag: &str, s: &str) -> Result<u64> {
    crate::runtime_cli::parse_go_duration(s)
        .map(|d| d.as_millis() as u64)
        .map_err(|_| anyhow::anyhow!("invalid {flag} {s:?}: a duration like 30s, 1m30s or 500ms"))
}

/// `--health-*`: docker's defaults (30s, 30s, 3 retries, 0s); a shell command is run with
/// /bin/sh -c (docker's CMD-SHELL).
fn health(a: &RunArgs) -> Result<Option<wharf_shim::protocol::HealthSpec>> {
    let Some(cmd) = &a.health_cmd else {
        let stray = a.health_interval.is_some()
            || a.health_timeout.is_some()
            || a.health_retries.is_some()
            || a.health_start_period.is_some();
        if stray && !a.no_healthcheck {
            bail!(
                "--health-interval, --health-timeout, --health-retries and --health-start-period need --health-cmd"
            );
        }
        return Ok(None);
    };
    if a.no_healthcheck {
        bail!("--no-healthcheck conflicts with --health-cmd");
    }
    let ms = |flag: &str, v: &Option<String>, default: u64| -> Result<u64> {
        match v {
            Some(v) => duration_ms(flag, v),
            None => Ok(default),
        }
    };
    let interval_ms = ms("--health-interval", &a.health_interval, 30_000)?;
    let timeout_ms = ms("--health-timeout", &a.health_timeout, 30_000)?;
    if interval_ms == 0 || timeout_ms == 0 {
        bail!("--health-interval and --health-timeout must be above zero");
    }
    Ok(Some(wharf_shim::protocol::HealthSpec {
        test: vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
        interval_ms,
        timeout_ms,
        retries: a.health_retries.unwrap_or(3),
        start_period_ms: ms("--health-start-period", &a.health_start_period, 0)?,
    }))
}

/// The pod of a standalone `wharf run` container.
/// `exposed` are the image's ExposedPorts (`80/tcp`), which `-P` publishes on host ports
/// the engine picks.
pub fn pod_spec(a: &RunArgs, exposed: &[String]) -> Result<PodSpec> {
    let (restart, max_restarts) = restart(&a.restart)?;
    let (log_max_size, log_max_files) = log_opts(a)?;
    let mut published: Vec<PortMapping> = a
        .publish
        .iter()
        .map(|p| ports(p))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    if a.publish_all {
        for e in exposed {
            let m = port(e).with_context(|| format!("the image's exposed port {e:?}"))?;
            if !published
                .iter()
                .any(|p| p.container_port == m.container_port && p.protocol == m.protocol)
            {
                published.push(m);
            }
        }
    }
    Ok(PodSpec {
        name: a.name.clone(),
        hostname: a.hostname.clone(),
        network: network(&a.network),
        network_aliases: a.network_alias.clone(),
        ports: published,
        restart,
        max_restarts,
        dns: wharf_engine::model::DnsConfig {
            servers: a.dns.clone(),
            searches: a.dns_search.clone(),
            options: a.dns_option.clone(),
        },
        extra_hosts: a
            .add_host
            .iter()
            .map(|h| add_host(h))
            .collect::<Result<_>>()?,
        sysctls: pairs("--sysctl", &a.sysctl)?,
        shm_size: a
            .shm_size
            .as_deref()
            .map(|s| size(s).map(|n| n as u64))
            .transpose()?,
        share_pid: a.init,
        host_pid: namespace_mode("--pid", a.pid.as_deref())?,
        host_ipc: namespace_mode("--ipc", a.ipc.as_deref())?,
        log_max_size,
        log_max_files,
        ..Default::default()
    })
}

/// The flags that set up a container's own pod, which `--pod` (an existing pod) excludes.
pub fn pod_flags(a: &RunArgs) -> Vec<&'static str> {
    [
        ("--dns", !a.dns.is_empty()),
        ("--dns-search", !a.dns_search.is_empty()),
        ("--dns-option", !a.dns_option.is_empty()),
        ("--add-host", !a.add_host.is_empty()),
        ("--sysctl", !a.sysctl.is_empty()),
        ("--shm-size", a.shm_size.is_some()),
        ("--init", a.init),
        ("-p", !a.publish.is_empty()),
        ("-P", a.publish_all),
        ("--hostname", a.hostname.is_some()),
        ("--network-alias", !a.network_alias.is_empty()),
        ("--log-opt", !a.log_opt.is_empty()),
        ("--pid", a.pid.is_some()),
        ("--ipc", a.ipc.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_sizes_volumes() {
        let p = port("127.0.0.1:8080:80/udp").unwrap();
        assert_eq!(
            (p.host_port, p.container_port, p.protocol.as_str()),
            (8080, 80, "udp")
        );
        assert_eq!(p.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(port("80:8080").unwrap().host_ip, None);
        assert!(port("x:80").is_err());
        // Ranges: one mapping per port, the address and protocol kept.
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
        assert_eq!(ports("8080:80").unwrap().len(), 1);
        // No host port: the engine picks one (0 here).
        for (spec, ip) in [("80", None), ("127.0.0.1::80", Some("127.0.0.1"))] {
            let p = &ports(spec).unwrap()[0];
            assert_eq!((p.host_port, p.container_port), (0, 80), "{spec}");
            assert_eq!(p.host_ip.as_deref(), ip, "{spec}");
        }
        assert!(port("0:80").is_err());
        for bad in ["9000-9001:80", "9001-9000:80-81", "9000-9001:80-82"] {
            assert!(ports(bad).is_err(), "{bad}");
        }
        assert_eq!(size("64m").unwrap(), 64 << 20);
        assert_eq!(duration_ms("x", "1m30s").unwrap(), 90_000);
        assert_eq!(duration_ms("x", "500ms").unwrap(), 500);
        assert_eq!(duration_ms("x", "1.5s").unwrap(), 1500);
        assert!(duration_ms("x", "10").is_err() && duration_ms("x", "5x").is_err());
        assert_eq!(size("1.5g").unwrap(), 3 << 29);
        assert_eq!(size("512").unwrap(), 512);
        assert!(volume("./rel:/x").is_err());
        // A name, not a path: a named volume (an empty one: anonymous).
        assert_eq!(volume("data:/x").unwrap().kind, "volume");
        assert_eq!(volume("/x").unwrap().source, PathBuf::new());
        let v = volume("/tmp:/data:ro").unwrap();
        assert!(v.readonly);
    }
}
