//! `pull`: resolve a reference to a platform manifest, download the config and the layers
//! (in parallel, resumable, each verified before it is committed), and unpack each layer
//! into its snapshot *while it downloads*: the unpacker reads the blob's ingest file as it
//! grows ([`crate::content::Transfer`]), decompresses it, hashes the tar (the diff id) and
//! applies it. A snapshot is committed only when both the blob digest and the diff id
//! check out, so content that fails verification is never visible.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::auth::Credentials;
use crate::content::Transfer;
use crate::digest::{Digest, HashingReader};
use crate::error::{Error, Result};
use crate::manifest::{self, Descriptor, Manifest, Parsed, Platform};
use crate::reference::Reference;
use crate::registry::{Client, Repository};
use crate::store::{Image, ImageStore, Lease, image_chain, parse_config};
use crate::unpack;

/// Options of a pull.
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// Platform to pick from an index (default: this host's).
    pub platform: Option<Platform>,
    /// Credentials for the image's registry (default: docker's config.json).
    pub creds: Option<Credentials>,
    /// Parallel layer downloads.
    pub jobs: usize,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            platform: None,
            creds: None,
            jobs: 3,
        }
    }
}

/// Progress of a pull, for display.
#[derive(Debug)]
pub enum PullEvent<'a> {
    /// The reference resolved to a manifest with these layers.
    Resolved {
        /// Normalised name.
        name: &'a str,
        /// Manifest digest.
        digest: &'a Digest,
        /// Layer descriptors, base first.
        layers: &'a [Descriptor],
    },
    /// Layer blob and snapshot are already in the store.
    LayerExists {
        /// Layer blob digest.
        digest: &'a Digest,
    },
    /// Bytes of a layer arrived.
    Downloading {
        /// Layer blob digest.
        digest: &'a Digest,
        /// Bytes so far (including resumed ones).
        done: u64,
        /// Blob size.
        total: u64,
    },
    /// The blob is verified and committed.
    Downloaded {
        /// Layer blob digest.
        digest: &'a Digest,
    },
    /// Unpacking started.
    Extracting {
        /// Layer blob digest.
        digest: &'a Digest,
        /// Whether the unpack follows the download (the blob is still arriving).
        streaming: bool,
    },
    /// The snapshot is committed.
    Extracted {
        /// Layer blob digest.
        digest: &'a Digest,
    },
}

/// Receives [`PullEvent`]s (from several threads).
pub trait PullProgress: Sync {
    /// One event.
    fn event(&self, e: PullEvent<'_>);
}

/// No display.
impl PullProgress for () {
    fn event(&self, _: PullEvent<'_>) {}
}

impl ImageStore {
    /// Pull `reference` (name, name:tag or name@digest; normalised as docker does).
    pub fn pull(
        &self,
        reference: &str,
        opts: &PullOptions,
        progress: &dyn PullProgress,
    ) -> Result<Image> {
        let r = Reference::parse(reference)?;
        self.pull_ref(&r, opts, progress)
            .map_err(|e| e.context(format!("pulling {r}")))
    }

    fn pull_ref(
        &self,
        r: &Reference,
        opts: &PullOptions,
        progress: &dyn PullProgress,
    ) -> Result<Image> {
        self.snapshots.clean_stale_extractions();
        let client = Client::new(self.registries.clone(), opts.creds.clone());
        let repo = client.repository(r);
        let lease = self.lease(24 * 3600)?;
        let top = repo.manifest(&r.manifest_ref())?;
        self.put_small(&lease, &top.bytes, &top.digest)?;
        let want = opts.platform.clone().unwrap_or_else(Platform::host);
        let (manifest, mdigest, mmt) = match manifest::parse(&top.bytes, &top.media_type)? {
            Parsed::Manifest(m) => (
                m,
                top.digest.clone(),
                media_type_of(&top.media_type, manifest::OCI_MANIFEST),
            ),
            Parsed::Index(idx) => {
                let d = manifest::select_platform(&idx, &want)?;
                let dd = d.digest()?;
                let m = repo.manifest(dd.as_str())?;
                self.put_small(&lease, &m.bytes, &m.digest)?;
                match manifest::parse(&m.bytes, &m.media_type)? {
                    Parsed::Manifest(man) => {
                        (man, m.digest, media_type_of(&m.media_type, &d.media_type))
                    }
                    Parsed::Index(_) => {
                        return Err(Error::UnsupportedMediaType(format!(
                            "nested index {dd} for platform {want}"
                        )));
                    }
                }
            }
        };
        let name = r.store_name();
        let layers = manifest.layers.clone();
        progress.event(PullEvent::Resolved {
            name: &name,
            digest: &mdigest,
            layers: &layers,
        });
        let config_bytes = self.fetch_config(&repo, &lease, &manifest)?;
        let (_, diff_ids) = parse_config(&config_bytes)?;
        let config_digest = manifest.config.digest()?;
        self.fetch_and_unpack(
            Some(&repo),
            &lease,
            &manifest,
            &diff_ids,
            opts.jobs.max(1),
            progress,
        )?;
        let chain = image_chain(&diff_ids);
        let size = self.unpacked_size(chain.last())?;
        self.record_image(
            &config_digest,
            &mdigest,
            &mmt,
            chain.last(),
            size,
            Some((&name, &top.digest, &media_type_of(&top.media_type, &mmt))),
        )?;
        drop(lease);
        self.load_image(&config_digest)
    }

