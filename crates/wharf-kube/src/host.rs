//! Carrying a plan's volumes out on the host: creating them in a directory of the pod,
//! binding the containers' mounts to them, and removing them again.
//!
//! ```text
//! <dir>/<volume>                    emptyDir, configMap, secret, downwardAPI volumes
//!                                   (a tmpfs for medium: Memory and for secrets)
//! ```
//! hostPath volumes stay where they are; they are checked (or created) per their type.
//!
//! A subPath is left to the engine and the pod's shim, which stage it at each start of
//! the container (see `wharf_engine::pod_volumes`): resolved inside its volume, so a
//! symlink a container planted there cannot lead it out (CVE-2017-1002101).
//! [`remove_volumes`] unmounts before deleting and never deletes across a mount, so a
//! bind mount of a hostPath left behind by a crash cannot make it delete host files.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::mount::MountFlags;

use super::volumes::{HostPathType, Volume, VolumeSource, volume_ref};
use wharf_engine::error::{Context, Error, Result};
use wharf_engine::model::ContainerSpec;

use wharf_engine::pod_volumes::{SUB_PATH_KIND, WORLD_WRITABLE, remove_volumes};

/// The plan's volumes, created on the host: each name's host path.
#[derive(Debug, Clone)]
pub struct HostVolumes {
    paths: BTreeMap<String, (PathBuf, bool)>,
}

