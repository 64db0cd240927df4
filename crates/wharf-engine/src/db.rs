//! The engine's tables in the metadata store (`<root>/wharf.db`, SQLite in WAL mode, shared
//! with the image subsystem's tables and with every concurrent CLI process and the daemon).
//!
//! Every change is committed before the engine acknowledges it, and on disk by then: at
//! each commit ([`Commits::Each`], the daemon's), or once for all of a command's commits
//! ([`Commits::Grouped`], the CLI's). Names are unique through UNIQUE constraints, so two
//! processes racing for a name cannot both win.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{ContainerSpec, ContainerState, ExitInfo, PodSpec, PodState};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS engine_pods (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    spec TEXT NOT NULL,              -- PodSpec (JSON)
    sandbox TEXT NOT NULL,           -- Sandbox (JSON): what was set up for it
    state TEXT NOT NULL              -- created | running | stopped | removing
);
CREATE TABLE IF NOT EXISTS engine_containers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    pod_id TEXT NOT NULL REFERENCES engine_pods(id),
    created_at TEXT NOT NULL,
    spec TEXT NOT NULL,              -- ContainerSpec (JSON)
    image_id TEXT NOT NULL,
    image_name TEXT NOT NULL,
    state TEXT NOT NULL,             -- ContainerState
    started_at TEXT,
    exit TEXT,                       -- ExitInfo (JSON) once exited
    restart_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS engine_containers_by_pod ON engine_containers(pod_id);
-- What a command that touches one object reconciles besides it (Db::pods_needing_attention),
-- found through indexes: its cost must not grow with the pods on the node.
CREATE INDEX IF NOT EXISTS engine_pods_unsettled ON engine_pods(state)
    WHERE state IN ('creating', 'removing');
CREATE INDEX IF NOT EXISTS engine_containers_unknown ON engine_containers(pod_id)
    WHERE state = 'unknown';
-- Listings go oldest first. Without these SQLite sorted every row, specs and all, in a
-- temporary b-tree: 3 to 4 ms of `wharf ps` with 1000 containers, per table.
CREATE INDEX IF NOT EXISTS engine_pods_by_age ON engine_pods(created_at, id);
CREATE INDEX IF NOT EXISTS engine_containers_by_age ON engine_containers(created_at, id);
CREATE TABLE IF NOT EXISTS engine_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    type TEXT NOT NULL,              -- created | started | exited | oom | removed | ...
    kind TEXT NOT NULL,              -- container | pod | image
    id TEXT NOT NULL,
    name TEXT NOT NULL,
    attrs TEXT NOT NULL              -- JSON object
);
-- The last exit of an object (a wait that comes after a --rm container is gone).
CREATE INDEX IF NOT EXISTS engine_events_by_object ON engine_events(id, type);
-- The host ids of pods' own user namespaces (PodSpec::userns), kept from their specs by
-- triggers: a pod whose range overlaps another pod's is not inserted, so no two pods ever
-- share an id, whichever process made them, and a restored store gets its ranges back.
CREATE TABLE IF NOT EXISTS engine_userns_ranges (
    pod_id TEXT NOT NULL,
    kind TEXT NOT NULL,              -- uid | gid
    host_start INTEGER NOT NULL,
    size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS engine_userns_ranges_by_start ON engine_userns_ranges(kind, host_start);
CREATE TRIGGER IF NOT EXISTS engine_userns_overlap BEFORE INSERT ON engine_userns_ranges
    WHEN EXISTS (SELECT 1 FROM engine_userns_ranges r WHERE r.kind = NEW.kind
        AND r.pod_id != NEW.pod_id AND r.host_start < NEW.host_start + NEW.size
        AND NEW.host_start < r.host_start + r.size)
    BEGIN SELECT RAISE(ABORT, 'wharf: user namespace id range in use'); END;
CREATE TRIGGER IF NOT EXISTS engine_userns_claimed AFTER INSERT ON engine_pods
    WHEN json_extract(NEW.spec, '$.userns') IS NOT NULL
    BEGIN
        INSERT INTO engine_userns_ranges SELECT NEW.id, 'uid', json_extract(value, '$.host_id'),
            json_extract(value, '$.size') FROM json_each(NEW.spec, '$.userns.uid_map');
        INSERT INTO engine_userns_ranges SELECT NEW.id, 'gid', json_extract(value, '$.host_id'),
            json_extract(value, '$.size') FROM json_each(NEW.spec, '$.userns.gid_map');
    END;
CREATE TRIGGER IF NOT EXISTS engine_userns_released AFTER DELETE ON engine_pods
    BEGIN DELETE FROM engine_userns_ranges WHERE pod_id = OLD.id; END;
";

/// What the overlap trigger of [`SCHEMA`] says.
pub(crate) const RANGE_IN_USE: &str = "wharf: user namespace id range in use";

/// Standalone pods (`wharf run`'s) holding no container, kept by triggers: a run killed
/// between its pod and its container, or an rm between its container and its pod, leaves
/// one. Created (and filled from the tables) once, where an older store lacks it.
const EMPTY_STANDALONE: &str = "
CREATE TABLE engine_empty_standalone (pod_id TEXT PRIMARY KEY);
INSERT INTO engine_empty_standalone
    SELECT id FROM engine_pods p
    WHERE json_extract(spec, '$.labels.\"io.wharf.standalone\"') IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM engine_containers c WHERE c.pod_id = p.id);
