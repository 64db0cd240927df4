//! `wharf run --rm IMAGE true` against `ctr run --rm` (containerd + runc) and
//! `podman run --rm` (with runc and with crun), interleaved round-robin in the same run so
//! machine noise hits all alike; prints medians and ratios.
//!
//! Every engine gets private state under a work directory: its persistent root on disk and
//! its runtime state on a tmpfs mounted there (where hosts keep /run), container cgroups below a parent the benchmark makes and removes, and the image
//! pulled beforehand from the fixture registry (`WHARF_BENCH_IMAGE`, default
//! 127.0.0.1:35000/fixtures/busybox:latest; start it with scripts/test.d/20-images.sh).
//! After the pulls the benchmark moves into a network namespace of its own, so the
//! networks Wharf and podman set up (bridges, rules, forwarding) exist only there.
//!
//! What each engine does per run, as a user gets it by default:
//! - `wharf run --rm`: a pod sandbox with the built-in bridge network (veth, address,
//!   masquerade), a per-pod shim, the container; `wharf --network none` is measured too;
//! - `ctr run --rm`: containerd's shim and runc; ctr sets up no network (only lo in a new
//!   namespace), so compare it with `wharf --network none` as well;
//! - `podman run --rm`: conmon and the OCI runtime, with podman's CNI bridge network.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin run_rm -- [ITERATIONS]`
//! (env WHARF_BIN selects the wharf binary; default: target/release/wharf next to this one).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wharf_bench::{
    have, hidden_unified_namespace, hybrid_with_controllers, median, ms, remove_cgroup_tree,
    run_ok, start_containerd, unmount_below,
};

struct Engine {
    name: &'static str,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// Mount namespace to run in (podman with crun on hybrid hosts).
    mount_ns: Option<std::fs::File>,
    /// Appends a fresh container name to the command (ctr needs one).
    needs_id: bool,
    samples: Vec<Duration>,
}

impl Engine {
    fn command(&self, id: &str) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        if self.needs_id {
            cmd.arg(id).arg("true");
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        if let Some(ns) = &self.mount_ns {
            let fd = ns.as_raw_fd();
            wharf_bench::in_mount_ns(&mut cmd, fd);
        }
        cmd
    }

