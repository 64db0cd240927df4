//! Which hierarchy carries each controller for a container's cgroup.
//!
//! The layout type alone does not say where a controller is: on a hybrid host most
//! controllers are mounted as cgroup v1, but any controller that no v1 hierarchy took (here
//! often hugetlb, or rdma and misc) is available in the cgroup2 mount instead. So a
//! controller goes to its v1 directory when the container has one, otherwise to the unified
//! directory when the cgroup2 root lists it in `cgroup.controllers`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{Cgroup, UNIFIED, files};
use crate::error::{Error, Result, p};

/// A resource controller: its v1 name (the key in [`Cgroup::paths`]) and its v2 name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Controller {
    /// v1 hierarchy key.
    pub v1: &'static str,
    /// v2 controller name; `None` for v1-only controllers (net_cls, net_prio).
    pub v2: Option<&'static str>,
}

pub(crate) const CPU: Controller = Controller {
    v1: "cpu",
    v2: Some("cpu"),
};
pub(crate) const CPUACCT: Controller = Controller {
    v1: "cpuacct",
    v2: Some("cpu"),
};
pub(crate) const CPUSET: Controller = Controller {
    v1: "cpuset",
    v2: Some("cpuset"),
};
pub(crate) const MEMORY: Controller = Controller {
    v1: "memory",
    v2: Some("memory"),
};
pub(crate) const BLKIO: Controller = Controller {
    v1: "blkio",
    v2: Some("io"),
};
pub(crate) const PIDS: Controller = Controller {
    v1: "pids",
    v2: Some("pids"),
};
pub(crate) const HUGETLB: Controller = Controller {
    v1: "hugetlb",
    v2: Some("hugetlb"),
};
pub(crate) const RDMA: Controller = Controller {
    v1: "rdma",
    v2: Some("rdma"),
};
pub(crate) const NET_CLS: Controller = Controller {
    v1: "net_cls",
    v2: None,
};
pub(crate) const NET_PRIO: Controller = Controller {
    v1: "net_prio",
    v2: None,
};

/// Where a controller's files are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place<'a> {
    /// The container's directory in a v1 hierarchy.
    V1(&'a Path),
    /// The container's directory in the unified hierarchy.
    V2(&'a Path),
}

impl<'a> Place<'a> {
    /// The directory.
    pub fn dir(&self) -> &'a Path {
        match self {
            Place::V1(d) | Place::V2(d) => d,
        }
    }
}

impl Cgroup {
    /// The container's unified (cgroup2) directory, if the host mounts cgroup2.
    pub(crate) fn unified_dir(&self) -> Option<&Path> {
        self.paths.get(UNIFIED).map(PathBuf::as_path)
    }

    /// The cgroup2 mount point (recorded at create; detected for older state files).
    pub(crate) fn unified_root(&self) -> Option<PathBuf> {
        if let Some(m) = &self.unified_mount {
            return Some(m.clone());
        }
        super::detect().ok().and_then(|l| l.unified)
    }

    /// Controllers the cgroup2 root offers (its `cgroup.controllers`).
    pub(crate) fn unified_controllers(&self) -> BTreeSet<String> {
        self.unified_root()
            .and_then(|root| files::read(&root, "cgroup.controllers").ok())
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// Where `c` lives for this cgroup, or `None` if no hierarchy carries it.
    pub(crate) fn place(&self, c: Controller) -> Option<Place<'_>> {
        if !self.v2
            && let Some(dir) = self.paths.get(c.v1)
        {
            return Some(Place::V1(dir));
        }
        let v2 = c.v2?;
        let dir = self.unified_dir()?;
        self.unified_controllers()
            .contains(v2)
            .then_some(Place::V2(dir))
    }

    /// [`Cgroup::place`] for writing settings: on the unified hierarchy the controller is
    /// first enabled in every ancestor's `cgroup.subtree_control`, so the container's
    /// directory gets its files. `setting` names what needs it, for the error.
    pub(crate) fn place_for(&self, c: Controller, setting: &str) -> Result<Place<'_>> {
        match self.place(c) {
            Some(Place::V2(dir)) => {
                let root = self.unified_root().unwrap_or_default();
                enable_in_ancestors(&root, dir, c.v2.unwrap_or(c.v1))?;
                Ok(Place::V2(dir))
            }
            Some(place) => Ok(place),
            None => Err(self.unavailable(c, setting)),
        }
    }

    fn unavailable(&self, c: Controller, setting: &str) -> Error {
        let where_ = match (self.v2, c.v2, self.unified_root()) {
            (true, None, _) => format!(
                "the {} controller exists only in cgroup v1, and this host runs cgroup v2 only",
                c.v1
            ),
            (_, Some(_), Some(root)) => format!(
                "the {} controller is neither mounted as cgroup v1 nor offered by the cgroup v2 \
                 hierarchy at {} (see its cgroup.controllers)",
                c.v1,
                p(&root)
            ),
            _ => format!(
                "the {} cgroup v1 controller is not mounted on this host",
                c.v1
            ),
        };
        Error::Unsupported(format!("{setting}: {where_}"))
    }
}

