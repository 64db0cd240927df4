//! The CRI's pods and containers kept in memory between listings. kubelet's PLEG calls
//! ListPodSandbox and ListContainers every second and its metrics list them again, while
//! on a settled node nothing has changed since the last call. So the daemon keeps each
//! whole listing (every CRI pod or container, in every state) with the stamp of what it
//! depended on ([`wharf_engine::listing_watch`]: the store's version, the shims' change
//! marks, the liveness of the shims that lived), and answers from it until the stamp goes
//! stale: a commit to the store by anyone (this daemon's own calls, a CLI, a shim's exit
//! recorded), a shim marking a change (a container exited, restarted, was OOM-killed), or a
//! shim dying. Then the next call lists again, as a CLI would. Filters apply to the kept
//! listing, so every filter of every call shares one.
//!
//! What changes a listing is pushed by the shims (their marks and locks) and by whoever
//! commits, so nothing here polls and nothing can miss a change: the checks are the ones
//! the engine's own listing makes to decide that the store is current. On a settled node a
//! check is a pragma and an inotify read that finds nothing, so ListPodSandbox and
//! ListContainers answer a current listing on the async side ([`Listings::kept_pods`]),
//! and go to the blocking pool, with an engine, only to list again.

use std::sync::{Arc, Mutex};

use tonic::Status;
use wharf_engine::Engine;
use wharf_engine::db::{ContainerRow, PodRow};
use wharf_engine::listing_watch::{ListingStamp, ListingWatch};

use crate::api::{Container, PodSandbox};
use crate::log::{Level, log};
use crate::status::from_engine;

/// A pod or container of a kept listing: its row (what stats read) and what the listing
/// calls answer (made once, not per call).
pub struct Listed<R, C> {
    pub row: R,
    pub cri: C,
}

/// One kept listing and its stamp.
struct Kept<T> {
    stamp: ListingStamp,
    rows: Arc<Vec<T>>,
}

#[derive(Default)]
struct State {
    watch: Option<ListingWatch>,
    kept: Slots,
}

#[derive(Default)]
struct Slots {
    containers: Option<Kept<Listed<ContainerRow, Container>>>,
    pods: Option<Kept<Listed<PodRow, PodSandbox>>>,
}

/// The kept listings of one daemon.
#[derive(Default)]
pub struct Listings {
    state: Mutex<State>,
}

impl Listings {
    /// Every CRI container, in every state.
    pub fn containers(
        &self,
        e: &Engine,
    ) -> Result<Arc<Vec<Listed<ContainerRow, Container>>>, Status> {
        self.served(
            e,
            |k| &mut k.containers,
            |e| {
                let all = wharf_engine::ContainerFilter {
                    all: true,
                    ..Default::default()
                };
                Ok(e.list_containers(&all)
                    .map_err(from_engine)?
                    .into_iter()
                    .map(|c| c.row)
                    .filter(|r| crate::meta::is_cri(&r.spec.labels))
                    .map(|row| Listed {
                        cri: crate::containers::container(&row),
                        row,
                    })
                    .collect())
            },
            |c| &c.row.pod_id,
        )
    }

    /// Every CRI pod, in every state.
    pub fn pods(&self, e: &Engine) -> Result<Arc<Vec<Listed<PodRow, PodSandbox>>>, Status> {
        self.served(
            e,
            |k| &mut k.pods,
            |e| {
                // As `wharf pod ls` does: pods whose shim is gone, or that an interrupted
                // operation left, are put right first (the store alone lists them ready).
                let (pods, report) = e
                    .list_pods_reconciled(&wharf_engine::PodFilter::default())
                    .map_err(from_engine)?;
                for line in &report.repaired {
                    log(Level::Info, "reconciled", &[("repair", line)]);
                }
                for line in &report.warnings {
                    log(Level::Warn, "reconcile", &[("warning", line)]);
                }
                Ok(pods
                    .into_iter()
                    .map(|p| p.row)
                    .filter(|p| crate::meta::is_cri(&p.spec.labels))
                    .map(|row| Listed {
                        cri: crate::sandboxes::sandbox(&row),
                        row,
                    })
                    .collect())
            },
            |p| &p.row.id,
        )
    }

    /// The kept listing of every CRI pod while it is current, found without an engine: a
    /// call answers from it on the spot, sparing the hop to the blocking pool. `None`
    /// (list through [`Listings::pods`]) where nothing is kept, it went stale, or another
    /// call holds the listings (never waited for here, on the async side).
    pub fn kept_pods(&self) -> Option<Arc<Vec<Listed<PodRow, PodSandbox>>>> {
        self.kept(|k| &mut k.pods)
    }

    /// The kept listing of every CRI container while it is current (see
    /// [`Listings::kept_pods`]).
    pub fn kept_containers(&self) -> Option<Arc<Vec<Listed<ContainerRow, Container>>>> {
        self.kept(|k| &mut k.containers)
    }

    fn kept<T>(&self, pick: fn(&mut Slots) -> &mut Option<Kept<T>>) -> Option<Arc<Vec<T>>> {
        let mut guard = self.state.try_lock().ok()?;
        let state = &mut *guard;
        let watch = state.watch.as_ref()?;
        pick(&mut state.kept)
            .as_ref()
            .filter(|k| watch.unchanged(&k.stamp))
            .map(|k| k.rows.clone())
    }

    /// Drop what is kept: the engine's options changed, and its store may be another.
    pub fn forget(&self) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = State::default();
    }

    /// The kept listing `pick` chooses if its stamp still holds, else a new one from `list`
    /// (made without the lock held: other calls answer from what is kept meanwhile).
    fn served<T>(
        &self,
        e: &Engine,
        pick: fn(&mut Slots) -> &mut Option<Kept<T>>,
        list: impl FnOnce(&Engine) -> Result<Vec<T>, Status>,
        pod_of: fn(&T) -> &str,
    ) -> Result<Arc<Vec<T>>, Status> {
        let db = e.paths().db();
        let start = {
            let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let state = &mut *guard;
            if !state.watch.as_ref().is_some_and(|w| w.watches(&db)) {
                state.kept = Slots::default();
                state.watch = Some(ListingWatch::open(e.paths()).map_err(from_engine)?);
            }
            let watch = state.watch.as_ref().expect("opened above");
            if let Some(k) = pick(&mut state.kept)
                .as_ref()
                .filter(|k| watch.unchanged(&k.stamp))
            {
                return Ok(k.rows.clone());
            }
            watch.begin().map_err(from_engine)?
        };
        let rows = Arc::new(list(e)?);
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        // Kept only under the watch of the store it was read from (a reload may have put
        // another in place meanwhile).
        if let Some(watch) = state.watch.as_ref().filter(|w| w.store() == db) {
            let stamp = watch.stamp(start, rows.iter().map(pod_of));
            *pick(&mut state.kept) = Some(Kept {
                stamp,
                rows: rows.clone(),
            });
        }
        Ok(rows)
    }
}
