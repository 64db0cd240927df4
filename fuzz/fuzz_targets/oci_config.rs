//! config.json as `wharf runtime create` reads it: parsed, validated against a bundle, and
//! its mounts, devices and seccomp profile turned into what the runtime would apply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static BUNDLE: OnceLock<tempfile::TempDir> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let bundle = BUNDLE.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        d
    });
    let Ok(spec) = serde_json::from_slice::<oci_spec::runtime::Spec>(data) else {
        return;
    };
    let _ = wharf_runtime::spec::validate(&spec, bundle.path());
    if let Some(linux) = spec.linux() {
        if let Some(devices) = linux.devices() {
            let _ = wharf_runtime::devices::from_config(devices);
        }
        if let Some(seccomp) = linux.seccomp() {
            let _ = wharf_runtime::seccomp::compile(seccomp);
        }
    }
    for m in spec.mounts().iter().flatten() {
        let _ = wharf_runtime::mounts::parse_options(m.options().as_deref().unwrap_or(&[]));
    }
});
