//! The pod's minimal init, for pods that share one pid namespace: PID 1 of a new pid
//! namespace that joins the pod's network, IPC and UTS namespaces, reaps every orphan that
//! the kernel hands it, and exits on SIGTERM from outside the pod. It dies with the shim
//! (PR_SET_PDEATHSIG): a pid namespace whose init is gone kills all its processes, so a pod
//! sharing its pid namespace cannot outlive its shim.
//!
//! Every container of the pod sees it as PID 1, so it holds nothing a container could use
//! against the host: it is a clone of the shim that, before anything of the pod can see it,
//! leaves the host's mount namespace for one whose root is an empty read-only tmpfs, drops
//! every capability (bounding set included) and sets no_new_privs, closes every inherited
//! fd, and then execs the sealed exec helper in its init mode ([`wharf_runtime::dmz`]):
//! its `/proc/1/exe` is an immutable memfd, its `/proc/1/root` an empty directory, and it
//! is non-dumpable. A SIGTERM sent from inside the pod is ignored (only its ancestors' end
//! it), so a container cannot take the pod's pid namespace down.
//!
//! Its pid namespace is pinned at the path the engine gives (a bind mount of the nsfs file,
//! made while the init is the shim's unreaped child, so the pid cannot have been reused):
//! containers join it by that path, never by `/proc/<pid>/ns/pid`.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crate::protocol::PauseSpec;

/// Start the minimal init; returns its host pid.
pub fn spawn(spec: &PauseSpec) -> Result<i32, String> {
    let mut joins: Vec<(OwnedFd, i32)> = Vec::new();
    for (path, flag) in [
        (&spec.network, libc::CLONE_NEWNET),
        (&spec.ipc, libc::CLONE_NEWIPC),
        (&spec.uts, libc::CLONE_NEWUTS),
    ] {
        if let Some(path) = path {
            let fd = rustix::fs::open(
                path,
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| format!("open namespace {}: {e}", path.display()))?;
            joins.push((fd, flag));
        }
    }
    let dmz = wharf_runtime::dmz::memfd().map_err(|e| format!("the exec helper: {e}"))?;
    let (sync_r, sync_w) = super::sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    // The init's pid in the shim, None in the init.
    let forked = match &spec.user {
        None => {
            // SAFETY: the shim is single-threaded; the child only makes plain syscalls.
            match unsafe { wharf_runtime::sys::clone_process(libc::CLONE_NEWPID as u64, None) }
                .map_err(|e| format!("clone the pod's init into a new pid namespace: {e}"))?
                .0
            {
                wharf_runtime::sys::Forked::Child => None,
                wharf_runtime::sys::Forked::Parent { pid, .. } => Some(pid),
            }
        }
        Some(user) => clone_in_user_namespace(user)?,
    };
    match forked {
        None => run(&joins, dmz.as_raw_fd(), sync_w),
        Some(pid) => {
            drop(sync_w);
            // The child reports a failed step (text) or closes the pipe when it execs.
            let mut b = [0u8; 256];
            let n = rustix::io::read(&sync_r, &mut b).unwrap_or(0);
            if n > 0 {
                super::sys::reap(pid);
                return Err(String::from_utf8_lossy(&b[..n]).into_owned());
            }
            if let Some(pin) = &spec.pin_pid
                && let Err(e) = pin_pid_namespace(pid, pin)
            {
                // SAFETY: our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                super::sys::reap(pid);
                return Err(e);
            }
            Ok(pid)
        }
    }
}

