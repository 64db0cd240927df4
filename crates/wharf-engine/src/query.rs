//! What front ends ask of the engine without changing anything: containers and pods as they
//! are now (listed with filters, inspected), a pod's process tree, a container's logs,
//! resource usage and processes. The CLI formats these; the CRI server will translate them.
//! No front end reads the store, a shim's records, a log file or a runtime's state itself.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::db::{ContainerRow, PodRow};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::ContainerState;

/// A running container's cgroup as [`Engine::container_usage`] reads it.
#[derive(Debug, Clone)]
pub struct ContainerUsage {
    /// Usage, in runc's shape.
    pub stats: wharf_runtime::cgroups::Stats,
    /// Limits it holds now, and its OOM-kill count.
    pub limits: wharf_runtime::cgroups::Limits,
    /// Its processes.
    pub pids: Vec<i32>,
}

/// A container as it is now: its record, refreshed from its shim's records, with what the
/// front ends show beside it.
#[derive(Debug, Clone)]
pub struct ContainerView {
    /// The record.
    pub row: ContainerRow,
    /// Its pod's name.
    pub pod_name: String,
    /// Its OCI bundle.
    pub bundle: PathBuf,
    /// Its log file.
    pub log_path: PathBuf,
    /// The network its pod is attached to ("" for none).
    pub network: String,
    /// Its pod's addresses.
    pub ips: Vec<String>,
}

/// A container's full status: as [`Engine::container`] shows it, with what only its shim
/// knows while it lives, from one call to the shim.
#[derive(Debug, Clone)]
pub struct ContainerStatus {
    /// The container.
    pub view: ContainerView,
    /// Host pid of its main process while it runs.
    pub pid: Option<i32>,
    /// When the runtime created its current run (RFC 3339).
    pub created_in_runtime_at: Option<String>,
    /// Its current run's start.
    pub started_at: Option<String>,
    /// How its last run ended, with the shim's message when it has one.
    pub exit_message: Option<String>,
}

/// Which containers a listing returns (every condition given must hold).
#[derive(Debug, Clone, Default)]
pub struct ContainerFilter {
    /// Exited and created ones too (else running ones only).
    pub all: bool,
    /// In this pod (name or id).
    pub pod: Option<String>,
    /// With this exact name.
    pub name: Option<String>,
    /// Whose id starts with this.
    pub id_prefix: Option<String>,
    /// In this state.
    pub state: Option<ContainerState>,
    /// With these labels (and values).
    pub labels: BTreeMap<String, String>,
}

/// A pod as it is now.
#[derive(Debug, Clone)]
pub struct PodView {
    /// The record.
    pub row: PodRow,
    /// Its containers: id, name, and whether it is an init container.
    pub containers: Vec<(String, String, bool)>,
    /// Their specs as the store has them, by id (what a pod's status needs of them
    /// without a lookup per container).
    pub specs: std::collections::HashMap<String, Box<crate::model::ContainerSpec>>,
    /// Their states as the store has them, by id.
    pub stored: std::collections::HashMap<String, StoredState>,
    /// The store is current for this pod: its shim lives and marked no change since the
    /// store last took its records in, so the states above are the records' (a listing
    /// may show them without reading the records).
    pub settled: bool,
}

/// A container's state as the store has it.
#[derive(Debug, Clone)]
pub struct StoredState {
    pub state: ContainerState,
    pub restart_count: i64,
    pub started_at: Option<String>,
}

impl PodView {
    fn add(&mut self, c: ContainerRow) {
        self.containers.push((c.id.clone(), c.name, c.spec.init));
        self.stored.insert(
            c.id.clone(),
            StoredState {
                state: c.state,
                restart_count: c.restart_count,
                started_at: c.started_at,
            },
        );
        self.specs.insert(c.id, c.spec);
    }
}

/// Which pods a listing returns.
#[derive(Debug, Clone, Default)]
pub struct PodFilter {
    /// With this exact name.
    pub name: Option<String>,
    /// Whose id starts with this.
    pub id_prefix: Option<String>,
    /// With these labels (and values).
    pub labels: BTreeMap<String, String>,
}

