//! docker's own CLI through two Docker API sockets, side by side in one run: `wharf
//! daemon`'s and podman 4.3's API service (`podman system service`, runc, cgroupfs). For
//! each: `docker run --rm IMAGE true` (interleaved rounds), `docker ps` with 100 running
//! containers, docker compose `up -d` and `down` of crates/wharf/tests/compose/app.yaml
//! (when `WHARF_BENCH_COMPOSE` names a docker compose v2 binary), and the daemon's
//! resident memory while idle with the API on. Medians and Wharf's ratio to podman.
//!
//! Each engine has private state (a root on disk, runtime state on a tmpfs the benchmark
//! mounts) and the whole run happens in a network namespace of the benchmark's own. The
//! image comes from the fixture registry (`WHARF_BENCH_IMAGE`, default
//! 127.0.0.1:35000/fixtures/busybox:latest; start it with scripts/test.d/20-images.sh),
//! which must be reachable from that namespace: the benchmark pulls before it moves.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin docker_api -- [ITERATIONS]`
//! (env WHARF_BIN selects the wharf binary, DOCKER the docker CLI).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wharf_bench::{median, ms, remove_cgroup_tree, unmount_below};

/// One engine behind a Docker API socket.
struct Api {
    name: &'static str,
    socket: PathBuf,
    daemon: Child,
    run_rm: Vec<Duration>,
    ps: Vec<Duration>,
    up: Vec<Duration>,
    down: Vec<Duration>,
    idle_rss_kb: u64,
    /// A compose `up` did not finish within its time.
    compose_stuck: bool,
}

impl Api {
    fn new(name: &'static str, socket: PathBuf, daemon: Child) -> Api {
        Api {
            name,
            socket,
            daemon,
            run_rm: Vec::new(),
            ps: Vec::new(),
            up: Vec::new(),
            down: Vec::new(),
            idle_rss_kb: 0,
            compose_stuck: false,
        }
    }
}

fn docker_bin() -> String {
    std::env::var("DOCKER").unwrap_or_else(|_| "docker".into())
}

fn docker(api: &Api, args: &[&str]) -> Command {
    let mut c = Command::new(docker_bin());
    c.args(args)
        .env("DOCKER_HOST", format!("unix://{}", api.socket.display()))
        .env("DOCKER_CONFIG", "/nonexistent-wharf-bench")
        .stdin(Stdio::null());
    c
}

fn timed(cmd: &mut Command, what: &str) -> Result<Duration, String> {
    let t = Instant::now();
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    let d = t.elapsed();
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(d)
}

