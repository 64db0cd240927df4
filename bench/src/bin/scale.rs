//! How a command's cost grows with the number of containers running: Wharf, podman (runc)
//! and containerd (ctr + runc), one engine after the other in one run. For each N of the
//! list (default 0,10,100,300,1000) the engine is brought to N detached containers
//! (`run -d --network none IMAGE sleep`; the time of the last 10 starts is kept), then each
//! command is timed `REPS` times (default 20), interleaved: `run --rm --network none IMAGE
//! true`, the listing (`ps`, `podman ps`, `ctr task ls`), `pod ls` (Wharf, `podman pod
//! ps`), `exec C true` and `inspect C` (`ctr container info`). Medians are printed as a
//! table per engine, and drawn as one plot per command (latency against N, one line per
//! engine): SVG written by hand, converted to PNG with Debian's `rsvg-convert`
//! (librsvg2-bin) when it is installed, under `WHARF_BENCH_OUT` (default
//! /var/tmp/wharf-bench-scale).
//!
//! Before each round of commands the benchmark times two things of its own: a fixed loop of
//! integer work in registers (`fixed CPU loop`), and `/bin/true` started and waited for
//! (`spawn /bin/true`). On a virtual machine a run's commands can slow down by half from
//! one N to the next; these rows say whether the CPU's speed or a bare process start moved
//! with them. Where they stay flat, the change is in the heavier kernel paths the commands
//! take (mounts, cgroups, fresh memory), and the empty world beside (below) shows whether
//! it is the host's or the engine's.
//!
//! Wharf is also measured in a second world of its own (root, runtime directory and cgroup
//! parent) that holds no pods, on the same host while the first holds N: right after the
//! first world's last 10 starts, 10 starts there (removed at the end of that N), and a
//! `run --rm` there after each of the first world's. What the engine's own state costs
//! grows in the first world only; what N pods cost the kernel (cgroups, superblocks,
//! processes, the filesystem's recent deletions) grows in both. `SCALE_CONTROL=0` skips it.
//!
//! Private state for every engine under a work directory removed at the end; containers
//! have no network (`--network none`; ctr's default), cgroups go below a parent of the
//! benchmark's own. Run as root with the fixture registry up:
//! `cargo run --release -p wharf-bench --bin scale -- [N,N,...] [REPS]`
//! (`SCALE_ENGINES=wharf,podman,ctr` picks engines by name prefix; `SCALE_RUN_TMPFS=0` keeps
//! the runtime directories off their own tmpfs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wharf_bench::{have, median, ms, run_ok, start_containerd};

/// The commands measured, in table order.
const COMMANDS: [&str; 6] = [
    "run --rm",
    "ps",
    "pod ls",
    "exec",
    "inspect",
    "run -d (last 10)",
];

/// The rows of the machine's own speed, timed before each round of commands: [`cpu_loop`]
/// and [`spawn_true`].
const MACHINE: [&str; 2] = ["fixed CPU loop", "spawn /bin/true"];

/// The argv (after the engine's base) of a measured command, given its serial number (for
/// engines that need a fresh id per run); None where the engine has no such command.
type CommandOf = Box<dyn Fn(&str, usize) -> Option<Vec<String>>>;

/// One engine: how to make each command.
struct Subject {
    name: &'static str,
    base: Vec<String>,
    env: Vec<(String, String)>,
    /// argv (after `base`) of each command; None where the engine has no such command.
    start: Box<dyn Fn(usize) -> Vec<String>>,
    cmd: CommandOf,
    /// Medians: command -> N -> time.
    results: BTreeMap<&'static str, BTreeMap<usize, Duration>>,
}

impl Subject {
    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.base[0]);
        c.args(&self.base[1..])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    fn run(&self, args: &[String]) -> Duration {
        let t = Instant::now();
        let st = self.command(args).status().expect("start the engine");
        let took = t.elapsed();
        assert!(st.success(), "{} {args:?}: {st}", self.name);
        took
    }
}

