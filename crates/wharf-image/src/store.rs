//! [`ImageStore`]: the image subsystem's entry point (content store + snapshots + metadata).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use oci_spec::image::ImageConfiguration;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::config::RegistriesConfig;
use crate::content::ContentStore;
use crate::db;
use crate::digest::{Digest, chain_ids};
use crate::error::{Error, IoContext, Result};
use crate::lock::GcLock;
use crate::manifest::{self, Manifest, Parsed};
use crate::reference::Reference;
use crate::snapshot::{self, Snapshots};

/// Images on disk under a Wharf root: `<root>/image/` (content, snapshots, locks) and the
/// image tables of `<root>/wharf.db`. Safe to use from several processes at once.
pub struct ImageStore {
    pub(crate) root: PathBuf,
    pub(crate) content: ContentStore,
    pub(crate) snapshots: Snapshots,
    pub(crate) gc_lock: GcLock,
    pub(crate) registries: RegistriesConfig,
    /// `<root>/wharf.db`, connected at the first call that reads or writes it: most
    /// commands (`ps`, `inspect`, `exec`, `stop`) never touch an image, and a connection
    /// costs its pragmas and a parse of the store's schema (0.3-0.5 ms of a 4 ms command).
    db_path: PathBuf,
    conn: Mutex<Option<Connection>>,
}

/// The image store's connection, held (see [`ImageStore::conn`]).
pub(crate) struct ConnGuard<'a>(MutexGuard<'a, Option<Connection>>);

impl std::ops::Deref for ConnGuard<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.0.as_ref().expect("connected before the guard is made")
    }
}

impl std::ops::DerefMut for ConnGuard<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.0.as_mut().expect("connected before the guard is made")
    }
}

/// An image in the store.
#[derive(Clone, Debug)]
pub struct Image {
    /// Image id: the config digest.
    pub id: Digest,
    /// Names (`registry/repo:tag` or `registry/repo@digest`) that point to it.
    pub names: Vec<String>,
    /// The (platform) manifest's digest.
    pub manifest_digest: Digest,
    /// The manifest's media type.
    pub manifest_media_type: String,
    /// The manifest.
    pub manifest: Manifest,
    /// The image config (Entrypoint, Cmd, Env, WorkingDir, User, ExposedPorts, StopSignal...).
    pub config: ImageConfiguration,
    /// Layer diff ids, base first.
    pub diff_ids: Vec<Digest>,
    /// Chain id of the top layer's snapshot (None for an image without layers).
    pub top_chain_id: Option<Digest>,
    /// Manifest + config + compressed layers, in bytes.
    pub size: u64,
    /// When the image entered the store (unix seconds).
    pub created_at: i64,
}

/// A container's root filesystem: mount it with [`Rootfs::mount`] (overlayfs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rootfs {
    /// The image's layer directories, top first.
    pub lower_dirs: Vec<PathBuf>,
    /// The container's writable layer.
    pub upper_dir: PathBuf,
    /// overlayfs' work directory (same filesystem as `upper_dir`).
    pub work_dir: PathBuf,
}

impl Rootfs {
    /// Mount the overlay at `target` (an existing directory).
    pub fn mount(&self, target: &Path) -> Result<()> {
        snapshot::mount_overlay(
            &self.lower_dirs,
            Some((&self.upper_dir, &self.work_dir)),
            target,
        )
    }
}

/// One step of an image's history.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryStep {
    /// When (RFC 3339, as the config says).
    pub created: String,
    /// The command that made it.
    pub created_by: String,
    /// Its comment.
    pub comment: String,
    /// The unpacked size of the layer it made.
    pub size: u64,
}

/// A row of `wharf images`.
#[derive(Clone, Debug, Serialize)]
pub struct ImageSummary {
    /// Image id (config digest).
    pub id: String,
    /// A name (one row per name; `None` for an image without names).
    pub name: Option<String>,
    /// Manifest digest.
    pub digest: String,
    /// Bytes.
    pub size: u64,
    /// Unix seconds.
    pub created_at: i64,
}

/// What GC removed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcStats {
    /// Blobs removed.
    pub blobs: usize,
    /// Their bytes.
    pub blob_bytes: u64,
    /// Snapshots removed (rows and orphan directories).
    pub snapshots: usize,
    /// Interrupted downloads and unpacks cleaned.
    pub partials: usize,
}

