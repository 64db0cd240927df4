//! The engine object and its pod and container operations.

use std::path::PathBuf;

use crate::db::{ContainerRow, Db, PodRow, Sandbox};
use crate::error::{Context, Error, Result};
use crate::model::{ContainerSpec, ContainerState, PodSpec, PodState};
use crate::paths::{self, Paths};
use crate::sandbox::{self, NetOptions, Setup};
use crate::specgen;

/// How to open the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Persistent state root (default /var/lib/wharf).
    pub root: PathBuf,
    /// Runtime directory (default /run/wharf).
    pub run: PathBuf,
    /// Cgroup parent of all pods: absolute in every hierarchy with cgroupfs (default
    /// "/wharf"), a slice with systemd ("wharf.slice").
    pub cgroup_parent: String,
    /// What places pods' cgroups.
    pub cgroup_driver: crate::cgroup_driver::CgroupDriver,
    /// Network settings.
    pub net: NetOptions,
    /// Registry settings for pulls.
    pub registries: wharf_image::config::RegistriesConfig,
    /// The wharf binary the shims run (default: this process's own executable).
    pub wharf_bin: Option<PathBuf>,
    /// Raise every negative oom_score_adj to 0 (the daemon's `restrict-oom-score-adj`).
    pub restrict_oom_score_adj: bool,
    /// The limits of containers whose users named none (the config file's `containers`).
    pub defaults: crate::defaults::ContainerDefaults,
    /// How much opening reconciles: every pod (the default), or only what interrupted
    /// operations left and the pods a command names.
    pub reconcile: crate::reconcile::Reconcile,
    /// When the store's commits reach the disk: at each (the default, for an engine that
    /// answers many calls), or once per engine, at [`Engine::sync_store`] and when it closes
    /// (a CLI command).
    pub commits: crate::db::Commits,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            root: paths::DEFAULT_ROOT.into(),
            run: paths::DEFAULT_RUN.into(),
            cgroup_parent: "/wharf".into(),
            cgroup_driver: Default::default(),
            net: NetOptions::default(),
            registries: Default::default(),
            wharf_bin: None,
            restrict_oom_score_adj: false,
            reconcile: Default::default(),
            defaults: Default::default(),
            commits: Default::default(),
        }
    }
}

/// The engine.
pub struct Engine {
    pub(crate) opts: EngineOptions,
    pub(crate) paths: Paths,
    pub(crate) db: Db,
    pub(crate) images: wharf_image::ImageStore,
    pub(crate) locks: crate::pod_lock::PodLocks,
    pub(crate) reconciled: crate::reconcile::Report,
    /// A shorter deadline for shim requests than the client's own, in milliseconds (0 for
    /// none): reconciling, which every command does first, must not wait long on one stuck
    /// shim.
    pub(crate) shim_deadline_ms: std::sync::atomic::AtomicU64,
    /// systemd, for the systemd cgroup driver (connected on first use).
    pub(crate) systemd: crate::cgroup_driver::SystemdLink,
}

impl Drop for Engine {
    /// The store's log is checkpointed by the last of a process's connections to close:
    /// the image store's, which closes after the engine's (see `Db::open_with`). A command
    /// that touched no image never made that connection, so the engine's checkpoints.
    fn drop(&mut self) {
        if !self.images.connected() {
            self.db.checkpoint_on_close();
        }
    }
}

impl Engine {
    /// Open the engine's state (creating directories and tables on first use), and
    /// reconcile it with what really exists ([`Engine::reconcile`]).
    pub fn open(opts: EngineOptions) -> Result<Engine> {
        let paths = Paths::new(&opts.root, &opts.run);
        crate::system::refuse_lost_store(&paths)?;
        let mut engine = Self::open_unchecked(opts)?;
        engine.reconciled = match &engine.opts.reconcile {
            crate::reconcile::Reconcile::All => engine.reconcile(),
            crate::reconcile::Reconcile::Touched(keys) => engine.reconcile_touched(keys),
            // The listing reconciles (`list_pods_reconciled`).
            crate::reconcile::Reconcile::Listing => Default::default(),
        };
        Ok(engine)
    }

