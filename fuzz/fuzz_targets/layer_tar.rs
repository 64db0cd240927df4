//! The layer applier: any bytes as a layer's tar stream, applied into an empty snapshot
//! directory over one lower layer. Whatever the entries say, nothing may be created
//! outside the temporary directory (checked after each input), and nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fn walk(dir: &Path, count: &mut usize) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        *count += 1;
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&e.path(), count);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let base = tempfile::tempdir().expect("tempdir");
    let upper = base.path().join("upper");
    let lower = base.path().join("lower");
    let outside = base.path().join("outside");
    for d in [&upper, &lower, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::create_dir(lower.join("etc")).unwrap();
    std::fs::write(lower.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("/", lower.join("rootlink")).unwrap();
    std::os::unix::fs::symlink("../../../outside", lower.join("up")).unwrap();
    let _ = wharf_image::unpack::apply_layer(data, &upper, &[lower.as_path()]);
    let mut n = 0;
    walk(&outside, &mut n);
    assert_eq!(n, 0, "a layer wrote outside its snapshot");
    assert_eq!(
        std::fs::read_to_string(lower.join("etc/passwd")).unwrap(),
        "root:x:0:0::/:/bin/sh\n",
        "a layer changed a lower layer"
    );
});
