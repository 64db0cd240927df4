//! Which cgroup driver places pods, and the systemd one's work.
//!
//! cgroupfs: the pod's cgroup is a directory the engine makes below its cgroup parent
//! (`/wharf/<id>`, or kubelet's `/kubepods/burstable/pod<uid>/<id>`).
//!
//! systemd: the pod is a transient scope, `wharf-pod-<id>.scope`, in the slice its cgroup
//! parent names (`wharf.slice`, or kubelet's `kubepods-burstable-pod<uid>.slice`), made over
//! D-Bus when the pod's shim starts (a scope needs a process, and the shim is the pod's
//! first and last). The scope has `Delegate=yes`: the shim's leaf and the containers'
//! cgroups below it are the engine's and the runtime's, made and limited through cgroupfs
//! as before. The pod's limits are the scope's properties. Either way every later step
//! (specgen, the runtime, stats, update) sees one cgroup path.

use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::db::{PodRow, Sandbox};
use crate::error::{Error, Result};

/// The driver that places pods' cgroups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CgroupDriver {
    /// Directories the engine makes itself (the default where systemd is not init).
    #[default]
    Cgroupfs,
    /// Transient systemd units.
    Systemd,
}

impl CgroupDriver {
    /// "cgroupfs" or "systemd", as podman's `--cgroup-manager` and kubelet's
    /// `cgroupDriver` spell them.
    pub fn parse(name: &str) -> Result<CgroupDriver> {
        match name {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            other => Err(Error::Invalid(format!(
                "invalid cgroup manager {other:?}: use \"cgroupfs\" or \"systemd\""
            ))),
        }
    }

    /// The driver a host uses when none is asked for: systemd where it booted the host (as
    /// podman chooses), else cgroupfs.
    pub fn host_default() -> CgroupDriver {
        if wharf_systemd::booted() {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }

    /// Its name as docker, podman and kubelet spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }

    /// Refuse the systemd driver on a host systemd did not boot.
    pub fn check_host(self) -> Result<()> {
        if self == CgroupDriver::Systemd {
            wharf_systemd::require_booted()?;
        }
        Ok(())
    }

    /// The cgroup parent of pods that name none.
    pub fn default_parent(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "/wharf",
            CgroupDriver::Systemd => "wharf.slice",
        }
    }

    /// Check a pod's own cgroup parent: an absolute path for cgroupfs, a slice for systemd.
    pub fn check_parent(self, parent: &str) -> Result<()> {
        match self {
            CgroupDriver::Systemd => parent_slice(parent).map(drop),
            CgroupDriver::Cgroupfs => {
                let plain = parent.starts_with('/')
                    && parent
                        .split('/')
                        .skip(1)
                        .all(|c| !c.is_empty() && c != "." && c != "..");
                if plain {
                    Ok(())
                } else if parent.ends_with(".slice") {
                    Err(Error::Invalid(format!(
                        "cgroup parent {parent:?} is a systemd slice, but the cgroup manager \
                         is cgroupfs: use --cgroup-manager systemd (daemon.cgroup-driver), or \
                         give kubelet and Wharf the same cgroup driver"
                    )))
                } else {
                    Err(Error::Invalid(format!(
                        "invalid cgroup parent {parent:?}: it must be an absolute cgroup path \
                         such as /kubepods/burstable/pod<uid>"
                    )))
                }
            }
        }
    }
}

/// The slice a pod's cgroup parent names under the systemd driver: a slice's name
/// (`kubepods-burstable-pod<uid>.slice`), or the path systemd gives it, which is what
/// kubelet sends (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`;
/// containerd and CRI-O take its last part too).
fn parent_slice(parent: &str) -> Result<&str> {
    let Some(path) = parent.strip_prefix('/') else {
        wharf_systemd::check_slice(parent)?;
        return Ok(parent);
    };
    let name = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let matches = name.ends_with(".slice")
        && wharf_systemd::slice_path(name).is_ok_and(|p| p == parent.trim_end_matches('/'));
    if matches {
        Ok(name)
    } else {
        Err(Error::Invalid(format!(
            "cgroup parent {parent:?} is a cgroupfs path, but the cgroup manager is systemd: \
             name a slice (such as kubelet's kubepods-burstable-pod<uid>.slice, or its path \
             /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice), or \
             give kubelet and Wharf the same cgroup driver"
        )))
    }
}

