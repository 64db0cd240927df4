//! An image made from a container's changes (`wharf commit`): the base image's layers,
//! plus one layer holding what the container changed, plus the base config with
//! dockerfile-style changes, a history entry and a new creation time.

use std::io::Read;

use serde_json::{Map, Value, json};

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

/// One step of an image build: what changes from its parent image.
#[derive(Debug, Default)]
pub struct DeriveOptions<'a> {
    /// The new `config.config` object (Env, Cmd, Entrypoint, WorkingDir, User...), or
    /// None to keep the parent's.
    pub config: Option<&'a Map<String, Value>>,
    /// The history entry's `created_by`.
    pub created_by: &'a str,
    /// The history entry's comment.
    pub comment: Option<&'a str>,
    /// The image's author.
    pub author: Option<&'a str>,
    /// The creation time (unix seconds) of the image and its history entry; now when
    /// None (a build given `SOURCE_DATE_EPOCH` passes that).
    pub created: Option<u64>,
    /// The name to give it.
    pub name: Option<&'a str>,
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
        let mut inner = self.inner_config(base)?;
        for c in o.changes {
            crate::changes::apply(&mut inner, c)?;
        }
        self.derive(
            base,
            Some(layer),
            &DeriveOptions {
                config: Some(&inner),
                created_by: o.created_by,
                comment: o.comment,
                author: o.author,
                created: None,
                name,
            },
        )
        .map_err(|e| e.context("committing the container's changes"))
    }

    /// Make an image of `base`, plus `layer` when given (else the history entry is an
    /// `empty_layer` one, as a builder's ENV or CMD leaves), with the config and history
    /// entry `o` says.
    pub fn derive(
        &self,
        base: &Image,
        layer: Option<impl Read>,
        o: &DeriveOptions<'_>,
    ) -> Result<Image> {
        let reference = o.name.map(Reference::parse).transpose()?;
        let mut config = serde_json::to_value(&base.config)
            .map_err(|e| Error::Invalid(format!("the base image's config: {e}")))?;
        if !config.is_object() {
            return Err(Error::Invalid(
                "the base image's config is not an object".into(),
            ));
        }
        if let Some(inner) = o.config {
            config["config"] = Value::Object(inner.clone());
        }
        let lease = self.lease(24 * 3600)?;
        let mut layers = base.manifest.layers.clone();
        if let Some(layer) = layer {
            let staged = self.content.stage(layer)?;
            let layer_digest = {
                let g = self.gc_lock.shared()?;
                lease.add("blob", staged.digest.as_str())?;
                self.content.commit_staged(staged, None, &g)?
            };
            let layer_size = self.content.size(&layer_digest).unwrap_or(0);
            // An uncompressed layer: its digest is its diff id.
            match config["rootfs"]["diff_ids"].as_array_mut() {
                Some(ids) => ids.push(json!(layer_digest.to_string())),
                None => {
                    config["rootfs"] =
                        json!({"type": "layers", "diff_ids": [layer_digest.to_string()]})
                }
            }
            layers.push(Descriptor {
                media_type: manifest::OCI_LAYER.to_string(),
                digest: layer_digest.to_string(),
                size: layer_size,
                platform: None,
                annotations: None,
                urls: None,
            });
        }
        let when = o.created.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });
        let mut entry = json!({"created": rfc3339(when), "created_by": o.created_by});
        if let Some(c) = o.comment {
            entry["comment"] = json!(c);
        }
        if let Some(a) = o.author {
            entry["author"] = json!(a);
            config["author"] = json!(a);
        }
        if layers.len() == base.manifest.layers.len() {
            entry["empty_layer"] = json!(true);
        }
        match config.get_mut("history").and_then(Value::as_array_mut) {
            Some(h) => h.push(entry),
            None => config["history"] = json!([entry]),
        }
        config["created"] = json!(rfc3339(when));
        self.image_of(&lease, &config, layers, reference.as_ref())
    }
}

impl ImageStore {
    /// An image of nothing, a Dockerfile's `FROM scratch`: no layers, an empty config for
    /// this host's platform.
    pub fn scratch(&self) -> Result<Image> {
        let config = json!({
            "architecture": crate::manifest::Platform::host().architecture,
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": []},
            "history": [],
        });
        let lease = self.lease(24 * 3600)?;
        self.image_of(&lease, &config, Vec::new(), None)
    }

    /// The image's `config.config` object to build on: the config blob's (with docker's
    /// members), else the typed config's.
    pub fn inner_config(&self, image: &Image) -> Result<Map<String, Value>> {
        match self.docker_config(image) {
            Some(c) => Ok(c),
            None => base_inner_config(image),
        }
    }

    /// The image's `config.config` object as its config blob has it, with the members
    /// docker keeps there beside the OCI ones (Healthcheck, Shell, OnBuild), which the
    /// typed [`Image::config`] drops. None when the blob cannot be read.
    pub fn docker_config(&self, image: &Image) -> Option<Map<String, Value>> {
        let blob = self.content.read(&image.id).ok()?;
        let v: Value = serde_json::from_slice(&blob).ok()?;
        v.get("config")?.as_object().cloned()
    }
}

/// The base image's `config.config` object from its typed config (empty when it has
/// none).
fn base_inner_config(base: &Image) -> Result<Map<String, Value>> {
    let config = serde_json::to_value(&base.config)
        .map_err(|e| Error::Invalid(format!("the base image's config: {e}")))?;
    match config.get("config") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(Error::Invalid(
            "the base image's config.config is not an object".into(),
        )),
    }
}
