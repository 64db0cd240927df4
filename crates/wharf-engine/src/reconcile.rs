//! Reconciling the store with what really exists, each time the engine is opened.
//!
//! Any process using the engine may be killed at any point (the CLI with SIGKILL, a shim by
//! the OOM killer, the whole host by a reboot). The store then says what was intended, and
//! the disk, the kernel and the shims say what is. On open, the engine compares the two for
//! every pod, cheaply: a scan of the pods and containers tables and, per pod, the shim's pid
//! file and `/proc/<pid>/stat` (plus one statfs when the shim is dead). Only a pod that looks
//! wrong is locked ([`crate::pod_lock`]) and repaired:
//!
//! - a pod still `creating` (its creator died midway): its sandbox is torn down (the
//!   teardown is idempotent and works from the pod id when the sandbox record is empty) and
//!   its row removed, as `create_pod` does when a step fails;
//! - a pod still `removing`: the removal is finished;
//! - a container still `unknown` (its bundle was being made): rolled back as
//!   `create_container` does on error;
//! - a pod whose shim is dead (its pid file names a process that is gone, or containers are
//!   recorded as running): [`Engine::reap_pod`] kills what is left of its containers and
//!   records their exits (the shim's own exit records win; otherwise reason `ShimDied`);
//! - a pod whose pinned namespaces are gone as well (the host restarted, or the run
//!   directory was emptied): what is left of its sandbox (network attachment and IP lease,
//!   cgroups, mounts, directories) is released and the pod is marked [`PodState::Dead`]; its
//!   containers keep their rows and logs until removed;
//! - a container recorded as running that its (live) shim does not know: marked exited
//!   (reason `Lost`);
//! - a standalone pod (made by `wharf run` for one container) left without containers by an
//!   interrupted run: removed.
//!
//! A pod whose lock another process holds is left alone: that process is at work on it.
//! Nothing here fails the open: problems are reported as warnings.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::db::{ContainerRow, PodRow, Sandbox};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::{ContainerState, ExitInfo, PodState, STANDALONE_LABEL};

/// How much [`Engine::open`] reconciles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Reconcile {
    /// Every pod: daemon start, listings, `system` commands.
    #[default]
    All,
    /// What interrupted operations left (found through the store's indexes, without a look
    /// at any shim), and the pods of these containers or pods (names, ids, id prefixes;
    /// keys that name nothing are ignored): a command on one object pays for that object,
    /// not for every pod of the node. A shim that died under another pod is found when
    /// that pod is next named, listed or reconciled in full.
    Touched(Vec<String>),
    /// Nothing at open: the listing ([`Engine::list_pods_reconciled`]) does what
    /// [`Reconcile::Touched`] without keys does, then checks, from the rows it reads
    /// anyway, every pod whose shim is not
    /// found alive in the node's registry of live shims (see [`wharf_shim::liveness`]), or
    /// whose state its shim's records alone can tell (shared pid namespace: the pod's init
    /// may have died; containers created but not yet known started): what a listing of
    /// pods shows is current, for far less than a look at every shim, and without a
    /// second pass over the store and the registry.
    Listing,
}

/// State of a pod whose sandbox is gone (its namespaces vanished with a reboot or an
/// emptied run directory) and was released: its containers cannot run again; remove it.
/// What reconciling did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Repairs made, one line each ("pod web: ...").
    pub repaired: Vec<String>,
    /// Problems found but not repaired (the next open tries again).
    pub warnings: Vec<String>,
}

/// How long reconciling waits for any one shim request.
const RECONCILE_SHIM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

fn is_nsfs(path: &str) -> bool {
    wharf_sys::fs::is_nsfs(Path::new(path))
}

/// Whether the sandbox's pinned namespaces are still there.
fn sandbox_present(sb: &Sandbox) -> bool {
    [&sb.utsns, &sb.netns, &sb.ipcns, &sb.pidns]
        .into_iter()
        .flatten()
        .all(|p| is_nsfs(p))
}

/// Whether a shim holds the lock of state directory `dir` (it takes it first thing, before
/// writing its pid file). Only probed for pods that look wrong.
fn shim_starting(dir: &Path) -> bool {
    let Ok(f) = std::fs::File::open(dir.join(wharf_shim::records::LOCK_FILE)) else {
        return false;
    };
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
}