    fn put_small(&self, lease: &Lease<'_>, bytes: &[u8], d: &Digest) -> Result<()> {
        let g = self.gc_lock.shared()?;
        lease.add("blob", d.as_str())?;
        self.content.put(bytes, Some(d), &g)?;
        Ok(())
    }

    fn fetch_config(
        &self,
        repo: &Repository<'_>,
        lease: &Lease<'_>,
        m: &Manifest,
    ) -> Result<Vec<u8>> {
        let mt = m.config.media_type.as_str();
        if mt != manifest::OCI_CONFIG && mt != manifest::DOCKER_CONFIG {
            return Err(Error::UnsupportedMediaType(format!(
                "{mt:?} for the image config (not a container image?)"
            )));
        }
        let d = m.config.digest()?;
        if self.content.has(&d) {
            let g = self.gc_lock.shared()?;
            lease.add("blob", d.as_str())?;
            drop(g);
            return self.content.read(&d);
        }
        if m.config.size > 64 << 20 {
            return Err(Error::Invalid(format!(
                "image config {d} is too large ({} bytes)",
                m.config.size
            )));
        }
        let mut bytes = Vec::new();
        repo.blob(&d, 0, m.config.size)?
            .reader
            .read_to_end(&mut bytes)
            .map_err(|e| Error::Registry(format!("reading config {d}: {e}")))?;
        self.put_small(lease, &bytes, &d)?;
        Ok(bytes)
    }

