//! Copying a directory tree between two directory fds (for `tmpcopyup`), never following
//! symlinks, preserving type, mode and ownership.

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// Copy everything inside `from` into `to` (both directory fds opened for reading).
pub fn copy_dir_contents(from: &OwnedFd, to: &OwnedFd) -> io::Result<()> {
    let mut dir = Dir::read_from(from)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let st = rustix::fs::statat(from, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                match rustix::fs::mkdirat(to, name, mode) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                let sub_from = rustix::fs::openat(
                    from,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                let sub_to = rustix::fs::openat(
                    to,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                copy_dir_contents(&sub_from, &sub_to)?;
            }
            FileType::RegularFile => {
                let src = rustix::fs::openat(
                    from,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                let dst = rustix::fs::openat(
                    to,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::TRUNC
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    mode,
                )?;
                let mut src = std::fs::File::from(src);
                let mut dst = std::fs::File::from(dst);
                io::copy(&mut src, &mut dst)?;
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(from, name, Vec::new())?;
                rustix::fs::symlinkat(target.as_c_str(), to, name)?;
            }
            other => {
                rustix::fs::mknodat(to, name, other, mode, st.st_rdev)?;
            }
        }
        rustix::fs::chownat(
            to,
            name,
            Some(rustix::fs::Uid::from_raw(st.st_uid)),
            Some(rustix::fs::Gid::from_raw(st.st_gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
            // chown clears setuid/setgid; restore the exact mode afterwards.
            rustix::fs::chmodat(to, name, mode, AtFlags::empty())?;
        }
    }
    Ok(())
}
