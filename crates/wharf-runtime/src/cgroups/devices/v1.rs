//! Enforcing a [`RuleSet`] through the v1 devices controller: the transition from what
//! devices.list shows now, written rule by rule, then checked against devices.list again.

use std::path::Path;

use super::RuleSet;
use crate::cgroups::files;
use crate::error::{Error, Result};

const S: &str = "linux.resources.devices";

/// Make the cgroup at `dir` enforce `target`.
pub(super) fn apply(dir: &Path, target: &RuleSet) -> Result<()> {
    let current = RuleSet::from_list(&files::read_ctx(dir, "devices.list")?)?;
    for rule in current.transition(target) {
        let file = if rule.allow {
            "devices.allow"
        } else {
            "devices.deny"
        };
        files::write(dir, file, &rule.to_string(), S)?;
    }
    let now = RuleSet::from_list(&files::read_ctx(dir, "devices.list")?)?;
    let same = if target.default_allow {
        now.default_allow
    } else {
        now == *target
    };
    if !same {
        return Err(Error::Other(format!(
            "{S}: {} does not show the requested rules after writing them (the parent \
             cgroup may not allow them)",
            dir.join("devices.list").display()
        )));
    }
    Ok(())
}
