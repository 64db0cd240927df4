//! Files a container controls, read by the engine on the host: the user database
//! (`/etc/passwd`, `/etc/group`) of images built in the test with a FIFO, a character
//! device (a `/dev/zero` node), a symlink to a host file, or a file past the bound there,
//! and the same traps planted by a running container (with a 1 GiB sparse file). Each goes
//! through every front end that reads it (run, create, exec -u, top, play, the CRI's
//! CreateContainer, system restore): each ends within seconds with a clear error or a
//! correct result, reads no host file, and the engine's peak RSS stays bounded, measured
//! in a memory cgroup the commands run in.

mod cri_support;
mod engine_support;

use std::time::{Duration, Instant};

use cri_support::{Daemon, connect, image};
use engine_support::{Cage, Out, Wharf, busybox};
use wharf_cri::api::runtime_service_client::RuntimeServiceClient;
use wharf_cri::api::*;

/// The most any command may take here.
const QUICK: Duration = Duration::from_secs(10);
/// The peak RSS a command may reach (the CLI idles at about 10 MB).
const RSS_BOUND: u64 = 64 << 20;
/// The cage's hard limit: a command that would eat the host is killed at it.
const CAGE_LIMIT: u64 = 512 << 20;

/// What a host file says, should the engine ever read it through a container's link: uid 0
/// named `hostleak`.
const HOST_PASSWD: &str = "hostleak:x:0:0::/:/bin/sh\nhostonly:x:4242:4242::/:/bin/sh\n";

/// The traps, as shell commands a container runs on FILE.
fn traps(host_file: &str) -> Vec<(&'static str, String)> {
    vec![
        ("fifo", "rm -f FILE && mkfifo FILE".into()),
        ("chardev", "rm -f FILE && mknod FILE c 1 5".into()),
        ("hostlink", format!("rm -f FILE && ln -s {host_file} FILE")),
        // Over the 4 MiB bound (an image of a 1 GiB file would not unpack at all: the
        // engine's expansion limit stops it first).
        (
            "large",
            "dd if=/dev/zero of=FILE bs=1M count=5 2>/dev/null".into(),
        ),
    ]
}

/// A caged `wharf` command: its output, checked to have ended quickly and stayed small.
fn caged(w: &Wharf, cage: &Cage, args: &[&str]) -> Out {
    let t = Instant::now();
    let (out, rss) = cage.run(w.cmd(args));
    assert!(
        t.elapsed() < QUICK,
        "{args:?} took {:?}: {out:?}",
        t.elapsed()
    );
    assert!(
        rss < RSS_BOUND,
        "{args:?} reached {} MB of RSS: {out:?}",
        rss >> 20
    );
    assert!(
        !out.stdout.contains("hostleak") && !out.stderr.contains("hostleak"),
        "{args:?} read the host's file: {out:?}"
    );
    out
}

/// An image whose `file` was made a trap by `script`.
fn hostile_image(w: &Wharf, kind: &str, file: &str, script: &str) -> String {
    let tag = format!("hostile-{kind}-{}:1", file.rsplit('/').next().unwrap());
    let maker = format!("mk-{kind}");
    w.ok(&["run", "-d", "--name", &maker, &busybox(), "sleep", "1000"]);
    w.ok(&["exec", &maker, "sh", "-c", &script.replace("FILE", file)]);
    w.ok(&["commit", &maker, &tag]);
    w.ok(&["rm", "-f", &maker]);
    tag
}

/// The error of a refused read names the file and what it is.
fn assert_names_trap(out: &Out, file: &str, kind: &str, what: &str) {
    let expect = match kind {
        "fifo" => "is a FIFO",
        "chardev" => "is a character device",
        "large" => "is too large",
        _ => unreachable!(),
    };
    assert_ne!(out.code, 0, "{what} {kind} {file}: {out:?}");
    assert!(
        out.stderr.contains(file) && out.stderr.contains(expect),
        "{what} {kind} {file}: {out:?}"
    );
}

