//! Capabilities: the five sets of `process.capabilities`, applied around the switch to the
//! container's user.

use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

use crate::error::{Context, Error, Result};

/// Capability names and numbers, as the kernel numbers them (linux/capability.h).
pub const NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The kernel number of a capability.
pub fn number(cap: &Capability) -> Option<u32> {
    let name = serde_json::to_value(cap).ok()?;
    let name = name.as_str()?;
    NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

/// Capability number of a name like `CAP_NET_ADMIN` or `net_admin`.
pub fn number_of_name(name: &str) -> Option<u32> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    NAMES.iter().position(|n| *n == full).map(|i| i as u32)
}

/// The highest capability this kernel knows.
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(NAMES.len() as u32 - 1)
}

fn mask(set: &Option<Capabilities>) -> u64 {
    set.iter()
        .flatten()
        .filter_map(number)
        .fold(0u64, |m, n| m | (1u64 << n))
}

/// The five sets as bit masks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sets {
    /// Bounding set.
    pub bounding: u64,
    /// Effective set.
    pub effective: u64,
    /// Permitted set.
    pub permitted: u64,
    /// Inheritable set.
    pub inheritable: u64,
    /// Ambient set.
    pub ambient: u64,
}

impl Sets {
    /// From the config (a missing section means no capabilities at all, as in runc).
    pub fn from_config(caps: Option<&LinuxCapabilities>) -> Sets {
        let Some(c) = caps else {
            return Sets::default();
        };
        Sets {
            bounding: mask(c.bounding()),
            effective: mask(c.effective()),
            permitted: mask(c.permitted()),
            inheritable: mask(c.inheritable()),
            ambient: mask(c.ambient()),
        }
    }
}

/// Drop from the bounding set every capability not in `sets.bounding`. Must run while the
/// process still has CAP_SETPCAP, i.e. before [`apply`].
pub fn drop_bounding(sets: &Sets) -> Result<()> {
    for cap in 0..=last_cap() {
        if sets.bounding & (1u64 << cap) != 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                continue;
            }
            return Err(Error::os(
                format!("drop {} from the bounding set", name(cap)),
                err,
            ));
        }
    }
    Ok(())
}

fn name(cap: u32) -> String {
    NAMES
        .get(cap as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("capability {cap}"))
}

/// Switch to `uid`/`gid`/`groups` and set the effective, permitted, inheritable and ambient
/// sets. KEEPCAPS carries the permitted set across setuid; capset then sets exactly what
/// the config asks for.
pub fn switch_user_and_apply(sets: &Sets, uid: u32, gid: u32, groups: &[u32]) -> Result<()> {
    rustix::thread::set_keep_capabilities(true).ctx(|| "prctl(PR_SET_KEEPCAPS)".into())?;
    let gids: Vec<rustix::fs::Gid> = groups
        .iter()
        .map(|g| rustix::fs::Gid::from_raw(*g))
        .collect();
    rustix::thread::set_thread_groups(&gids)
        .ctx(|| format!("setgroups {groups:?} (process.user.additionalGids)"))?;
    let g = rustix::fs::Gid::from_raw(gid);
    rustix::thread::set_thread_res_gid(g, g, g)
        .ctx(|| format!("setgid {gid} (process.user.gid)"))?;
    let u = rustix::fs::Uid::from_raw(uid);
    rustix::thread::set_thread_res_uid(u, u, u)
        .ctx(|| format!("setuid {uid} (process.user.uid)"))?;
    rustix::thread::set_keep_capabilities(false).ctx(|| "prctl(PR_SET_KEEPCAPS)".into())?;
    apply(sets)
}

/// capset + ambient set for the current user (used after the user switch).
pub fn apply(sets: &Sets) -> Result<()> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::from_bits_retain(sets.effective),
            permitted: CapabilitySet::from_bits_retain(sets.permitted),
            inheritable: CapabilitySet::from_bits_retain(sets.inheritable),
        },
    )
    .ctx(|| "capset (process.capabilities)".into())?;
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    for cap in 0..64u32 {
        if sets.ambient & (1u64 << cap) == 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments.
        let ret = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                cap as libc::c_ulong,
                0,
                0,
            )
        };
        if ret != 0 {
            // runc ignores ambient capabilities the kernel refuses (not in permitted and
            // inheritable); so do we, as engines send them routinely.
            continue;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_the_kernel() {
        assert_eq!(number(&Capability::Chown), Some(0));
        assert_eq!(number(&Capability::SysAdmin), Some(21));
        assert_eq!(number(&Capability::CheckpointRestore), Some(40));
        assert_eq!(number_of_name("net_admin"), Some(12));
        assert_eq!(number_of_name("CAP_KILL"), Some(5));
        assert_eq!(number_of_name("CAP_NOPE"), None);
    }
}
