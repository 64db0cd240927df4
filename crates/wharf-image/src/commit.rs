//! An image made from a container's changes (`wharf commit`): the base image's layers,
//! plus one layer holding what the container changed, plus the base config with
//! dockerfile-style changes, a history entry and a new creation time.

use std::io::Read;

use serde_json::{Value, json};

use crate::archive::rfc3339;
use crate::error::{Error, Result};
use crate::manifest::{self, Descriptor};
use crate::reference::Reference;
use crate::store::{Image, ImageStore};

/// What `commit` records besides the new layer.
#[derive(Debug, Default)]
pub struct CommitOptions<'a> {
    /// Dockerfile instructions for the config (see [`crate::changes`]).
    pub changes: &'a [String],
    /// The history entry's comment (`-m`).
    pub comment: Option<&'a str>,
    /// The image's author (`-a`).
    pub author: Option<&'a str>,
    /// The history entry's `created_by` (what the container ran).
    pub created_by: &'a str,
}

impl ImageStore {
    /// Make an image of `base` plus `layer` (an uncompressed layer tar, whiteouts as
    /// `.wh.` entries), named `name` when given.
    pub fn commit(
        &self,
        base: &Image,
        layer: impl Read,
        name: Option<&str>,
        o: &CommitOptions<'_>,
    ) -> Result<Image> {
        let reference = name.map(Reference::parse).transpose()?;
        let mut config = serde_json::to_value(&base.config)
            .map_err(|e| Error::Invalid(format!("the base image's config: {e}")))?;
        {
            let inner = config
                .as_object_mut()
                .ok_or_else(|| Error::Invalid("the base image's config is not an object".into()))?
                .entry("config")
                .or_insert_with(|| json!({}));
            if inner.is_null() {
                *inner = json!({});
            }
            let inner = inner.as_object_mut().ok_or_else(|| {
                Error::Invalid("the base image's config.config is not an object".into())
            })?;
            for c in o.changes {
                crate::changes::apply(inner, c)?;
            }
        }
        let lease = self.lease(24 * 3600)?;
        let staged = self.content.stage(layer)?;
        let layer_digest = {
            let g = self.gc_lock.shared()?;
            lease.add("blob", staged.digest.as_str())?;
            self.content.commit_staged(staged, None, &g)?
        };
        let layer_size = self.content.size(&layer_digest).unwrap_or(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        // An uncompressed layer: its digest is its diff id.
        config["rootfs"]["diff_ids"]
            .as_array_mut()
            .ok_or_else(|| Error::Invalid("the base image's config has no rootfs.diff_ids".into()))?
            .push(json!(layer_digest.to_string()));
        let mut entry = json!({"created": rfc3339(now), "created_by": o.created_by});
        if let Some(c) = o.comment {
            entry["comment"] = json!(c);
        }
        if let Some(a) = o.author {
            entry["author"] = json!(a);
            config["author"] = json!(a);
        }
        match config.get_mut("history").and_then(Value::as_array_mut) {
            Some(h) => h.push(entry),
            None => config["history"] = json!([entry]),
        }
        config["created"] = json!(rfc3339(now));
        let mut layers = base.manifest.layers.clone();
        layers.push(Descriptor {
            media_type: manifest::OCI_LAYER.to_string(),
            digest: layer_digest.to_string(),
            size: layer_size,
            platform: None,
            annotations: None,
            urls: None,
        });
        self.image_of(&lease, &config, layers, reference.as_ref())
            .map_err(|e| e.context("committing the container's changes"))
    }
}
