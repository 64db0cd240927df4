//! The one typed request a container is made from, docker's `POST /containers/create` body
//! (`Config` fields, `HostConfig`, `NetworkingConfig`), and its one conversion into the
//! engine's pod and container specs ([`CreateRequest::to_specs`]). The Docker API decodes
//! it from JSON; `wharf run` fills it from its flags, as docker's own CLI does: the two
//! cannot drift apart.
//!
//! Fields follow docker's JSON names (PascalCase) and meanings: sizes in bytes, durations
//! in nanoseconds, `NanoCpus` in billionths of a CPU, `PidsLimit` 0 or -1 for none. Fields
//! a client sends that Wharf does not model are ignored, as docker ignores unknown fields;
//! fields it models but cannot honour are refused with a message naming them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wharf_engine::model::{
    ContainerSpec, DeviceMapping, DnsConfig, ExtraNetwork, NetworkMode, PodSpec, PortMapping,
    RestartPolicy,
};

use crate::syntax::{self, Invalid, Result};

/// A docker health check (`Config.Healthcheck`): durations in nanoseconds, 0 for the
/// default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HealthConfig {
    /// `[]` (the image's), `["NONE"]`, `["CMD", argv...]` or `["CMD-SHELL", command]`.
    pub test: Option<Vec<String>>,
    /// Between checks.
    pub interval: i64,
    /// Longest a check may run.
    pub timeout: i64,
    /// Failures in a row before unhealthy.
    pub retries: i64,
    /// Failures that do not count after the start.
    pub start_period: i64,
    /// Between checks during the start period.
    pub start_interval: i64,
}

/// `HostConfig.RestartPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RestartPolicyBody {
    /// "", "no", "always", "unless-stopped", "on-failure".
    pub name: String,
    /// For on-failure: the most restarts (0: no limit).
    pub maximum_retry_count: i64,
}

/// `HostConfig.PortBindings` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PortBinding {
    /// Host address ("" for all).
    pub host_ip: String,
    /// Host port ("" or "0": one the engine picks).
    pub host_port: String,
}

/// `HostConfig.LogConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LogConfig {
    /// The driver ("" or json-file, local, k8s-file: the file the shim writes).
    #[serde(rename = "Type")]
    pub kind: String,
    /// Options: max-size, max-file.
    pub config: BTreeMap<String, String>,
}

/// `HostConfig.Ulimits` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Ulimit {
    /// `nofile`, `nproc`...
    pub name: String,
    /// Soft limit (-1: unlimited).
    pub soft: i64,
    /// Hard limit (-1: unlimited).
    pub hard: i64,
}

/// `HostConfig.Devices` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeviceBody {
    /// The device node on the host.
    pub path_on_host: String,
    /// Where it appears in the container ("": the same path).
    pub path_in_container: String,
    /// r, w, m ("": rwm).
    pub cgroup_permissions: String,
}

/// `HostConfig.Mounts` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct MountBody {
    /// bind, volume or tmpfs.
    #[serde(rename = "Type")]
    pub kind: String,
    /// Host path or volume name.
    pub source: String,
    /// Path in the container.
    pub target: String,
    /// Read-only.
    pub read_only: bool,
    /// Bind options.
    pub bind_options: Option<BindOptions>,
    /// Volume options.
    pub volume_options: Option<VolumeOptions>,
    /// Tmpfs options.
    pub tmpfs_options: Option<TmpfsOptions>,
}

/// `Mounts[].BindOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct BindOptions {
    /// private, rprivate, slave, rslave, shared, rshared.
    pub propagation: String,
}

/// `Mounts[].VolumeOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VolumeOptions {
    /// Do not fill the volume from the image.
    pub no_copy: bool,
    /// Labels of a volume made for it.
    pub labels: BTreeMap<String, String>,
    /// A path inside the volume.
    pub subpath: String,
}

/// `Mounts[].TmpfsOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TmpfsOptions {
    /// Size in bytes (0: the kernel's default).
    pub size_bytes: i64,
    /// Mode (decimal of the octal bits, as Go sends a FileMode).
    pub mode: u32,
}

