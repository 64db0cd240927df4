//! The content store: blobs by digest under `<root>/image/content/blobs/sha256/<hex>`.
//!
//! A blob becomes visible only complete and verified: downloads go to
//! `ingest/<hex>` (locked with flock while a process writes it), are hashed as they are
//! written, and are renamed into `blobs/` after size and digest check out. A download that is
//! killed leaves only its `ingest/` file, which the next pull of that blob resumes from
//! (re-hashing what is there and asking for the rest with a `Range` request) and which GC
//! removes when nobody holds its lock.
//!
//! [`Transfer`] lets one thread read a blob while another downloads it: the unpacker streams
//! a layer through decompression and into its snapshot as the bytes arrive.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs::FlockOperation;
use sha2::{Digest as _, Sha256};

use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::lock::SharedGuard;

/// Blobs on disk.
#[derive(Clone, Debug)]
pub struct ContentStore {
    dir: PathBuf,
}

impl ContentStore {
    /// Open (creating) the store in `dir`.
    pub fn open(dir: &Path) -> Result<ContentStore> {
        for d in ["blobs/sha256", "ingest"] {
            fs::create_dir_all(dir.join(d))
                .ctx(|| format!("creating {}", dir.join(d).display()))?;
        }
        Ok(ContentStore {
            dir: dir.to_path_buf(),
        })
    }

    /// Where blob `d` lives (whether or not it exists).
    pub fn path(&self, d: &Digest) -> PathBuf {
        self.dir.join("blobs/sha256").join(d.hex())
    }

    /// Whether blob `d` is in the store.
    pub fn has(&self, d: &Digest) -> bool {
        self.path(d).is_file()
    }

