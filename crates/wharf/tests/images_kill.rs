//! A pull killed with SIGKILL in the middle of its layer downloads leaves nothing
//! half-written visible, and the next pull finishes and verifies.

mod image_support;

use std::time::Duration;

use image_support::{Root, assert_blobs_verified, assert_tree, image};

fn largest_ingest(root: &std::path::Path) -> u64 {
    std::fs::read_dir(root.join("image/content/ingest"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

#[test]
fn kill_9_mid_pull_then_pull_again() {
    let r = Root::new();
    let mut child = r
        .cmd(&["pull", "-q", &image("multilayer")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = wharf_testbed::wait_until(Duration::from_secs(120), || {
        largest_ingest(&r.path()) > 8 << 20
    });
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let status = child.wait().unwrap();
    assert!(started, "the pull never got 8 MB into a layer");
    assert!(
        !status.success(),
        "the pull finished before it could be killed"
    );

    // Nothing half-written is visible: blobs are complete and verified, the big layer is
    // not among them, no image is recorded.
    assert_blobs_verified(&r.path());
    assert!(
        largest_ingest(&r.path()) > 0,
        "the partial download stays in ingest/ for resuming"
    );
    assert_eq!(r.ok(&["images", "-q"]), "");

    // Pull again: it resumes and completes, and the tree is exact.
    r.ok(&["pull", "-q", &image("multilayer")]);
    assert_blobs_verified(&r.path());
    assert_eq!(
        std::fs::read_dir(r.path().join("image/content/ingest"))
            .unwrap()
            .count(),
        0,
        "no partial downloads left"
    );
    let leftovers: Vec<String> = std::fs::read_dir(r.path().join("image/snapshots"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("extract-"))
        .collect();
    assert!(leftovers.is_empty(), "stale unpacks left: {leftovers:?}");
    let path = r.ok(&["image", "mount", &image("multilayer")]);
    assert_tree(std::path::Path::new(path.trim()), "multilayer");
    r.ok(&["image", "unmount", &image("multilayer")]);
}
