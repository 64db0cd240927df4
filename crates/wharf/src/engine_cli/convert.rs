//! From command-line flags to docker's create request (as docker's own CLI turns its flags
//! into the API's body), which [`wharf_docker::CreateRequest::to_specs`] turns into the
//! engine's specs: `wharf run` and the Docker API meet in one conversion.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use wharf_docker::create::{
    CreateRequest, DeviceBody, EndpointSettings, HealthConfig, LogConfig, MountBody, PortBinding,
    RestartPolicyBody, TmpfsOptions, Ulimit,
};
use wharf_docker::syntax;
use wharf_engine::model::{NetworkMode, PortMapping, RestartPolicy};

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
    syntax::restart(s).map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.0.replacen("invalid restart policy", "invalid --restart", 1)
        )
    })
}

/// `-p`, with docker's ranges (one mapping per port).
pub fn ports(s: &str) -> Result<Vec<PortMapping>> {
    Ok(syntax::ports(s)?)
}

/// Sizes like docker's: 64m, 1g, 512k, plain bytes.
pub fn size(s: &str) -> Result<i64> {
    Ok(syntax::size(s)?)
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
            if !(c > 0.0 && c.is_finite()) {
                bail!("--cpus must be above 0");
            }
            cpu.set_period(Some(100_000));
            // Rounded as `run --cpus` rounds: 0.29 is 29000 µs, not the 28999 its binary
            // fraction truncates to.
            cpu.set_quota(Some((c * 100_000.0).round() as i64));
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

/// `wharf pod create`'s limits as the pod cgroup's resources (None when none is asked).
pub fn pod_limits(l: &super::args::PodLimits) -> Result<Option<oci_spec::runtime::LinuxResources>> {
    use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxPids, LinuxResources};
    let mut res = LinuxResources::default();
    if let Some(m) = &l.memory {
        let mut mem = LinuxMemory::default();
        mem.set_limit(Some(size(m)?));
        res.set_memory(Some(mem));
    }
    if l.cpus.is_some() || l.cpuset_cpus.is_some() {
        let mut cpu = LinuxCpu::default();
        if let Some(c) = l.cpus {
            anyhow::ensure!(
                c > 0.0 && c.is_finite(),
                "invalid --cpus {c}: it must be a positive number"
            );
            cpu.set_period(Some(100_000));
            cpu.set_quota(Some((c * 100_000.0).round() as i64));
        }
        cpu.set_cpus(l.cpuset_cpus.clone());
        res.set_cpu(Some(cpu));
    }
    if let Some(p) = l.pids_limit {
        let mut pids = LinuxPids::default();
        pids.set_limit(if p <= 0 { -1 } else { p });
        res.set_pids(Some(pids));
    }
    Ok((res != LinuxResources::default()).then_some(res))
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

/// `wharf run`'s flags as docker's create request (the container's name is given
/// beside it).
pub fn create_request(a: &RunArgs) -> Result<CreateRequest> {
    let (policy, max) = restart(&a.restart)?;
    if a.rm && policy != RestartPolicy::Never {
        bail!("conflicting options: --restart and --rm");
    }
    syntax::security_opts(&a.security_opt)
        .map_err(|e| anyhow::anyhow!("{}", e.0.replacen("security option", "--security-opt", 1)))?;
    let mut port_bindings: BTreeMap<String, Option<Vec<PortBinding>>> = BTreeMap::new();
    for p in &a.publish {
        for m in ports(p)? {
            port_bindings
                .entry(format!("{}/{}", m.container_port, m.protocol))
                .or_insert_with(|| Some(Vec::new()))
                .get_or_insert_with(Vec::new)
                .push(PortBinding {
                    host_ip: m.host_ip.unwrap_or_default(),
                    host_port: if m.host_port == 0 {
                        String::new()
                    } else {
                        m.host_port.to_string()
                    },
                });
        }
    }
    let mut tmpfs = BTreeMap::new();
    for t in &a.tmpfs {
        let (path, opts) = t.split_once(':').unwrap_or((t, ""));
        syntax::tmpfs(path, opts).with_context(|| format!("--tmpfs {t:?}"))?;
        tmpfs.insert(path.to_string(), opts.to_string());
    }
    for v in &a.volumes {
        syntax::volume(v)?;
    }
    let mounts = a
        .mount
        .iter()
        .map(|m| {
            let f = syntax::mount_flag(m)?;
            Ok(MountBody {
                kind: f.kind,
                source: f.source.unwrap_or_default(),
                target: f.target,
                read_only: f.readonly,
                bind_options: f
                    .propagation
                    .map(|propagation| wharf_docker::create::BindOptions { propagation }),
                volume_options: f
                    .subpath
                    .map(|subpath| wharf_docker::create::VolumeOptions {
                        subpath,
                        ..Default::default()
                    }),
                tmpfs_options: (f.tmpfs_size.is_some() || f.tmpfs_mode.is_some()).then(|| {
                    TmpfsOptions {
                        size_bytes: f.tmpfs_size.unwrap_or(0),
                        mode: f.tmpfs_mode.unwrap_or(0),
                    }
                }),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let devices = a
        .device
        .iter()
        .map(|d| {
            let m = syntax::device(d).map_err(|e| anyhow::anyhow!("--device: {e}"))?;
            Ok(DeviceBody {
                path_on_host: m.host_path.display().to_string(),
                path_in_container: m.container_path.display().to_string(),
                cgroup_permissions: m.permissions,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    for h in &a.add_host {
        syntax::add_host(h)?;
    }
    let ulimits = a
        .ulimit
        .iter()
        .map(|u| {
            let (name, soft, hard) = syntax::ulimit(u)?;
            let n = |v: u64| if v == u64::MAX { -1 } else { v as i64 };
            Ok(Ulimit {
                name,
                soft: n(soft),
                hard: n(hard),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = |v: &Option<String>| -> Result<i64> {
        v.as_deref().map(size).transpose().map(|n| n.unwrap_or(0))
    };
    let memory = bytes(&a.memory)?;
    let memory_swap = match a.memory_swap.as_deref() {
        Some("-1") => -1,
        Some(s) => size(s)?,
        None => 0,
    };
    if a.cpus.is_some() && a.cpu_quota.is_some() {
        bail!("--cpus and --cpu-quota set the same limit: give one");
    }
    if a.cpus.is_some_and(|c| c <= 0.0) {
        bail!("--cpus must be above 0");
    }
    for g in &a.group_add {
        g.parse::<u32>()
            .with_context(|| format!("invalid --group-add {g:?}: a numeric group id"))?;
    }
    namespace_mode("--pid", a.pid.as_deref())?;
    namespace_mode("--ipc", a.ipc.as_deref())?;
    let network_mode = match &a.pod {
        Some(p) => format!("pod:{p}"),
        None => a.network.clone(),
    };
    let endpoints = (!a.network_alias.is_empty()).then(|| {
        BTreeMap::from([(
            a.network.clone(),
            EndpointSettings {
                aliases: Some(a.network_alias.clone()),
            },
        )])
    });
    let exposed: BTreeMap<String, serde_json::Value> = a
        .expose
        .iter()
        .map(|e| {
            syntax::port_key(e).with_context(|| format!("--expose {e:?}"))?;
            Ok((e.clone(), serde_json::json!({})))
        })
        .collect::<Result<_>>()?;
    let entrypoint = a.entrypoint.as_ref().map(|e| {
        let words: Vec<String> = e.split_whitespace().map(String::from).collect();
        if words.is_empty() {
            vec![String::new()]
        } else {
            words
        }
    });
    Ok(CreateRequest {
        hostname: a.hostname.clone().unwrap_or_default(),
        user: a.user.clone().unwrap_or_default(),
        tty: a.tty,
        open_stdin: a.interactive,
        env: Some(
            env(a)?
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        ),
        cmd: (!a.command().is_empty()).then(|| a.command().to_vec()),
        healthcheck: health(a)?,
        image: a.image().to_string(),
        working_dir: a.workdir.clone().unwrap_or_default(),
        entrypoint,
        labels: Some(pairs("--label", &a.label)?),
        stop_signal: a.stop_signal.clone().unwrap_or_default(),
        stop_timeout: a.stop_timeout.map(|t| t as i64),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        host_config: wharf_docker::create::HostConfig {
            binds: Some(a.volumes.clone()),
            log_config: log_config(a)?,
            network_mode,
            port_bindings: Some(port_bindings),
            restart_policy: Some(RestartPolicyBody {
                name: a.restart.split(':').next().unwrap_or("").to_string(),
                maximum_retry_count: max.unwrap_or(0) as i64,
            }),
            auto_remove: a.rm,
            mounts: Some(mounts),
            cap_add: Some(a.cap_add.clone()),
            cap_drop: Some(a.cap_drop.clone()),
            dns: Some(a.dns.clone()),
            dns_options: Some(a.dns_option.clone()),
            dns_search: Some(a.dns_search.clone()),
            extra_hosts: Some(a.add_host.clone()),
            group_add: Some(a.group_add.clone()),
            ipc_mode: a.ipc.clone().unwrap_or_default(),
            userns_mode: a.userns.clone().unwrap_or_default(),
            oom_score_adj: a.oom_score_adj.map(oom_score_adj).transpose()?.unwrap_or(0),
            pid_mode: a.pid.clone().unwrap_or_default(),
            privileged: a.privileged,
            publish_all_ports: a.publish_all,
            readonly_rootfs: a.read_only,
            security_opt: Some(a.security_opt.clone()),
            tmpfs: Some(tmpfs),
            shm_size: bytes(&a.shm_size)?,
            sysctls: Some(pairs("--sysctl", &a.sysctl)?),
            cpu_shares: a.cpu_shares.unwrap_or(0) as i64,
            memory,
            memory_swap,
            memory_reservation: bytes(&a.memory_reservation)?,
            nano_cpus: a.cpus.map(|c| (c * 1e9).round() as i64).unwrap_or(0),
            cpu_period: a.cpu_period.unwrap_or(0) as i64,
            cpu_quota: a.cpu_quota.filter(|q| *q > 0).unwrap_or(0),
            cpuset_cpus: a.cpuset_cpus.clone().unwrap_or_default(),
            cpuset_mems: a.cpuset_mems.clone().unwrap_or_default(),
            devices: Some(devices),
            init: a.init.then_some(true),
            pids_limit: a.pids_limit,
            ulimits: Some(ulimits),
            ..Default::default()
        },
        networking_config: wharf_docker::create::NetworkingConfig {
            endpoints_config: endpoints,
        },
        ..Default::default()
    })
}

/// `--log-driver` (the default only) and `--log-opt max-size=/max-file=`.
fn log_config(a: &RunArgs) -> Result<Option<LogConfig>> {
    if let Some(d) = &a.log_driver
        && !matches!(d.as_str(), "json-file" | "k8s-file" | "local")
    {
        bail!("invalid --log-driver {d:?}: the log is a file the shim writes (json-file)");
    }
    let mut config = BTreeMap::new();
    for o in &a.log_opt {
        match o.split_once('=') {
            Some(("max-size", v)) => {
                let n = self::size(v)?;
                if n < 1024 {
                    bail!("invalid --log-opt {o:?}: max-size must be at least 1k");
                }
                config.insert("max-size".to_string(), v.to_string());
            }
            Some(("max-file", v)) => match v.parse::<u32>() {
                Ok(n) if n >= 1 => {
                    config.insert("max-file".to_string(), v.to_string());
                }
                _ => bail!("invalid --log-opt {o:?}: max-file is a number of files, 1 or more"),
            },
            _ => bail!("invalid --log-opt {o:?}: max-size=SIZE or max-file=N"),
        }
    }
    Ok(
        (a.log_driver.is_some() || !config.is_empty()).then(|| LogConfig {
            kind: a.log_driver.clone().unwrap_or_default(),
            config,
        }),
    )
}

/// `--pid`/`--ipc`: true for `host`; the container's own (the default) otherwise.
fn namespace_mode(flag: &str, v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("" | "private" | "shareable") => Ok(false),
        Some("host") => Ok(true),
        Some(other) => bail!("invalid {flag} {other:?}: host, or the container's own"),
    }
}

/// docker's durations: `30s`, `1m30s`, `500ms`, `2h` (Go's syntax), in milliseconds.
pub fn duration_ms(flag: &str, s: &str) -> Result<u64> {
    syntax::duration_ms(s)
        .map_err(|_| anyhow::anyhow!("invalid {flag} {s:?}: a duration like 30s, 1m30s or 500ms"))
}

/// `--health-*` as docker's Healthcheck (a shell command: docker's CMD-SHELL; durations
/// in nanoseconds, 0 for docker's defaults).
fn health(a: &RunArgs) -> Result<Option<HealthConfig>> {
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
        return Ok(a.no_healthcheck.then(|| HealthConfig {
            test: Some(vec!["NONE".into()]),
            ..Default::default()
        }));
    };
    if a.no_healthcheck {
        bail!("--no-healthcheck conflicts with --health-cmd");
    }
    let ns = |flag: &str, v: &Option<String>| -> Result<i64> {
        match v {
            Some(v) => {
                let ms = duration_ms(flag, v)?;
                if ms == 0 && flag != "--health-start-period" {
                    bail!("--health-interval and --health-timeout must be above zero");
                }
                Ok(ms as i64 * 1_000_000)
            }
            None => Ok(0),
        }
    };
    Ok(Some(HealthConfig {
        test: Some(vec!["CMD-SHELL".into(), cmd.clone()]),
        interval: ns("--health-interval", &a.health_interval)?,
        timeout: ns("--health-timeout", &a.health_timeout)?,
        retries: a.health_retries.unwrap_or(0) as i64,
        start_period: ns("--health-start-period", &a.health_start_period)?,
        start_interval: 0,
    }))
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
    fn update_cpus_round_as_run_rounds_them() {
        let r = update_resources(None, None, Some(0.29), None, None).unwrap();
        let cpu = r.cpu().as_ref().unwrap();
        assert_eq!(cpu.quota(), Some(29_000));
        assert_eq!(cpu.period(), Some(100_000));
        assert!(update_resources(None, None, Some(f64::NAN), None, None).is_err());
        assert!(update_resources(None, None, Some(0.0), None, None).is_err());
    }
}
