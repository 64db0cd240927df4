//! Writing /proc files only when they really are the kernel's.
//!
//! A container's config can put any mount over /proc, and a mount set up by one container
//! can redirect a path another resolves (a bind of /proc/sys/kernel/core_pattern over
//! /proc/self/attr/exec: the CVE-2025-52881 class). Writing a sysctl or an LSM label into the
//! wrong file would do nothing, or worse. So each write checks that /proc is a procfs mount,
//! resolves the rest of the path below it without crossing into any other mount (an
//! overmount, even of another procfs file, fails with EXDEV) and without magic links, and
//! checks the file it got is on procfs too (the CVE-2019-16884 class).

use std::io::{self, Write};

use rustix::fs::{Mode, OFlags, ResolveFlags};

const PROC_SUPER_MAGIC: i64 = 0x9fa0;

fn on_procfs(fd: &std::os::fd::OwnedFd, what: &str) -> io::Result<()> {
    let st = rustix::fs::fstatfs(fd)?;
    if st.f_type as i64 != PROC_SUPER_MAGIC {
        return Err(io::Error::other(format!("{what} is not on procfs")));
    }
    Ok(())
}

/// Open `path` (under /proc) for writing after checking that it is procfs's own file.
pub fn open_for_write(path: &str) -> io::Result<std::fs::File> {
    let Some(rel) = path.strip_prefix("/proc/") else {
        return Err(io::Error::other(format!("{path} is not under /proc")));
    };
    let proc = rustix::fs::open(
        "/proc",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    on_procfs(&proc, "/proc")?;
    let fd = loop {
        match rustix::fs::openat2(
            &proc,
            rel,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_XDEV | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH,
        ) {
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::XDEV) => {
                return Err(io::Error::other(format!(
                    "{path} is covered by another mount; refusing to write through it"
                )));
            }
            r => break r?,
        }
    };
    on_procfs(&fd, path)?;
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
        assert!(err.to_string().contains("not under /proc"), "{err}");
    }

    /// A procfs file bound over another one (what a hostile mount would do) is refused,
    /// though it is on procfs too. In a mount namespace of a child's own: the test process
    /// is multi-threaded and the host's /proc is left alone.
    #[test]
    fn refuses_a_procfs_file_covered_by_another() {
        // SAFETY: the child only makes syscalls and exits.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: the forked child gives itself a private mount namespace.
                let ok = unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0
                    && crate::sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
                        .is_ok()
                    && crate::sys::mount(
                        Some(c"/proc/self/comm"),
                        c"/proc/self/oom_score_adj",
                        None,
                        libc::MS_BIND,
                        None,
                    )
                    .is_ok();
                let refused = open_for_write("/proc/self/oom_score_adj")
                    .is_err_and(|e| e.to_string().contains("covered by another mount"));
                let plain = open_for_write("/proc/self/oom_score_adj_x").is_err()
                    && open_for_write("/proc/self/comm").is_ok();
                crate::sys::exit_now(if ok && refused && plain { 0 } else { 1 })
            }
            pid => {
                let mut status = 0;
                // SAFETY: waiting for the child forked above.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            }
        }
    }
}
