//! `wharf push`: an image of the store to a registry, as docker pushes: each layer and the
//! config are skipped when the repository has them, linked from another repository of the
//! same registry that had them (a cross-repository mount) when the image was pulled from
//! there, else uploaded; the manifest goes last, under the tag.

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::reference::Reference;
use crate::registry::Client;
use crate::store::ImageStore;

/// What happened to one blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobOutcome {
    /// The repository had it.
    Exists,
    /// Linked from another repository of the registry.
    Mounted(String),
    /// Sent.
    Pushed,
}

/// What a push did.
#[derive(Debug, Clone)]
pub struct PushReport {
    /// The repository pushed to (`registry/path`).
    pub repository: String,
    /// The tag.
    pub tag: String,
    /// Each blob (layers, then the config) and what happened to it.
    pub blobs: Vec<(Digest, BlobOutcome)>,
    /// The manifest's digest and size.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: usize,
}

impl ImageStore {
    /// Push the image named `name` (`registry/repo:tag`) to that place, calling `progress`
    /// after each blob.
    pub fn push(
        &self,
        name: &str,
        progress: &mut dyn FnMut(&Digest, &BlobOutcome),
    ) -> Result<PushReport> {
        let r = Reference::parse(name)?;
        let tag = r.tag.clone().unwrap_or_else(|| "latest".into());
        let img = self.resolve(name)?;
        let client = Client::new(self.registries.clone(), None);
        let repo = client.repository(&r);
        // Where the blobs may already be: the image's other names on the same registry.
        let sources: Vec<String> = img
            .names
            .iter()
            .filter_map(|n| Reference::parse(n).ok())
            .filter(|o| o.registry == r.registry && o.repository != r.repository)
            .map(|o| o.repository)
            .collect();
        let mut blobs: Vec<Digest> = img
            .manifest
            .layers
            .iter()
            .map(|l| l.digest.parse::<Digest>())
            .collect::<Result<_>>()?;
        blobs.push(img.manifest.config.digest.parse::<Digest>()?);
        let mut report = PushReport {
            repository: format!("{}/{}", r.registry, r.repository),
            tag: tag.clone(),
            blobs: Vec::new(),
            digest: img.manifest_digest.clone(),
            size: 0,
        };
        for d in blobs {
            let outcome = if repo.blob_exists(&d)? {
                BlobOutcome::Exists
            } else if let Some(from) = sources
                .iter()
                .find(|from| repo.mount_blob(&d, from).unwrap_or(false))
            {
                BlobOutcome::Mounted(from.clone())
            } else {
                let data = self.content.read(&d).map_err(|e| {
                    e.context(format!(
                        "blob {d} of {name} is not in the store (was it pulled with its layers?)"
                    ))
                })?;
                repo.upload_blob(&d, &data)?;
                BlobOutcome::Pushed
            };
            progress(&d, &outcome);
            report.blobs.push((d, outcome));
        }
        let manifest = self.content.read(&img.manifest_digest)?;
        if Digest::of(&manifest) != img.manifest_digest {
            return Err(Error::Invalid(format!(
                "the manifest of {name} in the store does not match its digest"
            )));
        }
        repo.put_manifest(&tag, &img.manifest_media_type, &manifest)?;
        report.size = manifest.len();
        Ok(report)
    }
}
