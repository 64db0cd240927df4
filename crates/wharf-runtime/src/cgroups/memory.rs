//! `linux.resources.memory`: limit, reservation, swap, kernel, kernelTCP, swappiness,
//! disableOOMKiller, useHierarchy, checkBeforeUpdate — on v1 (memory.limit_in_bytes and
//! friends) or v2 (memory.max, memory.swap.max, memory.low).
//!
//! Values follow runc: 0 means "leave as is", -1 means "unlimited". `swap` is memory+swap
//! as on v1; v2 keeps swap separately, so it is converted (swap - limit).

use std::path::Path;

use oci_spec::runtime::LinuxMemory;

use super::route::{MEMORY, Place};
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.memory";
const MEMSW: &str = "memory.memsw.limit_in_bytes";

/// Apply the memory settings.
pub(super) fn set(cg: &Cgroup, m: &LinuxMemory) -> Result<()> {
    if !is_set(m) {
        return Ok(());
    }
    match cg.place_for(MEMORY, S)? {
        Place::V1(dir) => set_v1(dir, m),
        Place::V2(dir) => set_v2(dir, m),
    }
}

fn is_set(m: &LinuxMemory) -> bool {
    let nz = |v: Option<i64>| v.is_some_and(|v| v != 0);
    nz(m.limit())
        || nz(m.reservation())
        || nz(m.swap())
        || nz(m.kernel())
        || nz(m.kernel_tcp())
        || m.swappiness().is_some()
        || m.disable_oom_killer().is_some()
        || m.use_hierarchy().is_some()
}

fn set_v1(dir: &Path, m: &LinuxMemory) -> Result<()> {
    let limit = m.limit().unwrap_or(0);
    let mut swap = m.swap().unwrap_or(0);
    if m.check_before_update() == Some(true) {
        check_usage(dir, "memory.usage_in_bytes", limit, swap)?;
    }
    if limit > 0 && swap > 0 && swap < limit {
        return Err(Error::Config(format!(
            "{S}.swap: memory+swap limit ({swap}) should be >= memory limit ({limit})"
        )));
    }
    // "Unlimited memory" with no word on swap means unlimited memory+swap too.
    if limit == -1 && swap == 0 && files::exists(dir, MEMSW) {
        swap = -1;
    }
    // The kernel keeps memsw >= limit at every moment, so the order of the two writes
    // depends on whether the limit goes up or down.
    let swap_first = limit != 0
        && swap != 0
        && (swap == -1 || files::read_u64(dir, "memory.limit_in_bytes")? < swap as u64);
    if swap_first {
        set_v1_swap(dir, swap)?;
        set_v1_limit(dir, limit)?;
    } else {
        set_v1_limit(dir, limit)?;
        set_v1_swap(dir, swap)?;
    }
    if let Some(r) = m.reservation().filter(|r| *r != 0) {
        files::write(
            dir,
            "memory.soft_limit_in_bytes",
            &r.to_string(),
            &format!("{S}.reservation"),
        )?;
    }
    if let Some(k) = m.kernel().filter(|k| *k != 0) {
        set_v1_kernel(dir, k)?;
    }
    if let Some(k) = m.kernel_tcp().filter(|k| *k != 0) {
        files::write(
            dir,
            "memory.kmem.tcp.limit_in_bytes",
            &k.to_string(),
            &format!("{S}.kernelTCP"),
        )?;
    }
    if let Some(disable) = m.disable_oom_killer() {
        let v = if disable { "1" } else { "0" };
        files::write(
            dir,
            "memory.oom_control",
            v,
            &format!("{S}.disableOOMKiller"),
        )?;
    }
    if let Some(sw) = m.swappiness() {
        files::write(
            dir,
            "memory.swappiness",
            &swappiness(sw)?.to_string(),
            &format!("{S}.swappiness"),
        )?;
    }
    if let Some(h) = m.use_hierarchy() {
        let path = dir.join("memory.use_hierarchy");
        match files::write_raw(&path, if h { "1" } else { "0" }) {
            Ok(()) => {}
            // Since Linux 5.x v1 memory accounting is always hierarchical; turning it off is
            // refused with EINVAL. runc ignores the setting altogether.
            Err(e) if !h && e.raw_os_error() == Some(libc::EINVAL) => crate::log::warn(&format!(
                "{S}.useHierarchy=false is ignored: this kernel always accounts memory hierarchically"
            )),
            Err(e) => {
                return Err(Error::os(
                    format!("{S}.useHierarchy: write {h} to {}", path.display()),
                    e,
                ));
            }
        }
    }
    Ok(())
}