CREATE TRIGGER engine_standalone_made AFTER INSERT ON engine_pods
    WHEN json_extract(NEW.spec, '$.labels.\"io.wharf.standalone\"') IS NOT NULL
    BEGIN INSERT OR IGNORE INTO engine_empty_standalone VALUES (NEW.id); END;
CREATE TRIGGER engine_standalone_filled AFTER INSERT ON engine_containers
    BEGIN DELETE FROM engine_empty_standalone WHERE pod_id = NEW.pod_id; END;
CREATE TRIGGER engine_standalone_emptied AFTER DELETE ON engine_containers
    WHEN NOT EXISTS (SELECT 1 FROM engine_containers WHERE pod_id = OLD.pod_id)
    AND EXISTS (SELECT 1 FROM engine_pods WHERE id = OLD.pod_id
        AND json_extract(spec, '$.labels.\"io.wharf.standalone\"') IS NOT NULL)
    BEGIN INSERT OR IGNORE INTO engine_empty_standalone VALUES (OLD.pod_id); END;
CREATE TRIGGER engine_standalone_gone AFTER DELETE ON engine_pods
    BEGIN DELETE FROM engine_empty_standalone WHERE pod_id = OLD.id; END;
";

/// What the engine set up for a pod's sandbox (kept so teardown and reconcile know).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sandbox {
    /// Pinned network namespace (None for host networking).
    pub netns: Option<String>,
    /// Pinned IPC namespace (None for host IPC).
    pub ipcns: Option<String>,
    /// Pinned UTS namespace.
    pub utsns: Option<String>,
    /// Pinned user namespace (a pod with its own, [`PodSpec::userns`]), which owns its
    /// network, IPC and UTS namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<String>,
    /// The pod's /dev/shm (a tmpfs mount point).
    pub shm: Option<String>,
    /// Network the pod is attached to ("" when none).
    pub network: String,
    /// Its addresses.
    pub ips: Vec<String>,
    /// Directory holding hosts, resolv.conf, hostname.
    pub etc_dir: Option<String>,
    /// The pod's cgroup (absolute cgroupsPath form), parent of its containers' cgroups;
    /// with [`Sandbox::cgroup_owner`], its one container's cgroup.
    pub cgroup: String,
    /// The container whose cgroup the pod's is: a standalone container's pod on the
    /// cgroupfs driver takes docker's layout, one cgroup per container. Each cgroup the
    /// kernel removes costs it a walk of every superblock on the host (two lists each),
    /// under the lock every cgroup `mkdir` takes, so a pod of one container makes one. The
    /// pod makes none of its own, and its shim lives beside it, in a leaf of the cgroup
    /// parent shared by such shims, as containerd's shims live outside their containers'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_owner: Option<String>,
    /// The other containers ever made in such a pod (`--network container:`), whose
    /// cgroups are beside the pod's rather than below it (a container frozen or killed as
    /// a whole takes nothing else with it): named here before they are made, for the pod's
    /// removal to find.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<String>,
    /// The pod's systemd scope, when the systemd cgroup driver placed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<crate::cgroup_driver::PodUnit>,
    /// PID of the pod's init when containers share a PID namespace (for display: joining
    /// goes through `pidns`).
    pub pause_pid: Option<i32>,
    /// The pinned PID namespace of the pod's init, which its containers join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pidns: Option<String>,
    /// The shim's state directory.
    pub shim_dir: String,
    /// Where the pod's DNS responder sends the questions it does not answer (a pod on a
    /// user network, whose shim answers the network's names at 127.0.0.11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_upstream: Option<Vec<String>>,
    /// The pod's attachments to the user networks of `PodSpec::extra_networks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_networks: Vec<Attachment>,
}

impl Sandbox {
    /// The pod's addresses on network `name` (none when it is not on it).
    pub fn ips_on(&self, name: &str) -> &[String] {
        if !name.is_empty() && self.network == name {
            return &self.ips;
        }
        self.extra_networks
            .iter()
            .find(|a| a.network == name)
            .map_or(&[], |a| a.ips.as_slice())
    }

    /// The networks the pod is on, its first first.
    pub fn networks(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.network.as_str())
            .filter(|n| !n.is_empty())
            .chain(self.extra_networks.iter().map(|a| a.network.as_str()))
    }
}

/// A pod's interface on a network beyond its first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The user network.
    pub network: String,
    /// The interface in the pod (eth1, eth2...).
    pub ifname: String,
    /// Its addresses.
    pub ips: Vec<String>,
}

/// A pod row.
#[derive(Debug, Clone)]
pub struct PodRow {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// What was asked for.
    pub spec: Box<PodSpec>,
    /// What was set up.
    pub sandbox: Sandbox,
    /// Its lifecycle state.
    pub state: PodState,
}

/// A container row.
#[derive(Debug, Clone)]
pub struct ContainerRow {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Its pod.
    pub pod_id: String,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// What was asked for.
    pub spec: Box<ContainerSpec>,
    /// Image id (config digest).
    pub image_id: String,
    /// Image name as given.
    pub image_name: String,
    /// Last known state.
    pub state: ContainerState,
    /// Start time.
    pub started_at: Option<String>,
    /// Exit, once exited.
    pub exit: Option<ExitInfo>,
    /// Restarts by the supervisor.
    pub restart_count: i64,
    /// Between an exit and the supervisor's restart of it (a back-off): not stored, filled
    /// in from the shim's records by `Engine::refresh`; `exit` is then the last run's.
    pub restarting: bool,
    /// Handed to its shim as part of a pod plan and not started yet (its init containers,
    /// a sidecar or a postStart hook before it are not done): not stored, filled in by
    /// `Engine::refresh`; it is shown as created, not running.
    pub waiting: bool,
}

