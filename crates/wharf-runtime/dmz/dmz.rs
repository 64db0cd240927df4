//! wharf-dmz: the tiny static program every container process passes through on its way to
//! the user's program, and the body of a pod's minimal init.
//!
//! Wharf's container init is a clone of the runtime (or shim) process, so until it execs,
//! `/proc/self/exe` is the host's Wharf binary. Had the init exec'd the user's program
//! straight away, that program's path, its `#!` interpreter or its ELF interpreter could
//! name `/proc/self/exe` and run the host binary inside the container (CVE-2019-5736), and
//! a process running it could later reopen it for writing. So the init execs this program
//! first, from a sealed memfd: from then on the process's exe is an immutable anonymous
//! copy of these few hundred bytes, and the user's program is exec'd from here. Running
//! `/proc/self/exe` now runs the dmz again, which cannot be written and cannot reach the host.
//!
//! Built by build.rs with rustc alone (no_std, no libc, static, no relocations), embedded in
//! the runtime with include_bytes!, and written into a memfd at run time (see ../src/dmz.rs).
//!
//! Two modes, by argv[0]:
//! - `wharf-pause`: a pid namespace's init. Non-dumpable, every signal blocked; reaps
//!   children on SIGCHLD and exits on SIGTERM or SIGINT from outside its namespace.
//! - anything else: `argv = [name, ERRFD, PATH, ARGS...]`. Marks ERRFD close-on-exec and
//!   execs PATH with ARGS and the environment it was given. If that fails, writes
//!   `"\x01E<errno>"` to ERRFD (`-` for none) and exits with status 127.
#![no_std]
#![no_main]

#[cfg(target_arch = "x86_64")]
mod arch {
    core::arch::global_asm!(
        ".globl _start",
        "_start:",
        "mov rdi, rsp",
        "and rsp, -16",
        "call dmz_main",
        "ud2",
    );

    pub const WRITE: usize = 1;
    pub const RT_SIGPROCMASK: usize = 14;
    pub const EXECVE: usize = 59;
    pub const WAIT4: usize = 61;
    pub const FCNTL: usize = 72;
    pub const RT_SIGTIMEDWAIT: usize = 128;
    pub const PRCTL: usize = 157;
    pub const EXIT_GROUP: usize = 231;

    /// A raw system call with up to four arguments.
    ///
    /// # Safety
    /// The arguments must be valid for system call `n`.
    pub unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller passes arguments valid for the call; the kernel clobbers rcx
        // and r11 only.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") n as isize => ret,
                in("rdi") a,
                in("rsi") b,
                in("rdx") c,
                in("r10") d,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }
}

#[cfg(any(target_arch = "aarch64", target_arch = "riscv64"))]
mod arch {
    #[cfg(target_arch = "aarch64")]
    core::arch::global_asm!(".globl _start", "_start:", "mov x0, sp", "bl dmz_main", "udf #0");
    #[cfg(target_arch = "riscv64")]
    core::arch::global_asm!(".globl _start", "_start:", "mv a0, sp", "call dmz_main", "unimp");

    // The generic system call table both architectures share.
    pub const FCNTL: usize = 25;
    pub const WRITE: usize = 64;
    pub const EXIT_GROUP: usize = 94;
    pub const RT_SIGPROCMASK: usize = 135;
    pub const RT_SIGTIMEDWAIT: usize = 137;
    pub const PRCTL: usize = 167;
    pub const EXECVE: usize = 221;
    pub const WAIT4: usize = 260;

    /// A raw system call with up to four arguments.
    ///
    /// # Safety
    /// The arguments must be valid for system call `n`.
    pub unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller passes arguments valid for the call.
        unsafe {
            #[cfg(target_arch = "aarch64")]
            core::arch::asm!(
                "svc 0",
                in("x8") n,
                inlateout("x0") a as isize => ret,
                in("x1") b,
                in("x2") c,
                in("x3") d,
                options(nostack),
            );
            #[cfg(target_arch = "riscv64")]
            core::arch::asm!(
                "ecall",
                in("a7") n,
                inlateout("a0") a as isize => ret,
                in("a1") b,
                in("a2") c,
                in("a3") d,
                options(nostack),
            );
        }
        ret
    }
}

use arch::syscall;

const F_SETFD: usize = 2;
const FD_CLOEXEC: usize = 1;
const PR_SET_DUMPABLE: usize = 4;
const PR_SET_NAME: usize = 15;
const SIG_SETMASK: usize = 2;
const WNOHANG: usize = 1;
const SIGINT: isize = 2;
const SIGTERM: isize = 15;
const SIGCHLD: isize = 17;

