//! Containers: kubelet's ContainerConfig translated into the engine's container spec, and
//! the engine's containers shown as the CRI shows them.
//!
//! What kubelet's fields mean here, as they mean to containerd:
//! - `command` replaces the image's Entrypoint and `args` its Cmd; a command without args
//!   runs without the image's Cmd (Kubernetes' rule);
//! - the security context: `run_as_user`/`run_as_username`/`run_as_group`, supplemental
//!   groups, privileged, capabilities (with or without the CAP_ prefix), seccomp
//!   (RuntimeDefault, Unconfined, Localhost; none given is unconfined, as containerd has
//!   it), read-only rootfs, no_new_privs, masked and read-only paths (empty: the defaults);
//!   AppArmor only where the host has it (this code refuses a Localhost profile without
//!   it, and lets RuntimeDefault and Unconfined be, since both mean "no profile" there);
//!   SELinux relabelling is ignored, as SELinux is off where Wharf runs;
//! - mounts: bind mounts of host paths (recursive read-only ones with the runtime's `rro`) (created as directories when missing, as
//!   containerd does) with their propagation (HOST_TO_CONTAINER: rslave; BIDIRECTIONAL:
//!   rshared);
//! - `log_directory` (the pod's) joined with `log_path`: the container's log file, in the
//!   CRI log format kubelet reads and rotates;
//! - linux resources: CPU quota/period, shares, memory limit and swap, oom_score_adj;
//! - image volumes: an image's read-only view, or a path inside it (the engine's
//!   [`wharf_engine::image_volumes`]);
//! - devices: host device nodes (char or block) at the container's path, with their cgroup
//!   access (a subset of rwm);
//! - pid namespace TARGET (ephemeral debug containers): the target container's, which must
//!   run in the same pod.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::Status;
use wharf_engine::db::{ContainerRow, PodRow};
use wharf_engine::model::{ContainerSpec, ContainerState, SeccompMode, VolumeMount};
use wharf_engine::{Engine, Error, PodChoice};

use crate::api::*;
use crate::listings::{Listed, Listings};
use crate::meta;
use crate::status::from_engine;

fn invalid(container: &str, msg: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("container {container}: {msg}"))
}

