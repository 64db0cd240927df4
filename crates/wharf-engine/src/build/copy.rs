//! COPY and ADD: files from the build context (or an earlier stage, or an image) written
//! into a created container of the image so far, whose writable layer becomes the step's
//! layer.
//!
//! The files go in as one tar extracted at the container's root by the same code as
//! `wharf cp` (no `..`, no symlink followed on the way). Sources are found with
//! [`wharf_build::context`], which refuses paths out of the context; the context's
//! `.dockerignore` leaves out what it names. Files are owned by root (or by `--chown`'s
//! ids or names, looked up in the image), keep their modes (or take `--chmod`'s) and
//! modification times, as docker's COPY does.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use wharf_build::HereDoc;
use wharf_build::ignore::DockerIgnore;
use wharf_image::Image;
use wharf_image::digest::{Digest, HashingReader};

use super::{BuildRequest, StageState, StepEvent, cache, config};
use crate::engine::Engine;
use crate::error::{Context, Error, Result};

/// A COPY or ADD as written.
pub(super) struct CopySpec<'a> {
    pub add: bool,
    pub from: Option<&'a str>,
    pub chown: Option<&'a str>,
    pub chmod: Option<&'a str>,
    pub sources: &'a [String],
    pub heredocs: &'a [HereDoc],
    pub dest: &'a str,
    pub text: &'a str,
}

/// One file, directory or link to write: where from, where to (relative to the
/// container's root) and what it is.
struct Item {
    /// The destination directory a directory's contents go into: made 0755 (and the
    /// files' owner's) when missing, left as it is when there.
    top: bool,
    /// The name it takes in a destination directory.
    name: String,
    src: Option<PathBuf>,
    body: Option<Vec<u8>>,
    target: String,
    meta: Option<std::fs::Metadata>,
    /// ADD of a local archive: extracted at `target` (a directory).
    extract: bool,
}

/// Owners and mode the step gives its files.
struct Ownership {
    uid: u64,
    gid: u64,
    mode: Option<u32>,
}

/// `--chmod`'s mode, checked before anything runs.
fn parse_mode(chmod: Option<&str>) -> Result<Option<u32>> {
    chmod
        .map(|m| {
            u32::from_str_radix(m, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| Error::Invalid(format!("--chmod={m}: not an octal mode")))
        })
        .transpose()
}

/// `--chown`'s owners: ids, or names looked up in the destination image's /etc/passwd
/// and /etc/group (read the bounded, contained way). A user without a group takes the
/// same number as its group, as docker's COPY has it.
fn parse_owners(chown: Option<&str>, rootfs: &Path) -> Result<(u64, u64)> {
    let Some(c) = chown else {
        return Ok((0, 0));
    };
    let (uid, gid) = match c.split_once(':') {
        Some(_) => {
            let (u, g, _) = crate::specgen::resolve_user(rootfs, c)?;
            (u, g)
        }
        None => {
            let (u, _, _) = crate::specgen::resolve_user(rootfs, c)?;
            (u, u)
        }
    };
    Ok((u64::from(uid), u64::from(gid)))
}

