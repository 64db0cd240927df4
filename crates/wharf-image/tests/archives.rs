//! Archives: `docker save` and OCI layout tarballs made by skopeo load to the reference
//! trees; what Wharf saves loads back and is read by skopeo; plain rootfs tarballs import.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestStore, image};
use wharf_image::archive::ArchiveFormat;
use wharf_testbed::layer_tar::{Entry, layer};

fn oci_layout() -> PathBuf {
    PathBuf::from(std::env::var("WHARF_TEST_OCI").unwrap_or_else(|_| {
        panic!("WHARF_TEST_OCI is not set: run the suite with scripts/test.sh (scripts/test.d/20-images.sh)")
    }))
}

fn skopeo(args: &[&str]) {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .expect("run skopeo");
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn open(p: &Path) -> std::io::BufReader<std::fs::File> {
    std::io::BufReader::new(std::fs::File::open(p).unwrap())
}

#[test]
fn docker_save_archives_load_to_the_reference_tree() {
    let t = TestStore::new();
    let tar = t.dir.path().join("ml-docker.tar");
    let src = format!("oci:{}:multilayer", oci_layout().display());
    let dst = format!("docker-archive:{}:fixtures/multilayer:v1", tar.display());
    skopeo(&["copy", "-q", &src, &dst]);
    let loaded = t.store.load(open(&tar)).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(
        loaded[0].names,
        vec!["docker.io/fixtures/multilayer:v1".to_string()]
    );
    let img = t.store.resolve("fixtures/multilayer:v1").unwrap();
    assert_eq!(img.diff_ids.len(), 7);
    t.assert_view(&img, "multilayer");
    t.assert_blobs_verified();
}

#[test]
fn oci_archives_load_including_an_index() {
    let t = TestStore::new();
    let z = t.dir.path().join("zstd-oci.tar");
    skopeo(&[
        "copy",
        "-q",
        &format!("oci:{}:zstd", oci_layout().display()),
        &format!("oci-archive:{}:example.com/z:1", z.display()),
    ]);
    let loaded = t.store.load(open(&z)).unwrap();
    assert_eq!(loaded.len(), 1);
    let img = t.store.resolve(&loaded[0].id.to_string()).unwrap();
    t.assert_view(&img, "zstd");

    let m = t.dir.path().join("multiarch-oci.tar");
    skopeo(&[
        "copy",
        "-q",
        "--all",
        &format!("oci:{}:multiarch", oci_layout().display()),
        &format!("oci-archive:{}:example.com/ma:1", m.display()),
    ]);
    let loaded = t.store.load(open(&m)).unwrap();
    let img = t.store.resolve(&loaded[0].id.to_string()).unwrap();
    assert_eq!(img.config.architecture().to_string(), "amd64");
    t.assert_view(&img, "busybox-multiarch-amd64");
}

#[test]
fn saved_archives_load_back_and_skopeo_reads_them() {
    let t = TestStore::new();
    t.pull(&image("busybox"));
    t.pull(&image("zstd"));
    for (format, transport) in [
        (ArchiveFormat::Docker, "docker-archive"),
        (ArchiveFormat::Oci, "oci-archive"),
    ] {
        let out = t.dir.path().join(format!("saved-{transport}.tar"));
        t.store
            .save(
                &[&image("busybox"), &image("zstd")],
                format,
                std::fs::File::create(&out).unwrap(),
            )
            .unwrap();
        // skopeo reads it (and checks every blob against its digest while copying).
        let copy = t.dir.path().join(format!("copy-{transport}"));
        let src = if transport == "docker-archive" {
            format!("{transport}:{}:@1", out.display())
        } else {
            // Both images carry ref.name "latest" (the tag, as containerd and docker write
            // it): skopeo picks by that, so it gets a one-image archive.
            let one = t.dir.path().join("saved-one.tar");
            t.store
                .save(
                    &[&image("zstd")],
                    format,
                    std::fs::File::create(&one).unwrap(),
                )
                .unwrap();
            format!("{transport}:{}:latest", one.display())
        };
        skopeo(&["copy", "-q", &src, &format!("oci:{}:x", copy.display())]);
        // And Wharf loads it into an empty store, names and trees intact.
        let t2 = TestStore::new();
        let loaded = t2.store.load(open(&out)).unwrap();
        assert_eq!(loaded.len(), 2, "{transport}");
        let z = t2.store.resolve(&image("zstd")).unwrap();
        t2.assert_view(&z, "zstd");
        let b = t2.store.resolve(&image("busybox")).unwrap();
        t2.assert_view(&b, "busybox");
    }
}

#[test]
fn a_rootfs_tarball_imports_as_a_one_layer_image() {
    let t = TestStore::new();
    let tarball = layer(vec![
        Entry::dir("bin"),
        Entry::file("bin/hello", b"#!/bin/sh\necho hi\n"),
        Entry::symlink("bin/hi", "hello"),
        Entry::file("../../escape", b"confined"),
    ]);
    let gz = t.dir.path().join("rootfs.tar.gz");
    let plain = t.dir.path().join("rootfs.tar");
    std::fs::write(&plain, &tarball).unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -c {} > {}", plain.display(), gz.display()))
        .status()
        .unwrap();
    assert!(st.success());
    let img = t
        .store
        .import(open(&gz), Some("example.com/imported:v1"))
        .unwrap();
    assert_eq!(img.names, vec!["example.com/imported:v1".to_string()]);
    assert_eq!(
        img.diff_ids[0].to_string(),
        wharf_testbed::fake_registry::digest(&tarball)
    );
    assert_eq!(
        img.manifest.layers[0].media_type,
        wharf_image::manifest::OCI_LAYER_GZIP
    );
    let view = t.store.mount_image(&img).unwrap();
    assert_eq!(
        std::fs::read_to_string(view.join("bin/hello")).unwrap(),
        "#!/bin/sh\necho hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(view.join("escape")).unwrap(),
        "confined"
    );
    t.store.unmount_image(&img).unwrap();
    assert!(!t.dir.path().join("escape").exists());
    // Unnamed, uncompressed: same diff id, plain tar layer.
    let img2 = t.store.import(open(&plain), None).unwrap();
    assert_eq!(img2.diff_ids, img.diff_ids);
    assert_eq!(
        img2.manifest.layers[0].media_type,
        wharf_image::manifest::OCI_LAYER
    );
}

#[test]
fn hostile_archives_are_refused_or_confined() {
    let t = TestStore::new();
    // manifest.json pointing out of the archive: paths are only keys, so it is "missing".
    let mut b = wharf_testbed::layer_tar::TarBuilder::new();
    b.add(Entry::file(
        "manifest.json",
        br#"[{"Config":"../../../../etc/passwd","RepoTags":["evil:1"],"Layers":[]}]"#,
    ));
    let e = t.store.load(&b.finish()[..]).unwrap_err().to_string();
    assert!(e.contains("no file") && e.contains("etc/passwd"), "{e}");
    // A blob whose name is not its digest.
    let mut b = wharf_testbed::layer_tar::TarBuilder::new();
    b.add(Entry::file(
        "blobs/sha256/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        b"not empty",
    ));
    let e = t.store.load(&b.finish()[..]).unwrap_err().to_string();
    assert!(e.contains("digest mismatch"), "{e}");
    let e = t
        .store
        .load(&b"definitely not a tar archive"[..])
        .unwrap_err()
        .to_string();
    assert!(e.contains("archive"), "{e}");
    assert!(t.store.list().unwrap().is_empty());
}