    fn once(&self, id: &str) -> Result<Duration, String> {
        let mut cmd = self.command(id);
        let t = Instant::now();
        let out = cmd
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("{}: {e}", self.argv[0]))?;
        let d = t.elapsed();
        if !out.status.success() {
            return Err(format!(
                "{} failed ({}): {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(d)
    }
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let image = std::env::var("WHARF_BENCH_IMAGE")
        .unwrap_or_else(|_| "127.0.0.1:35000/fixtures/busybox:latest".into());
    let pid = std::process::id();
    let work = PathBuf::from(format!("/var/tmp/wharf-bench-run-{pid}"));
    std::fs::create_dir_all(&work).unwrap();
    let cgroup_parent = format!("/wharf-bench-{pid}");
    // Runtime state goes where hosts keep it, on a tmpfs (/run), for every engine alike.
    let run_fs = work.join("run");
    std::fs::create_dir_all(&run_fs).unwrap();
    run_ok(
        Command::new("mount")
            .args(["-t", "tmpfs", "wharf-bench-run"])
            .arg(&run_fs),
        "mount the runtime tmpfs",
    );
    let wharf = wharf_bench::wharf_bin();
    let s = |p: &Path| p.display().to_string();

    // wharf: private root and run dirs, no CNI configuration (its default is then the
    // built-in bridge network, as on a machine without CNI).
    let wharf_env = wharf_bench::private_wharf(&work, &run_fs, &cgroup_parent, &image);
    let mut engines = vec![
        Engine {
            name: "wharf",
            argv: vec![
                s(&wharf),
                "run".into(),
                "--rm".into(),
                image.clone(),
                "true".into(),
            ],
            env: wharf_env.clone(),
            mount_ns: None,
            needs_id: false,
            samples: Vec::new(),
        },
        Engine {
            name: "wharf --network none",
            argv: vec![
                s(&wharf),
                "run".into(),
                "--rm".into(),
                "--network".into(),
                "none".into(),
                image.clone(),
                "true".into(),
            ],
            env: wharf_env.clone(),
            mount_ns: None,
            needs_id: false,
            samples: Vec::new(),
        },
    ];
    // Where systemd booted the host, Wharf's default driver there too: each pod a scope
    // made over D-Bus, in a slice of the benchmark's.
    let slice = format!("wharf-bench{pid}.slice");
    if wharf_systemd::booted() {
        let mut env = wharf_env.clone();
        env.retain(|(k, _)| k != "WHARF_CGROUP_MANAGER" && k != "WHARF_CGROUP_PARENT");
        env.push(("WHARF_CGROUP_MANAGER".into(), "systemd".into()));
        env.push(("WHARF_CGROUP_PARENT".into(), slice.clone()));
        // The same command as "wharf --network none", in the other driver's places.
        let argv = engines[1].argv.clone();
        engines.push(Engine {
            name: "wharf --network none, systemd driver",
            argv,
            env,
            mount_ns: None,
            needs_id: false,
            samples: Vec::new(),
        });
    }

    let mut containerd = None;
    // Containers' cgroups are /<namespace>/<id>: the namespace is our cgroup parent.
    let ctr_ns = cgroup_parent.trim_start_matches('/').to_string();
    if have("containerd") && have("ctr") && have("runc") {
        let (child, sock) = start_containerd(&work.join("containerd"), &run_fs.join("containerd"));
        containerd = Some(child);
        let ctr = |args: &[&str]| {
            let mut c = Command::new("ctr");
            c.arg("--address")
                .arg(&sock)
                .arg("--namespace")
                .arg(&ctr_ns)
                .args(args);
            c
        };
        match std::env::var("WHARF_BENCH_IMAGE_ARCHIVE") {
            Ok(archive) => run_ok(
                &mut ctr(&["images", "import", "--all-platforms", &archive]),
                "ctr import",
            ),
            Err(_) => run_ok(
                &mut ctr(&["images", "pull", "--plain-http", &image]),
                "ctr pull",
            ),
        };
        engines.push(Engine {
            name: "ctr (containerd+runc)",
            argv: vec![
                "ctr".into(),
                "--address".into(),
                s(&sock),
                "--namespace".into(),
                ctr_ns.clone(),
                "run".into(),
                "--rm".into(),
                image.clone(),
            ],
            env: Vec::new(),
            mount_ns: None,
            needs_id: true,
            samples: Vec::new(),
        });
    } else {
        eprintln!("containerd, ctr or runc missing: ctr skipped");
    }

    let mut hider = None;
    if have("podman") {
        let podman = |runtime: &str| wharf_bench::private_podman(&work, &run_fs, runtime).0;
        let podman_env = wharf_bench::private_podman(&work, &run_fs, "runc").1;
        let mut pull = podman("runc");
        pull.extend([
            "pull".into(),
            "-q".into(),
            "--tls-verify=false".into(),
            image.clone(),
        ]);
        run_ok(
            Command::new(&pull[0])
                .args(&pull[1..])
                .envs(podman_env.iter().map(|(k, v)| (k, v))),
            "podman pull",
        );
        for runtime in ["runc", "crun"] {
            if !have(runtime) {
                eprintln!("{runtime} missing: podman with {runtime} skipped");
                continue;
            }
            let mount_ns = if runtime == "crun" && hybrid_with_controllers() {
                let (child, ns) = hidden_unified_namespace();
                hider = Some(child);
                Some(ns)
            } else {
                None
            };
            let mut argv = podman(runtime);
            argv.extend([
                "run".into(),
                "--rm".into(),
                "--pull".into(),
                "never".into(),
                "--cgroup-parent".into(),
                format!("{cgroup_parent}/podman"),
                image.clone(),
                "true".into(),
            ]);
            engines.push(Engine {
                name: if runtime == "runc" {
                    "podman (runc)"
                } else {
                    "podman (crun)"
                },
                argv,
                env: podman_env.clone(),
                mount_ns,
                needs_id: false,
                samples: Vec::new(),
            });
        }
    } else {
        eprintln!("podman missing: skipped");
    }

    // From here on, networks are made in a namespace of our own (single-threaded: the
    // whole process moves, and the engines we start inherit it).
    // SAFETY: unshare of the calling (only) thread.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(unshared, 0, "unshare(CLONE_NEWNET)");
    run_ok(
        Command::new("ip").args(["link", "set", "lo", "up"]),
        "lo up",
    );

    // Measure, then clean up whatever happened; report a failure only after that.
    let outcome = measure(&mut engines, iterations, pid);
    if outcome.is_ok() {
        report(&image, iterations, &mut engines);
    }

    if let Some(mut c) = containerd {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir_all(PathBuf::from("/run/containerd/runc").join(&ctr_ns));
    if let Some(mut c) = hider {
        let _ = c.kill();
        let _ = c.wait();
    }
    unmount_below(&work);
    let _ = std::fs::remove_dir_all(&work);
    remove_cgroup_tree(&cgroup_parent);
    if wharf_systemd::booted() {
        let _ = Command::new("systemctl").args(["stop", &slice]).status();
    }
    if let Err(err) = outcome {
        eprintln!("run_rm: {err}");
        std::process::exit(1);
    }
}

/// One warm-up run per engine, then `iterations` rounds in which each engine runs once.
fn measure(engines: &mut [Engine], iterations: usize, pid: u32) -> Result<(), String> {
    for e in engines.iter() {
        e.once(&format!("warmup-{pid}"))?;
    }
    for i in 0..iterations {
        for e in engines.iter_mut() {
            let d = e.once(&format!("c{i}-{pid}"))?;
            e.samples.push(d);
        }
    }
    Ok(())
}

/// Medians per engine and each Wharf variant's ratio to every other engine.
fn report(image: &str, iterations: usize, engines: &mut [Engine]) {
    println!("{image} true, run and removed, {iterations} iterations each, medians:");
    let mut medians = Vec::new();
    for e in engines.iter_mut() {
        let m = median(&mut e.samples);
        medians.push((e.name, m));
        println!("  {:<24} {}", e.name, ms(m));
    }
    let find = |n: &str| medians.iter().find(|(name, _)| *name == n).map(|(_, m)| *m);
    for wharf_name in [
        "wharf",
        "wharf --network none",
        "wharf --network none, systemd driver",
    ] {
        let Some(w) = find(wharf_name) else { continue };
        for (name, m) in &medians {
            if !name.starts_with("wharf") {
                println!(
                    "  {wharf_name} / {name} = {:.2}",
                    w.as_secs_f64() / m.as_secs_f64()
                );
            }
        }
    }
}
