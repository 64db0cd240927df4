//! Running engine calls from async handlers. The engine is synchronous and not shareable
//! between threads (its store connection), so each call runs on tokio's blocking pool with
//! an engine that thread opened for itself the first time (and keeps): calls run
//! concurrently, and the engine's per-pod locks order the ones that touch the same pod,
//! as they order the CLI's processes.

use std::cell::RefCell;
use std::sync::Arc;

use tonic::Status;
use wharf_engine::{Engine, EngineOptions};

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Where engine calls run.
#[derive(Clone)]
pub struct Engines {
    opts: Arc<EngineOptions>,
}

impl Engines {
    /// Engines opened with `opts`.
    pub fn new(opts: EngineOptions) -> Engines {
        Engines {
            opts: Arc::new(opts),
        }
    }

    /// The options engines are opened with.
    pub fn options(&self) -> EngineOptions {
        (*self.opts).clone()
    }

    /// Run `f` with this thread's engine on the blocking pool.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let opts = self.opts.clone();
        tokio::task::spawn_blocking(move || {
            ENGINE.with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.is_none() {
                    let engine =
                        Engine::open((*opts).clone()).map_err(crate::status::from_engine)?;
                    *slot = Some(engine);
                }
                let engine = slot.as_ref().expect("opened above");
                let r = f(engine);
                // What a call locked is the call's: the next one starts free.
                engine.release_pod_locks();
                r
            })
        })
        .await
        .map_err(|e| Status::internal(format!("engine call failed: {e}")))?
    }
}
