//! The daemon's code faulted in page by page, not 64 kB at a time.
//!
//! Why: on a page fault in a file mapping the kernel maps, besides the page asked for, every
//! page of the file already in the page cache within the aligned 64 kB around it
//! ("fault-around"). For a program that runs most of its code, that saves faults. The
//! daemon runs a few hundred functions of a 20 MB multi-call binary, spread between the
//! commands and libraries it shares with the CLI and the runtime. Every function it ran
//! outside the ones laid out together (crates/wharf/build.rs) made up to 64 kB of code
//! resident, and so did each constant it read and each libc function it called: after a
//! round of kubelet's listings and stats, the binary's code, constants and libc made 4-5 MB
//! of the daemon's 10-11 MB, of which a fraction ran. `MADV_RANDOM` does not turn
//! fault-around off (measured on 6.18), and the sysctl that sizes it is the host's.
//!
//! What does turn it off for a mapping is registering it with userfaultfd, for
//! write-protection: the kernel skips fault-around in a range a userfaultfd watches (it
//! must see each page's faults itself). The registration here asks for asynchronous
//! write-protection (Linux 6.7 on), which never sends a message nor stops a thread: a
//! write fault in the range is resolved by the kernel at once. And the ranges are the
//! read-only private mappings of files (code, constants, unwind tables), never written in
//! any case. Reads fault as before, one page each. The idle trim still drops these pages
//! (crates/wharf-cri/src/idle.rs); the next call faults back in the pages it runs, not
//! their neighbourhood.
//!
//! Where the kernel is older, or userfaultfd is off, nothing changes: the daemon runs with
//! fault-around, as it did before.

#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// The userfaultfd that holds the registrations: closing it would end them, so it stays
/// open for the daemon's life (close-on-exec: the shims and plugins it starts do not get
/// it; a forked child's copies of the ranges are not registered).
static REGISTERED: OnceLock<OwnedFd> = OnceLock::new();

/// `struct uffdio_api` of linux/userfaultfd.h.
#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_register` of linux/userfaultfd.h.
#[repr(C)]
struct UffdioRegister {
    start: u64,
    len: u64,
    mode: u64,
    ioctls: u64,
}

const UFFD_API: u64 = 0xaa;
/// Write-protect faults resolved by the kernel, without a message (Linux 6.7).
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
/// Faults of user mode only: what an unprivileged process may ask for when
/// `vm.unprivileged_userfaultfd` is 0. No message is ever sent here anyway.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
/// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
const UFFDIO_API: libc::c_ulong = ioctl_rw(0x3f, std::mem::size_of::<UffdioApi>());
/// `_IOWR(0xAA, 0x00, struct uffdio_register)`.
const UFFDIO_REGISTER: libc::c_ulong = ioctl_rw(0x00, std::mem::size_of::<UffdioRegister>());

/// The number of a read-write ioctl of userfaultfd's type (0xAA).
const fn ioctl_rw(nr: libc::c_ulong, size: usize) -> libc::c_ulong {
    (3 << 30) | ((size as libc::c_ulong) << 16) | (0xaa << 8) | nr
}

/// Turn fault-around off for `ranges` (start, end: whole read-only private file mappings).
/// How many were registered, or why none could be (no userfaultfd, or a kernel without
/// asynchronous write-protection). Once per process: later calls register nothing.
pub fn off_for(ranges: &[(usize, usize)]) -> std::io::Result<usize> {
    if REGISTERED.get().is_some() {
        return Ok(0);
    }
    let uffd = open()?;
    let registered = ranges
        .iter()
        .filter(|&&(start, end)| register(&uffd, start, end))
        .count();
    // Kept, so that the registrations last (if another thread won the race, this one's
    // descriptor closes here, and with it the registrations it made; theirs stay).
    let _ = REGISTERED.set(uffd);
    Ok(registered)
}

/// Register the mapping from `start` to `end` with `uffd` for write-protection. A range
/// that cannot be registered (not a mapping any more, or of a kind the kernel refuses)
/// fails alone and is left as it is.
fn register(uffd: &OwnedFd, start: usize, end: usize) -> bool {
    let mut reg = UffdioRegister {
        start: start as u64,
        len: (end - start) as u64,
        mode: UFFDIO_REGISTER_MODE_WP,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER reads and writes the struct passed, which lives through the
    // call.
    unsafe { libc::ioctl(raw(uffd), UFFDIO_REGISTER, &mut reg) == 0 }
}

fn raw(fd: &OwnedFd) -> libc::c_int {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// A userfaultfd with asynchronous write-protection agreed on.
fn open() -> std::io::Result<OwnedFd> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: userfaultfd takes flags and returns a new descriptor or -1.
    let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY) };
    if fd < 0 {
        // SAFETY: as above, without the user-mode-only flag (kernels before 5.11).
        fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    }
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the call above just returned, owned by nothing else.
    let uffd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let mut api = UffdioApi {
        api: UFFD_API,
        features: UFFD_FEATURE_WP_ASYNC,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes the struct passed, which lives through the call.
    if unsafe { libc::ioctl(raw(&uffd), UFFDIO_API, &mut api) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(uffd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident size of the mapping that starts at `start`, in kB.
    fn rss_kb(start: usize) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{start:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .expect("the mapping's Rss")
    }

    /// Mappings of the same file, one page read in each plain one and two
    /// in each registered one: the registered ones hold the two pages read and no more,
    /// every time, where the plain ones showed the kernel faulting around (not every time:
    /// it skips pages it cannot lock at once, which a page under writeback or under
    /// another kernel thread's look may be).
    #[test]
    fn a_registered_mapping_faults_in_one_page_at_a_time() {
        // The test's own binary: like the daemon's, mapped by the loader and in the page
        // cache for a while (a file just written may not be faulted around for a moment).
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let map = || {
            use std::os::fd::AsRawFd;
            // SAFETY: a new private read-only mapping of a file this test holds open.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    1 << 20,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    f.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p as usize
        };
        // SAFETY: reads inside the mappings made below.
        let touch = |at: usize| unsafe { std::ptr::read_volatile(at as *const u8) };
        let uffd = match open() {
            Ok(uffd) => uffd,
            // A kernel without it: the daemon goes on with fault-around, nothing to test.
            Err(e) => {
                eprintln!("no asynchronous userfaultfd write-protection here: {e}");
                return;
            }
        };
        let (mut plain, mut watched) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            let p = map();
            touch(p);
            plain.push(rss_kb(p));
            let w = map();
            assert!(
                register(&uffd, w, w + (1 << 20)),
                "the mapping was registered"
            );
            touch(w);
            touch(w + 8192);
            watched.push(rss_kb(w));
        }
        assert!(
            plain.iter().any(|&kb| kb >= 16),
            "the kernel never faulted around here: {plain:?}"
        );
        assert!(
            watched.iter().all(|&kb| kb == 8),
            "two pages read, two resident: {watched:?}"
        );
    }
}
