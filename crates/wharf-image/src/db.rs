//! The image tables of the engine's metadata store (`<root>/wharf.db`, SQLite in WAL mode,
//! shared with the engine). All image-side schema lives here; tables are prefixed `image_`,
//! `snapshot_` and `lease_` and created with `IF NOT EXISTS`, so every process that opens
//! the database brings it up to date.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::Result;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS image_images (
    id TEXT PRIMARY KEY,                 -- config digest (docker's image id)
    manifest_digest TEXT NOT NULL,       -- the platform manifest
    manifest_media_type TEXT NOT NULL,
    top_chain_id TEXT NOT NULL,          -- key of the top layer's snapshot ('' = no layers)
    size INTEGER NOT NULL,               -- unpacked size of its layers (their tar streams)
    created_at INTEGER NOT NULL          -- when it entered the store (unix seconds)
);
CREATE TABLE IF NOT EXISTS image_names (
    name TEXT PRIMARY KEY,               -- e.g. docker.io/library/busybox:latest
    image_id TEXT NOT NULL REFERENCES image_images(id),
    target_digest TEXT NOT NULL,         -- what the name resolved to (index or manifest)
    target_media_type TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS image_names_by_image ON image_names(image_id);
CREATE TABLE IF NOT EXISTS snapshot_snapshots (
    id INTEGER PRIMARY KEY AUTOINCREMENT, -- directory name under image/snapshots/
    key TEXT NOT NULL UNIQUE,            -- chain id (committed), 'container/<id>', 'view/<image>'
    parent TEXT NOT NULL,                -- key of the parent snapshot ('' = none)
    kind TEXT NOT NULL,                  -- committed | active | view
    created_at INTEGER NOT NULL,
    size INTEGER NOT NULL DEFAULT 0      -- committed: bytes of the layer's tar stream
);
CREATE TABLE IF NOT EXISTS lease_leases (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lease_resources (
    lease_id TEXT NOT NULL REFERENCES lease_leases(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,                  -- blob | snapshot
    key TEXT NOT NULL,
    PRIMARY KEY (lease_id, kind, key)
);
";

/// What the image tables' schema is: [`SCHEMA`] and the column added to stores older than it.
const IMAGE_SCHEMA: i64 = schema_digest(&[SCHEMA, "snapshot_snapshots.size"]);

/// Open (creating if needed) the metadata store and its image tables.
pub fn open(path: &Path) -> Result<Connection> {
    let (conn, _) = connect(path)?;
    bring_up_to_date(&conn, "image", IMAGE_SCHEMA, |conn| {
        conn.execute_batch(SCHEMA)?;
        add_column(
            conn,
            "snapshot_snapshots",
            "size",
            "INTEGER NOT NULL DEFAULT 0",
        )
    })?;
    Ok(conn)
}

/// A digest of a part of the store's schema: its statements and the names of the
/// migrations that bring older stores to it (64-bit FNV-1a over them, in order).
pub const fn schema_digest(pieces: &[&str]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < pieces.len() {
        let b = pieces[i].as_bytes();
        let mut j = 0;
        while j < b.len() {
            h ^= b[j] as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        // A separator, so that moving text between pieces changes the digest.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h as i64
}

/// Bring part `part` of the store's schema (the image tables, the engine's) up to date with
/// `make` (its statements and migrations), unless the store records that a schema of
/// `digest` made it last (see [`schema_current`]); then record that one did.
pub fn bring_up_to_date<E: From<rusqlite::Error>>(
    conn: &Connection,
    part: &str,
    digest: i64,
    make: impl FnOnce(&Connection) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    if !schema_current(conn, part, digest) {
        make(conn)?;
        mark_schema(conn, part, digest)?;
    }
    Ok(())
}

/// Whether part `part` of the store's schema (the image tables, the engine's) was last
/// brought up to date by a process whose schema had `digest`. Every command opens the store,
/// and running the part's `CREATE ... IF NOT EXISTS` statements and migration checks again
/// each time cost about a tenth of a short command (`wharf ps` with no pods: 0.5 of 4 ms):
/// SQLite parses each statement whole before it finds the table there. A store without the
/// record (new, or last opened by an older Wharf) or with another digest (a newer or older
/// schema) gets the statements, which change nothing that is there already.
fn schema_current(conn: &Connection, part: &str, digest: i64) -> bool {
    conn.query_row(
        "SELECT digest FROM wharf_schema WHERE part = ?1",
        [part],
        |r| r.get::<_, i64>(0),
    )
    .is_ok_and(|d| d == digest)
}

/// Record that part `part` of the store's schema is the one of `digest` (see
/// [`schema_current`]).
fn mark_schema(conn: &Connection, part: &str, digest: i64) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS wharf_schema (
            part TEXT PRIMARY KEY,           -- image | engine
            digest INTEGER NOT NULL          -- schema_digest of what made its tables
        )",
    )?;
    conn.execute(
        "INSERT INTO wharf_schema (part, digest) VALUES (?1, ?2) \
         ON CONFLICT (part) DO UPDATE SET digest = excluded.digest",
        rusqlite::params![part, digest],
    )?;
    Ok(())
}

/// How a connection waits out another's write: true to try again. SQLite's own waiting
/// (`busy_timeout`) sleeps 1, 2, 5, 10, 15, 20, 25 ms and more between tries, so in a burst
/// of writes, a write that met another slept for milliseconds on a lock held for a fraction
/// of one (measured: 82 such sleeps in the CRI daemon while 10 clients started 100 pods).
/// This tries every 100 µs for the first 10 ms, then every 2 ms, for 30 s in all.
pub fn retry_while_busy(tries: i32) -> bool {
    const QUICK_TRIES: i32 = 100;
    const SLOW_TRIES: i32 = 15_000;
    let pause = if tries < QUICK_TRIES {
        Duration::from_micros(100)
    } else if tries < QUICK_TRIES + SLOW_TRIES {
        Duration::from_millis(2)
    } else {
        return false;
    };
    std::thread::sleep(pause);
    true
}

/// How a connection to the store was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// WAL mode, with its shared-memory index next to the database.
    Normal,
    /// The filesystem is full: SQLite could not create the WAL index, so the store runs
    /// with an in-memory rollback journal. Reading works, and so does removing (it frees
    /// space, though a row added on the way may not fit).
    LowSpace,
}

/// A connection to the store at `path`: WAL mode normally, [`StoreMode::LowSpace`] when
/// the filesystem is full. Each CLI command opens the store anew, and the first connection
/// after the last one closed recreates the WAL index (`-shm`), which needs free space: on a
/// full disk every command, cleanup included, used to fail in `xShmMap`.
pub fn connect(path: &Path) -> Result<(Connection, StoreMode)> {
    secure_file(path).map_err(|e| crate::Error::Io {
        what: format!("create {}", path.display()),
        err: e,
    })?;
    let normal = || -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.busy_handler(Some(retry_while_busy))?;
        switch_to_wal(&conn)?;
        keep_wal_files(&conn)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        read_through_map(&conn)?;
        // A read, so that a WAL index that cannot be made fails here.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        Ok(conn)
    };
    if nearly_full(path) {
        return Ok((low_space(path)?, StoreMode::LowSpace));
    }
    match normal() {
        Ok(c) => Ok((c, StoreMode::Normal)),
        Err(e) if out_of_space(&e, path) => Ok((low_space(path)?, StoreMode::LowSpace)),
        Err(e) => Err(e.into()),
    }
}

/// Put the store in WAL mode, waiting out other connections as writes do. On a store that
/// is still in rollback mode (a new one), the switch reads the file's header, then writes
/// it: SQLite answers that upgrade with "database is locked" at once, without calling the
/// busy handler, while another connection holds a lock on the file. Processes that open a
/// new store together (three pulls into a new root) met that.
fn switch_to_wal(conn: &Connection) -> rusqlite::Result<()> {
    again_while_busy(|| conn.pragma_update(None, "journal_mode", "WAL"))
}

/// Run `step` again while another connection's lock makes it fail ("database is locked"),
/// on the busy handler's schedule: for the steps SQLite takes a lock in without calling
/// the handler.
fn again_while_busy<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let mut tries = 0;
    loop {
        match step() {
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DatabaseBusy && retry_while_busy(tries) =>
            {
                tries += 1;
            }
            done => return done,
        }
    }
}

