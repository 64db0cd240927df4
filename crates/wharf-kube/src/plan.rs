//! From a parsed Pod to a [`PlayPlan`]: the pod spec, its containers, its volumes, the
//! images to make present, and warnings for everything left out.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::api;
use super::document::ParsedPod;
use super::env::{self, PodInfo};
use super::expand::expand;
use super::manifest::Manifest;
use super::resources::{self, Resources};
use super::security;
use super::validate;
use super::volumes::{self, Volume, VolumeSource};
use super::warnings;
use super::workloads::{LABEL_OWNER, Workload};
use wharf_engine::error::{Error, Result};
use wharf_engine::model::{
    ContainerSpec, DnsConfig, NetworkMode, PodSpec, PortMapping, RestartPolicy,
};
use wharf_engine::validate::Rule;
use wharf_shim::protocol::{Action, KubeSpec, ProbeSpec};

/// Kubernetes' default terminationGracePeriodSeconds.
pub const DEFAULT_GRACE_PERIOD: u64 = 30;

/// Label with the pod's name on each container (as the CRI labels them).
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Label with the pod's namespace on each container.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label with the container's name in the manifest (its engine name is `<pod>-<name>`).
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Facts about the host that a plan depends on.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Directory of Localhost seccomp profiles (`localhostProfile` is relative to it).
    pub seccomp_dir: PathBuf,
    /// The node's name (spec.nodeName in the downward API): the host name.
    pub node_name: String,
    /// CPUs of the host (limits.cpu of a container without a limit, downward API).
    pub node_cpus: u32,
    /// Memory of the host in bytes (limits.memory without a limit, downward API).
    pub node_memory: u64,
}

impl PlanOptions {
    /// Options for this host, with Localhost seccomp profiles under `<root>/seccomp`.
    pub fn for_host(root: &std::path::Path) -> PlanOptions {
        let node_name = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        let info = rustix::system::sysinfo();
        PlanOptions {
            seccomp_dir: root.join("seccomp"),
            node_name,
            node_cpus: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            node_memory: info.totalram as u64 * u64::from(info.mem_unit.max(1)),
        }
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions::for_host(std::path::Path::new(wharf_engine::paths::DEFAULT_ROOT))
    }
}

/// When to pull an image (imagePullPolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PullPolicy {
    /// Never pull: the image must be in the store.
    Never,
    /// Pull when the image is not in the store.
    IfNotPresent,
    /// Pull every time (re-resolve the tag).
    Always,
}

/// An image the pod needs, with the strictest pull policy of the containers using it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePull {
    /// Reference as written in the manifest.
    pub image: String,
    /// What to do before creating the containers.
    pub policy: PullPolicy,
}

/// Everything the engine does for `wharf play`, in order: make `images` present, create
/// the pod from `pod`, create `volumes`, substitute the pod's IP, resolve the containers'
/// volume mounts, create and run `init_containers` one after another to completion, then
/// create and start `containers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayPlan {
    /// The pod: name = metadata.name; namespace; hostname; network; host ports; DNS;
    /// namespaces shared with the host; restart policy; labels.
    pub pod: PodSpec,
    /// Init containers in order (`init: true`), each to run to success before the next.
    pub init_containers: Vec<ContainerSpec>,
    /// App containers (sidecar init containers first).
    pub containers: Vec<ContainerSpec>,
    /// Volumes to create before any container; mounts refer to them by name.
    pub volumes: Vec<Volume>,
    /// Images to make present, each once.
    pub images: Vec<ImagePull>,
    /// Seconds between SIGTERM and SIGKILL when the pod stops (also each container's
    /// stop_timeout).
    pub grace_period: Option<u64>,
    /// Every field left out or adjusted, with its path.
    pub warnings: Vec<String>,
}

impl PlayPlan {
    /// Init containers, then app containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &ContainerSpec> {
        self.init_containers.iter().chain(&self.containers)
    }
}

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}

/// The engine's rule for a manifest field, refused under the field's path.
fn check(field: impl std::fmt::Display, value: &str, rule: Rule) -> Result<()> {
    wharf_engine::validate::check(field, value, rule).map_err(|e| invalid(e.to_string()))
}

/// Plan the manifest's only pod for this host.
pub fn plan(m: &Manifest) -> Result<PlayPlan> {
    plan_with(m, None, &PlanOptions::default())
}