/// Create `volumes` below `dir` (e.g. `<root>/pods/<pod>/volumes`, which must not hold
/// them yet). On failure everything created is removed again.
pub fn create_volumes(volumes: &[Volume], dir: &Path) -> Result<HostVolumes> {
    // Owner-only on the host, whatever the volumes hold (secrets, configs).
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .ctx(|| format!("create the volume directory {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .ctx(|| format!("make the volume directory {} private", dir.display()))?;
    let mut out = HostVolumes {
        paths: BTreeMap::new(),
    };
    // Claims are the engine's named volumes, made with the containers; image volumes
    // the engine's views of images.
    for v in volumes.iter().filter(|v| {
        !matches!(
            v.source,
            VolumeSource::Claim { .. } | VolumeSource::Image { .. }
        )
    }) {
        match create_one(v, dir) {
            Ok((path, is_empty_dir)) => {
                out.paths.insert(v.name.clone(), (path, is_empty_dir));
            }
            Err(e) => {
                // Best effort: the error that matters is the one that stopped us.
                let _ = remove_volumes(dir);
                return Err(e);
            }
        }
    }
    Ok(out)
}

impl HostVolumes {
    /// The host path of volume `name`.
    pub fn path(&self, name: &str) -> Option<&Path> {
        self.paths.get(name).map(|(p, _)| p.as_path())
    }

    /// Turn the container's pod-volume mounts into bind mounts of host paths. A subPath
    /// becomes the engine's mount of a path inside a volume, which the pod's shim stages
    /// (resolved inside the volume, made a directory when missing) each time it creates
    /// the container, as the kubelet does at each start.
    pub fn resolve_mounts(&self, spec: &mut ContainerSpec) -> Result<()> {
        let cname = spec
            .name
            .clone()
            .ok_or_else(|| Error::Invalid("a container of the plan has no name".into()))?;
        for m in spec.mounts.iter_mut() {
            let Some(r) = volume_ref(m) else { continue };
            let (host, is_empty_dir) = self.paths.get(r.volume).ok_or_else(|| {
                Error::Invalid(format!(
                    "container {cname}: mount {} refers to volume {:?}, which was not created",
                    m.destination.display(),
                    r.volume
                ))
            })?;
            match r.sub_path {
                None => m.kind = "bind".into(),
                Some(sub) => {
                    m.options
                        .push(wharf_engine::image_volumes::subpath_option(sub.display()));
                    if *is_empty_dir {
                        m.options.push(WORLD_WRITABLE.into());
                    }
                    m.kind = SUB_PATH_KIND.into();
                }
            }
            m.source = host.clone();
        }
        Ok(())
    }
}

/// The plan's volumes, kept beside them (owner-only: it holds the Secrets' data, as the
/// played manifest does), so that they can be made again after the machine restarted.
const SAVED: &str = ".volumes.json";

/// Keep `volumes` (created below `dir` by [`create_volumes`]) for [`restore_volumes`].
pub fn save_volumes(volumes: &[Volume], dir: &Path) -> Result<()> {
    let json = serde_json::to_vec(volumes)
        .map_err(|e| Error::Other(format!("volumes of {}: {e}", dir.display())))?;
    wharf_engine::paths::write_private(&dir.join(SAVED), &json)
}

/// After a restart of the machine (`wharf system restore`), make the volumes kept below
/// `dir` again: a tmpfs volume (medium Memory, Secrets) is gone with the reboot, and
/// configMap, secret and downwardAPI files are written anew; a disk emptyDir keeps its
/// files, as the kubelet keeps them for the same pod. Nothing kept there: nothing to do.
pub fn restore_volumes(dir: &Path) -> Result<()> {
    let text = match fs::read(dir.join(SAVED)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).ctx(|| format!("read {}", dir.join(SAVED).display())),
    };
    let volumes: Vec<Volume> = serde_json::from_slice(&text)
        .map_err(|e| Error::Other(format!("{}: damaged: {e}", dir.join(SAVED).display())))?;
    for v in &volumes {
        let path = dir.join(&v.name);
        match v.source {
            VolumeSource::Claim { .. } | VolumeSource::Image { .. } => continue,
            VolumeSource::EmptyDir { memory: false, .. } if path.is_dir() => continue,
            VolumeSource::HostPath { .. } => {}
            _ => {
                // What is left: an empty mount point, or files written on the disk.
                wharf_runtime::sub_path::unmount_stacked(&path)
                    .ctx(|| format!("unmount {}", path.display()))?;
                remove_volumes(&path)?;
            }
        }
        create_one(v, dir)?;
    }
    Ok(())
}

fn create_one(v: &Volume, dir: &Path) -> Result<(PathBuf, bool)> {
    let path = dir.join(&v.name);
    let what = |w: &str| format!("volume {}: {w} {}", v.name, path.display());
    match &v.source {
        VolumeSource::Image { .. } => Err(Error::Invalid(format!(
            "volume {}: an image volume is the engine's view of the image, not a pod directory",
            v.name
        ))),
        VolumeSource::Claim { .. } => Err(Error::Invalid(format!(
            "volume {}: a claim is the engine's named volume, not a pod directory",
            v.name
        ))),
        VolumeSource::HostPath { path, kind } => {
            check_host_path(path, *kind).map_err(|e| Error::Os {
                what: format!("volume {}: hostPath {}", v.name, path.display()),
                err: e,
            })?;
            Ok((path.clone(), false))
        }
        VolumeSource::EmptyDir { memory, size_limit } => {
            mkdir(&path).ctx(|| what("create"))?;
            if *memory {
                let mut opts = "mode=0777".to_string();
                if let Some(size) = size_limit {
                    opts.push_str(&format!(",size={size}"));
                }
                mount_tmpfs(&path, &opts).ctx(|| what("mount a tmpfs at"))?;
            }
            let mode = if v.fs_group.is_some() { 0o2777 } else { 0o777 };
            own(&path, v.fs_group, mode).ctx(|| what("set the mode of"))?;
            Ok((path, true))
        }
        VolumeSource::Files {
            files, in_memory, ..
        } => {
            mkdir(&path).ctx(|| what("create"))?;
            // Secrets (in memory): their directory lets the pod's fsGroup in, and other
            // users of the container only reach files whose names they know; configMaps
            // and downward API files are listable, as the kubelet makes them.
            let (root_mode, dir_mode) = match (*in_memory, v.fs_group.is_some()) {
                (true, true) => (0o2750, 0o2750),
                (true, false) => (0o711, 0o711),
                (false, true) => (0o2755, 0o2755),
                (false, false) => (0o755, 0o755),
            };
            if *in_memory {
                let total: usize = files.iter().map(|f| f.data.len() + 4096).sum();
                let opts = format!("mode={root_mode:o},size={}", total.max(1 << 20));
                mount_tmpfs(&path, &opts).ctx(|| what("mount a tmpfs at"))?;
            }
            own(&path, v.fs_group, root_mode).ctx(|| what("set the mode of"))?;
            for f in files {
                let target = path.join(&f.path);
                let mut parent = path.clone();
                for c in f.path.parent().into_iter().flat_map(Path::components) {
                    parent.push(c);
                    if !parent.is_dir() {
                        mkdir(&parent).ctx(|| what("create a directory in"))?;
                        own(&parent, v.fs_group, dir_mode).ctx(|| what("set the mode in"))?;
                    }
                }
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .mode(0o600)
                    .open(&target)
                    .ctx(|| format!("volume {}: create {}", v.name, target.display()))?;
                file.write_all(&f.data)
                    .ctx(|| format!("volume {}: write {}", v.name, target.display()))?;
                // The kubelet lets the fsGroup read projected files whatever their mode.
                let mode = if v.fs_group.is_some() {
                    f.mode | 0o040
                } else {
                    f.mode
                };
                own(&target, v.fs_group, mode)
                    .ctx(|| format!("volume {}: set the mode of {}", v.name, target.display()))?;
            }
            Ok((path, false))
        }
    }
}

fn mkdir(path: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new().mode(0o700).create(path)
}

/// Set the mode (ignoring the umask) and, with an fsGroup, the group.
fn own(path: &Path, group: Option<u32>, mode: u32) -> std::io::Result<()> {
    if let Some(g) = group {
        std::os::unix::fs::lchown(path, None, Some(g))?;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

fn mount_tmpfs(path: &Path, opts: &str) -> std::io::Result<()> {
    let data = std::ffi::CString::new(opts).expect("no NUL in mount options");
    rustix::mount::mount(
        "tmpfs",
        path,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(data.as_c_str()),
    )
    .map_err(Into::into)
}

fn check_host_path(path: &Path, kind: HostPathType) -> std::io::Result<()> {
    let not = |what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("is not {what} (hostPath type {kind:?})"),
        )
    };
    let meta = match fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    use std::os::unix::fs::FileTypeExt;
    match (kind, meta) {
        // Nothing there: create a directory, as containerd does for a missing bind source.
        (HostPathType::Any | HostPathType::DirectoryOrCreate, None) => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path),
        (HostPathType::Any, Some(_)) => Ok(()),
        (HostPathType::DirectoryOrCreate | HostPathType::Directory, Some(m)) => {
            if m.is_dir() {
                Ok(())
            } else {
                Err(not("a directory"))
            }
        }
        (HostPathType::FileOrCreate, None) => {
            if let Some(parent) = path.parent() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)?;
            }
            let f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)?;
            f.set_permissions(fs::Permissions::from_mode(0o644))
        }
        (HostPathType::FileOrCreate | HostPathType::File, Some(m)) => {
            if m.is_file() {
                Ok(())
            } else {
                Err(not("a regular file"))
            }
        }
        (HostPathType::Socket, Some(m)) if m.file_type().is_socket() => Ok(()),
        (HostPathType::CharDevice, Some(m)) if m.file_type().is_char_device() => Ok(()),
        (HostPathType::BlockDevice, Some(m)) if m.file_type().is_block_device() => Ok(()),
        (HostPathType::Socket, _) => Err(not("a socket")),
        (HostPathType::CharDevice, _) => Err(not("a character device")),
        (HostPathType::BlockDevice, _) => Err(not("a block device")),
        (HostPathType::Directory, None) | (HostPathType::File, None) => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("does not exist (hostPath type {kind:?})"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::{PlanOptions, parse, plan_with};
    use wharf_runtime::sub_path::Missing;

    fn opts() -> PlanOptions {
        PlanOptions {
            seccomp_dir: "/nonexistent".into(),
            node_name: "n".into(),
            node_cpus: 1,
            node_memory: 1 << 30,
        }
    }

    fn plan(yaml: &str) -> crate::PlayPlan {
        plan_with(&parse(yaml).unwrap(), None, &opts()).unwrap()
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn is_tmpfs(p: &Path) -> bool {
        let s = rustix::fs::statfs(p).unwrap();
        s.f_type == libc::TMPFS_MAGIC
    }

    #[test]
    fn volumes_are_created_with_their_modes_groups_and_media() {
        let env = wharf_testbed::Env::new("kube-volumes");
        let host_dir = env.path().join("host/logs");
        let yaml = format!(
            r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg}}
data: {{app.conf: "a=1\n", other: x}}
---
apiVersion: v1
kind: Secret
metadata: {{name: sec}}
stringData: {{password: s3cr3t}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  securityContext: {{fsGroup: 2000}}
  containers:
  - name: c
    image: i
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
    - {{name: mem, mountPath: /mem}}
    - {{name: cfg, mountPath: /cfg}}
    - {{name: sec, mountPath: /sec}}
    - {{name: logs, mountPath: /logs}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 2Mi}}}}
  - name: cfg
    configMap:
      name: cfg
      items:
      - {{key: app.conf, path: etc/app/app.conf, mode: 0640}}
  - name: sec
    secret: {{secretName: sec, defaultMode: 0400}}
  - {{name: logs, hostPath: {{path: {}, type: DirectoryOrCreate}}}}
