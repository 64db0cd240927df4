//! Running engine calls from async handlers. The engine is synchronous and not shareable
//! between threads (its store connection), so each call runs on tokio's blocking pool with
//! an engine that thread opened for itself the first time (and keeps): calls run
//! concurrently, and the engine's per-pod locks order the ones that touch the same pod,
//! as they order the CLI's processes.

use std::cell::RefCell;
use std::sync::{Arc, RwLock};

use tonic::Status;
use wharf_engine::{Engine, EngineOptions};

thread_local! {
    /// This thread's engine, with the generation of the options it was opened with.
    static ENGINE: RefCell<Option<(u64, Engine)>> = const { RefCell::new(None) };
}

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
}

impl Engines {
    /// Engines opened with `opts`.
    pub fn new(opts: EngineOptions) -> Engines {
        Engines {
            opts: Arc::new(RwLock::new((0, Arc::new(opts)))),
            listings: Default::default(),
            rates: Default::default(),
        }
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
        tokio::task::spawn_blocking(move || {
            ENGINE.with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.as_ref().is_none_or(|(g, _)| *g != generation) {
                    let engine = Engine::open((*opts).clone()).map_err(opened)?;
                    *slot = Some((generation, engine));
                }
                let (_, engine) = slot.as_ref().expect("opened above");
                let r = f(engine);
                // What a call locked is the call's: the next one starts free.
                engine.release_pod_locks();
                // Busy until the call ends, not from when it came: the idle trim waits
                // for this thread's pool to let it go (see daemon.rs).
                crate::idle::touch();
                r
            })
        })
        .await
        .map_err(lost)?
    }
}
