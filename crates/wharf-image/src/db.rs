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
    size INTEGER NOT NULL,               -- manifest + config + compressed layers
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
    created_at INTEGER NOT NULL
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

/// Open (creating if needed) the metadata store and its image tables.
pub fn open(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
