//! The few OS pieces the shim's event loop is built from: a signalfd, a timerfd, and the
//! stdio hand-over around runtime calls.
//!
//! The runtime library clones container processes from the shim itself, and a cloned
//! process inherits the shim's stdio (fds 0-2), its blocked-signal mask and ignored signal
//! dispositions across exec. So around every create/exec the shim puts the process's stdio
//! on fds 0-2, unblocks its signals (a no-op handler keeps a signal arriving in that window
//! from killing the shim; the loop picks it up from [`take_pending`]) and restores SIGPIPE's
//! default; afterwards everything is put back.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Signals the loop handles.
pub const HANDLED: [i32; 4] = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

static PENDING: AtomicU64 = AtomicU64::new(0);

extern "C" fn note_signal(sig: libc::c_int) {
    PENDING.fetch_or(1 << sig, Ordering::SeqCst);
}

fn handled_set() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in HANDLED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Install the no-op handlers, block the handled signals and return a signalfd for them.
pub fn signalfd() -> io::Result<OwnedFd> {
    let set = handled_set();
    // SAFETY: installing a handler that only touches an atomic; blocking signals of this
    // single-threaded process; signalfd on a valid set.
    unsafe {
        for s in HANDLED {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = note_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Signals that arrived through the handlers (while unblocked) since the last call.
pub fn take_pending() -> Vec<i32> {
    let bits = PENDING.swap(0, Ordering::SeqCst);
    (1..64).filter(|s| bits & (1 << s) != 0).collect()
}

/// Read every queued signal from the signalfd.
pub fn read_signals(fd: &OwnedFd) -> Vec<i32> {
    let mut out = Vec::new();
    let mut info = [0u8; 128];
    loop {
        // SAFETY: reading into a local buffer of the signalfd_siginfo size.
        let n = unsafe { libc::read(fd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) };
        if n != 128 {
            break;
        }
        out.push(u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32);
    }
    out
}

/// A monotonic, non-blocking timerfd.
pub fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arm `fd` to fire once at `when` (disarm with None).
pub fn arm_timer(fd: &OwnedFd, when: Option<Instant>) {
    // SAFETY: itimerspec is plain integers; all zeros is a valid (disarmed) value.
    let mut spec: libc::itimerspec = unsafe { std::mem::zeroed() };
    if let Some(when) = when {
        let d = when.saturating_duration_since(Instant::now());
        // A zero value would disarm: fire in 1 ns instead.
        let d = d.max(std::time::Duration::from_nanos(1));
        spec.it_value.tv_sec = d.as_secs() as libc::time_t;
        spec.it_value.tv_nsec = d.subsec_nanos() as libc::c_long;
    }
    // Setting the timer also clears an expiry that was not read yet.
    // SAFETY: valid fd and spec.
    unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
}

/// Consume the timerfd's expiry count.
pub fn drain_timer(fd: &OwnedFd) {
    let mut buf = [0u8; 8];
    // SAFETY: reading into a local buffer.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
}

/// A pipe, both ends close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)
}

/// Make `fd` non-blocking.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// /dev/null, opened read-write.
pub fn dev_null() -> io::Result<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(io::Error::from)
}

fn dup_cloexec(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC of a descriptor we hold.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 onto one of our standard descriptors.
    if unsafe { libc::dup2(from, to) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Run `f` (a runtime create or exec) with `stdio` on fds 0-2 and the signal state a new
/// process should inherit; put the shim's own back afterwards.
pub fn with_child_stdio<T>(stdio: [BorrowedFd<'_>; 3], f: impl FnOnce() -> T) -> io::Result<T> {
    let saved = [dup_cloexec(0)?, dup_cloexec(1)?, dup_cloexec(2)?];
    for (i, fd) in stdio.iter().enumerate() {
        dup2(fd.as_raw_fd(), i as RawFd)?;
    }
    let set = handled_set();
    // SAFETY: signal mask and disposition changes of this single-threaded process.
    unsafe {
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let out = f();
    // SAFETY: as above.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    for (i, fd) in saved.iter().enumerate() {
        dup2(fd.as_raw_fd(), i as RawFd)?;
    }
    Ok(out)
}

/// Write as much of `data` as `fd` takes without blocking; returns the bytes written, or
/// an error if the reader is gone.
pub fn write_some(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < data.len() {
        match rustix::io::write(fd, &data[done..]) {
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// send() without SIGPIPE, as much as the socket takes now.
pub fn send_some(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < data.len() {
        match rustix::net::send(
            fd,
            &data[done..],
            rustix::net::SendFlags::NOSIGNAL | rustix::net::SendFlags::DONTWAIT,
        ) {
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// The shell-style exit code and signal of a wait status.
pub fn decode_status(status: i32) -> (i32, Option<i32>) {
    if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        (128 + sig, Some(sig))
    } else {
        (255, None)
    }
}

/// Reap one exited child without blocking: (pid, status).
pub fn reap_any() -> Option<(i32, i32)> {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on any child.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid, status))
}

/// Wait for our child `pid` (blocking): its status.
pub fn reap(pid: i32) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Some(status);
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// Give back memory that a burst of work (a container create, an exec) left behind, so an
/// idle shim costs little:
/// - malloc's free memory goes back to the kernel;
/// - stack pages below the current frame (the runtime's create path runs deep) are
///   discarded (anonymous: they read back as zeros if ever used again, as fresh stack);
/// - code and read-only data of the binary and its libraries (libc, the loader) are dropped
///   from the page tables: private file mappings none of whose pages was ever written (no
///   anonymous copy-on-write page in them, as smaps counts), so they fault back in,
///   unchanged, from the page cache when used again, at the cost of a minor fault.
///   Relocated data (RELRO) and every writable mapping hold such private pages and are
///   left alone.
pub fn trim_memory() {
    let ranges = discardable();
    // Freed memory back to the kernel, after the buffers above were dropped.
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    // Last, so that little code runs between this and going to sleep.
    for (lo, hi) in ranges {
        // SAFETY: our own stack below the live frames, or our own never-written file
        // mappings (see above); both may be discarded.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
    }
}

/// The ranges [`trim_memory`] discards: the stack below this frame, and the read-only
/// private file mappings without a written page.
fn discardable() -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(16);
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return out;
    };
    let page = 4096usize;
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    for m in wharf_sys::smaps::mappings(&smaps) {
        if m.path == "[stack]" {
            // Leave this frame's page and a margin below it alone (the callers of
            // madvise use a little more stack than this frame).
            let hi = (sp & !(page - 1)).saturating_sub(4 * page);
            if hi > m.start {
                out.push((m.start, hi));
            }
        } else if m.is_clean_read_only_file() {
            out.push((m.start, m.end));
        }
    }
    out
}

/// Move this (single-threaded) process into its pod's cgroup. Best effort: a shim that
/// stays where it was still works.
///
/// - Pure cgroup v2: into `leaf`, made if missing, since a cgroup whose children take
///   controllers may hold no process.
/// - v1 and hybrid hosts: into the pod's cgroup itself in the v1 hierarchies, which allow
///   a cgroup to hold processes and children alike. This spares making and removing a
///   directory in every hierarchy per pod (a new memory cgroup alone is costly). On the
///   unified hierarchy it still takes `leaf`, in case a setting hands the containers a
///   controller there.
///
/// Nothing is made above `leaf`: the pod's cgroup may be gone already (the pod being
/// removed), and must not be made again. The v1 hierarchies are joined by writing "0" to
/// each `tasks` file, which spares the global lock and its RCU grace period that a write
/// to `cgroup.procs` costs; the unified one takes one write.
pub fn join_cgroup(leaf: &str) {
    use wharf_runtime::cgroups::{Cgroup, UNIFIED};
    let Ok(layout) = wharf_runtime::cgroups::detect() else {
        return;
    };
    let leaf = std::path::Path::new(leaf);
    let (Some(pod), Some(name)) = (leaf.parent(), leaf.file_name()) else {
        return;
    };
    let v2 = layout.is_v2();
    let Ok(mut cg) = Cgroup::resolve(&layout, Some(if v2 { leaf } else { pod }), "shim") else {
        return;
    };
    let log = |e: &dyn std::fmt::Display| {
        super::log(&format!("moving into cgroup {}: {e}", leaf.display()));
    };
    if v2 {
        match cg.create_leaf() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => log(&e),
        }
    } else {
        if !cg.paths.values().all(|d| d.is_dir()) {
            return;
        }
        if let Some(unified) = cg.paths.remove(UNIFIED) {
            // Never the pod's own unified cgroup: it may have to hand a controller on.
            let own = Cgroup {
                paths: [(UNIFIED.to_string(), unified.join(name))].into(),
                v2: false,
                unified_mount: cg.unified_mount.clone(),
            };
            match own.create_leaf() {
                Ok(true) => cg.paths.extend(own.paths),
                Ok(false) => {}
                Err(e) => log(&e),
            }
        }
    }
    if let Err(e) = cg.join_self_v1() {
        log(&e);
    }
    // A leaf shared by the shims of one-container pods is removed by a pod's removal once
    // empty: one removed between its making and the join is made again.
    let mut tries = 0;
    while let Err(e) = cg.add_pid_unified(std::process::id() as i32) {
        tries += 1;
        let gone = cg
            .paths
            .get(UNIFIED)
            .is_some_and(|d| !d.exists() && d.parent().is_some_and(|p| p.is_dir()));
        if tries == 3 || !gone || cg.create_leaf().is_err() {
            log(&e);
            break;
        }
    }
}
