//! The store's health: telling a lost store from a new one, `wharf system check` and
//! `wharf system repair`.
//!
//! SQLite makes an empty database of a missing or zero-length file without complaint: a
//! deleted or truncated `wharf.db` used to become a new, empty store while containers,
//! shims, mounts and snapshots went on without a record. The engine now refuses to open
//! such a store when state is left on disk, and says how to rebuild it. A damaged page is an
//! error naming the file (SQLite's CORRUPT and NOTADB are turned into one, see
//! `crate::error`). `repair` sets a damaged file aside and rebuilds the store from the
//! files every object keeps beside its state ([`crate::ledger`], the image store's name
//! files and snapshot markers); reconciling then finds out what still runs.

use std::path::{Path, PathBuf};

use crate::engine::{Engine, EngineOptions};
use crate::error::{Error, Result};
use crate::paths::Paths;

/// How many objects of each kind are on disk.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DiskState {
    /// Container bundle directories.
    pub containers: usize,
    /// Pod directories (persistent).
    pub pods: usize,
    /// Pod runtime directories (a shim's state, pinned namespaces).
    pub pod_runs: usize,
    /// Unpacked image layers and container snapshots.
    pub snapshots: usize,
}

impl DiskState {
    /// Count what is on disk under `paths`.
    pub fn scan(paths: &Paths) -> DiskState {
        let count = |dir: PathBuf, numeric: bool| {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| {
                            !numeric || e.file_name().to_string_lossy().parse::<u64>().is_ok()
                        })
                        .count()
                })
                .unwrap_or(0)
        };
        DiskState {
            containers: count(paths.root.join("containers"), false),
            pods: count(paths.root.join("pods"), false),
            pod_runs: count(paths.run.join("pods"), false),
            snapshots: count(paths.root.join("image/snapshots"), true),
        }
    }

    fn is_empty(&self) -> bool {
        *self == DiskState::default()
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (n, one, many) in [
            (self.containers, "container bundle", "container bundles"),
            (self.pods, "pod directory", "pod directories"),
            (
                self.pod_runs,
                "pod runtime directory",
                "pod runtime directories",
            ),
            (
                self.snapshots,
                "layer or container snapshot",
                "layer or container snapshots",
            ),
        ] {
            match n {
                0 => {}
                1 => parts.push(format!("1 {one}")),
                n => parts.push(format!("{n} {many}")),
            }
        }
        parts.join(", ")
    }
}

/// Whether the store file is missing or empty (what SQLite would silently take for a new
/// database).
fn store_absent(db: &Path) -> bool {
    std::fs::metadata(db).map_or(true, |m| m.len() == 0)
}

/// Refuse to open a store that was deleted or truncated while state is left: the message
/// says what is there and what to do.
pub fn refuse_lost_store(paths: &Paths) -> Result<()> {
    let db = paths.db();
    if !store_absent(&db) {
        return Ok(());
    }
    let disk = DiskState::scan(paths);
    if disk.is_empty() {
        return Ok(());
    }
    Err(Error::StoreDamaged(format!(
        "the metadata store {} is missing or empty, but {} and {} hold {}: it was deleted or \
         truncated. Restore it from a backup, or run `wharf system repair` to rebuild it from \
         the state on disk",
        db.display(),
        paths.root.display(),
        paths.run.display(),
        disk.describe()
    )))
}

/// What `wharf system check` found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// The store file checked.
    pub store: std::path::PathBuf,
    /// SQLite's integrity check ("ok" when sound).
    pub integrity: Vec<String>,
    /// Objects on disk that the store does not know (repair restores them).
    pub unrecorded: Vec<String>,
    /// Objects the store knows whose state on disk is gone.
    pub missing: Vec<String>,
}

impl CheckReport {
    /// Whether anything is wrong.
    pub fn problems(&self) -> bool {
        self.integrity != ["ok"] || !self.unrecorded.is_empty() || !self.missing.is_empty()
    }
}

impl Engine {
    /// `wharf system check`: the store's integrity, and the store against the disk.
    pub fn check(&self) -> Result<CheckReport> {
        let mut r = CheckReport {
            store: self.paths.db(),
            integrity: self.db().integrity_check()?,
            ..Default::default()
        };
        let pods = self.db().pods()?;
        let containers = self.db().containers(None)?;
        let (pod_files, bad_pods) = crate::ledger::load_pods(&self.paths);
        let (ctr_files, bad_ctrs) = crate::ledger::load_containers(&self.paths);
        for f in &pod_files {
            if !pods.iter().any(|p| p.id == f.id) {
                r.unrecorded.push(format!("pod {} ({})", f.name, f.id));
            }
        }
        for f in &ctr_files {
            if !containers.iter().any(|c| c.id == f.id) {
                r.unrecorded
                    .push(format!("container {} ({})", f.name, f.id));
            }
        }
        r.unrecorded.extend(
            bad_pods
                .into_iter()
                .chain(bad_ctrs)
                .filter(|b| !b.ends_with(": missing"))
                .map(|b| format!("unreadable: {b}")),
        );
        for c in &containers {
            if !self.paths.bundle(&c.id).join("config.json").exists()
                && c.state != crate::model::ContainerState::Unknown
            {
                r.missing.push(format!(
                    "container {} ({}): its bundle {} is gone",
                    c.name,
                    c.id,
                    self.paths.bundle(&c.id).display()
                ));
            }
        }
        if let Ok(rd) = std::fs::read_dir(self.paths.run.join("pods")) {
            for e in rd.flatten() {
                let id = e.file_name().to_string_lossy().into_owned();
                if !pods.iter().any(|p| p.id == id) {
                    r.unrecorded.push(format!(
                        "pod runtime directory {} (no pod {id} in the store)",
                        e.path().display()
                    ));
                }
            }
        }
        Ok(r)
    }
}

