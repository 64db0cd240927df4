//! Mark and sweep over the content store and the snapshots, under the exclusive GC lock.
//!
//! Roots: every image (its manifest, config and layer blobs, the index its name resolved
//! through, and its top snapshot), every container and view snapshot, and everything an
//! unexpired lease holds. Snapshots keep their parents. Everything else goes, as do
//! interrupted downloads (`ingest/`) and unpacks (`extract-*`) that no live process holds
//! (their flock is free).

use std::collections::{HashMap, HashSet};

use crate::db;
use crate::digest::Digest;
use crate::error::Result;
use crate::manifest::{self, Parsed};
use crate::store::{GcStats, ImageStore};

pub(crate) fn collect(s: &ImageStore) -> Result<GcStats> {
    let mut stats = GcStats::default();
    let mut blobs: HashSet<String> = HashSet::new();
    let mut snaps: HashSet<String> = HashSet::new();
    for (id, md, mmt, top) in s.image_rows()? {
        blobs.insert(id);
        if let Ok(d) = md.parse::<Digest>()
            && let Ok(bytes) = s.content.read(&d)
            && let Ok(Parsed::Manifest(m)) = manifest::parse(&bytes, &mmt)
        {
            blobs.insert(m.config.digest.clone());
            blobs.extend(m.layers.iter().map(|l| l.digest.clone()));
        }
        blobs.insert(md);
        if !top.is_empty() {
            snaps.insert(top);
        }
    }
    let conn = s.conn()?;
    conn.execute(
        "DELETE FROM lease_leases WHERE expires_at < ?1",
        [db::now()],
    )?;
    {
        let mut st = conn.prepare("SELECT target_digest FROM image_names")?;
        for d in st.query_map([], |r| r.get::<_, String>(0))? {
            blobs.insert(d?);
        }
        let mut st = conn.prepare("SELECT kind, key FROM lease_resources")?;
        for row in st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (kind, key) = row?;
            if kind == "blob" {
                blobs.insert(key);
            } else {
                snaps.insert(key);
            }
        }
    }
    let rows = s.snapshots.list(&conn)?;
    let parents: HashMap<String, String> = rows
        .iter()
        .map(|r| (r.key.clone(), r.parent.clone()))
        .collect();
    for r in &rows {
        if r.kind != "committed" {
            snaps.insert(r.key.clone());
        }
    }
    // Keep the whole chain below every kept snapshot.
    let mut todo: Vec<String> = snaps.iter().cloned().collect();
    while let Some(k) = todo.pop() {
        if let Some(p) = parents.get(&k)
            && !p.is_empty()
            && snaps.insert(p.clone())
        {
            todo.push(p.clone());
        }
    }
    for r in &rows {
        if !snaps.contains(&r.key) {
            s.snapshots.remove(&conn, &r.key)?;
            stats.snapshots += 1;
        }
    }
    stats.snapshots += s.snapshots.clean_orphans(&conn)?;
    drop(conn);
    for d in s.content.list()? {
        if !blobs.contains(d.as_str()) {
            stats.blob_bytes += s.content.size(&d).unwrap_or(0);
            s.content.delete(&d)?;
            stats.blobs += 1;
        }
    }
    stats.partials += s.content.clean_ingest()?;
    Ok(stats)
}
