//! The build cache: which image a step left, by what the step saw.
//!
//! A key is the digest of the parent image's id, the step's history text (its
//! instruction as expanded) and whatever else the step depends on (the build arguments a
//! RUN sees, the digests of the files a COPY writes). An entry is a file
//! `<root>/build-cache/<key>` holding the image id; it counts only while that image is
//! still in the store, so removing images never leaves a wrong hit.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use wharf_image::Image;
use wharf_image::digest::Digest;

use crate::engine::Engine;

/// The key of a step.
pub(super) fn key(parent: &Image, created_by: &str, extra: &[String]) -> String {
    let mut text = format!("{}\n{created_by}\n", parent.id);
    for e in extra {
        text.push_str(e);
        text.push('\n');
    }
    Digest::of(text.as_bytes()).hex().to_string()
}

/// The build cache's directory under the state root.
fn cache_dir_of(root: &Path) -> PathBuf {
    root.join("build-cache")
}

/// The ids of the images the build cache names (what image pruning keeps).
pub fn cached_image_ids(root: &Path) -> HashSet<String> {
    let Ok(entries) = std::fs::read_dir(cache_dir_of(root)) else {
        return HashSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|id| id.trim().to_string())
        .collect()
}

impl Engine {
    fn cache_dir(&self) -> PathBuf {
        cache_dir_of(&self.paths.root)
    }

    /// The image a step with this key left before, if it is still there.
    fn cached(&self, key: &str) -> Option<Image> {
        let id = std::fs::read_to_string(self.cache_dir().join(key)).ok()?;
        self.images.resolve(id.trim()).ok()
    }

    /// The step's image from the cache, told to `on`, unless the build asks for none.
    pub(super) fn cache_hit(
        &self,
        req: &super::BuildRequest,
        key: &str,
        on: &mut dyn FnMut(super::StepEvent<'_>),
    ) -> Option<Image> {
        let img = (!req.no_cache).then(|| self.cached(key)).flatten()?;
        on(super::StepEvent::Cached);
        Some(img)
    }

    /// Remember that the step with this key left `image` (best effort: a cache that cannot
    /// be written only makes the next build slower).
    pub(super) fn remember(&self, key: &str, image: &Image) {
        let dir = self.cache_dir();
        let _ = std::fs::create_dir_all(&dir);
        let _ = wharf_sys::fs::write_atomic(
            &dir.join(key),
            image.id.as_str().as_bytes(),
            0o600,
            wharf_sys::fs::Durability::Rename,
        );
    }
}

/// One entry of the build cache, as `system df` lists them.
#[derive(Debug, Clone)]
pub struct CacheEntry {
    /// The entry's key.
    pub key: String,
    /// The step image it names.
    pub image: String,
    /// The bytes of the layer that step added (0 for a config step).
    pub size: u64,
    /// When the step image was made (unix seconds).
    pub created: i64,
}

/// What [`Engine::prune_build_cache`] removed.
#[derive(Debug, Clone, Default)]
pub struct CachePruned {
    /// Cache entries forgotten.
    pub entries: usize,
    /// Step images removed (those without a name and not in use).
    pub images: Vec<String>,
    /// Bytes of content freed.
    pub bytes: u64,
}

impl Engine {
    /// The build cache's entries whose images are still there.
    pub fn build_cache(&self) -> Vec<CacheEntry> {
        let Ok(entries) = std::fs::read_dir(self.cache_dir()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let id = std::fs::read_to_string(e.path()).unwrap_or_default();
            let Ok(img) = self.images.resolve(id.trim()) else {
                continue;
            };
            let added_layer = img
                .config
                .history()
                .as_ref()
                .and_then(|h| h.last())
                .is_some_and(|h| !h.empty_layer().unwrap_or(false));
            out.push(CacheEntry {
                key: e.file_name().to_string_lossy().into_owned(),
                image: img.id.to_string(),
                size: if added_layer {
                    img.manifest.layers.last().map_or(0, |l| l.size)
                } else {
                    0
                },
                created: img.created_at,
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Forget every build cache entry and remove the step images behind them that have no
    /// name and no user (`wharf builder prune`, the Docker API's `/build/prune`); named
    /// images and images containers use stay.
    pub fn prune_build_cache(&self) -> crate::error::Result<CachePruned> {
        let mut out = CachePruned::default();
        let Ok(entries) = std::fs::read_dir(self.cache_dir()) else {
            return Ok(out);
        };
        for e in entries.flatten() {
            let id = std::fs::read_to_string(e.path()).unwrap_or_default();
            let _ = std::fs::remove_file(e.path());
            out.entries += 1;
            let id = id.trim();
            if let Ok(img) = self.images.resolve(id)
                && img.names.is_empty()
                && self.images.remove(id, false).is_ok()
            {
                out.images.push(id.to_string());
            }
        }
        // RUN --mount=type=cache directories go with the cache.
        let mounts = self.paths.root.join("build-cache-mounts");
        if mounts.exists() {
            out.bytes += wharf_sys::fs::disk_usage(&mounts).0;
            let _ = std::fs::remove_dir_all(&mounts);
        }
        out.bytes += self.images.gc()?.blob_bytes;
        Ok(out)
    }
}
