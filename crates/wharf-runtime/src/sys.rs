//! Thin wrappers over the few syscalls that rustix does not cover (clone3, ioprio, sched_setattr,
//! personality, close_range, mount_setattr), kept in one place so the unsafe code is easy to audit.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The kernel's struct clone_args (clone3(2)), version 2.
#[repr(C)]
#[derive(Default)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

/// What a fork-like clone returned.
pub enum Forked {
    /// In the parent: the child's pid and a pidfd for it.
    Parent { pid: i32, pidfd: OwnedFd },
    /// In the child.
    Child,
}

/// Fork the calling (single-threaded) process with `flags` (CLONE_NEW* namespaces and friends),
/// optionally straight into the cgroup v2 directory `cgroup`. The child runs on a copy of the
/// caller's stack, like fork(2). Falls back to clone(2) where clone3 is missing or rejects the
/// cgroup (then the caller must move the child into its cgroup itself: `placed` is false).
///
/// # Safety
/// The caller must be single-threaded: the child only has the calling thread.
pub unsafe fn clone_process(
    flags: u64,
    cgroup: Option<BorrowedFd<'_>>,
) -> io::Result<(Forked, bool)> {
    let mut pidfd: RawFd = -1;
    let raw_clone3 = |cgroup: Option<BorrowedFd<'_>>, pidfd: &mut RawFd| {
        let mut args = CloneArgs {
            flags: flags | libc::CLONE_PIDFD as u64,
            pidfd: pidfd as *mut RawFd as u64,
            // With CLONE_PARENT the child signals our parent the way we would; clone3
            // refuses an explicit exit signal then.
            exit_signal: if flags & libc::CLONE_PARENT as u64 != 0 {
                0
            } else {
                libc::SIGCHLD as u64
            },
            ..Default::default()
        };
        if let Some(fd) = cgroup {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = fd.as_raw_fd() as u64;
        }
        // SAFETY: a fork-like clone3 without CLONE_VM; the child continues on a copy of the
        // stack. The caller guarantees the process is single-threaded.
        unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        }
    };
    let mut placed = cgroup.is_some();
    let mut ret = raw_clone3(cgroup, &mut pidfd);
    let errno = || io::Error::last_os_error().raw_os_error();
    if ret == -1
        && cgroup.is_some()
        && matches!(errno(), Some(libc::EINVAL | libc::EOPNOTSUPP | libc::EBUSY))
    {
        // A cgroup that refuses CLONE_INTO_CGROUP: the caller writes cgroup.procs instead.
        placed = false;
        ret = raw_clone3(None, &mut pidfd);
    }
    if ret == -1 && errno() == Some(libc::ENOSYS) {
        // Kernels before 5.3: legacy clone(2); the pidfd lands in the parent_tid slot.
        placed = false;
        // SAFETY: same contract as above.
        ret = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::CLONE_PIDFD as u64 | libc::SIGCHLD as u64) as libc::c_ulong,
                std::ptr::null_mut::<libc::c_void>(),
                &mut pidfd as *mut RawFd,
                std::ptr::null_mut::<libc::c_void>(),
                0 as libc::c_ulong,
            )
        };
    }
    let pid = cvt(ret)?;
    if pid == 0 {
        return Ok((Forked::Child, placed));
    }
    // SAFETY: the kernel wrote a fresh pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((
        Forked::Parent {
            pid: pid as i32,
            pidfd,
        },
        placed,
    ))
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// unshare(2): the calling process leaves some of its namespaces for new ones.
pub fn unshare(flags: i32) -> io::Result<()> {
    // SAFETY: plain syscall; callers are single-threaded where it matters (CLONE_NEWUSER).
    if unsafe { libc::unshare(flags) } == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Terminate the calling process immediately, without running destructors or atexit handlers
/// (which belong to the parent whose memory a forked child shares).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

/// Close every fd from `first` on except those in `keep`.
///
/// Close-on-exec is not enough before a container process execs: the kernel resolves the
/// program's path, its `#!` interpreter and its ELF interpreter while the fds are still
/// open, so `/proc/self/fd/N/../..` in any of them would reach the host through a
/// directory fd the runtime held (CVE-2024-21626). What is kept must be no directory.
pub fn close_fds_except(first: u32, keep: &[RawFd]) -> io::Result<()> {
    // No allocation: this runs in freshly cloned children.
    let mut kept = [u32::MAX; 16];
    let mut n = 0;
    for &fd in keep {
        if fd >= first as RawFd && n < kept.len() && !kept[..n].contains(&(fd as u32)) {
            kept[n] = fd as u32;
            n += 1;
        }
    }
    assert!(
        keep.len() <= kept.len(),
        "close_fds_except keeps at most 16 fds"
    );
    kept[..n].sort_unstable();
    let mut lo = first;
    for &k in &kept[..n] {
        if k > lo {
            close_range(lo, k - 1)?;
        }
        lo = k + 1;
    }
    close_range(lo, u32::MAX)
}

/// close_range(lo, hi, 0), or one close per fd on kernels before 5.9.
fn close_range(lo: u32, hi: u32) -> io::Result<()> {
    // SAFETY: closes fd numbers only; callers own every fd in the range.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0u32) };
    if ret == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(err);
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20)
        .min(1 << 20) as u32;
    for fd in lo..=hi.min(limit) {
        // SAFETY: as above.
        unsafe { libc::close(fd as RawFd) };
    }
    Ok(())
}

