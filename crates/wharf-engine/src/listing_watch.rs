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
//! The last two are seen as they happen, through an inotify descriptor on the shims'
//! registry ([`wharf_shim::liveness_watch`]): a check is one pragma and one read that finds
//! nothing. For a moment after an event the kernel may not have dropped the dead shim's lock
//! yet, so a listing made then also tests the lock of every pod whose shim lived, one
//! `F_OFD_GETLK` each, until the registry has been quiet for [`SETTLED`]. Where inotify
//! cannot be had (the user's limit reached), every check reads the marks directories and
//! tests every lock, as it did before the watch.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use wharf_shim::liveness_watch::Watch;

use crate::db::Db;
use crate::error::Result;
use crate::paths::Paths;

/// How long after the registry's last event the locks are tested as well: the kernel
/// drops a dead shim's lock right after it queues the close event, so this only covers a
/// dying shim that the scheduler stops between the two.
pub const SETTLED: Duration = Duration::from_secs(2);

/// A store connection of its own and the shims' registry.
pub struct ListingWatch {
    db: Db,
    db_path: PathBuf,
    registry: PathBuf,
    /// `None` where inotify could not be had.
    shims: Option<Watch>,
}

/// Where a listing began: what a stamp compares against.
pub struct ListingStart {
    version: i64,
    /// The registry's count before the listing (`None`: no watch, or it broke).
    generation: Option<u64>,
    /// Whether the registry had been quiet for [`SETTLED`] by then.
    settled: bool,
}

/// What a listing depended on, taken around it.
pub struct ListingStamp {
    start: ListingStart,
    /// Whether change marks were there once the listing was made: it may not show what
    /// they say, so it is never reused.
    marked: bool,
    live: Option<wharf_shim::liveness::Live>,
    /// The pods whose shim held its lock once the listing was made (gathered only for a
    /// stamp that tests them).
    held: Vec<String>,
    /// Whether each check still tests the locks of `held` (until the registry settles).
    testing: Cell<bool>,
}

impl ListingWatch {
    /// A watch of the engine at `paths`.
    pub fn open(paths: &Paths) -> Result<ListingWatch> {
        let registry = paths.shims_alive();
        Ok(ListingWatch {
            db: Db::open(&paths.db())?,
            db_path: paths.db(),
            shims: Watch::open(&registry).ok(),
            registry,
        })
    }

    /// Whether this watches the store at `db`, and can still tell what changes (else open a
    /// new one).
    pub fn watches(&self, db: &Path) -> bool {
        self.db_path == db && self.shims.as_ref().is_none_or(|w| w.generation().is_some())
    }

    /// The store this watches.
    pub fn store(&self) -> &Path {
        &self.db_path
    }

    /// Where a listing begins: the store's version and the registry's count, read before
    /// it. A commit or a shim's event while the listing runs (its own refreshes included)
    /// makes the stamp stale, so that the next call lists again and sees things settled.
    pub fn begin(&self) -> Result<ListingStart> {
        let generation = self.shims.as_ref().and_then(Watch::generation);
        let settled = self
            .shims
            .as_ref()
            .is_some_and(|w| w.quiet_for().is_none_or(|q| q >= SETTLED));
        Ok(ListingStart {
            version: self.db.data_version()?,
            generation,
            settled,
        })
    }

    /// The stamp of a listing begun at `start` that showed the pods `pods`.
    pub fn stamp<'a>(
        &self,
        start: ListingStart,
        pods: impl IntoIterator<Item = &'a str>,
    ) -> ListingStamp {
        let live = wharf_shim::liveness::live(&self.registry);
        let watched = start.generation.is_some();
        let testing = !watched || !start.settled;
        // The locks are tested only until the registry settles: a stamp made once it has
        // needs none of them (a lock test per pod).
        let held = if testing {
            let mut held: Vec<String> = pods
                .into_iter()
                .filter(|p| live.as_ref().is_some_and(|l| l.holds(p)))
                .map(String::from)
                .collect();
            held.sort();
            held.dedup();
            held
        } else {
            Vec::new()
        };
        ListingStamp {
            // Without the watch, each check reads the marks directories anyway.
            marked: watched && wharf_shim::liveness::any_changes(&self.registry),
            testing: Cell::new(testing),
            start,
            live,
            held,
        }
    }

    /// Whether a listing made now would show what the one of `stamp` showed.
    pub fn unchanged(&self, stamp: &ListingStamp) -> bool {
        let Some(live) = &stamp.live else {
            return false;
        };
        if stamp.marked || self.db.data_version().ok() != Some(stamp.start.version) {
            return false;
        }
        let held = || stamp.held.iter().all(|p| live.holds(p));
        let (Some(watch), Some(generation)) = (&self.shims, stamp.start.generation) else {
            return !wharf_shim::liveness::any_changes(&self.registry) && held();
        };
        if watch.generation() != Some(generation) {
            return false;
        }
        if stamp.testing.get() {
            if !held() {
                return false;
            }
            // Every lock was still held once the registry had been quiet long enough for
            // a dead shim's to be gone: from now on its events say it all.
            if watch.quiet_for().is_none_or(|q| q >= SETTLED) {
                stamp.testing.set(false);
            }
        }
        true
    }
}