/// docker's `HostConfig` (the fields Wharf honours; the rest of docker's are accepted when
/// they ask for nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HostConfig {
    /// `-v` strings.
    pub binds: Option<Vec<String>>,
    /// `--log-driver`, `--log-opt`.
    pub log_config: Option<LogConfig>,
    /// default, bridge, none, host, container:NAME, pod:NAME, or a network's name.
    pub network_mode: String,
    /// `-p`: "80/tcp" to bindings.
    pub port_bindings: Option<BTreeMap<String, Option<Vec<PortBinding>>>>,
    /// `--restart`.
    pub restart_policy: Option<RestartPolicyBody>,
    /// `--rm`: removed once it exited.
    pub auto_remove: bool,
    /// `--volumes-from` (not supported: refused).
    pub volumes_from: Option<Vec<String>>,
    /// `--mount`.
    pub mounts: Option<Vec<MountBody>>,
    /// Annotations.
    pub annotations: Option<BTreeMap<String, String>>,
    /// `--cap-add`.
    pub cap_add: Option<Vec<String>>,
    /// `--cap-drop`.
    pub cap_drop: Option<Vec<String>>,
    /// `--dns`.
    pub dns: Option<Vec<String>>,
    /// `--dns-option`.
    pub dns_options: Option<Vec<String>>,
    /// `--dns-search`.
    pub dns_search: Option<Vec<String>>,
    /// `--add-host` strings (HOST:IP).
    pub extra_hosts: Option<Vec<String>>,
    /// `--group-add`.
    pub group_add: Option<Vec<String>>,
    /// `--ipc`: "", private, shareable, host.
    pub ipc_mode: String,
    /// `--link` (not supported: refused).
    pub links: Option<Vec<String>>,
    /// `--oom-score-adj`.
    pub oom_score_adj: i32,
    /// `--pid`: "" or host.
    pub pid_mode: String,
    /// `--privileged`.
    pub privileged: bool,
    /// `-P`.
    pub publish_all_ports: bool,
    /// `--read-only`.
    pub readonly_rootfs: bool,
    /// `--security-opt`.
    pub security_opt: Option<Vec<String>>,
    /// `--tmpfs`: path to options.
    pub tmpfs: Option<BTreeMap<String, String>>,
    /// `--uts` ("" only).
    #[serde(rename = "UTSMode")]
    pub uts_mode: String,
    /// `--userns` ("" or host).
    pub userns_mode: String,
    /// `--shm-size` in bytes.
    pub shm_size: i64,
    /// `--sysctl`.
    pub sysctls: Option<BTreeMap<String, String>>,
    /// The OCI runtime ("", runc or wharf: Wharf's own).
    pub runtime: String,
    /// `--cgroup-parent` (not supported: refused when set).
    pub cgroup_parent: String,
    /// `--cpu-shares`.
    pub cpu_shares: i64,
    /// `-m`, bytes.
    pub memory: i64,
    /// `--memory-swap`, bytes (-1: unlimited).
    pub memory_swap: i64,
    /// `--memory-reservation`, bytes.
    pub memory_reservation: i64,
    /// `--cpus` in billionths.
    pub nano_cpus: i64,
    /// `--cpu-period` in microseconds.
    pub cpu_period: i64,
    /// `--cpu-quota` in microseconds.
    pub cpu_quota: i64,
    /// `--cpuset-cpus`.
    pub cpuset_cpus: String,
    /// `--cpuset-mems`.
    pub cpuset_mems: String,
    /// `--device`.
    pub devices: Option<Vec<DeviceBody>>,
    /// `--init`.
    pub init: Option<bool>,
    /// `--pids-limit` (None: the default; 0 or -1: none).
    pub pids_limit: Option<i64>,
    /// `--ulimit`.
    pub ulimits: Option<Vec<Ulimit>>,
    /// Paths masked in /proc and /sys (replaces the defaults).
    pub masked_paths: Option<Vec<String>>,
    /// Read-only paths (replaces the defaults).
    pub readonly_paths: Option<Vec<String>>,
}

/// `NetworkingConfig.EndpointsConfig` values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EndpointSettings {
    /// More names on that network.
    pub aliases: Option<Vec<String>>,
}

/// `NetworkingConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NetworkingConfig {
    /// By network name.
    pub endpoints_config: Option<BTreeMap<String, EndpointSettings>>,
}

/// The body of `POST /containers/create`: docker's container `Config` with `HostConfig` and
/// `NetworkingConfig` beside its fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CreateRequest {
    /// `--hostname`.
    pub hostname: String,
    /// `--domainname`.
    pub domainname: String,
    /// `-u`.
    pub user: String,
    /// `-t`.
    pub tty: bool,
    /// `-i`.
    pub open_stdin: bool,
    /// Close stdin after the first attach detaches (`docker run -i`).
    pub stdin_once: bool,
    /// `-e` as `K=V` (a bare `K` unsets nothing and is skipped, as docker does).
    pub env: Option<Vec<String>>,
    /// The command (None: the image's).
    pub cmd: Option<Vec<String>>,
    /// The health check.
    pub healthcheck: Option<HealthConfig>,
    /// The image.
    pub image: String,
    /// Anonymous volumes by path (`{"/data": {}}`).
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
    /// `-w`.
    pub working_dir: String,
    /// The entrypoint (None: the image's; `[""]`: none).
    pub entrypoint: Option<Vec<String>>,
    /// `--network none` in old clients.
    pub network_disabled: bool,
    /// `-l`.
    pub labels: Option<BTreeMap<String, String>>,
    /// `--stop-signal`.
    pub stop_signal: String,
    /// `--stop-timeout` in seconds.
    pub stop_timeout: Option<i64>,
    /// `--expose`: "80/tcp" keys.
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    /// The host's side.
    pub host_config: HostConfig,
    /// Networks and aliases.
    pub networking_config: NetworkingConfig,
}

