//! The Dockerfile corpus (`tests/build_corpus/*/`): each case is built by `wharf build` and
//! by buildah (Debian's 1.28: `bud --isolation chroot --layers --format docker`, a private
//! storage root) from the same base image, served by the loopback fixture registry, and the
//! two images must match: the root filesystem tree (paths, types, modes, owners, sizes,
//! contents, link targets, hard links, xattrs; not times) and the config (Env, Cmd,
//! Entrypoint, WorkingDir, User, ExposedPorts, Volumes, Labels, Healthcheck, StopSignal,
//! OnBuild, Shell) and the number of history entries.
//!
//! A case is a directory: its `Dockerfile`, the context's files, optionally
//! - `args`: more `build` arguments, one per line, given to both builders (paths in them are
//!   relative to the context);
//! - `make-context.sh`: run in the context first (to make what git should not hold);
//! - `expected/`: files whose contents the image must hold at the same paths, for what
//!   buildah 1.28 cannot build (here-documents): then buildah is not run.
//!
//! Every build gets `BASE` (the fixture busybox) and `URL_BASE` (an HTTP server on loopback
//! serving the case's `served-*` files) as build arguments. Without buildah on the PATH the
//! comparison is skipped, saying so; scripts/test.sh installs it. A corpus kept elsewhere,
//! laid out the same way, runs with `WHARF_BUILD_CORPUS=DIR` (`every_case_of_an_outside_corpus`).

mod engine_support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use engine_support::{Wharf, busybox};
use serde_json::Value;

/// The corpus directory.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/build_corpus")
}

/// A case's directory: from `WHARF_BUILD_CORPUS` when that corpus has it (see
/// [`every_case_of_an_outside_corpus`]), else the repository's.
fn case_dir(case: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("WHARF_BUILD_CORPUS").map(|d| PathBuf::from(d).join(case))
        && dir.is_dir()
    {
        return dir;
    }
    corpus().join(case)
}

/// Run, must succeed, stdout.
fn run_ok(cmd: &mut Command, what: &str) -> String {
    succeeded(output(cmd, what), what)
}

/// The output of `cmd`, whatever its status.
fn output(cmd: &mut Command, what: &str) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The stdout of `out`, which must be a success.
fn succeeded(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`run_ok`] of the command `make` gives, made and run a second time if the first failed
/// only because buildah could not seal the in-memory copy of itself it re-executes
/// (runc's cloned-binary code, which buildah links): `F_ADD_SEALS` fails with EBUSY while
/// the kernel still counts a page of the fresh copy as pinned. That is the reference
/// builder's failure, not the build's; seen once in CI (`Close_Fd sealing memfd copy:
/// Device or resource busy` at a `RUN` step), and a second run goes through.
fn run_ok_but_a_peer_flake(make: impl Fn() -> Command, what: &str) -> String {
    let out = output(&mut make(), what);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !stderr.contains("sealing memfd copy") {
        return succeeded(out, what);
    }
    eprintln!("{what}: buildah could not seal its memfd copy ({stderr}); running it again");
    run_ok(&mut make(), what)
}

/// A tree's listing (fixtures/images/list-tree.sh) without the mtime column: the builders
/// stamp the files their steps make with the time of the build.
fn tree(dir: &Path) -> Vec<String> {
    let kit = std::env::var("WHARF_TEST_FIXTURES").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/images")
            .display()
            .to_string()
    });
    let out = run_ok(
        Command::new(Path::new(&kit).join("list-tree.sh")).arg(dir),
        "list-tree.sh",
    );
    out.lines()
        .map(|l| {
            let mut cols: Vec<&str> = l.split('\t').collect();
            if cols.len() > 5 {
                cols.remove(5);
            }
            cols.join("\t")
        })
        .collect()
}

/// The config fields both builders must agree on, nulls and empty objects alike.
fn config_view(config: &Value) -> BTreeMap<&'static str, Value> {
    let mut out = BTreeMap::new();
    for k in [
        "Env",
        "Cmd",
        "Entrypoint",
        "WorkingDir",
        "User",
        "ExposedPorts",
        "Volumes",
        "Labels",
        "Healthcheck",
        "StopSignal",
        "OnBuild",
        "Shell",
    ] {
        let mut v = config.get(k).cloned().unwrap_or(Value::Null);
        // buildah signs its images with its version.
        if let Some(labels) = v.as_object_mut() {
            labels.remove("io.buildah.version");
        }
        let empty = match &v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        };
        out.insert(k, if empty { Value::Null } else { v });
    }
    out
}