#[test]
fn hostile_user_databases_in_images_are_refused_by_run_create_and_play() {
    let cage = Cage::new("hostile-images", CAGE_LIMIT);
    let w = Wharf::new("hostile-images");
    w.pull_busybox();
    let host_file = w.path("host-passwd");
    std::fs::write(&host_file, HOST_PASSWD).unwrap();
    for file in ["/etc/passwd", "/etc/group"] {
        for (kind, script) in traps(host_file.to_str().unwrap()) {
            let img = hostile_image(&w, kind, file, &script);
            let run = caged(&w, &cage, &["run", "--rm", "-u", "0", &img, "true"]);
            let create = caged(&w, &cage, &["create", &img, "true"]);
            let manifest = w.path("pod.yaml");
            std::fs::write(
                &manifest,
                format!(
                    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trap\nspec:\n  containers:\n  \
                     - name: app\n    image: {img}\n    imagePullPolicy: Never\n    command: [\"true\"]\n"
                ),
            )
            .unwrap();
            let m = manifest.to_str().unwrap();
            let play = caged(&w, &cage, &["play", "--network", "none", m]);
            if kind == "hostlink" {
                // The link names a path inside the image, where nothing is: uid 0 runs,
                // a name only the host's file has is unknown.
                assert_eq!(run.code, 0, "{file}: {run:?}");
                assert_eq!(create.code, 0, "{file}: {create:?}");
                w.ok(&["rm", "-f", create.stdout.trim()]);
                assert_eq!(play.code, 0, "{file}: {play:?}");
                caged(&w, &cage, &["play", "--down", m]);
                if file == "/etc/passwd" {
                    let out = caged(&w, &cage, &["run", "--rm", "-u", "hostonly", &img, "id"]);
                    assert_ne!(out.code, 0, "{out:?}");
                    assert!(out.stderr.contains("not found"), "{out:?}");
                }
            } else {
                assert_names_trap(&run, file, kind, "run");
                assert_names_trap(&create, file, kind, "create");
                assert_names_trap(&play, file, kind, "play");
            }
            assert_eq!(
                w.ok(&["ps", "-a", "-q"]),
                "",
                "{kind} {file}: a container was left"
            );
            assert_eq!(
                w.ok(&["pod", "ls", "-q"]),
                "",
                "{kind} {file}: a pod was left"
            );
        }
    }
    w.assert_clean();
}

/// What a running container (default capabilities) can do to its own user database.
fn plant(w: &Wharf, container: &str, kind: &str, host_file: &str) {
    let script = match kind {
        "sparse" => "rm -f /etc/passwd && dd if=/dev/zero of=/etc/passwd bs=1 count=1 seek=1073741823 2>/dev/null".to_string(),
        _ => traps(host_file)
            .into_iter()
            .find(|(k, _)| *k == kind)
            .unwrap()
            .1
            .replace("FILE", "/etc/passwd"),
    };
    w.ok(&["exec", container, "sh", "-c", &script]);
}

#[test]
fn traps_planted_by_a_running_container_stop_neither_exec_nor_top_nor_restore() {
    let cage = Cage::new("hostile-planted", CAGE_LIMIT);
    let w = Wharf::new("hostile-planted");
    w.pull_busybox();
    let host_file = w.path("host-passwd");
    std::fs::write(&host_file, HOST_PASSWD).unwrap();
    let host = host_file.to_str().unwrap();
    for kind in ["fifo", "chardev", "hostlink", "sparse"] {
        let name = format!("c-{kind}");
        w.ok(&[
            "run",
            "-d",
            "--name",
            &name,
            "--restart",
            "always",
            &busybox(),
            "sleep",
            "1000",
        ]);
        plant(&w, &name, kind, host);
        let exec = caged(&w, &cage, &["exec", "-u", "0", &name, "id", "-u"]);
        let top = caged(&w, &cage, &["top", &name]);
        // top shows the processes, their uid as a number where the name is not to be had.
        assert_eq!(top.code, 0, "{kind}: {top:?}");
        assert!(top.stdout.contains("sleep 1000"), "{kind}: {top:?}");
        if kind == "hostlink" {
            assert_eq!((exec.code, exec.stdout.trim()), (0, "0"), "{exec:?}");
            let out = caged(&w, &cage, &["exec", "-u", "hostonly", &name, "id"]);
            assert_ne!(out.code, 0, "{out:?}");
        } else {
            assert_eq!(exec.code, 126, "{kind}: {exec:?}");
            assert!(exec.stderr.contains("/etc/passwd"), "{kind}: {exec:?}");
        }
    }
    // A reboot, as far as Wharf can tell: every process gone, the run directory empty.
    let containers: Vec<i32> = ["fifo", "chardev", "hostlink", "sparse"]
        .iter()
        .flat_map(|kind| w.pids(&format!("c-{kind}")))
        .collect();
    for (pid, _) in w.own_processes() {
        // SAFETY: kill(2) of this test's shims.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    for pid in containers {
        // SAFETY: kill(2) of this test's containers.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(engine_support::wait_until(QUICK, || w
        .own_processes()
        .is_empty()));
    wharf_testbed::unmount_below(&w.run_dir());
    wharf_testbed::unmount_below(&w.root());
    std::fs::remove_dir_all(w.run_dir()).unwrap();
    let restore = caged(&w, &cage, &["system", "restore"]);
    // The container whose link names nothing comes back; each trap is named.
    let ps = w.ok(&["ps", "--format", "{{.Names}}"]);
    assert!(ps.contains("c-hostlink"), "{ps}\n{restore:?}");
    for kind in ["fifo", "chardev", "sparse"] {
        assert!(!ps.contains(&format!("c-{kind}")), "{ps}");
        assert!(
            restore.stderr.contains(&format!("c-{kind}")),
            "{kind}: {restore:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cri_refuses_an_image_whose_user_database_is_a_trap() {
    let cage = Cage::new("hostile-cri", CAGE_LIMIT);
    let d = Daemon::start("hostile-cri");
    cage.adopt(d.child.id());
    let w = &d.w;
    w.pull_busybox();
    let host_file = w.path("host-passwd");
    std::fs::write(&host_file, HOST_PASSWD).unwrap();
    let mut rt = RuntimeServiceClient::new(connect(&d.socket).await);
    let sandbox = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "trap".into(),
            uid: "uid-trap".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: w.path("logs").display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/kubepods/podtrap", w.env.cgroup_parent),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let idle = peak_rss(d.child.id());
    for (kind, script) in traps(host_file.to_str().unwrap()) {
        if kind == "hostlink" {
            continue;
        }
        let img = hostile_image(w, kind, "/etc/passwd", &script);
        let t = Instant::now();
        let err = rt
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(ContainerConfig {
                    metadata: Some(ContainerMetadata {
                        name: format!("app-{kind}"),
                        attempt: 0,
                    }),
                    image: image(&img),
                    command: vec!["true".into()],
                    log_path: format!("app-{kind}.log"),
                    ..Default::default()
                }),
                sandbox_config: Some(sandbox.clone()),
            })
            .await
            .expect_err(kind);
        assert!(t.elapsed() < QUICK, "{kind}: {:?}", t.elapsed());
        assert!(
            err.message().contains("/etc/passwd"),
            "{kind}: {}",
            err.message()
        );
    }
    // The daemon lives, answers, and grew by little.
    let v = rt.version(VersionRequest::default()).await.unwrap();
    assert_eq!(v.into_inner().runtime_name, "wharf");
    let peak = peak_rss(d.child.id());
    assert!(
        peak < idle + RSS_BOUND,
        "the daemon's peak RSS went from {idle} to {peak} bytes"
    );
}