/// Where a new container goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// A pod of its own (docker's one-container model).
    Own(Box<PodSpec>),
    /// The pod of this container (`--network container:NAME`).
    WithContainer(String),
    /// This pod (`--network pod:NAME`, `--pod NAME`).
    InPod(String),
}

/// What a create request makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Specs {
    /// Where the container goes.
    pub placement: Placement,
    /// The container.
    pub container: ContainerSpec,
}

/// What of the image a request's conversion needs.
#[derive(Debug, Clone, Default)]
pub struct ImageFacts {
    /// Its exposed ports (`80/tcp`), published by `-P`.
    pub exposed_ports: Vec<String>,
    /// Its HEALTHCHECK, which a container runs unless its request gives a test of its own
    /// (or `NONE`), as docker's do.
    pub healthcheck: Option<HealthConfig>,
}

impl ImageFacts {
    /// What the conversion needs of an image: its typed config and the docker members
    /// of its config blob ([`wharf_engine::images::Images::docker_config`]).
    pub fn of(
        image: &wharf_engine::images::Image,
        docker_config: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> ImageFacts {
        ImageFacts {
            exposed_ports: image
                .config
                .config()
                .as_ref()
                .and_then(|c| c.exposed_ports().clone())
                .unwrap_or_default(),
            healthcheck: docker_config
                .and_then(|c| c.get("Healthcheck"))
                .and_then(|h| serde_json::from_value(h.clone()).ok()),
        }
    }
}

fn field<T>(what: &str, r: Result<T>) -> Result<T> {
    r.map_err(|e| Invalid(format!("{what}: {e}")))
}

/// Refuse a docker option Wharf has no way to honour, naming it.
fn unsupported(set: bool, what: &str, why: &str) -> Result<()> {
    if set {
        return Err(Invalid(format!("{what} is not supported: {why}")));
    }
    Ok(())
}

/// docker's namespace mode: "" (the pod's own), host, or those that mean the same as ""
/// (`private`, `shareable`).
fn host_mode(what: &str, v: &str) -> Result<bool> {
    match v {
        "" | "private" | "shareable" => Ok(false),
        "host" => Ok(true),
        other => Err(Invalid(format!(
            "invalid {what} {other:?}: host, or the container's own"
        ))),
    }
}

/// The user namespace of `--userns` / `UsernsMode` (podman's values): "" or `host` for
/// the host's, `auto` for one of the pod's own with a range of host ids the engine
/// chooses.
pub fn userns_mode(v: &str) -> Result<Option<wharf_engine::model::UserNamespace>> {
    match v {
        "" | "host" => Ok(None),
        "auto" => Ok(Some(Default::default())),
        other => Err(Invalid(format!(
            "invalid UsernsMode (--userns) {other:?}: host, or auto (a user namespace of the \
             container's own, with host ids the engine chooses)"
        ))),
    }
}

/// A docker duration in nanoseconds as milliseconds, `default` for 0.
fn ns_to_ms(ns: i64, default: u64) -> u64 {
    if ns <= 0 {
        default
    } else {
        (ns as u64).div_ceil(1_000_000)
    }
}

impl CreateRequest {
    /// The health check the container's shim runs (docker's defaults: 30 s, 30 s, 3
    /// retries, 0 s), None for none or the image's.
    fn health(&self, image: &ImageFacts) -> Result<Option<wharf_shim::protocol::HealthSpec>> {
        // A request without a test of its own (none, or `[]`) takes the image's.
        let own = self
            .healthcheck
            .as_ref()
            .filter(|h| h.test.as_ref().is_some_and(|t| !t.is_empty()));
        let Some(h) = own.or(image.healthcheck.as_ref()) else {
            return Ok(None);
        };
        let test = h.test.clone().unwrap_or_default();
        let argv = match test.first().map(String::as_str) {
            None | Some("NONE") => return Ok(None),
            Some("CMD") if test.len() > 1 => test[1..].to_vec(),
            Some("CMD-SHELL") if test.len() == 2 => {
                vec!["/bin/sh".into(), "-c".into(), test[1].clone()]
            }
            _ => {
                return Err(Invalid(format!(
                    "invalid Healthcheck.Test {test:?}: [\"NONE\"], [\"CMD\", ARG...] or [\"CMD-SHELL\", COMMAND]"
                )));
            }
        };
        if h.interval < 0 || h.timeout < 0 || h.retries < 0 || h.start_period < 0 {
            return Err(Invalid(
                "invalid Healthcheck: durations and retries cannot be negative".into(),
            ));
        }
        Ok(Some(wharf_shim::protocol::HealthSpec {
            test: argv,
            interval_ms: ns_to_ms(h.interval, 30_000),
            timeout_ms: ns_to_ms(h.timeout, 30_000),
            retries: if h.retries == 0 { 3 } else { h.retries as u32 },
            start_period_ms: ns_to_ms(h.start_period, 0),
        }))
    }

