//! Linux security modules: AppArmor profiles and SELinux labels for the container process,
//! applied where the host has the module and refused with a clear error where it has not.

use crate::error::{Context, Error, Result};

/// Whether AppArmor is enabled on this host.
pub fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y")
}

/// Whether SELinux is enabled on this host.
pub fn selinux_enabled() -> bool {
    std::path::Path::new("/sys/fs/selinux/enforce").exists()
}

/// Fail early (at create, before any process exists) if the config asks for an LSM the
/// host does not have.
pub fn check(apparmor: Option<&str>, selinux: Option<&str>) -> Result<()> {
    if let Some(profile) = apparmor.filter(|p| !p.is_empty())
        && !apparmor_enabled()
    {
        return Err(Error::Unsupported(format!(
            "process.apparmorProfile {profile:?} is set, but AppArmor is not enabled on this host"
        )));
    }
    if let Some(label) = selinux.filter(|p| !p.is_empty())
        && !selinux_enabled()
    {
        return Err(Error::Unsupported(format!(
            "process.selinuxLabel {label:?} is set, but SELinux is not enabled on this host"
        )));
    }
    Ok(())
}

/// Make the next exec switch to AppArmor `profile`.
pub fn apparmor_exec(profile: &str) -> Result<()> {
    check(Some(profile), None)?;
    let value = format!("exec {profile}");
    crate::procfs::write("/proc/self/attr/apparmor/exec", &value)
        .or_else(|_| crate::procfs::write("/proc/self/attr/exec", &value))
        .ctx(|| format!("apply AppArmor profile {profile:?}"))
}

/// Make the next exec switch to SELinux `label`.
pub fn selinux_exec(label: &str) -> Result<()> {
    check(None, Some(label))?;
    crate::procfs::write("/proc/self/attr/exec", label)
        .ctx(|| format!("apply SELinux label {label:?}"))
}