    /// Open blob `d` for reading.
    pub fn open_blob(&self, d: &Digest) -> Result<File> {
        File::open(self.path(d)).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                Error::NotFound(format!("blob {d} is not in the content store"))
            }
            _ => Error::io(format!("opening blob {d}"), e),
        })
    }

    /// Read a (small) blob whole: manifests, configs.
    pub fn read(&self, d: &Digest) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.open_blob(d)?
            .read_to_end(&mut v)
            .ctx(|| format!("reading blob {d}"))?;
        Ok(v)
    }

    /// Size of blob `d`.
    pub fn size(&self, d: &Digest) -> Option<u64> {
        fs::metadata(self.path(d)).ok().map(|m| m.len())
    }

    /// Store `bytes`, checking them against `expected` when given; returns their digest.
    pub fn put(&self, bytes: &[u8], expected: Option<&Digest>, _g: &SharedGuard) -> Result<Digest> {
        let d = Digest::of(bytes);
        if let Some(e) = expected
            && *e != d
        {
            return Err(Error::DigestMismatch {
                what: format!("blob {e}"),
                expected: e.to_string(),
                actual: d.to_string(),
            });
        }
        if self.has(&d) {
            return Ok(d);
        }
        let tmp = tempfile::NamedTempFile::new_in(self.dir.join("ingest"))
            .ctx(|| "creating a temp file in the content store".into())?;
        tmp.as_file()
            .write_all(bytes)
            .and_then(|_| tmp.as_file().sync_all())
            .ctx(|| format!("writing blob {d}"))?;
        tmp.persist(self.path(&d))
            .map_err(|e| Error::io(format!("committing blob {d}"), e.error))?;
        Ok(d)
    }

    /// Copy a stream of unknown digest into a temp file of the store, hashing it; commit it
    /// with [`ContentStore::commit_staged`] (archives carry blobs this way).
    pub fn stage(&self, mut r: impl Read) -> Result<Staged> {
        let mut tmp = tempfile::NamedTempFile::new_in(self.dir.join("ingest"))
            .ctx(|| "creating a temp file in the content store".into())?;
        rustix::fs::flock(tmp.as_file(), FlockOperation::LockExclusive)
            .ctx(|| "locking a temp file in the content store".into())?;
        let mut h = crate::digest::HashingReader::new(&mut r);
        io::copy(&mut h, tmp.as_file_mut()).ctx(|| "copying a blob into the store".into())?;
        let (digest, size) = h.finish().ctx(|| "copying a blob into the store".into())?;
        Ok(Staged { tmp, digest, size })
    }

    /// Make a staged blob visible, after checking it against `expected` when given.
    pub fn commit_staged(
        &self,
        s: Staged,
        expected: Option<&Digest>,
        _g: &SharedGuard,
    ) -> Result<Digest> {
        if let Some(e) = expected
            && *e != s.digest
        {
            return Err(Error::DigestMismatch {
                what: format!("blob {e}"),
                expected: e.to_string(),
                actual: s.digest.to_string(),
            });
        }
        if !self.has(&s.digest) {
            s.tmp
                .as_file()
                .sync_all()
                .ctx(|| format!("syncing blob {}", s.digest))?;
            s.tmp
                .persist(self.path(&s.digest))
                .map_err(|e| Error::io(format!("committing blob {}", s.digest), e.error))?;
        }
        Ok(s.digest)
    }

    /// Start (or resume) writing blob `digest` of `size` bytes. Blocks while another
    /// process writes the same blob; returns `None` if the blob is (by then) in the store.
    pub fn ingest(&self, digest: &Digest, size: u64) -> Result<Option<Ingest>> {
        if self.has(digest) {
            return Ok(None);
        }
        let path = self.dir.join("ingest").join(digest.hex());
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .ctx(|| format!("opening {}", path.display()))?;
        rustix::fs::flock(&file, FlockOperation::LockExclusive)
            .ctx(|| format!("locking {}", path.display()))?;
        if self.has(digest) {
            return Ok(None);
        }
        // The file we locked may have been committed (renamed away) or removed by GC
        // between our open and our lock: then start over on a fresh one.
        let same = match (fs::metadata(&path), file.metadata()) {
            (Ok(a), Ok(b)) => {
                use std::os::unix::fs::MetadataExt;
                a.ino() == b.ino() && a.dev() == b.dev()
            }
            _ => false,
        };
        if !same {
            drop(file);
            return self.ingest(digest, size);
        }
        let mut len = file
            .metadata()
            .ctx(|| format!("stat {}", path.display()))?
            .len();
        if len > size {
            file.set_len(0)
                .ctx(|| format!("truncating {}", path.display()))?;
            len = 0;
        }
        // Resume: hash what an earlier, interrupted download left.
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0u64;
        while pos < len {
            let n = file
                .read_at(&mut buf, pos)
                .ctx(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            let n = n.min((len - pos) as usize);
            hasher.update(&buf[..n]);
            pos += n as u64;
        }
        Ok(Some(Ingest {
            file: Arc::new(file),
            path,
            final_path: self.path(digest),
            digest: digest.clone(),
            size,
            hasher,
            written: pos,
        }))
    }

    /// Remove blob `d` (GC).
    pub fn delete(&self, d: &Digest) -> Result<()> {
        match fs::remove_file(self.path(d)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing blob {d}"), e))
            }
            _ => Ok(()),
        }
    }

    /// Every blob in the store.
    pub fn list(&self) -> Result<Vec<Digest>> {
        let dir = self.dir.join("blobs/sha256");
        let mut out = Vec::new();
        for e in fs::read_dir(&dir).ctx(|| format!("listing {}", dir.display()))? {
            let e = e.ctx(|| format!("listing {}", dir.display()))?;
            if let Ok(d) = format!("sha256:{}", e.file_name().to_string_lossy()).parse() {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// Remove ingest files that no process is writing (left by killed pulls). Returns how
    /// many were removed.
    pub fn clean_ingest(&self) -> Result<usize> {
        let dir = self.dir.join("ingest");
        let mut n = 0;
        for e in fs::read_dir(&dir).ctx(|| format!("listing {}", dir.display()))? {
            let Ok(e) = e else { continue };
            // Downloads are named by digest and locked from the start; other files are
            // temp files of blobs being stored (archives, manifests), locked just after
            // they are created, so they are only taken once they are an hour old.
            let is_download = e.file_name().len() == 64;
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if !is_download && !old {
                continue;
            }
            let Ok(f) = File::open(e.path()) else {
                continue;
            };
            if rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok()
                && fs::remove_file(e.path()).is_ok()
            {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// A blob copied into the store's temp space, not visible yet.
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    /// Its digest.
    pub digest: Digest,
    /// Its size.
    pub size: u64,
}

/// A blob being written: append-only, hashed as it grows, locked against other writers.
pub struct Ingest {
    file: Arc<File>,
    path: PathBuf,
    final_path: PathBuf,
    digest: Digest,
    size: u64,
    hasher: Sha256,
    written: u64,
}

impl Ingest {
    /// Bytes already in the file (the resume offset).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The file, for readers that follow the download ([`Transfer`]).
    pub fn file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Append `buf`.
    pub fn write(&mut self, buf: &[u8]) -> Result<()> {
        if self.written + buf.len() as u64 > self.size {
            return Err(Error::DigestMismatch {
                what: format!("blob {}", self.digest),
                expected: format!("{} bytes", self.size),
                actual: format!("more than {} bytes", self.size),
            });
        }
        (&*self.file)
            .write_all(buf)
            .ctx(|| format!("writing {}", self.path.display()))?;
        self.hasher.update(buf);
        self.written += buf.len() as u64;
        Ok(())
    }

    /// Verify size and digest, then make the blob visible. A mismatch deletes the ingest
    /// file, so the next attempt downloads from scratch.
    pub fn commit(self, _g: &SharedGuard) -> Result<()> {
        let actual = Digest::from_hasher(self.hasher.clone());
        if self.written != self.size || actual != self.digest {
            let _ = fs::remove_file(&self.path);
            return Err(Error::DigestMismatch {
                what: format!("blob {}", self.digest),
                expected: format!("{} ({} bytes)", self.digest, self.size),
                actual: format!("{actual} ({} bytes)", self.written),
            });
        }
        self.file
            .sync_all()
            .ctx(|| format!("syncing {}", self.path.display()))?;
        fs::rename(&self.path, &self.final_path)
            .ctx(|| format!("committing blob {}", self.digest))?;
        if let Some(dir) = self.final_path.parent() {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

/// Where a download stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferStatus {
    /// Queued.
    Pending,
    /// Bytes are arriving.
    Running,
    /// Verified and committed.
    Done,
    /// Failed with this message.
    Failed(String),
}

struct TransferState {
    file: Option<Arc<File>>,
    written: u64,
    status: TransferStatus,
}

/// A download that other threads can watch and read while it runs.
pub struct Transfer {
    /// Blob size (from its descriptor).
    pub size: u64,
    state: Mutex<TransferState>,
    cond: Condvar,
}

impl Transfer {
    /// A queued transfer of `size` bytes.
    pub fn new(size: u64) -> Arc<Transfer> {
        Arc::new(Transfer {
            size,
            state: Mutex::new(TransferState {
                file: None,
                written: 0,
                status: TransferStatus::Pending,
            }),
            cond: Condvar::new(),
        })
    }

    /// The download started (or resumed) writing `file`, which holds `written` bytes.
    pub fn start(&self, file: Arc<File>, written: u64) {
        let mut s = self.state.lock().unwrap();
        s.file = Some(file);
        s.written = written;
        s.status = TransferStatus::Running;
        self.cond.notify_all();
    }

    /// `n` more bytes are in the file.
    pub fn advance(&self, n: u64) {
        let mut s = self.state.lock().unwrap();
        s.written += n;
        self.cond.notify_all();
    }

    /// The blob is committed; `file` has all of it.
    pub fn finish(&self, file: Arc<File>) {
        let mut s = self.state.lock().unwrap();
        s.written = file.metadata().map(|m| m.len()).unwrap_or(s.written);
        s.file = Some(file);
        s.status = TransferStatus::Done;
        self.cond.notify_all();
    }

    /// The download failed.
    pub fn fail(&self, msg: String) {
        let mut s = self.state.lock().unwrap();
        s.status = TransferStatus::Failed(msg);
        self.cond.notify_all();
    }

    /// (bytes so far, status).
    pub fn progress(&self) -> (u64, TransferStatus) {
        let s = self.state.lock().unwrap();
        (s.written, s.status.clone())
    }

    /// Block until the transfer is done or failed.
    pub fn wait(&self) -> std::result::Result<(), String> {
        let mut s = self.state.lock().unwrap();
        loop {
            match &s.status {
                TransferStatus::Done => return Ok(()),
                TransferStatus::Failed(m) => return Err(m.clone()),
                _ => s = self.cond.wait(s).unwrap(),
            }
        }
    }

    /// A reader of the blob from its first byte that waits for bytes not yet downloaded
    /// and ends when the blob is committed.
    pub fn reader(self: &Arc<Self>) -> FollowReader {
        FollowReader {
            t: self.clone(),
            pos: 0,
        }
    }
}

/// See [`Transfer::reader`].
pub struct FollowReader {
    t: Arc<Transfer>,
    pos: u64,
}

impl Read for FollowReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let file = {
            let mut s = self.t.state.lock().unwrap();
            loop {
                if let TransferStatus::Failed(m) = &s.status {
                    return Err(io::Error::other(m.clone()));
                }
                if s.written > self.pos {
                    break s.file.clone().expect("a running transfer has a file");
                }
                if s.status == TransferStatus::Done {
                    return Ok(0);
                }
                s = self.t.cond.wait(s).unwrap();
            }
        };
        let n = file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