    /// Open without the check for a lost store and without reconciling (what `wharf system
    /// repair` starts from).
    pub(crate) fn open_unchecked(opts: EngineOptions) -> Result<Engine> {
        opts.cgroup_driver.check_host()?;
        let paths = Paths::new(&opts.root, &opts.run);
        for d in [&paths.root, &paths.run] {
            paths::create_private_dir(d)?;
        }
        paths.spread_per_object_dirs();
        crate::error::set_store_path(&paths.db());
        let images = wharf_image::ImageStore::open_with(&paths.root, opts.registries.clone())
            .map_err(crate::error::from_image)?;
        let db = Db::open_with(&paths.db(), opts.commits)?;
        let locks = crate::pod_lock::PodLocks::new(paths.locks_dir());
        Ok(Engine {
            opts,
            paths,
            db,
            images,
            locks,
            reconciled: Default::default(),
            shim_deadline_ms: Default::default(),
            systemd: Default::default(),
        })
    }

    /// Put the store's changes so far on disk (with [`crate::db::Commits::Grouped`]; each
    /// commit is there already otherwise): before a command answers, when it goes on
    /// running after that (an attached `run`).
    pub fn sync_store(&self) -> Result<()> {
        self.db.sync()
    }

    /// The engine's directories.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The metadata store (the engine's own: front ends go through its operations and
    /// queries).
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// The options the engine was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    pub(crate) fn setup(&self) -> Setup<'_> {
        Setup {
            paths: &self.paths,
            net: &self.opts.net,
            cgroup_parent: &self.opts.cgroup_parent,
            cgroup_driver: self.opts.cgroup_driver,
            systemd: &self.systemd,
        }
    }

    /// Host ports for the mappings that name none (`-p 80`, `-P`): from the kernel's
    /// ephemeral range, as docker picks them, mapped by no other pod and free on the host
    /// now (a listener there would not see its traffic).
    fn assign_host_ports(&self, spec: &mut PodSpec) -> Result<()> {
        if spec.ports.iter().all(|p| p.host_port != 0) {
            return Ok(());
        }
        let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| {
                let mut it = r.split_whitespace().map(|n| n.parse::<u16>().ok());
                Some((it.next()??, it.next()??))
            })
            .filter(|(lo, hi)| lo <= hi)
            .unwrap_or((32768, 60999));
        let mut taken: std::collections::HashSet<(u16, String)> = self
            .db
            .pods()?
            .iter()
            .flat_map(|p| p.spec.ports.iter())
            .chain(spec.ports.iter())
            .map(|p| (p.host_port, p.protocol.clone()))
            .collect();
        let span = u32::from(hi - lo) + 1;
        let start = u32::from_str_radix(&paths::new_id()[..8], 16).unwrap_or(0) % span;
        for m in spec.ports.iter_mut().filter(|m| m.host_port == 0) {
            let free = (0..span)
                .map(|i| lo + ((start + i) % span) as u16)
                .find(|&port| {
                    !taken.contains(&(port, m.protocol.clone())) && free_on_host(port, &m.protocol)
                })
                .ok_or_else(|| {
                    Error::Other(format!(
                        "no free host port in {lo}-{hi} for container port {}/{}",
                        m.container_port, m.protocol
                    ))
                })?;
            m.host_port = free;
            taken.insert((free, m.protocol.clone()));
        }
        Ok(())
    }

    /// A network conflict names pods by id (the network knows no names): name them as the
    /// user does, and drop the new pod's own id, which the user never saw.
    fn pods_by_name(&self, e: Error) -> Error {
        let Error::Net(wharf_net::Error::Conflict(msg)) = &e else {
            return e;
        };
        let mut out = msg.clone();
        if let Some((first, rest)) = out.split_once(": ")
            && first.starts_with("pod ")
            && first.len() == 4 + 32
        {
            out = rest.to_string();
        }
        for word in msg.split(|c: char| !c.is_ascii_hexdigit()) {
            if word.len() == 32
                && let Ok(p) = self.db.find_pod(word)
            {
                out = out.replace(&format!("pod {word}"), &p.name);
            }
        }
        Error::Exists(out)
    }

    /// Create a pod: reserve its name, then build its sandbox (namespaces, network,
    /// /dev/shm, cgroup, name files). Nothing is left behind when a step fails.
    pub fn create_pod(&self, spec: &PodSpec) -> Result<PodRow> {
        self.create_pod_for(spec, None)
    }

    /// [`Engine::create_pod`], for the container `owner` alone when it names one (a
    /// standalone container's pod, whose cgroup may be the container's).
    pub(crate) fn create_pod_for(&self, spec: &PodSpec, owner: Option<&str>) -> Result<PodRow> {
        if let Some(parent) = &spec.cgroup_parent {
            self.opts.cgroup_driver.check_parent(parent)?;
        }
        // Every name that reaches a file or a path, checked before anything is made.
        crate::validate::pod_spec(spec)?;
        let mut spec = spec.clone();
        self.assign_host_ports(&mut spec)?;
        let id = paths::new_id();
        let name = match &spec.name {
            Some(n) => n.clone(),
            None => paths::generated_name("pod"),
        };
        crate::userns::check_pod(&name, &spec)?;
        let auto_userns = spec.userns.as_ref().is_some_and(|u| u.uid_map.is_empty());
        match &spec.userns {
            Some(_) if auto_userns => spec.userns = Some(crate::userns::choose(&self.db)?),
            Some(u) => crate::userns::validate(&name, u)?,
            None => {}
        }
        let spec = &spec;
        let mut row = PodRow {
            id: id.clone(),
            name,
            created_at: wharf_sys::time::now_rfc3339_nano(),
            spec: Box::new(spec.clone()),
            sandbox: Sandbox::default(),
            state: PodState::Creating,
        };
        // Locked (until the caller releases it) before the row exists: no other process
        // takes the pod for the leftover of a crash while it is being made. The mark finds
        // the lock if this process dies before the row is written.
        let mark = self.locks.hold_new(&id)?;
        crate::hooks::step("pod locked, no row yet");
        // The name is reserved first: a concurrent create with the same name fails here,
        // before anything exists.
        let mut inserted = self.db.insert_pod(&row);
        // Another process took the chosen id range meanwhile: choose again.
        for _ in 0..8 {
            match &inserted {
                Err(Error::Exists(_)) if auto_userns => {
                    inserted = crate::userns::choose(&self.db).and_then(|ns| {
                        row.spec.userns = Some(ns);
                        self.db.insert_pod(&row)
                    });
                }
                _ => break,
            }
        }
        if let Err(e) = inserted {
            self.locks.forget(&id);
            return Err(e);
        }
        drop(mark);
        let spec = &row.spec.clone();
        crate::hooks::step("pod row inserted");
        match sandbox::create(&self.setup(), &id, &row.name, spec, owner) {
            Ok(sb) => {
                row.sandbox = sb;
                row.state = PodState::Created;
                // The pod's supervisor starts with it (and its minimal init, when the pod
                // shares its PID namespace).
                let started = self
                    .db
                    .transaction(|db| {
                        db.update_pod(&id, &row.sandbox, row.state)?;
                        db.event("created", "pod", &id, &row.name, serde_json::json!({}))
                    })
                    .and_then(|()| self.shim(&row).map(|_| ()))
                    .and_then(|()| self.start_dns(&row))
                    .and_then(|()| {
                        if spec.share_pid {
                            self.start_pause(&mut row)
                        } else {
                            Ok(())
                        }
                    })
                    .and_then(|()| crate::ledger::save_pod(&self.paths, &row));
                crate::hooks::step("shim started");
                if let Err(e) = started {
                    self.shutdown_shim(&row);
                    let _ = sandbox::destroy(&self.setup(), &id, spec, &row.sandbox);
                    let _ = sandbox::remove_pod_dir(&self.setup(), &id);
                    let _ = self.locks.forget_with(&id, || self.db.delete_pod(&id));
                    return Err(e);
                }
                self.refresh_names_of_networks(&row.spec);
                Ok(row)
            }
            Err(e) => {
                let _ = self.locks.forget_with(&id, || self.db.delete_pod(&id));
                Err(self.pods_by_name(e))
            }
        }
    }

    /// Have the pod's shim answer DNS questions in the pod, for a pod on a user network.
    pub(crate) fn start_dns(&self, pod: &PodRow) -> Result<()> {
        let (Some(upstream), Some(netns), Some(etc)) = (
            &pod.sandbox.dns_upstream,
            &pod.sandbox.netns,
            &pod.sandbox.etc_dir,
        ) else {
            return Ok(());
        };
        let shim = self.shim(pod)?;
        shim.dns(&wharf_shim::protocol::DnsSpec {
            netns: netns.into(),
            hosts: PathBuf::from(etc).join("hosts"),
            upstream: upstream.clone(),
        })
        .map_err(|e| Error::Other(format!("pod {}: its DNS responder: {e}", pod.name)))
    }

    /// Remove a pod's sandbox and record (its containers must be removed first, or `force`).
    pub fn remove_pod(&self, key: &str, force: bool) -> Result<()> {
        let pod = self.db.find_pod(key)?;
        let (_lock, pod) = self.lock_and_read(&pod.id, || self.db.find_pod(&pod.id))?;
        let containers = self.db.containers(Some(&pod.id))?;
        if !containers.is_empty() && !force {
            return Err(Error::Precondition(format!(
                "pod {} has {} container(s): remove them first or force",
                pod.name,
                containers.len()
            )));
        }
        self.db
            .update_pod(&pod.id, &pod.sandbox, PodState::Removing)?;
        crate::hooks::step("pod: removing");
        // From here the pod is going: its network is taken down alongside the rest (a
        // removal that fails midway is finished by the next one).
        let net = sandbox::start_network_teardown(&self.setup(), &pod.id, &pod.spec, &pod.sandbox);
        let rest = (|| {
            for c in containers {
                self.remove_container(&c.id, true)?;
            }
            self.shutdown_shim(&pod);
            crate::hooks::step("pod: shim shut down");
            // Manifest volumes hold mounts (tmpfs, staged subPaths of host paths): they are
            // unmounted before the pod's directory is deleted, never deleted through.
            sandbox::remove_pod_dir(&self.setup(), &pod.id)?;
            sandbox::destroy_all_but_network(&self.setup(), &pod.id, &pod.sandbox)
        })();
        let net = net.finish();
        crate::hooks::step("pod: sandbox destroyed");
        rest.and(net)?;
        self.locks.forget_with(&pod.id, || {
            self.db.transaction(|db| {
                db.delete_pod(&pod.id)?;
                db.event("removed", "pod", &pod.id, &pod.name, serde_json::json!({}))
            })
        })?;
        self.refresh_names_of_networks(&pod.spec);
        Ok(())
    }

    /// Create a container in a pod from an image already in the store: its snapshot, its
    /// rootfs mount, its bundle (config.json). The runtime container is created when it is
    /// started by the pod's shim.
    pub fn create_container(&self, pod_key: &str, spec: &ContainerSpec) -> Result<ContainerRow> {
        self.create_container_as(pod_key, spec, paths::new_id())
    }

    /// A container joining a pod whose cgroup is its owner's gets a cgroup beside it
    /// (`sandbox::container_cgroup`): the pod's record names it first, for the pod's
    /// removal, or the recovery from a crash, to find.
    fn record_joiner(&self, mut pod: PodRow, id: &str) -> Result<PodRow> {
        if pod.sandbox.cgroup_owner.as_deref().is_none_or(|o| o == id) {
            return Ok(pod);
        }
        pod.sandbox.joined.push(id.to_string());
        self.db.update_pod(&pod.id, &pod.sandbox, pod.state)?;
        crate::ledger::save_pod(&self.paths, &pod)?;
        Ok(pod)
    }

    /// [`Engine::create_container`] with the id `id` (chosen before its pod was made).
    pub(crate) fn create_container_as(
        &self,
        pod_key: &str,
        spec: &ContainerSpec,
        id: String,
    ) -> Result<ContainerRow> {
        crate::validate::container_spec(spec)?;
        let pod = self.db.find_pod(pod_key)?;
        // Read again under the lock: a pod removed meanwhile gets no container.
        let (_lock, pod) = self.lock_and_read(&pod.id, || self.db.find_pod(&pod.id))?;
        let image = self.images.resolve(&spec.image)?;
        let pod = self.record_joiner(pod, &id)?;
        let name = match &spec.name {
            Some(n) => n.clone(),
            None => paths::generated_name(&spec.image),
        };
        if let Some(s) = &spec.stop_signal
            && wharf_sys::signal::parse(s).is_none()
        {
            return Err(Error::Invalid(format!(
                "container {name}: invalid stop signal {s:?}"
            )));
        }
        if let Some(log) = &spec.log_path {
            if !log.is_absolute() {
                return Err(Error::Invalid(format!(
                    "container {name}: log path {} is not absolute",
                    log.display()
                )));
            }
            if let Some(dir) = log.parent() {
                std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
            }
        }
        let mut spec = self.pin_image_volumes(spec)?;
        spec.name = Some(name.clone());
        let spec = self.ensure_named_volumes(&spec)?;
        let row = ContainerRow {
            id: id.clone(),
            name,
            pod_id: pod.id.clone(),
            created_at: wharf_sys::time::now_rfc3339_nano(),
            spec: Box::new(spec.clone()),
            image_id: image.id.to_string(),
            image_name: spec
                .image_name
                .clone()
                .unwrap_or_else(|| spec.image.clone()),
            state: ContainerState::Unknown,
            started_at: None,
            exit: None,
            restart_count: 0,
            restarting: false,
            waiting: false,
        };
        if let Err(e) = self.db.insert_container(&row) {
            self.remove_anonymous_volumes(&row.spec);
            return Err(e);
        }
        crate::hooks::step("container: row inserted");
        match self.make_bundle(&pod, &row, &image) {
            Ok(()) => {
                self.db.transaction(|db| {
                    db.update_container(&id, ContainerState::Created, None, None, 0)?;
                    db.event(
                        "created",
                        "container",
                        &id,
                        &row.name,
                        serde_json::json!({"image": row.image_name, "pod": pod.name}),
                    )
                })?;
                self.refresh_names_of_networks(&pod.spec);
                Ok(ContainerRow {
                    state: ContainerState::Created,
                    ..row
                })
            }
            Err(e) => {
                self.unmake_bundle(&pod.id, &id);
                let _ = self.db.delete_container(&id);
                self.release_image_volumes(&row.spec);
                self.remove_anonymous_volumes(&row.spec);
                Err(e)
            }
        }
    }

    fn make_bundle(
        &self,
        pod: &PodRow,
        row: &ContainerRow,
        image: &wharf_image::store::Image,
    ) -> Result<()> {
        self.write_bundle(pod, row, image, false)
    }

    /// The container's root filesystem mounted (its writable layer made first unless
    /// `existing`: a container restored after a reboot keeps its own) and its config.json
    /// written for `pod`'s sandbox as it is now.
    pub(crate) fn write_bundle(
        &self,
        pod: &PodRow,
        row: &ContainerRow,
        image: &wharf_image::store::Image,
        existing: bool,
    ) -> Result<()> {
        // A target's pid namespace: its process's, which must run (and be in this pod).
        let pid_ns = match &row.spec.pid_target {
            Some(t) => {
                let target = self.db.find_container(t)?;
                let st = self.container_status(&target.id)?;
                let pid = st.pid.filter(|_| target.pod_id == pod.id).ok_or_else(|| {
                    Error::Precondition(format!(
                        "container {}: its target {} for the pid namespace is not a running \
                         container of pod {}",
                        row.name, target.name, pod.name
                    ))
                })?;
                Some(format!("/proc/{pid}/ns/pid"))
            }
            None => None,
        };
        let rootfs_dir = self.paths.rootfs(&row.id);
        std::fs::create_dir_all(&rootfs_dir).ctx(|| format!("create {}", rootfs_dir.display()))?;
        let rootfs = if existing {
            self.images.container_rootfs(&row.id)?
        } else {
            self.images.prepare_container(image, &row.id)?
        };
        if !wharf_image::snapshot::is_mountpoint(&rootfs_dir) {
            self.images.own_layer_mount(&self.paths.run)?;
            match (&pod.spec.userns, &pod.sandbox.userns) {
                (Some(ns), Some(pin)) => crate::userns::mount_rootfs(
                    &rootfs,
                    &rootfs_dir,
                    ns,
                    std::path::Path::new(pin),
                )?,
                _ => rootfs.mount(&rootfs_dir)?,
            }
        }
        let runtime_spec = self.bind_image_volumes(&crate::pod_ip::given(&row.spec, pod))?;
        let runtime_spec = self.bind_sub_paths(&pod.id, &row.id, &runtime_spec)?;
        let runtime_spec = self.bind_named_volumes(&runtime_spec, &rootfs_dir)?;
        let config = specgen::generate(&specgen::Inputs {
            id: &row.id,
            spec: &runtime_spec,
            image: &image.config,
            rootfs: &rootfs_dir,
            sandbox: &pod.sandbox,
            pod: &pod.spec,
            hostname: sandbox::pod_hostname(&pod.spec, &pod.name),
            restrict_oom_score_adj: self.opts.restrict_oom_score_adj,
            pid_ns: pid_ns.as_deref(),
        })?;
        let bundle = self.paths.bundle(&row.id);
        std::fs::create_dir_all(&bundle).ctx(|| format!("create {}", bundle.display()))?;
        let path = bundle.join("config.json");
        // Owner-only: it holds the container's environment (passwords, tokens).
        paths::write_private(&path, &serde_json::to_vec_pretty(&config).expect("json"))?;
        crate::ledger::save_container(&self.paths, row)
    }

    /// Undo `make_bundle` (idempotent). Staged subPaths are released first; one that
    /// cannot be unmounted stays (the pod's removal tries again) and is never deleted
    /// through.
    fn unmake_bundle(&self, pod_id: &str, id: &str) {
        let _ = crate::pod_volumes::release_stages(&crate::pod_volumes::stages_dir(
            &self.pod_volumes_dir(pod_id),
            id,
        ));
        let rootfs = self.paths.rootfs(id);
        let _ = rustix::mount::unmount(&rootfs, rustix::mount::UnmountFlags::DETACH);
        let _ = std::fs::remove_dir_all(rootfs.parent().unwrap_or(&rootfs));
        let _ = self.images.remove_container(id);
        let _ = std::fs::remove_dir_all(self.paths.bundle(id));
    }

    /// Remove a container: its runtime container (through the shim, killing it if `force`),
    /// rootfs mount, snapshot, bundle, logs and record.
    pub fn remove_container(&self, key: &str, force: bool) -> Result<()> {
        let row = self.db.find_container(key)?;
        let (_lock, row) = self.lock_and_read(&row.pod_id, || self.db.find_container(&row.id))?;
        // An exit nobody recorded yet (a --rm container removed by its shim's exit
        // command) is recorded first: its "exited" event, with the code, outlives the row,
        // for a wait that sees the container only once it is gone.
        let row = self.refresh(&row).unwrap_or(row);
        self.shim_remove(&row, force)?;
        crate::hooks::step("container: deleted in shim");
        self.unmake_bundle(&row.pod_id, &row.id);
        crate::hooks::step("container: bundle removed");
        let removed = self.db.transaction(|db| {
            db.delete_container(&row.id)?;
            db.event(
                "removed",
                "container",
                &row.id,
                &row.name,
                serde_json::json!({"pod_id": row.pod_id}),
            )
        });
        if removed.is_ok() {
            self.release_image_volumes(&row.spec);
            self.drop_rm_guard(&row.id);
            if let Ok(pod) = self.db.find_pod(&row.pod_id) {
                self.refresh_names_of_networks(&pod.spec);
            }
        }
        removed
    }

    /// Where a container's log goes: the path its spec names (kubelet's), else its bundle's.
    pub fn log_path(&self, row: &ContainerRow) -> PathBuf {
        row.spec
            .log_path
            .clone()
            .unwrap_or_else(|| self.paths.log(&row.id))
    }

    /// The bundle directory of a container.
    pub fn bundle_dir(&self, id: &str) -> PathBuf {
        self.paths.bundle(id)
    }
}

/// Whether nothing on the host listens on `port` (tcp/udp; sctp is not checked).
fn free_on_host(port: u16, protocol: &str) -> bool {
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
    match protocol {
        "tcp" => std::net::TcpListener::bind(addr).is_ok(),
        "udp" => std::net::UdpSocket::bind(addr).is_ok(),
        _ => true,
    }
}