/// Mark every fd from `first` on close-on-exec, so nothing of the host leaks into the container.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret == 0 {
        return Ok(());
    }
    // Kernels before 5.11: walk /proc/self/fd.
    let dir = std::fs::read_dir("/proc/self/fd")?;
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &i32| *fd >= first as i32)
        .collect();
    for fd in fds {
        // SAFETY: F_SETFD on an fd number that may already be closed (the read_dir one) is harmless.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// ioprio_set(IOPRIO_WHO_PROCESS, 0, class << 13 | level).
pub fn set_io_priority(class: u32, level: u32) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    cvt(unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, (class << 13) | level) }).map(|_| ())
}

/// Linux's struct sched_attr (the version-1 layout that sched_setattr accepts).
#[repr(C)]
#[derive(Default)]
pub struct SchedAttr {
    pub size: u32,
    pub sched_policy: u32,
    pub sched_flags: u64,
    pub sched_nice: i32,
    pub sched_priority: u32,
    pub sched_runtime: u64,
    pub sched_deadline: u64,
    pub sched_period: u64,
    pub sched_util_min: u32,
    pub sched_util_max: u32,
}

/// sched_setattr(0, attr, 0) for the calling thread.
pub fn sched_setattr(attr: &mut SchedAttr) -> io::Result<()> {
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: attr points to a correctly sized, initialised struct.
    cvt(unsafe { libc::syscall(libc::SYS_sched_setattr, 0, attr as *mut SchedAttr, 0) }).map(|_| ())
}

/// personality(2).
pub fn set_personality(persona: u64) -> io::Result<()> {
    // SAFETY: plain syscall with an integer argument.
    let ret = unsafe { libc::personality(persona as libc::c_ulong) };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// mount(2) with raw flags and an optional data string: the one call that takes every
/// option runc supports, without translating flags into a typed set and back.
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    // SAFETY: all pointers are valid NUL-terminated strings or null.
    let ret = unsafe {
        libc::mount(
            source.map_or(std::ptr::null(), CStr::as_ptr),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), CStr::as_ptr),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// struct mount_attr for mount_setattr(2).
#[repr(C)]
#[derive(Default)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

/// mount_setattr(dirfd, "", AT_EMPTY_PATH | flags, attr): change a mount (tree) in place.
pub fn mount_setattr(fd: BorrowedFd<'_>, flags: u32, attr: &MountAttr) -> io::Result<()> {
    // SAFETY: empty path with AT_EMPTY_PATH, attr is a valid struct of the size passed.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags | libc::AT_EMPTY_PATH as u32,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(|_| ())
}

const OPEN_TREE_CLONE: u32 = 1;
const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;

/// open_tree(fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH): a detached bind mount of the file or
/// directory `fd` refers to, made without any path lookup.
pub fn clone_mount(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    clone_tree(fd, false)
}

/// A detached copy of the mount at `fd` (recursive: with its submounts), as a bind mount
/// made without a path.
pub fn clone_tree(fd: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let rec = if recursive {
        libc::AT_RECURSIVE as u32
    } else {
        0
    };
    // SAFETY: empty path with AT_EMPTY_PATH; returns a new fd or -1.
    let ret = cvt(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as u32 | rec,
        )
    })?;
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// The process's working directory moved into a directory, and moved back when dropped.
pub struct CwdGuard(OwnedFd);

