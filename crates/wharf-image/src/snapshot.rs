//! Snapshots: one directory per unpacked layer chain under `<root>/image/snapshots/<n>/`,
//! keyed in the metadata store by chain id, so images that share their lower layers share
//! those directories. A container gets an *active* snapshot (`fs/` upper + `work/`) on top
//! of its image's chain; `wharf image mount` gets a *view* (a read-only overlay at
//! `merged/`).
//!
//! Unpacking goes to `extract-<random>/`, flock'ed while in use, and is renamed to its
//! numbered directory in the same transaction that records it, so a killed unpack leaves
//! only an unlocked `extract-*` that cleanup removes.

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use rustix::fs::FlockOperation;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountFlags, MoveMountFlags, UnmountFlags,
};

use crate::error::{Error, IoContext, Result};
use crate::unpack::fsops;
use wharf_sys::fs::{mount_id, mountinfo_path};

/// The empty directory a snapshot without a parent gives overlayfs as its lower layer.
pub const EMPTY_LOWER: &str = "empty";

/// Snapshot directories.
#[derive(Clone, Debug)]
pub struct Snapshots {
    dir: PathBuf,
}

/// A snapshot row.
#[derive(Clone, Debug)]
pub struct SnapshotInfo {
    /// Directory number.
    pub id: i64,
    /// Chain id, `container/<id>` or `view/<image id>`.
    pub key: String,
    /// Parent's key ('' = none).
    pub parent: String,
    /// `committed`, `active` or `view`.
    pub kind: String,
}

/// An unpack in progress (removed on drop unless committed).
pub struct Extraction {
    dir: PathBuf,
    _lock: File,
    committed: bool,
}

impl Extraction {
    /// The directory the layer is unpacked into.
    pub fn fs(&self) -> PathBuf {
        self.dir.join("fs")
    }
}

impl Drop for Extraction {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fsops::remove_tree(&self.dir);
        }
    }
}

impl Snapshots {
    /// Open (creating) the snapshot directory, marked so that ext4 spreads the snapshots
    /// over its block groups ([`wharf_sys::fs::mark_top_of_tree`]; a hint, so a failure to
    /// mark is no failure to open).
    pub fn open(dir: &Path) -> Result<Snapshots> {
        fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        let _ = wharf_sys::fs::mark_top_of_tree(dir);
        Ok(Snapshots {
            dir: dir.to_path_buf(),
        })
    }

    /// Make the snapshot directory a mount of its own (a private bind of itself) when it
    /// shares its filesystem mount with `run_dir` (the engine's run directory), so that the
    /// layers an overlay is made of sit on a mount with nothing mounted on it.
    ///
    /// Why: overlayfs takes a private clone of each layer's mount when it mounts
    /// (`clone_private_mount`), and the kernel first looks through every mount attached to
    /// that mount (`has_locked_children`). Where the run directory is on the layers' mount
    /// (a host whose /run is no tmpfs of its own), that is every container's rootfs,
    /// /dev/shm, name files and pinned namespaces: with 1000 pods an overlay mount and
    /// unmount took 1.7 ms instead of 0.3. Where /run is a tmpfs (systemd's hosts) nothing
    /// is done. The bind stays until reboot, as the netns directory's does; a reboot's
    /// first container makes it again.
    pub fn own_mount_beside(&self, run_dir: &Path) -> Result<()> {
        // Once bound, the directory is on a mount the run directory is not on, so the
        // usual case costs two statx. Where mount ids cannot be read, nothing is done:
        // a bind could not be told from the directory it covers, and would be stacked.
        match (mount_id(&self.dir), mount_id(run_dir)) {
            (Some(layers), Some(run)) if layers == run => {}
            _ => return Ok(()),
        }
        // Two commands at once would stack two binds: the second finds the first's.
        let lock_path = self.dir.with_extension("mount.lock");
        let _lock = wharf_sys::lock::FileLock::exclusive(&lock_path)
            .ctx(|| format!("locking {}", lock_path.display()))?;
        if is_mountpoint(&self.dir) || has_mounts_below(&self.dir) {
            // An image view mounted by an older Wharf would be hidden under the bind.
            return Ok(());
        }
        rustix::mount::mount_bind(&self.dir, &self.dir)
            .ctx(|| format!("bind mounting {} onto itself", self.dir.display()))?;
        // Private: overlays and views mounted below it are nobody else's business.
        rustix::mount::mount_change(&self.dir, rustix::mount::MountPropagationFlags::PRIVATE)
            .ctx(|| format!("making {} a private mount", self.dir.display()))
    }

