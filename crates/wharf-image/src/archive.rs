//! Image archives: `load` of an OCI image-layout tarball or a `docker save` tarball (old
//! layout with `<id>/layer.tar`, or docker 25+'s OCI layout plus `manifest.json`), `save` in
//! either format, and `import` of a plain root filesystem tarball as a one-layer image.
//!
//! Archives are read as a stream, once: blobs go straight into the content store (blobs
//! under `blobs/sha256/` are verified against their names), small metadata files are kept in
//! memory, and the images are assembled at the end. Paths inside the archive are only keys
//! of that map, never paths on disk, so a hostile archive cannot place files anywhere; the
//! layers then go through the same confined unpacker as pulled ones.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::manifest::{self, Descriptor, Index, Manifest, Parsed, Platform};
use crate::pull::decompress;
use crate::reference::Reference;
use crate::store::{Image, ImageStore, Lease, image_chain, parse_config};

/// Archive formats of `save`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveFormat {
    /// OCI image layout (`oci-layout`, `index.json`, `blobs/`).
    Oci,
    /// `docker save` (docker 25+ layout: the OCI layout plus `manifest.json` and
    /// `repositories`, which older `docker load` reads too).
    Docker,
}

/// An image loaded from an archive.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Image id.
    pub id: Digest,
    /// Names it was recorded under (none for an unnamed OCI layout entry).
    pub names: Vec<String>,
    /// The tag an OCI layout gave it without a name (its ref.name), if so.
    pub tag_only: Option<String>,
}

#[derive(Deserialize, Serialize)]
struct DockerManifestEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

/// The most a metadata file of an archive (manifest.json, index.json, a config, a
/// manifest) may hold: real ones are kilobytes. Larger ones are refused when read.
pub const METADATA_LIMIT: u64 = 4 << 20;
/// The most the metadata files of one archive may hold in memory together; the rest are
/// streamed to the content store like layers (an archive is untrusted input: a small one
/// can expand to many such files).
pub const METADATA_TOTAL: u64 = 32 << 20;

/// Whether an archive member is metadata the loader reads (kept in memory when small):
/// the layouts' own files and JSON documents. Everything else (layers, blobs) is streamed
/// to the content store.
fn is_metadata(path: &str) -> bool {
    matches!(
        path,
        "manifest.json" | "index.json" | "oci-layout" | "repositories"
    ) || (path.ends_with(".json") && !path.starts_with("blobs/"))
}

/// A file of the archive: in memory, or committed to the store.
enum Member {
    Small(Vec<u8>),
    Blob(Digest, u64),
    Link(String),
}

fn clean_path(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.join("/")
}

impl ImageStore {
    /// Load the images of an archive (gzip/zstd-compressed or plain tar).
    pub fn load(&self, input: impl Read) -> Result<Vec<Loaded>> {
        self.load_named(input, "the archive")
    }

    /// [`ImageStore::load`] of an archive its user knows as `name` (a file, standard input),
    /// which errors name. Memory stays bounded whatever the archive holds: metadata up to
    /// [`METADATA_TOTAL`] in memory, the rest streamed to the store. An archive that yields
    /// no image is an error.
    pub fn load_named(&self, input: impl Read, name: &str) -> Result<Vec<Loaded>> {
        match self.load_inner(input) {
            Ok(l) if l.is_empty() => Err(Error::Invalid(format!(
                "loading {name}: it holds no image (its manifest.json or index.json lists none)"
            ))),
            Ok(l) => Ok(l),
            Err(e) => Err(e.context(format!("loading {name}"))),
        }
    }

