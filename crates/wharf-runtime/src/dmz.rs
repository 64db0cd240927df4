//! The exec helper every container process passes through (wharf-dmz, built from
//! `dmz/dmz.rs`), kept in a sealed memfd.
//!
//! A container's init and every exec'd process start as clones of the runtime or shim, so
//! their `/proc/self/exe` is the host's Wharf binary until they exec. If they exec'd the
//! user's program directly, that program's path or interpreter could name
//! `/proc/self/exe` and run the host binary in the container, with the container's
//! `LD_PRELOAD`, and later reopen it for writing (CVE-2019-5736). Instead they exec the dmz
//! from a memfd sealed against writes, and it execs the user's program: when the user's
//! path is resolved, `/proc/self/exe` is the dmz, a few hundred immutable bytes that can
//! reach nothing. Unlike runc's old fix (a copy of the whole runtime per container) this
//! costs one small memfd per process and one exec of a static binary with no loader.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The dmz program (a static ELF for this target, built by build.rs).
static PROGRAM: &[u8] = include_bytes!(env!("WHARF_DMZ_BIN"));

/// argv[0] that makes the dmz run as a pid namespace's minimal init.
const PAUSE: &CStr = c"wharf-pause";
/// argv[0] of the exec mode (what `ps` shows for the few microseconds it runs).
const EXEC: &CStr = c"wharf-exec";

/// The first bytes of the dmz's failure report: `\x01E` then the errno in decimal.
const FAILURE_PREFIX: &[u8] = b"\x01E";

static MEMFD: OnceLock<OwnedFd> = OnceLock::new();

const MFD_CLOEXEC: libc::c_uint = 0x1;
const MFD_ALLOW_SEALING: libc::c_uint = 0x2;
/// Linux 6.3: ask for an executable memfd explicitly (vm.memfd_noexec may default to
/// non-executable ones); older kernels reject the flag, and make them executable anyway.
const MFD_EXEC: libc::c_uint = 0x10;
const F_SEAL_SEAL: libc::c_int = 0x1;
const F_SEAL_SHRINK: libc::c_int = 0x2;
const F_SEAL_GROW: libc::c_int = 0x4;
const F_SEAL_WRITE: libc::c_int = 0x8;

/// The process's sealed memfd holding the dmz, made on first use (about 20 µs) and kept:
/// the shim reuses one for every container and exec of its pod. Close-on-exec, so it never
/// reaches a container program.
pub fn memfd() -> io::Result<BorrowedFd<'static>> {
    if let Some(fd) = MEMFD.get() {
        return Ok(fd.as_fd());
    }
    let fd = create()?;
    Ok(MEMFD.get_or_init(|| fd).as_fd())
}

fn create() -> io::Result<OwnedFd> {
    let memfd = |flags: libc::c_uint| {
        // SAFETY: memfd_create with a valid name; returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(c"wharf-dmz".as_ptr(), flags) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: a fresh fd we own.
            Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
        }
    };
    let base = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    let fd = match memfd(base | MFD_EXEC) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => memfd(base)?,
        r => r?,
    };
    let mut written = 0;
    while written < PROGRAM.len() {
        written += rustix::io::write(&fd, &PROGRAM[written..])?;
    }
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o555))?;
    // SAFETY: fcntl on our own fd with integer arguments.
    let ret = unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The argument vector of an exec through the dmz, built before the caller loads its
