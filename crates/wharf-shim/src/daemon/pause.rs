//! The pod's minimal init, for pods that share one pid namespace: PID 1 of a new pid
//! namespace that joins the pod's network, IPC and UTS namespaces, reaps every orphan that
//! the kernel hands it, and exits on SIGTERM. It is a clone of the shim (no exec, no image),
//! closes everything it inherited, and dies with the shim (PR_SET_PDEATHSIG): a pid
//! namespace whose init is gone kills all its processes, so a pod sharing its pid namespace
//! cannot outlive its shim.

use std::os::fd::{AsRawFd, OwnedFd};

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
    let (sync_r, sync_w) = super::sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the shim is single-threaded; the child only makes plain syscalls.
    let forked = unsafe { wharf_runtime::sys::clone_process(libc::CLONE_NEWPID as u64, None) }
        .map_err(|e| format!("clone the pod's init into a new pid namespace: {e}"))?;
    match forked.0 {
        wharf_runtime::sys::Forked::Child => run(&joins, sync_w),
        wharf_runtime::sys::Forked::Parent { pid, .. } => {
            drop(sync_w);
            // The child reports a failed join (a byte) or closes the pipe when ready.
            let mut b = [0u8; 256];
            let n = rustix::io::read(&sync_r, &mut b).unwrap_or(0);
            if n > 0 {
                super::sys::reap(pid);
                return Err(String::from_utf8_lossy(&b[..n]).into_owned());
            }
            Ok(pid)
        }
    }
}

fn run(joins: &[(OwnedFd, i32)], sync: OwnedFd) -> ! {
    // SAFETY: plain syscalls in a freshly cloned single-threaded child.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        for (fd, flag) in joins {
            if libc::setns(fd.as_raw_fd(), *flag) != 0 {
                let msg = format!(
                    "join namespace (flag {flag:#x}): {}",
                    std::io::Error::last_os_error()
                );
                libc::write(sync.as_raw_fd(), msg.as_ptr().cast(), msg.len());
                libc::_exit(1);
            }
        }
        libc::prctl(libc::PR_SET_NAME, c"wharf-pause".as_ptr(), 0, 0, 0);
        hide_arguments();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        // Nothing of the shim stays open here (sockets, pipes of containers, the sync pipe:
        // closing it tells the shim we are ready).
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        let mut wanted: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut wanted);
        for s in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
            libc::sigaddset(&mut wanted, s);
        }
        loop {
            let sig = libc::sigwaitinfo(&wanted, std::ptr::null_mut());
            if sig == libc::SIGTERM || sig == libc::SIGINT {
                libc::_exit(0);
            }
            let mut status = 0;
            while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
        }
    }
}

/// Replace the command line this process inherited from the shim (host paths of its state)
/// with its name: containers of the pod see this process as their PID 1. Its argument area
/// is overwritten in place, as setproctitle does (moving it needs CAP_SYS_RESOURCE).
fn hide_arguments() {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // After "pid (comm) " come the fields from 3 (state) on; arg_start and arg_end are
    // fields 48 and 49 (proc(5)).
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return;
    };
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    let (Some(start), Some(end)) = (field(48), field(49)) else {
        return;
    };
    let name = b"wharf-pause\0";
    if end <= start || end - start < name.len() {
        return;
    }
    // SAFETY: [start, end) is this process's own argument area as the kernel records it
    // (writable memory at the top of its stack), read by nothing in this process after the
    // fork; it is overwritten in place.
    unsafe {
        let p = start as *mut u8;
        std::ptr::write_bytes(p, 0, end - start);
        std::ptr::copy_nonoverlapping(name.as_ptr(), p, name.len());
    }
}
