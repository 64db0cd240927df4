//! Helpers for tests against the fixture registry (fixtures/images, started by
//! scripts/test.d/20-images.sh) and for comparing unpacked trees with its reference listings.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use wharf_image::{Image, ImageStore, PullOptions};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the image tests need the loopback fixture registry; run the \
             suite with scripts/test.sh (scripts/test.d/20-images.sh builds fixtures/images, \
             starts the registries and exports WHARF_TEST_REGISTRY, WHARF_TEST_REGISTRY_AUTH \
             and WHARF_TEST_FIXTURES)"
        )
    })
}

/// The anonymous fixture registry (`127.0.0.1:<port>`).
pub fn registry() -> String {
    env("WHARF_TEST_REGISTRY")
}

/// The fixture registry with Basic auth (user `fixture`, password `fixture-pass`).
pub fn registry_auth() -> String {
    env("WHARF_TEST_REGISTRY_AUTH")
}

/// The fixture kit (expected/, list-tree.sh).
pub fn fixtures() -> PathBuf {
    PathBuf::from(env("WHARF_TEST_FIXTURES"))
}

/// `<registry>/fixtures/<name>`.
pub fn image(name: &str) -> String {
    format!("{}/fixtures/{name}", registry())
}

/// The fixture's listing of a tree (list-tree.sh).
pub fn list_tree(dir: &Path) -> String {
    let out = Command::new(fixtures().join("list-tree.sh"))
        .arg(dir)
        .output()
        .expect("run list-tree.sh");
    assert!(
        out.status.success(),
        "list-tree.sh {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Assert that `dir` lists exactly as `expected/<name>.rootfs.tsv`.
pub fn assert_tree(dir: &Path, name: &str) {
    let want = std::fs::read_to_string(fixtures().join(format!("expected/{name}.rootfs.tsv")))
        .expect("read the reference listing");
    let got = list_tree(dir);
    if got != want {
        let w: Vec<&str> = want.lines().collect();
        let g: Vec<&str> = got.lines().collect();
        let missing: Vec<&&str> = w.iter().filter(|l| !g.contains(l)).take(15).collect();
        let extra: Vec<&&str> = g.iter().filter(|l| !w.contains(l)).take(15).collect();
        panic!(
            "{} does not match expected/{name}.rootfs.tsv ({} vs {} lines)\nmissing or different:\n{:#?}\nunexpected:\n{:#?}",
            dir.display(),
            g.len(),
            w.len(),
            missing,
            extra
        );
    }
}

/// A store in a temp dir; unmounts whatever is left below it when dropped.
pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub store: ImageStore,
}

impl TestStore {
    pub fn new() -> TestStore {
        wharf_testbed::require_root();
        let dir = tempfile::Builder::new()
            .prefix("wharf-image-test-")
            .tempdir()
            .unwrap();
        let store = ImageStore::open(&dir.path().join("root")).unwrap();
        TestStore { dir, store }
    }

    pub fn pull(&self, reference: &str) -> Image {
        self.store
            .pull(reference, &PullOptions::default(), &())
            .unwrap_or_else(|e| panic!("pull {reference}: {e}"))
    }

    /// Mount the image's read-only view, check it against the reference, unmount.
    pub fn assert_view(&self, img: &Image, expected: &str) {
        let path = self.store.mount_image(img).unwrap();
        assert!(path.starts_with(self.dir.path()));
        assert_tree(&path, expected);
        assert!(self.store.unmount_image(img).unwrap());
    }

    /// Every committed blob hashes to its name.
    pub fn assert_blobs_verified(&self) {
        for d in self.store.content().list().unwrap() {
            let out = Command::new("sha256sum")
                .arg(self.store.content().path(&d))
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                got.split_whitespace().next(),
                Some(d.hex()),
                "blob {d} is corrupt"
            );
        }
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        wharf_testbed::unmount_below(self.dir.path());
    }
}