/// Wharf with the environment `env` of a private world ([`wharf_bench::private_wharf`]).
fn wharf_subject(name: &'static str, env: Vec<(String, String)>, image: &str) -> Subject {
    let (img, img2) = (image.to_string(), image.to_string());
    Subject {
        name,
        base: vec![wharf_bench::wharf_bin().display().to_string()],
        env,
        start: Box::new(move |i| {
            [
                "run",
                "-d",
                "--network",
                "none",
                "--name",
                &format!("scale-{i}"),
                &img,
                "sleep",
                "36000",
            ]
            .map(String::from)
            .to_vec()
        }),
        cmd: Box::new(move |c, _| {
            let v: Vec<&str> = match c {
                "run --rm" => vec!["run", "--rm", "--network", "none", &img2, "true"],
                "ps" => vec!["ps"],
                "pod ls" => vec!["pod", "ls"],
                "exec" => vec!["exec", "scale-1", "true"],
                "inspect" => vec!["inspect", "scale-1"],
                _ => return None,
            };
            Some(v.into_iter().map(String::from).collect())
        }),
        results: BTreeMap::new(),
    }
}

/// Measure `s` at each N (and `control`, an empty world of the same engine, alongside),
/// then remove its containers with `teardown`.
fn measure(s: &mut Subject, ns: &[usize], reps: usize, mut control: Option<&mut Subject>) {
    let mut running = 0;
    let mut serial = 0;
    for &n in ns {
        // The empty world's containers of this N (scale-1 to scale-K; removed at its end).
        let mut control_running = 0;
        let mut last10 = Vec::new();
        let mut control_last10 = Vec::new();
        while running < n {
            running += 1;
            let t = s.run(&(s.start)(running));
            if n - running < 10 {
                last10.push(t);
                // Each of the last ten is followed by a start in the empty world: the two
                // are timed at the same moment of the host, which is busiest at the end of
                // a fill (its agents catching up with the new processes).
                if let Some(c) = control.as_deref() {
                    control_running += 1;
                    control_last10.push(c.run(&(c.start)(control_running)));
                }
            }
        }
        if !last10.is_empty() {
            s.results
                .entry(COMMANDS[5])
                .or_default()
                .insert(n, median(&mut last10));
            if let Some(c) = control.as_deref_mut() {
                c.results
                    .entry(COMMANDS[5])
                    .or_default()
                    .insert(n, median(&mut control_last10));
            }
        }
        let mut samples: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
        let mut control_rm = Vec::new();
        for _ in 0..reps {
            samples.entry(MACHINE[0]).or_default().push(cpu_loop());
            samples.entry(MACHINE[1]).or_default().push(spawn_true());
            for c in &COMMANDS[..5] {
                serial += 1;
                if (c == &"exec" || c == &"inspect") && running == 0 {
                    continue;
                }
                if let Some(args) = (s.cmd)(c, serial) {
                    samples.entry(c).or_default().push(s.run(&args));
                }
                if c == &COMMANDS[0]
                    && let Some(ctl) = control.as_deref()
                    && let Some(args) = (ctl.cmd)(c, serial)
                {
                    control_rm.push(ctl.run(&args));
                }
            }
        }
        for (c, mut v) in samples {
            s.results.entry(c).or_default().insert(n, median(&mut v));
        }
        if let Some(c) = control.as_deref_mut() {
            if !control_rm.is_empty() {
                c.results
                    .entry(COMMANDS[0])
                    .or_default()
                    .insert(n, median(&mut control_rm));
            }
            // The empty world is emptied again before the next N.
            if control_running > 0 {
                let mut args = vec!["rm".to_string(), "-f".into()];
                args.extend((1..=control_running).map(|i| format!("scale-{i}")));
                c.run(&args);
            }
        }
        eprintln!("{}: N = {n} measured", s.name);
    }
}

/// A fixed amount of integer work in registers: no syscall, no memory, so its time moves
/// only with the speed the machine gives this CPU (frequency, a hypervisor's steal), and
/// the host's pods cost it nothing.
fn cpu_loop() -> Duration {
    let t = Instant::now();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..2_000_000 {
        x = std::hint::black_box(x ^ (x << 13));
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x);
    t.elapsed()
}

