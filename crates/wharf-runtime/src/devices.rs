//! Device nodes in the container's /dev: the default set every OCI container gets, the
//! config's `linux.devices`, and the standard symlinks.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxDevice, LinuxDeviceType};
use rustix::fs::{FileType, Mode};

use crate::error::{Context, Error, Result, p};
use crate::safe_path;

/// A device node to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Path inside the container.
    pub path: PathBuf,
    /// 'c', 'b' or 'p'.
    pub kind: char,
    /// Major number.
    pub major: u64,
    /// Minor number.
    pub minor: u64,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// The runtime-spec's default devices (null, zero, full, random, urandom, tty).
pub fn defaults() -> Vec<Node> {
    [
        ("/dev/null", 1, 3),
        ("/dev/zero", 1, 5),
        ("/dev/full", 1, 7),
        ("/dev/random", 1, 8),
        ("/dev/urandom", 1, 9),
        ("/dev/tty", 5, 0),
    ]
    .iter()
    .map(|(path, major, minor)| Node {
        path: PathBuf::from(path),
        kind: 'c',
        major: *major,
        minor: *minor,
        mode: 0o666,
        uid: 0,
        gid: 0,
    })
    .collect()
}

/// The nodes of `linux.devices`, validated.
pub fn from_config(devices: &[LinuxDevice]) -> Result<Vec<Node>> {
    devices
        .iter()
        .map(|d| {
            let kind = match d.typ() {
                LinuxDeviceType::C | LinuxDeviceType::U => 'c',
                LinuxDeviceType::B => 'b',
                LinuxDeviceType::P => 'p',
                LinuxDeviceType::A => {
                    return Err(Error::Config(format!(
                        "linux.devices: {} has type \"a\", which is only valid in cgroup rules",
                        p(d.path())
                    )));
                }
            };
            // Judged (and made) where the path lands once `..` and `.` are resolved:
            // "/dev/../etc/evil" is /etc/evil, not a device under /dev.
            let path = crate::safe_path::clean_absolute(d.path());
            if !path.starts_with("/dev") || path == Path::new("/dev") {
                return Err(Error::Config(format!(
                    "linux.devices: {} is not under /dev",
                    p(d.path())
                )));
            }
            Ok(Node {
                path,
                kind,
                major: d.major() as u64,
                minor: d.minor() as u64,
                mode: d.file_mode().unwrap_or(0o666) & 0o7777,
                uid: d.uid().unwrap_or(0),
                gid: d.gid().unwrap_or(0),
            })
        })
        .collect()
}

