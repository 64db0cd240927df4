//! BuildKit's `RUN --mount`: what a RUN step sees besides its image, and never keeps.
//!
//! - `type=bind` (the default): a file or directory of the context, or of a stage or image
//!   (`from=`), read-only unless `rw` (then a private copy: writes are thrown away).
//! - `type=cache`: a directory kept under the state root between builds (by `id`, default
//!   the target), so package managers' caches survive; `wharf builder prune` empties it.
//! - `type=secret`: a `--secret` of the build, as a file (default `/run/secrets/<id>`, mode
//!   0400) copied to a private directory for the step; missing, it is an error if
//!   `required`, otherwise not mounted.
//! - `type=tmpfs`: an empty tmpfs.
//!
//! The mount points the runtime had to make (the target, and parents the image lacked) are
//! removed from the step's layer after the run when they are still empty, as BuildKit
//! removes its mount stubs: a secret's or cache's path leaves no trace in the image.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};

use wharf_build::RunMount;
use wharf_image::Image;
use wharf_image::digest::Digest;

use super::{BuildRequest, SecretSource, StageState};
use crate::engine::Engine;
use crate::error::{Context, Error, Result};
use crate::model::VolumeMount;

/// The mounts of one RUN step, ready; what they hold is released when dropped.
pub(super) struct Prepared<'e> {
    engine: &'e Engine,
    /// The container's mounts.
    pub volumes: Vec<VolumeMount>,
    /// What the step's cache key depends on (content digests, images, targets; never a
    /// secret's value).
    pub key: Vec<String>,
    /// Images mounted for `from=` binds.
    images: Vec<Image>,
    /// Secrets' and `rw` copies' private directories.
    _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        for img in &self.images {
            let _ = self.engine.images.unmount_image(img);
        }
    }
}

/// One `--mount`'s options by name (`target`, `dst` and `destination` are one).
struct Options<'a> {
    m: &'a RunMount,
}

impl Options<'_> {
    fn get(&self, names: &[&str]) -> Option<&str> {
        self.m
            .options
            .iter()
            .rev()
            .find(|(k, _)| names.contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
    }

    /// A flag: present bare or `=true`.
    fn flag(&self, names: &[&str]) -> bool {
        self.get(names).is_some_and(|v| v.is_empty() || v == "true")
    }

    fn target(&self) -> Option<String> {
        self.get(&["target", "dst", "destination"])
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    }

    fn number(&self, name: &str) -> Result<Option<u32>> {
        self.get(&[name])
            .map(|v| {
                v.parse()
                    .map_err(|_| Error::Invalid(format!("--mount {name}={v}: not a number")))
            })
            .transpose()
    }

    fn mode(&self, default: u32) -> Result<u32> {
        match self.get(&["mode"]) {
            None => Ok(default),
            Some(m) => u32::from_str_radix(m, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| Error::Invalid(format!("--mount mode={m}: not an octal mode"))),
        }
    }
}

/// The digest of a file or directory tree of the context: names, modes and contents.
fn tree_digest(path: &Path) -> Result<String> {
    let mut lines = Vec::new();
    let mut stack = vec![(path.to_path_buf(), String::new())];
    while let Some((p, rel)) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).ctx(|| format!("{}", p.display()))?;
        let mode = std::os::unix::fs::MetadataExt::mode(&meta);
        if meta.is_dir() {
            lines.push(format!("{rel}/ {mode:o}"));
            let mut names: Vec<_> = std::fs::read_dir(&p)
                .ctx(|| format!("{}", p.display()))?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for n in names.into_iter().rev() {
                stack.push((p.join(&n), format!("{rel}/{n}")));
            }
        } else if meta.file_type().is_symlink() {
            let t = std::fs::read_link(&p).unwrap_or_default();
            lines.push(format!("{rel} -> {}", t.display()));
        } else {
            lines.push(format!("{rel} {mode:o} {}", super::copy::file_digest(&p)?));
        }
    }
    Ok(Digest::of(lines.join("\n").as_bytes()).to_string())
}

