//! Pulls of the fixture images from the loopback registry (scripts/test.sh starts it): each
//! unpacks to exactly its reference listing, seen through the image's read-only overlay view
//! and through a container's writable overlay.

mod common;

use common::{TestStore, assert_tree, image, registry_auth};
use wharf_image::auth::Credentials;
use wharf_image::manifest::{DOCKER_MANIFEST, OCI_MANIFEST, Platform};
use wharf_image::{Error, PullOptions};

#[test]
fn busybox_pulls_and_unpacks_exactly() {
    let t = TestStore::new();
    let img = t.pull(&image("busybox"));
    assert_eq!(
        img.manifest_digest.as_str(),
        "sha256:58b9126d60448cbc9e36a15aeb4ffa48bc4346207b10994a0dd804b9f12e7b1d"
    );
    assert_eq!(img.manifest_media_type, OCI_MANIFEST);
    assert_eq!(img.names, vec![format!("{}:latest", image("busybox"))]);
    let cfg = img.config.config().clone().unwrap();
    assert_eq!(cfg.cmd().clone().unwrap(), vec!["sh".to_string()]);
    assert!(cfg.env().clone().unwrap()[0].starts_with("PATH="));
    t.assert_view(&img, "busybox");
    t.assert_blobs_verified();
    // By name, short id and manifest digest.
    assert_eq!(t.store.resolve(&image("busybox")).unwrap().id, img.id);
    assert_eq!(t.store.resolve(&img.id.hex()[..12]).unwrap().id, img.id);
    assert_eq!(
        t.store.resolve(img.manifest_digest.as_str()).unwrap().id,
        img.id
    );
    // A second pull finds everything in place.
    let again = t.pull(&image("busybox"));
    assert_eq!(again.id, img.id);
    // By digest: recorded under name@digest, same image.
    let by_digest = format!("{}@{}", image("busybox"), img.manifest_digest);
    let d = t.pull(&by_digest);
    assert_eq!(d.id, img.id);
    assert!(d.names.contains(&by_digest), "{:?}", d.names);
    // A digest the registry does not have.
    let missing = format!("{}@sha256:{}", image("busybox"), "0".repeat(64));
    let e = t
        .store
        .pull(&missing, &PullOptions::default(), &())
        .unwrap_err();
    assert!(e.to_string().contains("manifest unknown"), "{e}");
}

#[test]
fn multilayer_unpacks_exactly_and_serves_a_container_rootfs() {
    let t = TestStore::new();
    let img = t.pull(&image("multilayer"));
    assert_eq!(img.diff_ids.len(), 7);
    let cfg = img.config.config().clone().unwrap();
    assert_eq!(
        cfg.entrypoint().clone().unwrap(),
        vec!["/bin/sh".to_string(), "-c".to_string()]
    );
    assert_eq!(
        cfg.cmd().clone().unwrap(),
        vec!["cat /etc/fixture-release".to_string()]
    );
    assert_eq!(cfg.working_dir().as_deref(), Some("/data"));
    t.assert_view(&img, "multilayer");
    // The duplicated empty layer gets two snapshots (different chain ids).
    assert_eq!(t.store.layer_dirs(&img).unwrap().len(), 7);

    // A container's rootfs: the same tree, writable, changes only in its upper dir.
    let rootfs = t.store.prepare_container(&img, "c1").unwrap();
    assert_eq!(rootfs.lower_dirs.len(), 7);
    // With layers below, the snapshot has no empty lower directory of its own.
    let snapshot_dir = rootfs.upper_dir.parent().unwrap();
    assert!(
        !snapshot_dir.join("empty").exists(),
        "{}",
        snapshot_dir.display()
    );
    let target = t.dir.path().join("c1-rootfs");
    std::fs::create_dir(&target).unwrap();
    rootfs.mount(&target).unwrap();
    assert_tree(&target, "multilayer");
    std::fs::write(target.join("etc/fixture/new.txt"), "container write").unwrap();
    std::fs::remove_file(target.join("etc/fixture/keep.txt")).unwrap();
    wharf_image::snapshot::unmount(&target).unwrap();
    assert_eq!(
        std::fs::read_to_string(rootfs.upper_dir.join("etc/fixture/new.txt")).unwrap(),
        "container write"
    );
    // The image is untouched, and cannot be removed while the container uses it.
    t.assert_view(&img, "multilayer");
    let e = t.store.remove(&image("multilayer"), false).unwrap_err();
    assert!(e.to_string().contains("container c1"), "{e}");
    t.store.remove_container("c1").unwrap();
    assert!(!rootfs.upper_dir.exists());
}

#[test]
fn zstd_layers_unpack_and_snapshots_are_shared() {
    let t = TestStore::new();
    let bb = t.pull(&image("busybox"));
    let z = t.pull(&image("zstd"));
    assert_eq!(
        z.manifest.layers[1].media_type,
        wharf_image::manifest::OCI_LAYER_ZSTD
    );
    t.assert_view(&z, "zstd");
    // busybox's layer is zstd's base: one snapshot for both.
    let bb_dirs = t.store.layer_dirs(&bb).unwrap();
    let z_dirs = t.store.layer_dirs(&z).unwrap();
    assert_eq!(z_dirs[1], bb_dirs[0]);
    t.assert_blobs_verified();
}

