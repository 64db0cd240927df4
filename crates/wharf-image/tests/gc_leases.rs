//! Garbage collection running while another store instance (as another process would)
//! pulls: leases and the GC lock keep everything the pull has committed, partial downloads
//! and unpacks in progress are left alone, and the result is intact.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{TestStore, image};
use wharf_image::{ImageStore, PullOptions};

#[test]
fn gc_during_pulls_keeps_what_they_need() {
    let t = TestStore::new();
    let root = t.dir.path().join("root");
    let done = AtomicBool::new(false);
    let mut gc_runs = 0;
    std::thread::scope(|s| {
        let puller = s.spawn(|| {
            let store = ImageStore::open(&root).unwrap();
            let mut out = Vec::new();
            for name in ["busybox", "zstd", "busybox:multiarch", "busybox:v2s2"] {
                out.push(store.pull(&image(name), &PullOptions::default(), &()));
            }
            done.store(true, Ordering::SeqCst);
            out
        });
        let gc_store = ImageStore::open(&root).unwrap();
        while !done.load(Ordering::SeqCst) {
            gc_store.gc().unwrap();
            gc_runs += 1;
        }
        for r in puller.join().unwrap() {
            r.expect("a pull failed while GC ran");
        }
    });
    assert!(gc_runs > 0);
    // Everything pulled is intact after one more collection.
    let stats = t.store.gc().unwrap();
    assert_eq!(stats.blobs, 0, "nothing of the pulled images is garbage");
    t.assert_blobs_verified();
    for (name, tree) in [
        ("busybox", "busybox"),
        ("zstd", "zstd"),
        ("busybox:multiarch", "busybox-multiarch-amd64"),
        ("busybox:v2s2", "busybox"),
    ] {
        let img = t.store.resolve(&image(name)).unwrap();
        t.assert_view(&img, tree);
    }
}

#[test]
fn leases_protect_content_until_dropped() {
    let t = TestStore::new();
    let img = t.pull(&image("busybox"));
    let layer = img.manifest.layers[0].digest().unwrap();
    let lease = t.store.lease(3600).unwrap();
    lease.add("blob", layer.as_str()).unwrap();
    lease
        .add("snapshot", img.top_chain_id.as_ref().unwrap().as_str())
        .unwrap();
    // The image goes; the leased layer blob and snapshot stay.
    t.store.remove(&image("busybox"), false).unwrap();
    assert!(t.store.content().has(&layer));
    assert!(!t.store.content().has(&img.manifest_digest));
    let snaps = std::fs::read_dir(t.dir.path().join("root/image/snapshots"))
        .unwrap()
        .count();
    assert_eq!(snaps, 1);
    drop(lease);
    let stats = t.store.gc().unwrap();
    assert_eq!((stats.blobs, stats.snapshots), (1, 1));
    assert!(!t.store.content().has(&layer));
}

#[test]
fn concurrent_pulls_of_the_same_image_share_the_work() {
    let t = TestStore::new();
    let root = t.dir.path().join("root");
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let store = ImageStore::open(&root).unwrap();
                    store
                        .pull(&image("zstd"), &PullOptions::default(), &())
                        .map(|i| i.id)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert_eq!(r.as_ref().unwrap(), results[0].as_ref().unwrap());
    }
    let img = t.store.resolve(&image("zstd")).unwrap();
    t.assert_view(&img, "zstd");
    // One snapshot per layer, no leftovers.
    let dirs: Vec<String> = std::fs::read_dir(root.join("image/snapshots"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    t.assert_blobs_verified();
}