/// Plan pod `pod` of the manifest (None: the manifest must hold exactly one pod).
pub fn plan_with(m: &Manifest, pod: Option<&str>, opts: &PlanOptions) -> Result<PlayPlan> {
    let pp = select(m, pod)?;
    Planner::new(m, pp, opts).run()
}

/// The plan of a new pod of workload `w` (named `name`, ordinal `ordinal` of a
/// StatefulSet): its template as a Pod, labelled with its owner ([`LABEL_OWNER`]). A Job's
/// pods restart (restartPolicy OnFailure) at most backoffLimit times.
pub fn plan_workload_pod(
    m: &Manifest,
    w: &Workload,
    name: &str,
    ordinal: u32,
    opts: &PlanOptions,
) -> Result<PlayPlan> {
    let where_ = format!("{} {} pod {name}", w.kind.as_str(), w.name);
    let pp = w.pod(name, ordinal, &where_)?;
    let mut planner = Planner::new(m, &pp, opts);
    planner.replica = w.replicas > 1;
    let mut plan = planner.run()?;
    plan.pod.labels.insert(LABEL_OWNER.into(), w.owner());
    if let Some(job) = &w.job {
        plan.pod.max_restarts = Some(job.backoff_limit);
    }
    Ok(plan)
}

fn select<'a>(m: &'a Manifest, pod: Option<&str>) -> Result<&'a ParsedPod> {
    match pod {
        Some(name) => m.pods.iter().find(|p| p.name == name).ok_or_else(|| {
            invalid(format!(
                "the manifest has no pod {name:?} (it has {})",
                m.pod_names().join(", ")
            ))
        }),
        None if m.pods.len() == 1 => Ok(&m.pods[0]),
        None => Err(invalid(format!(
            "the manifest holds {} pods ({}); wharf play runs one pod: name it",
            m.pods.len(),
            m.pod_names().join(", ")
        ))),
    }
}

struct Planner<'a> {
    m: &'a Manifest,
    pp: &'a ParsedPod,
    opts: &'a PlanOptions,
    namespace: String,
    /// One of a workload's several replicas (no Service node ports: a host port has one
    /// owner).
    replica: bool,
    warnings: Vec<String>,
}

impl<'a> Planner<'a> {
    fn new(m: &'a Manifest, pp: &'a ParsedPod, opts: &'a PlanOptions) -> Self {
        Planner {
            m,
            pp,
            opts,
            namespace: pp
                .pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            warnings: Vec::new(),
            replica: false,
        }
    }

