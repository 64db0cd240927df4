//! Wharf's OCI runtime: turns an OCI bundle (config.json + rootfs) into an isolated process.
//!
//! The library is what both front ends use: the runc-compatible `wharf runtime` command line,
//! for engines that drive a runtime binary, and Wharf's per-pod shim, which calls it in
//! process. Its create path clones the container's init straight from the calling process
//! (no re-exec of a runtime binary), so the caller must be single-threaded when it calls
//! [`Runtime::create`] or [`Runtime::exec`].

pub mod caps;
pub mod cgroups;
pub mod console;
mod container;
mod copy;
pub mod devices;
pub mod dmz;
mod error;
mod exec;
pub mod features;
pub mod hooks;
mod init;
mod intermediate;
pub mod log;
pub mod lsm;
pub mod mount_sources;
mod mount_template;
pub mod mounts;
pub mod namespaces;
mod process_attrs;
mod procfs;
mod rootfs;
pub mod safe_path;
pub mod seccomp;
pub mod spec;
pub mod state;
pub mod sub_path;
mod sync;
pub mod sys;

pub use container::{CreateOptions, Created, DEFAULT_ROOT, Runtime, wait_pidfd};
pub use error::{Context, Error, Result};
pub use exec::ExecOptions;
pub use state::{ContainerState, OCI_VERSION, Status};