impl ContainerRow {
    /// The state it is shown in: created while its pod's plan has not started it.
    pub fn shown_state(&self) -> ContainerState {
        if self.waiting {
            ContainerState::Created
        } else {
            self.state
        }
    }
}

/// An event row.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Sequence number (ordering, and where `follow` resumes).
    pub seq: i64,
    /// RFC 3339 time.
    pub time: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind_of_event: String,
    /// container | pod | image.
    pub object: String,
    /// Object id.
    pub id: String,
    /// Object name.
    pub name: String,
    /// Details.
    pub attrs: serde_json::Value,
}

/// When the store's commits reach the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Commits {
    /// Each commit syncs the log (SQLite's `synchronous=FULL`): a long-lived engine (the
    /// daemon) acknowledges every call as it returns.
    #[default]
    Each,
    /// Commits reach the page cache, where every other process sees them at once and a
    /// killed process loses none; [`Db::sync`], and the connection's close, put them all on
    /// disk with one fsync of the log. A CLI command acknowledges when it answers: `run -d`
    /// commits seven times, and on this machine's disk each fsync took 0.2 to 5 ms.
    Grouped,
}

/// What a [`Commits::Grouped`] connection has still to put on disk.
struct PendingSync {
    /// The store's write-ahead log (`<db>-wal`), which holds every commit since the last
    /// checkpoint (SQLite syncs it itself before it checkpoints).
    wal: PathBuf,
    /// Set by the commit hook: commits since the last sync.
    unsynced: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PendingSync {
    fn sync(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if !self.unsynced.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        // The log's directory entry needs no sync here: SQLite syncs the log, and with it
        // its directory, when it writes the log's header, before any commit in it.
        let done = std::fs::File::open(&self.wal).and_then(|f| f.sync_data());
        if done.is_err() {
            self.unsynced.store(true, Ordering::Release);
        }
        done
    }
}

/// Connection to the store.
pub struct Db {
    conn: Connection,
    mode: wharf_image::db::StoreMode,
    /// With [`Commits::Grouped`] on a store in WAL mode.
    pending: Option<PendingSync>,
    /// Touched after each commit that added events: see [`events_stamp`].
    stamp: PathBuf,
    /// Events were added in the open transaction: touch the stamp once it commits.
    stamp_pending: Cell<bool>,
}

/// The file whose change time followers of events watch (inotify), next to the store at
/// `db`. Watching the store's own files would wake them too early: a commit writes its
/// log before it updates the index readers go by, and that update makes no inotify event.
pub fn events_stamp(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push("-events");
    PathBuf::from(s)
}

/// Tell followers that events were committed: the stamp's times become now (creating it
/// the first time). Best effort: a follower that misses this learns of the events with the
/// next one.
fn touch(stamp: &Path) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, UTIME_NOW, utimensat};
    let now = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        last_modification: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
    };
    if utimensat(CWD, stamp, &now, AtFlags::empty()) == Err(rustix::io::Errno::NOENT) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(stamp);
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serialisable")
}

/// Column `i` of `r` as text, borrowed from SQLite's row: a listing reads thousands of
/// specs, and copying each into a `String` only to parse and drop it cost an allocation
/// and a copy per column.
fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<&'r str> {
    r.get_ref(i)?.as_str().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into())
    })
}

/// [`text`] where the column may be NULL.
fn text_or_null<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<&'r str>> {
    r.get_ref(i)?.as_str_or_null().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into())
    })
}

/// The number of rows in `table`, to size a listing's vector once: rows are large, and
/// growing a vector of a thousand copies them all again at each doubling.
fn count(conn: &Connection, table: &str) -> Result<usize> {
    let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
    Ok(n.max(0) as usize)
}

fn parse<T: for<'de> Deserialize<'de>>(s: &str, what: &str) -> rusqlite::Result<T> {
    serde_json::from_str(s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("{what}: {e}").into(),
        )
    })
}

fn state_from(s: &str) -> ContainerState {
    match s {
        "created" => ContainerState::Created,
        "running" => ContainerState::Running,
        "exited" => ContainerState::Exited,
        "paused" => ContainerState::Paused,
        _ => ContainerState::Unknown,
    }
}

/// The least string above every string that starts with `prefix`, in SQLite's binary
/// order: `id >= prefix AND id < prefix_end(prefix)` finds ids by prefix through the
/// primary key's index, where `LIKE prefix || '%'` reads every row.
fn prefix_end(prefix: &str) -> String {
    format!("{prefix}\u{10FFFF}")
}

/// Make [`EMPTY_STANDALONE`] where the store lacks it (once; concurrent openers wait on
/// the write lock and find it made).
/// What the engine tables' schema is: [`SCHEMA`] and the table added to older stores.
const ENGINE_SCHEMA: i64 = wharf_image::db::schema_digest(&[SCHEMA, EMPTY_STANDALONE]);