/// Read the store's pages through a mapping of its file rather than copies of them: a
/// listing of 1000 pods reads the whole store (2.3 MB), which took 575 `pread`s into a page
/// cache of the connection's own (memory the command faults in, then throws away). Mapped,
/// the pages are the kernel's page cache itself. Writes still go through the log.
fn read_through_map(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "mmap_size", 256 << 20)
}

/// A second connection to a store that [`connect`] set up, for reading only: one that a
/// listing reads on a thread of its own while the first connection reads other tables.
/// It leaves the log to the first connection (no checkpoint when it closes).
pub fn connect_reader(path: &Path) -> Result<Connection> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_handler(Some(retry_while_busy))?;
    conn.pragma_update(None, "query_only", true)?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    read_through_map(&conn)?;
    Ok(conn)
}

/// Keep the WAL and its index (`-wal`, `-shm`) when the last connection closes: emptied
/// (the close's checkpoint leaves the WAL truncated to nothing), not deleted. SQLite deletes
/// both by default, so every command made two files and deleted two. On ext4 without a
/// journal the inode allocator passes over each free inode deleted in the last minute (the
/// last six while its inode table block is unwritten), not counting the current second,
/// one buffer lookup each (`recently_deleted`; bench/README, scale, the eleventh and twelfth
/// times): each deletion the engine spares leaves later allocations less to pass over.
/// Kept, the files also spare a nearly full disk the index's re-creation.
#[allow(unsafe_code)]
fn keep_wal_files(conn: &Connection) -> rusqlite::Result<()> {
    // Truncated to this when a checkpoint restarts it (and to nothing at the last close).
    conn.pragma_update(None, "journal_size_limit", 4 << 20)?;
    let mut on: std::ffi::c_int = 1;
    // SAFETY: a file control on the open connection's main database, with the int it takes.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::ffi::c_int).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("keep the WAL files (SQLITE_FCNTL_PERSIST_WAL)".into()),
        ));
    }
    Ok(())
}

