//! Small system helpers that more than one Wharf crate needs, in one place so that each is
//! written (and fixed) once: RFC 3339 time ([`time`]), a helper thread's CPU ([`cpu`]),
//! the fields of a process's stat line ([`procfs`]), signal names ([`signal`]), atomic
//! file replacement and namespace-file checks ([`fs`]), lock files ([`lock`]), bounded reads of the files a
//! container controls ([`contained`]), this process's mappings ([`smaps`]), and the `-1 means errno` convention
//! of raw system calls ([`cvt`]).
//!
//! Everything here is safe code over rustix and std.

#![forbid(unsafe_code)]

pub mod contained;
pub mod cpu;
pub mod fs;
pub mod lock;
pub mod procfs;
pub mod signal;
pub mod smaps;
pub mod time;

/// A raw system call's result: -1 means the error in `errno`.
pub fn cvt<T: PartialEq + From<i8>>(ret: T) -> std::io::Result<T> {
    if ret == T::from(-1) {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