    fn mounts(&self) -> Result<Vec<wharf_engine::model::VolumeMount>> {
        let hc = &self.host_config;
        let mut out = Vec::new();
        for b in hc.binds.iter().flatten() {
            out.push(field("HostConfig.Binds", syntax::volume(b))?);
        }
        for (path, opts) in hc.tmpfs.iter().flatten() {
            out.push(field("HostConfig.Tmpfs", syntax::tmpfs(path, opts))?);
        }
        for m in hc.mounts.iter().flatten() {
            let fields = syntax::MountFields {
                kind: m.kind.clone(),
                source: Some(m.source.clone()).filter(|s| !s.is_empty()),
                target: m.target.clone(),
                readonly: m.read_only,
                propagation: m
                    .bind_options
                    .as_ref()
                    .map(|b| b.propagation.clone())
                    .filter(|p| !p.is_empty()),
                subpath: m
                    .volume_options
                    .as_ref()
                    .map(|v| v.subpath.clone())
                    .filter(|p| !p.is_empty()),
                tmpfs_size: m
                    .tmpfs_options
                    .as_ref()
                    .map(|t| t.size_bytes)
                    .filter(|n| *n > 0),
                tmpfs_mode: m.tmpfs_options.as_ref().map(|t| t.mode).filter(|n| *n > 0),
            };
            out.push(field("HostConfig.Mounts", syntax::mount(&fields))?);
        }
        // Anonymous volumes: docker's `Config.Volumes`, unless something else is mounted
        // there.
        for path in self.volumes.iter().flat_map(|v| v.keys()) {
            if !out
                .iter()
                .any(|m| m.destination.as_os_str() == path.as_str())
            {
                out.push(field("Volumes", syntax::volume(path))?);
            }
        }
        Ok(out)
    }