#[test]
fn multilayer_recompressed_with_zstd_unpacks_exactly() {
    let t = TestStore::new();
    let img = t.pull(&image("multilayer:zstd"));
    assert!(
        img.manifest
            .layers
            .iter()
            .all(|l| l.media_type.ends_with("+zstd"))
    );
    t.assert_view(&img, "multilayer");
}

#[test]
fn docker_schema2_images_unpack_exactly() {
    let t = TestStore::new();
    let bb = t.pull(&image("busybox:v2s2"));
    assert_eq!(bb.manifest_media_type, DOCKER_MANIFEST);
    t.assert_view(&bb, "busybox");
    let ml = t.pull(&image("multilayer:v2s2"));
    assert_eq!(ml.manifest_media_type, DOCKER_MANIFEST);
    t.assert_view(&ml, "multilayer");
}

#[test]
fn an_index_resolves_to_the_platform_asked_for() {
    let t = TestStore::new();
    let amd = t.pull(&image("busybox:multiarch"));
    assert_eq!(amd.config.architecture().to_string(), "amd64");
    t.assert_view(&amd, "busybox-multiarch-amd64");

    let t2 = TestStore::new();
    let opts = PullOptions {
        platform: Some(Platform::parse("linux/arm64").unwrap()),
        ..Default::default()
    };
    let arm = t2
        .store
        .pull(&image("busybox:multiarch"), &opts, &())
        .unwrap();
    assert_eq!(arm.config.architecture().to_string(), "arm64");
    let view = t2.store.mount_image(&arm).unwrap();
    assert_eq!(
        std::fs::read_to_string(view.join("etc/platform")).unwrap(),
        "linux/arm64/v8\n"
    );
    t2.store.unmount_image(&arm).unwrap();

    let opts = PullOptions {
        platform: Some(Platform::parse("linux/s390x").unwrap()),
        ..Default::default()
    };
    let e = t2
        .store
        .pull(&image("busybox:multiarch"), &opts, &())
        .unwrap_err();
    assert!(
        matches!(e.root_cause(), Error::NoMatchingPlatform { .. }),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("busybox:multiarch")
            && msg.contains("linux/s390x")
            && msg.contains("linux/arm64/v8"),
        "{msg}"
    );
}

#[test]
fn basic_auth_needs_the_right_credentials() {
    let t = TestStore::new();
    let name = format!("{}/private/busybox:latest", registry_auth());
    let e = t
        .store
        .pull(&name, &PullOptions::default(), &())
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("401") && msg.contains("private/busybox"),
        "{msg}"
    );
    let bad = PullOptions {
        creds: Credentials::parse("fixture:wrong"),
        ..Default::default()
    };
    let msg = t.store.pull(&name, &bad, &()).unwrap_err().to_string();
    assert!(msg.contains("401"), "{msg}");
    let good = PullOptions {
        creds: Credentials::parse("fixture:fixture-pass"),
        ..Default::default()
    };
    let img = t.store.pull(&name, &good, &()).unwrap();
    t.assert_view(&img, "busybox");
}

#[test]
fn errors_name_the_image_and_the_cause() {
    let t = TestStore::new();
    let cases = [
        (
            "nonexistent.invalid/x/y:1",
            "unknown host nonexistent.invalid",
        ),
        (&*image("does-not-exist:latest"), "manifest unknown"),
        (&*image("busybox:no-such-tag"), "manifest unknown"),
        ("127.0.0.1:1/x:latest", "cannot connect to 127.0.0.1:1"),
        ("Bad/Name", "must be lowercase"),
    ];
    for (r, want) in cases {
        let msg = t
            .store
            .pull(r, &PullOptions::default(), &())
            .unwrap_err()
            .to_string();
        assert!(msg.contains(want), "pull {r}: {msg:?} lacks {want:?}");
        if want != "must be lowercase" {
            assert!(msg.starts_with("pulling "), "{msg}");
        }
    }
    assert!(t.store.list().unwrap().is_empty());
}

#[test]
fn rmi_and_prune_collect_unreferenced_content() {
    let t = TestStore::new();
    let bb = t.pull(&image("busybox"));
    let z = t.pull(&image("zstd"));
    let blobs_before = t.store.content().list().unwrap().len();
    // Removing zstd keeps busybox's layer (shared) and drops zstd's own blobs.
    let (names, deleted) = t.store.remove(&image("zstd"), false).unwrap();
    assert_eq!(names.len(), 1);
    assert_eq!(deleted.as_ref(), Some(&z.id));
    let left = t.store.content().list().unwrap();
    assert_eq!(
        left.len(),
        blobs_before - 3,
        "manifest, config and the zstd layer go"
    );
    assert!(
        t.store
            .content()
            .has(&bb.manifest.layers[0].digest().unwrap())
    );
    t.assert_view(&bb, "busybox");
    // A mounted image is not removed.
    t.store.mount_image(&bb).unwrap();
    assert!(t.store.remove(&image("busybox"), false).is_err());
    t.store.unmount_image(&bb).unwrap();
    t.store.remove(&image("busybox"), false).unwrap();
    assert!(t.store.content().list().unwrap().is_empty());
    let snaps = std::fs::read_dir(t.dir.path().join("root/image/snapshots"))
        .unwrap()
        .count();
    assert_eq!(snaps, 0);
    // prune with nothing left to do.
    let (removed, _) = t.store.prune(true).unwrap();
    assert!(removed.is_empty());
}