/// How to read a container's logs.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// Only the last this many lines.
    pub tail: Option<usize>,
    /// Only lines logged at or after this time.
    pub since: Option<SystemTime>,
    /// Keep reading while the container runs.
    pub follow: bool,
}

/// One line of a container's log.
pub type LogEntry = wharf_shim::logs::LogEntry;

/// One process of a container.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessInfo {
    /// Host pid.
    pub pid: i32,
    /// Its parent's host pid.
    pub ppid: i32,
    /// Real uid.
    pub uid: u32,
    /// The uid's name in the container's /etc/passwd (the uid when it has none).
    pub user: String,
    /// When it started (seconds since the epoch).
    pub started: u64,
    /// CPU time used, in seconds.
    pub cpu_seconds: u64,
    /// Its command line.
    pub command: String,
}

/// From how many pods a listing of all reads them on a second thread (see [`all_pods`]):
/// the thread and its connection cost about 0.7 ms (`ps` with 10 pods: 5.1 ms in one
/// thread, 5.8 in two), what reading 120-140 pods takes.
const SPREAD_FROM: usize = 128;

/// [`SPREAD_FROM`], or what `WHARF_LISTING_SPREAD_FROM` says in a build with the test
/// suite's hooks (so that its few pods are listed both ways).
fn spread_from() -> usize {
    #[cfg(feature = "hooks")]
    if let Some(n) = std::env::var("WHARF_LISTING_SPREAD_FROM")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    SPREAD_FROM
}

/// Run `work` on a thread of `scope` beside the caller. A new thread starts on its
/// parent's CPU and stays there until a load balance moves one of them (see
/// [`wharf_sys::cpu`]): it moves itself off the caller's CPU first, and the caller yields
/// once, so that the move happens now rather than when its time slice ends.
fn beside<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    work: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    let busy = wharf_sys::cpu::current();
    let h = scope.spawn(move || {
        if let Some(busy) = busy {
            wharf_sys::cpu::move_off(busy);
        }
        work()
    });
    std::thread::yield_now();
    h
}

/// Read every pod on a thread of `scope`, through a connection of its own to the store at
/// `db`, while the caller's connection reads the containers. Parsing the rows is most of a
/// listing's time (JSON specs and sandboxes: a pod's row and its container's are about
/// 1.5 kB): with 1000 pods, `ps` spent 5-6 ms on the pods and as much on the containers,
/// one after the other, with the machine's other CPU idle.
/// `then` runs on that thread too, on the rows read.
fn all_pods<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    db: &std::path::Path,
    then: fn(Vec<PodRow>) -> T,
) -> std::thread::ScopedJoinHandle<'scope, Result<T>> {
    let db = db.to_path_buf();
    beside(scope, move || crate::db::Db::pods_at(&db).map(then))
}