    fn load_inner(&self, input: impl Read) -> Result<Vec<Loaded>> {
        let lease = self.lease(24 * 3600)?;
        let rd = decompress(input).map_err(|e| Error::io("reading the archive", e))?;
        let mut ar = tar::Archive::new(rd);
        let mut members: HashMap<String, Member> = HashMap::new();
        let mut in_memory = 0u64;
        let entries = ar
            .entries()
            .map_err(|e| Error::Invalid(format!("not a tar archive: {e}")))?;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| Error::Invalid(format!("reading the archive: {e}")))?;
            let path = clean_path(&String::from_utf8_lossy(&entry.path_bytes()));
            let kind = entry.header().entry_type();
            if kind.is_symlink() || kind.is_hard_link() {
                let target = entry
                    .link_name_bytes()
                    .map(|t| String::from_utf8_lossy(&t).into_owned())
                    .unwrap_or_default();
                let base = if kind.is_symlink() && !target.starts_with('/') {
                    path.rsplit_once('/')
                        .map(|(d, _)| format!("{d}/"))
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                members.insert(path, Member::Link(clean_path(&format!("{base}{target}"))));
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let size = entry.size();
            let by_name: Option<Digest> = path
                .strip_prefix("blobs/sha256/")
                .and_then(|h| format!("sha256:{h}").parse().ok());
            let m = if by_name.is_none()
                && is_metadata(&path)
                && size <= METADATA_LIMIT
                && in_memory + size <= METADATA_TOTAL
            {
                let mut v = Vec::new();
                (&mut entry)
                    .take(METADATA_LIMIT)
                    .read_to_end(&mut v)
                    .map_err(|e| Error::io(format!("reading {path} from the archive"), e))?;
                in_memory += v.len() as u64;
                Member::Small(v)
            } else {
                let staged = self.content.stage(&mut entry)?;
                let g = self.gc_lock.shared()?;
                lease.add("blob", staged.digest.as_str())?;
                let size = staged.size;
                let d = self
                    .content
                    .commit_staged(staged, by_name.as_ref(), &g)
                    .map_err(|e| e.context(format!("archive member {path}")))?;
                Member::Blob(d, size)
            };
            members.insert(path, m);
        }
        let mut a = ArchiveView {
            store: self,
            lease: &lease,
            members,
        };
        if a.members.contains_key("manifest.json") {
            a.load_docker()
        } else if a.members.contains_key("index.json") {
            a.load_oci()
        } else {
            Err(Error::Invalid(
                "neither an OCI image layout (index.json) nor a docker save archive (manifest.json)"
                    .into(),
            ))
        }
    }

    /// Write `images` as an archive to `out`.
    pub fn save(&self, images: &[&str], format: ArchiveFormat, out: impl Write) -> Result<()> {
        let mut list = Vec::new();
        for name in images {
            let img = self.resolve(name)?;
            // A name given on the command line is the one recorded; an id saves all names.
            let names = match Reference::parse(name).ok().map(|r| r.store_name()) {
                Some(n) if img.names.contains(&n) => vec![n],
                _ => img.names.clone(),
            };
            list.push((img, names));
        }
        self.save_inner(&list, format, out)
            .map_err(|e| e.context("saving images"))
    }

