//! `wharf build` against `buildah bud` (Debian's 1.28, `--isolation chroot`, `--layers`)
//! on the same context and Dockerfile, interleaved round-robin in one run: a cold build
//! (no cache), a rebuild with every step cached, and a rebuild after one file copied near
//! the end changed. Prints medians, ratios and each builder's peak RSS (the building
//! process's own, from wait4: Wharf's step containers run under their pods' shims, as
//! buildah's RUN steps run under their runtime).
//!
//! Private state for both: Wharf's root and run directories, buildah's `--root` and
//! `--runroot`, under a work directory that is removed at the end, with a cgroup parent of
//! the benchmark's own. RUN steps share the host's network namespace (buildah's chroot
//! isolation allows nothing else; `--network host` for Wharf), and send nothing. The base
//! image comes from the fixture registry (`WHARF_BENCH_IMAGE`, default
//! 127.0.0.1:35000/fixtures/busybox:latest; start it with scripts/test.d/20-images.sh).
//!
//! Then the Dockerfile corpus of the tests (crates/wharf/tests/build_corpus, the cases
//! buildah 1.28 can build) is built cold by each builder in turn, whole rounds, and the
//! median of the round totals is printed.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin image_build -- [ROUNDS]`
//! (env WHARF_BIN selects the wharf binary).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use wharf_bench::{median, ms};

/// One builder: how to build the context, and what it measured.
struct Builder {
    name: &'static str,
    argv: Vec<String>,
    no_cache: &'static str,
    env: Vec<(String, String)>,
    cold: Vec<Duration>,
    cached: Vec<Duration>,
    changed: Vec<Duration>,
    peak_kb: i64,
}

impl Builder {
    /// Build once; its time and the process's peak RSS (kB).
    fn build(&self, no_cache: bool) -> (Duration, i64) {
        // The context is the last argument: the flag goes before it.
        let (ctx, rest) = self.argv[1..].split_last().expect("a context");
        let mut args: Vec<String> = rest.to_vec();
        if no_cache {
            args.push(self.no_cache.to_string());
        }
        args.push(ctx.clone());
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&args).envs(self.env.iter().map(|(k, v)| (k, v)));
        timed(cmd, self.name)
    }
}

/// Run `cmd` (output dropped); its time and the process's peak RSS (kB). It must succeed.
fn timed(mut cmd: Command, name: &str) -> (Duration, i64) {
    cmd.stdout(std::process::Stdio::null());
    let t = Instant::now();
    // Reaped below by wait4, which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("start the builder");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 of our own child, with valid pointers.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let took = t.elapsed();
    assert!(r > 0, "wait4");
    let status = std::process::ExitStatus::from_raw(status);
    assert!(status.success(), "{name} {cmd:?}: {status}");
    (took, usage.ru_maxrss)
}

/// The Dockerfile corpus the tests compare with buildah (crates/wharf/tests/build_corpus):
/// the cases buildah 1.28 can build, each copied to a context of its own under `work`
/// (with `make-context.sh` run), with its extra arguments.
fn corpus(work: &Path) -> Vec<(String, PathBuf, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/wharf/tests/build_corpus");
    let mut out = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&src)
        .expect("the corpus")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let case = src.join(&name);
        if case.join("no-buildah").exists() {
            continue;
        }
        let ctx = work.join("corpus").join(&name);
        std::fs::create_dir_all(ctx.parent().unwrap()).unwrap();
        run_ok(
            Command::new("cp").arg("-a").arg(&case).arg(&ctx),
            "copy a corpus case",
        );
        if ctx.join("make-context.sh").exists() {
            run_ok(
                Command::new("./make-context.sh").current_dir(&ctx),
                "make-context.sh",
            );
        }
        let args = std::fs::read_to_string(case.join("args"))
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default();
        out.push((name, ctx, args));
    }
    out
}

