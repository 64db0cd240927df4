//! `linux.resources.pids`: pids.max (the same file on v1 and v2).

use oci_spec::runtime::LinuxPids;

use super::route::PIDS;
use super::{Cgroup, files};
use crate::error::Result;

const S: &str = "linux.resources.pids.limit";

/// Apply the pids limit: positive is the limit, negative is "max", 0 leaves it as is (runc).
pub(super) fn set(cg: &Cgroup, pids: &LinuxPids) -> Result<()> {
    let limit = pids.limit();
    if limit == 0 {
        return Ok(());
    }
    let value = if limit < 0 {
        "max".to_string()
    } else {
        limit.to_string()
    };
    let place = cg.place_for(PIDS, S)?;
    files::write(place.dir(), "pids.max", &value, S)
}