    fn save_inner(
        &self,
        list: &[(Image, Vec<String>)],
        format: ArchiveFormat,
        out: impl Write,
    ) -> Result<()> {
        let mut tar = tar::Builder::new(out);
        let mut written = std::collections::HashSet::new();
        let mut index = Vec::new();
        let mut docker = Vec::new();
        let mut repositories: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        add_bytes(&mut tar, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        for (img, names) in list {
            let mut blobs = vec![img.manifest_digest.clone(), img.id.clone()];
            for l in &img.manifest.layers {
                blobs.push(l.digest()?);
            }
            for d in &blobs {
                if written.insert(d.clone()) {
                    let mut f = self.content.open_blob(d)?;
                    let size = f
                        .metadata()
                        .map_err(|e| Error::io(format!("stat blob {d}"), e))?
                        .len();
                    let mut h = tar::Header::new_ustar();
                    h.set_size(size);
                    h.set_mode(0o444);
                    h.set_mtime(0);
                    h.set_entry_type(tar::EntryType::Regular);
                    tar.append_data(&mut h, format!("blobs/sha256/{}", d.hex()), &mut f)
                        .map_err(|e| Error::io("writing the archive", e))?;
                }
            }
            let msize = self.content.size(&img.manifest_digest).unwrap_or(0);
            let desc = |name: Option<&String>| {
                let mut ann = BTreeMap::new();
                if let Some(n) = name {
                    ann.insert("io.containerd.image.name".to_string(), n.clone());
                    if let Ok(r) = Reference::parse(n) {
                        ann.insert(
                            "org.opencontainers.image.ref.name".to_string(),
                            r.tag.clone().unwrap_or_else(|| n.clone()),
                        );
                    }
                }
                Descriptor {
                    media_type: img.manifest_media_type.clone(),
                    digest: img.manifest_digest.to_string(),
                    size: msize,
                    platform: None,
                    annotations: (!ann.is_empty()).then_some(ann),
                    urls: None,
                }
            };
            if names.is_empty() {
                index.push(desc(None));
            }
            for n in names {
                index.push(desc(Some(n)));
            }
            let tags: Vec<String> = names
                .iter()
                .filter(|n| !n.contains('@'))
                .map(|n| docker_familiar(n))
                .collect();
            for t in &tags {
                if let Some((repo, tag)) = t.rsplit_once(':') {
                    repositories
                        .entry(repo.to_string())
                        .or_default()
                        .insert(tag.to_string(), img.id.hex().to_string());
                }
            }
            docker.push(DockerManifestEntry {
                config: format!("blobs/sha256/{}", img.id.hex()),
                repo_tags: (!tags.is_empty()).then_some(tags),
                layers: img
                    .manifest
                    .layers
                    .iter()
                    .map(|l| format!("blobs/sha256/{}", &l.digest[7..]))
                    .collect(),
            });
        }
        let idx = Index {
            schema_version: 2,
            media_type: Some(manifest::OCI_INDEX.to_string()),
            manifests: index,
            annotations: None,
        };
        add_bytes(
            &mut tar,
            "index.json",
            &serde_json::to_vec(&idx).expect("serialisable"),
        )?;
        if format == ArchiveFormat::Docker {
            add_bytes(
                &mut tar,
                "manifest.json",
                &serde_json::to_vec(&docker).expect("serialisable"),
            )?;
            add_bytes(
                &mut tar,
                "repositories",
                &serde_json::to_vec(&repositories).expect("serialisable"),
            )?;
        }
        tar.into_inner()
            .and_then(|mut w| w.flush())
            .map_err(|e| Error::io("writing the archive", e))
    }

    /// Import a root filesystem tarball (plain, gzip or zstd) as a one-layer image, named
    /// `name` if given.
    pub fn import(&self, input: impl Read, name: Option<&str>) -> Result<Image> {
        self.import_with(input, name, &[], None)
    }

    /// [`ImageStore::import`], with dockerfile instructions applied to the new image's
    /// config (`--change`, see [`crate::changes`]) and a comment for its history (`-m`).
    pub fn import_with(
        &self,
        input: impl Read,
        name: Option<&str>,
        changes: &[String],
        message: Option<&str>,
    ) -> Result<Image> {
        // Refused before anything is read or stored.
        let mut image_config = serde_json::Map::new();
        for c in changes {
            crate::changes::apply(&mut image_config, c)?;
        }
        self.import_inner(input, name, image_config, message)
            .map_err(|e| e.context("importing the tarball"))
    }

    fn import_inner(
        &self,
        input: impl Read,
        name: Option<&str>,
        image_config: serde_json::Map<String, serde_json::Value>,
        message: Option<&str>,
    ) -> Result<Image> {
        let reference = name.map(Reference::parse).transpose()?;
        let lease = self.lease(24 * 3600)?;
        let staged = self.content.stage(input)?;
        let layer_digest = {
            let g = self.gc_lock.shared()?;
            lease.add("blob", staged.digest.as_str())?;
            self.content.commit_staged(staged, None, &g)?
        };
        let layer_size = self.content.size(&layer_digest).unwrap_or(0);
        // The diff id: the digest of the uncompressed tar.
        let mut head = [0u8; 4];
        let n = self
            .content
            .open_blob(&layer_digest)?
            .read(&mut head)
            .unwrap_or(0);
        let media_type = if head[..n].starts_with(&[0x1f, 0x8b]) {
            manifest::OCI_LAYER_GZIP
        } else if head[..n].starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            manifest::OCI_LAYER_ZSTD
        } else {
            manifest::OCI_LAYER
        };
        let rd = decompress(self.content.open_blob(&layer_digest)?)
            .map_err(|e| Error::io("reading the tarball", e))?;
        let (diff_id, _) = crate::digest::HashingReader::new(rd)
            .finish()
            .map_err(|e| Error::io("reading the tarball", e))?;
        let host = Platform::host();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut config = serde_json::json!({
            "created": rfc3339(now),
            "architecture": host.architecture,
            "os": host.os,
            "config": image_config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id.to_string()]},
            "history": [{"created": rfc3339(now), "created_by": "wharf import"}],
        });
        if let Some(m) = message {
            config["history"][0]["comment"] = serde_json::Value::String(m.to_string());
        }
        if let Some(v) = &host.variant {
            config["variant"] = serde_json::Value::String(v.clone());
        }
        let layer = Descriptor {
            media_type: media_type.to_string(),
            digest: layer_digest.to_string(),
            size: layer_size,
            platform: None,
            annotations: None,
            urls: None,
        };
        self.image_of(&lease, &config, vec![layer], reference.as_ref())
    }

    /// Store an image made here (import, commit) of `config` and `layers` (their blobs in
    /// the store), unpacked, named `reference` when given.
    pub(crate) fn image_of(
        &self,
        lease: &Lease<'_>,
        config: &serde_json::Value,
        layers: Vec<Descriptor>,
        reference: Option<&Reference>,
    ) -> Result<Image> {
        let config = serde_json::to_vec(config).expect("serialisable");
        let m = Manifest {
            schema_version: 2,
            media_type: Some(manifest::OCI_MANIFEST.to_string()),
            config: Descriptor {
                media_type: manifest::OCI_CONFIG.to_string(),
                digest: Digest::of(&config).to_string(),
                size: config.len() as u64,
                platform: None,
                annotations: None,
                urls: None,
            },
            layers,
            annotations: None,
        };
        let mbytes = serde_json::to_vec(&m).expect("serialisable");
        let view = ArchiveView {
            store: self,
            lease,
            members: HashMap::new(),
        };
        let id = view.finish_image(&config, &mbytes, &m, manifest::OCI_MANIFEST)?;
        if let Some(r) = reference {
            self.record_named(&id, &r.store_name())?;
        }
        self.load_image(&id)
    }

    fn record_named(&self, id: &Digest, name: &str) -> Result<()> {
        let img = self.load_image(id)?;
        self.record_image(
            id,
            &img.manifest_digest,
            &img.manifest_media_type,
            img.top_chain_id.as_ref(),
            img.size,
            Some((name, &img.manifest_digest, &img.manifest_media_type)),
        )
    }
}