/// Like [`timed`], but given up (the command killed) after `limit`: None then.
fn timed_within(
    cmd: &mut Command,
    what: &str,
    limit: Duration,
) -> Result<Option<Duration>, String> {
    let t = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return if st.success() {
                Ok(Some(t.elapsed()))
            } else {
                Err(format!("{what} failed ({st})"))
            };
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_socket(api: &Api) -> Result<(), String> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        if docker(api, &["version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{}: the API never answered on {}",
        api.name,
        api.socket.display()
    ))
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let image = std::env::var("WHARF_BENCH_IMAGE")
        .unwrap_or_else(|_| "127.0.0.1:35000/fixtures/busybox:latest".into());
    let compose = std::env::var_os("WHARF_BENCH_COMPOSE").map(PathBuf::from);
    let pid = std::process::id();
    let work = PathBuf::from(format!("/var/tmp/wharf-bench-docker-{pid}"));
    let run_fs = work.join("run");
    std::fs::create_dir_all(&run_fs).unwrap();
    assert!(
        Command::new("mount")
            .args(["-t", "tmpfs", "wharf-bench-docker"])
            .arg(&run_fs)
            .status()
            .unwrap()
            .success(),
        "mount the runtime tmpfs"
    );
    let cgroup_parent = format!("/wharf-bench-docker-{pid}");
    // podman's API service puts its containers below /libpod_parent and its CNI leases
    // in /var/lib/cni: what it makes there that was not there before goes afterwards.
    let podman_cgroups = !Path::new("/sys/fs/cgroup/memory/libpod_parent").exists();
    let cni = Path::new("/var/lib/cni");
    let cni_before: Vec<PathBuf> = ["networks", "results"]
        .iter()
        .flat_map(|d| {
            std::fs::read_dir(cni.join(d))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .collect();
    let outcome = run(
        &work,
        &run_fs,
        &cgroup_parent,
        &image,
        iterations,
        compose.as_deref(),
    );
    unmount_below(&work);
    let _ = std::fs::remove_dir_all(&work);
    remove_cgroup_tree(&cgroup_parent);
    if podman_cgroups {
        remove_cgroup_tree("/libpod_parent");
    }
    for d in ["networks", "results"] {
        for e in std::fs::read_dir(cni.join(d))
            .into_iter()
            .flatten()
            .flatten()
        {
            if !cni_before.contains(&e.path()) {
                let _ =
                    std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
    }
    if let Err(e) = outcome {
        eprintln!("docker_api: {e}");
        std::process::exit(1);
    }
}

fn start_wharf(work: &Path, run_fs: &Path, cgroup_parent: &str) -> Api {
    let no_cni = work.join("no-cni");
    std::fs::create_dir_all(&no_cni).unwrap();
    let socket = run_fs.join("wharf/docker.sock");
    let daemon = Command::new(wharf_bench::wharf_bin())
        .args(["daemon", "--listen"])
        .arg(run_fs.join("wharf/wharf.sock"))
        .arg("--docker-listen")
        .arg(&socket)
        .env("WHARF_ROOT", work.join("wharf/root"))
        .env("WHARF_RUN", run_fs.join("wharf"))
        .env("WHARF_CGROUP_PARENT", format!("{cgroup_parent}/wharf"))
        .env("WHARF_CNI_CONF_DIR", &no_cni)
        .env("WHARF_CONFIG", work.join("wharf-config.json"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.join("wharf-daemon.log")).unwrap())
        .spawn()
        .expect("wharf daemon");
    Api::new("wharf", socket, daemon)
}

fn start_podman(work: &Path, run_fs: &Path) -> Api {
    let dir = work.join("podman");
    std::fs::create_dir_all(dir.join("cni")).unwrap();
    // podman raises RLIMIT_NOFILE and RLIMIT_NPROC, which these machines refuse; its
    // network configurations (compose's networks) stay in a directory of our own.
    let conf = dir.join("containers.conf");
    std::fs::write(
        &conf,
        format!(
            "[containers]\ndefault_ulimits = []\npids_limit = 0\n\
             [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\nruntime = \"runc\"\n\
             [network]\nnetwork_config_dir = \"{}\"\n",
            dir.join("cni").display()
        ),
    )
    .unwrap();
    let socket = run_fs.join("podman.sock");
    let daemon = Command::new("podman")
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--runroot")
        .arg(run_fs.join("pm"))
        .arg("--tmpdir")
        .arg(dir.join("tmp"))
        .args([
            "--cgroup-manager",
            "cgroupfs",
            "--runtime",
            "runc",
            "--events-backend",
            "file",
        ])
        .args(["system", "service", "--time=0"])
        .arg(format!("unix://{}", socket.display()))
        .env("CONTAINERS_CONF", &conf)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.join("podman-service.log")).unwrap())
        .spawn()
        .expect("podman system service");
    Api::new("podman", socket, daemon)
}

fn run(
    work: &Path,
    run_fs: &Path,
    cgroup_parent: &str,
    image: &str,
    iterations: usize,
    compose: Option<&Path>,
) -> Result<(), String> {
    // The image, pulled here (the registry is on the host's loopback) and saved, to be
    // loaded through each API from the namespace the engines run in.
    let tar = work.join("image.tar");
    let scratch = [
        ("WHARF_ROOT", work.join("pull/root")),
        ("WHARF_RUN", run_fs.join("pull")),
    ];
    timed(
        Command::new(wharf_bench::wharf_bin())
            .args(["pull", "-q", image])
            .envs(scratch.iter().map(|(k, v)| (k, v))),
        "wharf pull",
    )?;
    timed(
        Command::new(wharf_bench::wharf_bin())
            .args(["save", "-o"])
            .arg(&tar)
            .arg(image)
            .envs(scratch.iter().map(|(k, v)| (k, v))),
        "wharf save",
    )?;
    // Everything from here on in a network namespace of our own (the whole process
    // moves, single-threaded, and the daemons started next are born there): the engines'
    // bridges, rules and published ports exist only in it.
    // SAFETY: unshare of the calling (only) thread.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if unshared != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        ));
    }
    timed(
        Command::new("ip").args(["link", "set", "lo", "up"]),
        "lo up",
    )?;
    let mut apis = vec![start_wharf(work, run_fs, cgroup_parent)];
    if Command::new("podman").arg("--version").output().is_ok() {
        apis.push(start_podman(work, run_fs));
    } else {
        eprintln!("podman missing: skipped");
    }
    let result = (|| {
        for a in &apis {
            wait_for_socket(a)?;
            let t = tar.display().to_string();
            timed(
                &mut docker(a, &["load", "-q", "-i", &t]),
                &format!("{}: load", a.name),
            )?;
        }
        for a in apis.iter_mut() {
            timed(&mut docker(a, &["run", "--rm", image, "true"]), "warm-up")?;
        }
        for _ in 0..iterations {
            for a in apis.iter_mut() {
                let d = timed(&mut docker(a, &["run", "--rm", image, "true"]), a.name)?;
                a.run_rm.push(d);
            }
        }
        // docker ps with 100 running containers in each.
        for a in apis.iter_mut() {
            for i in 0..100 {
                timed(
                    &mut docker(
                        a,
                        &[
                            "run",
                            "-d",
                            "--name",
                            &format!("ps{i}"),
                            image,
                            "sleep",
                            "3600",
                        ],
                    ),
                    "run -d",
                )?;
            }
        }
        for _ in 0..iterations {
            for a in apis.iter_mut() {
                let d = timed(&mut docker(a, &["ps"]), "ps")?;
                a.ps.push(d);
            }
        }
        for a in apis.iter_mut() {
            let ids = docker(a, &["ps", "-aq"])
                .output()
                .map_err(|e| e.to_string())?;
            let ids: Vec<String> = String::from_utf8_lossy(&ids.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            for chunk in ids.chunks(20) {
                let mut args = vec!["rm", "-f"];
                args.extend(chunk.iter().map(String::as_str));
                timed(&mut docker(a, &args), "rm")?;
            }
        }
        if let Some(bin) = compose {
            let file = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../crates/wharf/tests/compose/app.yaml"
            );
            for _ in 0..iterations.clamp(1, 5) {
                for a in apis.iter_mut().filter(|a| !a.compose_stuck) {
                    let c = |args: &[&str]| {
                        let mut c = Command::new(bin);
                        c.args(["-f", file])
                            .args(args)
                            .env("DOCKER_HOST", format!("unix://{}", a.socket.display()))
                            .env("WHARF_TEST_IMAGE", image)
                            .stdin(Stdio::null());
                        c
                    };
                    // podman's health checks run from systemd timers: without systemd a
                    // service that waits for a healthy one never starts (FIELD-NOTES).
                    match timed_within(
                        &mut c(&["up", "-d"]),
                        "compose up",
                        Duration::from_secs(60),
                    )? {
                        Some(up) => a.up.push(up),
                        None => a.compose_stuck = true,
                    }
                    if let Some(down) = timed_within(
                        &mut c(&["down", "-v", "-t", "1"]),
                        "compose down",
                        Duration::from_secs(120),
                    )? && !a.compose_stuck
                    {
                        a.down.push(down);
                    }
                }
            }
        } else {
            eprintln!("WHARF_BENCH_COMPOSE not set: compose skipped");
        }
        // Idle: what the daemons hold once their work is done.
        std::thread::sleep(Duration::from_secs(5));
        for a in apis.iter_mut() {
            a.idle_rss_kb = rss_kb(a.daemon.id());
        }
        Ok(())
    })();
    if result.is_ok() {
        report(image, iterations, &mut apis);
    }
    // What the engines made: their containers, then the daemons.
    for a in apis.iter_mut() {
        if let Ok(out) = docker(a, &["ps", "-aq"]).output() {
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = docker(a, &["rm", "-f", id]).output();
            }
        }
        let _ = a.daemon.kill();
        let _ = a.daemon.wait();
    }
    result
}

