//! Wharf's per-pod shim: the supervisor process that owns a pod's containers, and the
//! library the engine and the CLI use to start it and talk to it.
//!
//! One shim runs per pod (a standalone container is a pod of one). It is started by
//! [`client::spawn`] as `wharf shim ...` ([`daemon::main`]), detaches from its caller, and
//! becomes a child subreaper. It creates, starts, signals and deletes the pod's containers
//! by calling [`wharf_runtime`] in process, runs exec processes, keeps their stdio (pipes
//! or a pty for attached clients, CRI log files otherwise), watches for OOM kills, applies
//! restart policies with back-off, runs init containers before app containers, and can
//! start a minimal init for pods that share a pid namespace. Every exit is written to disk
//! ([`records`]) before anyone is told, so an engine that was down, or that finds the shim
//! dead ([`reap::reap_dead_shim`]), still learns what happened.
//!
//! The shim is single-threaded (the runtime library clones container processes from the
//! calling process) and runs no async runtime: one `poll(2)` loop.
//!
//! The protocol is in [`protocol`] and [`frame`].

pub mod client;
pub mod daemon;
mod error;
pub mod frame;
pub mod liveness;
pub mod liveness_watch;
pub mod logs;
pub mod protocol;
pub mod reap;
pub mod records;

pub use client::{
    Attach, AttachInput, Events, EventsCloser, Output, SHIM_BINARY, ShimClient, SpawnOptions,
    shim_binary, spawn,
};
pub use error::{Result, ShimError};
pub use protocol::{
    Backoff, ContainerInfo, ContainerSpec, ErrorKind, ExecInfo, ExitRecord, PauseSpec, PodPhase,
    PodPlan, RestartPolicy, ShimState, Status, StdioSpec,
};
pub use reap::{Reaped, reap_dead_shim};