/// Poll `done` for up to 5 s.
fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !done() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn active(c: &ContainerRow) -> bool {
    matches!(c.state, ContainerState::Running | ContainerState::Paused)
}

/// Whether the shim reports that the pod's init (the PID 1 of its shared pid namespace)
/// exited: the pod can never run a container again.
fn init_exited(pod: &PodRow, records: &wharf_shim::records::StateDir) -> bool {
    pod.spec.share_pid
        && records.pod().ok().flatten().is_some_and(|r| {
            r.failure
                .is_some_and(|f| f.starts_with(wharf_shim::protocol::PAUSE_EXITED))
        })
}

/// Whether the shim has started container `id` (running now, or exited since).
fn started(records: &wharf_shim::records::StateDir, id: &str) -> bool {
    records.status(id).ok().flatten().is_some_and(|s| {
        matches!(
            s.status,
            wharf_shim::Status::Running | wharf_shim::Status::Exited
        )
    })
}

/// Drop repeated ids, keeping the first of each.
fn dedup(ids: &mut Vec<String>) {
    let mut seen = HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
}

fn standalone(pod: &PodRow) -> bool {
    pod.spec.labels.contains_key(STANDALONE_LABEL)
}

fn lost(reason: &str) -> ExitInfo {
    ExitInfo {
        code: 255,
        signal: None,
        finished_at: wharf_sys::time::now_rfc3339_nano(),
        oom_killed: false,
        reason: Some(reason.into()),
        message: None,
    }
}

impl Engine {
    /// Compare the store with reality and repair what interrupted operations and dead
    /// shims left (see the module docs). [`Engine::open`] runs it; its report is kept in
    /// [`Engine::reconciled`].
    pub fn reconcile(&self) -> Report {
        let mut report = Report::default();
        let (pods, containers) = match (self.db.pods(), self.db.containers(None)) {
            (Ok(p), Ok(c)) => (p, c),
            (Err(e), _) | (_, Err(e)) => {
                report
                    .warnings
                    .push(format!("reconcile: reading the store: {e}"));
                return report;
            }
        };
        let mut by_pod: HashMap<&str, Vec<&ContainerRow>> = HashMap::new();
        for c in &containers {
            by_pod.entry(c.pod_id.as_str()).or_default().push(c);
        }
        self.with_reconcile_deadline(|| {
            for pod in &pods {
                let cs = by_pod.get(pod.id.as_str()).map_or(&[][..], |v| &v[..]);
                self.check_pod(pod, cs, &mut report);
            }
        });
        self.reconcile_rm_guards(&mut report);
        self.clean_unrecorded_pods();
        let known: HashSet<&str> = pods.iter().map(|p| p.id.as_str()).collect();
        self.remove_stale_locks(&known);
        crate::hooks::step("reconciled");
        report
    }

    /// [`Reconcile::Touched`]: the pods interrupted operations left (see
    /// [`crate::db::Db::pods_needing_attention`]) and those of `keys`, then the `run --rm`
    /// guards; the same checks and repairs as [`Engine::reconcile`] makes for every pod.
    pub fn reconcile_touched(&self, keys: &[String]) -> Report {
        let mut report = Report::default();
        if let Some(mut ids) = self.touched_pods(keys, &mut report) {
            dedup(&mut ids);
            self.check_pods(&ids, &mut report);
        }
        self.reconcile_rm_guards(&mut report);
        self.clean_unrecorded_pods();
        crate::hooks::step("reconciled");
        report
    }

    /// The pods interrupted operations left and those `keys` name (containers or pods);
    /// `None`, with a warning in `report`, when the store cannot be read.
    fn touched_pods(&self, keys: &[String], report: &mut Report) -> Option<Vec<String>> {
        let mut ids: Vec<String> = match self.db.pods_needing_attention() {
            Ok(p) => p.into_iter().map(|p| p.id).collect(),
            Err(e) => {
                report
                    .warnings
                    .push(format!("reconcile: reading the store: {e}"));
                return None;
            }
        };
        for k in keys {
            if let Ok(c) = self.db.find_container(k) {
                ids.push(c.pod_id);
            } else if let Ok(p) = self.db.find_pod(k) {
                ids.push(p.id);
            }
        }
        Some(ids)
    }