fn set_v1_limit(dir: &Path, limit: i64) -> Result<()> {
    if limit == 0 {
        return Ok(());
    }
    let path = dir.join("memory.limit_in_bytes");
    match files::write_raw(&path, &limit.to_string()) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let usage = files::read_u64(dir, "memory.usage_in_bytes").unwrap_or(0);
            let peak = files::read_u64(dir, "memory.max_usage_in_bytes").unwrap_or(0);
            Err(Error::Other(format!(
                "{S}.limit: unable to set memory limit to {limit} (current usage: {usage}, \
                 peak usage: {peak}) in {}",
                path.display()
            )))
        }
        Err(e) => Err(Error::os(
            format!("{S}.limit: write \"{limit}\" to {}", path.display()),
            e,
        )),
    }
}

fn set_v1_swap(dir: &Path, swap: i64) -> Result<()> {
    if swap == 0 {
        return Ok(());
    }
    if !files::exists(dir, MEMSW) {
        return Err(Error::Unsupported(format!(
            "{S}.swap: {} does not exist: the kernel does not account swap (boot with \
             swapaccount=1)",
            dir.join(MEMSW).display()
        )));
    }
    files::write(dir, MEMSW, &swap.to_string(), &format!("{S}.swap"))
}

/// Kernel memory limits are deprecated: kernels since 5.16 accept the write and ignore it,
/// newer ones lack the file. Either way the user is told it has no effect.
fn set_v1_kernel(dir: &Path, k: i64) -> Result<()> {
    const F: &str = "memory.kmem.limit_in_bytes";
    if !files::exists(dir, F) {
        crate::log::warn(&format!("{S}.kernel is ignored: this kernel has no {F}"));
        return Ok(());
    }
    files::write(dir, F, &k.to_string(), &format!("{S}.kernel"))?;
    let now = files::read_u64(dir, F)?;
    if k > 0 && now > k as u64 {
        crate::log::warn(&format!(
            "{S}.kernel is ignored: this kernel does not enforce kernel memory limits"
        ));
    }
    Ok(())
}

fn swappiness(v: u64) -> Result<u64> {
    if v > 100 {
        return Err(Error::Config(format!(
            "{S}.swappiness: invalid memory swappiness value: {v} (valid range is 0-100)"
        )));
    }
    Ok(v)
}

/// checkBeforeUpdate: refuse a limit at or below what the cgroup already uses (instead of
/// letting the kernel OOM-kill the container).
fn check_usage(dir: &Path, usage_file: &str, limit: i64, swap: i64) -> Result<()> {
    if limit <= 0 && swap <= 0 {
        return Ok(());
    }
    // Best effort, as in runc: no usage file (not created yet) means nothing to check.
    let Ok(Some(usage)) = files::read_u64_opt(dir, usage_file) else {
        return Ok(());
    };
    if swap > 0 && swap as u64 <= usage {
        return Err(Error::Other(format!(
            "{S}.checkBeforeUpdate: rejecting memory+swap limit {swap} <= usage {usage}"
        )));
    }
    if limit > 0 && limit as u64 <= usage {
        return Err(Error::Other(format!(
            "{S}.checkBeforeUpdate: rejecting memory limit {limit} <= usage {usage}"
        )));
    }
    Ok(())
}

