//! Named volumes, as docker's `local` driver keeps them: a directory per volume under
//! `<root>/volumes/NAME/_data` beside its record (`volume.json`), mounted into containers
//! by name (`-v data:/data`, `--mount type=volume`). A volume is made when first named (or
//! by `volume create`); anonymous ones (`-v /data`) get a random name and go with their
//! container when it is removed with `--rm` or `rm -v`. On its first mount an empty
//! volume is filled with what the image has at that path, owners and modes kept, as docker
//! does, so `-v data:/var/lib/app` starts from the image's files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Seek;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::error::{Context, Error, Result};
use crate::model::ContainerSpec;

/// The mount kind of a named volume (its source: the volume's name).
pub const KIND: &str = "volume";
/// The option that marks a volume the engine made for one container (`-v /data`).
pub const ANONYMOUS: &str = "anonymous";

/// A volume's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Volume {
    /// Its name.
    pub name: String,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// Its labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Made for one container (`-v /path`), removed with it.
    #[serde(default)]
    pub anonymous: bool,
    /// Filled from an image already (or given files by a container): never again.
    #[serde(default)]
    pub populated: bool,
    /// Where its files are.
    #[serde(skip_deserializing)]
    pub mountpoint: PathBuf,
}

/// The bytes of a volume's files (symlinks not followed).
pub fn volume_size(v: &Volume) -> u64 {
    crate::files::tree_size(&v.mountpoint)
}

/// docker's rule for volume names.
fn valid(name: &str) -> bool {
    crate::validate::Rule::VolumeName.allows(name)
}

impl Engine {
    fn volumes_dir(&self) -> PathBuf {
        self.paths.root.join("volumes")
    }

    /// Where volume `name`'s files are.
    pub(crate) fn volume_data(&self, name: &str) -> PathBuf {
        self.volumes_dir().join(name).join("_data")
    }