    fn run(mut self) -> Result<PlayPlan> {
        let pod = &self.pp.pod;
        let spec = &pod.spec;
        let name = self.pp.name.as_str();
        self.warnings.extend(self.m.warnings.iter().cloned());
        // (A volume of an unsupported type shows up here too, but volumes::plan turns it
        // into an error.)
        self.warnings
            .extend(self.pp.ignored.iter().map(|p| warnings::ignored(p)));
        if spec.containers.is_empty() {
            return Err(invalid(
                "spec.containers: a pod needs at least one container".into(),
            ));
        }
        self.check_container_names(spec)?;

        let mut resources = BTreeMap::new();
        for (path, c) in containers_with_paths(spec) {
            resources.insert(
                c.name.clone(),
                resources::read(c.resources.as_ref(), &path, &mut self.warnings)?,
            );
        }
        let service_account = spec
            .service_account_name
            .clone()
            .or_else(|| spec.service_account.clone())
            .unwrap_or_else(|| "default".into());
        let namespace = self.namespace.clone();
        let opts = self.opts;
        let info = PodInfo {
            name,
            namespace: &namespace,
            labels: &pod.metadata.labels,
            annotations: &pod.metadata.annotations,
            service_account: &service_account,
            node_name: &opts.node_name,
            node_cpus: opts.node_cpus,
            node_memory: opts.node_memory,
            manifest: self.m,
            resources: &resources,
        };
        let fs_group = match spec.security_context.as_ref().and_then(|s| s.fs_group) {
            Some(g) if !(0..=i64::from(i32::MAX)).contains(&g) => {
                return Err(invalid(format!(
                    "spec.securityContext.fsGroup: {g} is not a valid group id"
                )));
            }
            g => g.map(|g| g as u32),
        };
        let volumes = volumes::plan(spec, &self.pp.ignored, &info, fs_group, &mut self.warnings)?;
        let grace = spec
            .termination_grace_period_seconds
            .map(|s| s.max(0) as u64)
            .unwrap_or(DEFAULT_GRACE_PERIOD);

        let mut init_containers = Vec::new();
        let mut containers = Vec::new();
        for (i, c) in spec.init_containers.iter().enumerate() {
            let path = format!("spec.initContainers[{i}]");
            let sidecar = match c.restart_policy.as_deref() {
                None => false,
                Some("Always") => true,
                Some(other) => {
                    return Err(invalid(format!(
                        "{path}.restartPolicy {other:?} is invalid for an init container (only Always)"
                    )));
                }
            };
            if !sidecar {
                for (field, set) in [
                    ("lifecycle", c.lifecycle.is_some()),
                    ("livenessProbe", c.liveness_probe.is_some()),
                    ("readinessProbe", c.readiness_probe.is_some()),
                    ("startupProbe", c.startup_probe.is_some()),
                ] {
                    if set {
                        return Err(invalid(format!(
                            "{path}.{field} may only be set on an init container with restartPolicy: Always (a sidecar)"
                        )));
                    }
                }
            }
            init_containers.push(self.container(
                c,
                &path,
                (true, sidecar),
                &info,
                &volumes,
                grace,
            )?);
        }
        for (i, c) in spec.containers.iter().enumerate() {
            let path = format!("spec.containers[{i}]");
            if let Some(p) = &c.restart_policy {
                self.warnings.push(format!(
                    "{path}.restartPolicy {p:?} is not supported and is ignored: spec.restartPolicy applies"
                ));
            }
            containers.push(self.container(c, &path, (false, false), &info, &volumes, grace)?);
        }

        let mut pod_spec = self.pod_spec(spec)?;
        crate::services::publish(
            self.m,
            self.pp,
            &self.namespace,
            spec.host_network,
            self.replica,
            &mut pod_spec.ports,
            &mut self.warnings,
        )?;
        // Disk emptyDirs with a sizeLimit: the shim evicts the pod when one holds more.
        for v in &volumes {
            if let VolumeSource::EmptyDir {
                memory: false,
                size_limit: Some(bytes),
            } = v.source
            {
                pod_spec.disk_limits.insert(v.name.clone(), bytes);
            }
        }
        let images = images(spec)?;
        Ok(PlayPlan {
            pod: pod_spec,
            init_containers,
            containers,
            volumes,
            images,
            grace_period: Some(grace),
            warnings: self.warnings,
        })
    }

    fn check_container_names(&self, spec: &api::PodSpec) -> Result<()> {
        let mut seen: BTreeMap<&str, String> = BTreeMap::new();
        for (path, c) in containers_with_paths(spec) {
            if !validate::is_dns_label(&c.name) {
                return Err(invalid(format!(
                    "{path}.name {:?} is invalid: {}",
                    c.name,
                    validate::dns_label_hint()
                )));
            }
            if let Some(first) = seen.insert(&c.name, path.clone()) {
                return Err(invalid(format!(
                    "{path}.name: container name {:?} is already used by {first}",
                    c.name
                )));
            }
            let full = engine_name(&self.pp.name, &c.name);
            if full.len() > 128 {
                return Err(invalid(format!(
                    "{path}.name: the container's engine name {full:?} is longer than 128 characters; shorten the pod or container name"
                )));
            }
        }
        Ok(())
    }

