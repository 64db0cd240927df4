//! Wharf's image layer: what containerd's content store, snapshotter and remotes do
//! together. It pulls images from OCI-distribution / Docker Registry v2 registries into a
//! verified content store, unpacks their layers into overlayfs snapshots shared by layer
//! chain, prepares container root filesystems on them, imports and exports archives, and
//! collects garbage.
//!
//! # Using it (the engine's view)
//!
//! ```no_run
//! use wharf_image::{ImageStore, PullOptions};
//! # fn main() -> wharf_image::Result<()> {
//! let store = ImageStore::open("/var/lib/wharf".as_ref())?;       // --root / WHARF_ROOT
//! let image = store.pull("busybox", &PullOptions::default(), &())?; // docker.io/library/busybox:latest
//! let image = store.resolve("busybox")?;                          // by name, id or digest
//! let cfg = image.config.config().clone().unwrap_or_default();     // Entrypoint, Cmd, Env, ...
//! let rootfs = store.prepare_container(&image, "ctr-1")?;         // lower dirs + upper + work
//! rootfs.mount("/run/wharf/ctr-1/rootfs".as_ref())?;              // overlayfs
//! // ... run the container, unmount ...
//! store.remove_container("ctr-1")?;
//! # let _ = cfg; Ok(()) }
//! ```
//!
//! - [`ImageStore::open`] / [`ImageStore::open_with`] (registry mirrors and insecure hosts
//!   from [`config::RegistriesConfig`]).
//! - [`ImageStore::pull`] with [`PullOptions`] (platform, credentials, parallel downloads) and
//!   a [`PullProgress`] receiver; [`ImageStore::resolve`]; [`ImageStore::list`].
//! - [`Image`]: id (config digest), names, manifest, typed config
//!   ([`oci_spec::image::ImageConfiguration`]: Entrypoint, Cmd, Env, WorkingDir, User,
//!   ExposedPorts, StopSignal, Labels), diff ids, top chain id.
//! - [`ImageStore::prepare_container`] -> [`Rootfs`] { `lower_dirs`, `upper_dir`,
//!   `work_dir` } + [`Rootfs::mount`]; [`ImageStore::container_rootfs`];
//!   [`ImageStore::remove_container`]. A container's snapshot keeps its image's layers alive
//!   and makes `rmi` refuse the image.
//! - [`ImageStore::mount_image`] / [`ImageStore::unmount_image`]: a read-only view
//!   (`wharf image mount`).
//! - [`ImageStore::lease`]: protects content between steps (e.g. pull, then create) from a
//!   concurrent GC; [`ImageStore::remove`], [`ImageStore::prune`], [`ImageStore::gc`].
//! - [`ImageStore::load`], [`ImageStore::save`], [`ImageStore::import`] (module [`archive`]).
//!
//! # On disk
//!
//! ```text
//! <root>/wharf.db                          SQLite (WAL), shared with the engine; image_*,
//!                                          snapshot_*, lease_* tables (module db)
//! <root>/image/content/blobs/sha256/<hex>  verified blobs
//! <root>/image/content/ingest/<hex>        downloads in progress (flock'ed; resumable)
//! <root>/image/snapshots/<n>/fs            an unpacked layer (overlayfs lower dir) or a
//!                                          container's upper dir (+ work/)
//! <root>/image/snapshots/<n>/merged        the mount point of an image view
//! <root>/image/snapshots/extract-*         unpacks in progress (flock'ed)
//! <root>/image/gc.lock                     shared by commits, exclusive for GC
//! ```
//!
//! # Guarantees
//! - A blob is visible only after its size and digest are checked; a layer's snapshot only
//!   after its blob digest and its diff id are. A killed pull leaves only ingest files and
//!   unpack directories that the next pull resumes or removes (see [`content`]).
//! - No layer entry creates or changes anything outside its snapshot directory (see
//!   [`unpack`] for the rules: what is confined, what is rejected).
//! - GC never removes what an image, a container, a view or a lease references, and never
//!   what a running pull has committed (leases + [`lock::GcLock`]).

// Denied, not forbidden: one reviewed exception, a file control rusqlite has no safe call
// for (`db::keep_wal_files`).
#![deny(unsafe_code)]

pub mod archive;
pub mod auth;
pub mod changes;
pub mod commit;
pub mod config;
pub mod content;
pub mod db;
pub mod digest;
pub mod error;
mod gc;
pub mod hosts_dir;
pub mod https_probe;
pub mod lock;
pub mod manifest;
pub mod names;
pub mod pull;
pub mod push;
pub mod reference;
pub mod registry;
pub mod snapshot;
pub mod store;
pub mod tree_tar;
pub mod unpack;
pub mod url_fetch;

pub use error::{Error, Result};
pub use pull::{PullEvent, PullOptions, PullProgress};
pub use store::{GcStats, Image, ImageStore, ImageSummary, Lease, Rootfs};