/// What a builder made: its tree and its config.
struct Result {
    tree: Vec<String>,
    config: BTreeMap<&'static str, Value>,
    history: usize,
}

/// A loopback HTTP server for ADD's URLs: `GET /NAME` answers the case's `served-NAME`.
fn serve(dir: PathBuf) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" || h == "\n" {
                        break;
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/");
                let name = path.trim_start_matches('/');
                let body = (!name.contains('/'))
                    .then(|| std::fs::read(dir.join(format!("served-{name}"))).ok())
                    .flatten();
                let head = line.starts_with("HEAD ");
                let reply = match body {
                    Some(b) => {
                        let mut v = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nLast-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\nConnection: close\r\n\r\n",
                            b.len()
                        )
                        .into_bytes();
                        if !head {
                            v.extend_from_slice(&b);
                        }
                        v
                    }
                    None => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = s.write_all(&reply);
            });
        }
    });
    format!("http://{addr}")
}

/// The case's context, ready: copied to a temp dir, `make-context.sh` run there.
fn context(w: &Wharf, case: &str) -> PathBuf {
    let ctx = w.path("ctx");
    run_ok(
        Command::new("cp").arg("-a").arg(case_dir(case)).arg(&ctx),
        "copy the case",
    );
    for gone in ["expected", "args", "no-buildah", "docker-differs"] {
        let _ = std::fs::remove_dir_all(ctx.join(gone));
        let _ = std::fs::remove_file(ctx.join(gone));
    }
    if ctx.join("make-context.sh").exists() {
        run_ok(
            Command::new("./make-context.sh").current_dir(&ctx),
            "make-context.sh",
        );
        std::fs::remove_file(ctx.join("make-context.sh")).unwrap();
    }
    ctx
}

/// The case's extra arguments.
fn case_args(case: &str) -> Vec<String> {
    std::fs::read_to_string(case_dir(case).join("args"))
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Build with Wharf; returns the image and the tree of its root.
fn with_wharf(w: &Wharf, case: &str, ctx: &Path, url: &str) -> Result {
    let tag = format!("corpus/{case}:wharf");
    let base = format!("BASE={}", busybox());
    let url = format!("URL_BASE={url}");
    let mut args: Vec<String> = ["build", "-q", "-t", &tag, "--build-arg", &base]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--build-arg".into(), url]);
    args.extend(case_args(case));
    args.push(ctx.display().to_string());
    let mut cmd = w.cmd(&args.iter().map(String::as_str).collect::<Vec<_>>());
    cmd.current_dir(ctx);
    run_ok(&mut cmd, &format!("wharf build of {case}"));
    let mnt = w.ok(&["image", "mount", &tag]);
    let tree = tree(Path::new(mnt.trim()));
    w.ok(&["image", "unmount", &tag]);
    let inspect: Value = serde_json::from_str(&w.ok(&["image", "inspect", &tag])).unwrap();
    let history = w.ok(&["history", "-q", "--no-trunc", &tag]).lines().count();
    Result {
        tree,
        config: config_view(&inspect[0]["Config"]),
        history,
    }
}

/// buildah with a private storage root under the test's temp dir.
fn buildah(w: &Wharf) -> Command {
    let mut c = Command::new("buildah");
    c.arg("--root")
        .arg(w.path("buildah/root"))
        .arg("--runroot")
        .arg(w.path("buildah/run"))
        .args(["--storage-driver", "vfs"]);
    c
}

/// Build with buildah; returns the image and the tree of its root.
fn with_buildah(w: &Wharf, case: &str, ctx: &Path, url: &str) -> Result {
    let tag = format!("localhost/corpus/{case}:buildah");
    let bud = || {
        let mut cmd = buildah(w);
        cmd.args([
            "bud",
            "-q",
            "--isolation",
            "chroot",
            "--layers",
            "--format",
            "docker",
            "--tls-verify=false",
            "-t",
            &tag,
            "--build-arg",
            &format!("BASE={}", busybox()),
            "--build-arg",
            &format!("URL_BASE={url}"),
        ])
        .args(case_args(case))
        .arg(ctx)
        .current_dir(ctx);
        cmd
    };
    run_ok_but_a_peer_flake(bud, &format!("buildah bud of {case}"));
    let ctr = run_ok(
        buildah(w).args(["from", "--pull-never", "-q", &tag]),
        "buildah from",
    );
    let ctr = ctr.trim();
    let mnt = run_ok(buildah(w).args(["mount", ctr]), "buildah mount");
    // buildah leaves the mount points of its RUN steps in the image: empty hosts,
    // hostname and resolv.conf files and /run. docker's builder keeps them out (they are
    // its containers' init layer), and Wharf follows docker.
    let empty = "\t0:0\t0\t-\te3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let mount_point = |l: &str| {
        let path = l.split('\t').next().unwrap_or_default();
        (["etc/hostname", "etc/hosts", "etc/resolv.conf"].contains(&path) && l.contains(empty))
            || l == "run\td\t0755\t0:0\t-\t-\t-\t-\t-"
    };
    let tree = tree(Path::new(mnt.trim()))
        .into_iter()
        .filter(|l| !mount_point(l))
        .collect();
    run_ok(buildah(w).args(["rm", ctr]), "buildah rm");
    let inspect: Value = serde_json::from_str(&run_ok(
        buildah(w).args(["inspect", "--type", "image", &tag]),
        "buildah inspect",
    ))
    .unwrap();
    let docker = &inspect["Docker"];
    Result {
        tree,
        config: config_view(&docker["config"]),
        history: docker["history"].as_array().map_or(0, Vec::len),
    }
}