/// seccomp filter and drops privileges (nothing may allocate after that).
pub struct ExecArgs {
    strings: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
    env: Vec<CString>,
    env_ptrs: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into the CStrings the struct owns (their heap buffers do not
// move with the struct), and nothing mutates them.
unsafe impl Send for ExecArgs {}
// SAFETY: as above.
unsafe impl Sync for ExecArgs {}

impl ExecArgs {
    /// `errfd`: where the dmz reports a failed exec of `program` (made close-on-exec by the
    /// dmz before it execs, so its closing tells the reader the program runs).
    pub fn new(errfd: Option<RawFd>, program: &CStr, argv: &[CString]) -> Self {
        let errfd = match errfd {
            Some(fd) => CString::new(fd.to_string()).expect("digits"),
            None => c"-".to_owned(),
        };
        let mut strings = vec![EXEC.to_owned(), errfd, program.to_owned()];
        strings.extend(argv.iter().cloned());
        let ptrs = strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        ExecArgs {
            strings,
            ptrs,
            env: Vec::new(),
            env_ptrs: vec![std::ptr::null()],
        }
    }

    /// Carry the program's environment too (for [`ExecArgs::exec_with_env`]).
    pub fn with_env(mut self, env: Vec<CString>) -> Self {
        self.env_ptrs = env
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        self.env = env;
        self
    }

    /// Exec the dmz with the environment given to [`ExecArgs::with_env`]. Allocates
    /// nothing: safe between fork and exec. Returns only on failure.
    pub fn exec_with_env(&self, dmz: BorrowedFd<'_>) -> io::Error {
        exec_ptrs(dmz, &self.ptrs, &self.env_ptrs)
    }

    /// The program the dmz will exec.
    pub fn program(&self) -> &CStr {
        &self.strings[2]
    }
}

/// Exec the dmz, which execs the program of `args`. Returns only on failure (of the exec of
/// the dmz itself; a failure to exec the program is reported by the dmz to its errfd).
///
/// Allocates nothing: safe to call after a seccomp filter is loaded.
pub fn exec(dmz: BorrowedFd<'_>, args: &ExecArgs, envp: &[*const libc::c_char]) -> io::Error {
    exec_ptrs(dmz, &args.ptrs, envp)
}

/// Turn the calling process into the dmz's minimal init (for a pod's pid namespace).
/// Returns only on failure.
pub fn exec_pause(dmz: BorrowedFd<'_>) -> io::Error {
    let argv = [PAUSE.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null()];
    exec_ptrs(dmz, &argv, &envp)
}

fn exec_ptrs(
    dmz: BorrowedFd<'_>,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> io::Error {
    // SAFETY: NULL-terminated arrays of valid C strings; an empty path with AT_EMPTY_PATH
    // execs the fd itself.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            dmz.as_raw_fd(),
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    let err = io::Error::last_os_error();
    if !matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
        return err;
    }
    // Kernels before 3.19, or a seccomp profile that allows execve but not execveat: the
    // same file through /proc (if the container has it mounted).
    let path = proc_fd_path(dmz.as_raw_fd());
    // SAFETY: as above, with a NUL-terminated path.
    unsafe { libc::execve(path.as_ptr().cast(), argv.as_ptr(), envp.as_ptr()) };
    let second = io::Error::last_os_error();
    if second.raw_os_error() == Some(libc::ENOENT) {
        err
    } else {
        second
    }
}

/// `/proc/self/fd/N` as a NUL-terminated buffer, formatted without allocating.
fn proc_fd_path(fd: RawFd) -> [u8; 32] {
    let mut path = [0u8; 32];
    let prefix = b"/proc/self/fd/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[prefix.len() + i] = digits[len - 1 - i];
    }
    path
}

/// The errno (and the wording, if any) of a failed exec, if `data` (read from the errfd)
/// is such a report: the dmz's (`\x01E<errno>`) or the init's (`\x01E<errno>:<detail>`).
pub fn parse_failure(data: &[u8]) -> Option<(i32, Option<String>)> {
    let rest = std::str::from_utf8(data.strip_prefix(FAILURE_PREFIX)?).ok()?;
    match rest.split_once(':') {
        Some((n, detail)) => Some((n.trim().parse().ok()?, Some(detail.to_string()))),
        None => Some((rest.trim().parse().ok()?, None)),
    }
}

/// The report of a failed exec, as [`parse_failure`] reads it.
pub fn failure_report(errno: i32, detail: Option<&str>) -> Vec<u8> {
    let mut out = FAILURE_PREFIX.to_vec();
    out.extend_from_slice(errno.to_string().as_bytes());
    if let Some(d) = detail {
        out.push(b':');
        out.extend_from_slice(d.as_bytes());
    }
    out
}

/// Clear close-on-exec on `fd`, so it survives the exec of the dmz (which sets it again).
pub fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments on an fd number.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_is_a_small_static_elf() {
        assert_eq!(&PROGRAM[..4], b"\x7fELF");
        assert!(PROGRAM.len() < 16 * 1024, "{} bytes", PROGRAM.len());
    }

    #[test]
    fn memfd_is_sealed_against_writes() {
        let fd = memfd().unwrap();
        let err = rustix::io::write(fd, b"x").unwrap_err();
        assert_eq!(err, rustix::io::Errno::PERM);
        assert!(rustix::fs::ftruncate(fd, 0).is_err());
    }

    #[test]
    fn proc_fd_paths_are_formatted_in_place() {
        let p = proc_fd_path(1234);
        assert_eq!(
            CStr::from_bytes_until_nul(&p).unwrap(),
            c"/proc/self/fd/1234"
        );
        let p = proc_fd_path(0);
        assert_eq!(CStr::from_bytes_until_nul(&p).unwrap(), c"/proc/self/fd/0");
    }

    #[test]
    fn failure_reports_parse() {
        assert_eq!(parse_failure(b"\x01E2"), Some((2, None)));
        assert_eq!(parse_failure(b"\x01E13\n"), Some((13, None)));
        assert_eq!(
            parse_failure(&failure_report(
                2,
                Some("executable file not found in $PATH")
            )),
            Some((2, Some("executable file not found in $PATH".into())))
        );
        assert_eq!(parse_failure(b"exec failed"), None);
    }
}
