//! Image volumes (the CRI's Mount.image, Kubernetes' `image` volumes): an image's contents
//! mounted read-only into a container. The image store's read-only view of the image is
//! mounted once and shared by the containers that mount it; it is unmounted when the last
//! of them goes. A sub path must stay inside the image: it is resolved on the host, where a
//! symlink in the image could otherwise lead anywhere.

use std::path::{Path, PathBuf};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::{ContainerSpec, VolumeMount};

/// The mount kind of an image volume (its source: the image, by name or id).
pub const KIND: &str = "image";
/// The option naming a path inside the image (`subpath=etc`), or inside the volume of a
/// named-volume or `pod_volumes::SUB_PATH_KIND` mount.
pub const SUBPATH: &str = "subpath=";

/// The path inside the volume a mount names with [`SUBPATH`], if it does.
pub fn subpath(v: &VolumeMount) -> Option<&str> {
    v.options.iter().find_map(|o| o.strip_prefix(SUBPATH))
}

/// The [`SUBPATH`] option naming `path`.
pub fn subpath_option(path: impl std::fmt::Display) -> String {
    format!("{SUBPATH}{path}")
}

impl Engine {
    /// The spec with its image volumes' images named by id (so that their users can be
    /// counted), after checking each is read-only and its image is in the store.
    pub(crate) fn pin_image_volumes(&self, spec: &ContainerSpec) -> Result<ContainerSpec> {
        let name = spec.name.as_deref().unwrap_or("container");
        let mut spec = spec.clone();
        for v in spec.mounts.iter_mut().filter(|v| v.kind == KIND) {
            if !v.readonly {
                return Err(Error::Invalid(format!(
                    "container {name}: image volume {} at {} must be read-only",
                    v.source.display(),
                    v.destination.display()
                )));
            }
            let image = self.images.resolve(&v.source.display().to_string())?;
            v.source = PathBuf::from(image.id.to_string());
        }
        Ok(spec)
    }

    /// The spec as the runtime gets it: each image volume a read-only bind of the image's
    /// view (mounted now if it is not yet), or of a path inside it.
    pub(crate) fn bind_image_volumes(&self, spec: &ContainerSpec) -> Result<ContainerSpec> {
        let name = spec.name.as_deref().unwrap_or("container");
        let mut spec = spec.clone();
        for v in spec.mounts.iter_mut().filter(|v| v.kind == KIND) {
            let image = self.images.resolve(&v.source.display().to_string())?;
            let view = self.images.mount_image(&image)?;
            let source = match subpath(v) {
                None => view,
                Some(sub) => {
                    let leads_out = |c: std::path::Component<'_>| {
                        matches!(
                            c,
                            std::path::Component::ParentDir | std::path::Component::RootDir
                        )
                    };
                    if Path::new(sub).components().any(leads_out) {
                        return Err(Error::Invalid(format!(
                            "container {name}: sub path {sub:?} of image volume {} leads out \
                             of the image",
                            v.source.display()
                        )));
                    }
                    let inside = std::fs::canonicalize(view.join(sub)).map_err(|e| {
                        Error::Invalid(format!(
                            "container {name}: sub path {sub:?} of image volume {}: {e}",
                            v.source.display()
                        ))
                    })?;
                    // A symlink in the image that leads out of it.
                    if !inside.starts_with(&view) {
                        return Err(Error::Invalid(format!(
                            "container {name}: sub path {sub:?} of image volume {} leads out \
                             of the image",
                            v.source.display()
                        )));
                    }
                    inside
                }
            };
            v.source = source;
            v.kind = "bind".into();
            v.options.clear();
        }
        Ok(spec)
    }

    /// Unmount the views of `spec`'s image volumes that no other container mounts.
    pub(crate) fn release_image_volumes(&self, spec: &ContainerSpec) {
        let mine: Vec<&Path> = spec
            .mounts
            .iter()
            .filter(|v| v.kind == KIND)
            .map(|v| v.source.as_path())
            .collect();
        if mine.is_empty() {
            return;
        }
        let others = self.db.containers(None).unwrap_or_default();
        for id in mine {
            let used = others.iter().any(|c| {
                c.spec
                    .mounts
                    .iter()
                    .any(|v| v.kind == KIND && v.source == id)
            });
            if !used && let Ok(image) = self.images.resolve(&id.display().to_string()) {
                let _ = self.images.unmount_image(&image);
            }
        }
    }
}