    fn container(
        &mut self,
        c: &api::Container,
        path: &str,
        (init, sidecar): (bool, bool),
        info: &PodInfo<'_>,
        volumes: &[Volume],
        grace: u64,
    ) -> Result<ContainerSpec> {
        let image = c
            .image
            .as_deref()
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .ok_or_else(|| invalid(format!("{path}.image is required")))?;
        let env = env::resolve(info, c, path, &mut self.warnings)?;
        let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        // Kubernetes: command replaces the image's Entrypoint, args its Cmd; an empty
        // list is the same as none.
        let expand_all = |v: &Option<Vec<String>>| {
            v.as_ref()
                .filter(|v| !v.is_empty())
                .map(|v| v.iter().map(|a| expand(a, lookup)).collect::<Vec<_>>())
        };
        let mut spec = ContainerSpec {
            name: Some(engine_name(&self.pp.name, &c.name)),
            image: image.to_string(),
            entrypoint: expand_all(&c.command),
            command: expand_all(&c.args),
            workdir: c.working_dir.clone().filter(|w| !w.is_empty()),
            tty: c.tty,
            stdin: c.stdin,
            init,
            stop_timeout: Some(grace),
            ..Default::default()
        };
        spec.kube = self.kube_spec(c, path, grace, sidecar)?.map(Box::new);
        if c.stdin_once {
            self.warnings.push(format!(
                "{path}.stdinOnce is not supported and is ignored: stdin stays open while the container runs"
            ));
        }
        security::apply(
            &security::Inputs {
                pod: self.pp.pod.spec.security_context.as_ref(),
                container: c.security_context.as_ref(),
                annotations: &self.pp.pod.metadata.annotations,
                container_name: &c.name,
                path,
                seccomp_dir: &self.opts.seccomp_dir,
            },
            &mut spec,
            &mut self.warnings,
        )?;
        let res: &Resources = &info.resources[&c.name];
        resources::apply(res, path, &mut spec)?;
        spec.oom_score_adj = Some(resources::oom_score_adj(
            resources::qos(info.resources.values()),
            res,
            info.node_memory,
        ));
        spec.mounts = volumes::mounts(c, path, volumes, &env, spec.privileged)?;
        if self.pp.pod.spec.host_users == Some(false) {
            // As kubelet asks of the runtime: every volume id-mapped with the pod's maps,
            // so the pod's root owns what the host's root owns.
            for m in spec.mounts.iter_mut().filter(|m| m.kind != "tmpfs") {
                m.options.push("idmap".into());
            }
        }
        spec.env = env;
        spec.labels = BTreeMap::from([
            (LABEL_POD_NAME.to_string(), self.pp.name.clone()),
            (LABEL_POD_NAMESPACE.to_string(), self.namespace.clone()),
            (LABEL_CONTAINER_NAME.to_string(), c.name.clone()),
        ]);
        Ok(spec)
    }

    /// The probes and lifecycle hooks of container `c` as its shim runs them (None when
    /// it has neither and is no sidecar).
    fn kube_spec(
        &mut self,
        c: &api::Container,
        path: &str,
        grace: u64,
        sidecar: bool,
    ) -> Result<Option<KubeSpec>> {
        let mut k = KubeSpec {
            grace_ms: grace * 1000,
            sidecar,
            ..Default::default()
        };
        if let Some(p) = &c.liveness_probe {
            k.liveness = self.probe(c, p, &format!("{path}.livenessProbe"), true)?;
        }
        if let Some(p) = &c.readiness_probe {
            k.readiness = self.probe(c, p, &format!("{path}.readinessProbe"), false)?;
        }
        if let Some(p) = &c.startup_probe {
            k.startup = self.probe(c, p, &format!("{path}.startupProbe"), true)?;
        }
        if let Some(l) = &c.lifecycle {
            if let Some(h) = &l.post_start {
                k.post_start = self.hook(c, h, &format!("{path}.lifecycle.postStart"))?;
            }
            if let Some(h) = &l.pre_stop {
                k.pre_stop = self.hook(c, h, &format!("{path}.lifecycle.preStop"))?;
            }
        }
        let any = k.liveness.is_some()
            || k.readiness.is_some()
            || k.startup.is_some()
            || k.post_start.is_some()
            || k.pre_stop.is_some();
        Ok((any || sidecar).then_some(k))
    }