    /// Download what is missing (when `repo` is given) and unpack every layer whose
    /// snapshot does not exist yet.
    pub(crate) fn fetch_and_unpack(
        &self,
        repo: Option<&Repository<'_>>,
        lease: &Lease<'_>,
        m: &Manifest,
        diff_ids: &[Digest],
        jobs: usize,
        progress: &dyn PullProgress,
    ) -> Result<()> {
        if diff_ids.len() != m.layers.len() {
            return Err(Error::Invalid(format!(
                "the manifest has {} layers but the config {} diff ids",
                m.layers.len(),
                diff_ids.len()
            )));
        }
        let mut digests = Vec::new();
        for l in &m.layers {
            manifest::layer_compression(&l.media_type)?;
            digests.push(l.digest()?);
        }
        let chain = image_chain(diff_ids);
        // Layers whose snapshot exists (with all below it) are not unpacked again; what is
        // there is leased first, under the GC lock, so a concurrent GC cannot take it.
        let mut first_missing = chain.len();
        {
            let _g = self.gc_lock.shared()?;
            let conn = self.conn()?;
            for (i, c) in chain.iter().enumerate().rev() {
                if self.snapshots.get(&conn, c.as_str())?.is_some() {
                    break;
                }
                first_missing = i;
            }
            drop(conn);
            for c in &chain[..first_missing] {
                lease.add("snapshot", c.as_str())?;
            }
            for d in &digests {
                lease.add("blob", d.as_str())?;
            }
        }
        let mut transfers: HashMap<Digest, Arc<Transfer>> = HashMap::new();
        let mut queue = VecDeque::new();
        for (i, l) in m.layers.iter().enumerate() {
            let d = &digests[i];
            if self.content.has(d) {
                if i < first_missing {
                    progress.event(PullEvent::LayerExists { digest: d });
                }
                continue;
            }
            if repo.is_none() {
                return Err(Error::NotFound(format!("layer blob {d} is missing")));
            }
            if !transfers.contains_key(d) {
                transfers.insert(d.clone(), Transfer::new(l.size));
                queue.push_back((d.clone(), l.size));
            }
        }
        let cancel = AtomicBool::new(false);
        let queue = Mutex::new(queue);
        let workers = jobs.min(transfers.len());
        std::thread::scope(|s| -> Result<()> {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        let next = queue.lock().unwrap().pop_front();
                        let Some((d, size)) = next else { break };
                        let t = transfers[&d].clone();
                        if cancel.load(Ordering::Relaxed) {
                            t.fail("cancelled".into());
                            continue;
                        }
                        let repo = repo.expect("transfers only with a registry");
                        match self.download(repo, lease, &d, size, &t, &cancel, progress) {
                            Ok(()) => progress.event(PullEvent::Downloaded { digest: &d }),
                            Err(e) => t.fail(format!("downloading layer {d}: {e}")),
                        }
                    }
                });
            }
            let sizes: Vec<u64> = m.layers.iter().map(|l| l.size).collect();
            let result = self.unpack_layers(
                lease,
                &digests,
                &sizes,
                diff_ids,
                &chain,
                first_missing,
                &transfers,
                progress,
            );
            if result.is_err() {
                cancel.store(true, Ordering::Relaxed);
            }
            result?;
            for (d, t) in &transfers {
                t.wait()
                    .map_err(|e| Error::Registry(e).context(format!("layer {d}")))?;
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn unpack_layers(
        &self,
        lease: &Lease<'_>,
        digests: &[Digest],
        sizes: &[u64],
        diff_ids: &[Digest],
        chain: &[Digest],
        first_missing: usize,
        transfers: &HashMap<Digest, Arc<Transfer>>,
        progress: &dyn PullProgress,
    ) -> Result<()> {
        for i in first_missing..chain.len() {
            let d = &digests[i];
            let transfer = transfers.get(d);
            progress.event(PullEvent::Extracting {
                digest: d,
                streaming: transfer.is_some(),
            });
            let src: Box<dyn Read> = match transfer {
                Some(t) => Box::new(t.reader()),
                None => Box::new(self.content.open_blob(d)?),
            };
            let parent = if i == 0 {
                String::new()
            } else {
                chain[i - 1].to_string()
            };
            let lowers = if parent.is_empty() {
                Vec::new()
            } else {
                self.snapshots.chain_dirs(&*self.conn()?, &parent)?
            };
            let ex = self.snapshots.new_extraction()?;
            let what = format!("layer {} ({d})", i + 1);
            let limit = Some(Limit {
                compressed: sizes[i],
                limits: self.registries.limits,
            });
            let unpacked = match apply_blob(src, &ex.fs(), &lowers, &diff_ids[i], limit) {
                Ok(n) => n,
                Err(e) => {
                    // Bytes that fail their digest make any unpack error; when the download
                    // failed (or will), that is the cause to report.
                    if let Some(Err(msg)) = transfer.map(|t| t.wait()) {
                        return Err(Error::Registry(msg));
                    }
                    return Err(e.context(what));
                }
            };
            if let Some(t) = transfer {
                t.wait().map_err(Error::Registry)?;
            }
            let _g = self.gc_lock.shared()?;
            lease.add("snapshot", chain[i].as_str())?;
            self.snapshots
                .commit(&mut *self.conn()?, ex, chain[i].as_str(), &parent, unpacked)?;
            progress.event(PullEvent::Extracted { digest: d });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn download(
        &self,
        repo: &Repository<'_>,
        lease: &Lease<'_>,
        d: &Digest,
        size: u64,
        t: &Transfer,
        cancel: &AtomicBool,
        progress: &dyn PullProgress,
    ) -> Result<()> {
        let Some(mut ing) = self.content.ingest(d, size)? else {
            t.finish(Arc::new(self.content.open_blob(d)?));
            return Ok(());
        };
        t.start(ing.file(), ing.written());
        let mut attempt = 0;
        loop {
            match fetch_into(repo, &mut ing, d, size, t, cancel, progress) {
                Ok(()) => break,
                // Network trouble: try again from where the file ends (a Range request).
                Err(Error::Registry(_)) if attempt < 3 && !cancel.load(Ordering::Relaxed) => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(500 * attempt));
                }
                Err(e) => return Err(e),
            }
        }
        let g = self.gc_lock.shared()?;
        lease.add("blob", d.as_str())?;
        ing.commit(&g)?;
        drop(g);
        t.finish(Arc::new(self.content.open_blob(d)?));
        Ok(())
    }
}

fn fetch_into(
    repo: &Repository<'_>,
    ing: &mut crate::content::Ingest,
    d: &Digest,
    size: u64,
    t: &Transfer,
    cancel: &AtomicBool,
    progress: &dyn PullProgress,
) -> Result<()> {
    let offset = ing.written();
    if offset == size {
        return Ok(());
    }
    let stream = repo.blob(d, offset, size)?;
    let mut reader = stream.reader;
    if !stream.resumed && offset > 0 {
        // The server ignored the range: skip what we have.
        let skipped = io::copy(&mut (&mut reader).take(offset), &mut io::sink())
            .map_err(|e| Error::Registry(format!("reading blob {d}: {e}")))?;
        if skipped != offset {
            return Err(Error::Registry(format!("blob {d} ended early")));
        }
    }
    let mut buf = vec![0u8; 256 << 10];
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::Invalid("cancelled".into()));
        }
        let n = reader
            .read(&mut buf)
            .map_err(|e| Error::Registry(format!("reading blob {d}: {e}")))?;
        if n == 0 {
            break;
        }
        ing.write(&buf[..n])?;
        t.advance(n as u64);
        progress.event(PullEvent::Downloading {
            digest: d,
            done: ing.written(),
            total: size,
        });
    }
    if ing.written() != size {
        return Err(Error::Registry(format!(
            "blob {d} truncated: got {} of {size} bytes",
            ing.written()
        )));
    }
    Ok(())
}

