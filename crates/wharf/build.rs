//! Lays out the release `wharf` binary's code by `hot-code.order`: the functions the CRI
//! daemon runs come first, together, in the order its work needs them.
//!
//! Why: the daemon is one of the binary's many commands, and its functions were spread over
//! 20 MB of text. The kernel maps 64 kB around every page fault on a file (fault-around),
//! so a single CRI call that ran a few hundred functions grew the daemon's RSS by 8 MB of
//! code. Packed, the same functions fill a few dozen such windows. Every exec of the binary
//! (the runtime commands too) faults in less for the same reason.
//!
//! The file lists symbol names, so it ages as the code changes: a name it lists that the
//! binary no longer has is skipped (the linker's warning for it is off), and a function it
//! does not list keeps its usual place. `scripts/hot-code/profile.sh` writes it anew.
//!
//! Only lld reads a symbol ordering file: the flag is passed where rustc links with its
//! own lld (x86_64 Linux from Rust 1.90 on) and the build does not choose another linker.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=hot-code.order");
    println!("cargo:rerun-if-changed=build.rs");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let x86_64_gnu = std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu");
    let order = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("hot-code.order");
    if release && x86_64_gnu && order.exists() && links_with_rust_lld() {
        // The linker reads a copy in the build's own directory: builds from several
        // checkouts share a target directory (CI's clones and a working tree), and cargo
        // reuses this script's output across them, so a path into the checkout that ran it
        // last broke the link once that checkout was gone.
        let copy = Path::new(&std::env::var("OUT_DIR").unwrap()).join("hot-code.order");
        std::fs::copy(&order, &copy).expect("copy hot-code.order to OUT_DIR");
        println!(
            "cargo:rustc-link-arg-bin=wharf=-Wl,--symbol-ordering-file={}",
            copy.display()
        );
        println!("cargo:rustc-link-arg-bin=wharf=-Wl,--no-warn-symbol-ordering");
    }
}

/// rustc 1.90 or later, and no linker or linker feature chosen in the flags.
fn links_with_rust_lld() -> bool {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if ["linker=", "linker-features", "linker-flavor", "fuse-ld"]
        .iter()
        .any(|f| flags.contains(f))
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
    {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(release) = text.lines().find_map(|l| l.strip_prefix("release: ")) else {
        return false;
    };
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