/// Enable `controller` in the `cgroup.subtree_control` of every directory from the cgroup2
/// mount `root` down to the parent of `dir` (those that already have it are left alone).
pub(crate) fn enable_in_ancestors(root: &Path, dir: &Path, controller: &str) -> Result<()> {
    let Ok(rel) = dir.strip_prefix(root) else {
        return Err(Error::Other(format!(
            "cgroup {} is not below the cgroup2 mount {}",
            p(dir),
            p(root)
        )));
    };
    let mut level = root.to_path_buf();
    let mut chain = vec![level.clone()];
    let comps: Vec<_> = rel.components().collect();
    for c in comps.iter().take(comps.len().saturating_sub(1)) {
        level.push(c);
        chain.push(level.clone());
    }
    for ancestor in chain {
        let enabled = files::read(&ancestor, "cgroup.subtree_control").unwrap_or_default();
        if enabled.split_whitespace().any(|c| c == controller) {
            continue;
        }
        let value = format!("+{controller}");
        if let Err(e) = files::write_raw(&ancestor.join("cgroup.subtree_control"), &value) {
            let hint = if e.raw_os_error() == Some(libc::EBUSY) {
                " (the cgroup holds processes itself; cgroup v2 only enables controllers for \
                 the children of cgroups without processes)"
            } else {
                ""
            };
            return Err(Error::os(
                format!(
                    "enable the {controller} controller for {}: write {value:?} to {}{hint}",
                    p(dir),
                    p(&ancestor.join("cgroup.subtree_control"))
                ),
                e,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fake hybrid tree: v1 memory + a cgroup2 root offering `unified_ctrls`.
    pub(crate) fn hybrid(dir: &Path, unified_ctrls: &str) -> Cgroup {
        let mem = dir.join("memory/parent/c");
        let uroot = dir.join("unified");
        let u = uroot.join("parent/c");
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::create_dir_all(&u).unwrap();
        std::fs::write(uroot.join("cgroup.controllers"), unified_ctrls).unwrap();
        for d in [uroot.clone(), uroot.join("parent")] {
            std::fs::write(d.join("cgroup.subtree_control"), "").unwrap();
        }
        Cgroup {
            paths: BTreeMap::from([("memory".to_string(), mem), (UNIFIED.to_string(), u)]),
            v2: false,
            unified_mount: Some(uroot),
        }
    }

    #[test]
    fn hybrid_routes_by_where_the_controller_is() {
        let t = tempfile::tempdir().unwrap();
        let cg = hybrid(t.path(), "hugetlb rdma\n");
        assert_eq!(
            cg.place(MEMORY),
            Some(Place::V1(&t.path().join("memory/parent/c")))
        );
        assert_eq!(
            cg.place(HUGETLB),
            Some(Place::V2(&t.path().join("unified/parent/c")))
        );
        assert_eq!(cg.place(PIDS), None);
        assert_eq!(cg.place(NET_CLS), None);
        let err = cg
            .place_for(PIDS, "linux.resources.pids.limit")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("linux.resources.pids.limit: the pids controller is neither"),
            "{err}"
        );
        // Enabling writes "+hugetlb" into the root's and the parent's subtree_control.
        cg.place_for(HUGETLB, "x").unwrap();
        for d in ["unified", "unified/parent"] {
            let ctl = std::fs::read_to_string(t.path().join(d).join("cgroup.subtree_control"));
            assert_eq!(ctl.unwrap(), "+hugetlb\n", "{d}");
        }
        assert!(
            !t.path()
                .join("unified/parent/c/cgroup.subtree_control")
                .exists()
        );
    }

    #[test]
    fn pure_v2_never_uses_v1_keys() {
        let t = tempfile::tempdir().unwrap();
        let mut cg = hybrid(t.path(), "memory pids");
        cg.v2 = true;
        assert_eq!(
            cg.place(MEMORY),
            Some(Place::V2(&t.path().join("unified/parent/c")))
        );
        let err = cg.place_for(NET_CLS, "linux.resources.network.classID");
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("exists only in cgroup v1")
        );
    }
}
