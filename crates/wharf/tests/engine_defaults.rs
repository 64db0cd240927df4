//! What a container gets without asking, as docker and podman users expect: the default
//! capability set, a seccomp filter, masked and read-only /proc paths, a /dev/shm of its pod,
//! the image's Entrypoint/Cmd/WorkingDir/Env; and an oom_score_adj this host cannot give
//! clamped rather than failing. Each test has its own state, cgroup parent and no network.

use std::path::Path;
use std::process::{Command, Output};

use wharf_testbed::Env;

mod image_support;

/// A wharf CLI whose state, runtime directory and cgroups are the test's own.
struct Cli {
    env: Env,
}

impl Cli {
    fn new(name: &str) -> Cli {
        wharf_testbed::require_root();
        let env = Env::new(name);
        std::fs::create_dir_all(env.path().join("no-cni")).unwrap();
        Cli { env }
    }

    fn wharf(&self, args: &[&str]) -> Output {
        let p = self.env.path();
        Command::new(env!("CARGO_BIN_EXE_wharf"))
            .args(args)
            .env("WHARF_ROOT", p.join("root"))
            .env("WHARF_RUN", p.join("run"))
            .env("WHARF_CGROUP_PARENT", &self.env.cgroup_parent)
            .env("WHARF_CNI_CONF_DIR", p.join("no-cni"))
            .env_remove("WHARF_NET_HOST_NS")
            .output()
            .expect("run wharf")
    }

    /// `wharf run --rm --network none IMAGE ARGS...`: its stdout, or a panic with stderr.
    fn run(&self, flags: &[&str], image: &str, args: &[&str]) -> String {
        let mut all = vec!["run", "--rm", "--network", "none"];
        all.extend_from_slice(flags);
        all.push(image);
        all.extend_from_slice(args);
        let out = self.wharf(&all);
        assert!(
            out.status.success(),
            "wharf {all:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// After `--rm` runs nothing of the engine is left: no container, no pod, no mount
    /// below the test's directory, no cgroup below its parent.
    fn assert_nothing_left(&self) {
        let ps = self.wharf(&["ps", "-a", "-q"]);
        assert!(ps.status.success());
        assert!(ps.stdout.is_empty(), "containers left: {ps:?}");
        let pods = self.wharf(&["pod", "ls", "-q"]);
        assert!(pods.stdout.is_empty(), "pods left: {pods:?}");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let dir = self.env.path().to_str().unwrap();
        // The netns directory is bind-mounted onto itself once (shared, as `ip netns` does
        // with /run/netns) and stays; pods' namespaces pinned in it must not.
        let netns_dir = format!("{dir}/run/netns");
        let left: Vec<&str> = mounts
            .lines()
            .filter(|l| l.contains(dir) && l.split(' ').nth(4) != Some(netns_dir.as_str()))
            .filter(|l| {
                let point = l.split(' ').nth(4).unwrap_or_default();
                !wharf_testbed::is_kept_mount(Path::new(point))
            })
            .collect();
        assert!(left.is_empty(), "mounts left: {left:#?}");
        for d in self.env.cgroup_dirs() {
            let children: Vec<_> = std::fs::read_dir(&d)
                .map(|r| {
                    r.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path())
                        .collect()
                })
                .unwrap_or_default();
            assert!(children.is_empty(), "cgroups left: {children:?}");
        }
    }
}

fn busybox() -> String {
    format!("{}/fixtures/busybox:latest", image_support::registry())
}

fn status_field(status: &str, name: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .trim()
        .to_string()
}

#[test]
fn containers_get_docker_like_defaults() {
    let cli = Cli::new("defaults");
    let status = cli.run(&[], &busybox(), &["cat", "/proc/self/status"]);
    // docker's and containerd's default capability set, in every set but the ambient one.
    assert_eq!(status_field(&status, "CapEff"), "00000000a80425fb");
    assert_eq!(status_field(&status, "CapBnd"), "00000000a80425fb");
    assert_eq!(status_field(&status, "CapAmb"), "0000000000000000");
    // The default seccomp profile is a filter.
    assert_eq!(status_field(&status, "Seccomp"), "2");

    // Masked paths read empty (those the host has); /proc/sys is read-only.
    let masked: Vec<&str> = [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/sched_debug",
    ]
    .into_iter()
    .filter(|p| Path::new(p).exists())
    .collect();
    assert!(!masked.is_empty(), "the host has none of the masked paths");
    for p in &masked {
        let out = cli.run(&[], &busybox(), &["sh", "-c", &format!("wc -c < {p}")]);
        assert_eq!(out.trim(), "0", "{p} is not masked");
    }
    let out = cli.run(
        &[],
        &busybox(),
        &[
            "sh",
            "-c",
            "(echo 1 > /proc/sys/kernel/ns_last_pid) 2>&1; grep ' /dev/shm ' /proc/mounts",
        ],
    );
    assert!(out.contains("Read-only file system"), "{out}");
    // /dev/shm is the pod's own tmpfs.
    assert!(out.contains("shm /dev/shm tmpfs"), "{out}");
    cli.assert_nothing_left();
}

#[test]
fn the_images_entrypoint_cmd_workdir_and_env_are_honoured() {
    let cli = Cli::new("imagecfg");
    let image = format!("{}/fixtures/multilayer:latest", image_support::registry());
    // Entrypoint ["/bin/sh","-c"], Cmd ["cat /etc/fixture-release"], WorkingDir /data.
    let release = cli.run(&[], &image, &[]);
    assert!(
        !release.trim().is_empty(),
        "the image's Cmd printed nothing"
    );
    let pwd = cli.run(&[], &image, &["pwd; echo $PATH"]);
    let mut lines = pwd.lines();
    assert_eq!(lines.next(), Some("/data"));
    assert_eq!(
        lines.next(),
        Some("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    );
    // Flags win over the image.
    let out = cli.run(&["-w", "/tmp", "--entrypoint", "/bin/pwd"], &image, &[]);
    assert_eq!(out.trim(), "/tmp");
    cli.assert_nothing_left();
}

#[test]
fn oom_score_adj_is_applied_or_clamped_where_the_host_cannot_lower_it() {
    let cli = Cli::new("oomadj");
    let raised = cli.run(
        &["--oom-score-adj", "300"],
        &busybox(),
        &["cat", "/proc/self/oom_score_adj"],
    );
    assert_eq!(raised.trim(), "300");

    // What this host allows for -500 (the test runs with the CLI's privileges): -500
    // itself where CAP_SYS_RESOURCE is at hand, else our own value, with a warning.
    let allowed = wharf_engine::oom::effective(-500).unwrap();
    let out = cli.wharf(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--oom-score-adj",
        "-500",
        &busybox(),
        "cat",
        "/proc/self/oom_score_adj",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        allowed.value.to_string()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.contains("raised to"),
        allowed.clamped,
        "warning expected iff clamped: {stderr}"
    );

    // Out of range: refused before anything is made.
    let out = cli.wharf(&["run", "--rm", "--oom-score-adj", "1001", &busybox(), "true"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("out of range"),
        "{out:?}"
    );
    cli.assert_nothing_left();
}
