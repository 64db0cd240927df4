//! The registry protocol against a scripted registry on loopback (wharf-testbed's
//! FakeRegistry): the Bearer-token flow, redirects to blob storage, and the answers a real
//! registry does not give (schema 1, corrupt blobs, unknown media types, hostile layers).

mod common;

use common::TestStore;
use wharf_image::auth::Credentials;
use wharf_image::{Error, PullOptions};
use wharf_testbed::fake_registry::{Auth, FakeRegistry, Reply, digest};
use wharf_testbed::layer_tar::{Entry, layer};

fn simple_layer() -> Vec<u8> {
    layer(vec![
        Entry::dir("etc"),
        Entry::file("etc/hello", b"hello from the fake registry\n"),
    ])
}

#[test]
fn bearer_token_flow_anonymous() {
    let reg = FakeRegistry::start();
    reg.set_auth(Auth::Bearer {
        token: "tok-anon".into(),
        creds: None,
    });
    reg.image("lib/app", "v1", &[simple_layer()]);
    let t = TestStore::new();
    let img = t.pull(&format!("{}/lib/app:v1", reg.addr));
    let view = t.store.mount_image(&img).unwrap();
    assert_eq!(
        std::fs::read_to_string(view.join("etc/hello")).unwrap(),
        "hello from the fake registry\n"
    );
    t.store.unmount_image(&img).unwrap();
    let reqs = reg.requests();
    assert!(
        reqs.iter().any(|r| r.starts_with(
            "GET /token?scope=repository%3Alib%2Fapp%3Apull&service=fake-registry auth=-"
        )),
        "{reqs:#?}"
    );
    assert!(
        reqs.iter()
            .any(|r| r.contains("/blobs/") && r.ends_with("auth=Bearer tok-anon")),
        "{reqs:#?}"
    );
}

#[test]
fn bearer_token_flow_with_credentials() {
    let reg = FakeRegistry::start();
    reg.set_auth(Auth::Bearer {
        token: "tok-user".into(),
        creds: Some("alice:s3cret".into()),
    });
    reg.image("team/app", "latest", &[simple_layer()]);
    let t = TestStore::new();
    let name = format!("{}/team/app", reg.addr);
    let msg = t
        .store
        .pull(&name, &PullOptions::default(), &())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("401") && msg.contains("token server"), "{msg}");
    let wrong = PullOptions {
        creds: Credentials::parse("alice:nope"),
        ..Default::default()
    };
    let msg = t.store.pull(&name, &wrong, &()).unwrap_err().to_string();
    assert!(msg.contains("credentials were refused"), "{msg}");
    let right = PullOptions {
        creds: Credentials::parse("alice:s3cret"),
        ..Default::default()
    };
    t.store.pull(&name, &right, &()).unwrap();
    assert!(
        reg.requests()
            .iter()
            .any(|r| r.starts_with("GET /token") && r.contains("auth=Basic "))
    );
}

#[test]
fn blob_redirects_are_followed_without_our_authorization() {
    let reg = FakeRegistry::start();
    reg.set_auth(Auth::Bearer {
        token: "tok".into(),
        creds: None,
    });
    let l = simple_layer();
    reg.image("r/app", "latest", std::slice::from_ref(&l));
    let d = digest(&l);
    reg.route("/storage/layer-1", Reply::ok("application/octet-stream", l));
    reg.route(
        &format!("/v2/r/app/blobs/{d}"),
        Reply {
            status: 302,
            headers: vec![(
                "Location".into(),
                format!("http://{}/storage/layer-1", reg.addr),
            )],
            body: vec![],
        },
    );
    let t = TestStore::new();
    t.pull(&format!("{}/r/app", reg.addr));
    let reqs = reg.requests();
    let storage: Vec<&String> = reqs.iter().filter(|r| r.contains("/storage/")).collect();
    assert_eq!(storage.len(), 1, "{reqs:#?}");
    assert!(
        storage[0].ends_with("auth=-"),
        "the token leaked to blob storage: {}",
        storage[0]
    );
}

