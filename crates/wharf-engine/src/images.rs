//! The engine's images: what the CLI, the CRI ImageService and the Docker API do with the
//! image store (list, inspect, pull, push, tag, remove, prune, load, save, import, mount,
//! usage), as engine operations with the engine's typed errors.
//!
//! A front end gets an [`Images`] handle and values (an [`Image`], [`ImageSummary`] rows,
//! archive reports), never the store itself: where images live, how their tables and blobs
//! are kept and how a registry is spoken to stay behind this face. The store's errors come
//! back as [`Error::Image`](crate::Error::Image), whose kind (not found, invalid, in use,
//! unauthorized...) each front end maps as it maps every engine error. Registry operations without the store
//! (a login check, a remote manifest) are in [`crate::registry`].
//!
//! One handle type serves two ways of opening: [`Engine::images`] lends the engine's own
//! store (what a command or a daemon call that holds an engine uses), and [`Images::open`]
//! opens the store alone, for work that needs no pod or container: the image commands of
//! the CLI (no reconcile of every pod for a `wharf images`) and the Docker API's streamed
//! pulls, pushes and saves, which run on threads of their own for as long as the client
//! reads.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use wharf_image::ImageStore;

use crate::engine::Engine;
use crate::error::Result;

pub use wharf_image::archive::{ArchiveFormat, Loaded};
pub use wharf_image::auth::Credentials;
pub use wharf_image::config::{DEFAULT_CONFIG_PATH, RegistriesConfig};
pub use wharf_image::digest::Digest;
pub use wharf_image::manifest::Platform;
pub use wharf_image::push::{BlobOutcome, PushReport};
pub use wharf_image::reference::Reference;
pub use wharf_image::store::HistoryStep;
pub use wharf_image::{GcStats, Image, ImageSummary, PullEvent, PullOptions, PullProgress};

/// The engine's images (see the module's documentation).
pub struct Images<'e> {
    store: Store<'e>,
}

/// The store behind a handle: the engine's, or one opened for the handle alone.
enum Store<'e> {
    Lent(&'e ImageStore),
    Own(Box<ImageStore>),
}

/// An image with where its layers are unpacked: what `image inspect` shows.
#[derive(Debug, Clone)]
pub struct ImageDetails {
    /// The image.
    pub image: Image,
    /// Its layer directories, top first (empty when they cannot be listed).
    pub layer_dirs: Vec<PathBuf>,
    /// Its config's `config` object as the blob has it (with docker's Healthcheck, Shell
    /// and OnBuild, which [`Image::config`] drops).
    pub docker_config: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What the images take on their filesystem (the CRI's ImageFsInfo).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsUsage {
    /// The directory measured: the state root the images are kept under.
    pub mountpoint: PathBuf,
    /// Bytes used below it.
    pub bytes: u64,
    /// Inodes used below it.
    pub inodes: u64,
}

impl crate::Error {
    /// Whether the image store had no image by the name or id asked for (this error itself,
    /// not one met within a pull or a load): front ends that take a missing image as no
    /// error (the CRI's ImageStatus and RemoveImage) ask this.
    pub fn is_image_not_found(&self) -> bool {
        matches!(self, crate::Error::Image(wharf_image::Error::NotFound(_)))
    }
}

impl Engine {
    /// The engine's images.
    pub fn images(&self) -> Images<'_> {
        Images {
            store: Store::Lent(&self.images),
        }
    }
}

impl Images<'static> {
    /// Open the images of the state under `root` and `run` alone, with `registries`'
    /// settings for pulls and pushes. A store that was deleted or truncated while state is
    /// left is refused, as [`Engine::open`] refuses it.
    pub fn open(root: &Path, run: &Path, registries: RegistriesConfig) -> Result<Self> {
        crate::system::refuse_lost_store(&crate::paths::Paths::new(root, run))?;
        let store = ImageStore::open_with(root, registries)?;
        Ok(Images {
            store: Store::Own(Box::new(store)),
        })
    }
}

