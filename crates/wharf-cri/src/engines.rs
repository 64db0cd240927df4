//! Running engine calls from async handlers. The engine is synchronous and not shareable
//! between threads (its store connections), so each call runs on tokio's blocking pool
//! with an engine of its own for the call's length: the one that came back last, or a new
//! one when every engine is in a call. Calls run concurrently, and the engine's per-pod
//! locks order the ones that touch the same pod, as they order the CLI's processes.
//!
//! The engines are pooled, not kept one per thread: the blocking pool hands consecutive
//! calls to whichever of its idle threads wakes first, so engines kept per thread were as
//! many as the threads a burst had used, and each maps the store of its own (SQLite's
//! `mmap_size`), counted again in the daemon's resident size for every mapping. Measured,
//! 100 pods, right after a round of every listing and stats call one at a time: five
//! mappings of the store, 1.9 MB resident.

use std::sync::{Arc, Mutex, RwLock};

use tonic::Status;
use wharf_engine::{Engine, EngineOptions};

/// Where engine calls run.
#[derive(Clone)]
pub struct Engines {
    /// The options engines are opened with, and their generation (a reload makes a new
    /// one, and each thread opens its engine again at its next call).
    opts: Arc<RwLock<(u64, Arc<EngineOptions>)>>,
    /// The listings kept between calls (see [`crate::listings`]).
    listings: Arc<crate::listings::Listings>,
    /// The last CPU samples, for usage rates (see [`crate::cpu_rate`]).
    rates: Arc<crate::cpu_rate::CpuRates>,
    /// The engines not in a call, each with the generation of the options it was opened
    /// with; the last one back on top (its pages are the ones still mapped).
    idle: Arc<Mutex<Vec<(u64, Engine)>>>,
}

impl Engines {
    /// Engines opened with `opts`.
    pub fn new(opts: EngineOptions) -> Engines {
        Engines {
            opts: Arc::new(RwLock::new((0, Arc::new(opts)))),
            listings: Default::default(),
            rates: Default::default(),
            idle: Default::default(),
        }
    }

    fn idle_engines(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Engine)>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Close the engines not in a call (their store connections and caches) but the last
    /// `keep` back, once the daemon has been quiet: a burst of concurrent calls leaves as
    /// many engines as it ran at once, and the calls after it need one.
    pub fn close_idle(&self, keep: usize) {
        let closing: Vec<_> = {
            let mut idle = self.idle_engines();
            let old = idle.len().saturating_sub(keep);
            idle.drain(..old).collect()
        };
        drop(closing);
    }

    /// How many engines wait for a call.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle_engines().len()
    }

    /// An engine for a call with options of `generation`: the last one back if it is
    /// current, else a new one. Engines of an older generation are closed (outside the lock).
    fn take(&self, generation: u64) -> Option<Engine> {
        let stale: Vec<(u64, Engine)>;
        let found = {
            let mut idle = self.idle_engines();
            let found = idle.pop_if(|(g, _)| *g == generation).map(|(_, e)| e);
            stale = if found.is_none() {
                std::mem::take(&mut *idle)
            } else {
                Vec::new()
            };
            found
        };
        drop(stale);
        found
    }

    fn current(&self) -> (u64, Arc<EngineOptions>) {
        let g = self.opts.read().unwrap_or_else(|e| e.into_inner());
        (g.0, g.1.clone())
    }

    /// The listings kept between calls.
    pub fn listings(&self) -> Arc<crate::listings::Listings> {
        self.listings.clone()
    }

    /// The CPU samples kept between stats calls.
    pub fn rates(&self) -> Arc<crate::cpu_rate::CpuRates> {
        self.rates.clone()
    }

    /// The options engines are opened with.
    pub fn options(&self) -> EngineOptions {
        (*self.current().1).clone()
    }

    /// Open engines with `opts` from now on (a configuration reload).
    pub fn replace(&self, opts: EngineOptions) {
        let mut g = self.opts.write().unwrap_or_else(|e| e.into_inner());
        *g = (g.0 + 1, Arc::new(opts));
        drop(g);
        self.listings.forget();
    }

    /// Run `f` with this thread's engine on the blocking pool.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        self.with(f, crate::status::from_engine, |e| {
            Status::internal(format!("engine call failed: {e}"))
        })
        .await
    }

    /// Run `f` with this thread's engine on the blocking pool, for a front end with an
    /// error type of its own: `opened` turns a failure to open the engine into it, and
    /// `lost` a call that never returned (a panic).
    pub async fn with<T: Send + 'static, E: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<T, E> + Send + 'static,
        opened: impl FnOnce(wharf_engine::Error) -> E + Send + 'static,
        lost: impl FnOnce(tokio::task::JoinError) -> E,
    ) -> Result<T, E> {
        let (generation, opts) = self.current();
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            // Busy until the call ends, not from when it came: the idle trim closes the
            // idle engines a while after the last call, never during one (see daemon.rs).
            let _running = crate::idle::running();
            let engine = match pool.take(generation) {
                Some(engine) => engine,
                None => Engine::open((*opts).clone()).map_err(opened)?,
            };
            let r = f(&engine);
            // What a call locked is the call's: the next one starts free.
            engine.release_pod_locks();
            // Kept for the next call unless a reload came meanwhile.
            if pool.current().0 == generation {
                pool.idle_engines().push((generation, engine));
            }
            r
        })
        .await
        .map_err(lost)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engines(dir: &std::path::Path) -> Engines {
        Engines::new(EngineOptions {
            root: dir.join("root"),
            run: dir.join("run"),
            ..Default::default()
        })
    }

    /// Calls one after the other share one engine, so the store is opened (and mapped)
    /// once; calls at the same time each get one; the idle trim closes all but one, then all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn consecutive_calls_share_one_engine_and_concurrent_calls_get_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let e = engines(dir.path());
        for _ in 0..6 {
            e.call(|_| Ok(())).await.unwrap();
        }
        assert_eq!(e.idle_count(), 1, "six calls one after the other");

        // Two calls that each wait for the other to have started.
        let both = Arc::new(std::sync::Barrier::new(2));
        let (a, b) = (both.clone(), both);
        let (ra, rb) = tokio::join!(
            e.call(move |_| {
                a.wait();
                Ok(())
            }),
            e.call(move |_| {
                b.wait();
                Ok(())
            })
        );
        ra.unwrap();
        rb.unwrap();
        assert_eq!(e.idle_count(), 2, "two calls at once");

        e.close_idle(1);
        assert_eq!(e.idle_count(), 1, "the burst over, one kept");
        e.close_idle(0);
        assert_eq!(e.idle_count(), 0);
        e.call(|_| Ok(())).await.unwrap();
        assert_eq!(e.idle_count(), 1, "a call after the trim opens one again");
    }

    /// After a configuration reload no call gets an engine opened with the old options.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_retires_the_engines_opened_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = engines(dir.path());
        e.call(|_| Ok(())).await.unwrap();
        let mut opts = e.options();
        opts.cgroup_parent = "/wharf-reloaded".into();
        e.replace(opts);
        let parent = e
            .call(|engine| Ok(engine.options().cgroup_parent.clone()))
            .await
            .unwrap();
        assert_eq!(parent, "/wharf-reloaded");
        assert_eq!(e.idle_count(), 1, "the old engine closed, the new one kept");
    }
}