"#,
            host_dir.display()
        );
        let mut plan = plan(&yaml);
        let dir = env.path().join("pod/volumes");
        let vols = create_volumes(&plan.volumes, &dir).unwrap();

        let scratch = vols.path("scratch").unwrap();
        assert_eq!(scratch, dir.join("scratch"));
        assert_eq!(mode(scratch), 0o2777);
        assert_eq!(fs::metadata(scratch).unwrap().gid(), 2000);
        assert!(!is_tmpfs(scratch));

        let mem = vols.path("mem").unwrap();
        assert!(is_tmpfs(mem));
        let st = rustix::fs::statfs(mem).unwrap();
        assert_eq!(st.f_blocks as u64 * st.f_bsize as u64, 2 << 20);

        let conf = vols.path("cfg").unwrap().join("etc/app/app.conf");
        assert_eq!(fs::read(&conf).unwrap(), b"a=1\n");
        assert_eq!(mode(&conf), 0o640);
        assert_eq!(mode(&vols.path("cfg").unwrap().join("etc/app")), 0o2755);
        assert!(!vols.path("cfg").unwrap().join("other").exists());

        let sec = vols.path("sec").unwrap();
        assert!(is_tmpfs(sec), "secrets never touch the disk");
        // 0400 plus group read for the fsGroup, as the kubelet does.
        assert_eq!(mode(&sec.join("password")), 0o440);
        assert_eq!(fs::metadata(sec.join("password")).unwrap().gid(), 2000);

        assert_eq!(vols.path("logs").unwrap(), host_dir);
        assert!(host_dir.is_dir());

        let c = &mut plan.containers[0];
        vols.resolve_mounts(c).unwrap();
        let sources: Vec<(&Path, &str)> = c
            .mounts
            .iter()
            .map(|m| (m.source.as_path(), m.kind.as_str()))
            .collect();
        assert_eq!(
            sources,
            vec![
                (dir.join("scratch").as_path(), "bind"),
                (dir.join("mem").as_path(), "bind"),
                (dir.join("cfg").as_path(), "bind"),
                (dir.join("sec").as_path(), "bind"),
                (host_dir.as_path(), "bind"),
            ]
        );

        fs::write(host_dir.join("keep.log"), "x").unwrap();
        remove_volumes(&dir).unwrap();
        assert!(!dir.exists());
        assert_eq!(
            fs::read(host_dir.join("keep.log")).unwrap(),
            b"x",
            "hostPath content stays"
        );
        remove_volumes(&dir).unwrap();
    }

    #[test]
    fn host_path_types_are_checked_and_failures_roll_back() {
        let env = wharf_testbed::Env::new("kube-hostpath");
        let file = env.path().join("file");
        fs::write(&file, "x").unwrap();
        let yaml = |path: &Path, kind: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: c, image: i}}]\n  volumes:\n  - {{name: a, emptyDir: {{medium: Memory}}}}\n  - {{name: h, hostPath: {{path: {}, type: {kind}}}}}\n",
                path.display()
            )
        };
        let dir = env.path().join("vols");
        let e = create_volumes(&plan(&yaml(&file, "Directory")).volumes, &dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is not a directory (hostPath type Directory)"),
            "{e}"
        );
        assert!(
            !dir.exists(),
            "the tmpfs volume made before the failure is gone"
        );
        let e = create_volumes(&plan(&yaml(&env.path().join("nope"), "File")).volumes, &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        let e = create_volumes(&plan(&yaml(&file, "Socket")).volumes, &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a socket"), "{e}");
        let created = env.path().join("new/dir/file");
        let v = create_volumes(&plan(&yaml(&created, "FileOrCreate")).volumes, &dir).unwrap();
        assert!(created.is_file());
        assert_eq!(mode(&created), 0o644);
        assert_eq!(v.path("h").unwrap(), created);
        remove_volumes(&dir).unwrap();
        assert!(created.is_file());
    }

    #[test]
    fn sub_paths_resolve_inside_their_volume() {
        let env = wharf_testbed::Env::new("kube-subpath");
        let mut plan = plan(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: v, mountPath: /a, subPath: escape/x}\n    - {name: v, mountPath: /b, subPath: conf/app.conf}\n    - {name: v, mountPath: /c, subPath: new/dir}\n  volumes:\n  - {name: v, emptyDir: {}}\n",
        );
        let dir = env.path().join("vols");
        let vols = create_volumes(&plan.volumes, &dir).unwrap();
        let vol = vols.path("v").unwrap().to_path_buf();
        // What a hostile container could leave in a shared volume: a symlink to the host.
        let outside = env.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret"), "host").unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("escape")).unwrap();
        fs::create_dir(vol.join("conf")).unwrap();
        fs::write(vol.join("conf/app.conf"), "conf").unwrap();

        let c = &mut plan.containers[0];
        vols.resolve_mounts(c).unwrap();
        // The engine's mounts of a path inside a volume; staged as the pod's shim stages
        // them before it creates the container.
        let stages = wharf_engine::pod_volumes::stages_dir(&dir, "c1");
        let mut staged = Vec::new();
        for (j, m) in c.mounts.iter().enumerate() {
            assert_eq!(
                (m.kind.as_str(), m.source.as_path()),
                (SUB_PATH_KIND, vol.as_path())
            );
            assert!(m.options.iter().any(|o| o == WORLD_WRITABLE), "{m:?}");
            let sub = wharf_engine::image_volumes::subpath(m).unwrap();
            let stage = stages.join(j.to_string());
            wharf_runtime::sub_path::stage(
                &m.source,
                Path::new(sub),
                &stage,
                Missing::MakeDir {
                    world_writable: true,
                },
            )
            .unwrap();
            staged.push(stage);
        }
        // "escape" points at <volume><outside>, not at the host's directory.
        assert!(!staged[0].join("secret").exists());
        let inside = vol.join(outside.strip_prefix("/").unwrap()).join("x");
        assert!(
            inside.is_dir(),
            "created inside the volume: {}",
            inside.display()
        );
        let ino = |p: &Path| {
            let m = fs::metadata(p).unwrap();
            (m.dev(), m.ino())
        };
        assert_eq!(ino(&staged[0]), ino(&inside));
        assert_eq!(fs::read(&staged[1]).unwrap(), b"conf");
        assert_eq!(ino(&staged[1]), ino(&vol.join("conf/app.conf")));
        assert_eq!(ino(&staged[2]), ino(&vol.join("new/dir")));
        assert_eq!(mode(&vol.join("new/dir")), 0o777);
        // Swapping the path after staging changes nothing: the mount holds the inode.
        fs::rename(vol.join("conf"), vol.join("conf.old")).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("conf")).unwrap();
        assert_eq!(fs::read(&staged[1]).unwrap(), b"conf");

        remove_volumes(&dir).unwrap();
        assert!(!dir.exists());
        assert_eq!(fs::read(outside.join("secret")).unwrap(), b"host");
    }

    #[test]
    fn removal_never_deletes_through_a_mount() {
        let env = wharf_testbed::Env::new("kube-remove");
        let plan = plan(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i}]\n  volumes:\n  - {name: v, emptyDir: {}}\n",
        );
        let dir = env.path().join("vols");
        create_volumes(&plan.volumes, &dir).unwrap();
        let outside = env.path().join("precious");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("data"), "keep").unwrap();
        // A bind mount left deep inside a volume (not one create_volumes made).
        let target = dir.join("v/deep");
        fs::create_dir(&target).unwrap();
        rustix::mount::mount_bind(&outside, &target).unwrap();
        let e = remove_volumes(&dir).unwrap_err().to_string();
        assert!(e.contains("is a mount point"), "{e}");
        assert_eq!(fs::read(outside.join("data")).unwrap(), b"keep");
        rustix::mount::unmount(&target, rustix::mount::UnmountFlags::DETACH).unwrap();
        remove_volumes(&dir).unwrap();
        assert!(!dir.exists());
        assert_eq!(fs::read(outside.join("data")).unwrap(), b"keep");

        let mut spec = ContainerSpec {
            name: Some("x".into()),
            mounts: vec![wharf_engine::model::VolumeMount {
                source: "missing".into(),
                destination: "/m".into(),
                readonly: false,
                kind: crate::VOLUME_MOUNT_KIND.into(),
                options: vec![],
            }],
            ..Default::default()
        };
        let vols = create_volumes(&[], &dir).unwrap();
        let e = vols.resolve_mounts(&mut spec).unwrap_err().to_string();
        assert_eq!(
            e,
            "container x: mount /m refers to volume \"missing\", which was not created"
        );
        remove_volumes(&dir).unwrap();
    }
}
