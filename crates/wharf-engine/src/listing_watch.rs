//! Whether a whole listing would come out as it did, told cheaply: for a daemon that keeps
//! its listings in memory between calls (the CRI's ListContainers and ListPodSandbox, which
//! kubelet's PLEG and metrics call every second).
//!
//! A listing of every pod and container is a function of the store and of the records of
//! the pods whose shim is dead or marked a change: a pod whose shim lives and marked
//! nothing is read from the store alone (see `query.rs`). So a listing comes out the same
//! as long as
//! - nobody committed to the store (SQLite's data version, seen through a connection of the
//!   watch's own that never writes, so that every commit is someone else's),
//! - no shim marked a change, and
//! - every shim that lived when the listing was made still holds its lock.
//!
//! The three checks cost one pragma, one directory read and one `F_OFD_GETLK` per pod
//! whose shim lived, where a listing reads and parses every row.

use std::path::{Path, PathBuf};

use crate::db::Db;
use crate::error::Result;
use crate::paths::Paths;

/// A store connection of its own and the shims' registry.
pub struct ListingWatch {
    db: Db,
    db_path: PathBuf,
    registry: PathBuf,
}

/// What a listing depended on, taken around it.
pub struct ListingStamp {
    version: i64,
    live: Option<wharf_shim::liveness::Live>,
    /// The pods whose shim held its lock once the listing was made.
    held: Vec<String>,
}

impl ListingWatch {
    /// A watch of the engine at `paths`.
    pub fn open(paths: &Paths) -> Result<ListingWatch> {
        Ok(ListingWatch {
            db: Db::open(&paths.db())?,
            db_path: paths.db(),
            registry: paths.shims_alive(),
        })
    }

    /// Whether this watches the store at `db`.
    pub fn watches(&self, db: &Path) -> bool {
        self.db_path == db
    }

    /// The store's version, read before a listing: a commit made while the listing runs
    /// (its own refreshes included) makes the stamp stale, so that the next call lists
    /// again and sees the store settled.
    pub fn begin(&self) -> Result<i64> {
        self.db.data_version()
    }

    /// The stamp of a listing begun at `version` that showed the pods `pods`.
    pub fn stamp<'a>(&self, version: i64, pods: impl IntoIterator<Item = &'a str>) -> ListingStamp {
        let live = wharf_shim::liveness::live(&self.registry);
        let mut held: Vec<String> = pods
            .into_iter()
            .filter(|p| live.as_ref().is_some_and(|l| l.holds(p)))
            .map(String::from)
            .collect();
        held.sort();
        held.dedup();
        ListingStamp {
            version,
            live,
            held,
        }
    }

    /// Whether a listing made now would show what the one of `stamp` showed.
    pub fn unchanged(&self, stamp: &ListingStamp) -> bool {
        let Some(live) = &stamp.live else {
            return false;
        };
        self.db.data_version().is_ok_and(|v| v == stamp.version)
            && !wharf_shim::liveness::any_changes(&self.registry)
            && stamp.held.iter().all(|p| live.holds(p))
    }
}