/// A pod's systemd scope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodUnit {
    /// The scope's name (`wharf-pod-<id>.scope`).
    pub scope: String,
    /// The slice it is in.
    pub slice: String,
}

/// Where pod `id` goes: its cgroup path (absolute, cgroupsPath form) and, with the systemd
/// driver, its scope.
pub fn place(
    driver: CgroupDriver,
    engine_parent: &str,
    own_parent: Option<&str>,
    id: &str,
) -> Result<(String, Option<PodUnit>)> {
    let parent = own_parent.unwrap_or(engine_parent);
    match driver {
        CgroupDriver::Cgroupfs => Ok((format!("{}/{id}", parent.trim_end_matches('/')), None)),
        CgroupDriver::Systemd => {
            let slice = parent_slice(parent)?;
            let (scope, path) = wharf_systemd::pod_scope(slice, id)?;
            Ok((
                path,
                Some(PodUnit {
                    scope,
                    slice: slice.to_string(),
                }),
            ))
        }
    }
}

/// The engine's link to systemd, connected on first use (a CLI command that makes no pod
/// never connects).
#[derive(Default)]
pub struct SystemdLink {
    manager: OnceLock<std::result::Result<wharf_systemd::Manager, String>>,
}

impl SystemdLink {
    /// The connection to systemd.
    pub fn manager(&self) -> Result<&wharf_systemd::Manager> {
        match self
            .manager
            .get_or_init(|| wharf_systemd::Manager::connect().map_err(|e| e.to_string()))
        {
            Ok(m) => Ok(m),
            Err(e) => Err(Error::Precondition(e.clone())),
        }
    }

    /// Put the pod's freshly started shim (`pid`) in the pod's scope: start the scope with
    /// it, or, when the scope still runs (containers outlived a killed shim), attach it.
    /// Then the shim moves to its own leaf, so that the scope's cgroup may hand controllers
    /// to the containers' cgroups (cgroup v2 lets a cgroup with processes give none), and
    /// the pod's limits systemd has no property for are written to the scope's files.
    pub fn place_shim(&self, pod: &PodRow, unit: &PodUnit, pid: u32) -> Result<()> {
        let m = self.manager()?;
        let leaf = format!("{}/wharf-shim", pod.sandbox.cgroup.trim_end_matches('/'));
        let rest = match m.active_state(&unit.scope)?.as_deref() {
            Some("active") | Some("activating") | Some("reloading") => {
                // Straight into the leaf: the scope's own cgroup hands controllers to its
                // containers' and may hold no process.
                leaf_dir(&leaf)?;
                m.attach(&unit.scope, "/wharf-shim", &[pid])?;
                return Ok(());
            }
            state => {
                if state.is_some() {
                    // Failed or stopping: its name is taken until systemd forgets it.
                    m.reset_failed(&unit.scope);
                }
                let (props, rest) = match &pod.spec.resources {
                    Some(r) => {
                        let (p, rest) = wharf_systemd::split_resources(r)?;
                        (p, Some(rest))
                    }
                    None => (Vec::new(), None),
                };
                m.start_scope(
                    &unit.scope,
                    &unit.slice,
                    &format!("Wharf pod {}", pod.name),
                    &[pid],
                    &props,
                )?;
                rest
            }
        };
        leaf_dir(&leaf)?.add_pid_unified(pid as i32)?;
        if let Some(rest) = rest {
            let cg = resolve(&pod.sandbox.cgroup, &pod.id)?;
            wharf_runtime::cgroups::apply_resources(&cg, &rest)?;
        }
        Ok(())
    }