impl CwdGuard {
    /// chdir into `dir`, remembering where the process was.
    pub fn enter(dir: &std::path::Path) -> io::Result<CwdGuard> {
        let here = CwdGuard::here()?;
        rustix::process::chdir(dir)?;
        Ok(here)
    }

    /// Remember where the process is, to come back when dropped (after a setns into a
    /// mount namespace, which moves it to that namespace's root).
    pub fn here() -> io::Result<CwdGuard> {
        let here = rustix::fs::open(
            ".",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(CwdGuard(here))
    }
}

impl Drop for CwdGuard {
    fn drop(&mut self) {
        let _ = rustix::process::fchdir(&self.0);
    }
}

/// The pid of the process a pidfd refers to, in the caller's pid namespace (fdinfo's
/// `Pid:`).
pub fn pidfd_pid(fd: BorrowedFd<'_>) -> io::Result<i32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| io::Error::other("no live pid in the pidfd's fdinfo"))
}

/// MOUNT_ATTR_IDMAP of mount_setattr(2).
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// A detached copy of the mount tree at `fd` (recursive: with its submounts) whose ids are
/// mapped through user namespace `userns`: a file owned by id N on disk shows as owned by
/// the host id that N maps to in `userns`, and the reverse for what is written through
/// it. Must be made by a process with CAP_SYS_ADMIN in the host's user namespace (the
/// runtime or the engine, never the container's init). EINVAL: the filesystem cannot be
/// id-mapped.
pub fn idmapped_tree(
    fd: BorrowedFd<'_>,
    userns: BorrowedFd<'_>,
    recursive: bool,
) -> io::Result<OwnedFd> {
    let rec = if recursive {
        libc::AT_RECURSIVE as u32
    } else {
        0
    };
    let tree = clone_tree(fd, recursive)?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        userns_fd: userns.as_raw_fd() as u64,
        ..Default::default()
    };
    mount_setattr(std::os::fd::AsFd::as_fd(&tree), rec, &attr)?;
    Ok(tree)
}

/// move_mount(from, "", to, "", F_EMPTY_PATH | T_EMPTY_PATH): attach the detached mount
/// `from` onto the file or directory `to` refers to.
pub fn move_mount(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: empty paths with the EMPTY_PATH flags.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(|_| ())
}

/// The start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), used to
/// tell a container's init from an unrelated process that reused its pid.
pub fn process_start_time(pid: i32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&stat)
        .map(|(_, start)| start)
        .ok_or_else(|| io::Error::other(format!("malformed /proc/{pid}/stat")))
}

/// A process's state letter and start time, from one read of its stat file (None when it
/// is gone).
pub fn process_state_and_start(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// The state letter of a process (R, S, Z, ...), None when it is gone.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(state, _)| state)
}

fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let mut fields = wharf_sys::procfs::stat_fields(stat)?;
    let state = fields.next()?.chars().next()?;
    // The fields start at 3 (the state); the start time is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let line = "42 (a b) c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
    }

    #[test]
    fn closes_all_but_the_kept_fds() {
        // In a child: closing fds of the (multi-threaded) test harness would break it.
        // SAFETY: the child only makes plain syscalls and exits.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: dup(2) and fcntl(F_GETFD) only read or copy the
                // forked child's own descriptor table.
                let (a, b, c) = unsafe { (libc::dup(2), libc::dup(2), libc::dup(2)) };
                let open = |fd| {
                    // SAFETY: F_GETFD only asks whether `fd` is open.
                    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
                };
                let ok =
                    close_fds_except(3, &[b]).is_ok() && !open(a) && open(b) && !open(c) && open(2);
                exit_now(if ok { 0 } else { 1 })
            }
            pid => {
                let mut status = 0;
                // SAFETY: waiting for the child forked above.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            }
        }
    }

    #[test]
    fn own_start_time_is_readable() {
        let me = std::process::id() as i32;
        assert!(process_start_time(me).unwrap() > 0);
        assert!(matches!(process_state(me), Some('R') | Some('S')));
    }
}
