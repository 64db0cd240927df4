//! `wharf daemon`: the Kubernetes Container Runtime Interface v1 over gRPC on a unix socket,
//! and the Docker Engine API on another ([`docker`]), served from the engine's API, on the
//! same state the CLI works on (all may run at once).
//!
//! The async runtime lives here only: the daemon runs tokio; every engine call runs on a
//! blocking thread with an engine of that thread's own ([`engines`]), since the engine is
//! synchronous. The CLI, the shim and the runtime stay synchronous and quick to start.

#![deny(unsafe_code)]
// docker's documents are large json! literals.
#![recursion_limit = "256"]

pub mod config;
pub mod conn_gate;
mod container_events;
mod containers;
mod cpu_rate;
pub mod daemon;
pub mod docker;
mod engines;
mod exec_sync;
mod fault_around;
mod give_back;
pub mod grpc_probe;
mod idle;
mod images;
mod listings;
pub mod log;
mod meta;
mod metrics;
mod pod_metrics;
mod runtime;
mod sandboxes;
pub mod sd_notify;
mod spdy;
mod spdy_streams;
mod stats;
mod status;
mod stream_process;
mod streaming;

/// The CRI v1 messages and services, generated from the vendored proto.
#[allow(clippy::all, missing_docs)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

/// The CRI API version served.
pub const CRI_VERSION: &str = "v1";
/// The runtime's name, as `crictl version` shows it.
pub const RUNTIME_NAME: &str = "wharf";
