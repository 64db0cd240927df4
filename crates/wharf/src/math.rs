//! The four functions of the C math library the binaries call (`pow`, `log`, `log2`,
//! `log10`: tokio's scheduler, SQLite, histograms), defined here from the `libm` crate, so
//! that the link resolves them inside the binary and `libm.so.6` is neither loaded nor
//! faulted in.
//!
//! Why: tokio's multi-threaded scheduler calls `pow` each time a worker has run its tasks
//! (it keeps a moving average of poll times), so the daemon runs `pow` after every call,
//! the idle trim's own wake-up included. Each of those runs faulted glibc's `pow` and its
//! tables back in, 64 kB at a time: 312 kB of libm stayed resident in an idle daemon, more
//! than a tenth of its RSS (measured: 192 kB of code and 120 kB of tables, after a trim).
//! Here the same functions are a few kB of the binary's own code. Every process of the
//! binaries also maps one library less (each shim carries its relocated pages privately).
//!
//! The results are those of musl's implementations, as precise as glibc's (within one ulp;
//! `pow` is correctly rounded in nearly all cases): nothing the engine does depends on the
//! last bit of a logarithm.

#![allow(unsafe_code)]

/// `pow(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// `log(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn log(x: f64) -> f64 {
    libm::log(x)
}

/// `log2(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn log2(x: f64) -> f64 {
    libm::log2(x)
}

/// `log10(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn log10(x: f64) -> f64 {
    libm::log10(x)
}

#[cfg(test)]
mod tests {
    type Unary = extern "C" fn(f64) -> f64;
    type Binary = extern "C" fn(f64, f64) -> f64;

    /// The address of glibc's function `name` in libm.so.6, loaded for the comparison.
    fn glibc(name: &std::ffi::CStr) -> *mut libc::c_void {
        // SAFETY: dlopen and dlsym with NUL-terminated names; the handle is kept open
        // (never closed) so the symbol stays valid for the test.
        unsafe {
            let lib = libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!lib.is_null(), "libm.so.6 loads");
            let f = libc::dlsym(lib, name.as_ptr());
            assert!(!f.is_null(), "libm.so.6 has {name:?}");
            f
        }
    }

    fn glibc_unary(name: &std::ffi::CStr) -> Unary {
        // SAFETY: log, log2 and log10 are `double f(double)` in C.
        unsafe { std::mem::transmute::<*mut libc::c_void, Unary>(glibc(name)) }
    }

    fn glibc_binary(name: &std::ffi::CStr) -> Binary {
        // SAFETY: pow is `double pow(double, double)` in C.
        unsafe { std::mem::transmute::<*mut libc::c_void, Binary>(glibc(name)) }
    }

    /// Within one ulp of glibc's answers, over values from what tokio and SQLite pass
    /// (a weight below one raised to a count, logarithms of sizes and costs).
    #[test]
    fn agree_with_glibc() {
        let within_an_ulp = |a: f64, b: f64| {
            a == b
                || (a.is_nan() && b.is_nan())
                || (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1
        };
        let pow = glibc_binary(c"pow");
        let (log, log2, log10) = (
            glibc_unary(c"log"),
            glibc_unary(c"log2"),
            glibc_unary(c"log10"),
        );
        let xs = [
            0.0,
            1e-300,
            0.5,
            0.9,
            1.0 - 1.0 / 64.0,
            1.0,
            2.0,
            10.0,
            1e6,
            1.7e308,
            -1.0,
        ];
        for x in xs {
            assert!(within_an_ulp(super::log(x), log(x)), "log({x})");
            assert!(within_an_ulp(super::log2(x), log2(x)), "log2({x})");
            assert!(within_an_ulp(super::log10(x), log10(x)), "log10({x})");
            for y in [0.0, 1.0, 3.5, 17.0, 1000.0, -2.0, 0.5] {
                assert!(within_an_ulp(super::pow(x, y), pow(x, y)), "pow({x}, {y})");
            }
        }
        assert_eq!(super::pow(2.0, 10.0), 1024.0);
        assert_eq!(super::log2(1024.0), 10.0);
    }

    /// The dynamic loader has no libm to load for the binary (its trace mode lists what it
    /// would load, as ldd does, and exits), and Rust's own float methods run this module's
    /// code: the intrinsics lower to these symbols, which the link resolved inside.
    #[test]
    fn the_binary_does_not_load_libm() {
        let out = std::process::Command::new("/proc/self/exe")
            .env("LD_TRACE_LOADED_OBJECTS", "1")
            .output()
            .unwrap();
        let loads = String::from_utf8_lossy(&out.stdout);
        assert!(loads.contains("libc.so.6"), "the loader's trace: {loads}");
        assert!(!loads.contains("libm.so"), "libm is still linked: {loads}");
        assert_eq!(f64::powf(2.0, 0.5), super::pow(2.0, 0.5));
    }
}