/// A loopback HTTP server for the corpus's ADD URLs: `GET /NAME` answers `served-NAME`
/// of the `add` case.
fn serve(dir: PathBuf) -> String {
    use std::io::{BufRead, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut r = std::io::BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
            }
            let name = line
                .split_whitespace()
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            let body = std::fs::read(dir.join(format!("served-{name}"))).unwrap_or_default();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    format!("http://{addr}")
}

fn run_ok(cmd: &mut Command, what: &str) {
    let st = cmd.status().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(st.success(), "{what}: {st}");
}

/// The benchmark's context: a 10-instruction Dockerfile (ENV, WORKDIR, three COPYs, two
/// RUNs, LABEL, EXPOSE, CMD) and its files.
fn make_context(dir: &Path, image: &str) {
    std::fs::create_dir_all(dir.join("dir/sub")).unwrap();
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "FROM {image}\nENV A=1\nWORKDIR /app\nCOPY a.txt ./\nCOPY dir/ ./dir/\n\
             RUN echo one > one.txt\nRUN echo two > two.txt && ls -R /app > list.txt\n\
             LABEL bench=yes\nEXPOSE 80\nCOPY last.txt ./\nCMD [\"cat\", \"/app/one.txt\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("a.txt"), "a\n".repeat(1000)).unwrap();
    for i in 0..50 {
        std::fs::write(
            dir.join(format!("dir/sub/f{i}")),
            format!("{i}\n").repeat(100),
        )
        .unwrap();
    }
    std::fs::write(dir.join("last.txt"), "0\n").unwrap();
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let image = std::env::var("WHARF_BENCH_IMAGE")
        .unwrap_or_else(|_| "127.0.0.1:35000/fixtures/busybox:latest".into());
    let pid = std::process::id();
    let work = PathBuf::from(format!("/var/tmp/wharf-bench-build-{pid}"));
    let ctx = work.join("ctx");
    make_context(&ctx, &image);
    let run_fs = work.join("run");
    std::fs::create_dir_all(&run_fs).unwrap();
    run_ok(
        Command::new("mount")
            .args(["-t", "tmpfs", "wharf-bench-build"])
            .arg(&run_fs),
        "mount the runtime tmpfs",
    );
    let s = |p: &Path| p.display().to_string();
    let cgroup_parent = format!("/wharf-bench-build-{pid}");
    let wharf = wharf_bench::wharf_bin();
    let wharf_env = wharf_bench::private_wharf(&work, &run_fs, &cgroup_parent, &image);
    let buildah_root = vec![
        "--root".to_string(),
        s(&work.join("buildah")),
        "--runroot".to_string(),
        s(&run_fs.join("buildah")),
    ];
    let mut pull = vec![
        "pull".to_string(),
        "-q".into(),
        "--tls-verify=false".into(),
        image.clone(),
    ];
    pull.splice(0..0, buildah_root.clone());
    run_ok(
        Command::new("buildah")
            .args(&pull)
            .stdout(std::process::Stdio::null()),
        "buildah pull",
    );
    let mut builders = vec![
        Builder {
            name: "wharf build",
            argv: vec![
                s(&wharf),
                "build".into(),
                "-q".into(),
                "--network".into(),
                "host".into(),
                "-t".into(),
                "bench/built:1".into(),
                s(&ctx),
            ],
            no_cache: "--no-cache",
            env: wharf_env.clone(),
            cold: Vec::new(),
            cached: Vec::new(),
            changed: Vec::new(),
            peak_kb: 0,
        },
        Builder {
            name: "buildah bud",
            argv: [
                vec!["buildah".to_string()],
                buildah_root.clone(),
                vec![
                    "bud".into(),
                    "-q".into(),
                    "--isolation".into(),
                    "chroot".into(),
                    "--layers".into(),
                    "--tls-verify=false".into(),
                    "-t".into(),
                    "bench/built:1".into(),
                    s(&ctx),
                ],
            ]
            .concat(),
            no_cache: "--no-cache",
            env: Vec::new(),
            cold: Vec::new(),
            cached: Vec::new(),
            changed: Vec::new(),
            peak_kb: 0,
        },
    ];
    // A warm-up build each (page cache, the base image's first use).
    for b in &builders {
        b.build(true);
    }
    for round in 0..rounds {
        for b in &mut builders {
            let (t, kb) = b.build(true);
            b.cold.push(t);
            b.peak_kb = b.peak_kb.max(kb);
            let (t, kb) = b.build(false);
            b.cached.push(t);
            b.peak_kb = b.peak_kb.max(kb);
            std::fs::write(ctx.join("last.txt"), format!("{}-{round}\n", b.name)).unwrap();
            let (t, kb) = b.build(false);
            b.changed.push(t);
            b.peak_kb = b.peak_kb.max(kb);
        }
    }
    // The corpus, cold (no cache), each builder in turn, whole rounds.
    let cases = corpus(&work);
    let url = serve(work.join("corpus/add"));
    let mut corpus_cold: Vec<Vec<Duration>> = vec![Vec::new(); 2];
    let mut corpus_peak = [0i64; 2];
    for _ in 0..rounds.div_ceil(3) {
        for (i, b) in builders.iter().enumerate() {
            let mut total = Duration::ZERO;
            for (name, ctx, args) in &cases {
                let tag = format!("corpus/{name}:1");
                let mut argv: Vec<String> = b.argv[..b.argv.len() - 3].to_vec();
                argv.extend([
                    b.no_cache.to_string(),
                    "-t".into(),
                    tag,
                    "--build-arg".into(),
                    format!("BASE={image}"),
                    "--build-arg".into(),
                    format!("URL_BASE={url}"),
                ]);
                if b.name.starts_with("buildah") {
                    argv.extend(["--format".into(), "docker".into()]);
                }
                argv.extend(args.iter().cloned());
                argv.push(s(ctx));
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .current_dir(ctx)
                    .envs(b.env.iter().map(|(k, v)| (k, v)));
                let (t, kb) = timed(cmd, b.name);
                total += t;
                corpus_peak[i] = corpus_peak[i].max(kb);
            }
            corpus_cold[i].push(total);
        }
    }
    println!(
        "a 10-instruction Dockerfile on {image} (3 COPY, 2 RUN, config steps), {rounds} rounds, medians:"
    );
    println!(
        "  {:<12} {:>12} {:>14} {:>16} {:>12}",
        "builder", "cold", "fully cached", "one file changed", "peak RSS"
    );
    let mut med = Vec::new();
    for b in &mut builders {
        let m = (
            median(&mut b.cold),
            median(&mut b.cached),
            median(&mut b.changed),
        );
        println!(
            "  {:<12} {:>12} {:>14} {:>16} {:>9} kB",
            b.name,
            ms(m.0),
            ms(m.1),
            ms(m.2),
            b.peak_kb
        );
        med.push(m);
    }
    let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "  wharf / buildah: cold {:.2}, fully cached {:.2}, one file changed {:.2}",
        r(med[0].0, med[1].0),
        r(med[0].1, med[1].1),
        r(med[0].2, med[1].2)
    );
    let (wc, bc) = (median(&mut corpus_cold[0]), median(&mut corpus_cold[1]));
    println!(
        "the build corpus ({} Dockerfiles buildah builds), cold, {} rounds, median of the round totals:",
        cases.len(),
        corpus_cold[0].len()
    );
    println!(
        "  wharf build {}   buildah bud {}   wharf / buildah {:.2}   peak RSS {} kB / {} kB",
        ms(wc),
        ms(bc),
        r(wc, bc),
        corpus_peak[0],
        corpus_peak[1]
    );
    // Leave nothing: buildah's and Wharf's mounts, the tmpfs, the cgroups, the work dir.
    let mut rm = buildah_root.clone();
    rm.extend(["rm".to_string(), "--all".into()]);
    let _ = Command::new("buildah")
        .args(&rm)
        .stdout(std::process::Stdio::null())
        .status();
    // Wharf's step containers are gone with their steps; its image views are mounts.
    wharf_bench::unmount_below(&work);
    wharf_bench::remove_cgroup_tree(&cgroup_parent);
    let _ = std::fs::remove_dir_all(&work);
}