/// Lines of `a` not in `b`.
fn missing(a: &[String], b: &[String]) -> Vec<String> {
    let set: std::collections::BTreeSet<&String> = b.iter().collect();
    a.iter().filter(|l| !set.contains(l)).cloned().collect()
}

/// Build `case` both ways and compare.
fn check(case: &str) {
    let w = Wharf::new(&format!("corpus-{case}"));
    w.pull_busybox();
    let ctx = context(&w, case);
    let dir = case_dir(case);
    let url = serve(dir.clone());
    let ours = with_wharf(&w, case, &ctx, &url);
    if dir.join("expected").is_dir() {
        check_expected(&w, case, &dir.join("expected"));
    }
    if let Ok(why) = std::fs::read_to_string(dir.join("no-buildah")) {
        eprintln!("{case}: not compared with buildah: {}", why.trim());
        return;
    }
    if Command::new("buildah").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED the comparison of {case} with buildah: buildah is not installed \
             (scripts/test.sh installs it)"
        );
        return;
    }
    // Paths where buildah departs from docker's documented behaviour, which Wharf follows
    // (`PATH reason` per line): left out of the comparison, checked by expected/.
    let differs: Vec<String> = std::fs::read_to_string(dir.join("docker-differs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let compared = |t: &[String]| -> Vec<String> {
        t.iter()
            .filter(|l| {
                let path = l.split('\t').next().unwrap_or_default();
                !differs
                    .iter()
                    .any(|d| path == d || path.starts_with(&format!("{d}/")))
            })
            .cloned()
            .collect()
    };
    let theirs = with_buildah(&w, case, &ctx, &url);
    let (a, b) = (compared(&ours.tree), compared(&theirs.tree));
    let only_ours = missing(&a, &b);
    let only_theirs = missing(&b, &a);
    assert!(
        only_ours.is_empty() && only_theirs.is_empty(),
        "{case}: the trees differ\n  only in Wharf's:\n    {}\n  only in buildah's:\n    {}",
        only_ours.join("\n    "),
        only_theirs.join("\n    ")
    );
    let config = |c: &BTreeMap<&'static str, Value>| -> BTreeMap<&'static str, Value> {
        c.iter()
            .filter(|(k, _)| !differs.contains(&format!("config:{k}")))
            .map(|(k, v)| {
                let mut v = v.clone();
                if differs.contains(&format!("config:{k}-order"))
                    && let Some(a) = v.as_array_mut()
                {
                    a.sort_by_key(|x| x.to_string());
                }
                (*k, v)
            })
            .collect()
    };
    assert_eq!(
        config(&ours.config),
        config(&theirs.config),
        "{case}: the configs differ"
    );
    assert_eq!(
        ours.history, theirs.history,
        "{case}: the number of history entries differs"
    );
    let _ = buildah(&w).args(["rmi", "-a", "-f"]).output();
    let _ = std::fs::remove_dir_all(w.path("buildah"));
}