fn media_type_of(content_type: &str, fallback: &str) -> String {
    let ct = content_type.split(';').next().unwrap_or("").trim();
    if ct.is_empty() || ct == "application/json" || ct == "text/plain" {
        fallback.to_string()
    } else {
        ct.to_string()
    }
}

/// A reader of a (possibly compressed) layer: gzip and zstd are recognised by their magic
/// bytes, whatever the media type claims; anything else is read as a plain tar.
pub fn decompress<'a>(mut r: impl Read + 'a) -> io::Result<Box<dyn Read + 'a>> {
    let mut head = Vec::with_capacity(4);
    while head.len() < 4 {
        let mut b = [0u8; 4];
        let n = r.read(&mut b[..4 - head.len()])?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&b[..n]);
    }
    let gz = head.starts_with(&[0x1f, 0x8b]);
    let zst = head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
    let br = BufReader::with_capacity(1 << 20, io::Cursor::new(head).chain(r));
    Ok(if gz {
        Box::new(flate2::bufread::MultiGzDecoder::new(br))
    } else if zst {
        Box::new(zstd::stream::read::Decoder::with_buffer(br)?)
    } else {
        Box::new(br)
    })
}

/// How much a layer may expand: its compressed size and the configured limits.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    /// The layer blob's size.
    pub compressed: u64,
    /// The configured limits.
    pub limits: crate::config::UnpackLimits,
}

/// A reader that fails once more than `max` bytes came through, and says so in `hit`
/// (the tar reader wraps the error; the caller reports the limit itself).
struct Bounded<R> {
    inner: R,
    read: u64,
    max: u64,
    hit: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.max {
            self.hit.set(true);
            return Err(io::Error::other("the layer exceeds its unpack limit"));
        }
        Ok(n)
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Decompress `blob`, apply it into `upper` over `lowers`, and check the tar's digest
/// against `diff_id`. Returns the size of the tar stream (the layer's unpacked size). With
/// a `limit`, a layer that decompresses to more than it allows is refused.
pub fn apply_blob(
    blob: impl Read,
    upper: &Path,
    lowers: &[PathBuf],
    diff_id: &Digest,
    limit: Option<Limit>,
) -> Result<u64> {
    let rd = decompress(blob).map_err(|e| Error::io("reading layer", e))?;
    let hit = std::rc::Rc::new(std::cell::Cell::new(false));
    let max = limit
        .and_then(|l| l.limits.limit_for(l.compressed))
        .unwrap_or(u64::MAX);
    let bounded = Bounded {
        inner: rd,
        read: 0,
        max,
        hit: hit.clone(),
    };
    let mut h = HashingReader::new(bounded);
    let lower_refs: Vec<&Path> = lowers.iter().map(|p| p.as_path()).collect();
    let applied = unpack::apply_layer(&mut h, upper, &lower_refs);
    let finished = applied.and_then(|_| h.finish().map_err(|e| Error::io("reading layer", e)));
    if hit.get()
        && let Some(l) = limit
    {
        return Err(Error::Invalid(format!(
            "it unpacks to more than {} from {} compressed: more than {} times its size and \
             than the {} allowance (a decompression bomb?); if the image is trusted, raise \
             images.max-expansion-ratio or images.expansion-allowance-bytes in the config file",
            human(max),
            human(l.compressed),
            l.limits.max_expansion_ratio,
            human(l.limits.expansion_allowance_bytes)
        )));
    }
    let (got, size) = finished?;
    if &got != diff_id {
        return Err(Error::DigestMismatch {
            what: "uncompressed layer (diff id)".into(),
            expected: diff_id.to_string(),
            actual: got.to_string(),
        });
    }
    Ok(size)
}