/// The v2 value of memory.swap.max for an OCI memory+swap value (runc's conversion):
/// 0 = leave as is, -1 = unlimited.
pub(crate) fn swap_to_v2(swap: i64, limit: i64) -> Result<i64> {
    match (swap, limit) {
        (0, -1) => Ok(-1),
        (-1 | 0, _) => Ok(swap),
        (_, -1) => Ok(swap),
        (_, 0) => Err(Error::Config(format!(
            "{S}.swap: unable to set swap limit without memory limit"
        ))),
        (_, l) if l < 0 => Err(Error::Config(format!(
            "{S}.limit: invalid memory value: {l}"
        ))),
        (s, l) if s < l => Err(Error::Config(format!(
            "{S}.swap: memory+swap limit ({s}) should be >= memory limit ({l})"
        ))),
        (s, l) => Ok(s - l),
    }
}

/// A v2 limit: -1 is "max", 0 is "leave as is" (empty).
fn v2_value(v: i64) -> String {
    match v {
        0 => String::new(),
        -1 => "max".into(),
        v => v.to_string(),
    }
}

fn set_v2(dir: &Path, m: &LinuxMemory) -> Result<()> {
    let limit = m.limit().unwrap_or(0);
    let swap = m.swap().unwrap_or(0);
    let reservation = m.reservation().unwrap_or(0);
    if limit != 0 || swap != 0 || reservation != 0 {
        if m.check_before_update() == Some(true) {
            check_usage(dir, "memory.current", limit, swap)?;
        }
        let swap2 = swap_to_v2(swap, limit)?;
        let mut swap_str = v2_value(swap2);
        if swap_str.is_empty() && swap > 0 {
            // memory == memory+swap: no swap at all.
            swap_str = "0".into();
        }
        if !swap_str.is_empty() {
            let path = dir.join("memory.swap.max");
            match files::write_raw(&path, &swap_str) {
                Ok(()) => {}
                // Without swap accounting there is no file; "no limit" and "no swap" are then
                // what the container gets anyway.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && (swap_str == "max" || swap_str == "0") => {}
                Err(e) => {
                    return Err(Error::os(
                        format!("{S}.swap: write {swap_str:?} to {}", path.display()),
                        e,
                    ));
                }
            }
        }
        if limit != 0 {
            files::write(dir, "memory.max", &v2_value(limit), &format!("{S}.limit"))?;
        }
        if reservation != 0 {
            files::write(
                dir,
                "memory.low",
                &v2_value(reservation),
                &format!("{S}.reservation"),
            )?;
        }
    }
    let ignored = |what: &str| {
        crate::log::warn(&format!(
            "{S}.{what} is ignored: cgroup v2 has no such setting"
        ))
    };
    if m.kernel().is_some_and(|k| k != 0) {
        ignored("kernel");
    }
    if m.kernel_tcp().is_some_and(|k| k != 0) {
        ignored("kernelTCP");
    }
    if let Some(sw) = m.swappiness() {
        swappiness(sw)?;
        ignored("swappiness");
    }
    if m.disable_oom_killer() == Some(true) {
        ignored("disableOOMKiller");
    }
    if m.use_hierarchy() == Some(false) {
        crate::log::warn(&format!(
            "{S}.useHierarchy=false is ignored: cgroup v2 is always hierarchical"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::{fake_v2, read_lines};
    use oci_spec::runtime::LinuxMemoryBuilder;

    #[test]
    fn swap_conversion_follows_runc() {
        assert_eq!(swap_to_v2(0, -1).unwrap(), -1);
        assert_eq!(swap_to_v2(-1, 100).unwrap(), -1);
        assert_eq!(swap_to_v2(0, 100).unwrap(), 0);
        assert_eq!(swap_to_v2(300, -1).unwrap(), 300);
        assert_eq!(swap_to_v2(300, 100).unwrap(), 200);
        assert_eq!(swap_to_v2(100, 100).unwrap(), 0);
        assert!(
            swap_to_v2(300, 0)
                .unwrap_err()
                .to_string()
                .contains("without memory limit")
        );
        assert!(swap_to_v2(50, 100).is_err());
    }

    #[test]
    fn v2_limit_swap_and_reservation() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["memory.max", "memory.swap.max", "memory.low"]);
        let m = LinuxMemoryBuilder::default()
            .limit(64i64 << 20)
            .swap(96i64 << 20)
            .reservation(32i64 << 20)
            .build()
            .unwrap();
        set(&cg, &m).unwrap();
        assert_eq!(read_lines(&dir, "memory.max"), [(64u64 << 20).to_string()]);
        assert_eq!(
            read_lines(&dir, "memory.swap.max"),
            [(32u64 << 20).to_string()]
        );
        assert_eq!(read_lines(&dir, "memory.low"), [(32u64 << 20).to_string()]);
        // memory == memory+swap: swap disabled.
        let m = LinuxMemoryBuilder::default()
            .limit(10i64)
            .swap(10i64)
            .build()
            .unwrap();
        set(&cg, &m).unwrap();
        assert_eq!(read_lines(&dir, "memory.swap.max").last().unwrap(), "0");
        // Unlimited memory, swap unset: both unlimited.
        let m = LinuxMemoryBuilder::default().limit(-1i64).build().unwrap();
        set(&cg, &m).unwrap();
        assert_eq!(read_lines(&dir, "memory.swap.max").last().unwrap(), "max");
        assert_eq!(read_lines(&dir, "memory.max").last().unwrap(), "max");
    }

    #[test]
    fn v2_swap_without_accounting_is_tolerated_only_for_max_and_zero() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["memory.max"]);
        let unlimited = LinuxMemoryBuilder::default().limit(-1i64).build().unwrap();
        set(&cg, &unlimited).unwrap();
        assert_eq!(read_lines(&dir, "memory.max"), ["max"]);
        let m = LinuxMemoryBuilder::default()
            .limit(100i64)
            .swap(300i64)
            .build()
            .unwrap();
        let err = set(&cg, &m).unwrap_err().to_string();
        assert!(
            err.starts_with("linux.resources.memory.swap: write \"200\" to"),
            "{err}"
        );
        assert!(err.contains("memory.swap.max"), "{err}");
    }

    #[test]
    fn v2_check_before_update_rejects_limits_below_usage() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["memory.max"]);
        std::fs::write(dir.join("memory.current"), "5000\n").unwrap();
        let m = LinuxMemoryBuilder::default()
            .limit(4096i64)
            .check_before_update(true)
            .build()
            .unwrap();
        let err = set(&cg, &m).unwrap_err().to_string();
        assert!(
            err.contains("rejecting memory limit 4096 <= usage 5000"),
            "{err}"
        );
        assert!(read_lines(&dir, "memory.max").is_empty());
        let m = LinuxMemoryBuilder::default()
            .limit(8192i64)
            .check_before_update(true)
            .build()
            .unwrap();
        set(&cg, &m).unwrap();
        assert_eq!(read_lines(&dir, "memory.max"), ["8192"]);
    }

    #[test]
    fn v2_missing_controller_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let (mut cg, _) = fake_v2(t.path(), &[]);
        std::fs::write(
            cg.unified_mount
                .as_ref()
                .unwrap()
                .join("cgroup.controllers"),
            "cpu",
        )
        .unwrap();
        cg.v2 = true;
        let m = LinuxMemoryBuilder::default().limit(1i64).build().unwrap();
        let err = set(&cg, &m).unwrap_err().to_string();
        assert!(
            err.starts_with("linux.resources.memory: the memory controller is neither"),
            "{err}"
        );
    }

    #[test]
    fn swappiness_range() {
        assert!(swappiness(100).is_ok());
        assert!(
            swappiness(101)
                .unwrap_err()
                .to_string()
                .contains("valid range is 0-100")
        );
    }
}
