//! Writing `linux.resources` into a container's cgroup files.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use super::{Cgroup, UNIFIED};
use crate::error::{Context, Error, Result, p};

/// Apply `res` to the cgroup.
pub fn apply(cg: &Cgroup, res: &LinuxResources) -> Result<()> {
    if let Some(pids) = res.pids() {
        let value = limit(pids.limit());
        write(cg, "pids", "pids.max", &value)?;
    }
    if let Some(mem) = res.memory()
        && let Some(l) = mem.limit()
    {
        if cg.v2 {
            write(cg, UNIFIED, "memory.max", &limit(l))?;
        } else {
            write(cg, "memory", "memory.limit_in_bytes", &l.to_string())?;
        }
    }
    Ok(())
}

fn limit(v: i64) -> String {
    if v < 0 { "max".into() } else { v.to_string() }
}

fn write(cg: &Cgroup, v1_key: &str, file: &str, value: &str) -> Result<()> {
    let key = if cg.v2 { UNIFIED } else { v1_key };
    let Some(dir) = cg.paths.get(key) else {
        return Err(Error::Unsupported(format!(
            "cgroup controller {v1_key} is not available on this host (needed for {file})"
        )));
    };
    let path = dir.join(file);
    std::fs::write(&path, value).ctx(|| format!("write {value:?} to {}", p(&path)))
}

/// On cgroup v2, make the controllers available to `dir` by enabling them in every ancestor's
/// cgroup.subtree_control, from the mount root down.
pub fn enable_controllers(dir: &Path) -> Result<()> {
    let mut ancestors: Vec<&Path> = dir.ancestors().skip(1).collect();
    ancestors.reverse();
    for parent in ancestors {
        let available = parent.join("cgroup.controllers");
        let Ok(ctrls) = std::fs::read_to_string(&available) else {
            continue;
        };
        let want: Vec<String> = ctrls.split_whitespace().map(|c| format!("+{c}")).collect();
        if want.is_empty() {
            continue;
        }
        let control = parent.join("cgroup.subtree_control");
        // Enabling fails with EBUSY in a cgroup that holds processes (the no-internal-process
        // rule); such a parent keeps what it has.
        let _ = std::fs::write(&control, want.join(" "));
    }
    Ok(())
}