/// `path` lexically normalised below the root, without a leading `/`.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// `name` below the root-relative directory `dir` ("" is the root itself).
fn join_rel(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The digest of a file's content, read as a stream (a build's cache keys hash what the
/// steps copy or mount, which may be large).
pub(super) fn file_digest(path: &Path) -> Result<Digest> {
    let what = || format!("{}: reading it", path.display());
    let mut h = HashingReader::new(File::open(path).ctx(what)?);
    std::io::copy(&mut h, &mut std::io::sink()).ctx(what)?;
    Ok(h.finish().ctx(what)?.0)
}

/// The file as a tar stream, if it is a tar archive ADD extracts: plain, or compressed
/// with gzip, zstd, bzip2 or xz (docker's list). xz's decoder writes rather than reads, so
/// that one is decompressed into an unnamed file in `spool_dir` first.
fn archive_stream(path: &Path, spool_dir: &Path) -> Option<Box<dyn Read>> {
    let mut f = File::open(path).ok()?;
    let mut magic = [0u8; 6];
    let n = f.read(&mut magic).ok()?;
    f.rewind().ok()?;
    let mut r: Box<dyn Read> = if magic[..n].starts_with(b"BZh") {
        Box::new(bzip2::read::BzDecoder::new(std::io::BufReader::new(f)))
    } else if magic[..n].starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        let mut spool = tempfile::tempfile_in(spool_dir).ok()?;
        lzma_rs::xz_decompress(&mut std::io::BufReader::new(f), &mut spool).ok()?;
        spool.rewind().ok()?;
        Box::new(std::io::BufReader::new(spool))
    } else {
        wharf_image::pull::decompress(std::io::BufReader::new(f)).ok()?
    };
    let mut block = vec![0u8; 512];
    r.read_exact(&mut block).ok()?;
    if &block[257..262] != b"ustar" {
        return None;
    }
    Some(Box::new(std::io::Cursor::new(block).chain(r)))
}