    fn read_volume(&self, name: &str) -> Result<Volume> {
        if !valid(name) {
            return Err(Error::Invalid(format!(
                "invalid volume name {name:?}: {}",
                crate::validate::Rule::VolumeName
            )));
        }
        let dir = self.volumes_dir().join(name);
        let text = match std::fs::read(dir.join("volume.json")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound {
                    kind: "volume",
                    name: name.into(),
                });
            }
            Err(e) => {
                return Err(Error::Os {
                    what: format!("reading volume {name}"),
                    err: e,
                });
            }
        };
        let mut v: Volume = serde_json::from_slice(&text)
            .map_err(|e| Error::Other(format!("volume {name}: its record is damaged: {e}")))?;
        v.mountpoint = self.volume_data(name);
        Ok(v)
    }

    fn write_volume(&self, v: &Volume) -> Result<()> {
        let dir = self.volumes_dir().join(&v.name);
        let tmp = dir.join("volume.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(v).expect("json"))
            .ctx(|| format!("writing volume {}", v.name))?;
        std::fs::rename(&tmp, dir.join("volume.json")).ctx(|| format!("writing volume {}", v.name))
    }

    /// Make a volume (a random name when `name` is None); an existing one of that name is
    /// returned as it is, as docker's `volume create` does.
    pub fn create_volume(
        &self,
        name: Option<&str>,
        labels: BTreeMap<String, String>,
        anonymous: bool,
    ) -> Result<Volume> {
        let name = match name {
            Some(n) => n.to_string(),
            None => format!("{}{}", crate::paths::new_id(), crate::paths::new_id()),
        };
        crate::validate::check("volume name", &name, crate::validate::Rule::VolumeName)?;
        crate::validate::check_all("label key", labels.keys(), crate::validate::Rule::Key)?;
        match self.read_volume(&name) {
            Ok(v) => return Ok(v),
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let dir = self.volumes_dir().join(&name);
        std::fs::create_dir_all(self.volumes_dir())
            .ctx(|| "creating the volumes directory".into())?;
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // Made by another command just now: theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                for _ in 0..100 {
                    if let Ok(v) = self.read_volume(&name) {
                        return Ok(v);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                return self.read_volume(&name);
            }
            Err(e) => {
                return Err(Error::Os {
                    what: format!("creating volume {name}"),
                    err: e,
                });
            }
        }
        let made = (|| {
            std::fs::create_dir(dir.join("_data")).ctx(|| format!("creating volume {name}"))?;
            let v = Volume {
                name: name.clone(),
                created_at: wharf_sys::time::now_rfc3339(),
                labels,
                anonymous,
                populated: false,
                mountpoint: dir.join("_data"),
            };
            self.write_volume(&v)?;
            Ok(v)
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// A volume's record.
    pub fn volume(&self, name: &str) -> Result<Volume> {
        self.read_volume(name)
    }

    /// Every volume, by name.
    pub fn list_volumes(&self) -> Result<Vec<Volume>> {
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(self.volumes_dir()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => {
                return Err(Error::Os {
                    what: "listing volumes".into(),
                    err: e,
                });
            }
        };
        for e in entries.flatten() {
            if let Some(n) = e.file_name().to_str()
                && let Ok(v) = self.read_volume(n)
            {
                out.push(v);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The containers (names) whose specs mount volume `name`.
    pub fn volume_users(&self, name: &str) -> Result<Vec<String>> {
        Ok(self.volumes_in_use()?.remove(name).unwrap_or_default())
    }

    /// Every volume some container's spec mounts, with those containers' names: one read
    /// of the store for all the volumes a listing or a prune looks at.
    pub fn volumes_in_use(&self) -> Result<BTreeMap<String, Vec<String>>> {
        let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in self.db.containers(None)? {
            for m in c.spec.mounts.iter().filter(|m| m.kind == KIND) {
                let list = users
                    .entry(m.source.to_string_lossy().into_owned())
                    .or_default();
                if !list.contains(&c.name) {
                    list.push(c.name.clone());
                }
            }
        }
        Ok(users)
    }

    /// Remove a volume and its files; refused while a container (running or not) names it.
    pub fn remove_volume(&self, name: &str) -> Result<()> {
        self.read_volume(name)?;
        let users = self.volume_users(name)?;
        if !users.is_empty() {
            return Err(Error::Precondition(format!(
                "volume {name} is in use by container {}",
                users.join(", ")
            )));
        }
        self.delete_volume(name)
    }

    /// Remove a volume's record and files (its users checked by the caller).
    fn delete_volume(&self, name: &str) -> Result<()> {
        let dir = self.volumes_dir().join(name);
        // The record first: a half-removed volume is not listed.
        std::fs::remove_file(dir.join("volume.json")).ctx(|| format!("removing volume {name}"))?;
        wharf_image::unpack::fsops::remove_tree(&dir).ctx(|| format!("removing volume {name}"))
    }

    /// Remove the volumes no container uses: anonymous ones only, or all with `all`
    /// (docker's `volume prune` and `prune -a`). Returns their names.
    pub fn prune_volumes(&self, all: bool) -> Result<Vec<(String, u64)>> {
        let in_use = self.volumes_in_use()?;
        let mut removed = Vec::new();
        for v in self.list_volumes()? {
            if (all || v.anonymous) && !in_use.contains_key(&v.name) {
                let size = volume_size(&v);
                // Checked again: a container may have taken it meanwhile.
                if self.remove_volume(&v.name).is_ok() {
                    removed.push((v.name, size));
                }
            }
        }
        Ok(removed)
    }

    /// At container create: every volume the spec names exists (made now if not), and
    /// each `-v /path` gets an anonymous volume of its own.
    pub(crate) fn ensure_named_volumes(&self, spec: &ContainerSpec) -> Result<ContainerSpec> {
        let mut spec = spec.clone();
        for m in spec.mounts.iter_mut().filter(|m| m.kind == KIND) {
            if m.source.as_os_str().is_empty() {
                let v = self.create_volume(None, BTreeMap::new(), true)?;
                m.source = PathBuf::from(&v.name);
                if !m.options.iter().any(|o| o == ANONYMOUS) {
                    m.options.push(ANONYMOUS.into());
                }
            } else {
                self.create_volume(Some(&m.source.to_string_lossy()), BTreeMap::new(), false)?;
            }
        }
        Ok(spec)
    }

    /// At bundle time (the container's root filesystem mounted at `rootfs`): each named
    /// volume becomes a bind mount of its files, filled first from the image when it is new
    /// and empty. (A mount of a path inside one, `subpath=`, was made a bind of its stage
    /// already: see `sub_paths`; like the kubelet's, it fills nothing from the image.)
    pub(crate) fn bind_named_volumes(
        &self,
        spec: &ContainerSpec,
        rootfs: &Path,
    ) -> Result<ContainerSpec> {
        let mut spec = spec.clone();
        for m in spec.mounts.iter_mut().filter(|m| m.kind == KIND) {
            let name = m.source.to_string_lossy().into_owned();
            let mut v = self.read_volume(&name)?;
            if !v.populated {
                self.populate(&v, rootfs, &m.destination.to_string_lossy())?;
                v.populated = true;
                self.write_volume(&v)?;
            }
            m.source = v.mountpoint.clone();
            m.kind = "bind".into();
            m.options.retain(|o| o != ANONYMOUS);
        }
        Ok(spec)
    }

    /// Copy what the image has at `path` into the empty volume `v` (nothing when the
    /// image has nothing there, or the volume has files already).
    fn populate(&self, v: &Volume, rootfs: &Path, path: &str) -> Result<()> {
        let what = || format!("filling volume {} from the image's {path}", v.name);
        if std::fs::read_dir(&v.mountpoint).ctx(what)?.next().is_some() {
            return Ok(());
        }
        let root = File::open(rootfs).ctx(what)?;
        let Ok(src) = wharf_image::tree_tar::open_in_root(root.as_fd(), path) else {
            return Ok(());
        };
        let Ok(dir) = wharf_image::tree_tar::reopen_dir(src.as_fd()) else {
            return Ok(());
        };
        // The volume takes the image directory's owner and mode.
        let st = rustix::fs::fstat(&dir).ctx(what)?;
        let data = File::open(&v.mountpoint).ctx(what)?;
        rustix::fs::fchown(
            &data,
            Some(rustix::fs::Uid::from_raw(st.st_uid)),
            Some(rustix::fs::Gid::from_raw(st.st_gid)),
        )
        .ctx(what)?;
        rustix::fs::fchmod(&data, rustix::fs::Mode::from_raw_mode(st.st_mode & 0o7777))
            .ctx(what)?;
        let mut spool = tempfile::tempfile().ctx(what)?;
        {
            let mut tar = tar::Builder::new(&mut spool);
            wharf_image::tree_tar::append_dir(
                &mut tar,
                dir.as_fd(),
                Path::new(""),
                wharf_image::tree_tar::Walk::Plain,
            )
            .ctx(what)?;
            tar.finish().ctx(what)?;
        }
        spool.rewind().ctx(what)?;
        wharf_image::tree_tar::extract(data.as_fd(), spool, wharf_image::tree_tar::Owners::Keep)
            .ctx(what)?;
        Ok(())
    }

    /// Remove the anonymous volumes of a removed container (`--rm`, `rm -v`).
    pub(crate) fn remove_anonymous_volumes(&self, spec: &ContainerSpec) {
        for m in &spec.mounts {
            if m.kind == KIND && m.options.iter().any(|o| o == ANONYMOUS) {
                let _ = self.remove_volume(&m.source.to_string_lossy());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dockers_rule() {
        for ok in ["data", "my-vol_1.x", "a1"] {
            assert!(valid(ok), "{ok}");
        }
        for bad in ["", "a", "-x", ".x", "a/b", "a b", "../x"] {
            assert!(!valid(bad), "{bad}");
        }
    }
}
