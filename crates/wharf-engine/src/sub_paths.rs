//! Mounts of a path inside a volume (Kubernetes' subPath): of a pod volume or hostPath
//! ([`SUB_PATH_KIND`]) or of a named volume (its kind with the `subpath=` option). In the
//! bundle each is a bind of its stage, `<pod volumes>/.subpaths/<id>/<n>`; the pod's shim
//! stages it before each runtime create, so the path is resolved when the container
//! starts (after its pod's init containers ran), never outside its volume.

use std::path::{Component, Path, PathBuf};

use wharf_runtime::sub_path::Missing;
use wharf_shim::protocol::SubPathStage;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::image_volumes::{SUBPATH, subpath};
use crate::model::{ContainerSpec, VolumeMount};
use crate::named_volumes;
use crate::pod_volumes::{MUST_EXIST, SUB_PATH_KIND, WORLD_WRITABLE, stages_dir};

impl Engine {
    /// The volume directory and path of mount `m` when it mounts a path inside a volume.
    fn sub_path_of(&self, m: &VolumeMount) -> Option<(PathBuf, PathBuf)> {
        let sub = PathBuf::from(subpath(m)?);
        match m.kind.as_str() {
            SUB_PATH_KIND => Some((m.source.clone(), sub)),
            named_volumes::KIND => Some((self.volume_data(&m.source.to_string_lossy()), sub)),
            _ => None,
        }
    }

    /// What the shim stages for container `id` of pod `pod_id` (mounts in `spec` order).
    pub(crate) fn sub_path_stages(
        &self,
        pod_id: &str,
        id: &str,
        spec: &ContainerSpec,
    ) -> Vec<(usize, SubPathStage)> {
        let dir = stages_dir(&self.pod_volumes_dir(pod_id), id);
        spec.mounts
            .iter()
            .enumerate()
            .filter_map(|(j, m)| {
                let (volume, path) = self.sub_path_of(m)?;
                Some((
                    j,
                    SubPathStage {
                        volume,
                        path,
                        stage: dir.join(j.to_string()),
                        missing: if m.options.iter().any(|o| o == MUST_EXIST) {
                            Missing::Refuse
                        } else {
                            Missing::MakeDir {
                                world_writable: m.options.iter().any(|o| o == WORLD_WRITABLE),
                            }
                        },
                    },
                ))
            })
            .collect()
    }

    /// The spec with each mount of a path inside a volume a bind of its stage, after
    /// checking the path stays inside (relative, no `..`).
    pub(crate) fn bind_sub_paths(
        &self,
        pod_id: &str,
        id: &str,
        spec: &ContainerSpec,
    ) -> Result<ContainerSpec> {
        let name = spec.name.as_deref().unwrap_or("container");
        let mut out = spec.clone();
        for (j, s) in self.sub_path_stages(pod_id, id, spec) {
            let m = &mut out.mounts[j];
            if !inside(&s.path) {
                return Err(Error::Invalid(format!(
                    "container {name}: mount at {}: subpath {:?} must be a relative path \
                     without '..'",
                    m.destination.display(),
                    s.path
                )));
            }
            m.source = s.stage;
            m.kind = "bind".into();
            m.options.retain(|o| {
                !o.starts_with(SUBPATH)
                    && ![WORLD_WRITABLE, MUST_EXIST, named_volumes::ANONYMOUS].contains(&o.as_str())
            });
        }
        Ok(out)
    }
}

/// A non-empty relative path of plain names only.
fn inside(path: &Path) -> bool {
    path.components().next().is_some()
        && path.components().all(|c| matches!(c, Component::Normal(_)))
}