impl Engine {
    /// The mounts a RUN step asked for, made ready.
    pub(super) fn run_mounts(
        &self,
        df: &wharf_build::Dockerfile,
        req: &BuildRequest,
        built: &[Option<Image>],
        st: &StageState,
        mounts: &[RunMount],
    ) -> Result<Prepared<'_>> {
        let mut p = Prepared {
            engine: self,
            volumes: Vec::new(),
            key: Vec::new(),
            images: Vec::new(),
            _dirs: Vec::new(),
        };
        for m in mounts {
            let o = Options { m };
            let expand = |v: &str| st.expand(df, v);
            let abs = |t: String| -> String {
                if t.starts_with('/') {
                    t
                } else {
                    format!("{}/{t}", st.workdir().unwrap_or("").trim_end_matches('/'))
                }
            };
            match m.kind.as_str() {
                "bind" => {
                    let target = abs(expand(&o.target().ok_or_else(|| {
                        Error::Invalid("--mount type=bind: target= is required".into())
                    })?)?);
                    let source = expand(o.get(&["source", "src"]).unwrap_or("."))?;
                    let (root, from_image) = match o.get(&["from"]) {
                        Some(f) => {
                            let img = self.copy_source_image(df, built, &expand(f)?)?;
                            let root = self.images.mount_image(&img)?;
                            p.key.push(format!("bind-from {} {source}", img.id));
                            p.images.push(img);
                            (root, true)
                        }
                        None => (req.context.clone(), false),
                    };
                    let rel = source.trim_start_matches('/');
                    let rel = if rel.is_empty() { "." } else { rel };
                    let real = wharf_build::context::follow(&root, rel, from_image)
                        .map_err(super::build_error)?;
                    let path =
                        wharf_build::context::resolve(&root, &real).map_err(super::build_error)?;
                    if std::fs::symlink_metadata(&path).is_err() {
                        return Err(Error::Invalid(format!(
                            "--mount type=bind,source={source}: not found{}",
                            if from_image {
                                ""
                            } else {
                                " in the build context"
                            }
                        )));
                    }
                    if !from_image {
                        p.key.push(format!("bind {source} {}", tree_digest(&path)?));
                    }
                    let rw = o.flag(&["rw", "readwrite"]);
                    let path = if rw {
                        // Writes go to a copy, thrown away with the step.
                        let dir = tempfile::Builder::new()
                            .prefix("build-bind-")
                            .tempdir_in(&self.paths.root)
                            .ctx(|| format!("--mount source={source}: a private copy"))?;
                        let copy = dir.path().join("copy");
                        let ok = std::process::Command::new("cp")
                            .arg("-a")
                            .arg(&path)
                            .arg(&copy)
                            .status()
                            .is_ok_and(|s| s.success());
                        if !ok {
                            return Err(Error::Invalid(format!(
                                "--mount source={source}: copying it for rw failed"
                            )));
                        }
                        p._dirs.push(dir);
                        copy
                    } else {
                        path
                    };
                    p.key.push(format!("target {target} rw={rw}"));
                    p.volumes.push(bind(path, &target, !rw));
                }
                "cache" => {
                    let target = abs(expand(&o.target().ok_or_else(|| {
                        Error::Invalid("--mount type=cache: target= is required".into())
                    })?)?);
                    let id = o.get(&["id"]).map_or(target.clone(), str::to_string);
                    let dir = self
                        .paths
                        .root
                        .join("build-cache-mounts")
                        .join(Digest::of(id.as_bytes()).hex());
                    if !dir.exists() {
                        std::fs::create_dir_all(&dir)
                            .ctx(|| format!("--mount type=cache,id={id}: making its directory"))?;
                        let mode = o.mode(0o755)?;
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                            .ctx(|| format!("--mount type=cache,id={id}"))?;
                        chown(&dir, o.number("uid")?, o.number("gid")?)
                            .ctx(|| format!("--mount type=cache,id={id}"))?;
                    }
                    p.key.push(format!("cache {id} {target}"));
                    p.volumes
                        .push(bind(dir, &target, o.flag(&["ro", "readonly"])));
                }
                "secret" => {
                    let id = o
                        .get(&["id"])
                        .map(str::to_string)
                        .or_else(|| {
                            o.target()
                                .and_then(|t| t.rsplit('/').next().map(str::to_string))
                        })
                        .ok_or_else(|| {
                            Error::Invalid("--mount type=secret: id= is required".into())
                        })?;
                    let target = o.target().map_or(format!("/run/secrets/{id}"), abs);
                    let value = match req.secrets.get(&id) {
                        Some(SecretSource::File(f)) => Some(
                            std::fs::read(f)
                                .ctx(|| format!("secret {id}: reading {}", f.display()))?,
                        ),
                        Some(SecretSource::Env(v)) => std::env::var(v).ok().map(String::into_bytes),
                        None => None,
                    };
                    let Some(value) = value else {
                        if o.flag(&["required"]) {
                            return Err(Error::Invalid(format!(
                                "secret {id}: required by RUN --mount but not given (--secret id={id},src=FILE)"
                            )));
                        }
                        continue;
                    };
                    let dir = tempfile::Builder::new()
                        .prefix("build-secret-")
                        .tempdir_in(&self.paths.root)
                        .ctx(|| format!("secret {id}: a private directory"))?;
                    let file = dir.path().join("secret");
                    std::fs::write(&file, &value).ctx(|| format!("secret {id}"))?;
                    std::fs::set_permissions(
                        &file,
                        std::fs::Permissions::from_mode(o.mode(0o400)?),
                    )
                    .ctx(|| format!("secret {id}"))?;
                    chown(
                        &file,
                        Some(o.number("uid")?.unwrap_or(0)),
                        Some(o.number("gid")?.unwrap_or(0)),
                    )
                    .ctx(|| format!("secret {id}"))?;
                    p._dirs.push(dir);
                    p.key.push(format!("secret {id} {target}"));
                    p.volumes.push(bind(file, &target, true));
                }
                "tmpfs" => {
                    let target = abs(expand(&o.target().ok_or_else(|| {
                        Error::Invalid("--mount type=tmpfs: target= is required".into())
                    })?)?);
                    let mut options = Vec::new();
                    if let Some(size) = o.get(&["size"]) {
                        options.push(format!("size={size}"));
                    }
                    p.key.push(format!("tmpfs {target}"));
                    p.volumes.push(VolumeMount {
                        source: PathBuf::from("tmpfs"),
                        destination: PathBuf::from(target),
                        readonly: false,
                        kind: "tmpfs".into(),
                        options,
                    });
                }
                other => {
                    return Err(Error::Invalid(format!(
                        "--mount type={other}: Wharf's builder mounts bind, cache, secret and tmpfs"
                    )));
                }
            }
        }
        Ok(p)
    }

    /// The paths of the mount targets (and their parents) the step's root lacks: the
    /// stubs the runtime makes, to remove after the run.
    pub(super) fn mount_stubs(&self, rootfs: &Path, volumes: &[VolumeMount]) -> Vec<PathBuf> {
        let mut out: BTreeMap<usize, Vec<PathBuf>> = BTreeMap::new();
        for v in volumes {
            let mut p = v.destination.clone();
            while p.parent().is_some() && p != Path::new("/") {
                if wharf_sys::contained::exists_in_root(rootfs, &p) {
                    break;
                }
                out.entry(p.components().count())
                    .or_default()
                    .push(p.clone());
                p = p.parent().map(Path::to_path_buf).unwrap_or_default();
            }
        }
        // Deepest first.
        let mut v: Vec<PathBuf> = out.into_values().rev().flatten().collect();
        v.dedup();
        v
    }
}

/// A bind mount of `source` at `target`.
fn bind(source: PathBuf, target: &str, readonly: bool) -> VolumeMount {
    VolumeMount {
        source,
        destination: PathBuf::from(target),
        readonly,
        kind: "bind".into(),
        options: Vec::new(),
    }
}