/// What [`ImageStore::restore`] rebuilt and what it could not.
#[derive(Debug, Default)]
pub struct RestoreReport {
    /// Snapshot rows restored.
    pub snapshots: usize,
    /// Snapshot directories without a marker (made before markers existed, or damaged).
    pub unknown_snapshots: Vec<PathBuf>,
    /// Names restored with their images.
    pub names: Vec<String>,
    /// Names that could not be (with why).
    pub lost_names: Vec<String>,
}

impl ImageStore {
    /// Open (creating) the store under `root` (`--root`, default `/var/lib/wharf`).
    pub fn open(root: &Path) -> Result<ImageStore> {
        Self::open_with(root, RegistriesConfig::default())
    }

    /// Open with registry settings (mirrors, insecure hosts) from Wharf's config file.
    pub fn open_with(root: &Path, registries: RegistriesConfig) -> Result<ImageStore> {
        // Absolute, so mount options and printed paths do not depend on the cwd.
        let root = &std::path::absolute(root).ctx(|| format!("resolving {}", root.display()))?;
        let dir = root.join("image");
        std::fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
        // Unpacked images hold setuid binaries and device nodes: only root may walk in.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .ctx(|| format!("chmod {}", dir.display()))?;
        Ok(ImageStore {
            root: root.to_path_buf(),
            content: ContentStore::open(&dir.join("content"))?,
            snapshots: Snapshots::open(&dir.join("snapshots"))?,
            gc_lock: GcLock::new(&dir.join("gc.lock")),
            registries,
            db_path: root.join("wharf.db"),
            conn: Mutex::new(None),
        })
    }

