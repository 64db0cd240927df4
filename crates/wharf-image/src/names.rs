//! Image names kept as files too (`<root>/image/names/<sha256 of the name>.json`), beside
//! their rows in the store, so that a lost or damaged store can be rebuilt with its names
//! ([`crate::ImageStore::restore`]). One file per name: processes that tag and untag at once
//! never write the same file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{IoContext, Result};

/// What a name file holds: the name, and the image row it leads to.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NameFile {
    /// The name (`docker.io/library/busybox:latest`).
    pub name: String,
    /// The image id (config digest).
    pub image_id: String,
    /// What the name resolved to (an index or a manifest) and its media type.
    pub target_digest: String,
    /// See `target_digest`.
    pub target_media_type: String,
    /// The platform manifest of the image, and its media type.
    pub manifest_digest: String,
    /// See `manifest_digest`.
    pub manifest_media_type: String,
}

/// The directory of name files.
pub fn dir(image_root: &Path) -> PathBuf {
    image_root.join("names")
}

fn path(image_root: &Path, name: &str) -> PathBuf {
    dir(image_root).join(format!("{}.json", Digest::of(name.as_bytes()).hex()))
}

/// Write (or replace) the file of `f.name`.
pub fn save(image_root: &Path, f: &NameFile) -> Result<()> {
    let d = dir(image_root);
    std::fs::create_dir_all(&d).ctx(|| format!("creating {}", d.display()))?;
    let p = path(image_root, &f.name);
    let data = serde_json::to_vec(f).expect("json");
    wharf_sys::fs::write_atomic(&p, &data, 0o644, wharf_sys::fs::Durability::Rename)
        .ctx(|| format!("writing {}", p.display()))
}

/// Remove the file of `name` (nothing if there is none).
pub fn remove(image_root: &Path, name: &str) {
    let _ = std::fs::remove_file(path(image_root, name));
}

/// Every name file that can be read.
pub fn load_all(image_root: &Path) -> Vec<NameFile> {
    let Ok(rd) = std::fs::read_dir(dir(image_root)) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}