struct ArchiveView<'s, 'l> {
    store: &'s ImageStore,
    lease: &'l Lease<'s>,
    members: HashMap<String, Member>,
}

impl ArchiveView<'_, '_> {
    fn resolve(&self, path: &str) -> Result<&Member> {
        let mut p = clean_path(path);
        for _ in 0..16 {
            match self.members.get(&p) {
                Some(Member::Link(t)) => p = t.clone(),
                Some(m) => return Ok(m),
                None => break,
            }
        }
        Err(Error::Invalid(format!("the archive has no file {path:?}")))
    }

    /// The bytes of a metadata member (at most [`METADATA_LIMIT`]).
    fn bytes(&self, path: &str) -> Result<Vec<u8>> {
        match self.resolve(path)? {
            Member::Small(v) => Ok(v.clone()),
            Member::Blob(d, size) => {
                if *size > METADATA_LIMIT {
                    return Err(Error::Invalid(format!(
                        "archive member {path} is {size} bytes: metadata of more than {METADATA_LIMIT} bytes is refused"
                    )));
                }
                self.store.content.read(d)
            }
            Member::Link(_) => unreachable!("resolved"),
        }
    }

    /// Digest and size of a member, committing it to the store if it is held in memory.
    fn blob(&self, path: &str) -> Result<(Digest, u64)> {
        match self.resolve(path)? {
            Member::Blob(d, s) => Ok((d.clone(), *s)),
            Member::Small(v) => {
                let d = Digest::of(v);
                let g = self.store.gc_lock.shared()?;
                self.lease.add("blob", d.as_str())?;
                self.store.content.put(v, Some(&d), &g)?;
                Ok((d, v.len() as u64))
            }
            Member::Link(_) => unreachable!("resolved"),
        }
    }

