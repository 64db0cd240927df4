//! The systemd cgroup driver's side that talks to systemd.
//!
//! On a host whose init is systemd, the cgroup tree belongs to systemd: a process placed in a
//! directory systemd did not make can be moved or have its controllers taken away at the
//! next reload. runc, crun, containerd and CRI-O therefore ask systemd for a *transient
//! unit* (`StartTransientUnit` over D-Bus) and work inside it. Wharf does the same per pod:
//! one scope, `wharf-pod-<id>.scope`, in the slice the pod's cgroup parent names (Wharf's
//! `wharf.slice`, or kubelet's `kubepods-burstable-pod<uid>.slice`), holding the pod's shim,
//! with `Delegate=yes` so that the pod's containers are sub-cgroups Wharf manages below it.
//! The pod's limits are the scope's properties; a container's own limits are written to the
//! files of its delegated sub-cgroup, which systemd never touches.
//!
//! The engine makes the units; the shim and the runtime never speak D-Bus.

mod manager;
mod names;
mod properties;

pub use manager::Manager;
pub use names::{check_slice, pod_scope, slice_path};
pub use properties::{Property, Value, split_resources};

/// What went wrong talking to systemd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// systemd is not the init system here, or its manager cannot be reached.
    #[error("the systemd cgroup driver needs systemd as the init system: {0}")]
    NoSystemd(String),
    /// A name or value systemd would refuse.
    #[error("{0}")]
    Invalid(String),
    /// systemd refused or failed a request on a unit.
    #[error("systemd unit {unit}: {message}")]
    Unit {
        /// The unit.
        unit: String,
        /// systemd's answer, or what did not happen.
        message: String,
    },
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Whether this host was booted with systemd (sd_booted(3): the directory systemd makes at
/// start). The systemd driver is the default only there.
pub fn booted() -> bool {
    std::path::Path::new("/run/systemd/system").is_dir()
}

/// [`booted`], or the error that says the driver cannot work here and names PID 1.
pub fn require_booted() -> Result<()> {
    if booted() {
        return Ok(());
    }
    let init = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    Err(Error::NoSystemd(format!(
        "this host was not booted with systemd (PID 1 is {:?}, and /run/systemd/system does \
         not exist); use the cgroupfs driver",
        init.trim()
    )))
}