#[test]
fn schema1_is_refused_with_a_clear_error() {
    let reg = FakeRegistry::start();
    reg.manifest(
        "old/app",
        "latest",
        "application/vnd.docker.distribution.manifest.v1+prettyjws",
        br#"{"schemaVersion":1,"name":"old/app","tag":"latest","fsLayers":[],"history":[]}"#
            .to_vec(),
    );
    let t = TestStore::new();
    let e = t
        .store
        .pull(
            &format!("{}/old/app", reg.addr),
            &PullOptions::default(),
            &(),
        )
        .unwrap_err();
    assert!(
        matches!(e.root_cause(), Error::UnsupportedMediaType(_)),
        "{e}"
    );
    assert!(e.to_string().contains("schema 1"), "{e}");
}

#[test]
fn a_corrupt_blob_is_never_committed() {
    let reg = FakeRegistry::start();
    let good = simple_layer();
    reg.image("bad/app", "latest", std::slice::from_ref(&good));
    // Same size, different bytes under the layer's digest.
    let mut evil = good.clone();
    evil[600] ^= 0xff;
    reg.route(
        &format!("/v2/bad/app/blobs/{}", digest(&good)),
        Reply::ok("application/octet-stream", evil),
    );
    let t = TestStore::new();
    let e = t
        .store
        .pull(
            &format!("{}/bad/app", reg.addr),
            &PullOptions::default(),
            &(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("digest mismatch"), "{e}");
    let d: wharf_image::digest::Digest = digest(&good).parse().unwrap();
    assert!(!t.store.content().has(&d));
    let root = t.dir.path().join("root/image");
    assert_eq!(
        std::fs::read_dir(root.join("content/ingest"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(root.join("snapshots")).unwrap().count(),
        0
    );
    assert!(t.store.list().unwrap().is_empty());
}

#[test]
fn a_wrong_diff_id_fails_the_layer() {
    let reg = FakeRegistry::start();
    let l = simple_layer();
    let ld = reg.blob("x/app", l.clone());
    let config = serde_json::json!({"architecture":"amd64","os":"linux","config":{},
        "rootfs":{"type":"layers","diff_ids":[digest(b"something else")]}});
    let config = serde_json::to_vec(&config).unwrap();
    let cd = reg.blob("x/app", config.clone());
    let m = serde_json::json!({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
        "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":cd,"size":config.len()},
        "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":ld,"size":l.len()}]});
    reg.manifest(
        "x/app",
        "latest",
        "application/vnd.oci.image.manifest.v1+json",
        serde_json::to_vec(&m).unwrap(),
    );
    let t = TestStore::new();
    let e = t
        .store
        .pull(&format!("{}/x/app", reg.addr), &PullOptions::default(), &())
        .unwrap_err();
    assert!(e.to_string().contains("diff id"), "{e}");
    assert_eq!(
        std::fs::read_dir(t.dir.path().join("root/image/snapshots"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn unsupported_media_types_are_named() {
    let reg = FakeRegistry::start();
    let l = simple_layer();
    let ld = reg.blob("m/app", l.clone());
    let config = serde_json::to_vec(&serde_json::json!({"architecture":"amd64","os":"linux",
        "rootfs":{"type":"layers","diff_ids":[digest(&l)]}}))
    .unwrap();
    let cd = reg.blob("m/app", config.clone());
    let m = serde_json::json!({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
        "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":cd,"size":config.len()},
        "layers":[{"mediaType":"application/vnd.example.encrypted+tar","digest":ld,"size":l.len()}]});
    reg.manifest(
        "m/app",
        "latest",
        "application/vnd.oci.image.manifest.v1+json",
        serde_json::to_vec(&m).unwrap(),
    );
    let t = TestStore::new();
    let e = t
        .store
        .pull(&format!("{}/m/app", reg.addr), &PullOptions::default(), &())
        .unwrap_err();
    assert!(
        e.to_string().contains("unsupported media type")
            && e.to_string().contains("vnd.example.encrypted"),
        "{e}"
    );
    // A helm chart (an artifact, not an image) is refused by its config type.
    let m2 = serde_json::json!({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
        "config":{"mediaType":"application/vnd.cncf.helm.config.v1+json","digest":cd,"size":config.len()},
        "layers":[]});
    reg.manifest(
        "m/chart",
        "latest",
        "application/vnd.oci.image.manifest.v1+json",
        serde_json::to_vec(&m2).unwrap(),
    );
    let e = t
        .store
        .pull(
            &format!("{}/m/chart", reg.addr),
            &PullOptions::default(),
            &(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("helm"), "{e}");
}

#[test]
fn a_hostile_image_pulled_from_a_registry_stays_inside_the_root() {
    let reg = FakeRegistry::start();
    let t = TestStore::new();
    let outside = t.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("sentinel"), "untouched").unwrap();
    let out = outside.display().to_string();
    let host = format!("/tmp/wharf-hostile-pull-{}", std::process::id());
    let l1 = layer(vec![
        Entry::symlink("esc", &out),
        Entry::symlink("up", "../../../../../../../.."),
        Entry::file(&format!("../../../../../..{host}"), b"x"),
    ]);
    let l2 = layer(vec![
        Entry::file("esc/sentinel", b"pwned"),
        Entry::file(&format!("up{host}-2"), b"x"),
        Entry::file(&format!("{out}/new"), b"x"),
        Entry::symlink("esc2", "/"),
        Entry::hardlink("esc2/hl", "esc/sentinel"),
        Entry::file("esc/.wh.sentinel", b""),
    ]);
    reg.image("evil/app", "latest", &[l1, l2]);
    let img = t.pull(&format!("{}/evil/app", reg.addr));
    let view = t.store.mount_image(&img).unwrap();
    assert!(
        view.join(outside.strip_prefix("/").unwrap())
            .join("new")
            .exists()
    );
    t.store.unmount_image(&img).unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("sentinel")).unwrap(),
        "untouched"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert!(!std::path::Path::new(&host).exists());
    assert!(!std::path::Path::new(&format!("{host}-2")).exists());
    let top: Vec<_> = std::fs::read_dir(t.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        top.len(),
        2,
        "only root/ and outside/ in the test dir: {top:?}"
    );
}

#[test]
fn an_interrupted_download_resumes_with_a_range_request() {
    let reg = FakeRegistry::start();
    let big: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let l = layer(vec![Entry::file("big.bin", &big)]);
    reg.image("res/app", "latest", std::slice::from_ref(&l));
    let t = TestStore::new();
    // What a killed pull leaves: the first part of the blob in ingest/.
    let d = digest(&l);
    let ingest = t.dir.path().join("root/image/content/ingest");
    std::fs::write(ingest.join(&d[7..]), &l[..500_000]).unwrap();
    let img = t.pull(&format!("{}/res/app", reg.addr));
    let reqs = reg.requests();
    assert!(
        reqs.iter()
            .any(|r| r.contains(&format!("/blobs/{d}")) && r.ends_with("range=bytes=500000-")),
        "{reqs:#?}"
    );
    let view = t.store.mount_image(&img).unwrap();
    assert_eq!(std::fs::read(view.join("big.bin")).unwrap(), big);
    t.store.unmount_image(&img).unwrap();
    t.assert_blobs_verified();

    // A partial file with garbage is detected by the digest and not committed.
    let t2 = TestStore::new();
    let ingest2 = t2.dir.path().join("root/image/content/ingest");
    let mut junk = l[..500_000].to_vec();
    junk[1000] ^= 1;
    std::fs::write(ingest2.join(&d[7..]), &junk).unwrap();
    let e = t2
        .store
        .pull(
            &format!("{}/res/app", reg.addr),
            &PullOptions::default(),
            &(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("digest mismatch"), "{e}");
    // ...and the next attempt starts over and succeeds.
    t2.pull(&format!("{}/res/app", reg.addr));
    t2.assert_blobs_verified();
}

#[test]
fn mirrors_are_tried_first_and_the_registry_after_them() {
    let upstream = FakeRegistry::start();
    let mirror = FakeRegistry::start();
    let broken_mirror = FakeRegistry::start();
    let only_on_mirror = layer(vec![Entry::file("from", b"mirror")]);
    let only_upstream = layer(vec![Entry::file("from", b"upstream")]);
    mirror.image("lib/a", "latest", &[only_on_mirror]);
    upstream.image("lib/b", "latest", &[only_upstream]);
    let cfg: wharf_image::config::RegistriesConfig = serde_json::from_value(serde_json::json!({
        "registries": { upstream.addr.clone(): { "mirrors": [
            format!("http://{}", broken_mirror.addr),
            mirror.addr.clone(),
        ] } }
    }))
    .unwrap();
    let t = TestStore::new();
    let store = wharf_image::ImageStore::open_with(&t.dir.path().join("root2"), cfg).unwrap();
    let a = store
        .pull(
            &format!("{}/lib/a", upstream.addr),
            &PullOptions::default(),
            &(),
        )
        .unwrap();
    let b = store
        .pull(
            &format!("{}/lib/b", upstream.addr),
            &PullOptions::default(),
            &(),
        )
        .unwrap();
    for (img, want) in [(&a, "mirror"), (&b, "upstream")] {
        let v = store.mount_image(img).unwrap();
        assert_eq!(std::fs::read_to_string(v.join("from")).unwrap(), want);
        store.unmount_image(img).unwrap();
    }
    assert!(
        broken_mirror
            .requests()
            .iter()
            .any(|r| r.contains("/v2/lib/a/manifests/latest"))
    );
    assert!(!upstream.requests().iter().any(|r| r.contains("/v2/lib/a/")));
}

#[test]
fn plain_http_only_for_loopback_and_configured_hosts() {
    let reg = FakeRegistry::start();
    reg.image("p/app", "latest", &[simple_layer()]);
    let port = reg.addr.rsplit_once(':').unwrap().1;
    // 0.0.0.0 reaches this machine but is not a loopback name: https only by default.
    let host = format!("0.0.0.0:{port}");
    let t = TestStore::new();
    let msg = t
        .store
        .pull(&format!("{host}/p/app"), &PullOptions::default(), &())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("TLS") && msg.contains("insecure"), "{msg}");
    assert!(
        !reg.requests()
            .iter()
            .any(|r| r.starts_with("GET /v2/p/app"))
    );
    let cfg: wharf_image::config::RegistriesConfig = serde_json::from_value(
        serde_json::json!({"registries": {host.clone(): {"insecure": true}}}),
    )
    .unwrap();
    let store = wharf_image::ImageStore::open_with(&t.dir.path().join("root2"), cfg).unwrap();
    store
        .pull(&format!("{host}/p/app"), &PullOptions::default(), &())
        .unwrap();
    assert!(
        reg.requests()
            .iter()
            .any(|r| r.starts_with("GET /v2/p/app/manifests/latest"))
    );
}

#[test]
fn a_connection_lost_mid_blob_is_resumed() {
    let reg = FakeRegistry::start();
    let big: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i * 7).to_le_bytes())
        .collect();
    let l = layer(vec![Entry::file("big.bin", &big)]);
    reg.image("net/app", "latest", std::slice::from_ref(&l));
    let d = digest(&l);
    reg.cut_next(&format!("/v2/net/app/blobs/{d}"), 300_000);
    let t = TestStore::new();
    let img = t.pull(&format!("{}/net/app", reg.addr));
    let reqs = reg.requests();
    let blob_reqs: Vec<&String> = reqs
        .iter()
        .filter(|r| r.contains(&format!("/blobs/{d}")))
        .collect();
    assert_eq!(blob_reqs.len(), 2, "{blob_reqs:#?}");
    assert!(
        blob_reqs[1].ends_with("range=bytes=300000-"),
        "{blob_reqs:#?}"
    );
    let view = t.store.mount_image(&img).unwrap();
    assert_eq!(std::fs::read(view.join("big.bin")).unwrap(), big);
    t.store.unmount_image(&img).unwrap();
}
