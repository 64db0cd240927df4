//! Wharf's engine: pods and containers, their metadata store and events, put together from
//! the image store, the network, the per-pod shim and the OCI runtime.
//!
//! The engine is a library: the `wharf` CLI opens it on every command (daemonless) and the
//! CRI daemon will too. All its state is on disk (the SQLite store plus the shims' exit
//! records), so concurrent CLI processes and crashes of any of them are fine; the shims keep
//! containers running whatever happens to the engine.

#![deny(unsafe_code)]

pub mod build;
pub mod cgroup_driver;
pub mod controllers;
pub mod db;
pub mod defaults;
mod engine;
pub mod error;
mod events;
mod exec;
pub mod files;
pub mod hooks;
pub mod host;
pub mod image_volumes;
pub mod images;
pub mod ledger;
pub mod listing_watch;
pub mod model;
pub mod named_volumes;
mod network_connect;
mod network_records;
pub mod oom;
mod operations;
pub mod paths;
pub mod pod_ip;
mod pod_lock;
pub mod pod_volumes;
pub mod probes;
mod query;
pub mod reconcile;
pub mod registry;
pub mod restore;
pub mod rm_guard;
// Forks a child that unshares the pod's namespaces (a multi-threaded process cannot).
#[allow(unsafe_code)]
pub mod sandbox;
mod seccomp_default;
pub mod session;
pub mod specgen;
pub mod stats;
mod sub_paths;
mod supervisor;
pub mod system;
pub mod tree;
pub mod user_networks;
// Clones a child into the pod's new user namespace (a process with threads cannot enter one).
#[allow(unsafe_code)]
pub mod userns;
pub mod validate;

pub use engine::{Engine, EngineOptions};
pub use error::{Error, Result};
pub use events::{EventFeed, EventOptions};
pub use exec::ExecRequest;
pub use operations::PodChoice;
pub use pod_lock::PodLock;
pub use query::{
    ContainerFilter, ContainerStatus, ContainerUsage, ContainerView, LogEntry, LogOptions,
    PodFilter, PodView, ProcessInfo, StoredState,
};
pub use session::{Session, SessionEnd, Signaller};
pub use supervisor::{StdioMode, restart_backoff};