/// Free space below which the store leaves WAL mode: the WAL index takes 32 KiB and every
/// changed page 4 KiB more of WAL, which a removal on a nearly full disk would not get.
const LOW_SPACE_BYTES: u64 = 4 << 20;

fn nearly_full(path: &Path) -> bool {
    rustix::fs::statvfs(path.parent().unwrap_or(Path::new("/")))
        .is_ok_and(|s| s.f_bavail.saturating_mul(s.f_frsize) < LOW_SPACE_BYTES || s.f_favail == 0)
}

/// Whether `e` comes from a full filesystem under `path`.
fn out_of_space(e: &rusqlite::Error, path: &Path) -> bool {
    let code = match e {
        rusqlite::Error::SqliteFailure(f, _) => f.code,
        _ => return false,
    };
    let full = rustix::fs::statvfs(path.parent().unwrap_or(Path::new("/")))
        .is_ok_and(|s| s.f_bavail == 0 || s.f_favail == 0);
    code == rusqlite::ErrorCode::DiskFull || (code == rusqlite::ErrorCode::SystemIoFailure && full)
}

/// Open the store without a WAL index: leave WAL mode once under an exclusive lock (which
/// keeps the index in memory), then use an in-memory rollback journal, which needs no new
/// file either. The price: a process killed in the middle of a commit can leave the file
/// damaged (`wharf system repair` rebuilds it), which only a nearly full disk makes worth it.
fn low_space(path: &Path) -> rusqlite::Result<Connection> {
    leave_wal(path)?;
    let conn = Connection::open(path)?;
    conn.busy_handler(Some(retry_while_busy))?;
    // Out of WAL mode already, unless a command that found space put the store back in it
    // meanwhile: leaving it again takes the exclusive lock without the busy handler too.
    again_while_busy(|| conn.pragma_update(None, "journal_mode", "MEMORY"))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// Leave WAL mode on a connection of its own in exclusive locking mode, which keeps the WAL
/// index in memory. SQLite takes the exclusive lock this needs without the busy handler, so
/// commands that opened the store together met "database is locked" at once. And a
/// connection in that mode keeps every lock it takes until it closes: two of them waiting
/// in SQLite's busy handler each held a shared lock the other waited on, for the whole
/// 30 s. So a try waits nowhere inside SQLite, and its connection is closed before the
/// next try.
fn leave_wal(path: &Path) -> rusqlite::Result<()> {
    again_while_busy(|| {
        let conn = Connection::open(path)?;
        // Not even rusqlite's default wait (5 s).
        conn.busy_handler(None)?;
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
        conn.pragma_update(None, "journal_mode", "MEMORY")
    })
}

/// Bring a table made by an older version up to date with a column it lacks.
fn add_column(conn: &Connection, table: &str, column: &str, decl: &str) -> Result<()> {
    let has = conn
        .prepare(&format!(
            "SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1"
        ))?
        .exists([column])?;
    if !has {
        conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
    }
    Ok(())
}

/// Make the store file owner-only: it holds container environments (passwords among them)
/// and registry state. Created 0600 before SQLite opens it (SQLite gives its `-wal` and
/// `-shm` files the mode of the database), and tightened when an older version left it
/// readable by others.
pub fn secure_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        if let Ok(meta) = std::fs::metadata(&name)
            && meta.permissions().mode() & 0o077 != 0
        {
            std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A write that meets another waits, and goes on within a fraction of a millisecond
    /// of the other's commit, not at SQLite's next step (40 ms held: its own waiting
    /// would try again at 53 ms).
    #[test]
    fn a_write_waits_for_another_and_follows_it_closely() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let (first, _) = connect(&path).unwrap();
        first.execute_batch("CREATE TABLE t (x)").unwrap();
        let (second, _) = connect(&path).unwrap();
        let held = Duration::from_millis(40);
        first
            .execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
            .unwrap();
        let start = Instant::now();
        let committer = std::thread::spawn(move || {
            std::thread::sleep(held);
            first.execute_batch("COMMIT").unwrap();
            Instant::now()
        });
        second.execute("INSERT INTO t VALUES (2)", []).unwrap();
        let written = Instant::now();
        let committed = committer.join().unwrap();
        assert!(written - start >= held, "the write did not wait");
        let late = written.saturating_duration_since(committed);
        assert!(late < Duration::from_millis(8), "{late:?} after the commit");
        let rows: i64 = second
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
    }

    /// Run `open` on six threads released together (each given its number), and fail
    /// round `round` with the first error one of them returns.
    fn six_at_once<E: std::fmt::Display + Send>(
        round: usize,
        open: impl Fn(usize) -> std::result::Result<(), E> + Sync,
    ) {
        let start = std::sync::Barrier::new(6);
        std::thread::scope(|s| {
            let opened: Vec<_> = (0..6)
                .map(|i| {
                    let (start, open) = (&start, &open);
                    s.spawn(move || {
                        start.wait();
                        open(i)
                    })
                })
                .collect();
            for o in opened {
                if let Err(e) = o.join().unwrap() {
                    panic!("round {round}: {e}");
                }
            }
        });
    }

    /// Processes that open a store that does not exist yet, all at once, all get it: the
    /// switch to WAL reads the new file's header before it writes it, and SQLite answers
    /// such an upgrade with "database is locked" at once, without the busy handler, while
    /// another connection holds the file. A pull in CI failed so (three threads pulling
    /// into a new store).
    #[test]
    fn a_new_store_opened_by_many_at_once_opens_for_all() {
        for round in 0..40 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("wharf.db");
            six_at_once(round, |_| {
                let conn = open(&path)?;
                conn.execute(
                    "INSERT INTO lease_leases (id, created_at, expires_at) \
                     VALUES (hex(randomblob(8)), 0, 0)",
                    [],
                )?;
                Ok::<_, crate::Error>(())
            });
            let (conn, _) = connect(&path).unwrap();
            let mode: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "wal");
            let rows: i64 = conn
                .query_row("SELECT count(*) FROM lease_leases", [], |r| r.get(0))
                .unwrap();
            assert_eq!(rows, 6, "round {round}");
        }
    }

    /// Commands that open the store at once on a nearly full disk all get it. Each leaves
    /// WAL mode (or finds it left) on a connection in exclusive locking mode: they failed
    /// with "database is locked" at once, or, waiting in the busy handler with their locks
    /// held, after 30 s.
    #[test]
    fn a_store_opened_by_many_at_once_on_a_full_disk_opens_for_all() {
        for round in 0..40 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("wharf.db");
            let (conn, _) = connect(&path).unwrap();
            conn.execute_batch("CREATE TABLE t (x)").unwrap();
            drop(conn);
            let began = std::time::Instant::now();
            six_at_once(round, |i| {
                let conn = low_space(&path)?;
                conn.execute("INSERT INTO t VALUES (?1)", [i])?;
                Ok::<_, rusqlite::Error>(())
            });
            let took = began.elapsed();
            assert!(took < Duration::from_secs(2), "round {round}: {took:?}");
            let conn = low_space(&path).unwrap();
            let rows: i64 = conn
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
            assert_eq!(rows, 6, "round {round}");
            let mode: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "memory", "round {round}");
        }
    }

    /// The last connection's close leaves the WAL and its index in place, the WAL emptied
    /// and its writes in the database: the next command makes no file and finds them.
    #[test]
    fn the_wal_files_outlive_the_last_connection_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let wal = dir.path().join("store.db-wal");
        let shm = dir.path().join("store.db-shm");
        let (conn, mode) = connect(&path).unwrap();
        assert_eq!(mode, StoreMode::Normal);
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1)")
            .unwrap();
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "no write in the WAL"
        );
        let inodes = (ino(&wal), ino(&shm));
        drop(conn);
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "WAL not emptied");
        assert!(shm.exists(), "the WAL index was deleted");
        let (again, _) = connect(&path).unwrap();
        let rows: i64 = again
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        again.execute("INSERT INTO t VALUES (2)", []).unwrap();
        drop(again);
        assert_eq!((ino(&wal), ino(&shm)), inodes, "the files were made anew");
    }

    /// A store's tables are made once per schema: the next opens find the record and run
    /// none of the statements, and a store whose record names another schema (an older or
    /// newer Wharf's) gets them again.
    #[test]
    fn the_schema_is_brought_up_to_date_once_per_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wharf.db");
        let has_index = |c: &Connection| -> bool {
            c.query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'image_names_by_image'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
                == 1
        };
        let conn = open(&path).unwrap();
        assert!(schema_current(&conn, "image", IMAGE_SCHEMA));
        assert!(has_index(&conn));
        // Dropped behind the record's back: an open that trusts the record leaves it so.
        conn.execute_batch("DROP INDEX image_names_by_image")
            .unwrap();
        drop(conn);
        let conn = open(&path).unwrap();
        assert!(!has_index(&conn), "the schema's statements ran again");
        conn.execute(
            "UPDATE wharf_schema SET digest = 1 WHERE part = 'image'",
            [],
        )
        .unwrap();
        drop(conn);
        let conn = open(&path).unwrap();
        assert!(
            has_index(&conn),
            "another schema's record did not bring the statements"
        );
        assert!(schema_current(&conn, "image", IMAGE_SCHEMA));
    }

    /// A store made before the record existed gets its migrations: here the snapshots'
    /// `size` column.
    #[test]
    fn a_store_without_the_record_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wharf.db");
        let (old, _) = connect(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE snapshot_snapshots (id INTEGER PRIMARY KEY AUTOINCREMENT, \
             key TEXT NOT NULL UNIQUE, parent TEXT NOT NULL, kind TEXT NOT NULL, \
             created_at INTEGER NOT NULL)",
        )
        .unwrap();
        drop(old);
        let conn = open(&path).unwrap();
        let sized: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('snapshot_snapshots') WHERE name = 'size'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(sized, 1);
        assert!(schema_current(&conn, "image", IMAGE_SCHEMA));
    }

    #[test]
    fn the_digest_tells_schemas_apart() {
        assert_eq!(schema_digest(&["a", "b"]), schema_digest(&["a", "b"]));
        assert_ne!(schema_digest(&["a", "b"]), schema_digest(&["a", "c"]));
        assert_ne!(schema_digest(&["ab", ""]), schema_digest(&["a", "b"]));
        assert_ne!(schema_digest(&["a"]), schema_digest(&["a", ""]));
    }

    fn ino(p: &std::path::Path) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
    }

    #[test]
    fn waiting_ends_after_its_budget() {
        assert!(!retry_while_busy(15_100));
        assert!(!retry_while_busy(i32::MAX));
    }
}
