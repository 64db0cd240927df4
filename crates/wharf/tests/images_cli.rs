//! End-to-end tests of the image commands against the loopback fixture registry.

mod image_support;

use image_support::{Root, assert_blobs_verified, assert_tree, image, registry_auth};

#[test]
fn pull_list_inspect_mount_and_remove() {
    let r = Root::new();
    let name = format!("{}:latest", image("busybox"));
    assert_eq!(
        r.ok(&["pull", "-q", &image("busybox")]),
        format!("{name}\n")
    );
    let table = r.ok(&["images"]);
    let repo = image("busybox");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&repo) && l.contains("latest")),
        "{table}"
    );
    // docker's JSON lines and keys.
    let lines = r.ok(&["images", "--format", "json"]);
    assert_eq!(lines.lines().count(), 1, "{lines}");
    let json: serde_json::Value = serde_json::from_str(&lines).unwrap();
    assert_eq!(
        format!(
            "{}:{}",
            json["Repository"].as_str().unwrap(),
            json["Tag"].as_str().unwrap()
        ),
        name.as_str()
    );
    let id = r
        .ok(&["image", "inspect", "-f", "{{.Id}}", &name])
        .trim()
        .to_string();
    assert_eq!(json["ID"], &id[7..19]);
    // WHARF_ROOT selects the root as --root does.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["images", "-q"])
        .env("WHARF_ROOT", r.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), &id[7..19]);

    let inspect: serde_json::Value =
        serde_json::from_str(&r.ok(&["image", "inspect", &image("busybox")])).unwrap();
    assert_eq!(inspect[0]["Id"], id.as_str());
    assert_eq!(inspect[0]["Config"]["Cmd"], serde_json::json!(["sh"]));
    assert_eq!(inspect[0]["Os"], "linux");

    let path = r.ok(&["image", "mount", &image("busybox")]);
    let path = std::path::PathBuf::from(path.trim());
    assert!(path.starts_with(r.path()));
    assert_tree(&path, "busybox");
    // Mounting again gives the same view; the image cannot go while mounted.
    assert_eq!(
        r.ok(&["image", "mount", &id[7..19]]).trim(),
        path.to_str().unwrap()
    );
    let err = r.fails(&["rmi", &image("busybox")]);
    assert!(err.contains("mounted"), "{err}");
    r.ok(&["image", "unmount", &image("busybox")]);
    assert!(!path.exists());
    let err = r.fails(&["image", "unmount", &image("busybox")]);
    assert!(err.contains("not mounted"), "{err}");

    let out = r.ok(&["rmi", &image("busybox")]);
    assert!(
        out.contains(&format!("Untagged: {name}")) && out.contains(&format!("Deleted: {id}")),
        "{out}"
    );
    assert_eq!(r.ok(&["images", "--format", "json"]), "");
    let blobs = std::fs::read_dir(r.path().join("image/content/blobs/sha256"))
        .unwrap()
        .count();
    assert_eq!(blobs, 0);
    let err = r.fails(&["rmi", &image("busybox")]);
    assert!(err.contains("image not known"), "{err}");
}

#[test]
fn pull_progress_is_plain_lines_without_a_terminal() {
    let r = Root::new();
    let out = r.ok(&["pull", &image("zstd")]);
    assert!(
        out.starts_with(&format!("Pulling {}:latest\n", image("zstd"))),
        "{out}"
    );
    assert_eq!(out.matches(": Pull complete").count(), 2, "{out}");
    assert!(
        out.contains(
            "Digest: sha256:a8f58bd166a41dd462e4a1f80fb8d4626d07fed7ae931fbefab28d4fed8b26c0"
        ),
        "{out}"
    );
    assert!(!out.contains('\x1b'), "no terminal escapes in plain output");
    // Pulling again: the layers exist.
    let again = r.ok(&["pull", &image("zstd")]);
    assert_eq!(again.matches(": Already exists").count(), 2, "{again}");
    assert_blobs_verified(&r.path());
}