impl Images<'_> {
    fn store(&self) -> &ImageStore {
        match &self.store {
            Store::Lent(s) => s,
            Store::Own(s) => s,
        }
    }

    /// Every (image, name) pair, newest image first, plus images without names.
    pub fn list(&self) -> Result<Vec<ImageSummary>> {
        Ok(self.store().list()?)
    }

    /// [`Images::list`] as `docker images` shows it: the builder's step images are
    /// intermediate images, listed only with `all`.
    pub fn list_shown(&self, all: bool) -> Result<Vec<ImageSummary>> {
        let rows = self.store().list()?;
        if all {
            return Ok(rows);
        }
        let steps = crate::build::cached_image_ids(self.store().root());
        Ok(rows
            .into_iter()
            .filter(|r| r.name.is_some() || !steps.contains(&r.id))
            .collect())
    }

    /// The image a name (normalised as docker does), a full or short id or a manifest
    /// digest names.
    pub fn resolve(&self, name_or_id: &str) -> Result<Image> {
        Ok(self.store().resolve(name_or_id)?)
    }

    /// [`Images::resolve`], with the image's layer directories.
    pub fn inspect(&self, name_or_id: &str) -> Result<ImageDetails> {
        let image = self.resolve(name_or_id)?;
        let layer_dirs = self.store().layer_dirs(&image).unwrap_or_default();
        let docker_config = self.docker_config(&image);
        Ok(ImageDetails {
            image,
            layer_dirs,
            docker_config,
        })
    }

    /// The image's config `config` object as its blob has it, with docker's members
    /// (Healthcheck, Shell, OnBuild) that [`Image::config`] drops; None when unreadable.
    pub fn docker_config(
        &self,
        image: &Image,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        self.store().docker_config(image)
    }

    /// The image's history, newest step first, each with the size of the layer it made.
    pub fn history(&self, image: &Image) -> Result<Vec<HistoryStep>> {
        Ok(self.store().history(image)?)
    }

    /// Pull `reference` (with `opts`' platform, credentials and parallelism), telling
    /// `progress` what happens: each front end draws it its own way.
    pub fn pull(
        &self,
        reference: &str,
        opts: &PullOptions,
        progress: &dyn PullProgress,
    ) -> Result<Image> {
        Ok(self.store().pull(reference, opts, progress)?)
    }

    /// Push the image named `name` (`registry/repo:tag`) there, calling `progress` after
    /// each blob with what became of it. Credentials are the user's (docker's config.json).
    pub fn push(
        &self,
        name: &str,
        progress: &mut dyn FnMut(&Digest, &BlobOutcome),
    ) -> Result<PushReport> {
        Ok(self.store().push(name, progress)?)
    }

    /// Give `image` the name `name` (taken from the image that had it); returns the name
    /// as stored.
    pub fn tag(&self, image: &Image, name: &str) -> Result<String> {
        Ok(self.store().tag(image, name)?)
    }

    /// Remove a name, or an image with all its names (refused when it has several unless
    /// `force`, and while a container or a mount uses it). Returns the names removed and
    /// the image's id if the image went.
    pub fn remove(&self, name_or_id: &str, force: bool) -> Result<(Vec<String>, Option<Digest>)> {
        Ok(self.store().remove(name_or_id, force)?)
    }

    /// Remove the images without names (with `all`, every image nothing uses), then the
    /// content no image needs. Returns the images removed and what the collection freed.
    pub fn prune(&self, all: bool) -> Result<(Vec<Digest>, GcStats)> {
        // The build cache's step images are the cache's to keep: `builder prune` (and
        // `system prune`) remove them, as BuildKit's cache is apart from docker's images.
        let keep = crate::build::cached_image_ids(self.store().root());
        Ok(self.store().prune_keeping(all, &keep)?)
    }

    /// Remove the content no image, container, mount or running pull needs.
    pub fn collect_garbage(&self) -> Result<GcStats> {
        Ok(self.store().gc()?)
    }

    /// Load the images of an archive (docker save or OCI layout, compressed or not) that
    /// its user knows as `name` (errors name it).
    pub fn load(&self, input: impl Read, name: &str) -> Result<Vec<Loaded>> {
        Ok(self.store().load_named(input, name)?)
    }

    /// Write the images `names` name to `out` as an archive of `format`.
    pub fn save(&self, names: &[&str], format: ArchiveFormat, out: impl Write) -> Result<()> {
        Ok(self.store().save(names, format, out)?)
    }

    /// Make a one-layer image of a root filesystem tarball, named `name` if given, its
    /// config changed by dockerfile instructions (`changes`) and its history step
    /// commented with `message`.
    pub fn import(
        &self,
        input: impl Read,
        name: Option<&str>,
        changes: &[String],
        message: Option<&str>,
    ) -> Result<Image> {
        Ok(self.store().import_with(input, name, changes, message)?)
    }

    /// Mount a read-only view of the image; returns where.
    pub fn mount(&self, image: &Image) -> Result<PathBuf> {
        Ok(self.store().mount_image(image)?)
    }

    /// Unmount the image's view; false if it was not mounted.
    pub fn unmount(&self, image: &Image) -> Result<bool> {
        Ok(self.store().unmount_image(image)?)
    }

    /// What the images take on their filesystem, measured now.
    pub fn filesystem_usage(&self) -> FsUsage {
        let mountpoint = self.store().root().to_path_buf();
        let (bytes, inodes) = wharf_sys::fs::disk_usage(&mountpoint);
        FsUsage {
            mountpoint,
            bytes,
            inodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Error;

    #[test]
    fn only_the_stores_own_not_found_is_a_missing_image() {
        let missing = || wharf_image::Error::NotFound("no such image: x".into());
        assert!(Error::Image(missing()).is_image_not_found());
        // A blob missing within a pull is the pull's failure, not a missing image.
        assert!(!Error::Image(missing().context("pulling x")).is_image_not_found());
        let pod = Error::NotFound {
            kind: "pod",
            name: "x".into(),
        };
        assert!(!pod.is_image_not_found());
    }
}
