//! The host as the engine drives it: its cgroups (version, and the driver the engine uses
//! on them) and whether AppArmor is enabled, which the front ends report (`wharf info`,
//! the Docker API's `/info`) or check requests against (the CRI's AppArmor profiles).
//! Front ends ask here rather than probe cgroups or security modules themselves: the
//! engine is what uses them.

/// The cgroup version of the host's hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// v1 controllers (hybrid hosts too, and hosts whose layout could not be read).
    V1,
    /// The unified hierarchy alone.
    V2,
}

impl CgroupVersion {
    /// "1" or "2", as docker reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "1",
            CgroupVersion::V2 => "2",
        }
    }
}

pub use crate::cgroup_driver::CgroupDriver;

/// The host's cgroups as the engine uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cgroups {
    /// The hierarchy's version.
    pub version: CgroupVersion,
    /// The driver the engine uses.
    pub driver: CgroupDriver,
}

/// The host's cgroups, read now (from this process's mount table), and the driver the
/// engine uses.
pub fn cgroups(driver: CgroupDriver) -> Cgroups {
    let v2 = wharf_runtime::cgroups::detect().is_ok_and(|l| l.is_v2());
    Cgroups {
        version: if v2 {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        },
        driver,
    }
}

/// Whether AppArmor is enabled on the host (a container may ask for a profile only then).
pub fn apparmor_enabled() -> bool {
    wharf_runtime::lsm::apparmor_enabled()
}