    /// A probe on kubelet's schedule and defaults (period 10 s, timeout 1 s, thresholds 1
    /// and 3). `kills`: a liveness or startup probe (whose successThreshold must be 1).
    fn probe(
        &mut self,
        c: &api::Container,
        p: &api::Probe,
        path: &str,
        kills: bool,
    ) -> Result<Option<ProbeSpec>> {
        let handlers = [
            p.exec.is_some(),
            p.http_get.is_some(),
            p.tcp_socket.is_some(),
            p.grpc.is_some(),
        ];
        match handlers.iter().filter(|h| **h).count() {
            0 => {
                return Err(invalid(format!(
                    "{path} has no handler (exec, httpGet, tcpSocket or grpc)"
                )));
            }
            1 => {}
            _ => {
                return Err(invalid(format!(
                    "{path} may not have more than one handler (exec, httpGet, tcpSocket or grpc)"
                )));
            }
        }
        let action = match &p.grpc {
            Some(g) => Action::Grpc {
                host: None,
                port: u16::try_from(g.port)
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        invalid(format!(
                            "{path}.grpc.port: {} is not a port (1-65535)",
                            g.port
                        ))
                    })?,
                service: g.service.clone().unwrap_or_default(),
            },
            None => self.action(
                c,
                p.exec.as_ref(),
                p.http_get.as_ref(),
                p.tcp_socket.as_ref(),
                path,
            )?,
        };
        let success = p.success_threshold.unwrap_or(1);
        if kills && success != 1 {
            return Err(invalid(format!(
                "{path}.successThreshold must be 1 for liveness and startup probes"
            )));
        }
        if !kills && p.termination_grace_period_seconds.is_some() {
            return Err(invalid(format!(
                "{path}.terminationGracePeriodSeconds must not be set for readiness probes"
            )));
        }
        let secs = |v: Option<u64>, default: u64| v.unwrap_or(default).max(1) * 1000;
        Ok(Some(ProbeSpec {
            action,
            initial_delay_ms: p.initial_delay_seconds.unwrap_or(0) * 1000,
            period_ms: secs(p.period_seconds, 10),
            timeout_ms: secs(p.timeout_seconds, 1),
            success_threshold: success.clamp(1, u64::from(u32::MAX)) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1),
            grace_ms: p.termination_grace_period_seconds.map(|s| s * 1000),
        }))
    }

    /// A postStart or preStop hook.
    fn hook(
        &mut self,
        c: &api::Container,
        h: &api::LifecycleHandler,
        path: &str,
    ) -> Result<Option<Action>> {
        let n = [
            h.exec.is_some(),
            h.http_get.is_some(),
            h.tcp_socket.is_some(),
            h.sleep.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if n != 1 {
            return Err(invalid(format!(
                "{path} must have exactly one handler (exec, httpGet or sleep)"
            )));
        }
        if h.tcp_socket.is_some() {
            self.warnings.push(format!(
                "{path}.tcpSocket is not supported (as in Kubernetes, where it is kept only for compatibility) and is ignored"
            ));
            return Ok(None);
        }
        if let Some(s) = &h.sleep {
            if s.seconds < 0 {
                return Err(invalid(format!(
                    "{path}.sleep.seconds must be 0 or more, not {}",
                    s.seconds
                )));
            }
            return Ok(Some(Action::Sleep {
                ms: s.seconds as u64 * 1000,
            }));
        }
        self.action(c, h.exec.as_ref(), h.http_get.as_ref(), None, path)
            .map(Some)
    }

    /// An exec, httpGet or tcpSocket handler (exactly one is given).
    fn action(
        &mut self,
        c: &api::Container,
        exec: Option<&api::ExecAction>,
        http: Option<&api::HttpGetAction>,
        tcp: Option<&api::TcpSocketAction>,
        path: &str,
    ) -> Result<Action> {
        if let Some(e) = exec {
            if e.command.is_empty() {
                return Err(invalid(format!("{path}.exec.command is required")));
            }
            return Ok(Action::Exec {
                command: e.command.clone(),
            });
        }
        if let Some(h) = http {
            let port = port_of(c, &h.port, &format!("{path}.httpGet.port"))?;
            let https = match h.scheme.as_deref().unwrap_or("HTTP") {
                "HTTP" => false,
                "HTTPS" => true,
                other => {
                    return Err(invalid(format!(
                        "{path}.httpGet.scheme {other:?} is invalid: HTTP or HTTPS"
                    )));
                }
            };
            let mut p = h.path.clone().unwrap_or_default();
            if !p.starts_with('/') {
                p.insert(0, '/');
            }
            if p.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
                return Err(invalid(format!(
                    "{path}.httpGet.path {p:?} is invalid: no spaces or control characters"
                )));
            }
            for hd in &h.http_headers {
                let bad = |s: &str| s.chars().any(|ch| ch == '\r' || ch == '\n');
                if hd.name.is_empty() || hd.name.contains(':') || bad(&hd.name) || bad(&hd.value) {
                    return Err(invalid(format!(
                        "{path}.httpGet.httpHeaders: {:?} is not a valid header",
                        hd.name
                    )));
                }
            }
            return Ok(Action::HttpGet {
                host: h.host.clone().filter(|h| !h.is_empty()),
                port,
                path: p,
                headers: h
                    .http_headers
                    .iter()
                    .map(|hd| (hd.name.clone(), hd.value.clone()))
                    .collect(),
                https,
            });
        }
        let t = tcp.expect("one handler");
        Ok(Action::TcpSocket {
            host: t.host.clone().filter(|h| !h.is_empty()),
            port: port_of(c, &t.port, &format!("{path}.tcpSocket.port"))?,
        })
    }

    fn pod_spec(&mut self, spec: &api::PodSpec) -> Result<PodSpec> {
        let name = self.pp.name.clone();
        if spec.share_process_namespace && spec.host_pid {
            return Err(invalid(
                "spec: shareProcessNamespace and hostPID cannot both be true".into(),
            ));
        }
        if let Some(h) = &spec.hostname
            && !validate::is_dns_label(h)
        {
            return Err(invalid(format!(
                "spec.hostname {h:?} is invalid: {}",
                validate::dns_label_hint()
            )));
        }
        if let Some(sub) = &spec.subdomain {
            check("spec.subdomain", sub, Rule::DnsLabel)?;
        }
        if spec.subdomain.is_some() {
            self.warnings.push(
                "spec.subdomain is not supported and is ignored: there is no cluster DNS".into(),
            );
        }
        if let Some(sa) = spec
            .service_account_name
            .as_deref()
            .or(spec.service_account.as_deref())
            .filter(|sa| *sa != "default")
        {
            self.warnings.push(format!(
                "spec.serviceAccountName {sa:?} is not supported and is ignored: no service account token is mounted"
            ));
        }
        if spec.automount_service_account_token == Some(true) {
            self.warnings.push(
                "spec.automountServiceAccountToken is not supported and is ignored: no service account token is mounted".into(),
            );
        }
        if let Some(s) = spec
            .scheduler_name
            .as_deref()
            .filter(|s| *s != "default-scheduler")
        {
            self.warnings.push(format!(
                "spec.schedulerName {s:?} is not supported and is ignored: scheduling has no meaning on a single host"
            ));
        }
        // Kubernetes: the hostname is spec.hostname, else the pod name cut to 63
        // characters; a pod on the host's network has the host's.
        let hostname = if spec.host_network {
            if spec.hostname.is_some() {
                self.warnings.push(
                    "spec.hostname is ignored: a pod on the host's network has the host's name"
                        .into(),
                );
            }
            None
        } else {
            Some(spec.hostname.clone().unwrap_or_else(|| {
                name.chars()
                    .take(63)
                    .collect::<String>()
                    .trim_end_matches(['-', '.'])
                    .to_string()
            }))
        };
        let restart = match spec.restart_policy.as_deref() {
            None | Some("Always") => RestartPolicy::Always,
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            Some(other) => {
                return Err(invalid(format!(
                    "spec.restartPolicy {other:?} is invalid (Always, OnFailure or Never)"
                )));
            }
        };
        let mut extra_hosts = Vec::new();
        for (i, a) in spec.host_aliases.iter().enumerate() {
            check(format!("spec.hostAliases[{i}].ip"), &a.ip, Rule::IpAddr)?;
            for (j, h) in a.hostnames.iter().enumerate() {
                check(
                    format!("spec.hostAliases[{i}].hostnames[{j}]"),
                    h,
                    Rule::HostAlias,
                )?;
            }
            extra_hosts.push((a.ip.clone(), a.hostnames.clone()));
        }
        let pod = PodSpec {
            disk_limits: BTreeMap::new(),
            name: Some(name),
            hostname,
            network: if spec.host_network {
                NetworkMode::Host
            } else {
                NetworkMode::Default
            },
            ports: self.ports(spec)?,
            dns: self.dns(spec)?,
            extra_hosts,
            share_pid: spec.share_process_namespace,
            host_pid: spec.host_pid,
            host_ipc: spec.host_ipc,
            shm_size: None,
            resources: None,
            restart,
            max_restarts: None,
            labels: self.pp.pod.metadata.labels.clone(),
            namespace: Some(self.namespace.clone()),
            cgroup_parent: None,
            annotations: self.pp.pod.metadata.annotations.clone(),
            // Warned about and skipped (see warnings.rs).
            sysctls: Default::default(),
            network_aliases: Vec::new(),
            extra_networks: Vec::new(),
            log_max_size: None,
            log_max_files: None,
            // hostUsers: false: a range of host ids the engine chooses, as kubelet does.
            userns: (spec.host_users == Some(false))
                .then(wharf_engine::model::UserNamespace::default),
        };
        // The engine's own check of every name, before anything is made.
        wharf_engine::validate::pod_spec(&pod).map_err(|e| invalid(e.to_string()))?;
        Ok(pod)
    }

    fn ports(&mut self, spec: &api::PodSpec) -> Result<Vec<PortMapping>> {
        let mut out: Vec<(PortMapping, String)> = Vec::new();
        for (cpath, c) in containers_with_paths(spec) {
            for (j, p) in c.ports.iter().enumerate() {
                let path = format!("{cpath}.ports[{j}]");
                if p.container_port == 0 {
                    return Err(invalid(format!(
                        "{path}.containerPort must be between 1 and 65535"
                    )));
                }
                let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
                    "TCP" => "tcp",
                    "UDP" => "udp",
                    "SCTP" => {
                        return Err(invalid(format!(
                            "{path}.protocol SCTP is not supported (TCP or UDP)"
                        )));
                    }
                    other => {
                        return Err(invalid(format!(
                            "{path}.protocol {other:?} is invalid (TCP or UDP)"
                        )));
                    }
                };
                let Some(host_port) = p.host_port.filter(|h| *h != 0) else {
                    if p.host_ip.is_some() {
                        self.warnings.push(format!(
                            "{path}.hostIP is ignored: the port has no hostPort"
                        ));
                    }
                    continue;
                };
                if let Some(ip) = &p.host_ip
                    && ip.parse::<IpAddr>().is_err()
                {
                    return Err(invalid(format!(
                        "{path}.hostIP {ip:?} is not an IP address"
                    )));
                }
                if spec.host_network {
                    if host_port != p.container_port {
                        return Err(invalid(format!(
                            "{path}.hostPort must equal containerPort on the host's network"
                        )));
                    }
                    continue;
                }
                let host_ip = p
                    .host_ip
                    .clone()
                    .filter(|ip| ip != "0.0.0.0" && ip != "::" && !ip.is_empty());
                if let Some((_, first)) = out.iter().find(|(o, _)| {
                    o.host_port == host_port
                        && o.protocol == protocol
                        && (o.host_ip.is_none() || host_ip.is_none() || o.host_ip == host_ip)
                }) {
                    return Err(invalid(format!(
                        "{path}.hostPort {host_port}/{protocol} is already used by {first}"
                    )));
                }
                out.push((
                    PortMapping {
                        host_port,
                        container_port: p.container_port,
                        protocol: protocol.to_string(),
                        host_ip,
                    },
                    path,
                ));
            }
        }
        Ok(out.into_iter().map(|(p, _)| p).collect())
    }

    fn dns(&mut self, spec: &api::PodSpec) -> Result<DnsConfig> {
        let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
        let cfg = spec.dns_config.clone().unwrap_or_default();
        match policy {
            // Without cluster DNS the kubelet treats ClusterFirst as Default too.
            "ClusterFirst" | "ClusterFirstWithHostNet" | "Default" => {
                if !cfg.nameservers.is_empty() {
                    self.warnings.push(format!(
                        "spec.dnsConfig.nameservers replace the host's name servers (with dnsPolicy {policy} Kubernetes would add them)"
                    ));
                }
            }
            "None" => {
                if spec.dns_config.is_none() || cfg.nameservers.is_empty() {
                    return Err(invalid(
                        "spec.dnsConfig.nameservers: dnsPolicy None needs at least one name server"
                            .into(),
                    ));
                }
            }
            other => {
                return Err(invalid(format!(
                    "spec.dnsPolicy {other:?} is invalid (ClusterFirst, ClusterFirstWithHostNet, Default or None)"
                )));
            }
        }
        if cfg.nameservers.len() > 3 {
            return Err(invalid(
                "spec.dnsConfig.nameservers: at most 3 name servers".into(),
            ));
        }
        for (i, s) in cfg.nameservers.iter().enumerate() {
            check(format!("spec.dnsConfig.nameservers[{i}]"), s, Rule::IpAddr)?;
        }
        for (i, s) in cfg.searches.iter().enumerate() {
            check(
                format!("spec.dnsConfig.searches[{i}]"),
                s,
                Rule::SearchDomain,
            )?;
        }
        if cfg.searches.len() > 32 {
            return Err(invalid(
                "spec.dnsConfig.searches: at most 32 search domains".into(),
            ));
        }
        let mut options = Vec::new();
        for (i, o) in cfg.options.iter().enumerate() {
            let option = match &o.value {
                Some(v) => format!("{}:{v}", o.name),
                None => o.name.clone(),
            };
            check(
                format!("spec.dnsConfig.options[{i}]"),
                &option,
                Rule::DnsOption,
            )?;
            options.push(option);
        }
        Ok(DnsConfig {
            servers: cfg.nameservers,
            searches: cfg.searches,
            options,
        })
    }
}

