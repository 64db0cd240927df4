//! Kubernetes manifests as `wharf play` reads them: parsed (bounded depth, linear time) and
//! planned for every pod they hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_kube as kube;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(manifest) = kube::parse(text) else {
        return;
    };
    let opts = kube::PlanOptions::for_host(std::path::Path::new("/nonexistent-fuzz-root"));
    for name in manifest.pod_names() {
        let _ = kube::plan_with(&manifest, Some(name), &opts);
    }
});
