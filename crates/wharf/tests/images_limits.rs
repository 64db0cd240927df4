//! Hostile input to `wharf pull`: a decompression bomb is refused with a clear error and
//! leaves nothing behind; image sizes are what the layers unpack to; a digest mismatch
//! names both digests.

mod image_support;

use image_support::Root;
use wharf_testbed::fake_registry::{FakeRegistry, Reply, digest};
use wharf_testbed::layer_tar::{Entry, gzip_bomb, layer};

const GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Total bytes of regular files below `dir`.
fn bytes_below(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let m = e.metadata().unwrap();
        if m.is_dir() {
            total += bytes_below(&e.path());
        } else if m.is_file() {
            total += m.len();
        }
    }
    total
}

/// A layer of a few MiB that unpacks to 2 GiB is refused (the red team's was accepted and
/// reported as 3.2 MB), under the default limits and under tighter configured ones.
#[test]
fn a_decompression_bomb_is_refused() {
    let reg = FakeRegistry::start();
    let bomb = gzip_bomb(2 << 30);
    assert!(bomb.len() < 8 << 20, "{}", bomb.len());
    let layer_digest = digest(&bomb);
    reg.image_of(
        "bomb/app",
        "latest",
        &[(bomb, format!("sha256:{}", "0".repeat(64)), GZIP)],
    );
    let r = Root::new();
    // Tighter limits from the config file first (fast: refused after 64 MiB).
    let config = r.dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"images": {"max-expansion-ratio": 10, "expansion-allowance-bytes": 67108864}}"#,
    )
    .unwrap();
    let name = format!("{}/bomb/app", reg.addr);
    let err = r.fails(&["--config", config.to_str().unwrap(), "pull", "-q", &name]);
    assert!(
        err.contains("decompression bomb") && err.contains(&layer_digest),
        "{err}"
    );
    assert!(err.contains("64.0 MiB"), "{err}");
    // The defaults (100 times, 1 GiB allowance) refuse it too.
    let err = r.fails(&["pull", "-q", &name]);
    assert!(err.contains("decompression bomb"), "{err}");
    assert!(err.contains("1.0 GiB"), "{err}");
    // Nothing of the unpack is left, and no image.
    let snapshots = r.path().join("image/snapshots");
    assert!(
        bytes_below(&snapshots) < 1 << 20,
        "an unpack was left behind"
    );
    assert!(!r.ok(&["images"]).contains("bomb"));
}

/// `wharf images` shows what the layers unpack to, not what they weigh compressed.
#[test]
fn image_sizes_count_unpacked_bytes() {
    let reg = FakeRegistry::start();
    let data = vec![0u8; 8 << 20];
    let tar = layer(vec![Entry::file("zeros", &data)]);
    let compressed = gzip(&tar);
    assert!(compressed.len() < 1 << 20);
    reg.image_of("sized/app", "latest", &[(compressed, digest(&tar), GZIP)]);
    let r = Root::new();
    r.ok(&["pull", "-q", &format!("{}/sized/app", reg.addr)]);
    let size = r.ok(&[
        "image",
        "inspect",
        "-f",
        "{{.Size}}",
        &format!("{}/sized/app", reg.addr),
    ]);
    assert_eq!(size.trim(), tar.len().to_string());
}

/// A blob whose bytes do not hash to its digest: the error shows both digests.
#[test]
fn a_digest_mismatch_names_both_digests() {
    let reg = FakeRegistry::start();
    let tar = layer(vec![Entry::file("f", b"good")]);
    reg.image("bad/app", "latest", std::slice::from_ref(&tar));
    let good = digest(&tar);
    let evil = layer(vec![Entry::file("f", b"evil")]);
    reg.route(
        &format!("/v2/bad/app/blobs/{good}"),
        Reply::ok("application/octet-stream", evil.clone()),
    );
    let r = Root::new();
    let err = r.fails(&["pull", "-q", &format!("{}/bad/app", reg.addr)]);
    assert!(
        err.contains(&good) && err.contains(&digest(&evil)),
        "both digests should be named: {err}"
    );
}