/// What the thread `h` read, or, where it failed (its connection could not be opened,
/// say), what `here` reads on the caller's connection: the listing does not fail for a
/// way of reading that only saves time. A failure of the rows themselves fails `here` too.
fn joined<T>(
    h: std::thread::ScopedJoinHandle<'_, Result<T>>,
    here: impl FnOnce() -> Result<T>,
) -> Result<T> {
    match h.join() {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => here(),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Pods by id. A hash map: rows are large, and a sorted map would move each of them many
/// times.
fn by_id(rows: Vec<PodRow>) -> HashMap<String, PodRow> {
    let mut pods = HashMap::with_capacity(rows.len());
    pods.extend(rows.into_iter().map(|p| (p.id.clone(), p)));
    pods
}

fn labels_match(have: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

impl Engine {
    fn view(&self, row: ContainerRow, pods: &mut HashMap<String, PodRow>) -> ContainerView {
        // A pod made after the listing read the pods is read now (a pod removed meanwhile
        // is looked for again by each of its rows: rare, and a row or two).
        if !pods.contains_key(&row.pod_id)
            && let Ok(p) = self.db.find_pod(&row.pod_id)
        {
            pods.insert(p.id.clone(), p);
        }
        let pod = pods.get(&row.pod_id);
        ContainerView {
            bundle: self.paths.bundle(&row.id),
            log_path: self.log_path(&row),
            pod_name: pod.map(|p| p.name.clone()).unwrap_or_default(),
            network: pod.map(|p| p.sandbox.network.clone()).unwrap_or_default(),
            ips: pod.map(|p| p.sandbox.ips.clone()).unwrap_or_default(),
            row,
        }
    }

    /// Every pod, made into `T` by `then`, and what `here` reads meanwhile on this
    /// connection. From [`SPREAD_FROM`] pods on, the pods are read on a second thread (see
    /// [`all_pods`]); below, first, then `here` runs.
    fn all_pods_and<T: Send, R>(
        &self,
        then: fn(Vec<PodRow>) -> T,
        here: impl FnOnce() -> Result<R>,
    ) -> Result<(T, R)> {
        if self.db.pod_count()? < spread_from() {
            let pods = then(self.db.pods()?);
            return Ok((pods, here()?));
        }
        std::thread::scope(|s| {
            let h = all_pods(s, &self.paths.db(), then);
            let read = here()?;
            Ok((joined(h, || self.db.pods().map(then))?, read))
        })
    }

    /// Containers as they are now, oldest first.
    pub fn list_containers(&self, f: &ContainerFilter) -> Result<Vec<ContainerView>> {
        Ok(self.list_containers_and_pods(f)?.0)
    }

    /// [`Engine::list_containers`], and the pods the listing read (by id), for callers
    /// that show a pod's columns too: the pods are not read twice.
    pub fn list_containers_and_pods(
        &self,
        f: &ContainerFilter,
    ) -> Result<(Vec<ContainerView>, HashMap<String, PodRow>)> {
        let pod_id = match &f.pod {
            Some(p) => Some(self.db.find_pod(p)?.id),
            None => None,
        };
        let mut out = Vec::new();
        // A pod whose shim lives (its lock is held) and marked nothing changed has nothing
        // new in its records: the store is current for it. Marks are taken (claimed)
        // before the records are read and dropped once the store has what they say, and
        // only by a listing that reads every container of the pods it takes them from. So
        // the marks are looked at before the containers are read.
        //
        // Whose shims live is asked right after the containers are read, still in this
        // closure: from SPREAD_FROM pods on it runs while the second thread is still
        // reading the pods, whose parse is the longer of the two reads, so the thousand
        // lock tests of a thousand pods cost the listing no time of its own.
        let marks_then_containers = || -> Result<_> {
            let live = wharf_shim::liveness::live(&self.paths.shims_alive());
            let changes = live
                .as_ref()
                .and_then(|_| wharf_shim::liveness::changes(&self.paths.shims_alive()));
            let containers = self.db.containers(pod_id.as_deref())?;
            let held = held_pods(live.as_ref(), &containers);
            Ok((live, changes, containers, held))
        };
        // Each pod read once, not once per container (for the refresh and the view).
        let (mut pods, (live, changes, containers, held)) = match &pod_id {
            Some(id) => (by_id(vec![self.db.find_pod(id)?]), marks_then_containers()?),
            None => self.all_pods_and(by_id, marks_then_containers)?,
        };
        let whole_pods = f.name.is_none() && f.id_prefix.is_none() && f.labels.is_empty();
        // Per pod: its claimed marks, and whether its containers are all settled (not
        // waiting, not in a back-off: their shim writes again when that ends).
        let mut claims: std::collections::HashMap<String, (Vec<PathBuf>, bool)> =
            Default::default();
        crate::hooks::step("list: pods and containers read");
        for c in containers {
            if f.name.as_ref().is_some_and(|n| *n != c.name)
                || f.id_prefix
                    .as_ref()
                    .is_some_and(|p| !c.id.starts_with(p.as_str()))
                || !labels_match(&c.spec.labels, &f.labels)
            {
                continue;
            }
            let refreshed = match pods.get(&c.pod_id) {
                Some(p)
                    if held.contains(p.id.as_str())
                        && changes.as_ref().is_some_and(|ch| !ch.touches(&p.id)) =>
                {
                    Ok(c)
                }
                Some(p) => {
                    if whole_pods
                        && let Some(ch) = &changes
                        && ch.touches(&p.id)
                        && !claims.contains_key(&p.id)
                    {
                        claims.insert(p.id.clone(), (ch.claim(&p.id), true));
                    }
                    let r = self.refresh_in(&c, p, live.as_ref());
                    if let Some((_, settled)) = claims.get_mut(&p.id) {
                        *settled &= r.as_ref().is_ok_and(|r| !r.waiting && !r.restarting);
                    }
                    r
                }
                None => self.refresh(&c),
            };
            let c = match refreshed {
                Ok(c) => c,
                // Removed (with its pod) by another process since the listing began.
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            // Without `all`: what runs, paused ones too (docker's ps).
            let state = c.shown_state();
            if (!f.all && !matches!(state, ContainerState::Running | ContainerState::Paused))
                || f.state.is_some_and(|s| s != state)
            {
                continue;
            }
            out.push(self.view(c, &mut pods));
        }
        crate::hooks::step("list: views made");
        for (claimed, settled) in claims.values() {
            if *settled {
                wharf_shim::liveness::Changes::release(claimed);
            }
        }
        Ok((out, pods))
    }

    /// The exit code container `id` (its full id) last recorded, also once it is removed:
    /// what a wait that arrives after a `--rm` container is gone answers.
    pub fn last_exit_code(&self, id: &str) -> Result<Option<i64>> {
        self.db.last_exit_code(id)
    }

    /// One container (by name, id or id prefix) as it is now.
    pub fn container(&self, key: &str) -> Result<ContainerView> {
        let row = self.refresh(&self.db.find_container(key)?)?;
        Ok(self.view(row, &mut HashMap::new()))
    }

    /// One container's full status (see [`ContainerStatus`]).
    pub fn container_status(&self, key: &str) -> Result<ContainerStatus> {
        let view = self.container(key)?;
        let live = match view.row.state {
            ContainerState::Running | ContainerState::Created => self
                .shim_of(&view.row)
                .ok()
                .and_then(|s| s.container(&view.row.id).ok()),
            _ => None,
        };
        Ok(ContainerStatus {
            pid: live.as_ref().and_then(|c| c.pid),
            created_in_runtime_at: live.as_ref().and_then(|c| c.created_at.clone()),
            started_at: live
                .as_ref()
                .and_then(|c| c.started_at.clone())
                .or(view.row.started_at.clone()),
            exit_message: live.and_then(|c| c.exit).and_then(|e| e.message),
            view,
        })
    }

    fn pod_view(&self, row: PodRow) -> Result<PodView> {
        let mut view = PodView {
            row,
            containers: Vec::new(),
            specs: Default::default(),
            stored: Default::default(),
            settled: false,
        };
        for c in self.db.containers(Some(&view.row.id))? {
            view.add(c);
        }
        Ok(view)
    }

    /// Pods, oldest first, as the store and their shims' records have them.
    pub fn list_pods(&self, f: &PodFilter) -> Result<Vec<PodView>> {
        self.list_pods_checking(f, None)
    }

    /// [`Engine::list_pods`] as it is: what interrupted operations left is put right
    /// first ([`Engine::reconcile_touched`] without keys), and the pods whose state the
    /// store alone cannot tell (their shim is not found alive, they share their pid
    /// namespace, or a container of theirs is still `created`) are checked and repaired
    /// as [`Engine::reconcile`] does, and read again. What that did is in the report. An
    /// engine opened only for this is opened with [`Reconcile::Listing`].
    ///
    /// [`Reconcile::Listing`]: crate::reconcile::Reconcile::Listing
    pub fn list_pods_reconciled(
        &self,
        f: &PodFilter,
    ) -> Result<(Vec<PodView>, crate::reconcile::Report)> {
        let mut report = self.reconcile_touched(&[]);
        let views = self.list_pods_checking(f, Some(&mut report))?;
        Ok((views, report))
    }

    fn list_pods_checking(
        &self,
        f: &PodFilter,
        check: Option<&mut crate::reconcile::Report>,
    ) -> Result<Vec<PodView>> {
        // Every pod's containers from one query, not one per pod; whose shims live is asked
        // while the second thread still reads the pods (see `list_containers_and_pods`).
        let live = wharf_shim::liveness::live(&self.paths.shims_alive());
        let (all, (containers, held)) = self.all_pods_and(
            |rows| rows,
            || {
                let containers = self.db.containers(None)?;
                let held = held_pods(live.as_ref(), &containers);
                Ok((containers, held))
            },
        )?;
        let mut by_pod: HashMap<String, Vec<ContainerRow>> = HashMap::new();
        for c in containers {
            by_pod.entry(c.pod_id.clone()).or_default().push(c);
        }
        // Whether the store is current for a pod (see `list_containers_and_pods`): its
        // shim lives and marked nothing. A pod whose shim marked changes has its marks
        // claimed, its containers refreshed from the records into the store, and the marks
        // released when every container is settled, as a container listing does: the
        // store is current for it then too.
        // Sized once: a pod's row is large, and growing the vector copies every row again.
        let mut pods: Vec<(PodRow, Vec<ContainerRow>, bool)> = Vec::with_capacity(all.len());
        let mut unsure = Vec::new();
        for row in all {
            if !(f.name.as_ref().is_none_or(|n| *n == row.name)
                && f.id_prefix
                    .as_ref()
                    .is_none_or(|x| row.id.starts_with(x.as_str()))
                && labels_match(&row.spec.labels, &f.labels))
            {
                continue;
            }
            let rows = by_pod.remove(&row.id).unwrap_or_default();
            // A pod without containers was not among those asked.
            let lives = if rows.is_empty() {
                live.as_ref().is_some_and(|l| l.holds(&row.id))
            } else {
                held.contains(&row.id)
            };
            if check.is_some()
                && (!lives
                    || row.spec.share_pid
                    || rows.iter().any(|c| c.state == ContainerState::Created))
            {
                unsure.push(row.id.clone());
            }
            pods.push((row, rows, lives));
        }
        if let Some(report) = check
            && !unsure.is_empty()
        {
            self.check_pods(&unsure, report);
            let unsure: std::collections::HashSet<String> = unsure.into_iter().collect();
            let mut again = Vec::with_capacity(pods.len());
            for (row, rows, lives) in pods {
                if !unsure.contains(&row.id) {
                    again.push((row, rows, lives));
                    continue;
                }
                // Repaired, or removed (an empty standalone pod): read as it is now.
                let Ok(row) = self.db.find_pod(&row.id) else {
                    continue;
                };
                let rows = self.db.containers(Some(&row.id))?;
                let lives = live.as_ref().is_some_and(|l| l.holds(&row.id));
                again.push((row, rows, lives));
            }
            pods = again;
        }
        let changes = live
            .as_ref()
            .and_then(|_| wharf_shim::liveness::changes(&self.paths.shims_alive()));
        let mut views = Vec::with_capacity(pods.len());
        for (row, rows, lives) in pods {
            let (rows, settled) = match &changes {
                Some(ch) if lives && ch.touches(&row.id) => {
                    let claimed = ch.claim(&row.id);
                    let mut refreshed = Vec::with_capacity(rows.len());
                    let mut settled = true;
                    for c in &rows {
                        match self.refresh_in(c, &row, live.as_ref()) {
                            Ok(c) => {
                                settled &= !c.waiting && !c.restarting;
                                refreshed.push(c);
                            }
                            // Removed by another process since the listing began.
                            Err(Error::NotFound { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    if settled {
                        wharf_shim::liveness::Changes::release(&claimed);
                    }
                    (refreshed, settled)
                }
                Some(_) => (rows, lives),
                None => (rows, false),
            };
            let mut view = PodView {
                containers: Vec::with_capacity(rows.len()),
                specs: HashMap::with_capacity(rows.len()),
                stored: HashMap::with_capacity(rows.len()),
                settled,
                row,
            };
            for c in rows {
                view.add(c);
            }
            views.push(view);
        }
        Ok(views)
    }

    /// One pod (by name, id or id prefix).
    pub fn pod(&self, key: &str) -> Result<PodView> {
        self.pod_view(self.db.find_pod(key)?)
    }

    /// The pod `key` names, or the pod of the container it names.
    pub fn pod_of(&self, key: &str) -> Result<PodRow> {
        match self.db.find_pod(key) {
            Ok(p) => Ok(p),
            Err(Error::NotFound { .. }) => {
                let c = self.db.find_container(key).map_err(|_| Error::NotFound {
                    kind: "container or pod",
                    name: key.to_string(),
                })?;
                self.db.find_pod(&c.pod_id)
            }
            Err(e) => Err(e),
        }
    }

    /// The pod's processes as the kernel sees them, from its shim down, each against the
    /// pod's namespaces.
    pub fn pod_tree(&self, pod: &PodRow) -> Result<crate::tree::Proc> {
        let dir = self.shim_state_dir(pod);
        let shim_pid = wharf_shim::records::StateDir::new(&dir)
            .shim_pid()
            .map(|(p, _)| p)
            .ok_or_else(|| Error::Precondition(format!("pod {} has no running shim", pod.name)))?;
        crate::tree::build(shim_pid, &pod.sandbox).ok_or_else(|| {
            Error::Precondition(format!("pod {}: its shim ({shim_pid}) is gone", pod.name))
        })
    }

    /// Read container `key`'s log: each entry goes to `on_entry`, which returns false to
    /// stop. With `follow`, reading goes on while the container runs.
    pub fn container_logs(
        &self,
        key: &str,
        opts: &LogOptions,
        on_entry: impl FnMut(&LogEntry) -> bool,
    ) -> Result<()> {
        self.container_logs_while(key, opts, on_entry, || true)
    }

    /// [`Engine::container_logs`] that also stops following once `wanted` says no: asked
    /// in every pause of a quiet log, so a reader whose client left ends with it rather
    /// than with the container.
    pub fn container_logs_while(
        &self,
        key: &str,
        opts: &LogOptions,
        mut on_entry: impl FnMut(&LogEntry) -> bool,
        wanted: impl Fn() -> bool,
    ) -> Result<()> {
        let row = self.db.find_container(key)?;
        let read = wharf_shim::logs::ReadOptions {
            tail: opts.tail,
            since: opts.since,
            follow: opts.follow,
        };
        let id = row.id.clone();
        let mut keep = || {
            wanted()
                && self
                    .db
                    .find_container(&id)
                    .ok()
                    .and_then(|r| self.refresh(&r).ok())
                    .is_some_and(|r| r.state == ContainerState::Running)
        };
        wharf_shim::logs::read(&self.log_path(&row), &read, &mut on_entry, &mut keep)
            .map_err(|e| Error::Other(format!("reading the logs of {}: {e}", row.name)))
    }

    /// Resource usage of a running container's cgroup (None once it is gone).
    pub fn container_stats(&self, key: &str) -> Result<Option<wharf_runtime::cgroups::Stats>> {
        let row = self.db.find_container(key)?;
        let rt = wharf_runtime::Runtime::new(self.paths.runtime_root());
        Ok(rt.stats(&row.id).ok())
    }

    /// Resource usage of a pod's own cgroup, the parent of its containers' (None when it is
    /// gone). What cannot be summed from the containers' (pressure stall information, for
    /// one) is read here.
    pub fn pod_cgroup_stats(&self, pod: &PodRow) -> Option<wharf_runtime::cgroups::Stats> {
        crate::cgroup_driver::resolve(&pod.sandbox.cgroup, &pod.id)
            .ok()?
            .stats()
            .ok()
    }

    /// What a running container's cgroup says, read from one load of its runtime state:
    /// usage, the limits it holds now (with its OOM-kill count) and its processes (None
    /// once it is gone).
    pub fn container_usage(&self, key: &str) -> Result<Option<ContainerUsage>> {
        let row = self.db.find_container(key)?;
        let rt = wharf_runtime::Runtime::new(self.paths.runtime_root());
        let Ok(state) = rt.store().load(&row.id) else {
            return Ok(None);
        };
        let cg = &state.cgroup;
        Ok(match (cg.stats(), cg.limits()) {
            (Ok(stats), Ok(limits)) => Some(ContainerUsage {
                stats,
                limits,
                pids: cg.pids().unwrap_or_default(),
            }),
            _ => None,
        })
    }

    /// A container's health (its shim's record), when it has a health check that began.
    pub fn container_health(
        &self,
        row: &ContainerRow,
        pod: &crate::db::PodRow,
    ) -> Option<wharf_shim::protocol::HealthState> {
        row.spec.health.as_ref()?;
        wharf_shim::records::StateDir::new(&pod.sandbox.shim_dir)
            .health(&row.id)
            .ok()
            .flatten()
    }

    /// The traffic counters of a pod's interfaces (none for a pod on the host's network).
    pub fn pod_network_counters(
        &self,
        key: &str,
    ) -> Result<Vec<wharf_net::counters::InterfaceCounters>> {
        let pod = self.db.find_pod(key)?;
        match &pod.sandbox.netns {
            Some(ns) => Ok(wharf_net::counters::read(Path::new(ns))?),
            None => Ok(Vec::new()),
        }
    }

    /// The processes of a running container.
    pub fn container_processes(&self, key: &str) -> Result<Vec<ProcessInfo>> {
        let row = self.db.find_container(key)?;
        let rt = wharf_runtime::Runtime::new(self.paths.runtime_root());
        let pids = rt
            .pids(&row.id)
            .map_err(|_| Error::Precondition(format!("container {} is not running", row.name)))?;
        let tick = rustix::param::clock_ticks_per_second().max(1);
        // The names of uids as the container knows them: its own /etc/passwd, read inside
        // its root the one safe way (a FIFO, a device, a link to a host file or a huge file
        // there leaves the ids as numbers).
        let passwd = pids
            .first()
            .and_then(|pid| {
                wharf_sys::contained::read_in_process_root(
                    *pid,
                    std::path::Path::new("/etc/passwd"),
                    wharf_sys::contained::USER_DB_LIMIT,
                )
                .ok()
            })
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        Ok(pids
            .into_iter()
            .map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let f: Vec<&str> = wharf_sys::procfs::stat_fields(&stat)
                    .map(Iterator::collect)
                    .unwrap_or_default();
                let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                let uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("Uid:")?
                            .split_whitespace()
                            .next()?
                            .parse()
                            .ok()
                    })
                    .unwrap_or(0);
                let command = String::from_utf8_lossy(
                    &std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default(),
                )
                .replace('\0', " ")
                .trim()
                .to_string();
                let user = passwd
                    .lines()
                    .find_map(|l| {
                        let mut f = l.split(':');
                        let name = f.next()?;
                        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
                    })
                    .unwrap_or_else(|| uid.to_string());
                ProcessInfo {
                    pid,
                    ppid: f.get(1).and_then(|v| v.parse().ok()).unwrap_or(0),
                    uid,
                    user,
                    started: boot_time() + ticks(19) / tick,
                    cpu_seconds: (ticks(11) + ticks(12)) / tick,
                    command,
                }
            })
            .collect())
    }
}

/// When the machine booted (seconds since the epoch; /proc/stat's btime).
fn boot_time() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The pods of `containers` whose shims hold their locks in `live` (none without it), each
/// asked once.
fn held_pods(
    live: Option<&wharf_shim::liveness::Live>,
    containers: &[ContainerRow],
) -> std::collections::HashSet<String> {
    let mut held = std::collections::HashSet::new();
    let Some(live) = live else { return held };
    let mut asked = std::collections::HashSet::new();
    for c in containers {
        if asked.insert(c.pod_id.as_str()) && live.holds(&c.pod_id) {
            held.insert(c.pod_id.clone());
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_thread_that_fails_leaves_the_reading_to_the_callers_connection() {
        let missing = std::env::temp_dir().join(format!("wharf-no-store-{}", std::process::id()));
        std::thread::scope(|s| {
            // The store is not there: the thread's connection fails, and the caller reads.
            let h = all_pods(s, &missing.join("wharf.db"), |rows| rows.len());
            assert_eq!(joined(h, || Ok(7)).unwrap(), 7);
            // A thread that read is taken at its word; the caller's reading is not run.
            let h = s.spawn(|| Ok(3));
            assert_eq!(joined(h, || panic!("read again")).unwrap(), 3);
            // Both failing: the caller's error is the one reported.
            let h = all_pods(s, &missing.join("wharf.db"), |rows| rows.len());
            let err = joined(h, || Err(Error::Invalid("the caller's".into()))).unwrap_err();
            assert!(err.to_string().contains("the caller's"), "{err}");
        });
        assert!(
            !missing.exists(),
            "the failed connection made the store's directory"
        );
    }
}