impl Engine {
    /// The directory COPY --from reads: an earlier stage's image or another image, mounted
    /// read-only (unmounted by the caller).
    /// ADD's URL, downloaded to a private file under the state root: mode 0600 and the
    /// server's Last-Modified time, as docker gives it. Returns the name the URL gives the
    /// file (its path's last segment) and the file.
    fn download(&self, url: &str) -> Result<(String, tempfile::NamedTempFile)> {
        let name = url
            .split(['?', '#'])
            .next()
            .unwrap_or("")
            .split_once("://")
            .map_or("", |(_, rest)| rest)
            .split_once('/')
            .map_or("", |(_, path)| path)
            .rsplit('/')
            .find(|s| !s.is_empty())
            .unwrap_or("")
            .to_string();
        let what = || format!("ADD {url}");
        let mut file = tempfile::Builder::new()
            .prefix("build-add-")
            .tempfile_in(&self.paths.root)
            .ctx(what)?;
        let fetched = wharf_image::url_fetch::fetch(url, file.as_file_mut(), 8 << 30)?;
        let f = file.as_file();
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .ctx(what)?;
        if let Some(t) = fetched.modified {
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64);
            f.set_modified(when).ctx(what)?;
        }
        Ok((name, file))
    }

    pub(super) fn copy_source_image(
        &self,
        df: &wharf_build::Dockerfile,
        built: &[Option<Image>],
        from: &str,
    ) -> Result<Image> {
        if let Some(i) = super::stage_index(df, from).or_else(|| from.parse::<usize>().ok()) {
            return built.get(i).cloned().flatten().ok_or_else(|| {
                Error::Invalid(format!(
                    "--from={from}: that stage is not built before this one"
                ))
            });
        }
        match self.images.resolve(from) {
            Ok(i) => Ok(i),
            Err(_) => Ok(self
                .images
                .pull(from, &wharf_image::PullOptions::default(), &())?),
        }
    }

    /// COPY or ADD.
    pub(super) fn copy_step(
        &self,
        df: &wharf_build::Dockerfile,
        req: &BuildRequest,
        built: &[Option<Image>],
        st: &mut StageState,
        spec: &CopySpec<'_>,
        on: &mut dyn FnMut(StepEvent<'_>),
    ) -> Result<()> {
        let mode = parse_mode(spec.chmod)?;
        let source_image = spec
            .from
            .map(|f| self.copy_source_image(df, built, &st.expand(df, f)?))
            .transpose()?;
        let root = match &source_image {
            Some(img) => self.images.mount_image(img)?,
            None => req.context.clone(),
        };
        let result =
            self.copy_into_stage(df, req, st, spec, mode, &root, source_image.is_none(), on);
        if let Some(img) = &source_image {
            let _ = self.images.unmount_image(img);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_into_stage(
        &self,
        df: &wharf_build::Dockerfile,
        req: &BuildRequest,
        st: &mut StageState,
        spec: &CopySpec<'_>,
        mode: Option<u32>,
        root: &Path,
        from_context: bool,
        on: &mut dyn FnMut(StepEvent<'_>),
    ) -> Result<()> {
        let ignore = if from_context {
            std::fs::read_to_string(root.join(".dockerignore"))
                .map(|t| DockerIgnore::parse(&t))
                .ok()
        } else {
            None
        };
        let dest = st.expand(df, spec.dest)?;
        let workdir = st.workdir().unwrap_or("/");
        let dest_abs = if dest.starts_with('/') {
            dest.clone()
        } else {
            format!("{}/{dest}", workdir.trim_end_matches('/'))
        };
        let mut matches: Vec<(String, PathBuf)> = Vec::new();
        // Downloads of ADD's URLs, kept until the step is done.
        let mut downloads = Vec::new();
        for s in spec.sources {
            let s = st.expand(df, s)?;
            if spec.add && (s.starts_with("http://") || s.starts_with("https://")) {
                let (name, file) = self.download(&s)?;
                matches.push((name, file.path().to_path_buf()));
                downloads.push(file);
                continue;
            }
            let found = wharf_build::context::glob(root, &s).map_err(super::build_error)?;
            for rel in found {
                if ignore.as_ref().is_some_and(|i| i.excludes(&rel)) {
                    continue;
                }
                // A source that is a link is copied as what it points to.
                let real = wharf_build::context::follow(root, &rel, !from_context)
                    .map_err(super::build_error)?;
                let path =
                    wharf_build::context::resolve(root, &real).map_err(super::build_error)?;
                matches.push((rel, path));
            }
        }
        if matches.is_empty() && spec.heredocs.is_empty() {
            return Err(Error::Invalid(format!(
                "{}: no source files were specified (or all are excluded by .dockerignore)",
                spec.text
            )));
        }
        let single_dir = matches.len() == 1
            && std::fs::symlink_metadata(&matches[0].1).is_ok_and(|m| m.is_dir());
        // A destination ending in `/` (or `.`), several sources or a directory's contents go
        // into a directory; one file goes into one too when the destination is an existing
        // directory of the image, which is seen once the step's container exists.
        let mut into_dir = dest.ends_with('/')
            || dest == "."
            || dest.ends_with("/.")
            || dest == ".."
            || dest.ends_with("/..")
            || matches.len() + spec.heredocs.len() > 1
            || single_dir;
        let dest_rel = clean(&dest_abs);
        let mut items = Vec::new();
        for (rel, path) in &matches {
            let meta =
                std::fs::symlink_metadata(path).ctx(|| format!("{rel}: in the build context"))?;
            let name = Path::new(rel)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let target = if meta.is_dir() || !into_dir {
                dest_rel.clone()
            } else {
                join_rel(&dest_rel, &name)
            };
            if meta.is_dir() {
                walk_dir(path, rel, &target, ignore.as_ref(), &mut items, true)?;
            } else {
                // A local archive is extracted; a downloaded one is not, as docker has it.
                let downloaded = downloads.iter().any(|d| d.path() == path);
                let extract = spec.add
                    && !downloaded
                    && meta.is_file()
                    && archive_stream(path, &self.paths.root).is_some();
                items.push(Item {
                    top: false,
                    name,
                    src: Some(path.clone()),
                    body: None,
                    target: if extract { dest_rel.clone() } else { target },
                    meta: Some(meta),
                    extract,
                });
            }
        }
        for d in spec.heredocs {
            // An unquoted delimiter: variables are expanded, quotes kept as written.
            let body = if d.expand {
                let esc = df.escape;
                let kept = d
                    .body
                    .replace('\'', &format!("{esc}'"))
                    .replace('"', &format!("{esc}\""));
                st.expand(df, &kept)?
            } else {
                d.body.clone()
            };
            items.push(Item {
                top: false,
                name: d.name.clone(),
                src: None,
                body: Some(body.into_bytes()),
                target: if into_dir {
                    join_rel(&dest_rel, &d.name)
                } else {
                    dest_rel.clone()
                },
                meta: None,
                extract: false,
            });
        }
        // What the step copies, for its cache key and history.
        let mut lines = Vec::new();
        for it in &items {
            let digest = match (&it.src, &it.body, &it.meta) {
                (_, Some(b), _) => Digest::of(b).to_string(),
                (Some(p), _, Some(m)) if m.is_file() => file_digest(p)?.to_string(),
                (Some(p), _, Some(m)) if m.file_type().is_symlink() => {
                    format!(
                        "link:{}",
                        std::fs::read_link(p).unwrap_or_default().display()
                    )
                }
                _ => "dir".into(),
            };
            let mode = it.meta.as_ref().map_or(0o644, |m| m.mode() & 0o7777);
            lines.push(format!("{} {mode:o} {} {}", it.target, digest, it.extract));
        }
        let sum = Digest::of(lines.join("\n").as_bytes());
        let kind = if spec.add { "ADD" } else { "COPY" };
        let created_by = config::nop(&format!(
            "{kind} {}:{} in {dest}",
            if items.len() == 1 { "file" } else { "multi" },
            sum.hex()
        ));
        let owner = format!("{:?}:{mode:?}", spec.chown);
        let key = cache::key(&st.image, &created_by, &[owner]);
        if let Some(img) = self.cache_hit(req, &key, on) {
            st.image = img;
            return Ok(());
        }
        let c = self.step_container(
            &req.network,
            st,
            vec!["/bin/true".into()],
            Vec::new(),
            Vec::new(),
        )?;
        let rootfs = self.paths.rootfs(&c.row.id);
        if !into_dir && wharf_sys::contained::is_dir_in_root(&rootfs, Path::new(&dest_abs)) {
            into_dir = true;
            for it in items.iter_mut().filter(|i| !i.extract) {
                it.target = join_rel(&dest_rel, &it.name);
            }
        }
        let (uid, gid) = parse_owners(spec.chown, &rootfs)
            .map_err(|e| Error::Invalid(format!("--chown={}: {e}", spec.chown.unwrap_or(""))))?;
        let own = Ownership { uid, gid, mode };
        let mut spool =
            tempfile::tempfile_in(&self.paths.root).ctx(|| "a build step's archive".to_string())?;
        write_tar(&mut spool, &items, &own, &dest_rel, into_dir, &rootfs)
            .ctx(|| format!("{kind}: packing its files"))?;
        spool
            .rewind()
            .ctx(|| "a build step's archive".to_string())?;
        self.copy_in(&c.row.id, "/", std::io::BufReader::new(spool), true)?;
        for it in items.iter().filter(|i| i.extract) {
            let Some(p) = &it.src else { continue };
            let r = archive_stream(p, &self.paths.root).ok_or_else(|| {
                Error::Invalid(format!("{}: no longer a readable archive", p.display()))
            })?;
            self.copy_in(&c.row.id, &format!("/{}", it.target), r, true)?;
        }
        self.commit_step(req, st, &c, &created_by, &key)
    }
}

/// The entries below directory `dir` (context-relative `rel`), written below `target`.
fn walk_dir(
    dir: &Path,
    rel: &str,
    target: &str,
    ignore: Option<&DockerIgnore>,
    items: &mut Vec<Item>,
    target_is_top: bool,
) -> Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .ctx(|| format!("{rel}: in the build context"))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    items.push(Item {
        top: target_is_top,
        name: String::new(),
        src: Some(dir.to_path_buf()),
        body: None,
        target: target.to_string(),
        meta: std::fs::symlink_metadata(dir).ok(),
        extract: false,
    });
    for n in names {
        let n = n.to_string_lossy().into_owned();
        let child_rel = if rel.is_empty() || rel == "." {
            n.clone()
        } else {
            format!("{}/{n}", rel.trim_end_matches('/'))
        };
        if ignore.is_some_and(|i| i.excludes(&child_rel) && !i.may_reinclude_below(&child_rel)) {
            continue;
        }
        let path = dir.join(&n);
        let meta = std::fs::symlink_metadata(&path)
            .ctx(|| format!("{child_rel}: in the build context"))?;
        let child_target = join_rel(target, &n);
        if meta.is_dir() {
            walk_dir(&path, &child_rel, &child_target, ignore, items, false)?;
        } else if !ignore.is_some_and(|i| i.excludes(&child_rel)) {
            items.push(Item {
                top: false,
                name: n.clone(),
                src: Some(path),
                body: None,
                target: child_target,
                meta: Some(meta),
                extract: false,
            });
        }
    }
    Ok(())
}

/// Append the directories of `path` (and its ancestors) that `rootfs` lacks, top first, as
/// 0755 directories of `uid:gid`: the ones that exist are left as they are (a COPY into
/// /tmp keeps its sticky bit).
pub(super) fn append_dirs<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    (uid, gid): (u64, u64),
    rootfs: &Path,
) -> std::io::Result<()> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    for i in 1..=parts.len() {
        let dir = parts[..i].join("/");
        if wharf_sys::contained::exists_in_root(rootfs, Path::new(&format!("/{dir}"))) {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_uid(uid);
        h.set_gid(gid);
        h.set_size(0);
        h.set_mtime(0);
        tar.append_data(&mut h, format!("{dir}/"), std::io::empty())?;
    }
    Ok(())
}

/// The tar of a step's files: the destination's directories first (root's, 0755; an
/// existing one is kept as it is), then the items.
fn write_tar(
    out: &mut File,
    items: &[Item],
    own: &Ownership,
    dest: &str,
    into_dir: bool,
    rootfs: &Path,
) -> std::io::Result<()> {
    let mut tar = tar::Builder::new(std::io::BufWriter::new(out));
    let parent = if into_dir {
        dest
    } else {
        dest.rsplit_once('/').map_or("", |(p, _)| p)
    };
    // The directories made on the way are the new files' owner's, as buildah and
    // BuildKit make them.
    append_dirs(&mut tar, parent, (own.uid, own.gid), rootfs)?;
    for it in items.iter().filter(|i| !i.extract) {
        let mut h = tar::Header::new_gnu();
        h.set_uid(own.uid);
        h.set_gid(own.gid);
        let mtime = it.meta.as_ref().map_or(0, |m| m.mtime().max(0) as u64);
        h.set_mtime(mtime);
        match (&it.body, &it.src, &it.meta) {
            (Some(b), _, _) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(own.mode.unwrap_or(0o644));
                h.set_size(b.len() as u64);
                tar.append_data(&mut h, &it.target, b.as_slice())?;
            }
            (None, Some(p), Some(m)) if m.is_dir() => {
                if it.target.is_empty()
                    || (it.top
                        && wharf_sys::contained::exists_in_root(
                            rootfs,
                            Path::new(&format!("/{}", it.target)),
                        ))
                {
                    continue;
                }
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(if it.top {
                    0o755
                } else {
                    own.mode.unwrap_or(m.mode() & 0o7777)
                });
                h.set_size(0);
                tar.append_data(&mut h, format!("{}/", it.target), std::io::empty())?;
                let _ = p;
            }
            (None, Some(p), Some(m)) if m.file_type().is_symlink() => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, &it.target, std::fs::read_link(p)?)?;
            }
            (None, Some(p), Some(m)) if m.is_file() => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(own.mode.unwrap_or(m.mode() & 0o7777));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(p)?;
                h.set_size(f.metadata()?.len());
                tar.append_data(&mut h, &it.target, f)?;
            }
            // Devices, FIFOs and sockets are not copied, as docker skips them.
            _ => {}
        }
    }
    tar.into_inner()?.flush()
}