    /// [`Engine::check_pod`] for each of pods `ids`, read afresh (gone ones are skipped),
    /// under the reconcile's shim deadline (also the listing's part of
    /// [`Reconcile::Listing`], see [`Engine::list_pods_reconciled`]).
    pub(crate) fn check_pods(&self, ids: &[String], report: &mut Report) {
        self.with_reconcile_deadline(|| {
            for id in ids {
                let (Ok(pod), Ok(containers)) =
                    (self.db.find_pod(id), self.db.containers(Some(id)))
                else {
                    continue;
                };
                let cs: Vec<&ContainerRow> = containers.iter().collect();
                self.check_pod(&pod, &cs, report);
            }
        });
    }

    /// Run `f` with shim requests limited to [`RECONCILE_SHIM_DEADLINE`]: repairs talk to
    /// shims, and a stuck one gets a short deadline and a warning while the command goes
    /// on (its own requests to that shim fail with a clear error).
    fn with_reconcile_deadline(&self, f: impl FnOnce()) {
        self.shim_deadline_ms.store(
            RECONCILE_SHIM_DEADLINE.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        f();
        self.shim_deadline_ms
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Repair the pod if it looks wrong, saying so in `report`.
    fn check_pod(&self, pod: &PodRow, containers: &[&ContainerRow], report: &mut Report) {
        if !self.looks_wrong(pod, containers) {
            return;
        }
        match self.repair(&pod.id) {
            Ok(done) => report
                .repaired
                .extend(done.into_iter().map(|d| format!("pod {}: {d}", pod.name))),
            Err(e) => report
                .warnings
                .push(format!("reconciling pod {}: {e}", pod.name)),
        }
    }

    /// Foreground `run --rm` containers whose CLI died before removing them (and the
    /// marks of containers gone since).
    fn reconcile_rm_guards(&self, report: &mut Report) {
        for id in self.rm_guarded() {
            let Ok(c) = self.db.find_container(&id) else {
                self.drop_rm_guard(&id);
                continue;
            };
            let c = &c;
            if self.orphaned_rm(c) {
                match self.remove_with_volumes(&c.id, false) {
                    Ok(()) => report.repaired.push(format!(
                        "container {}: its run --rm ended without removing it: removed",
                        c.name
                    )),
                    Err(e) => report
                        .warnings
                        .push(format!("removing container {} (run --rm): {e}", c.name)),
                }
            }
        }
    }

    /// The cheap test: does anything about this pod need a closer look under its lock?
    fn looks_wrong(&self, pod: &PodRow, containers: &[&ContainerRow]) -> bool {
        if matches!(pod.state, PodState::Creating | PodState::Removing) {
            return true;
        }
        if containers
            .iter()
            .any(|c| c.state == ContainerState::Unknown)
        {
            return true;
        }
        if standalone(pod) && containers.is_empty() {
            return true;
        }
        let records = wharf_shim::records::StateDir::new(self.shim_state_dir(pod));
        if pod.state != PodState::Dead && init_exited(pod, &records) {
            return true;
        }
        if records.shim_alive() {
            containers.iter().any(|c| {
                let known = records.container(&c.id).exists();
                (active(c) && !known)
                    || (c.state == ContainerState::Created && known && started(&records, &c.id))
            })
        } else {
            records.shim_pid().is_some()
                || containers.iter().any(|c| active(c))
                || (pod.state != PodState::Dead && !sandbox_present(&pod.sandbox))
        }
    }

    /// Repair pod `id` under its lock (nothing if another process holds it). Returns what
    /// was done.
    fn repair(&self, id: &str) -> Result<Vec<String>> {
        let Some(lock) = self.locks.try_lock(id)? else {
            return Ok(Vec::new());
        };
        // Read again under the lock: the pod may have changed or gone meanwhile.
        let Some(pod) = self.row_under_lock(&lock, id)? else {
            return Ok(Vec::new());
        };
        let records = wharf_shim::records::StateDir::new(self.shim_state_dir(&pod));
        if !records.shim_alive() && shim_starting(records.path()) {
            // Spawned by a command that died before the shim was up: let it come up, so
            // that it is seen (and shut down with its pod if that goes).
            wait_for(|| records.shim_alive() || !shim_starting(records.path()));
        }
        let mut done = Vec::new();
        match pod.state {
            PodState::Creating => {
                self.roll_back_pod(&pod)?;
                done.push("its creation was interrupted: rolled back".to_string());
                return Ok(done);
            }
            PodState::Removing => {
                self.remove_pod(&pod.id, true)?;
                done.push("its removal was interrupted: finished".to_string());
                return Ok(done);
            }
            _ => {}
        }
        for c in self.db.containers(Some(&pod.id))? {
            if c.state == ContainerState::Unknown {
                self.remove_container(&c.id, true)?;
                done.push(format!(
                    "container {}: its creation was interrupted: rolled back",
                    c.name
                ));
            }
        }
        if pod.state != PodState::Dead && init_exited(&pod, &records) {
            self.mark_dead(&pod, "pod init exited")?;
            done.push(format!(
                "{}: the pod is dead; remove it",
                wharf_shim::protocol::PAUSE_EXITED
            ));
        }
        if records.shim_alive() {
            for c in self.db.containers(Some(&pod.id))? {
                let known = records.container(&c.id).exists();
                if active(&c) && !known {
                    self.record_exit(&c, &lost("Lost"))?;
                    done.push(format!(
                        "container {}: its shim does not know it: marked exited",
                        c.name
                    ));
                } else if c.state == ContainerState::Created && known && started(&records, &c.id) {
                    // Started by a command that died before recording it.
                    let st = records.status(&c.id).ok().flatten();
                    self.db.update_container(
                        &c.id,
                        ContainerState::Running,
                        st.as_ref().and_then(|s| s.started_at.as_deref()),
                        None,
                        st.as_ref().map_or(0, |s| s.restart_count as i64),
                    )?;
                    let row = self.db.find_container(&c.id)?;
                    self.refresh(&row)?;
                    done.push(format!(
                        "container {}: it was started by a command that died: recorded",
                        c.name
                    ));
                }
            }
        } else {
            let containers = self.db.containers(Some(&pod.id))?;
            if records.shim_pid().is_some() || containers.iter().any(active) {
                self.reap_pod(&pod)?;
                // Containers the shim kept no record of have no exit to tell.
                for c in self.db.containers(Some(&pod.id))? {
                    if active(&c) {
                        self.record_exit(&c, &lost("ShimDied"))?;
                    }
                }
                done.push("its shim died: its containers are recorded as exited".to_string());
            }
            if pod.state != PodState::Dead && !sandbox_present(&pod.sandbox) {
                self.release_sandbox(&pod)?;
                done.push(
                    "its sandbox is gone (host restarted or run directory emptied): \
                     released what was left; the pod is dead"
                        .to_string(),
                );
            }
        }
        if standalone(&pod) && self.db.containers(Some(&pod.id))?.is_empty() {
            self.remove_pod(&pod.id, true)?;
            done.push("an interrupted run left it without its container: removed".to_string());
        }
        Ok(done)
    }

    /// Undo a pod creation that never finished, as `create_pod` does when a step fails.
    fn roll_back_pod(&self, pod: &PodRow) -> Result<()> {
        for c in self.db.containers(Some(&pod.id))? {
            self.remove_container(&c.id, true)?;
        }
        self.shutdown_shim(pod);
        crate::sandbox::destroy(&self.setup(), &pod.id, &pod.spec, &self.sandbox_of(pod))?;
        crate::sandbox::remove_pod_dir(&self.setup(), &pod.id)?;
        self.locks.forget_with(&pod.id, || {
            self.db.transaction(|db| {
                db.delete_pod(&pod.id)?;
                db.event(
                    "removed",
                    "pod",
                    &pod.id,
                    &pod.name,
                    serde_json::json!({"reason": "creation interrupted"}),
                )
            })
        })
    }

    /// Release what is left of a pod whose namespaces are gone, and mark it dead. Its
    /// volumes' mounts go; their files on the disk stay until the pod is removed.
    fn release_sandbox(&self, pod: &PodRow) -> Result<()> {
        crate::pod_volumes::unmount_volumes(&self.pod_volumes_dir(&pod.id))?;
        crate::sandbox::destroy(&self.setup(), &pod.id, &pod.spec, &self.sandbox_of(pod))?;
        self.mark_dead(pod, "sandbox gone")
    }

    /// Record the pod as [`PodState::Dead`], with a "died" event saying why.
    fn mark_dead(&self, pod: &PodRow, reason: &str) -> Result<()> {
        self.db.transaction(|db| {
            db.update_pod(&pod.id, &pod.sandbox, PodState::Dead)?;
            db.event(
                "died",
                "pod",
                &pod.id,
                &pod.name,
                serde_json::json!({ "reason": reason }),
            )
        })
    }

    /// The pod's sandbox record, completed with what the teardown needs when the pod's
    /// creation was interrupted before it was recorded.
    fn sandbox_of(&self, pod: &PodRow) -> Sandbox {
        let mut sb = pod.sandbox.clone();
        if sb.cgroup.is_empty()
            && let Ok((cgroup, unit)) =
                crate::sandbox::pod_cgroup(&self.setup(), &pod.spec, &pod.id)
        {
            sb.cgroup = cgroup;
            sb.unit = unit;
        }
        sb
    }

    /// The locks of new pods whose creator died before writing their row (one read of a
    /// directory of the pods being made; see `pod_lock.rs`).
    fn clean_unrecorded_pods(&self) {
        self.locks
            .clean_unrecorded(|id| !matches!(self.db.find_pod(id), Err(Error::NotFound { .. })));
    }

    /// Lock files of pods that no longer exist (left by a process killed between taking
    /// the lock of a new pod and recording it).
    fn remove_stale_locks(&self, known: &HashSet<&str>) {
        let Ok(entries) = std::fs::read_dir(self.locks.dir()) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            if known.contains(name.as_str()) {
                continue;
            }
            if let Ok(Some(lock)) = self.locks.try_lock(&name) {
                let _ = self.row_under_lock(&lock, &name);
            }
        }
    }

    /// Release the pod locks this engine holds (the pods it created stay locked until
    /// then, so that no other process takes them for leftovers of a crash while their
    /// containers are being set up). A front end calls this once a command's pods are
    /// complete (`wharf run`: after the start, before attaching), and a daemon after each
    /// request.
    pub fn release_pod_locks(&self) {
        self.locks.release_all();
    }

    /// Lock pod `id` for a change, then read with `read` what the change works on. It
    /// reads under the lock, since the pod may have changed or gone while the lock was
    /// awaited; a gone pod's lock file is unlinked again (`row_under_lock`), and
    /// `read`'s NotFound comes back.
    pub(crate) fn lock_and_read<T>(
        &self,
        id: &str,
        read: impl FnOnce() -> Result<T>,
    ) -> Result<(crate::pod_lock::PodLock<'_>, T)> {
        let lock = self.locks.lock(id)?;
        match read() {
            Ok(v) => Ok((lock, v)),
            Err(e @ Error::NotFound { .. }) => {
                // Gone, or only the thing read: the lock file goes with a gone pod.
                let _ = self.row_under_lock(&lock, id);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Pod `id`'s row, read under `lock` (a guard on its lock). None if the pod is gone:
    /// its remover unlinked the lock file before this process opened the path, so the
    /// file locked is a new one no row names, and it is unlinked again, if this guard
    /// took the lock (one the engine held before stays its holder's to forget).
    fn row_under_lock(
        &self,
        lock: &crate::pod_lock::PodLock<'_>,
        id: &str,
    ) -> Result<Option<PodRow>> {
        match self.db.find_pod(id) {
            Ok(p) if p.id == id => Ok(Some(p)),
            Ok(_) | Err(Error::NotFound { .. }) => {
                if lock.took() {
                    self.locks.forget(id);
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// What reconciling did when the engine was opened.
    pub fn reconciled(&self) -> &Report {
        &self.reconciled
    }
}