fn report(image: &str, iterations: usize, apis: &mut [Api]) {
    println!("docker CLI through each Docker API socket, {image}, {iterations} rounds, medians:");
    println!(
        "  {:<8} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "engine", "run --rm", "ps (100)", "compose up", "compose down", "idle RSS"
    );
    let mut rows = Vec::new();
    for a in apis.iter_mut() {
        let m = |v: &mut Vec<Duration>| (!v.is_empty()).then(|| median(v));
        let row = (
            a.name,
            m(&mut a.run_rm),
            m(&mut a.ps),
            m(&mut a.up),
            m(&mut a.down),
            a.idle_rss_kb,
        );
        let stuck = a.compose_stuck;
        let f = |d: Option<Duration>| {
            d.map(ms).unwrap_or_else(|| {
                if stuck {
                    "no finish".into()
                } else {
                    "-".into()
                }
            })
        };
        println!(
            "  {:<8} {:>12} {:>12} {:>12} {:>12} {:>9} kB",
            row.0,
            f(row.1),
            f(row.2),
            f(row.3),
            f(row.4),
            row.5
        );
        rows.push(row);
    }
    if let [w, p] = rows.as_slice() {
        let r = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}", a.as_secs_f64() / b.as_secs_f64()),
            _ => "-".into(),
        };
        println!(
            "  wharf / podman: run --rm {}, ps {}, compose up {}, compose down {}",
            r(w.1, p.1),
            r(w.2, p.2),
            r(w.3, p.3),
            r(w.4, p.4)
        );
    }
}
