//! Network sysctls (/proc/sys/net/...). They are per network namespace: the values read
//! and written are those of the calling thread's namespace, so callers set them from a
//! thread inside the namespace they mean ([`crate::netns::run_in`]).

use crate::error::{Context, Result};

/// Set `/proc/sys/<key>` to `value` unless it already has it (reading is cheaper than a
/// write, which some sysctls act on even when unchanged).
pub fn ensure(key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    let cur = std::fs::read_to_string(&path).ctx(|| format!("read {path}"))?;
    if cur.trim() != value {
        std::fs::write(&path, value).ctx(|| format!("write {value} to {path}"))?;
    }
    Ok(())
}

/// Read `/proc/sys/<key>`, trimmed.
pub fn get(key: &str) -> Result<String> {
    let path = format!("/proc/sys/{key}");
    Ok(std::fs::read_to_string(&path)
        .ctx(|| format!("read {path}"))?
        .trim()
        .to_string())
}