/// Clone the init into a new pid namespace owned by the pod's user namespace `user`: a
/// helper child joins the user namespace (only a single-threaded process may) and clones
/// the init as the shim's own child (CLONE_PARENT), tells its pid and exits. In the init
/// this returns None; in the shim, the init's pid.
fn clone_in_user_namespace(user: &Path) -> Result<Option<i32>, String> {
    let userns = rustix::fs::open(
        user,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("open the pod's user namespace {}: {e}", user.display()))?;
    let (pid_r, pid_w) = super::sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the shim is single-threaded; the helper makes plain syscalls and exits.
    let helper = unsafe { wharf_runtime::sys::clone_process(0, None) }
        .map_err(|e| format!("fork a helper for the pod's init: {e}"))?
        .0;
    let helper_pid = match helper {
        wharf_runtime::sys::Forked::Child => {
            drop(pid_r);
            // SAFETY: plain syscalls in the freshly forked, single-threaded helper.
            if unsafe { libc::setns(userns.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
                // SAFETY: leave without the shim's destructors; the shim reads EOF.
                unsafe { libc::_exit(1) };
            }
            let flags = (libc::CLONE_NEWPID | libc::CLONE_PARENT) as u64;
            // SAFETY: as above.
            match unsafe { wharf_runtime::sys::clone_process(flags, None) } {
                Ok((wharf_runtime::sys::Forked::Child, _)) => return Ok(None),
                Ok((wharf_runtime::sys::Forked::Parent { pid, .. }, _)) => {
                    let b = pid.to_ne_bytes();
                    // SAFETY: write to our pipe, then leave without destructors.
                    unsafe {
                        libc::write(pid_w.as_raw_fd(), b.as_ptr().cast(), b.len());
                        libc::_exit(0)
                    }
                }
                // SAFETY: as above.
                Err(_) => unsafe { libc::_exit(1) },
            }
        }
        wharf_runtime::sys::Forked::Parent { pid, .. } => pid,
    };
    drop(pid_w);
    let mut b = [0u8; 4];
    let n = rustix::io::read(&pid_r, &mut b).unwrap_or(0);
    super::sys::reap(helper_pid);
    if n != 4 {
        return Err(format!(
            "clone the pod's init into a new pid namespace of its user namespace {}: the \
             helper failed",
            user.display()
        ));
    }
    Ok(Some(i32::from_ne_bytes(b)))
}

/// Bind-mount the init's pid namespace at `pin`. The init is our child and not reaped yet,
/// so `/proc/<pid>` is still it.
fn pin_pid_namespace(pid: i32, pin: &Path) -> Result<(), String> {
    std::fs::File::create(pin)
        .map_err(|e| format!("create the pid namespace pin {}: {e}", pin.display()))?;
    let src = std::ffi::CString::new(format!("/proc/{pid}/ns/pid")).expect("no NUL");
    let dst = std::ffi::CString::new(pin.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("pin path {} has a NUL", pin.display()))?;
    wharf_runtime::sys::mount(Some(&src), &dst, None, libc::MS_BIND, None).map_err(|e| {
        let _ = std::fs::remove_file(pin);
        format!("pin the pod's pid namespace at {}: {e}", pin.display())
    })
}

/// The child: join, confine, exec the helper's init mode. Reports failures on `sync`.
fn run(joins: &[(OwnedFd, i32)], dmz: i32, sync: OwnedFd) -> ! {
    let fail = |what: &str| -> ! {
        let msg = format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: write to our own pipe, then exit without running the shim's destructors.
        unsafe {
            libc::write(sync.as_raw_fd(), msg.as_ptr().cast(), msg.len());
            libc::_exit(1)
        }
    };
    // SAFETY: plain syscalls in a freshly cloned single-threaded child.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        for (fd, flag) in joins {
            if libc::setns(fd.as_raw_fd(), *flag) != 0 {
                fail(&format!("join namespace (flag {flag:#x})"));
            }
        }
        if let Err(what) = empty_root() {
            fail(what);
        }
        if let Err(what) = drop_privileges() {
            fail(what);
        }
    }
    // Nothing of the shim stays open: the helper's memfd and the sync pipe are close-on-exec
    // (the pipe's closing tells the shim the init runs).
    if wharf_runtime::sys::close_fds_except(3, &[dmz, sync.as_raw_fd()]).is_err() {
        fail("close the shim's file descriptors");
    }
    // SAFETY: dmz is the shim's memfd, inherited by this child.
    let dmz = unsafe { std::os::fd::BorrowedFd::borrow_raw(dmz) };
    let err = wharf_runtime::dmz::exec_pause(dmz);
    let msg = format!("exec the pod's init: {err}");
    // SAFETY: as in `fail`.
    unsafe {
        libc::write(sync.as_raw_fd(), msg.as_ptr().cast(), msg.len());
        libc::_exit(1)
    }
}

/// A mount namespace of our own whose root is an empty read-only tmpfs: the host's tree is
/// neither visible nor reachable through /proc/1/root.
///
/// # Safety
/// Call only in the freshly cloned, single-threaded child.
unsafe fn empty_root() -> Result<(), &'static str> {
    let mount = |src: &std::ffi::CStr,
                 dst: &std::ffi::CStr,
                 fs: Option<&std::ffi::CStr>,
                 flags,
                 data: Option<&std::ffi::CStr>| {
        wharf_runtime::sys::mount(Some(src), dst, fs, flags, data)
    };
    // SAFETY: plain syscalls; see the function's contract.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err("unshare the mount namespace");
        }
        if wharf_runtime::sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
            .is_err()
        {
            return Err("make / private");
        }
        // /proc exists on every host and is not needed here any more.
        if mount(
            c"tmpfs",
            c"/proc",
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(c"size=4k,nr_inodes=1,mode=0555"),
        )
        .is_err()
        {
            return Err("mount the init's empty root");
        }
        if libc::chdir(c"/proc".as_ptr()) != 0 {
            return Err("chdir to the init's empty root");
        }
        // pivot_root(".", ".") stacks the old root on the new one; detaching "." drops it.
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
            return Err("pivot_root to the init's empty root");
        }
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
            return Err("detach the host's root");
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err("chdir /");
        }
        if wharf_runtime::sys::mount(
            None,
            c"/",
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        .is_err()
        {
            return Err("make the init's root read-only");
        }
    }
    Ok(())
}

/// No capability in any set (bounding included, so the exec cannot regain them as root),
/// and no_new_privs.
///
/// # Safety
/// Call only in the freshly cloned, single-threaded child.
unsafe fn drop_privileges() -> Result<(), &'static str> {
    // SAFETY: plain syscalls with valid pointers; see the function's contract.
    unsafe {
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err("drop the bounding set");
            }
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) != 0 {
            return Err("clear the capability sets");
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err("set no_new_privs");
        }
    }
    Ok(())
}