#[test]
fn credentials_from_the_flag_and_from_docker_config() {
    let r = Root::new();
    let name = format!("{}/private/busybox:latest", registry_auth());
    let err = r.fails(&["pull", "-q", &name]);
    assert!(err.contains("401") && err.contains(&name), "{err}");
    let err = r.fails(&["pull", "-q", "--creds", "fixture:wrong", &name]);
    assert!(err.contains("401"), "{err}");
    r.ok(&["pull", "-q", "--creds", "fixture:fixture-pass", &name]);
    r.ok(&["rmi", &name]);
    // docker login's config.json.
    let cfg = r.dir.path().join("docker");
    std::fs::create_dir(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.json"),
        format!(
            r#"{{"auths":{{"{}":{{"auth":"Zml4dHVyZTpmaXh0dXJlLXBhc3M="}}}}}}"#,
            registry_auth()
        ),
    )
    .unwrap();
    let out = r
        .cmd(&["pull", "-q", &name])
        .env("DOCKER_CONFIG", &cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.ok(&["rmi", &name]);

    // A credential helper named for the registry (docker-credential-<name> get, the server
    // on stdin); one that knows nothing fails the pull with the registry's 401.
    use std::os::unix::fs::PermissionsExt;
    let bin = r.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let helper = |name: &str, body: &str| {
        let p = bin.join(format!("docker-credential-{name}"));
        std::fs::write(&p, format!("#!/bin/sh\nread server\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    helper(
        "wharftest",
        &format!(
            r#"[ "$1" = get ] && [ "$server" = "{}" ] && echo '{{"ServerURL":"x","Username":"fixture","Secret":"fixture-pass"}}' || exit 1"#,
            registry_auth()
        ),
    );
    helper(
        "empty",
        "echo 'credentials not found in native keychain'; exit 1",
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (helper, works) in [("wharftest", true), ("empty", false)] {
        std::fs::write(
            cfg.join("config.json"),
            format!(r#"{{"credHelpers":{{"{}":"{helper}"}}}}"#, registry_auth()),
        )
        .unwrap();
        let out = r
            .cmd(&["pull", "-q", &name])
            .env("DOCKER_CONFIG", &cfg)
            .env("PATH", &path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), works, "{helper}: {err}");
        if !works {
            assert!(err.contains("401"), "{err}");
        }
    }
}

#[test]
fn errors_name_the_image_and_the_cause() {
    let r = Root::new();
    let err = r.fails(&["pull", "nonexistent.invalid/a/b"]);
    assert_eq!(
        err.trim(),
        "wharf: pulling nonexistent.invalid/a/b:latest: unknown host nonexistent.invalid: the name does not resolve"
    );
    let err = r.fails(&["pull", &image("nope:1")]);
    assert!(
        err.contains(&format!("pulling {}", image("nope:1"))) && err.contains("manifest unknown"),
        "{err}"
    );
    let err = r.fails(&[
        "pull",
        "--platform",
        "linux/s390x",
        &image("busybox:multiarch"),
    ]);
    assert!(
        err.contains("no matching platform") && err.contains("linux/amd64"),
        "{err}"
    );
    let err = r.fails(&["image", "inspect", "nothing-here"]);
    assert!(err.contains("image not known: nothing-here"), "{err}");
    let out = r.run(&["pull"]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn prune_removes_unused_images() {
    let r = Root::new();
    r.ok(&["pull", "-q", &image("busybox")]);
    r.ok(&["pull", "-q", &image("busybox:multiarch")]);
    // Nothing dangling: plain prune keeps both.
    let out = r.ok(&["image", "prune"]);
    assert!(!out.contains("Deleted"), "{out}");
    let out = r.ok(&["image", "prune", "--all"]);
    assert_eq!(out.matches("Deleted: ").count(), 2, "{out}");
    assert_eq!(r.ok(&["images", "-q"]), "");
    let snaps = std::fs::read_dir(r.path().join("image/snapshots"))
        .unwrap()
        .count();
    assert_eq!(snaps, 0);
}

#[test]
fn save_load_and_import() {
    let r = Root::new();
    r.ok(&["pull", "-q", &image("busybox")]);
    let archive = r.dir.path().join("bb.tar");
    r.ok(&["save", "-o", archive.to_str().unwrap(), &image("busybox")]);
    r.ok(&["rmi", &image("busybox")]);
    let out = r.ok(&["load", "-i", archive.to_str().unwrap()]);
    assert_eq!(out, format!("Loaded image: {}:latest\n", image("busybox")));
    let path = r.ok(&["image", "mount", &image("busybox")]);
    assert_tree(std::path::Path::new(path.trim()), "busybox");
    r.ok(&["image", "unmount", &image("busybox")]);
    // load from stdin, OCI format.
    let oci = r.dir.path().join("bb-oci.tar");
    r.ok(&[
        "save",
        "--format",
        "oci",
        "-o",
        oci.to_str().unwrap(),
        &image("busybox"),
    ]);
    let r2 = Root::new();
    let out = r2
        .cmd(&["load", "-q"])
        .stdin(std::fs::File::open(&oci).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}:latest\n", image("busybox"))
    );
    // import a rootfs tarball from stdin.
    let rootfs = wharf_testbed::layer_tar::layer(vec![wharf_testbed::layer_tar::Entry::file(
        "hello", b"hi",
    )]);
    let tarball = r.dir.path().join("rootfs.tar");
    std::fs::write(&tarball, rootfs).unwrap();
    let out = r
        .cmd(&["import", "-", "example.com/imported:1"])
        .stdin(std::fs::File::open(&tarball).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("sha256:"));
    let path = r.ok(&["image", "mount", "example.com/imported:1"]);
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(path.trim()).join("hello")).unwrap(),
        "hi"
    );
    r.ok(&["image", "unmount", "example.com/imported:1"]);
    let err = r.fails(&["load", "-i", "/nonexistent/archive.tar"]);
    assert!(err.contains("/nonexistent/archive.tar"), "{err}");
}

#[test]
fn fixture_images_pull_through_the_authenticated_registry() {
    let r = Root::new();
    for (name, tree) in [
        ("fixtures/zstd:latest", "zstd"),
        ("fixtures/busybox:v2s2", "busybox"),
        ("fixtures/busybox:multiarch", "busybox-multiarch-amd64"),
    ] {
        let full = format!("{}/{name}", registry_auth());
        let err = r.fails(&["pull", "-q", &full]);
        assert!(err.contains("401"), "{err}");
        r.ok(&["pull", "-q", "--creds", "fixture:fixture-pass", &full]);
        let path = r.ok(&["image", "mount", &full]);
        assert_tree(std::path::Path::new(path.trim()), tree);
        r.ok(&["image", "unmount", &full]);
    }
}

/// An OCI archive whose only name is a tag (ref.name "latest", no
/// io.containerd.image.name) loads unnamed, and says so and how to name it; one whose
/// ref.name is a whole reference is named by it.
#[test]
fn an_oci_archive_named_only_by_a_tag_loads_unnamed_and_says_so() {
    let r = Root::new();
    r.ok(&["pull", "-q", &image("busybox")]);
    let oci = r.dir.path().join("bb-oci.tar");
    r.ok(&[
        "save",
        "--format",
        "oci",
        "-o",
        oci.to_str().unwrap(),
        &image("busybox"),
    ]);
    // The same archive with its index's annotations rewritten.
    let rewrite = |annotations: serde_json::Value, out: &std::path::Path| {
        let mut src = tar::Archive::new(std::fs::File::open(&oci).unwrap());
        let mut dst = tar::Builder::new(std::fs::File::create(out).unwrap());
        for e in src.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().into_owned();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            if path.to_str() == Some("index.json") {
                let mut idx: serde_json::Value = serde_json::from_slice(&data).unwrap();
                idx["manifests"][0]["annotations"] = annotations.clone();
                data = serde_json::to_vec(&idx).unwrap();
            }
            let mut h = e.header().clone();
            h.set_size(data.len() as u64);
            h.set_cksum();
            dst.append_data(&mut h, &path, &data[..]).unwrap();
        }
        dst.finish().unwrap();
    };
    let tag_only = r.dir.path().join("tag-only.tar");
    rewrite(
        serde_json::json!({"org.opencontainers.image.ref.name": "latest"}),
        &tag_only,
    );
    let r2 = Root::new();
    let out = r2
        .cmd(&["load", "-i", tag_only.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.starts_with("Loaded image ID: sha256:"), "{stdout}");
    assert!(
        stderr.contains("only the tag \"latest\"") && stderr.contains("wharf tag"),
        "{stderr}"
    );
    assert_eq!(
        r2.ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"]),
        "<none>:<none>\n"
    );
    let named = r.dir.path().join("named.tar");
    rewrite(
        serde_json::json!({"org.opencontainers.image.ref.name": "example.com/team/bb:2"}),
        &named,
    );
    let r3 = Root::new();
    assert_eq!(
        r3.ok(&["load", "-i", named.to_str().unwrap()]),
        "Loaded image: example.com/team/bb:2\n"
    );
}