    fn blob_by_digest(&self, d: &str) -> Result<Vec<u8>> {
        let d: Digest = d.parse()?;
        self.bytes(&format!("blobs/sha256/{}", d.hex()))
    }

    fn load_docker(&mut self) -> Result<Vec<Loaded>> {
        let entries: Vec<DockerManifestEntry> =
            serde_json::from_slice(&self.bytes("manifest.json")?)
                .map_err(|e| Error::Invalid(format!("manifest.json: {e}")))?;
        let mut out = Vec::new();
        for e in entries {
            let config = self.bytes(&e.config)?;
            let (cd, csize) = self.blob(&e.config)?;
            let mut layers = Vec::new();
            for l in &e.layers {
                let (d, size) = self.blob(l)?;
                let mut head = [0u8; 4];
                let n = self
                    .store
                    .content
                    .open_blob(&d)?
                    .read(&mut head)
                    .unwrap_or(0);
                let mt = if head[..n].starts_with(&[0x1f, 0x8b]) {
                    manifest::DOCKER_LAYER_GZIP
                } else if head[..n].starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
                    "application/vnd.docker.image.rootfs.diff.tar.zstd"
                } else {
                    "application/vnd.docker.image.rootfs.diff.tar"
                };
                layers.push(Descriptor {
                    media_type: mt.to_string(),
                    digest: d.to_string(),
                    size,
                    platform: None,
                    annotations: None,
                    urls: None,
                });
            }
            let m = Manifest {
                schema_version: 2,
                media_type: Some(manifest::DOCKER_MANIFEST.to_string()),
                config: Descriptor {
                    media_type: manifest::DOCKER_CONFIG.to_string(),
                    digest: cd.to_string(),
                    size: csize,
                    platform: None,
                    annotations: None,
                    urls: None,
                },
                layers,
                annotations: None,
            };
            let mbytes = serde_json::to_vec(&m).expect("serialisable");
            let id = self.finish_image(&config, &mbytes, &m, manifest::DOCKER_MANIFEST)?;
            let mut names = Vec::new();
            for t in e.repo_tags.unwrap_or_default() {
                names.push(Reference::parse(&t)?.store_name());
            }
            out.push(Loaded {
                id,
                names,
                tag_only: None,
            });
        }
        self.record_names(&out)?;
        Ok(out)
    }

    /// Name the loaded images, once every one of them is in the store: a load that fails
    /// halfway adds no names (its unnamed images go with the next prune).
    fn record_names(&self, loaded: &[Loaded]) -> Result<()> {
        for l in loaded {
            for n in &l.names {
                self.store.record_named(&l.id, n)?;
            }
        }
        Ok(())
    }

    fn load_oci(&mut self) -> Result<Vec<Loaded>> {
        let idx: Index = serde_json::from_slice(&self.bytes("index.json")?)
            .map_err(|e| Error::Invalid(format!("index.json: {e}")))?;
        let mut out: Vec<Loaded> = Vec::new();
        for d in &idx.manifests {
            let ann = d.annotations.clone().unwrap_or_default();
            // ref.name is a tag by the image layout's convention (containerd, docker and
            // Wharf write `latest` there, the name in io.containerd.image.name); only one
            // that is a whole reference (with a repository path or a tag) names the image.
            let tag_only = ann
                .get("org.opencontainers.image.ref.name")
                .filter(|n| !n.contains('/') && !n.contains(':'))
                .filter(|_| !ann.contains_key("io.containerd.image.name"))
                .cloned();
            let name = ann
                .get("io.containerd.image.name")
                .or_else(|| {
                    ann.get("org.opencontainers.image.ref.name")
                        .filter(|n| n.contains('/') || n.contains(':'))
                })
                .and_then(|n| Reference::parse(n).ok())
                .map(|r| r.store_name());
            let mut desc = d.clone();
            let mut bytes = self.blob_by_digest(&desc.digest)?;
            if let Parsed::Index(inner) = manifest::parse(&bytes, &desc.media_type)? {
                desc = manifest::select_platform(&inner, &Platform::host())?.clone();
                bytes = self.blob_by_digest(&desc.digest)?;
            }
            let Parsed::Manifest(m) = manifest::parse(&bytes, &desc.media_type)? else {
                return Err(Error::UnsupportedMediaType(format!(
                    "nested index {}",
                    desc.digest
                )));
            };
            let config = self.blob_by_digest(&m.config.digest)?;
            let mt = m
                .media_type
                .clone()
                .unwrap_or_else(|| desc.media_type.clone());
            let id = self.finish_image(&config, &bytes, &m, &mt)?;
            let mut names = Vec::new();
            if let Some(n) = name {
                names.push(n);
            }
            match out.iter_mut().find(|l| l.id == id) {
                Some(l) => l.names.extend(names),
                None => out.push(Loaded {
                    id,
                    names,
                    tag_only: tag_only.clone(),
                }),
            }
        }
        self.record_names(&out)?;
        Ok(out)
    }

    /// Store config and manifest, unpack the layers, record the image (without a name).
    fn finish_image(&self, config: &[u8], mbytes: &[u8], m: &Manifest, mt: &str) -> Result<Digest> {
        let mt = if mt.is_empty() {
            manifest::OCI_MANIFEST
        } else {
            mt
        };
        let cd = Digest::of(config);
        let md = Digest::of(mbytes);
        {
            let g = self.store.gc_lock.shared()?;
            self.lease.add("blob", cd.as_str())?;
            self.lease.add("blob", md.as_str())?;
            self.store.content.put(config, Some(&cd), &g)?;
            self.store.content.put(mbytes, Some(&md), &g)?;
        }
        let (_, diff_ids) = parse_config(config)?;
        self.store
            .fetch_and_unpack(None, self.lease, m, &diff_ids, 1, &())?;
        let chain = image_chain(&diff_ids);
        let size = self.store.unpacked_size(chain.last())?;
        self.store
            .record_image(&cd, &md, mt, chain.last(), size, None)?;
        Ok(cd)
    }
}

fn add_bytes<W: Write>(tar: &mut tar::Builder<W>, name: &str, data: &[u8]) -> Result<()> {
    let mut h = tar::Header::new_ustar();
    h.set_size(data.len() as u64);
    h.set_mode(0o444);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, data)
        .map_err(|e| Error::io("writing the archive", e))
}

/// docker's short form of a name: `docker.io/library/busybox:1` -> `busybox:1`.
fn docker_familiar(name: &str) -> String {
    let n = name.strip_prefix("docker.io/").unwrap_or(name);
    n.strip_prefix("library/").unwrap_or(n).to_string()
}

/// `YYYY-MM-DDTHH:MM:SSZ` of unix seconds.
pub(crate) fn rfc3339(secs: u64) -> String {
    wharf_sys::time::rfc3339(secs as i64, 0, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn archive_paths_stay_keys() {
        assert_eq!(clean_path("./a/../../b//c"), "b/c");
        assert_eq!(docker_familiar("docker.io/library/busybox:1"), "busybox:1");
        assert_eq!(docker_familiar("quay.io/a/b:1"), "quay.io/a/b:1");
    }
}
