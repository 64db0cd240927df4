//! Writing /proc files only when they really are on procfs.
//!
//! A container's config can put any mount over /proc; writing a sysctl or an LSM label into a
//! file that is not the kernel's would silently do nothing (or worse, write into an image
//! file). Each write opens the file without following symlinks out of /proc and checks the
//! filesystem magic first (the CVE-2019-16884 class).

use std::io::{self, Write};

const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// Open `path` (under /proc) for writing after checking that it lives on procfs.
pub fn open_for_write(path: &str) -> io::Result<std::fs::File> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let st = rustix::fs::fstatfs(&fd)?;
    if st.f_type as i64 != PROC_SUPER_MAGIC {
        return Err(io::Error::other(format!("{path} is not on procfs")));
    }
    Ok(std::fs::File::from(fd))
}

/// Write `value` to a procfs file.
pub fn write(path: &str, value: &str) -> io::Result<()> {
    open_for_write(path)?.write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_files_outside_procfs() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, "").unwrap();
        let err = write(f.to_str().unwrap(), "1").unwrap_err();
        assert!(err.to_string().contains("not on procfs"), "{err}");
    }
}
