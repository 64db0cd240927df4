//! Builds wharf-dmz (dmz/dmz.rs), the few-hundred-byte static program that container
//! processes exec on their way to the user's program (see that file for why), with the same
//! rustc and for the same target as the crate itself, and hands its path to the crate as
//! WHARF_DMZ_BIN for include_bytes!.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=dmz/dmz.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if !matches!(arch.as_str(), "x86_64" | "aarch64" | "riscv64") {
        panic!(
            "wharf-runtime: no wharf-dmz for target architecture {arch:?} (dmz/dmz.rs supports \
             x86_64, aarch64 and riscv64); without it containers could reach the host binary \
             through /proc/self/exe"
        );
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let bin = out.join("wharf-dmz");
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition",
        "2024",
        "--crate-type",
        "bin",
        "--crate-name",
        "wharf_dmz",
    ])
    .args(["--target", &target])
    .args([
        "-C",
        "panic=abort",
        "-C",
        "opt-level=s",
        "-C",
        "codegen-units=1",
    ])
    .args([
        "-C",
        "relocation-model=static",
        "-C",
        "strip=symbols",
        "-C",
        "debuginfo=0",
    ])
    .args(["-C", "link-arg=-nostartfiles", "-C", "link-arg=-nostdlib"])
    .args([
        "-C",
        "link-arg=-static",
        "-C",
        "link-arg=-Wl,--build-id=none",
    ])
    .arg("-o")
    .arg(&bin)
    .arg("dmz/dmz.rs");
    // A cross build names its linker per target; use the same one.
    let linker_var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    );
    println!("cargo:rerun-if-env-changed={linker_var}");
    if let Ok(linker) = std::env::var(&linker_var) {
        cmd.arg("-C").arg(format!("linker={linker}"));
    }
    // Flags meant for the crate (e.g. -Z sanitizer from cargo fuzz) do not apply here.
    cmd.env_remove("CARGO_ENCODED_RUSTFLAGS");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("wharf-runtime: run rustc to build wharf-dmz: {e}"));
    assert!(
        status.success(),
        "wharf-runtime: building wharf-dmz failed: {status}"
    );
    println!("cargo:rustc-env=WHARF_DMZ_BIN={}", bin.display());
}