    /// Change pod `pod`'s limits from `old` to `new`: its scope's properties and files with
    /// systemd (a scope not running now starts with `new`), its cgroup's files with
    /// cgroupfs.
    pub fn update_pod(
        &self,
        pod: &PodRow,
        old: &oci_spec::runtime::LinuxResources,
        new: &oci_spec::runtime::LinuxResources,
    ) -> Result<()> {
        let cg = resolve(&pod.sandbox.cgroup, &pod.id)?;
        let Some(unit) = &pod.sandbox.unit else {
            return Ok(wharf_runtime::cgroups::update_resources(&cg, old, new)?);
        };
        let (props, rest) = wharf_systemd::split_resources(new)?;
        let m = self.manager()?;
        if m.active_state(&unit.scope)?.as_deref() != Some("active") {
            return Ok(());
        }
        m.set_properties(&unit.scope, &props)?;
        let (_, old_rest) = wharf_systemd::split_resources(old)?;
        Ok(wharf_runtime::cgroups::update_resources(
            &cg, &old_rest, &rest,
        )?)
    }

    /// Stop the pod's scope (what still runs in it is killed), so that its cgroup goes.
    pub fn remove(&self, sb: &Sandbox) -> Result<()> {
        match &sb.unit {
            Some(u) => Ok(self.manager()?.stop(&u.scope)?),
            None => Ok(()),
        }
    }
}

/// The shim's leaf in the unified hierarchy, made without enabling any controller: with
/// the shim still in the scope's cgroup, enabling a threaded controller (pids, cpuset)
/// there would make the scope a thread root, where no child can take a process
/// (EOPNOTSUPP). The containers' cgroups enable them once the shim has moved. On v1
/// hierarchies (a hybrid host) the shim stays where systemd put it, which v1 allows.
fn leaf_dir(leaf: &str) -> Result<wharf_runtime::cgroups::Cgroup> {
    let cg = resolve(leaf, "wharf-shim")?;
    if let Some(dir) = cg.paths.get(wharf_runtime::cgroups::UNIFIED) {
        std::fs::create_dir_all(dir).map_err(|e| Error::Os {
            what: format!("create cgroup {}", dir.display()),
            err: e,
        })?;
    }
    Ok(cg)
}

/// The cgroup at `path` (absolute, the cgroupsPath form) in every hierarchy of this host.
pub(crate) fn resolve(path: &str, id: &str) -> Result<wharf_runtime::cgroups::Cgroup> {
    let layout = wharf_runtime::cgroups::detect()?;
    Ok(wharf_runtime::cgroups::Cgroup::resolve(
        &layout,
        Some(Path::new(path)),
        id,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_driver_places_a_pod_where_its_peers_would() {
        let (cg, unit) = place(CgroupDriver::Cgroupfs, "/wharf", None, "p1").unwrap();
        assert_eq!((cg.as_str(), unit), ("/wharf/p1", None));
        let (cg, unit) = place(
            CgroupDriver::Systemd,
            "wharf.slice",
            Some("kubepods-besteffort-pod7.slice"),
            "p1",
        )
        .unwrap();
        assert_eq!(
            cg,
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7.slice/\
             wharf-pod-p1.scope"
        );
        let unit = unit.unwrap();
        assert_eq!(unit.scope, "wharf-pod-p1.scope");
        assert_eq!(unit.slice, "kubepods-besteffort-pod7.slice");
    }

    #[test]
    fn a_parent_of_the_other_driver_is_refused_with_the_way_out() {
        let e = CgroupDriver::Cgroupfs
            .check_parent("kubepods-pod1.slice")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a systemd slice") && e.contains("--cgroup-manager systemd"));
        let e = CgroupDriver::Systemd
            .check_parent("/kubepods/pod1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a cgroupfs path"), "{e}");
        assert!(CgroupDriver::Systemd.check_parent("machine.slice").is_ok());
        // kubelet sends the slice's path; the slice is its last part, if the path is that
        // slice's.
        let (cg, unit) = place(
            CgroupDriver::Systemd,
            "wharf.slice",
            Some("/kubepods.slice/kubepods-pod7.slice"),
            "p1",
        )
        .unwrap();
        assert_eq!(cg, "/kubepods.slice/kubepods-pod7.slice/wharf-pod-p1.scope");
        assert_eq!(unit.unwrap().slice, "kubepods-pod7.slice");
        let e = CgroupDriver::Systemd
            .check_parent("/other.slice/kubepods-pod7.slice")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a cgroupfs path"), "{e}");
        assert!(CgroupDriver::Cgroupfs.check_parent("/a/b").is_ok());
        assert!(CgroupDriver::parse("upstart").is_err());
    }
}
