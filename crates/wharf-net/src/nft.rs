//! Applying nftables rulesets, in-process through libnftables when it is installed, else by
//! running `nft -f -`.
//!
//! Why libnftables and not raw nf_tables netlink: rules are bytecode (payload, cmp, meta,
//! nat, lookup expressions) whose encoding and set/map handling would be a large,
//! kernel-version-sensitive module to hand-write, and no lean, well-kept Rust crate covers
//! it. libnftables is the nftables project's own high-level API (stable soname
//! libnftables.so.1, shipped by the `nftables`/`libnftables1` packages that any nftables
//! host has); it takes the same text syntax as `nft`, applies a whole ruleset as one
//! atomic transaction, and runs in-process, so no helper program is executed. It is loaded
//! with dlopen at first use, so the `wharf` binary does not need it to start; hosts
//! without it fall back to executing `nft` (same text, same atomicity, a few milliseconds
//! slower).
//!
//! Either way the ruleset is applied in the network namespace given by the caller: the
//! library runs on a helper thread that joined it ([`crate::netns::run_in`]), the `nft`
//! process joins it before exec.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// How rulesets are applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Backend {
    /// libnftables if it can be loaded, else the `nft` command.
    #[default]
    Auto,
    /// libnftables only (an error if it is missing).
    Library,
    /// Execute this `nft` binary (`nft` on PATH if empty).
    Command(PathBuf),
}

type CtxNew = unsafe extern "C" fn(u32) -> *mut c_void;
type CtxFn = unsafe extern "C" fn(*mut c_void);
type CtxInt = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxStr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type RunCmd = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;

struct Lib {
    ctx_new: CtxNew,
    ctx_free: CtxFn,
    buffer_output: CtxInt,
    buffer_error: CtxInt,
    get_output: CtxStr,
    get_error: CtxStr,
    run_cmd: RunCmd,
}

fn load() -> Option<&'static Lib> {
    static LIB: OnceLock<Option<Lib>> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the
        // signature libnftables.h declares for it. The handle is never closed, so the
        // function pointers stay valid for the life of the process.
        unsafe {
            let h = libc::dlopen(
                c"libnftables.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if h.is_null() {
                return None;
            }
            let sym = |name: &CStr| {
                let p = libc::dlsym(h, name.as_ptr());
                (!p.is_null()).then_some(p)
            };
            Some(Lib {
                ctx_new: std::mem::transmute::<*mut c_void, CtxNew>(sym(c"nft_ctx_new")?),
                ctx_free: std::mem::transmute::<*mut c_void, CtxFn>(sym(c"nft_ctx_free")?),
                buffer_output: std::mem::transmute::<*mut c_void, CtxInt>(sym(
                    c"nft_ctx_buffer_output",
                )?),
                buffer_error: std::mem::transmute::<*mut c_void, CtxInt>(sym(
                    c"nft_ctx_buffer_error",
                )?),
                get_output: std::mem::transmute::<*mut c_void, CtxStr>(sym(
                    c"nft_ctx_get_output_buffer",
                )?),
                get_error: std::mem::transmute::<*mut c_void, CtxStr>(sym(
                    c"nft_ctx_get_error_buffer",
                )?),
                run_cmd: std::mem::transmute::<*mut c_void, RunCmd>(sym(
                    c"nft_run_cmd_from_buffer",
                )?),
            })
        }
    })
    .as_ref()
}

/// Whether libnftables can be used in-process on this host.
pub fn library_available() -> bool {
    load().is_some()
}

fn run_library(lib: &Lib, script: &str) -> Result<String> {
    let text =
        CString::new(script).map_err(|_| Error::Firewall("ruleset contains a NUL byte".into()))?;
    // SAFETY: a fresh context used by this thread only and freed before returning; the
    // buffers it returns are copied before the context is freed.
    unsafe {
        let ctx = (lib.ctx_new)(0);
        if ctx.is_null() {
            return Err(Error::Firewall("nft_ctx_new failed".into()));
        }
        (lib.buffer_output)(ctx);
        (lib.buffer_error)(ctx);
        let rc = (lib.run_cmd)(ctx, text.as_ptr());
        let out = CStr::from_ptr((lib.get_output)(ctx))
            .to_string_lossy()
            .into_owned();
        let err = CStr::from_ptr((lib.get_error)(ctx))
            .to_string_lossy()
            .into_owned();
        (lib.ctx_free)(ctx);
        if rc != 0 {
            return Err(Error::Firewall(err.trim().to_string()));
        }
        Ok(out)
    }
}

fn run_command(bin: &std::path::Path, ns: Option<BorrowedFd<'_>>, script: &str) -> Result<String> {
    let mut cmd = Command::new(bin);
    cmd.args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ns) = ns {
        crate::sys::join_netns_on_spawn(&mut cmd, ns)
            .map_err(|e| Error::Firewall(format!("run {}: {e}", bin.display())))?;
    }
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        // A host without nftables: say what to install rather than "No such file".
        std::io::ErrorKind::NotFound => Error::Firewall(format!(
            "neither libnftables.so.1 nor {} is installed (apt-get install nftables)",
            if bin.components().count() > 1 {
                bin.display().to_string()
            } else {
                format!("the {} command", bin.display())
            }
        )),
        _ => Error::Firewall(format!("run {}: {e}", bin.display())),
    })?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let script_owned = script.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(script_owned.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Firewall(format!("wait for {}: {e}", bin.display())))?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(Error::Firewall(format!(
            "{} -f - failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run an nft script (commands or a ruleset, as `nft -f` reads them) inside `ns` (None:
/// the caller's namespace); returns what nft printed (listings). A script is one atomic
/// transaction: if any command fails, nothing in it is applied.
pub fn run(backend: &Backend, ns: Option<BorrowedFd<'_>>, script: &str) -> Result<String> {
    let lib = match backend {
        Backend::Auto | Backend::Library => load(),
        Backend::Command(_) => None,
    };
    match (lib, backend) {
        (Some(lib), _) => crate::netns::run_in(ns, || run_library(lib, script)),
        (None, Backend::Library) => Err(Error::Firewall(
            "libnftables.so.1 cannot be loaded (install libnftables1)".into(),
        )),
        (None, Backend::Command(bin)) if !bin.as_os_str().is_empty() => {
            run_command(bin, ns, script)
        }
        (None, _) => run_command(std::path::Path::new("nft"), ns, script),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_nft_command_names_the_package_to_install() {
        let err = run(
            &Backend::Command("/nonexistent/sbin/nft".into()),
            None,
            "list tables",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "nftables: neither libnftables.so.1 nor /nonexistent/sbin/nft is installed \
             (apt-get install nftables)"
        );
    }
}