/// What `wharf system repair` did.
#[derive(Debug, Default)]
pub struct RepairReport {
    /// Where the damaged store was set aside, if it was.
    pub set_aside: Option<PathBuf>,
    /// Lines saying what was rebuilt or could not be.
    pub lines: Vec<String>,
}

/// Whether the store file opens and passes SQLite's quick check.
fn store_sound(db: &Path) -> std::result::Result<(), String> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| e.to_string())?;
    let rows: Vec<String> = conn
        .prepare("PRAGMA quick_check")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(|e| e.to_string())?;
    if rows == ["ok"] {
        Ok(())
    } else {
        Err(rows.join("; "))
    }
}

/// `wharf system repair`: set a damaged (or truncated) store file aside, then add to the
/// store every pod, container, image and snapshot whose file on disk it does not know.
/// Reconciling afterwards finds out which containers still run. Run it with no other Wharf
/// command at work.
pub fn repair(opts: EngineOptions) -> Result<(Engine, RepairReport)> {
    let paths = Paths::new(&opts.root, &opts.run);
    let db = paths.db();
    let mut report = RepairReport::default();
    let fresh = if store_absent(&db) {
        report
            .lines
            .push(format!("{}: missing or empty; rebuilding it", db.display()));
        for suffix in ["-wal", "-shm"] {
            let mut side = db.as_os_str().to_owned();
            side.push(suffix);
            let _ = std::fs::remove_file(&side);
        }
        true
    } else if let Err(why) = store_sound(&db) {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let aside = PathBuf::from(format!("{}.damaged-{stamp}", db.display()));
        for suffix in ["", "-wal", "-shm"] {
            let mut from = db.as_os_str().to_owned();
            from.push(suffix);
            let mut to = aside.as_os_str().to_owned();
            to.push(suffix);
            match std::fs::rename(&from, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::Os {
                        what: format!("set the damaged store {} aside", db.display()),
                        err: e,
                    });
                }
            }
        }
        report.lines.push(format!(
            "{}: damaged ({why}); set aside as {}, rebuilding it",
            db.display(),
            aside.display()
        ));
        report.set_aside = Some(aside);
        true
    } else {
        report
            .lines
            .push(format!("{}: sound; adding what it lacks", db.display()));
        false
    };
    let engine = Engine::open_unchecked(opts)?;
    if fresh {
        let img = engine.images.restore()?;
        report.lines.push(format!(
            "images: {} snapshot(s) and {} name(s) restored",
            img.snapshots,
            img.names.len()
        ));
        for n in &img.lost_names {
            report.lines.push(format!("image {n}: not restored"));
        }
        if !img.unknown_snapshots.is_empty() {
            report.lines.push(format!(
                "images: {} snapshot director(y/ies) without a marker (made by an older Wharf) \
                 could not be restored; `wharf image prune` frees them once no container uses them",
                img.unknown_snapshots.len()
            ));
        }
    }
    let known_pods: Vec<String> = engine.db().pods()?.into_iter().map(|p| p.id).collect();
    let (pod_files, bad_pods) = crate::ledger::load_pods(&engine.paths);
    let mut restored_pods = 0;
    for f in pod_files.iter().filter(|f| !known_pods.contains(&f.id)) {
        engine
            .db()
            .insert_pod(&f.row(crate::model::PodState::Created))?;
        restored_pods += 1;
    }
    let known_ctrs: Vec<String> = engine
        .db()
        .containers(None)?
        .into_iter()
        .map(|c| c.id)
        .collect();
    let (ctr_files, bad_ctrs) = crate::ledger::load_containers(&engine.paths);
    let mut restored_ctrs = 0;
    for f in ctr_files.iter().filter(|f| !known_ctrs.contains(&f.id)) {
        if engine.db().find_pod(&f.pod_id).is_err() {
            report.lines.push(format!(
                "container {} ({}): its pod {} is not on disk; not restored",
                f.name, f.id, f.pod_id
            ));
            continue;
        }
        engine.db().insert_container(&f.row())?;
        restored_ctrs += 1;
    }
    report.lines.push(format!(
        "{restored_pods} pod(s) and {restored_ctrs} container(s) restored"
    ));
    for b in bad_pods.iter().chain(&bad_ctrs) {
        report.lines.push(format!("not restored: {b}"));
    }
    let rec = engine.reconcile();
    report.lines.extend(rec.repaired);
    report.lines.extend(rec.warnings);
    Ok((engine, report))
}