/// Create `node` inside `root`. Inside a user namespace mknod is not allowed, so the host's
/// node is bind-mounted onto an empty file instead (as runc does).
pub fn create(root: BorrowedFd<'_>, node: &Node, bind_from_host: bool) -> Result<()> {
    let rel = safe_path::relative(&node.path);
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel
        .file_name()
        .ok_or_else(|| Error::Config(format!("device path {} has no name", p(&node.path))))?;
    let dir = safe_path::mkdir_all(root, parent, 0o755)
        .ctx(|| format!("create directory for device {}", p(&node.path)))?;
    let dir = safe_path::reopen_dir(&dir).ctx(|| format!("open parent of {}", p(&node.path)))?;
    if bind_from_host {
        // The host's node of the same device; the mount point a plain file of our own,
        // never whatever the image put there (a symlink into /proc).
        let host = host_node(node)?;
        let target = safe_path::plain_file_at(dir.as_fd(), name)
            .ctx(|| format!("create mount point for device {}", p(&node.path)))?;
        return crate::mounts::bind_fd(host.as_fd(), target.as_fd())
            .ctx(|| format!("bind mount device {}", p(&node.path)));
    }
    let ft = match node.kind {
        'b' => FileType::BlockDevice,
        'p' => FileType::Fifo,
        _ => FileType::CharacterDevice,
    };
    let dev = rustix::fs::makedev(node.major as u32, node.minor as u32);
    // A file the image put there (or an earlier mount point) gives way to the device.
    let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty());
    rustix::fs::mknodat(&dir, name, ft, Mode::from_raw_mode(node.mode), dev)
        .ctx(|| format!("mknod {}", p(&node.path)))?;
    rustix::fs::chownat(
        &dir,
        name,
        Some(rustix::fs::Uid::from_raw(node.uid)),
        Some(rustix::fs::Gid::from_raw(node.gid)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .ctx(|| format!("chown {}", p(&node.path)))?;
    // mknod honours the umask; set the exact mode the config asked for.
    rustix::fs::chmodat(
        &dir,
        name,
        Mode::from_raw_mode(node.mode),
        rustix::fs::AtFlags::empty(),
    )
    .ctx(|| format!("chmod {}", p(&node.path)))
}

/// The host's node of `node`'s device, to bind where no node can be made (in a user
/// namespace): at the same path when that is the same device (opened without following
/// links), else udev's `/dev/char|block/MAJOR:MINOR`, else any node of it in /dev. The
/// config names a device by its numbers, and a container path (`--device
/// /dev/zero:/dev/given`) need not exist on the host.
fn host_node(node: &Node) -> Result<OwnedFd> {
    let (ft, dir) = match node.kind {
        'b' => (FileType::BlockDevice, "block"),
        'p' => (FileType::Fifo, ""),
        _ => (FileType::CharacterDevice, "char"),
    };
    let want = rustix::fs::makedev(node.major as u32, node.minor as u32);
    let is_it = |fd: &OwnedFd| {
        rustix::fs::fstat(fd).is_ok_and(|st| {
            FileType::from_raw_mode(st.st_mode) == ft
                && (ft == FileType::Fifo || st.st_rdev == want)
        })
    };
    let open = |path: &Path, follow: bool| {
        let mut flags = rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC;
        if !follow {
            flags |= rustix::fs::OFlags::NOFOLLOW;
        }
        rustix::fs::open(path, flags, Mode::empty()).ok()
    };
    if let Some(fd) = open(&node.path, false).filter(is_it) {
        return Ok(fd);
    }
    if ft != FileType::Fifo {
        let by_number = format!("/dev/{dir}/{}:{}", node.major, node.minor);
        if let Some(fd) = open(Path::new(&by_number), true).filter(is_it) {
            return Ok(fd);
        }
        let found = std::fs::read_dir("/dev")
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| open(&e.path(), false).filter(is_it));
        if let Some(fd) = found {
            return Ok(fd);
        }
    }
    Err(Error::Config(format!(
        "device {} ({} {}:{}): the host has no node of it to bind (a user namespace cannot \
         make device nodes)",
        p(&node.path),
        node.kind,
        node.major,
        node.minor
    )))
}

/// /dev/fd, /dev/stdin, /dev/stdout, /dev/stderr (and /dev/core where the host has
/// /proc/kcore), plus /dev/ptmx pointing into the container's devpts.
pub fn create_symlinks(root: BorrowedFd<'_>, ptmx: bool) -> Result<()> {
    let dev = safe_path::mkdir_all(root, Path::new("/dev"), 0o755).ctx(|| "create /dev".into())?;
    let dev = safe_path::reopen_dir(&dev).ctx(|| "open /dev".into())?;
    let mut links = vec![
        ("/proc/self/fd", "fd"),
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
    ];
    if Path::new("/proc/kcore").exists() {
        links.push(("/proc/kcore", "core"));
    }
    for (target, name) in links {
        match rustix::fs::symlinkat(target, &dev, name) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(Error::os(format!("symlink /dev/{name}"), e)),
        }
    }
    if ptmx {
        let _ = rustix::fs::unlinkat(&dev, "ptmx", rustix::fs::AtFlags::empty());
        rustix::fs::symlinkat("pts/ptmx", &dev, "ptmx").ctx(|| "symlink /dev/ptmx".into())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxDeviceBuilder;

    #[test]
    fn config_devices_are_validated() {
        let ok = LinuxDeviceBuilder::default()
            .path("/dev/fuse")
            .typ(LinuxDeviceType::C)
            .major(10)
            .minor(229)
            .file_mode(0o20666u32)
            .build()
            .unwrap();
        let nodes = from_config(&[ok]).unwrap();
        assert_eq!(nodes[0].mode, 0o666);
        let bad = LinuxDeviceBuilder::default()
            .path("/etc/evil")
            .typ(LinuxDeviceType::C)
            .build()
            .unwrap();
        assert!(from_config(&[bad]).is_err());
    }
}