/// The engine's container spec for a container config in `pod`.
pub fn container_spec(pod: &PodRow, config: &ContainerConfig) -> Result<ContainerSpec, Status> {
    let m = config
        .metadata
        .as_ref()
        .filter(|m| !m.name.is_empty())
        .ok_or_else(|| Status::invalid_argument("container config has no metadata name"))?;
    let name = m.name.as_str();
    let image = config
        .image
        .as_ref()
        .map(|i| i.image.trim().to_string())
        .filter(|i| !i.is_empty())
        .ok_or_else(|| invalid(name, "no image given"))?;
    let image_name = config
        .image
        .as_ref()
        .map(|i| i.user_specified_image.trim().to_string())
        .filter(|n| !n.is_empty() && *n != image);
    let mut labels: BTreeMap<String, String> = config
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(meta::NAME.into(), m.name.clone());
    labels.insert(meta::ATTEMPT.into(), m.attempt.to_string());
    let (entrypoint, command) = match (config.command.is_empty(), config.args.is_empty()) {
        (true, true) => (None, None),
        (true, false) => (None, Some(config.args.clone())),
        (false, _) => (Some(config.command.clone()), Some(config.args.clone())),
    };
    let linux = config.linux.clone().unwrap_or_default();
    let sc = linux.security_context.unwrap_or_default();
    let res = linux.resources.unwrap_or_default();
    let pid_target = match &sc.namespace_options {
        Some(ns) if ns.pid == NamespaceMode::Target as i32 => {
            if ns.target_id.is_empty() {
                return Err(invalid(name, "pid namespace TARGET without a target_id"));
            }
            Some(ns.target_id.clone())
        }
        _ => None,
    };
    if !config.cdi_devices.is_empty() {
        return Err(Status::unimplemented(format!(
            "container {name}: CDI devices are not supported yet"
        )));
    }
    let devices = config
        .devices
        .iter()
        .map(|d| {
            if !d.host_path.starts_with('/') || !d.container_path.starts_with('/') {
                return Err(invalid(
                    name,
                    format!(
                        "device {:?} -> {:?}: both paths must be absolute",
                        d.host_path, d.container_path
                    ),
                ));
            }
            Ok(wharf_engine::model::DeviceMapping {
                host_path: d.host_path.clone().into(),
                container_path: d.container_path.clone().into(),
                permissions: d.permissions.clone(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let log_path = match (
        pod.spec.labels.get(meta::LOG_DIRECTORY),
        config.log_path.as_str(),
    ) {
        (_, "") => None,
        (Some(dir), rel) => Some(Path::new(dir).join(rel)),
        (None, rel) if rel.starts_with('/') => Some(PathBuf::from(rel)),
        (None, rel) => {
            return Err(invalid(
                name,
                format!("log path {rel:?} is relative and the pod has no log directory"),
            ));
        }
    };
    let cpus = (res.cpu_quota > 0 && res.cpu_period > 0)
        .then(|| res.cpu_quota as f64 / res.cpu_period as f64);
    Ok(ContainerSpec {
        name: Some(meta::container_name(&pod.name, m)),
        image,
        image_name,
        entrypoint,
        command,
        env: config
            .envs
            .iter()
            .map(|kv| {
                String::from_utf8(kv.value.clone())
                    .map(|v| (kv.key.clone(), v))
                    .map_err(|_| invalid(name, format!("variable {} is not UTF-8", kv.key)))
            })
            .collect::<Result<_, _>>()?,
        workdir: Some(config.working_dir.clone()).filter(|w| !w.is_empty()),
        user: user(&sc, name)?,
        groups: sc
            .supplemental_groups
            .iter()
            .map(|g| u32::try_from(*g).map_err(|_| invalid(name, format!("invalid group {g}"))))
            .collect::<Result<_, _>>()?,
        tty: config.tty,
        stdin: config.stdin,
        mounts: config
            .mounts
            .iter()
            .map(|mnt| mount(mnt, name, pod.spec.userns.as_ref()))
            .collect::<Result<_, _>>()?,
        memory: (res.memory_limit_in_bytes > 0).then_some(res.memory_limit_in_bytes),
        memory_swap: (res.memory_swap_limit_in_bytes > 0).then_some(res.memory_swap_limit_in_bytes),
        cpus,
        cpu_shares: (res.cpu_shares > 0).then_some(res.cpu_shares as u64),
        cpuset_cpus: Some(res.cpuset_cpus.clone()).filter(|c| !c.is_empty()),
        cpuset_mems: Some(res.cpuset_mems.clone()).filter(|c| !c.is_empty()),
        unified: res
            .unified
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        oom_score_adj: (res.oom_score_adj != 0).then_some(res.oom_score_adj as i32),
        privileged: sc.privileged,
        cap_add: sc
            .capabilities
            .as_ref()
            .map(|c| c.add_capabilities.clone())
            .unwrap_or_default(),
        cap_drop: sc
            .capabilities
            .as_ref()
            .map(|c| c.drop_capabilities.clone())
            .unwrap_or_default(),
        read_only: sc.readonly_rootfs,
        no_new_privileges: sc.no_new_privs,
        seccomp: seccomp(&sc, name)?,
        labels,
        annotations: config
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        log_path,
        masked_paths: Some(sc.masked_paths.clone()).filter(|p| !p.is_empty()),
        readonly_paths: Some(sc.readonly_paths.clone()).filter(|p| !p.is_empty()),
        pid_target,
        devices,
        strict_groups: sc.supplemental_groups_policy == SupplementalGroupsPolicy::Strict as i32,
        apparmor_profile: apparmor(&sc, name)?,
        ..Default::default()
    })
}

/// `user[:group]` from the security context.
fn user(sc: &LinuxContainerSecurityContext, name: &str) -> Result<Option<String>, Status> {
    let user = match (&sc.run_as_user, sc.run_as_username.as_str()) {
        (Some(uid), _) if uid.value < 0 => {
            return Err(invalid(name, format!("invalid run_as_user {}", uid.value)));
        }
        (Some(uid), _) => Some(uid.value.to_string()),
        (None, "") => None,
        (None, n) => Some(n.to_string()),
    };
    let Some(gid) = &sc.run_as_group else {
        return Ok(user);
    };
    if gid.value < 0 {
        return Err(invalid(name, format!("invalid run_as_group {}", gid.value)));
    }
    // A group alone is refused, as containerd refuses it: the user is kubelet's to give.
    let Some(user) = user else {
        return Err(invalid(
            name,
            "run_as_group is set without run_as_user or run_as_username",
        ));
    };
    Ok(Some(format!("{user}:{}", gid.value)))
}

fn seccomp(sc: &LinuxContainerSecurityContext, name: &str) -> Result<SeccompMode, Status> {
    use security_profile::ProfileType;
    if sc.privileged {
        return Ok(SeccompMode::Unconfined);
    }
    if let Some(p) = &sc.seccomp {
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(SeccompMode::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(SeccompMode::Unconfined),
            Ok(ProfileType::Localhost) => localhost(&p.localhost_ref, name),
            Err(_) => Err(invalid(
                name,
                format!("unknown seccomp profile type {}", p.profile_type),
            )),
        };
    }
    #[allow(deprecated)]
    let path = sc.seccomp_profile_path.as_str();
    match path {
        // Nothing said: unconfined, as containerd (kubelet says RuntimeDefault when the
        // pod or the node's SeccompDefault asks for it).
        "" | "unconfined" => Ok(SeccompMode::Unconfined),
        "runtime/default" | "docker/default" => Ok(SeccompMode::RuntimeDefault),
        p => match p.strip_prefix("localhost/") {
            Some(file) => localhost(file, name),
            None => Err(invalid(name, format!("unknown seccomp profile {p:?}"))),
        },
    }
}

fn localhost(file: &str, name: &str) -> Result<SeccompMode, Status> {
    let path = PathBuf::from(file);
    if !path.is_absolute() {
        return Err(invalid(
            name,
            format!("seccomp profile {file:?} is not an absolute path"),
        ));
    }
    Ok(SeccompMode::Localhost(path))
}

/// The AppArmor profile to run under: a Localhost one by name (from `apparmor`, or the
/// deprecated `apparmor_profile` string, "localhost/NAME"), refused clearly on a host
/// without AppArmor. RuntimeDefault and Unconfined run unconfined: Wharf loads no default
/// profile of its own (containerd loads one, cri-containerd.apparmor.d).
fn apparmor(sc: &LinuxContainerSecurityContext, name: &str) -> Result<Option<String>, Status> {
    let localhost = match &sc.apparmor {
        Some(p) if p.profile_type == security_profile::ProfileType::Localhost as i32 => {
            Some(p.localhost_ref.clone())
        }
        Some(_) => None,
        #[allow(deprecated)]
        None => sc
            .apparmor_profile
            .strip_prefix("localhost/")
            .map(str::to_string),
    };
    let Some(profile) = localhost else {
        return Ok(None);
    };
    // kubelet sends the name; a "localhost/" prefix is accepted as well.
    let profile = profile
        .strip_prefix("localhost/")
        .unwrap_or(&profile)
        .to_string();
    if profile.is_empty() {
        return Err(invalid(name, "AppArmor Localhost profile without a name"));
    }
    if !wharf_engine::host::apparmor_enabled() {
        return Err(invalid(
            name,
            format!(
                "AppArmor profile {profile:?} asked for, but AppArmor is not enabled on this host"
            ),
        ));
    }
    Ok(Some(profile))
}

fn mount(
    m: &Mount,
    name: &str,
    userns: Option<&wharf_engine::model::UserNamespace>,
) -> Result<VolumeMount, Status> {
    use wharf_engine::image_volumes;
    if let Some(img) = m.image.as_ref().filter(|i| !i.image.is_empty()) {
        if !m.container_path.starts_with('/') {
            return Err(invalid(
                name,
                format!("image volume path {:?} is not absolute", m.container_path),
            ));
        }
        // The engine mounts the image's read-only view (and refuses a writable one).
        return Ok(VolumeMount {
            source: PathBuf::from(&img.image),
            destination: PathBuf::from(&m.container_path),
            readonly: m.readonly,
            kind: image_volumes::KIND.into(),
            options: Some(&m.image_sub_path)
                .filter(|p| !p.is_empty())
                .map(image_volumes::subpath_option)
                .into_iter()
                .collect(),
        });
    }
    // Recursive read-only: read-only all the way down, which only makes sense for a
    // read-only mount that receives no new mounts from the host.
    if m.recursive_read_only {
        if !m.readonly {
            return Err(invalid(
                name,
                format!(
                    "mount of {:?}: recursive_read_only needs readonly",
                    m.container_path
                ),
            ));
        }
        if m.propagation != MountPropagation::PropagationPrivate as i32 {
            return Err(invalid(
                name,
                format!(
                    "mount of {:?}: recursive_read_only needs private propagation",
                    m.container_path
                ),
            ));
        }
    }
    // Id-mapped (kubelet gives a user-namespaced pod's volumes its maps): the engine maps
    // them with the pod's, which these must be.
    let idmap = !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty();
    if idmap {
        let same = |ids: &[crate::api::IdMapping], map: &[wharf_engine::model::IdRange]| {
            ids.len() == map.len()
                && ids.iter().zip(map).all(|(i, r)| {
                    (i.container_id, i.host_id, i.length) == (r.container_id, r.host_id, r.size)
                })
        };
        match userns {
            Some(u) if same(&m.uid_mappings, &u.uid_map) && same(&m.gid_mappings, &u.gid_map) => {}
            Some(_) => {
                return Err(Status::unimplemented(format!(
                    "container {name}: mount of {:?}: id maps other than the pod's are not \
                     supported",
                    m.container_path
                )));
            }
            None => {
                return Err(invalid(
                    name,
                    format!(
                        "mount of {:?} has id maps, but the pod has no user namespace",
                        m.container_path
                    ),
                ));
            }
        }
    }
    let host = PathBuf::from(&m.host_path);
    if !host.is_absolute() || !m.container_path.starts_with('/') {
        return Err(invalid(
            name,
            format!(
                "mount {:?} -> {:?}: both paths must be absolute",
                m.host_path, m.container_path
            ),
        ));
    }
    // A missing host path is made a directory, as containerd makes it.
    if std::fs::symlink_metadata(&host).is_err() {
        std::fs::create_dir_all(&host).map_err(|err| {
            Status::internal(format!(
                "container {name}: create mount source {}: {err}",
                host.display()
            ))
        })?;
    }
    let propagation = match MountPropagation::try_from(m.propagation) {
        Ok(MountPropagation::PropagationHostToContainer) => Some("rslave"),
        Ok(MountPropagation::PropagationBidirectional) => Some("rshared"),
        _ => None,
    };
    Ok(VolumeMount {
        source: host,
        destination: PathBuf::from(&m.container_path),
        readonly: m.readonly,
        kind: "bind".into(),
        options: propagation
            .into_iter()
            .chain(m.recursive_read_only.then_some("rro"))
            .chain(idmap.then_some("idmap"))
            .map(String::from)
            .collect(),
    })
}

/// CreateContainer.
pub fn create(e: &Engine, req: CreateContainerRequest) -> Result<CreateContainerResponse, Status> {
    let config = req
        .config
        .ok_or_else(|| Status::invalid_argument("CreateContainer without a container config"))?;
    let pod = e.pod(&req.pod_sandbox_id).map_err(from_engine)?.row;
    if !pod.state.ready() {
        return Err(Status::failed_precondition(format!(
            "pod sandbox {} is not ready ({})",
            pod.id, pod.state
        )));
    }
    let spec = container_spec(&pod, &config)?;
    let row = e
        .create(PodChoice::Existing(pod.id.clone()), &spec)
        .map_err(from_engine)?;
    Ok(CreateContainerResponse {
        container_id: row.id,
    })
}

/// StartContainer.
pub fn start(e: &Engine, id: &str) -> Result<(), Status> {
    let c = e.container(id).map_err(from_engine)?;
    if c.row.state != ContainerState::Created {
        return Err(Status::failed_precondition(format!(
            "container {} is {}: only a created container can be started",
            c.row.id, c.row.state
        )));
    }
    e.start(id, false).map_err(from_engine)?;
    Ok(())
}

/// StopContainer: its stop signal, SIGKILL after `timeout` seconds; a stopped or unknown
/// one is fine (kubelet retries stops).
pub fn stop(e: &Engine, id: &str, timeout: i64) -> Result<(), Status> {
    let c = match e.container(id) {
        Ok(c) => c,
        Err(Error::NotFound { .. }) => return Ok(()),
        Err(err) => return Err(from_engine(err)),
    };
    if c.row.state != ContainerState::Running {
        return Ok(());
    }
    let grace = Duration::from_secs(timeout.max(0) as u64);
    e.stop(&c.row.id, Some(grace)).map_err(from_engine)?;
    Ok(())
}

/// RemoveContainer: killed if it runs; an unknown one is fine.
pub fn remove(e: &Engine, id: &str) -> Result<(), Status> {
    match e.remove_container(id, true) {
        Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
        Err(err) => Err(from_engine(err)),
    }
}

fn state(s: ContainerState) -> i32 {
    (match s {
        ContainerState::Created => ContainerStateCri::ContainerCreated,
        ContainerState::Running | ContainerState::Paused => ContainerStateCri::ContainerRunning,
        ContainerState::Exited => ContainerStateCri::ContainerExited,
        ContainerState::Unknown => ContainerStateCri::ContainerUnknown,
    }) as i32
}

use crate::api::ContainerState as ContainerStateCri;

/// The image of a container as the CRI shows it: by the name it was asked for, when
/// kubelet created it from the image's id, as containerd shows a tag of the image. kubelet
/// puts this into the pod's status, where an update of the pod's image must show (the
/// node conformance's Containers Lifecycle specs wait for it).
fn image_spec(row: &ContainerRow) -> ImageSpec {
    let by_id = row.spec.image.starts_with("sha256:");
    ImageSpec {
        image: if by_id && !row.image_name.starts_with("sha256:") && !row.image_name.is_empty() {
            row.image_name.clone()
        } else {
            row.spec.image.clone()
        },
        user_specified_image: row.image_name.clone(),
        ..Default::default()
    }
}

/// A container as ListContainers shows it.
pub fn container(row: &ContainerRow) -> Container {
    Container {
        id: row.id.clone(),
        pod_sandbox_id: row.pod_id.clone(),
        metadata: Some(meta::container_metadata(&row.spec.labels)),
        image: Some(image_spec(row)),
        image_ref: row.image_id.clone(),
        state: state(row.state),
        created_at: meta::nanos(Some(&row.created_at)),
        labels: meta::user_labels(&row.spec.labels),
        annotations: meta::to_map(&row.spec.annotations),
        image_id: row.image_id.clone(),
    }
}

/// What `take` makes of each container a CRI filter selects (id or prefix, state,
/// sandbox, labels), from the kept listing; the CLI's containers are left out.
fn select<T>(
    e: &Engine,
    listings: &Listings,
    f: &ContainerFilter,
    take: impl Fn(&Listed<ContainerRow, Container>) -> T,
) -> Result<Vec<T>, Status> {
    Ok(filtered(&listings.containers(e)?, f, take))
}

fn filtered<T>(
    containers: &[Listed<ContainerRow, Container>],
    f: &ContainerFilter,
    take: impl Fn(&Listed<ContainerRow, Container>) -> T,
) -> Vec<T> {
    containers
        .iter()
        .filter(|c| {
            c.cri.id.starts_with(&f.id)
                && c.cri.pod_sandbox_id.starts_with(&f.pod_sandbox_id)
                && f.state.as_ref().is_none_or(|s| s.state == c.cri.state)
                && meta::selected(&c.cri.labels, &f.label_selector)
        })
        .map(take)
        .collect()
}

/// The rows of the containers a CRI filter selects.
pub fn rows(
    e: &Engine,
    listings: &Listings,
    f: &ContainerFilter,
) -> Result<Vec<ContainerRow>, Status> {
    select(e, listings, f, |c| c.row.clone())
}

/// ListContainers, through the engine (which lists again where the kept listing is stale).
pub fn list(
    e: &Engine,
    listings: &Listings,
    req: ListContainersRequest,
) -> Result<ListContainersResponse, Status> {
    Ok(answer(&listings.containers(e)?, req))
}

/// ListContainers' answer from the listing of every CRI container.
pub fn answer(
    containers: &[Listed<ContainerRow, Container>],
    req: ListContainersRequest,
) -> ListContainersResponse {
    let f = req.filter.unwrap_or_default();
    ListContainersResponse {
        containers: filtered(containers, &f, |c| c.cri.clone()),
    }
}

fn resources(spec: &ContainerSpec) -> LinuxContainerResources {
    const PERIOD: i64 = 100_000;
    LinuxContainerResources {
        cpu_period: spec.cpus.map_or(0, |_| PERIOD),
        cpu_quota: spec.cpus.map_or(0, |c| (c * PERIOD as f64) as i64),
        cpu_shares: spec.cpu_shares.unwrap_or(0) as i64,
        memory_limit_in_bytes: spec.memory.unwrap_or(0),
        memory_swap_limit_in_bytes: spec.memory_swap.unwrap_or(0),
        oom_score_adj: spec.oom_score_adj.unwrap_or(0) as i64,
        ..Default::default()
    }
}

/// A container's status as ContainerStatus shows it.
pub fn container_status(st: &wharf_engine::ContainerStatus) -> ContainerStatus {
    let row = &st.view.row;
    let exit = row
        .exit
        .as_ref()
        .filter(|_| row.state == ContainerState::Exited);
    // The message is the exit's details (a start error, a dead shim), never the reason
    // again: kubelet appends the termination message to it ("Error: DONE" where
    // containerd gives "DONE").
    let (reason, message) = match exit {
        Some(x) if x.oom_killed => ("OOMKilled", None),
        Some(x) if x.code == 0 => ("Completed", None),
        Some(x) => (
            "Error",
            x.message.clone().or_else(|| {
                x.reason
                    .clone()
                    .filter(|r| !["Error", "Completed", "OOMKilled"].contains(&r.as_str()))
            }),
        ),
        None => ("", None),
    };
    ContainerStatus {
        id: row.id.clone(),
        metadata: Some(meta::container_metadata(&row.spec.labels)),
        state: state(row.state),
        created_at: meta::nanos(Some(&row.created_at)),
        started_at: meta::nanos(st.started_at.as_deref().or(row.started_at.as_deref())),
        finished_at: meta::nanos(exit.map(|x| x.finished_at.as_str())),
        exit_code: exit.map_or(0, |x| x.code),
        image: Some(image_spec(row)),
        image_ref: row.image_id.clone(),
        reason: reason.to_string(),
        message: st.exit_message.clone().or(message).unwrap_or_default(),
        labels: meta::user_labels(&row.spec.labels),
        annotations: meta::to_map(&row.spec.annotations),
        mounts: row
            .spec
            .mounts
            .iter()
            .filter(|m| m.kind == "bind" || m.kind == wharf_engine::image_volumes::KIND)
            .map(|m| Mount {
                image: (m.kind == wharf_engine::image_volumes::KIND).then(|| ImageSpec {
                    image: m.source.display().to_string(),
                    ..Default::default()
                }),
                container_path: m.destination.display().to_string(),
                host_path: m.source.display().to_string(),
                readonly: m.readonly,
                propagation: if m.options.iter().any(|o| o == "rshared") {
                    MountPropagation::PropagationBidirectional
                } else if m.options.iter().any(|o| o == "rslave") {
                    MountPropagation::PropagationHostToContainer
                } else {
                    MountPropagation::PropagationPrivate
                } as i32,
                ..Default::default()
            })
            .collect(),
        log_path: st.view.log_path.display().to_string(),
        resources: Some(ContainerResources {
            linux: Some(resources(&row.spec)),
            windows: None,
        }),
        image_id: row.image_id.clone(),
        ..Default::default()
    }
}

/// ContainerStatus, with containerd's kind of verbose info (pid, sandbox, runtime spec).
pub fn status(e: &Engine, req: ContainerStatusRequest) -> Result<ContainerStatusResponse, Status> {
    let st = e.container_status(&req.container_id).map_err(from_engine)?;
    let mut info = std::collections::HashMap::new();
    let spec: serde_json::Value = std::fs::read(st.view.bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    // The identity its first process gets (SupplementalGroupsPolicy's ContainerUser).
    let u = &spec["process"]["user"];
    let user = u["uid"].as_i64().map(|uid| ContainerUser {
        linux: Some(LinuxContainerUser {
            uid,
            gid: u["gid"].as_i64().unwrap_or(0),
            supplemental_groups: u["additionalGids"]
                .as_array()
                .map(|a| a.iter().filter_map(|g| g.as_i64()).collect())
                .unwrap_or_default(),
        }),
    });
    if req.verbose {
        info.insert(
            "info".to_string(),
            serde_json::json!({
                "sandboxID": st.view.row.pod_id,
                "pid": st.pid,
                "name": st.view.row.name,
                "restartCount": st.view.row.restart_count,
                "bundle": st.view.bundle,
                "config": st.view.row.spec,
                "runtimeSpec": spec,
            })
            .to_string(),
        );
    }
    let mut status = container_status(&st);
    status.user = user;
    Ok(ContainerStatusResponse {
        status: Some(status),
        info,
    })
}

/// The container a request names, or NotFound.
pub fn row(e: &Engine, id: &str) -> Result<ContainerRow, Status> {
    Ok(e.container(id).map_err(from_engine)?.row)
}

/// The OCI resources an UpdateContainerResources request sets (what it leaves at zero
/// stays as it is).
pub fn linux_resources(r: LinuxContainerResources) -> oci_spec::runtime::LinuxResources {
    use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxResources};
    let mut cpu = LinuxCpu::default();
    if r.cpu_shares > 0 {
        cpu.set_shares(Some(r.cpu_shares as u64));
    }
    if r.cpu_quota != 0 {
        cpu.set_quota(Some(r.cpu_quota));
    }
    if r.cpu_period > 0 {
        cpu.set_period(Some(r.cpu_period as u64));
    }
    if !r.cpuset_cpus.is_empty() {
        cpu.set_cpus(Some(r.cpuset_cpus));
    }
    if !r.cpuset_mems.is_empty() {
        cpu.set_mems(Some(r.cpuset_mems));
    }
    let mut memory = LinuxMemory::default();
    if r.memory_limit_in_bytes > 0 {
        memory.set_limit(Some(r.memory_limit_in_bytes));
    }
    if r.memory_swap_limit_in_bytes > 0 {
        memory.set_swap(Some(r.memory_swap_limit_in_bytes));
    }
    let mut res = LinuxResources::default();
    res.set_cpu(Some(cpu));
    res.set_memory(Some(memory));
    res.set_devices(None);
    if !r.unified.is_empty() {
        res.set_unified(Some(r.unified.into_iter().collect()));
    }
    res
}