/// A live process's peak RSS (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// A gzip'd tar of `members` (name, size of zeros), written as it is made.
fn zero_archive(path: &std::path::Path, members: &[(&str, u64)]) {
    let f = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    for (name, size) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(*size);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, std::io::Read::take(std::io::repeat(0), *size))
            .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

#[test]
fn a_small_archive_of_large_members_loads_in_bounded_memory_and_one_without_images_fails() {
    let cage = Cage::new("hostile-load", CAGE_LIMIT);
    let w = Wharf::new("hostile-load");
    // The report's archive, smaller: 32 zero-filled members of 16 MiB beside an empty
    // manifest.json (its loader held each in memory: 512 MiB here).
    let names: Vec<String> = (0..32).map(|i| format!("m{i}")).collect();
    let mut members: Vec<(&str, u64)> = vec![("manifest.json", 0)];
    members.extend(names.iter().map(|n| (n.as_str(), 16u64 << 20)));
    let bomb = w.path("bomb.tar.gz");
    zero_archive(&bomb, &members);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 4 << 20);
    let t = Instant::now();
    let (out, rss) = cage.run(w.cmd(&["load", "-i", bomb.to_str().unwrap()]));
    assert!(
        rss < RSS_BOUND,
        "load reached {} MB of RSS: {out:?}",
        rss >> 20
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("bomb.tar.gz") && out.stderr.contains("manifest.json"),
        "{out:?}"
    );
    // A well-formed archive that lists no image is an error naming it, not silence.
    let empty = w.path("empty.tar");
    {
        let mut tar = tar::Builder::new(std::fs::File::create(&empty).unwrap());
        let mut h = tar::Header::new_gnu();
        h.set_size(2);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, "manifest.json", &b"[]"[..])
            .unwrap();
        tar.finish().unwrap();
    }
    let out = w.run(&["load", "-i", empty.to_str().unwrap()]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("empty.tar") && out.stderr.contains("holds no image"),
        "{out:?}"
    );
    assert_eq!(w.ok(&["images", "-q"]), "");
}