/// A probe's or hook's port: a number, or the name of one of the container's ports.
fn port_of(c: &api::Container, port: &api::IntOrString, path: &str) -> Result<u16> {
    match port {
        api::IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(format!("{path}: {n} is not a port (1-65535)"))),
        api::IntOrString::String(name) => {
            if let Ok(n) = name.parse::<i64>() {
                return port_of(c, &api::IntOrString::Int(n), path);
            }
            c.ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| invalid(format!("{path}: the container has no port named {name:?}")))
        }
    }
}

/// `<pod>-<container>`: container names are global in the engine, so a manifest's
/// container names are scoped by their pod (as podman does).
pub fn engine_name(pod: &str, container: &str) -> String {
    format!("{pod}-{container}")
}

fn containers_with_paths(spec: &api::PodSpec) -> impl Iterator<Item = (String, &api::Container)> {
    spec.init_containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        )
}

/// Kubernetes' default pull policy: Always for `:latest` or no tag, else IfNotPresent.
fn default_policy(image: &str) -> PullPolicy {
    if image.contains('@') {
        return PullPolicy::IfNotPresent;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => PullPolicy::Always,
        Some(_) => PullPolicy::IfNotPresent,
    }
}

/// The images of the containers and of the image volumes, each once with the strictest
/// of the policies that name it.
fn images(spec: &api::PodSpec) -> Result<Vec<ImagePull>> {
    let containers = containers_with_paths(spec).map(|(path, c)| {
        (
            format!("{path}.imagePullPolicy"),
            c.image.as_deref().unwrap_or("").trim(),
            c.image_pull_policy.as_deref(),
        )
    });
    let volumes = spec.volumes.iter().enumerate().filter_map(|(i, v)| {
        let im = v.image.as_ref()?;
        Some((
            format!("spec.volumes[{i}].image.pullPolicy"),
            im.reference.as_deref().unwrap_or("").trim(),
            im.pull_policy.as_deref(),
        ))
    });
    let mut out: Vec<ImagePull> = Vec::new();
    for (path, image, policy) in containers.chain(volumes) {
        let policy = match policy {
            None | Some("") => default_policy(image),
            Some("Always") => PullPolicy::Always,
            Some("IfNotPresent") => PullPolicy::IfNotPresent,
            Some("Never") => PullPolicy::Never,
            Some(other) => {
                return Err(invalid(format!(
                    "{path} {other:?} is invalid (Always, IfNotPresent or Never)"
                )));
            }
        };
        match out.iter_mut().find(|p| p.image == image) {
            Some(p) => p.policy = p.policy.max(policy),
            None => out.push(ImagePull {
                image: image.to_string(),
                policy,
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pull_policies() {
        assert_eq!(default_policy("busybox"), PullPolicy::Always);
        assert_eq!(default_policy("busybox:latest"), PullPolicy::Always);
        assert_eq!(
            default_policy("127.0.0.1:35000/fixtures/busybox"),
            PullPolicy::Always
        );
        assert_eq!(
            default_policy("127.0.0.1:35000/fixtures/busybox:1.36"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            default_policy("busybox@sha256:0123"),
            PullPolicy::IfNotPresent
        );
    }
}