/// The files of `expected` hold what the same paths of the case's image hold.
fn check_expected(w: &Wharf, case: &str, expected: &Path) {
    let tag = format!("corpus/{case}:wharf");
    let mnt = w.ok(&["image", "mount", &tag]);
    let root = PathBuf::from(mnt.trim());
    let files = walk(expected);
    for f in &files {
        let rel = f.strip_prefix(expected).unwrap();
        let want = std::fs::read(f).unwrap();
        let got = std::fs::read(root.join(rel))
            .unwrap_or_else(|e| panic!("{case}: /{} in the image: {e}", rel.display()));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{case}: /{}",
            rel.display()
        );
    }
    w.ok(&["image", "unmount", &tag]);
    assert!(!files.is_empty(), "{case}: expected/ is empty");
}

/// Regular files below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Every blob of the image's `wharf save` archive, decompressed where it is gzip.
fn saved_blobs(w: &Wharf, image: &str) -> Vec<Vec<u8>> {
    let dir = w.path("saved");
    std::fs::create_dir_all(&dir).unwrap();
    let tar = dir.join("image.tar");
    w.ok(&["save", "-o", tar.to_str().unwrap(), image]);
    run_ok(
        Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&dir),
        "untar the saved image",
    );
    let mut out = Vec::new();
    for f in walk(&dir) {
        if f == tar {
            continue;
        }
        let raw = std::fs::read(&f).unwrap();
        let mut plain = Vec::new();
        if flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut plain)
            .is_ok()
        {
            out.push(plain);
        } else {
            out.push(raw);
        }
    }
    out
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*
    };
}

cases!(
    config,
    run,
    copy,
    add,
    multistage,
    target,
    onbuild,
    scratch,
    escape,
    run_mount,
    heredocs,
    link,
    platform_args,
    ignore,
    semantics,
    workdir_user,
    copy_edge,
);

/// A corpus kept outside the repository, laid out as this one (`WHARF_BUILD_CORPUS=DIR`:
/// every directory in it is a case), is built and compared the same way, case by case,
/// all failures reported together. Without the variable there is nothing to run.
#[test]
fn every_case_of_an_outside_corpus() {
    let Some(dir) = std::env::var_os("WHARF_BUILD_CORPUS") else {
        eprintln!("WHARF_BUILD_CORPUS is not set: no outside corpus to build");
        return;
    };
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("WHARF_BUILD_CORPUS {}: {e}", Path::new(&dir).display()))
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "WHARF_BUILD_CORPUS holds no case");
    let mut failed = Vec::new();
    for case in &cases {
        let c = case.clone();
        if let Err(e) = std::panic::catch_unwind(move || check(&c)) {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{case}: {why}"));
        }
    }
    eprintln!(
        "outside corpus: {} passed, {} failed",
        cases.len() - failed.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// Every case directory has its test above.
#[test]
fn every_case_is_listed() {
    let src = include_str!("build_corpus.rs");
    let listed = src
        .split("cases!(")
        .nth(1)
        .map(|s| s.split(')').next().unwrap_or("").to_string())
        .unwrap_or_default();
    for e in std::fs::read_dir(corpus()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            listed.split(',').any(|c| c.trim() == name),
            "the corpus case {name} has no test in build_corpus.rs"
        );
    }
}

/// The secret given with `--secret` reached the RUN that mounts it and is in no layer, no
/// config and no history entry of the image.
#[test]
fn a_secret_is_in_no_layer_and_no_history() {
    let w = Wharf::new("corpus-secret");
    w.pull_busybox();
    let ctx = context(&w, "run_mount");
    let url = serve(corpus().join("run_mount"));
    with_wharf(&w, "run_mount", &ctx, &url);
    let tag = "corpus/run_mount:wharf";
    let mnt = w.ok(&["image", "mount", tag]);
    let len = std::fs::read_to_string(Path::new(mnt.trim()).join("secret-len")).unwrap();
    w.ok(&["image", "unmount", tag]);
    assert_eq!(len.trim(), "12", "the RUN saw the secret");
    let secret = b"s3cr3t-value";
    for blob in saved_blobs(&w, tag) {
        assert!(
            !blob.windows(secret.len()).any(|x| x == secret),
            "the secret is in a blob of the image"
        );
    }
    let history = w.ok(&["history", "--no-trunc", tag]);
    assert!(!history.contains("s3cr3t"), "{history}");
}