#[test]
fn a_container_that_fills_its_name_files_gets_enospc_and_nothing_else_does() {
    let cage = Cage::new("hostile-fill", CAGE_LIMIT);
    let w = Wharf::new("hostile-fill");
    w.pull_busybox();
    w.ok(&["network", "create", "appnet"]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "filler",
        "--network",
        "appnet",
        "--cap-drop",
        "ALL",
        &busybox(),
        "sleep",
        "1000",
    ]);
    // Without any capability it may still write its own hosts file: up to its pod's bound.
    let out = w.run(&[
        "exec",
        "filler",
        "sh",
        "-c",
        "dd if=/dev/zero of=/etc/hosts bs=64k count=1000; \
         dd if=/dev/zero of=/etc/resolv.conf bs=64k count=1000; wc -c /etc/hosts",
    ]);
    assert!(out.stderr.contains("No space left"), "{out:?}");
    let size: u64 = out
        .stdout
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(size <= 1 << 20, "{size}");
    // The engine still makes pods (its run directory is not full), rewrites the filler's
    // hosts file for a newcomer (a bounded read), and stays small doing it.
    caged(
        &w,
        &cage,
        &[
            "run",
            "-d",
            "--name",
            "newcomer",
            "--network",
            "appnet",
            &busybox(),
            "sleep",
            "1000",
        ],
    );
    let hosts = w.ok(&["exec", "newcomer", "cat", "/etc/hosts"]);
    assert!(hosts.contains("filler"), "{hosts}");
    // The filler's own file keeps what it wrote (there is no room for more).
    let size = w.ok(&["exec", "filler", "wc", "-c", "/etc/hosts"]);
    assert!(
        size.split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            <= 1 << 20
    );
    caged(&w, &cage, &["rm", "-f", "filler", "newcomer"]);
    w.ok(&["network", "rm", "appnet"]);
    w.assert_clean();
}