    /// The directory of snapshot `id`.
    pub fn dir(&self, id: i64) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// Its unpacked tree (or a container's upper dir).
    pub fn fs(&self, id: i64) -> PathBuf {
        self.dir(id).join("fs")
    }

    /// Find a snapshot by key.
    pub fn get(&self, conn: &Connection, key: &str) -> Result<Option<SnapshotInfo>> {
        Ok(conn
            .query_row(
                "SELECT id, key, parent, kind FROM snapshot_snapshots WHERE key = ?1",
                [key],
                |r| {
                    Ok(SnapshotInfo {
                        id: r.get(0)?,
                        key: r.get(1)?,
                        parent: r.get(2)?,
                        kind: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }

    /// Every snapshot row.
    pub fn list(&self, conn: &Connection) -> Result<Vec<SnapshotInfo>> {
        let mut st = conn.prepare("SELECT id, key, parent, kind FROM snapshot_snapshots")?;
        let rows = st.query_map([], |r| {
            Ok(SnapshotInfo {
                id: r.get(0)?,
                key: r.get(1)?,
                parent: r.get(2)?,
                kind: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// The `fs/` directories of the chain ending in `top` (top first).
    pub fn chain_dirs(&self, conn: &Connection, top: &str) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let mut key = top.to_string();
        while !key.is_empty() {
            let s = self.get(conn, &key)?.ok_or_else(|| {
                Error::NotFound(format!("snapshot {key} is missing from the store"))
            })?;
            out.push(self.fs(s.id));
            key = s.parent;
            if out.len() > 1000 {
                return Err(Error::Invalid("snapshot chain too long (a loop?)".into()));
            }
        }
        Ok(out)
    }

    /// Unpacked size of the chain ending in `top` (the sum of its layers' tar streams).
    pub fn chain_size(&self, conn: &Connection, top: &str) -> Result<u64> {
        let mut total = 0u64;
        let mut key = top.to_string();
        let mut n = 0;
        while !key.is_empty() && n <= 1000 {
            let Some((parent, size)) = conn
                .query_row(
                    "SELECT parent, size FROM snapshot_snapshots WHERE key = ?1",
                    [&key],
                    |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
                )
                .optional()?
            else {
                break;
            };
            total += size.max(0) as u64;
            key = parent;
            n += 1;
        }
        Ok(total)
    }

    /// Start an unpack.
    pub fn new_extraction(&self) -> Result<Extraction> {
        let name = format!(
            "extract-{}-{}",
            std::process::id(),
            crate::digest::Digest::of(format!("{:?}", std::time::SystemTime::now()).as_bytes())
                .short()
        );
        let dir = self.dir.join(name);
        fs::create_dir(&dir).ctx(|| format!("creating {}", dir.display()))?;
        let lock = match File::open(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.new_extraction(),
            r => r.ctx(|| format!("opening {}", dir.display()))?,
        };
        rustix::fs::flock(&lock, FlockOperation::LockExclusive)
            .ctx(|| format!("locking {}", dir.display()))?;
        // Cleanup (GC, another pull) may have taken the directory between our mkdir and
        // our lock, seeing it unlocked: then make another.
        let same = match (fs::metadata(&dir), lock.metadata()) {
            (Ok(a), Ok(b)) => {
                use std::os::unix::fs::MetadataExt;
                a.ino() == b.ino() && a.dev() == b.dev()
            }
            _ => false,
        };
        if !same {
            return self.new_extraction();
        }
        fs::create_dir(dir.join("fs")).ctx(|| format!("creating {}/fs", dir.display()))?;
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .ctx(|| format!("chmod {}", dir.display()))?;
        Ok(Extraction {
            dir,
            _lock: lock,
            committed: false,
        })
    }

    /// Record `ex` as the committed snapshot `key` on `parent`. If another process
    /// committed the same key meanwhile, `ex` is dropped and the existing one returned.
    pub fn commit(
        &self,
        conn: &mut Connection,
        mut ex: Extraction,
        key: &str,
        parent: &str,
        size: u64,
    ) -> Result<i64> {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        if let Some(id) = tx
            .query_row(
                "SELECT id FROM snapshot_snapshots WHERE key = ?1",
                [key],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
        {
            return Ok(id);
        }
        tx.execute(
            "INSERT INTO snapshot_snapshots (key, parent, kind, created_at, size) VALUES (?1, ?2, 'committed', ?3, ?4)",
            params![key, parent, crate::db::now(), size as i64],
        )?;
        let id = tx.last_insert_rowid();
        write_marker(&ex.dir, key, parent, "committed", size)?;
        let target = self.dir(id);
        if target.exists() {
            // Left by a crash between a rename and its (rolled back) transaction.
            fsops::remove_tree(&target).ctx(|| format!("removing stale {}", target.display()))?;
        }
        fs::rename(&ex.dir, &target).ctx(|| format!("committing snapshot {key}"))?;
        if let Err(e) = tx.commit() {
            let _ = fs::rename(&target, &ex.dir);
            return Err(e.into());
        }
        ex.committed = true;
        Ok(id)
    }

    /// Create an active (container) or view snapshot on `parent`: a row and its
    /// directories (`fs/` + `work/`, or `merged/` for a view; and `empty/` without a
    /// parent).
    pub fn create(
        &self,
        conn: &mut Connection,
        key: &str,
        parent: &str,
        kind: &str,
    ) -> Result<SnapshotInfo> {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let exists: Option<i64> = tx
            .query_row(
                "SELECT id FROM snapshot_snapshots WHERE key = ?1",
                [key],
                |r| r.get(0),
            )
            .optional()?;
        if exists.is_some() {
            return Err(Error::InUse(format!("snapshot {key} already exists")));
        }
        tx.execute(
            "INSERT INTO snapshot_snapshots (key, parent, kind, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![key, parent, kind, crate::db::now()],
        )?;
        let id = tx.last_insert_rowid();
        // The record first, then its directories: a process killed in between leaves a
        // record that removing the snapshot by its key cleans up, never a directory that
        // nothing names.
        tx.commit()?;
        let d = self.dir(id);
        let made = (|| -> Result<()> {
            if d.exists() {
                fsops::remove_tree(&d).ctx(|| format!("removing stale {}", d.display()))?;
            }
            let subdirs: &[&str] = if kind == "view" {
                &["merged"]
            } else {
                &["fs", "work"]
            };
            // `empty`, overlayfs's lower directory where there is no layer below, only
            // where there is none: each directory is an inode the root's filesystem
            // allocates and frees with the container.
            let empty = parent.is_empty().then_some(EMPTY_LOWER);
            for s in subdirs.iter().copied().chain(empty) {
                fs::create_dir_all(d.join(s)).ctx(|| format!("creating {}/{s}", d.display()))?;
            }
            write_marker(&d, key, parent, kind, 0)
        })();
        if let Err(e) = made {
            let _ = fsops::remove_tree(&d);
            let _ = conn.execute("DELETE FROM snapshot_snapshots WHERE id = ?1", [id]);
            return Err(e);
        }
        Ok(SnapshotInfo {
            id,
            key: key.to_string(),
            parent: parent.to_string(),
            kind: kind.to_string(),
        })
    }

    /// Remove snapshot `key` (row and directory).
    pub fn remove(&self, conn: &Connection, key: &str) -> Result<()> {
        if let Some(s) = self.get(conn, key)? {
            let d = self.dir(s.id);
            fsops::remove_tree(&d).ctx(|| format!("removing {}", d.display()))?;
            conn.execute("DELETE FROM snapshot_snapshots WHERE id = ?1", [s.id])?;
        }
        Ok(())
    }

    /// Remove `extract-*` directories of unpacks that no live process holds (left by a
    /// killed pull). Safe at any time: a running unpack holds its directory's flock.
    pub fn clean_stale_extractions(&self) -> usize {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return 0;
        };
        rd.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("extract-"))
            .filter(|e| remove_unused_extraction(&e.path()))
            .count()
    }

    /// Remove directories that no row names and unpacks that no process holds.
    pub fn clean_orphans(&self, conn: &Connection) -> Result<usize> {
        let ids: std::collections::HashSet<i64> =
            self.list(conn)?.into_iter().map(|s| s.id).collect();
        let mut n = 0;
        for e in fs::read_dir(&self.dir).ctx(|| format!("listing {}", self.dir.display()))? {
            let Ok(e) = e else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            let removed = if name.starts_with("extract-") {
                remove_unused_extraction(&e.path())
            } else {
                name.parse::<i64>().is_ok_and(|id| !ids.contains(&id))
                    && fsops::remove_tree(&e.path()).is_ok()
            };
            n += usize::from(removed);
        }
        Ok(n)
    }
}

/// The file in each snapshot directory that says what its row said, so a lost or damaged
/// store can be rebuilt ([`Snapshots::restore_rows`]).
const MARKER: &str = "snapshot.json";

/// What a snapshot directory's marker holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Marker {
    key: String,
    parent: String,
    kind: String,
    #[serde(default)]
    size: u64,
}

fn write_marker(dir: &Path, key: &str, parent: &str, kind: &str, size: u64) -> Result<()> {
    let m = Marker {
        key: key.into(),
        parent: parent.into(),
        kind: kind.into(),
        size,
    };
    let path = dir.join(MARKER);
    fs::write(&path, serde_json::to_vec(&m).expect("json"))
        .ctx(|| format!("writing {}", path.display()))
}

impl Snapshots {
    /// Recreate the rows of every snapshot directory from its marker (into a store that has
    /// none). Returns how many were restored, and the directories without a usable marker.
    pub fn restore_rows(&self, conn: &Connection) -> Result<(usize, Vec<PathBuf>)> {
        let mut restored = 0;
        let mut unknown = Vec::new();
        for e in fs::read_dir(&self.dir).ctx(|| format!("listing {}", self.dir.display()))? {
            let Ok(e) = e else { continue };
            let Ok(id) = e.file_name().to_string_lossy().parse::<i64>() else {
                continue;
            };
            let marker = fs::read(e.path().join(MARKER))
                .ok()
                .and_then(|b| serde_json::from_slice::<Marker>(&b).ok());
            let Some(m) = marker else {
                unknown.push(e.path());
                continue;
            };
            conn.execute(
                "INSERT OR IGNORE INTO snapshot_snapshots (id, key, parent, kind, created_at, size) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![id, m.key, m.parent, m.kind, crate::db::now(), m.size as i64],
            )?;
            restored += 1;
        }
        Ok((restored, unknown))
    }
}

/// Remove an unpack's directory if no process holds its lock. The lock is held while the
/// directory goes: an unpack that made it and now waits for its lock then finds it gone and
/// makes another.
fn remove_unused_extraction(dir: &Path) -> bool {
    let Ok(f) = File::open(dir) else {
        return false;
    };
    rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok()
        && fsops::remove_tree(dir).is_ok()
}

/// Mount an overlay of `lowers` (top first) at `target`: read-only when `upper` is `None`,
/// else writable with `upper` and `work` (`upper = (upperdir, workdir)`). Uses the new
/// mount API with one `lowerdir+` per layer (no length limit, no escaping of `:`/`,`),
/// and falls back to mount(2) with a `lowerdir=a:b` option string on kernels without it.
pub fn mount_overlay(
    lowers: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    target: &Path,
) -> Result<()> {
    if lowers.is_empty() {
        return Err(Error::Invalid("overlay mount without lower layers".into()));
    }
    if upper.is_none() && lowers.len() == 1 {
        // overlayfs wants two lowers without an upper: a read-only bind does the job.
        rustix::mount::mount_bind(&lowers[0], target).ctx(|| {
            format!(
                "bind mounting {} at {}",
                lowers[0].display(),
                target.display()
            )
        })?;
        return rustix::mount::mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "")
            .ctx(|| format!("remounting {} read-only", target.display()));
    }
    match mount_overlay_fsconfig(lowers, upper, target) {
        Ok(()) => Ok(()),
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOSYS) =>
        {
            mount_overlay_legacy(lowers, upper, target)
        }
        Err(e) => Err(Error::io(
            format!("mounting overlay at {}", target.display()),
            e,
        )),
    }
}

fn mount_overlay_fsconfig(
    lowers: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    target: &Path,
) -> std::io::Result<()> {
    let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_set_string(&fs, "source", "wharf")?;
    for l in lowers {
        rustix::mount::fsconfig_set_string(&fs, "lowerdir+", l.as_path())?;
    }
    if let Some((u, w)) = upper {
        rustix::mount::fsconfig_set_string(&fs, "upperdir", u)?;
        rustix::mount::fsconfig_set_string(&fs, "workdir", w)?;
    }
    // index=off: the same lowers may be mounted with several uppers.
    let _ = rustix::mount::fsconfig_set_string(&fs, "index", "off");
    rustix::mount::fsconfig_create(&fs)?;
    let attrs = if upper.is_none() {
        MountAttrFlags::MOUNT_ATTR_RDONLY
    } else {
        MountAttrFlags::empty()
    };
    mount_at(&fs, attrs, target)
}

/// Make the mount of the filesystem created in `fs` and attach it at `target`.
fn mount_at(
    fs: &std::os::fd::OwnedFd,
    attrs: MountAttrFlags,
    target: &Path,
) -> std::io::Result<()> {
    let mnt = rustix::mount::fsmount(fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs)?;
    rustix::mount::move_mount(
        mnt.as_fd(),
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    Ok(())
}

/// Mount a writable overlay at `target` whose lower layers are the detached mounts
/// `lowers` (top first; e.g. id-mapped copies of the layer directories, for a container
/// in a user namespace), with `upper` and `work` given by path. Needs a kernel whose
/// overlayfs takes layers by file descriptor (6.13+).
pub fn mount_overlay_from_fds(
    lowers: &[std::os::fd::OwnedFd],
    upper: &Path,
    work: &Path,
    target: &Path,
) -> Result<()> {
    let what = || format!("mounting an id-mapped overlay at {}", target.display());
    let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC).ctx(what)?;
    rustix::mount::fsconfig_set_string(&fs, "source", "wharf").ctx(what)?;
    for l in lowers {
        rustix::mount::fsconfig_set_fd(&fs, "lowerdir+", l).map_err(|e| {
            Error::io(
                format!(
                    "{}: this kernel's overlayfs does not take layers by file descriptor \
                     (Linux 6.13 or later is needed for user namespaces)",
                    what()
                ),
                std::io::Error::from(e),
            )
        })?;
    }
    rustix::mount::fsconfig_set_string(&fs, "upperdir", upper).ctx(what)?;
    rustix::mount::fsconfig_set_string(&fs, "workdir", work).ctx(what)?;
    let _ = rustix::mount::fsconfig_set_string(&fs, "index", "off");
    rustix::mount::fsconfig_create(&fs).ctx(what)?;
    mount_at(&fs, MountAttrFlags::empty(), target).ctx(what)
}

fn mount_overlay_legacy(
    lowers: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    target: &Path,
) -> Result<()> {
    let mut opts = String::from("lowerdir=");
    for (i, l) in lowers.iter().enumerate() {
        let s = l.to_str().filter(|s| !s.contains([':', ',']));
        let s = s.ok_or_else(|| {
            Error::Invalid(format!(
                "layer path {} cannot be passed to overlayfs",
                l.display()
            ))
        })?;
        if i > 0 {
            opts.push(':');
        }
        opts.push_str(s);
    }
    if let Some((u, w)) = upper {
        opts.push_str(&format!(
            ",upperdir={},workdir={}",
            u.display(),
            w.display()
        ));
    }
    opts.push_str(",index=off");
    if opts.len() >= 4000 {
        return Err(Error::Invalid(format!(
            "overlay options for {} layers exceed a page and this kernel lacks lowerdir+",
            lowers.len()
        )));
    }
    let data = CString::new(opts).map_err(|_| Error::Invalid("NUL in a path".into()))?;
    let flags = if upper.is_none() {
        MountFlags::RDONLY
    } else {
        MountFlags::empty()
    };
    rustix::mount::mount("wharf", target, "overlay", flags, data.as_c_str())
        .ctx(|| format!("mounting overlay at {}", target.display()))
}

/// Unmount `target` (lazily if busy).
pub fn unmount(target: &Path) -> Result<()> {
    match rustix::mount::unmount(target, UnmountFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(rustix::io::Errno::BUSY) => rustix::mount::unmount(target, UnmountFlags::DETACH)
            .ctx(|| format!("unmounting {}", target.display())),
        Err(e) => Err(Error::io(format!("unmounting {}", target.display()), e)),
    }
}

/// Whether anything is mounted below `dir` in this mount namespace.
fn has_mounts_below(dir: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| mountinfo_path(m).starts_with(dir))
}

/// Whether `path` is a mount point ([`wharf_sys::fs::is_mountpoint`]).
pub use wharf_sys::fs::is_mountpoint;