/// A process started and waited for that does nothing: what every measured command pays
/// before its own work (fork, exec, the dynamic loader, page faults on fresh memory).
fn spawn_true() -> Duration {
    let t = Instant::now();
    let st = Command::new("/bin/true").status().expect("start /bin/true");
    assert!(st.success());
    t.elapsed()
}

/// One SVG line plot: latency (ms) against N, one line per engine.
fn plot(title: &str, series: &[(&str, &BTreeMap<usize, Duration>)], ns: &[usize]) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 420.0, 70.0, 50.0, 40.0, 210.0);
    let max = series
        .iter()
        .flat_map(|(_, m)| m.values())
        .map(|d| d.as_secs_f64() * 1000.0)
        .fold(1.0f64, f64::max)
        * 1.1;
    let x = |i: usize| left + (w - left - right) * i as f64 / (ns.len().max(2) - 1) as f64;
    let y = |v: f64| h - bottom - (h - bottom - top) * v / max;
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">{title}: median latency against running containers</text>\n",
        (w - right + left) / 2.0
    );
    svg.push_str(&format!(
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    ));
    for k in 0..=5 {
        let v = max * k as f64 / 5.0;
        svg.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{v:.0} ms</text>\n",
            y(v),
            w - right,
            left - 6.0,
            y(v) + 4.0
        ));
    }
    for (i, n) in ns.iter().enumerate() {
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>\n",
            x(i),
            h - bottom + 20.0
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">containers running (N)</text>\n",
        (w - right + left) / 2.0,
        h - 8.0
    ));
    for (k, (name, m)) in series.iter().enumerate() {
        let c = colours[k % colours.len()];
        let pts: Vec<String> = ns
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                m.get(n)
                    .map(|d| format!("{:.1},{:.1}", x(i), y(d.as_secs_f64() * 1000.0)))
            })
            .collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        ));
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap();
            svg.push_str(&format!(
                "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{c}\"/>\n"
            ));
        }
        svg.push_str(&format!(
            "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"3\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{name}</text>\n",
            w - right + 12.0,
            top + 20.0 * k as f64 + 8.0,
            w - right + 32.0,
            top + 20.0 * k as f64 + 13.0
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

fn main() {
    let ns: Vec<usize> = std::env::args()
        .nth(1)
        .map(|a| a.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 10, 100, 300, 1000]);
    let reps: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let image = std::env::var("WHARF_BENCH_IMAGE")
        .unwrap_or_else(|_| "127.0.0.1:35000/fixtures/busybox:latest".into());
    let out_dir = PathBuf::from(
        std::env::var("WHARF_BENCH_OUT").unwrap_or_else(|_| "/var/tmp/wharf-bench-scale".into()),
    );
    std::fs::create_dir_all(&out_dir).unwrap();
    let pid = std::process::id();
    let work = PathBuf::from(format!("/var/tmp/wharf-bench-scale-{pid}"));
    let run_fs = work.join("run");
    std::fs::create_dir_all(&run_fs).unwrap();
    // The engines' runtime directories on a tmpfs of their own, as /run is where systemd
    // boots; SCALE_RUN_TMPFS=0 leaves them on the work directory's filesystem, as on a
    // host whose /run is a plain directory of its root filesystem.
    if std::env::var("SCALE_RUN_TMPFS").as_deref() != Ok("0") {
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "wharf-bench-scale"])
                .arg(&run_fs),
            "mount the runtime tmpfs",
        );
    }
    let cgroup_parent = format!("/wharf-bench-scale-{pid}");
    let s = |p: &Path| p.display().to_string();
    let mut subjects = Vec::new();

    // Wharf, and its empty world (SCALE_CONTROL=0: none).
    let wharf_env = wharf_bench::private_wharf(&work, &run_fs, &cgroup_parent, &image);
    subjects.push(wharf_subject("wharf", wharf_env, &image));
    let mut control = (std::env::var("SCALE_CONTROL").as_deref() != Ok("0")).then(|| {
        let env = wharf_bench::private_wharf(
            &work.join("control"),
            &run_fs.join("control"),
            &format!("{cgroup_parent}/control"),
            &image,
        );
        wharf_subject("wharf, an empty world beside", env, &image)
    });

    // podman with runc.
    if have("podman") && have("runc") {
        let (base, env) = wharf_bench::private_podman(&work, &run_fs, "runc");
        run_ok(
            Command::new(&base[0])
                .args(&base[1..])
                .args(["pull", "-q", "--tls-verify=false", &image])
                .envs(env.iter().map(|(k, v)| (k, v))),
            "podman pull",
        );
        let (img, img2) = (image.clone(), image.clone());
        let parent = format!("{cgroup_parent}/podman");
        let parent2 = parent.clone();
        subjects.push(Subject {
            name: "podman (runc)",
            base,
            env,
            start: Box::new(move |i| {
                [
                    "run",
                    "-d",
                    "--network",
                    "none",
                    "--pull",
                    "never",
                    "--cgroup-parent",
                    &parent,
                    "--name",
                    &format!("scale-{i}"),
                    &img,
                    "sleep",
                    "36000",
                ]
                .map(String::from)
                .to_vec()
            }),
            cmd: Box::new(move |c, _| {
                let v: Vec<&str> = match c {
                    "run --rm" => vec![
                        "run",
                        "--rm",
                        "--network",
                        "none",
                        "--pull",
                        "never",
                        "--cgroup-parent",
                        &parent2,
                        &img2,
                        "true",
                    ],
                    "ps" => vec!["ps"],
                    "pod ls" => vec!["pod", "ps"],
                    "exec" => vec!["exec", "scale-1", "true"],
                    "inspect" => vec!["inspect", "scale-1"],
                    _ => return None,
                };
                Some(v.into_iter().map(String::from).collect())
            }),
            results: BTreeMap::new(),
        });
    } else {
        eprintln!("podman or runc missing: podman skipped");
    }

    // containerd with ctr and runc.
    let mut containerd = None;
    let ctr_ns = format!("wharf-bench-scale-{pid}");
    if have("containerd") && have("ctr") && have("runc") {
        let (child, sock) = start_containerd(&work.join("containerd"), &run_fs.join("containerd"));
        containerd = Some(child);
        let base = vec![
            "ctr".to_string(),
            "--address".into(),
            s(&sock),
            "--namespace".into(),
            ctr_ns.clone(),
        ];
        run_ok(
            Command::new("ctr")
                .args(&base[1..])
                .args(["images", "pull", "--plain-http", &image]),
            "ctr pull",
        );
        let (img, img2) = (image.clone(), image.clone());
        subjects.push(Subject {
            name: "ctr (containerd+runc)",
            base,
            env: Vec::new(),
            start: Box::new(move |i| {
                ["run", "-d", &img, &format!("scale-{i}"), "sleep", "36000"]
                    .map(String::from)
                    .to_vec()
            }),
            cmd: Box::new(move |c, k| {
                let id = format!("rm-{k}");
                let exec = format!("e-{k}");
                let v: Vec<&str> = match c {
                    "run --rm" => vec!["run", "--rm", &img2, &id, "true"],
                    "ps" => vec!["task", "ls"],
                    "exec" => vec!["task", "exec", "--exec-id", &exec, "scale-1", "true"],
                    "inspect" => vec!["container", "info", "scale-1"],
                    _ => return None,
                };
                Some(v.into_iter().map(String::from).collect())
            }),
            results: BTreeMap::new(),
        });
    } else {
        eprintln!("containerd, ctr or runc missing: ctr skipped");
    }

    // SCALE_ENGINES=wharf,podman,ctr chooses (by name prefix); all by default.
    if let Ok(only) = std::env::var("SCALE_ENGINES") {
        let keep: Vec<&str> = only.split(',').collect();
        subjects.retain(|s| keep.iter().any(|k| s.name.starts_with(k)));
    }
    // Engines one after the other, each torn down before the next (1000 containers of
    // three engines at once would measure the machine, not the engine).
    for sub in &mut subjects {
        let ctl = control.as_mut().filter(|_| sub.name == "wharf");
        measure(sub, &ns, reps, ctl);
        teardown(sub, &ns);
    }
    // The empty world's rows come right after Wharf's, in the tables and the plots.
    if let Some(c) = control.filter(|c| !c.results.is_empty()) {
        let at = subjects
            .iter()
            .position(|s| s.name == "wharf")
            .map_or(0, |i| i + 1);
        subjects.insert(at, c);
    }

    // The tables.
    println!("median latency against N containers running ({reps} runs each):");
    for sub in &subjects {
        println!("  {}", sub.name);
        print!("    {:<18}", "N");
        for n in &ns {
            print!(" {n:>10}");
        }
        println!();
        for c in COMMANDS.iter().chain(&MACHINE) {
            let Some(m) = sub.results.get(c) else {
                continue;
            };
            print!("    {c:<18}");
            for n in &ns {
                print!(" {:>10}", m.get(n).map_or("-".into(), |d| ms(*d)));
            }
            println!();
        }
    }
    // The plots.
    let convert = have("rsvg-convert");
    for c in COMMANDS {
        let series: Vec<(&str, &BTreeMap<usize, Duration>)> = subjects
            .iter()
            .filter_map(|s| s.results.get(c).map(|m| (s.name, m)))
            .collect();
        if series.is_empty() {
            continue;
        }
        let file = c.replace([' ', '(', ')'], "-").replace("--", "-");
        let file = file.trim_matches('-');
        let svg = out_dir.join(format!("scale-{file}.svg"));
        std::fs::write(&svg, plot(c, &series, &ns)).unwrap();
        if convert {
            let png = svg.with_extension("png");
            run_ok(
                Command::new("rsvg-convert").arg("-o").arg(&png).arg(&svg),
                "rsvg-convert",
            );
            println!("plot: {}", png.display());
        } else {
            println!(
                "plot: {} (apt-get install librsvg2-bin for PNG)",
                svg.display()
            );
        }
    }

    if let Some(mut c) = containerd {
        let _ = c.kill();
        let _ = c.wait();
    }
    // Shims of containerd left by the kill, and every engine's mounts, cgroups and files.
    for p in wharf_bench::pids_below(&work) {
        // SAFETY: kill(2) of a process whose command line names our work directory.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    std::thread::sleep(Duration::from_millis(500));
    wharf_bench::unmount_below(&work);
    wharf_bench::remove_cgroup_tree(&cgroup_parent);
    wharf_bench::remove_cgroup_tree(&format!("/{ctr_ns}"));
    let _ = std::fs::remove_dir_all(&work);
}

/// Remove the engine's N containers.
fn teardown(s: &Subject, ns: &[usize]) {
    let n = ns.iter().copied().max().unwrap_or(0);
    let names: Vec<String> = (1..=n).map(|i| format!("scale-{i}")).collect();
    match s.name {
        "ctr (containerd+runc)" => {
            for name in &names {
                let _ = s
                    .command(&[
                        "task".into(),
                        "kill".into(),
                        "-s".into(),
                        "9".into(),
                        name.clone(),
                    ])
                    .status();
            }
            std::thread::sleep(Duration::from_millis(500));
            for name in &names {
                let _ = s
                    .command(&["task".into(), "rm".into(), "-f".into(), name.clone()])
                    .status();
                let _ = s
                    .command(&["container".into(), "rm".into(), name.clone()])
                    .status();
            }
        }
        _ => {
            for chunk in names.chunks(100) {
                let mut args = vec!["rm".to_string(), "-f".into()];
                if s.name.starts_with("podman") {
                    args.extend(["-t".into(), "0".into()]);
                }
                args.extend(chunk.iter().cloned());
                let _ = s.command(&args).status();
            }
        }
    }
    eprintln!("{}: removed", s.name);
}