    fn ports(&self, image: &ImageFacts) -> Result<Vec<PortMapping>> {
        let hc = &self.host_config;
        let mut out = Vec::new();
        for (key, bindings) in hc.port_bindings.iter().flatten() {
            let (port, proto) = field("HostConfig.PortBindings", syntax::port_key(key))?;
            let bindings = bindings.clone().unwrap_or_default();
            let bindings = if bindings.is_empty() {
                vec![PortBinding::default()]
            } else {
                bindings
            };
            for b in bindings {
                let host_port = match b.host_port.as_str() {
                    "" | "0" => 0,
                    p => match p.split_once('-') {
                        // A host range for one port: the first one free (docker's), here
                        // its first.
                        Some((lo, _)) => lo.parse::<u16>().ok(),
                        None => p.parse::<u16>().ok(),
                    }
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        Invalid(format!(
                            "HostConfig.PortBindings: invalid host port {p:?} for {key}"
                        ))
                    })?,
                };
                out.push(PortMapping {
                    host_port,
                    container_port: port,
                    protocol: proto.clone(),
                    host_ip: Some(b.host_ip.clone()).filter(|ip| !ip.is_empty() && ip != "0.0.0.0"),
                });
            }
        }
        if hc.publish_all_ports {
            let exposed = image
                .exposed_ports
                .iter()
                .cloned()
                .chain(self.exposed_ports.iter().flat_map(|e| e.keys().cloned()));
            for e in exposed {
                let (port, proto) = field("ExposedPorts", syntax::port_key(&e))?;
                if !out
                    .iter()
                    .any(|p| p.container_port == port && p.protocol == proto)
                {
                    out.push(PortMapping {
                        host_port: 0,
                        container_port: port,
                        protocol: proto,
                        host_ip: None,
                    });
                }
            }
        }
        Ok(out)
    }

    /// `LogConfig`: the driver must be the file the shim writes; max-size and max-file.
    fn log_opts(&self) -> Result<(Option<u64>, Option<u32>)> {
        let Some(l) = &self.host_config.log_config else {
            return Ok((None, None));
        };
        if !matches!(l.kind.as_str(), "" | "json-file" | "k8s-file" | "local") {
            return Err(Invalid(format!(
                "log driver {:?} is not supported: the log is a file the shim writes (json-file)",
                l.kind
            )));
        }
        let (mut size, mut files) = (None, None);
        for (k, v) in &l.config {
            match k.as_str() {
                "max-size" => {
                    let n = field("LogConfig max-size", syntax::size(v))?;
                    if n < 1024 {
                        return Err(Invalid(format!(
                            "invalid log option max-size={v}: at least 1k"
                        )));
                    }
                    size = Some(n as u64);
                }
                "max-file" => match v.parse::<u32>() {
                    Ok(n) if n >= 1 => files = Some(n),
                    _ => {
                        return Err(Invalid(format!(
                            "invalid log option max-file={v}: a number of files, 1 or more"
                        )));
                    }
                },
                // What docker's json-file driver takes and means nothing to the shim.
                "compress" | "labels" | "env" | "tag" | "mode" => {}
                other => {
                    return Err(Invalid(format!(
                        "invalid log option {other:?}: max-size or max-file"
                    )));
                }
            }
        }
        Ok((size, files))
    }

    /// The container's spec.
    fn container(&self, name: Option<&str>, image: &ImageFacts) -> Result<ContainerSpec> {
        let hc = &self.host_config;
        if self.image.is_empty() {
            return Err(Invalid("no image given".into()));
        }
        let sec = syntax::security_opts(hc.security_opt.as_deref().unwrap_or_default())?;
        let entrypoint = self.entrypoint.as_ref().map(|e| {
            // `--entrypoint ""`: none at all.
            if e.len() == 1 && e[0].is_empty() {
                Vec::new()
            } else {
                e.clone()
            }
        });
        let env = self
            .env
            .iter()
            .flatten()
            .filter_map(|e| {
                e.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        let cpus = match (hc.nano_cpus, hc.cpu_quota) {
            (n, q) if n > 0 && q > 0 => {
                return Err(Invalid(
                    "NanoCpus and CpuQuota set the same limit: give one".into(),
                ));
            }
            (n, _) if n > 0 => Some(n as f64 / 1e9),
            (_, q) if q > 0 => {
                let period = if hc.cpu_period > 0 {
                    hc.cpu_period
                } else {
                    100_000
                };
                Some(q as f64 / period as f64)
            }
            _ => None,
        };
        let ulimits = hc
            .ulimits
            .iter()
            .flatten()
            .map(|u| {
                let v = |n: i64| if n < 0 { u64::MAX } else { n as u64 };
                let s = format!(
                    "{}={}:{}",
                    u.name,
                    if u.soft < 0 {
                        "-1".into()
                    } else {
                        u.soft.to_string()
                    },
                    if u.hard < 0 {
                        "-1".into()
                    } else {
                        u.hard.to_string()
                    }
                );
                syntax::ulimit(&s).map(|(n, _, _)| (n, v(u.soft), v(u.hard)))
            })
            .collect::<Result<Vec<_>>>()?;
        let devices: Vec<DeviceMapping> = hc
            .devices
            .iter()
            .flatten()
            .map(|d| {
                syntax::device_mapping(&d.path_on_host, &d.path_in_container, &d.cgroup_permissions)
            })
            .collect::<Result<_>>()?;
        let groups = hc
            .group_add
            .iter()
            .flatten()
            .map(|g| {
                g.parse::<u32>()
                    .map_err(|_| Invalid(format!("invalid group {g:?}: a numeric group id")))
            })
            .collect::<Result<_>>()?;
        Ok(ContainerSpec {
            name: name.map(str::to_string),
            image: self.image.clone(),
            entrypoint,
            command: self.cmd.clone().filter(|c| !c.is_empty()),
            env,
            workdir: Some(self.working_dir.clone()).filter(|w| !w.is_empty()),
            user: Some(self.user.clone()).filter(|u| !u.is_empty()),
            groups,
            tty: self.tty,
            stdin: self.open_stdin,
            mounts: self.mounts()?,
            memory: Some(hc.memory).filter(|m| *m > 0),
            memory_swap: match hc.memory_swap {
                -1 => Some(-1),
                n if n > 0 => Some(n),
                _ => None,
            },
            cpus,
            cpu_shares: Some(hc.cpu_shares as u64).filter(|s| *s > 0),
            memory_reservation: Some(hc.memory_reservation).filter(|m| *m > 0),
            pids_limit: hc.pids_limit.map(|p| if p <= 0 { -1 } else { p }),
            oom_score_adj: Some(hc.oom_score_adj).filter(|o| *o != 0),
            privileged: hc.privileged,
            cap_add: hc.cap_add.clone().unwrap_or_default(),
            cap_drop: hc.cap_drop.clone().unwrap_or_default(),
            read_only: hc.readonly_rootfs,
            no_new_privileges: sec.no_new_privileges,
            seccomp: sec.seccomp,
            apparmor_profile: sec.apparmor,
            stop_signal: Some(self.stop_signal.clone()).filter(|s| !s.is_empty()),
            stop_timeout: self.stop_timeout.filter(|t| *t >= 0).map(|t| t as u64),
            labels: self.labels.clone().unwrap_or_default(),
            annotations: hc.annotations.clone().unwrap_or_default(),
            masked_paths: hc.masked_paths.clone(),
            readonly_paths: hc.readonly_paths.clone(),
            devices,
            ulimits,
            cpuset_cpus: Some(hc.cpuset_cpus.clone()).filter(|c| !c.is_empty()),
            cpuset_mems: Some(hc.cpuset_mems.clone()).filter(|c| !c.is_empty()),
            auto_remove: hc.auto_remove,
            health: self.health(image)?,
            ..Default::default()
        })
    }

    /// The network a pod of its own joins, the aliases it answers to there, and the
    /// further networks of the request (API 1.44+ sends every network of `docker run
    /// --network a --network b` and of a compose service here).
    fn network(&self) -> Result<(NetworkMode, Vec<String>, Vec<ExtraNetwork>)> {
        let hc = &self.host_config;
        let endpoints = self
            .networking_config
            .endpoints_config
            .clone()
            .unwrap_or_default();
        let mode = if self.network_disabled {
            "none".to_string()
        } else if !hc.network_mode.is_empty() {
            hc.network_mode.clone()
        } else {
            endpoints.keys().next().cloned().unwrap_or_default()
        };
        let aliases = endpoints
            .get(&mode)
            .or_else(|| endpoints.values().next())
            .and_then(|e| e.aliases.clone())
            .unwrap_or_default();
        let extra: Vec<ExtraNetwork> = endpoints
            .iter()
            .filter(|(name, _)| {
                let default = |n: &str| matches!(n, "" | "default" | "bridge");
                **name != mode && !(default(name) && default(&mode))
            })
            .map(|(name, e)| ExtraNetwork {
                name: name.clone(),
                aliases: e.aliases.clone().unwrap_or_default(),
            })
            .collect();
        if let Some(x) = extra
            .iter()
            .find(|x| matches!(x.name.as_str(), "bridge" | "default" | "host" | "none"))
        {
            return Err(Invalid(format!(
                "network {} cannot be one of a container's several networks: only user networks can",
                x.name
            )));
        }
        let mode = match mode.as_str() {
            "" | "default" | "bridge" => NetworkMode::Default,
            "none" => NetworkMode::None,
            "host" => NetworkMode::Host,
            name => NetworkMode::Named(name.to_string()),
        };
        if !extra.is_empty() && mode == NetworkMode::Host {
            return Err(Invalid(
                "a container on the host's network cannot join other networks".into(),
            ));
        }
        Ok((mode, aliases, extra))
    }

    /// The container's own pod.
    fn pod(&self, name: Option<&str>, image: &ImageFacts) -> Result<PodSpec> {
        let hc = &self.host_config;
        let (restart, max_restarts) = match &hc.restart_policy {
            None => (RestartPolicy::Never, None),
            Some(r) => {
                let p = syntax::restart_name(&r.name).ok_or_else(|| {
                    Invalid(format!(
                        "invalid restart policy {:?}: no, always, unless-stopped or on-failure",
                        r.name
                    ))
                })?;
                let max = (p == RestartPolicy::OnFailure && r.maximum_retry_count > 0)
                    .then_some(r.maximum_retry_count as u32);
                if p != RestartPolicy::OnFailure && r.maximum_retry_count > 0 {
                    return Err(Invalid(format!(
                        "invalid restart policy {:?}: only on-failure takes a maximum retry count",
                        r.name
                    )));
                }
                (p, max)
            }
        };
        if hc.auto_remove && restart != RestartPolicy::Never {
            return Err(Invalid(
                "conflicting options: AutoRemove (--rm) and a restart policy".into(),
            ));
        }
        let (log_max_size, log_max_files) = self.log_opts()?;
        let (network, network_aliases, extra_networks) = self.network()?;
        let hostname = Some(self.hostname.clone()).filter(|h| !h.is_empty());
        let extra_hosts = hc
            .extra_hosts
            .iter()
            .flatten()
            .map(|h| field("HostConfig.ExtraHosts", syntax::add_host(h)))
            .collect::<Result<_>>()?;
        Ok(PodSpec {
            name: name.map(str::to_string),
            hostname,
            network,
            network_aliases,
            extra_networks,
            ports: self.ports(image)?,
            restart,
            max_restarts,
            dns: DnsConfig {
                servers: hc.dns.clone().unwrap_or_default(),
                searches: hc.dns_search.clone().unwrap_or_default(),
                options: hc.dns_options.clone().unwrap_or_default(),
            },
            extra_hosts,
            sysctls: hc.sysctls.clone().unwrap_or_default(),
            shm_size: Some(hc.shm_size as u64).filter(|s| *s > 0),
            share_pid: hc.init.unwrap_or(false),
            host_pid: host_mode("PidMode", &hc.pid_mode)?,
            host_ipc: host_mode("IpcMode", &hc.ipc_mode)?,
            userns: userns_mode(&hc.userns_mode)?,
            log_max_size,
            log_max_files,
            ..Default::default()
        })
    }

    /// The specs this request makes, for a container named `name` (None: the engine
    /// picks). Options that set up a pod of the container's own are refused when it joins
    /// another's.
    pub fn to_specs(&self, name: Option<&str>, image: &ImageFacts) -> Result<Specs> {
        let hc = &self.host_config;
        unsupported(
            hc.volumes_from.as_ref().is_some_and(|v| !v.is_empty()),
            "VolumesFrom (--volumes-from)",
            "name the volumes to mount instead",
        )?;
        unsupported(
            hc.links.as_ref().is_some_and(|v| !v.is_empty()),
            "Links (--link)",
            "use a user network, where containers find each other by name",
        )?;
        unsupported(
            !hc.cgroup_parent.is_empty(),
            "CgroupParent (--cgroup-parent)",
            "Wharf places each container's pod below its own cgroup parent",
        )?;
        unsupported(
            !matches!(
                hc.runtime.as_str(),
                "" | "runc" | "wharf" | "io.containerd.runc.v2"
            ),
            "Runtime",
            "Wharf runs containers with its own runtime",
        )?;
        unsupported(
            !matches!(hc.uts_mode.as_str(), ""),
            "UTSMode",
            "a container has its pod's UTS namespace",
        )?;
        unsupported(
            !self.domainname.is_empty(),
            "Domainname (--domainname)",
            "a container has its pod's names",
        )?;
        let container = self.container(name, image)?;
        let placement = match hc.network_mode.split_once(':') {
            Some(("container", c)) => Placement::WithContainer(c.to_string()),
            Some(("pod", p)) => Placement::InPod(p.to_string()),
            _ => Placement::Own(Box::new(self.pod(name, image)?)),
        };
        if !matches!(placement, Placement::Own(_)) {
            let own = self.pod_fields();
            if !own.is_empty() {
                return Err(Invalid(format!(
                    "{} set up a container's own pod: they cannot be used with NetworkMode {}",
                    own.join(", "),
                    hc.network_mode
                )));
            }
        }
        Ok(Specs {
            placement,
            container,
        })
    }

    /// The fields set that configure a pod of the container's own.
    pub fn pod_fields(&self) -> Vec<&'static str> {
        let hc = &self.host_config;
        let some = |v: &Option<Vec<String>>| v.as_ref().is_some_and(|v| !v.is_empty());
        [
            ("Dns (--dns)", some(&hc.dns)),
            ("DnsSearch (--dns-search)", some(&hc.dns_search)),
            ("DnsOptions (--dns-option)", some(&hc.dns_options)),
            ("ExtraHosts (--add-host)", some(&hc.extra_hosts)),
            (
                "Sysctls (--sysctl)",
                hc.sysctls.as_ref().is_some_and(|s| !s.is_empty()),
            ),
            ("ShmSize (--shm-size)", hc.shm_size > 0),
            ("Init (--init)", hc.init == Some(true)),
            (
                "PortBindings (-p)",
                hc.port_bindings.as_ref().is_some_and(|p| !p.is_empty()),
            ),
            ("PublishAllPorts (-P)", hc.publish_all_ports),
            ("Hostname (--hostname)", !self.hostname.is_empty()),
            (
                "aliases (--network-alias)",
                self.networking_config
                    .endpoints_config
                    .iter()
                    .flat_map(|e| e.values())
                    .any(|e| e.aliases.as_ref().is_some_and(|a| !a.is_empty())),
            ),
            (
                "LogConfig (--log-opt)",
                self.host_config
                    .log_config
                    .as_ref()
                    .is_some_and(|l| !l.config.is_empty()),
            ),
            ("PidMode (--pid)", !hc.pid_mode.is_empty()),
            ("IpcMode (--ipc)", !hc.ipc_mode.is_empty()),
            ("UsernsMode (--userns)", !hc.userns_mode.is_empty()),
            (
                "RestartPolicy (--restart)",
                hc.restart_policy
                    .as_ref()
                    .is_some_and(|r| !matches!(r.name.as_str(), "" | "no")),
            ),
        ]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_health_check_runs_unless_the_request_has_a_test() {
        let image = ImageFacts {
            exposed_ports: Vec::new(),
            healthcheck: Some(HealthConfig {
                test: Some(vec!["CMD".into(), "true".into()]),
                interval: 5_000_000_000,
                ..Default::default()
            }),
        };
        let health = |body: serde_json::Value| {
            req(body)
                .to_specs(Some("h"), &image)
                .unwrap()
                .container
                .health
        };
        let inherited = health(serde_json::json!({"Image": "x"})).unwrap();
        assert_eq!(inherited.test, ["true"]);
        assert_eq!(inherited.interval_ms, 5000);
        let inherited = health(serde_json::json!({"Image": "x", "Healthcheck": {"Test": []}}));
        assert_eq!(inherited.unwrap().test, ["true"]);
        let none = health(serde_json::json!({"Image": "x", "Healthcheck": {"Test": ["NONE"]}}));
        assert!(none.is_none());
        let own = health(
            serde_json::json!({"Image": "x", "Healthcheck": {"Test": ["CMD-SHELL", "exit 0"]}}),
        );
        assert_eq!(own.unwrap().test, ["/bin/sh", "-c", "exit 0"]);
    }

    fn req(json: serde_json::Value) -> CreateRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn what_the_docker_cli_sends_becomes_the_engines_specs() {
        let r = req(serde_json::json!({
            "Hostname": "web", "User": "1000:1000", "Tty": true, "OpenStdin": true,
            "Env": ["A=1", "B=two=2", "UNSET"], "Cmd": ["sh", "-c", "true"],
            "Image": "busybox", "Volumes": {"/data": {}}, "WorkingDir": "/srv",
            "Entrypoint": [""], "Labels": {"tier": "web"}, "StopSignal": "SIGINT",
            "StopTimeout": 3,
            "Healthcheck": {"Test": ["CMD-SHELL", "true"], "Interval": 2_000_000_000i64, "Retries": 2},
            "ExposedPorts": {"81/tcp": {}},
            "HostConfig": {
                "Binds": ["/tmp:/host-tmp:ro", "named:/named"],
                "PortBindings": {"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}], "53/udp": null},
                "RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 2},
                "Tmpfs": {"/run": "size=1m"}, "Memory": 67108864, "NanoCpus": 500000000,
                "PidsLimit": 0, "Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 2048}],
                "CapAdd": ["NET_ADMIN"], "Dns": ["10.0.0.53"], "ExtraHosts": ["db:10.0.0.9"],
                "Sysctls": {"net.ipv4.ip_forward": "1"}, "ShmSize": 1048576, "Init": true,
                "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}},
                "PublishAllPorts": true, "SecurityOpt": ["no-new-privileges:true"],
                "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "", "CgroupPermissions": "rwm"}],
                "ConsoleSize": [24, 80], "KernelMemoryTCP": 0, "Isolation": ""
            },
            "NetworkingConfig": {"EndpointsConfig": {"appnet": {"Aliases": ["db-alias"]}}}
        }));
        let s = r
            .to_specs(
                Some("web-1"),
                &ImageFacts {
                    exposed_ports: vec!["80/tcp".into(), "443/tcp".into()],
                    healthcheck: None,
                },
            )
            .unwrap();
        let c = &s.container;
        assert_eq!(c.name.as_deref(), Some("web-1"));
        assert_eq!(c.entrypoint, Some(vec![]));
        assert_eq!(
            c.env,
            [("A".into(), "1".into()), ("B".into(), "two=2".into())]
        );
        assert_eq!(c.mounts.len(), 4);
        assert_eq!(c.memory, Some(64 << 20));
        assert_eq!(c.cpus, Some(0.5));
        assert_eq!(c.pids_limit, Some(-1));
        assert_eq!(c.ulimits, [("nofile".into(), 1024, 2048)]);
        assert!(c.no_new_privileges);
        let h = c.health.as_ref().unwrap();
        assert_eq!((h.interval_ms, h.retries, h.timeout_ms), (2000, 2, 30_000));
        assert_eq!(h.test, ["/bin/sh", "-c", "true"]);
        let Placement::Own(p) = &s.placement else {
            panic!("{:?}", s.placement)
        };
        assert_eq!(p.network, NetworkMode::Named("appnet".into()));
        assert_eq!(p.network_aliases, ["db-alias"]);
        assert_eq!(
            (p.restart, p.max_restarts),
            (RestartPolicy::OnFailure, Some(2))
        );
        assert_eq!((p.log_max_size, p.log_max_files), (Some(1 << 20), Some(2)));
        let ports: Vec<(u16, u16, &str)> = p
            .ports
            .iter()
            .map(|m| (m.host_port, m.container_port, m.protocol.as_str()))
            .collect();
        assert_eq!(
            ports,
            [
                (0, 53, "udp"),
                (8080, 80, "tcp"),
                (0, 443, "tcp"),
                (0, 81, "tcp")
            ]
        );
        assert!(p.share_pid);
    }

    #[test]
    fn what_wharf_cannot_honour_is_refused_by_name() {
        for (json, what) in [
            (
                serde_json::json!({"Image": "x", "HostConfig": {"Links": ["a:b"]}}),
                "Links",
            ),
            (
                serde_json::json!({"Image": "x", "HostConfig": {"VolumesFrom": ["a"]}}),
                "VolumesFrom",
            ),
            (
                serde_json::json!({"Image": "x", "HostConfig": {"Runtime": "kata"}}),
                "Runtime",
            ),
            (
                serde_json::json!({"Image": "x", "HostConfig": {"LogConfig": {"Type": "syslog"}}}),
                "syslog",
            ),
            (
                serde_json::json!({"Image": "x", "HostConfig": {"AutoRemove": true, "RestartPolicy": {"Name": "always"}}}),
                "AutoRemove",
            ),
            (
                serde_json::json!({"Image": "x", "HostConfig": {"NetworkMode": "container:a", "Dns": ["1.1.1.1"]}}),
                "Dns",
            ),
            (
                serde_json::json!({"Image": "x", "Healthcheck": {"Test": ["CMD"]}}),
                "Healthcheck",
            ),
            (serde_json::json!({}), "no image"),
        ] {
            let e = req(json)
                .to_specs(None, &ImageFacts::default())
                .unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
        let s =
            req(serde_json::json!({"Image": "x", "HostConfig": {"NetworkMode": "container:db"}}))
                .to_specs(None, &ImageFacts::default())
                .unwrap();
        assert_eq!(s.placement, Placement::WithContainer("db".into()));
    }
}