    /// The state root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn image_root(&self) -> PathBuf {
        self.root.join("image")
    }

    /// Rebuild the image tables of a new, empty store from what is on disk: snapshot rows
    /// from their directories' markers, images and names from the name files (with their
    /// manifests and configs from the content store). Images that had no name, and
    /// snapshots made before markers existed, cannot be told apart: their directories are
    /// listed in the report, and the next `wharf image prune` frees them.
    pub fn restore(&self) -> Result<RestoreReport> {
        let mut report = RestoreReport::default();
        let (restored, unknown) = self.snapshots.restore_rows(&*self.conn()?)?;
        report.snapshots = restored;
        report.unknown_snapshots = unknown;
        for f in crate::names::load_all(&self.image_root()) {
            match self.restore_name(&f) {
                Ok(()) => report.names.push(f.name),
                Err(e) => report.lost_names.push(format!("{}: {e}", f.name)),
            }
        }
        Ok(report)
    }

    fn restore_name(&self, f: &crate::names::NameFile) -> Result<()> {
        let id: Digest = f.image_id.parse()?;
        let md: Digest = f.manifest_digest.parse()?;
        let target: Digest = f.target_digest.parse()?;
        let config = self.content.read(&id)?;
        let (_, diff_ids) = parse_config(&config)?;
        let chain = image_chain(&diff_ids);
        if let Some(top) = chain.last()
            && self.snapshots.get(&*self.conn()?, top.as_str())?.is_none()
        {
            return Err(Error::NotFound(format!(
                "its layers' snapshot {top} is not on disk; pull it again"
            )));
        }
        let size = self.unpacked_size(chain.last())?;
        self.record_image(
            &id,
            &md,
            &f.manifest_media_type,
            chain.last(),
            size,
            Some((&f.name, &target, &f.target_media_type)),
        )
    }

    /// The content store.
    pub fn content(&self) -> &ContentStore {
        &self.content
    }

    /// The store's connection, made at the first call (a failure to make it is that
    /// call's error, and the next call tries again).
    pub(crate) fn conn(&self) -> Result<ConnGuard<'_>> {
        let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(db::open(&self.db_path)?);
        }
        Ok(ConnGuard(slot))
    }

    /// Whether this store has connected to `wharf.db` (see [`ImageStore::conn`]): a
    /// process whose last connection closes checkpoints the store's log, and the engine
    /// leaves that to this one when it exists.
    pub fn connected(&self) -> bool {
        self.conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Find an image by name (normalised as docker does), full or short id (`sha256:` prefix
    /// optional, at least 4 hex digits), or manifest digest.
    pub fn resolve(&self, name_or_id: &str) -> Result<Image> {
        let id = self.resolve_id(name_or_id)?;
        self.load_image(&id)
    }

    fn resolve_id(&self, s: &str) -> Result<Digest> {
        let conn = self.conn()?;
        if let Ok(r) = Reference::parse(s) {
            let id: Option<String> = conn
                .query_row(
                    "SELECT image_id FROM image_names WHERE name = ?1",
                    [r.store_name()],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = id {
                return id.parse();
            }
            // `repo@digest` of an image pulled by tag: the manifest digest under a name of
            // that repository (the repo digests the CRI lists).
            if let Some(d) = &r.digest {
                let id: Option<String> = conn
                    .query_row(
                        "SELECT i.id FROM image_images i JOIN image_names n ON n.image_id = i.id \
                         WHERE i.manifest_digest = ?1 \
                         AND substr(n.name, 1, length(?2) + 1) IN (?2 || ':', ?2 || '@') LIMIT 1",
                        [d.to_string(), r.name()],
                        |r| r.get(0),
                    )
                    .optional()?;
                if let Some(id) = id {
                    return id.parse();
                }
            }
        }
        let hexpart = s.strip_prefix("sha256:").unwrap_or(s);
        if hexpart.len() >= 4 && hexpart.bytes().all(|b| b.is_ascii_hexdigit()) {
            let pat = format!("sha256:{}%", hexpart.to_ascii_lowercase());
            let mut st = conn.prepare(
                "SELECT id FROM image_images WHERE id LIKE ?1 OR manifest_digest LIKE ?1",
            )?;
            let ids: Vec<String> = st
                .query_map([&pat], |r| r.get(0))?
                .collect::<std::result::Result<_, _>>()?;
            match ids.len() {
                1 => return ids[0].parse(),
                n if n > 1 => {
                    return Err(Error::Invalid(format!(
                        "image id prefix {s:?} is ambiguous ({n} images)"
                    )));
                }
                _ => {}
            }
        }
        Err(Error::NotFound(format!("image not known: {s}")))
    }

    /// Load image `id` from the metadata store and its blobs.
    pub fn load_image(&self, id: &Digest) -> Result<Image> {
        let conn = self.conn()?;
        let row: Option<(String, String, String, i64, i64)> = conn
            .query_row(
                "SELECT manifest_digest, manifest_media_type, top_chain_id, size, created_at FROM image_images WHERE id = ?1",
                [id.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()?;
        let (md, mmt, top, size, created_at) =
            row.ok_or_else(|| Error::NotFound(format!("image not known: {id}")))?;
        let mut st =
            conn.prepare("SELECT name FROM image_names WHERE image_id = ?1 ORDER BY name")?;
        let names: Vec<String> = st
            .query_map([id.as_str()], |r| r.get(0))?
            .collect::<std::result::Result<_, _>>()?;
        drop(st);
        drop(conn);
        let manifest_digest: Digest = md.parse()?;
        let manifest = match manifest::parse(&self.content.read(&manifest_digest)?, &mmt)? {
            Parsed::Manifest(m) => m,
            Parsed::Index(_) => {
                return Err(Error::Invalid(format!("image {id}: manifest is an index")));
            }
        };
        let (config, diff_ids) = parse_config(&self.content.read(id)?)?;
        Ok(Image {
            id: id.clone(),
            names,
            manifest_digest,
            manifest_media_type: mmt,
            manifest,
            config,
            diff_ids,
            top_chain_id: if top.is_empty() {
                None
            } else {
                Some(top.parse()?)
            },
            size: size as u64,
            created_at,
        })
    }

    /// Every (image, name) pair, plus images without names.
    pub fn list(&self) -> Result<Vec<ImageSummary>> {
        let conn = self.conn()?;
        let mut st = conn.prepare(
            "SELECT i.id, n.name, i.manifest_digest, i.size, i.created_at FROM image_images i \
             LEFT JOIN image_names n ON n.image_id = i.id ORDER BY i.created_at DESC, n.name",
        )?;
        let rows = st.query_map([], |r| {
            Ok(ImageSummary {
                id: r.get(0)?,
                name: r.get(1)?,
                digest: r.get(2)?,
                size: r.get::<_, i64>(3)? as u64,
                created_at: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// An image's size as `wharf images` shows it: what its layers unpack to (docker's
    /// SIZE), not what they weigh compressed.
    pub(crate) fn unpacked_size(&self, top_chain: Option<&Digest>) -> Result<u64> {
        match top_chain {
            Some(top) => self.snapshots.chain_size(&*self.conn()?, top.as_str()),
            None => Ok(0),
        }
    }

    /// Record an image (after its content and snapshots are committed) under `name`.
    pub(crate) fn record_image(
        &self,
        id: &Digest,
        manifest_digest: &Digest,
        manifest_media_type: &str,
        top_chain: Option<&Digest>,
        size: u64,
        name: Option<(&str, &Digest, &str)>,
    ) -> Result<()> {
        // Under the GC lock: a collection must not miss both this row and the lease that
        // protected the content until now (the caller drops it after this).
        let _g = self.gc_lock.shared()?;
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO image_images (id, manifest_digest, manifest_media_type, top_chain_id, size, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE SET \
             manifest_digest = excluded.manifest_digest, manifest_media_type = excluded.manifest_media_type, \
             top_chain_id = excluded.top_chain_id, size = excluded.size",
            params![
                id.as_str(),
                manifest_digest.as_str(),
                manifest_media_type,
                top_chain.map(|c| c.to_string()).unwrap_or_default(),
                size as i64,
                db::now()
            ],
        )?;
        if let Some((name, target, target_mt)) = name {
            crate::names::save(
                &self.image_root(),
                &crate::names::NameFile {
                    name: name.to_string(),
                    image_id: id.to_string(),
                    target_digest: target.to_string(),
                    target_media_type: target_mt.to_string(),
                    manifest_digest: manifest_digest.to_string(),
                    manifest_media_type: manifest_media_type.to_string(),
                },
            )?;
            tx.execute(
                "INSERT INTO image_names (name, image_id, target_digest, target_media_type, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO UPDATE SET image_id = excluded.image_id, \
                 target_digest = excluded.target_digest, target_media_type = excluded.target_media_type, \
                 updated_at = excluded.updated_at",
                params![name, id.as_str(), target.as_str(), target_mt, db::now()],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Add name `name` (normalised) to image `image` (`wharf tag`-like; used by load/import).
    pub fn tag(&self, image: &Image, name: &str) -> Result<String> {
        let r = Reference::parse(name)?;
        let n = r.store_name();
        self.record_image(
            &image.id,
            &image.manifest_digest,
            &image.manifest_media_type,
            image.top_chain_id.as_ref(),
            image.size,
            Some((&n, &image.manifest_digest, &image.manifest_media_type)),
        )?;
        Ok(n)
    }

    /// The image's history (its config's, newest first), each step with the unpacked size
    /// of the layer it made (0 for steps that made none), as `docker history` shows it.
    pub fn history(&self, image: &Image) -> Result<Vec<HistoryStep>> {
        let chain = image_chain(&image.diff_ids);
        let mut layer_sizes = Vec::new();
        let mut below = 0;
        for c in &chain {
            let total = self.unpacked_size(Some(c))?;
            layer_sizes.push(total.saturating_sub(below));
            below = total;
        }
        let mut layers = layer_sizes.into_iter();
        let mut steps: Vec<HistoryStep> = image
            .config
            .history()
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|h| HistoryStep {
                created: h.created().clone().unwrap_or_default(),
                created_by: h.created_by().clone().unwrap_or_default(),
                comment: h.comment().clone().unwrap_or_default(),
                size: if h.empty_layer().unwrap_or(false) {
                    0
                } else {
                    layers.next().unwrap_or(0)
                },
            })
            .collect();
        steps.reverse();
        Ok(steps)
    }

    /// Remove `name_or_id`: a name untags (the image goes when its last name goes); an id
    /// removes the image with all its names (refused when it has several, unless `force`).
    /// Refused while a container or a mount uses the image. Returns the removed names and
    /// whether the image itself was deleted. Unreferenced content is then collected.
    pub fn remove(&self, name_or_id: &str, force: bool) -> Result<(Vec<String>, Option<Digest>)> {
        let image = self.resolve(name_or_id)?;
        let by_name = Reference::parse(name_or_id)
            .ok()
            .map(|r| r.store_name())
            .filter(|n| image.names.contains(n));
        let remove_names: Vec<String> = match &by_name {
            Some(n) => vec![n.clone()],
            None => {
                if image.names.len() > 1 && !force {
                    return Err(Error::InUse(format!(
                        "image {} is referenced by several names ({}): remove them by name or use --force",
                        image.id.short(),
                        image.names.join(", ")
                    )));
                }
                image.names.clone()
            }
        };
        let last = remove_names.len() == image.names.len();
        if last {
            self.check_unused(&image)?;
        }
        {
            let mut conn = self.conn()?;
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            for n in &remove_names {
                tx.execute("DELETE FROM image_names WHERE name = ?1", [n])?;
                crate::names::remove(&self.image_root(), n);
            }
            if last {
                tx.execute(
                    "DELETE FROM image_images WHERE id = ?1",
                    [image.id.as_str()],
                )?;
            }
            tx.commit()?;
        }
        if last {
            self.gc()?;
        }
        Ok((remove_names, last.then_some(image.id)))
    }

    fn check_unused(&self, image: &Image) -> Result<()> {
        let Some(top) = &image.top_chain_id else {
            return Ok(());
        };
        let conn = self.conn()?;
        let users: Vec<String> = conn
            .prepare("SELECT key FROM snapshot_snapshots WHERE parent = ?1 AND kind IN ('active', 'view')")?
            .query_map([top.as_str()], |r| r.get(0))?
            .collect::<std::result::Result<_, _>>()?;
        if let Some(u) = users.first() {
            let what = match u.split_once('/') {
                Some(("view", _)) => "it is mounted (wharf image unmount)".to_string(),
                Some(("container", c)) => format!("container {c} uses it"),
                _ => format!("{u} uses it"),
            };
            return Err(Error::InUse(format!(
                "image {} is in use: {what}",
                image
                    .names
                    .first()
                    .cloned()
                    .unwrap_or_else(|| image.id.short().to_string())
            )));
        }
        Ok(())
    }

    /// `wharf image prune`: remove images without names (or with `all`, every image no
    /// container or mount uses), then collect garbage. Returns removed image ids.
    pub fn prune(&self, all: bool) -> Result<(Vec<Digest>, GcStats)> {
        self.prune_keeping(all, &std::collections::HashSet::new())
    }

    /// [`Self::prune`], keeping the images whose ids `keep` holds (the build cache's).
    pub fn prune_keeping(
        &self,
        all: bool,
        keep: &std::collections::HashSet<String>,
    ) -> Result<(Vec<Digest>, GcStats)> {
        let ids: Vec<String> = {
            let conn = self.conn()?;
            let sql = if all {
                "SELECT id FROM image_images"
            } else {
                "SELECT id FROM image_images WHERE id NOT IN (SELECT image_id FROM image_names)"
            };
            conn.prepare(sql)?
                .query_map([], |r| r.get(0))?
                .collect::<std::result::Result<_, _>>()?
        };
        let mut removed = Vec::new();
        for id in ids {
            if keep.contains(&id) {
                continue;
            }
            let id: Digest = id.parse()?;
            let image = self.load_image(&id)?;
            if self.check_unused(&image).is_err() {
                continue;
            }
            for n in &image.names {
                crate::names::remove(&self.image_root(), n);
            }
            let mut conn = self.conn()?;
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute("DELETE FROM image_names WHERE image_id = ?1", [id.as_str()])?;
            tx.execute("DELETE FROM image_images WHERE id = ?1", [id.as_str()])?;
            tx.commit()?;
            removed.push(id);
        }
        let stats = self.gc()?;
        Ok((removed, stats))
    }

    /// Prepare container `container_id`'s rootfs: an active snapshot (upper + work dirs)
    /// on the image's layer chain. Mount it with [`Rootfs::mount`]; remove it with
    /// [`ImageStore::remove_container`].
    pub fn prepare_container(&self, image: &Image, container_id: &str) -> Result<Rootfs> {
        valid_key_part(container_id)?;
        let key = format!("container/{container_id}");
        let parent = image
            .top_chain_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let info = {
            let _g = self.gc_lock.shared()?;
            let mut conn = self.conn()?;
            self.snapshots.create(&mut conn, &key, &parent, "active")?
        };
        self.container_rootfs_of(info.id, &parent)
    }

    /// Give the layers a mount of their own before a container's rootfs is mounted, where
    /// the run directory `run_dir` shares theirs (see [`Snapshots::own_mount_beside`]):
    /// called by the engine, whose worlds unmount what they made; this crate's own tests
    /// keep their temporary stores unmounted.
    pub fn own_layer_mount(&self, run_dir: &Path) -> Result<()> {
        self.snapshots.own_mount_beside(run_dir)
    }

    /// The rootfs of a container prepared earlier.
    pub fn container_rootfs(&self, container_id: &str) -> Result<Rootfs> {
        let key = format!("container/{container_id}");
        let info = self
            .snapshots
            .get(&*self.conn()?, &key)?
            .ok_or_else(|| Error::NotFound(format!("no rootfs for container {container_id}")))?;
        self.container_rootfs_of(info.id, &info.parent)
    }

    fn container_rootfs_of(&self, id: i64, parent: &str) -> Result<Rootfs> {
        let dir = self.snapshots.dir(id);
        let mut lower_dirs = if parent.is_empty() {
            Vec::new()
        } else {
            self.snapshots.chain_dirs(&*self.conn()?, parent)?
        };
        if lower_dirs.is_empty() {
            lower_dirs.push(empty_lower(&dir)?);
        }
        Ok(Rootfs {
            lower_dirs,
            upper_dir: dir.join("fs"),
            work_dir: dir.join("work"),
        })
    }

    /// Remove a container's snapshot (unmount its rootfs first).
    pub fn remove_container(&self, container_id: &str) -> Result<()> {
        valid_key_part(container_id)?;
        self.snapshots
            .remove(&*self.conn()?, &format!("container/{container_id}"))
    }

    /// Mount a read-only view of the unpacked image and return its path (`wharf image
    /// mount`). Mounting again returns the same path.
    pub fn mount_image(&self, image: &Image) -> Result<PathBuf> {
        let key = format!("view/{}", image.id.hex());
        let parent = image
            .top_chain_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let existing = self.snapshots.get(&*self.conn()?, &key)?;
        let info = match existing {
            Some(i) => i,
            None => {
                let _g = self.gc_lock.shared()?;
                let mut conn = self.conn()?;
                self.snapshots.create(&mut conn, &key, &parent, "view")?
            }
        };
        let dir = self.snapshots.dir(info.id);
        let merged = dir.join("merged");
        if snapshot::is_mountpoint(&merged) {
            return Ok(merged);
        }
        let mut lowers = if parent.is_empty() {
            Vec::new()
        } else {
            self.snapshots.chain_dirs(&*self.conn()?, &parent)?
        };
        if lowers.is_empty() {
            lowers.push(empty_lower(&dir)?);
        }
        if let Err(e) = snapshot::mount_overlay(&lowers, None, &merged) {
            // Best effort: the mount's failure is what the caller hears.
            if let Ok(conn) = self.conn() {
                let _ = self.snapshots.remove(&conn, &key);
            }
            return Err(e);
        }
        Ok(merged)
    }

    /// Unmount the view of `image` (no-op when not mounted).
    pub fn unmount_image(&self, image: &Image) -> Result<bool> {
        let key = format!("view/{}", image.id.hex());
        let Some(info) = self.snapshots.get(&*self.conn()?, &key)? else {
            return Ok(false);
        };
        let merged = self.snapshots.dir(info.id).join("merged");
        if snapshot::is_mountpoint(&merged) {
            snapshot::unmount(&merged)?;
        }
        self.snapshots.remove(&*self.conn()?, &key)?;
        Ok(true)
    }

    /// Directories of the unpacked layers of `image`, top first (for inspection and tests).
    pub fn layer_dirs(&self, image: &Image) -> Result<Vec<PathBuf>> {
        match &image.top_chain_id {
            Some(top) => self.snapshots.chain_dirs(&*self.conn()?, top.as_str()),
            None => Ok(Vec::new()),
        }
    }

    /// A lease: content committed under it survives GC until it is dropped (or expires
    /// after `ttl_secs`, should its process die).
    pub fn lease(&self, ttl_secs: i64) -> Result<Lease<'_>> {
        let id = format!(
            "{}-{}",
            std::process::id(),
            Digest::of(
                format!(
                    "{:?}{:?}",
                    std::time::SystemTime::now(),
                    std::thread::current().id()
                )
                .as_bytes()
            )
            .short()
        );
        self.conn()?.execute(
            "INSERT INTO lease_leases (id, created_at, expires_at) VALUES (?1, ?2, ?3)",
            params![id, db::now(), db::now() + ttl_secs],
        )?;
        Ok(Lease { store: self, id })
    }

    /// Garbage collection: remove blobs and snapshots that no image, container, mount or
    /// lease references, plus interrupted downloads and unpacks that no process holds.
    pub fn gc(&self) -> Result<GcStats> {
        let _x = self.gc_lock.exclusive()?;
        crate::gc::collect(self)
    }

    pub(crate) fn image_rows(&self) -> Result<Vec<(String, String, String, String)>> {
        let conn = self.conn()?;
        let mut st = conn.prepare(
            "SELECT id, manifest_digest, manifest_media_type, top_chain_id FROM image_images",
        )?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
}

/// See [`ImageStore::lease`].
pub struct Lease<'s> {
    store: &'s ImageStore,
    id: String,
}

impl Lease<'_> {
    /// Protect a blob or snapshot (`kind` = `blob` | `snapshot`).
    pub fn add(&self, kind: &str, key: &str) -> Result<()> {
        self.store.conn()?.execute(
            "INSERT OR IGNORE INTO lease_resources (lease_id, kind, key) VALUES (?1, ?2, ?3)",
            params![self.id, kind, key],
        )?;
        Ok(())
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Ok(conn) = self.store.conn() {
            let _ = conn.execute("DELETE FROM lease_leases WHERE id = ?1", [&self.id]);
        }
    }
}

#[derive(serde::Deserialize)]
struct RootfsOnly {
    rootfs: RootfsIds,
}

#[derive(serde::Deserialize)]
struct RootfsIds {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// Parse an image config: the typed config and its layer diff ids.
pub fn parse_config(bytes: &[u8]) -> Result<(ImageConfiguration, Vec<Digest>)> {
    let ids: RootfsOnly = serde_json::from_slice(bytes)
        .map_err(|e| Error::Invalid(format!("invalid image config: {e}")))?;
    let diff_ids = ids
        .rootfs
        .diff_ids
        .iter()
        .map(|d| d.parse())
        .collect::<Result<Vec<Digest>>>()?;
    let config = ImageConfiguration::from_reader(bytes)
        .map_err(|e| Error::Invalid(format!("invalid image config: {e}")))?;
    Ok((config, diff_ids))
}

/// The chain ids of an image's layers.
pub fn image_chain(diff_ids: &[Digest]) -> Vec<Digest> {
    chain_ids(diff_ids)
}

fn valid_key_part(id: &str) -> Result<()> {
    if id.is_empty()
        || id.len() > 128
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        || id.starts_with('.')
    {
        return Err(Error::Invalid(format!("invalid container id {id:?}")));
    }
    Ok(())
}

/// Snapshot `dir`'s empty lower directory, for an overlay with no layer below. Snapshots
/// without a parent are made with it; made here too, should one lack it.
fn empty_lower(dir: &Path) -> Result<PathBuf> {
    let empty = dir.join(snapshot::EMPTY_LOWER);
    std::fs::create_dir_all(&empty).ctx(|| format!("creating {}", empty.display()))?;
    Ok(empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config as Docker Hub serves them (docker build output: nulls, legacy fields).
    #[test]
    fn parses_a_docker_built_config() {
        let cfg = br##"{"architecture":"amd64","config":{"Hostname":"","Domainname":"","User":"",
            "AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,
            "StdinOnce":false,"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd":["sh"],"Image":"sha256:3c2c1b4bd3c4e4a1e7b2d6c4d7c0e0d4d1c2e1b2a3f4e5d6c7b8a9f0e1d2c3b4",
            "Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null,
            "ExposedPorts":{"80/tcp":{}},"StopSignal":"SIGQUIT"},
            "container":"d2f1c0b0","container_config":{"Cmd":["/bin/sh","-c","#(nop) CMD [\"sh\"]"]},
            "created":"2023-07-18T23:19:33.655005962Z","docker_version":"20.10.23",
            "history":[{"created":"2023-07-18T23:19:33.538571854Z","created_by":"/bin/sh -c #(nop) ADD file:x in / "},
                       {"created":"2023-07-18T23:19:33.655005962Z","created_by":"/bin/sh -c #(nop)  CMD [\"sh\"]","empty_layer":true}],
            "os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:3d24ee258efc3bfe4066a1a9fb83febf6dc0b1548dfe896161533668281c9f4f"]}}"##;
        let (config, diff_ids) = parse_config(cfg).unwrap();
        assert_eq!(diff_ids.len(), 1);
        let c = config.config().clone().unwrap();
        assert_eq!(c.cmd().clone().unwrap(), vec!["sh".to_string()]);
        assert_eq!(c.stop_signal().as_deref(), Some("SIGQUIT"));
        assert!(
            c.exposed_ports()
                .clone()
                .unwrap()
                .contains(&"80/tcp".to_string())
        );
        assert!(c.entrypoint().is_none());
    }
}