fn add_empty_standalone(conn: &rusqlite::Connection) -> Result<()> {
    let has = || -> rusqlite::Result<bool> {
        Ok(conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'engine_empty_standalone'",
                [],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    };
    if has()? {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let made = (|| {
        if !has()? {
            conn.execute_batch(EMPTY_STANDALONE)?;
        }
        conn.execute_batch("COMMIT")
    })();
    if made.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    Ok(made?)
}

/// How many of the newest events the store keeps (about 1 MB of them).
const EVENTS_KEPT: i64 = 4096;
/// How often, in events, the store drops those beyond [`EVENTS_KEPT`].
const EVENTS_PRUNE_EVERY: i64 = 256;

impl Db {
    /// Open (creating) the store at `path`, each commit synced.
    pub fn open(path: &Path) -> Result<Db> {
        Db::open_with(path, Commits::Each)
    }

    /// Open (creating) the store at `path`, its commits synced as `commits` says.
    pub fn open_with(path: &Path, commits: Commits) -> Result<Db> {
        crate::error::set_store_path(path);
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let (conn, mode) = wharf_image::db::connect(path).map_err(crate::error::from_image)?;
        // In WAL mode NORMAL syncs the log only before a checkpoint: a crash of the machine
        // may lose the last commits, never the store's consistency. FULL syncs it at each
        // commit. On a nearly full disk (rollback journal in memory) FULL always.
        let grouped = commits == Commits::Grouped && mode == wharf_image::db::StoreMode::Normal;
        let pending = grouped.then(|| {
            let unsynced = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let hook = unsynced.clone();
            conn.commit_hook(Some(move || {
                hook.store(true, std::sync::atomic::Ordering::Release);
                false
            }));
            PendingSync { wal, unsynced }
        });
        conn.pragma_update(None, "synchronous", if grouped { "NORMAL" } else { "FULL" })?;
        // This connection does not checkpoint as it closes. The image store's does (or
        // this one, in a process that made none: `Engine`'s drop): it closes last,
        // checkpoints and truncates the log, which costs a checkpoint's fsyncs
        // (log, store, directory) per command that wrote, and the log's restart one more
        // at the next command's first commit. Kept across commands instead, the log would
        // be read back whole into its index by the next command's first connection: `wharf
        // ps` took 11.2 ms with a 64-frame log and 8.1 ms with none (bench/README, scale,
        // the thirteenth time).
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
        wharf_image::db::bring_up_to_date(&conn, "engine", ENGINE_SCHEMA, |conn| {
            conn.execute_batch(SCHEMA)?;
            add_empty_standalone(conn)
        })?;
        // The statements of a pod's and a container's life, parsed once per connection
        // (the daemon keeps one per engine thread): parsing them again at every call was
        // 9% of the CRI daemon's CPU while 10 clients started 100 pods. rusqlite keeps 16.
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Db {
            conn,
            mode,
            pending,
            stamp: events_stamp(path),
            stamp_pending: Cell::new(false),
        })
    }

    /// Let this connection checkpoint the store's log when it closes, as the last
    /// connection of a process that made no other (see [`Db::open_with`]).
    pub fn checkpoint_on_close(&self) {
        let _ = self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            false,
        );
    }

    /// SQLite's data version: it changes whenever another connection commits (this
    /// connection's own commits do not change it), so a connection that never writes sees
    /// every change to the store as a new value.
    pub fn data_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?)
    }

    /// SQLite's integrity check of the whole file (`["ok"]` when sound).
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare("PRAGMA integrity_check")?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Whether the store runs without free space (see [`wharf_image::db::StoreMode`]).
    pub fn low_space(&self) -> bool {
        self.mode == wharf_image::db::StoreMode::LowSpace
    }

    fn unique(
        e: rusqlite::Error,
        kind: &'static str,
        name: &str,
        find: impl FnOnce() -> Option<String>,
    ) -> Error {
        if let rusqlite::Error::SqliteFailure(_, Some(msg)) = &e
            && msg.contains(RANGE_IN_USE)
        {
            return Error::Exists(format!(
                "{kind} {name}: its user namespace's host ids overlap another pod's"
            ));
        }
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && f.code == rusqlite::ErrorCode::ConstraintViolation
        {
            return Error::NameInUse {
                kind,
                name: name.to_string(),
                id: find().unwrap_or_default(),
            };
        }
        Error::Store(e)
    }

    /// Insert a pod; fails with [`Error::NameInUse`] if the name is taken.
    pub fn insert_pod(&self, row: &PodRow) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO engine_pods (id, name, created_at, spec, sandbox, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| st.execute(params![row.id, row.name, row.created_at, json(&row.spec), json(&row.sandbox), row.state.as_str()]))
            .map_err(|e| Self::unique(e, "pod", &row.name, || self.pod_id_by_name(&row.name).ok().flatten()))?;
        Ok(())
    }

    fn pod_id_by_name(&self, name: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT id FROM engine_pods WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// Update a pod's sandbox record and state.
    pub fn update_pod(&self, id: &str, sandbox: &Sandbox, state: PodState) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE engine_pods SET sandbox = ?2, state = ?3 WHERE id = ?1")?
            .execute(params![id, json(sandbox), state.as_str()])?;
        Ok(())
    }

    /// Update what a pod asked for and what was set up, together (a network joined or
    /// left while it lives).
    pub fn update_pod_spec(&self, id: &str, spec: &PodSpec, sandbox: &Sandbox) -> Result<()> {
        self.conn.execute(
            "UPDATE engine_pods SET spec = ?2, sandbox = ?3 WHERE id = ?1",
            params![id, json(spec), json(sandbox)],
        )?;
        Ok(())
    }

    /// The host ranges of every pod's user namespace of `kind` ("uid" or "gid"), by start.
    pub fn userns_ranges(&self, kind: &str) -> Result<Vec<(u64, u64)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT host_start, size FROM engine_userns_ranges WHERE kind = ?1 ORDER BY host_start",
        )?;
        let rows = st.query_map([kind], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Remove a pod row (its containers must be gone).
    pub fn delete_pod(&self, id: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM engine_pods WHERE id = ?1", [id])?;
        Ok(())
    }

    fn pod_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PodRow> {
        Ok(PodRow {
            id: r.get(0)?,
            name: r.get(1)?,
            created_at: r.get(2)?,
            spec: parse(text(r, 3)?, "pod spec")?,
            sandbox: parse(text(r, 4)?, "pod sandbox")?,
            state: {
                let s = text(r, 5)?;
                PodState::parse(s).ok_or_else(|| {
                    rusqlite::Error::FromSqlConversionFailure(
                        5,
                        rusqlite::types::Type::Text,
                        format!("pod state {s:?} is not one this engine knows").into(),
                    )
                })?
            },
        })
    }

    /// Find a pod by id, id prefix or name.
    pub fn find_pod(&self, key: &str) -> Result<PodRow> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT id, name, created_at, spec, sandbox, state FROM engine_pods WHERE id = ?1 OR name = ?1",
            )?
            .query_row([key], Self::pod_from_row)
            .optional()?;
        if let Some(row) = row {
            return Ok(row);
        }
        let mut stmt = self.conn.prepare(
            "SELECT id, name, created_at, spec, sandbox, state FROM engine_pods WHERE id >= ?1 AND id < ?2",
        )?;
        let rows: Vec<PodRow> = stmt
            .query_map([key, &prefix_end(key)], Self::pod_from_row)?
            .collect::<rusqlite::Result<_>>()?;
        match rows.len() {
            1 if key.len() >= 3 => Ok(rows.into_iter().next().unwrap()),
            n if n > 1 => Err(Error::Invalid(format!(
                "pod id prefix {key:?} is ambiguous"
            ))),
            _ => Err(Error::NotFound {
                kind: "pod",
                name: key.to_string(),
            }),
        }
    }

    /// The pods an interrupted operation may have left wrong, found by the store alone:
    /// being created or removed, holding a container still being made, or holding no
    /// container (a `run` killed between its pod and its container).
    pub fn pods_needing_attention(&self) -> Result<Vec<PodRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, name, created_at, spec, sandbox, state FROM engine_pods \
             WHERE state IN ('creating', 'removing') \
             UNION SELECT id, name, created_at, spec, sandbox, state FROM engine_pods \
             WHERE id IN (SELECT pod_id FROM engine_containers WHERE state = 'unknown') \
             UNION SELECT id, name, created_at, spec, sandbox, state FROM engine_pods \
             WHERE id IN (SELECT pod_id FROM engine_empty_standalone) \
             ORDER BY created_at, id",
        )?;
        let rows = stmt
            .query_map([], Self::pod_from_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Every pod, oldest first (through `engine_pods_by_age`, not a sort).
    const ALL_PODS: &'static str = "SELECT id, name, created_at, spec, sandbox, state FROM engine_pods ORDER BY created_at, id";

    /// All pods, oldest first.
    pub fn pods(&self) -> Result<Vec<PodRow>> {
        Self::pods_on(&self.conn)
    }

    /// All pods, oldest first, read through a connection of their own (see
    /// [`wharf_image::db::connect_reader`]) to the store at `path`.
    pub fn pods_at(path: &Path) -> Result<Vec<PodRow>> {
        let conn = wharf_image::db::connect_reader(path).map_err(crate::error::from_image)?;
        Self::pods_on(&conn)
    }

    fn pods_on(conn: &Connection) -> Result<Vec<PodRow>> {
        let mut stmt = conn.prepare(Self::ALL_PODS)?;
        let mut rows = Vec::with_capacity(count(conn, "engine_pods")?);
        for r in stmt.query_map([], Self::pod_from_row)? {
            rows.push(r?);
        }
        Ok(rows)
    }

    fn count(&self, table: &str) -> Result<usize> {
        count(&self.conn, table)
    }

    /// How many pods the store holds.
    pub fn pod_count(&self) -> Result<usize> {
        self.count("engine_pods")
    }

    /// Give container `id` the name `name`; fails with [`Error::NameInUse`] if it is taken.
    pub fn rename_container(&self, id: &str, name: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE engine_containers SET name = ?2 WHERE id = ?1",
                params![id, name],
            )
            .map_err(|e| {
                Self::unique(e, "container", name, || {
                    self.find_container(name).ok().map(|c| c.id)
                })
            })?;
        Ok(())
    }

    /// Give pod `id` the name `name`; fails with [`Error::NameInUse`] if it is taken.
    pub fn rename_pod(&self, id: &str, name: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE engine_pods SET name = ?2 WHERE id = ?1",
                params![id, name],
            )
            .map_err(|e| {
                Self::unique(e, "pod", name, || self.pod_id_by_name(name).ok().flatten())
            })?;
        Ok(())
    }

    /// Insert a container; fails with [`Error::NameInUse`] if the name is taken.
    pub fn insert_container(&self, row: &ContainerRow) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO engine_containers (id, name, pod_id, created_at, spec, image_id, image_name, state, started_at, exit, restart_count)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut st| st.execute(params![
                    row.id,
                    row.name,
                    row.pod_id,
                    row.created_at,
                    json(&row.spec),
                    row.image_id,
                    row.image_name,
                    row.state.to_string(),
                    row.started_at,
                    row.exit.as_ref().map(json),
                    row.restart_count
                ]))
            .map_err(|e| {
                Self::unique(e, "container", &row.name, || {
                    self.conn
                        .query_row("SELECT id FROM engine_containers WHERE name = ?1", [&row.name], |r| r.get(0))
                        .ok()
                })
            })?;
        Ok(())
    }

    /// Record a container's state (and exit, start time, restarts).
    pub fn update_container(
        &self,
        id: &str,
        state: ContainerState,
        started_at: Option<&str>,
        exit: Option<&ExitInfo>,
        restart_count: i64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE engine_containers SET state = ?2, started_at = COALESCE(?3, started_at), exit = ?4, restart_count = ?5 WHERE id = ?1",
            )?
            .execute(params![id, state.to_string(), started_at, exit.map(json), restart_count])?;
        Ok(())
    }

    /// Remove a container row.
    pub fn delete_container(&self, id: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM engine_containers WHERE id = ?1", [id])?;
        Ok(())
    }

    fn container_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ContainerRow> {
        Ok(ContainerRow {
            id: r.get(0)?,
            name: r.get(1)?,
            pod_id: r.get(2)?,
            created_at: r.get(3)?,
            spec: parse(text(r, 4)?, "container spec")?,
            image_id: r.get(5)?,
            image_name: r.get(6)?,
            state: state_from(text(r, 7)?),
            started_at: r.get(8)?,
            exit: match text_or_null(r, 9)? {
                Some(s) => Some(parse(s, "container exit")?),
                None => None,
            },
            restart_count: r.get(10)?,
            restarting: false,
            waiting: false,
        })
    }

    const CONTAINER_COLS: &'static str = "id, name, pod_id, created_at, spec, image_id, image_name, state, started_at, exit, restart_count";

    /// Find a container by id, id prefix or name.
    pub fn find_container(&self, key: &str) -> Result<ContainerRow> {
        let sql = format!(
            "SELECT {} FROM engine_containers WHERE id = ?1 OR name = ?1",
            Self::CONTAINER_COLS
        );
        if let Some(row) = self
            .conn
            .prepare_cached(&sql)?
            .query_row([key], Self::container_from_row)
            .optional()?
        {
            return Ok(row);
        }
        let sql = format!(
            "SELECT {} FROM engine_containers WHERE id >= ?1 AND id < ?2",
            Self::CONTAINER_COLS
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows: Vec<ContainerRow> = stmt
            .query_map([key, &prefix_end(key)], Self::container_from_row)?
            .collect::<rusqlite::Result<_>>()?;
        match rows.len() {
            1 if key.len() >= 3 => Ok(rows.into_iter().next().unwrap()),
            n if n > 1 => Err(Error::Invalid(format!(
                "container id prefix {key:?} is ambiguous"
            ))),
            _ => Err(Error::NotFound {
                kind: "container",
                name: key.to_string(),
            }),
        }
    }

    /// Every container, oldest first (through `engine_containers_by_age`, not a sort).
    fn all_containers_sql() -> String {
        format!(
            "SELECT {} FROM engine_containers ORDER BY created_at, id",
            Self::CONTAINER_COLS
        )
    }

    /// Containers, of one pod or all, oldest first.
    pub fn containers(&self, pod: Option<&str>) -> Result<Vec<ContainerRow>> {
        // Two statements: `?1 IS NULL OR pod_id = ?1` keeps SQLite from the pod index,
        // and one pod's containers would cost a read of every row.
        let sql = match pod {
            Some(_) => format!(
                "SELECT {} FROM engine_containers WHERE pod_id = ?1 ORDER BY created_at, id",
                Self::CONTAINER_COLS
            ),
            None => Self::all_containers_sql(),
        };
        let mut stmt = self.conn.prepare(&sql)?;
        let mut rows = Vec::with_capacity(match pod {
            Some(_) => 0,
            None => self.count("engine_containers")?,
        });
        for r in match pod {
            Some(p) => stmt.query_map([p], Self::container_from_row)?,
            None => stmt.query_map([], Self::container_from_row)?,
        } {
            rows.push(r?);
        }
        Ok(rows)
    }

    /// Append an event that happens now.
    pub fn event(
        &self,
        kind_of_event: &str,
        object: &str,
        id: &str,
        name: &str,
        attrs: serde_json::Value,
    ) -> Result<()> {
        let now = wharf_sys::time::now_rfc3339_nano();
        self.event_at(&now, kind_of_event, object, id, name, attrs)
    }

    /// Append an event that happened at `time` (RFC 3339), e.g. an exit the shim saw
    /// before anyone recorded it.
    pub fn event_at(
        &self,
        time: &str,
        kind_of_event: &str,
        object: &str,
        id: &str,
        name: &str,
        attrs: serde_json::Value,
    ) -> Result<()> {
        let r = self
            .conn
            .prepare_cached(
                "INSERT INTO engine_events (time, type, kind, id, name, attrs) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![time, kind_of_event, object, id, name, attrs.to_string()])
            });
        match r.map_err(Error::from) {
            Ok(_) => {
                // Housekeeping: an event that could not prune its elders (a full disk) is
                // still recorded.
                let _ = self.prune_events();
                if self.conn.is_autocommit() {
                    touch(&self.stamp);
                } else {
                    self.stamp_pending.set(true);
                }
                Ok(())
            }
            // On a full disk the change the event tells of (a removal) matters more than
            // the event: it is dropped rather than fail the removal.
            Err(Error::NoSpace { .. }) if self.low_space() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Drop the oldest events once more than [`EVENTS_KEPT`] are stored, checked every
    /// [`EVENTS_PRUNE_EVERY`] events: a node that makes and removes pods all day would
    /// otherwise grow its store without end. What docker keeps is smaller still (the
    /// last 256 events, in memory); podman rotates its events file at 1 MB.
    fn prune_events(&self) -> Result<()> {
        let seq = self.conn.last_insert_rowid();
        if seq % EVENTS_PRUNE_EVERY == 0 && seq > EVENTS_KEPT {
            self.conn.execute(
                "DELETE FROM engine_events WHERE seq <= ?1",
                [seq - EVENTS_KEPT],
            )?;
        }
        Ok(())
    }

    /// The exit code of the last "exited" event of object `id` (kept after the object
    /// is removed).
    pub fn last_exit_code(&self, id: &str) -> Result<Option<i64>> {
        let attrs: Option<String> = self
            .conn
            .query_row(
                "SELECT attrs FROM engine_events WHERE id = ?1 AND type = 'exited' ORDER BY seq DESC LIMIT 1",
                [id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(attrs
            .and_then(|a| serde_json::from_str::<serde_json::Value>(&a).ok()?["exitCode"].as_i64()))
    }

    /// Events after `seq`, oldest first.
    pub fn events_since(&self, seq: i64) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare(
            "SELECT seq, time, type, kind, id, name, attrs FROM engine_events WHERE seq > ?1 ORDER BY seq",
        )?;
        let rows = stmt
            .query_map([seq], |r| {
                Ok(Event {
                    seq: r.get(0)?,
                    time: r.get(1)?,
                    kind_of_event: r.get(2)?,
                    object: r.get(3)?,
                    id: r.get(4)?,
                    name: r.get(5)?,
                    attrs: serde_json::from_str(&r.get::<_, String>(6)?).unwrap_or_default(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Put on disk what this connection committed since the last sync: with
    /// [`Commits::Grouped`], one fsync of the log; otherwise every commit is there already.
    pub fn sync(&self) -> Result<()> {
        use crate::error::Context;
        match &self.pending {
            Some(p) => p.sync().ctx(|| format!("sync {}", p.wal.display())),
            None => Ok(()),
        }
    }

    /// Run `f` in one transaction (IMMEDIATE: taken before reading, so concurrent writers
    /// serialise instead of failing).
    /// A state change and its event go in one transaction: one fsync instead of two.
    /// Must not be nested.
    pub fn transaction<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        self.stamp_pending.set(false);
        match f(self) {
            Ok(v) => {
                self.conn.execute_batch("COMMIT")?;
                if self.stamp_pending.replace(false) {
                    touch(&self.stamp);
                }
                Ok(v)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                self.stamp_pending.set(false);
                Err(e)
            }
        }
    }
}

impl Drop for Db {
    /// A grouped connection's commits reach the disk when it closes, whatever path the
    /// command took out (an error included); a failed sync here has no one to tell but
    /// leaves the store consistent.
    fn drop(&mut self) {
        if let Some(p) = &self.pending {
            let _ = p.sync();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(id: &str, name: &str) -> PodRow {
        PodRow {
            id: id.into(),
            name: name.into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            spec: Box::new(PodSpec::default()),
            sandbox: Sandbox::default(),
            state: PodState::Created,
        }
    }

    /// A process's last connection to close checkpoints the store's log, whichever it is:
    /// the image store's when the command touched an image, the engine's when it touched
    /// none (the image store connects at its first use). A log left full would be read
    /// back into its index by the next command.
    #[test]
    fn a_command_leaves_the_log_checkpointed_with_or_without_images() {
        for touch_images in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let opts = crate::EngineOptions {
                root: dir.path().join("root"),
                run: dir.path().join("run"),
                cgroup_parent: format!("/wharf-test-{}", std::process::id()),
                commits: Commits::Grouped,
                ..Default::default()
            };
            let engine = crate::Engine::open_unchecked(opts).unwrap();
            engine.db().insert_pod(&pod("p1", "one")).unwrap();
            if touch_images {
                assert!(engine.images.list().unwrap().is_empty());
            }
            assert_eq!(engine.images.connected(), touch_images);
            let wal = dir.path().join("root/wharf.db-wal");
            assert!(std::fs::metadata(&wal).unwrap().len() > 0, "nothing logged");
            drop(engine);
            let left = std::fs::metadata(&wal).unwrap().len();
            assert_eq!(
                left, 0,
                "images touched: {touch_images}: log of {left} bytes"
            );
            let db = Db::open(&dir.path().join("root/wharf.db")).unwrap();
            assert_eq!(db.pods().unwrap().len(), 1);
        }
    }

    /// Listings come oldest first, read in that order through the age indexes: a sort of
    /// every row (a temporary b-tree holding the specs) cost `wharf ps` 3 to 4 ms per
    /// table at 1000 containers.
    #[test]
    fn listings_come_oldest_first_without_a_sort() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("wharf.db")).unwrap();
        // Inserted out of age order; two share a time, and then go by id.
        for (id, at) in [
            ("c3", "2026-01-03T00:00:00Z"),
            ("b1", "2026-01-01T00:00:00Z"),
            ("a2", "2026-01-02T00:00:00Z"),
            ("a1", "2026-01-01T00:00:00Z"),
        ] {
            let mut p = pod(id, &format!("pod-{id}"));
            p.created_at = at.into();
            db.insert_pod(&p).unwrap();
            let created = crate::ledger::ContainerFile {
                id: format!("k{id}"),
                name: format!("ctr-{id}"),
                pod_id: id.into(),
                created_at: at.into(),
                spec: Default::default(),
                image_id: "sha256:0".into(),
                image_name: "img".into(),
            };
            db.insert_container(&created.row()).unwrap();
        }
        let pods: Vec<String> = db.pods().unwrap().into_iter().map(|p| p.id).collect();
        assert_eq!(pods, ["a1", "b1", "a2", "c3"]);
        let ctrs: Vec<String> = db
            .containers(None)
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ctrs, ["ka1", "kb1", "ka2", "kc3"]);
        for sql in [Db::ALL_PODS.to_string(), Db::all_containers_sql()] {
            let plan: Vec<String> = db
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(
                plan.iter().any(|l| l.contains("_by_age"))
                    && !plan.iter().any(|l| l.contains("TEMP B-TREE")),
                "{sql}: {plan:?}"
            );
        }
    }

    #[test]
    fn names_are_unique_and_lookups_work() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("wharf.db")).unwrap();
        db.insert_pod(&pod("abcdef0123", "web")).unwrap();
        match db.insert_pod(&pod("ffff", "web")) {
            Err(Error::NameInUse { id, .. }) => assert_eq!(id, "abcdef0123"),
            other => panic!("{other:?}"),
        }
        assert_eq!(db.find_pod("web").unwrap().id, "abcdef0123");
        assert_eq!(db.find_pod("abcd").unwrap().name, "web");
        assert!(matches!(db.find_pod("zzz"), Err(Error::NotFound { .. })));
        // A second connection (another process) sees the committed row.
        let db2 = Db::open(&dir.path().join("wharf.db")).unwrap();
        assert_eq!(db2.pods().unwrap().len(), 1);
        db.event("created", "pod", "abcdef0123", "web", serde_json::json!({}))
            .unwrap();
        assert_eq!(db2.events_since(0).unwrap()[0].kind_of_event, "created");
    }

    #[test]
    fn grouped_commits_are_seen_at_once_and_synced_together() {
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wharf.db");
        let synchronous = |db: &Db| -> i64 {
            db.conn
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap()
        };
        let each = Db::open(&path).unwrap();
        assert_eq!(synchronous(&each), 2, "FULL: each commit synced");
        assert!(each.pending.is_none());
        drop(each);
        let grouped = Db::open_with(&path, Commits::Grouped).unwrap();
        assert_eq!(synchronous(&grouped), 1, "NORMAL: synced by the group");
        let pending = grouped.pending.as_ref().unwrap();
        // Opening a store that has its tables writes nothing: a reading command syncs
        // nothing.
        assert!(!pending.unsynced.load(Ordering::Acquire));
        grouped.insert_pod(&pod("abcdef0123", "web")).unwrap();
        assert!(
            pending.unsynced.load(Ordering::Acquire),
            "a commit is marked"
        );
        // Another process sees the commit before any sync.
        let other = Db::open(&path).unwrap();
        assert_eq!(other.pods().unwrap().len(), 1);
        grouped.sync().unwrap();
        assert!(!pending.unsynced.load(Ordering::Acquire));
        // A transaction rolled back marks nothing.
        let _ = grouped.transaction(|db| {
            db.insert_pod(&pod("ffff", "db"))?;
            Err::<(), _>(Error::Invalid("no".into()))
        });
        assert!(!pending.unsynced.load(Ordering::Acquire));
        assert_eq!(other.pods().unwrap().len(), 1);
    }

    #[test]
    fn only_the_newest_events_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("wharf.db")).unwrap();
        let total = EVENTS_KEPT + 3 * EVENTS_PRUNE_EVERY + 7;
        db.transaction(|db| {
            for i in 0..total {
                db.event(
                    "exited",
                    "container",
                    &format!("c{i}"),
                    "c",
                    serde_json::json!({"exitCode": i}),
                )?;
            }
            Ok(())
        })
        .unwrap();
        let events = db.events_since(0).unwrap();
        assert!(
            events.len() as i64 >= EVENTS_KEPT
                && events.len() as i64 <= EVENTS_KEPT + EVENTS_PRUNE_EVERY,
            "{} events kept",
            events.len()
        );
        // The newest are there, in order; the oldest are gone.
        assert_eq!(events.last().unwrap().seq, total);
        assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        assert_eq!(
            db.last_exit_code(&format!("c{}", total - 1)).unwrap(),
            Some(total - 1)
        );
        assert_eq!(db.last_exit_code("c0").unwrap(), None);
    }
}