fn exit(code: usize) -> ! {
    loop {
        // SAFETY: exit_group takes an integer.
        unsafe { syscall(arch::EXIT_GROUP, code, 0, 0, 0) };
    }
}

/// The NUL-terminated string at `s` equals `want` (which has no NUL).
///
/// # Safety
/// `s` points to a NUL-terminated string.
unsafe fn c_eq(s: *const u8, want: &[u8]) -> bool {
    for (i, &b) in want.iter().enumerate() {
        // SAFETY: stops at the first mismatch, so never reads past the NUL.
        if unsafe { *s.add(i) } != b {
            return false;
        }
    }
    // SAFETY: every byte before this one matched a non-NUL byte.
    unsafe { *s.add(want.len()) == 0 }
}

/// A non-negative decimal number, or None (also for "-").
///
/// # Safety
/// `s` points to a NUL-terminated string.
unsafe fn c_number(s: *const u8) -> Option<usize> {
    let mut n: usize = 0;
    let mut i = 0;
    loop {
        // SAFETY: reads up to and including the terminating NUL.
        let b = unsafe { *s.add(i) };
        match b {
            0 if i > 0 => return Some(n),
            b'0'..=b'9' if i < 9 => n = n * 10 + (b - b'0') as usize,
            _ => return None,
        }
        i += 1;
    }
}

/// Entry point, called by `_start` with the initial stack pointer (argc, argv, NULL, envp).
///
/// # Safety
/// `sp` is the process's initial stack pointer as the kernel laid it out.
#[unsafe(no_mangle)]
unsafe extern "C" fn dmz_main(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack layout: argc, then argc pointers and a NULL, then
    // the environment pointers and a NULL.
    unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const u8;
        let envp = argv.add(argc + 1);
        if argc >= 1 && c_eq(*argv, b"wharf-pause") {
            pause();
        }
        if argc < 4 {
            exit(127);
        }
        let errfd = c_number(*argv.add(1));
        if let Some(fd) = errfd {
            syscall(arch::FCNTL, fd, F_SETFD, FD_CLOEXEC, 0);
        }
        let ret = syscall(
            arch::EXECVE,
            *argv.add(2) as usize,
            argv.add(3) as usize,
            envp as usize,
            0,
        );
        if let Some(fd) = errfd {
            report(fd, (-ret) as usize);
        }
        exit(127)
    }
}

/// Tell the runtime why the exec failed: "\x01E" and the errno in decimal.
fn report(fd: usize, errno: usize) {
    let mut buf = [0u8; 24];
    buf[0] = 1;
    buf[1] = b'E';
    let mut digits = [0u8; 20];
    let mut n = errno;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 || len == digits.len() {
            break;
        }
    }
    for i in 0..len {
        buf[2 + i] = digits[len - 1 - i];
    }
    // SAFETY: buf outlives the call and holds 2 + len initialised bytes.
    unsafe { syscall(arch::WRITE, fd, buf.as_ptr() as usize, 2 + len, 0) };
}

/// A pid namespace's init: reap orphans, exit on SIGTERM/SIGINT sent from outside the
/// namespace (the shim). The same signals from inside (a container's `kill 1`) carry the
/// sender's pid and are ignored: no container can take the pod's pid namespace down.
fn pause() -> ! {
    let all: u64 = !0;
    let wanted: u64 = (1 << (SIGCHLD - 1)) | (1 << (SIGTERM - 1)) | (1 << (SIGINT - 1));
    // siginfo_t: si_signo, si_errno, si_code (and padding on 64-bit), then si_pid.
    let mut info = [0u32; 32];
    // SAFETY: plain syscalls with valid pointers to 8-byte signal sets and a 128-byte
    // siginfo buffer.
    unsafe {
        // Containers of the pod share our pid namespace: none of them may ptrace us.
        syscall(arch::PRCTL, PR_SET_DUMPABLE, 0, 0, 0);
        syscall(arch::PRCTL, PR_SET_NAME, b"wharf-pause\0".as_ptr() as usize, 0, 0);
        syscall(
            arch::RT_SIGPROCMASK,
            SIG_SETMASK,
            &all as *const u64 as usize,
            0,
            8,
        );
        loop {
            let sig = syscall(
                arch::RT_SIGTIMEDWAIT,
                &wanted as *const u64 as usize,
                info.as_mut_ptr() as usize,
                0,
                8,
            );
            if (sig == SIGTERM || sig == SIGINT) && info[4] == 0 {
                exit(0);
            }
            while syscall(arch::WAIT4, usize::MAX, 0, WNOHANG, 0) > 0 {}
        }
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    exit(127)
}
