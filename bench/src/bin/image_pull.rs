//! Pulling an image from an empty store: `wharf pull` (download + unpack into snapshots)
//! against containerd 1.6's `ctr images pull` (download + unpack into its overlayfs
//! snapshotter), `skopeo copy` to an OCI directory (download only, no unpack) and a
//! single-threaded `gzip -dc | tar -x` of the same layers from local files (the unpack
//! alone, as the simplest tools do it). Interleaved round-robin in the same run so machine
//! noise hits all alike; prints median wall times, Wharf's ratios and peak RSS.
//!
//! Every run starts from nothing cached: Wharf gets a fresh `WHARF_ROOT`, containerd is
//! started with a fresh root and state per run (its start is not timed), skopeo and tar
//! write into fresh directories. Each run starts after a `sync`, so it does not pay for
//! another's writeback. A warm-up round (not counted) brings binaries and the registry's
//! blobs into the page cache. A round's outputs are removed when it ends; on ext4 without
//! a journal the next round then waits until the freed inodes no longer slow down file
//! creation (see `recently_deleted_window`; on this kind of host, creating the image's
//! 3,700 files right after deleting as many nearby took seconds instead of a fraction).
//!
//! Peak RSS is `ru_maxrss` from `wait4`: the largest resident set of any process of the
//! measured command's tree (for wharf and skopeo the one process doing the whole pull; for
//! gzip | tar the larger of the two). containerd fetches in the `ctr` client and unpacks in
//! the daemon, so both are reported: ctr's `ru_maxrss` and the daemon's `VmHWM` (its peak
//! since it started, which is why it is restarted per run; its idle peak is shown too).
//! Wharf's peak RSS is measured pulling a small image as well, to show that it does not
//! grow with layer size.
//!
//! Images come from the fixture registry (`WHARF_BENCH_IMAGE`, default
//! 127.0.0.1:35000/fixtures/multilayer:latest; `WHARF_BENCH_SMALL_IMAGE`, default
//! 127.0.0.1:35000/fixtures/busybox:latest). When the default registry does not answer and
//! the fixtures are built (/var/tmp/wharf-fixtures, scripts/test.d/20-images.sh), the
//! benchmark starts it and stops it at the end.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin image_pull -- [ITERATIONS]`
//! (default 5; env WHARF_BIN selects the wharf binary; default: target/release/wharf next
//! to this one).

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wharf_bench::{median, ms, unmount_below};

const DEFAULT_REGISTRY: &str = "127.0.0.1:35000";
const FIXTURES: &str = "/var/tmp/wharf-fixtures";

/// What one measured command took.
struct Sample {
    wall: Duration,
    /// `ru_maxrss` of the command's process tree, kB.
    max_rss_kb: u64,
}

/// The samples of one contender.
#[derive(Default)]
struct Series {
    wall: Vec<Duration>,
    rss_kb: Vec<u64>,
    /// containerd only: the daemon's VmHWM after the pull, and when it was idle, kB.
    daemon_hwm_kb: Vec<u64>,
    daemon_idle_hwm_kb: Vec<u64>,
}

impl Series {
    fn push(&mut self, s: Sample) {
        self.wall.push(s.wall);
        self.rss_kb.push(s.max_rss_kb);
    }
}

/// A layer blob in the local OCI layout (for the gzip | tar baseline).
struct Layer {
    path: PathBuf,
    media_type: String,
    size: u64,
}

struct Bench {
    work: PathBuf,
    wharf: PathBuf,
    image: String,
    small_image: String,
    /// The running private containerd (killed by [`Bench::stop_containerd`] and at exit).
    containerd: Option<Child>,
    /// Round number (names the runs' directories).
    round: usize,
    /// Directories the current round's runs wrote.
    outputs: Vec<PathBuf>,
    /// How long to wait after removing a round's outputs.
    settle: Duration,
    layers: Vec<Layer>,
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let image = std::env::var("WHARF_BENCH_IMAGE")
        .unwrap_or_else(|_| format!("{DEFAULT_REGISTRY}/fixtures/multilayer:latest"));
    let small_image = std::env::var("WHARF_BENCH_SMALL_IMAGE")
        .unwrap_or_else(|_| format!("{DEFAULT_REGISTRY}/fixtures/busybox:latest"));
    let wharf = wharf_bench::wharf_bin();
    assert!(
        wharf.exists(),
        "{} missing: cargo build --release -p wharf (or set WHARF_BIN)",
        wharf.display()
    );
    for tool in ["containerd", "ctr", "skopeo", "gzip", "tar", "curl"] {
        assert!(have(tool), "{tool} is needed");
    }
    let registry_started = match ensure_registry(&image) {
        Ok(started) => started,
        Err(e) => {
            eprintln!("image_pull: {e}");
            std::process::exit(1);
        }
    };

    let work = PathBuf::from(format!("/var/tmp/wharf-bench-pull-{}", std::process::id()));
    fs::create_dir_all(&work).unwrap();
    // Runs' directories are spread over the filesystem (ext4's TOPDIR flag) rather than
    // packed next to /var/tmp's other, busy, contents.
    let _ = Command::new("chattr")
        .arg("+T")
        .arg(&work)
        .stderr(Stdio::null())
        .status();
    let settle = recently_deleted_window(&work);
    if !settle.is_zero() {
        eprintln!(
            "image_pull: {} is ext4 without a journal: waiting {} s after each round's \
             cleanup (inodes freed less than that ago make file creation slow)",
            work.display(),
            settle.as_secs()
        );
    }
    let mut bench = Bench {
        work: work.clone(),
        wharf,
        image,
        small_image,
        containerd: None,
        round: 0,
        outputs: Vec::new(),
        settle,
        layers: Vec::new(),
    };
    let mut series: [Series; 5] = Default::default();
    // Measure, then clean up whatever happened; report a failure only after that.
    let outcome = bench.prepare().and_then(|info| {
        bench.measure(iterations, &mut series)?;
        Ok(info)
    });
    if let Ok(info) = &outcome {
        report(info, iterations, &mut series);
    }

    bench.stop_containerd();
    unmount_below(&work);
    let _ = fs::remove_dir_all(&work);
    if registry_started {
        let _ = registry_command("stop").stdout(Stdio::null()).status();
    }
    if let Err(err) = outcome {
        eprintln!("image_pull: {err}");
        std::process::exit(1);
    }
}

/// What the report says about the images: (name, layers, compressed bytes, largest
/// layer compressed, largest layer uncompressed if known) for the image and the small one.
type ImageInfo = (String, usize, u64, u64, Option<u64>);

impl Bench {
    /// Fetch both images' blobs into a local OCI layout (the baseline's input, and the
    /// sizes for the report).
    fn prepare(&mut self) -> Result<[ImageInfo; 2], String> {
        let oci = self.work.join("blobs");
        let mut infos = Vec::new();
        for (image, tag) in [(&self.image, "big"), (&self.small_image, "small")] {
            run(
                Command::new("skopeo")
                    .args(["copy", "-q", "--src-tls-verify=false"])
                    .arg(format!("docker://{image}"))
                    .arg(format!("oci:{}:{tag}", oci.display()))
                    .env("TMPDIR", &self.work),
                &format!("skopeo copy {image} (to read its layers)"),
            )?;
            let layers = oci_layers(&oci, tag)?;
            let total = layers.iter().map(|l| l.size).sum();
            let largest = layers
                .iter()
                .max_by_key(|l| l.size)
                .ok_or_else(|| format!("{image} has no layers"))?;
            let uncompressed = largest
                .media_type
                .ends_with("gzip")
                .then(|| gzip_isize(&largest.path))
                .flatten();
            infos.push((
                image.clone(),
                layers.len(),
                total,
                largest.size,
                uncompressed,
            ));
            if tag == "big" {
                self.layers = layers;
            }
        }
        Ok([infos.remove(0), infos.remove(0)])
    }

    /// One warm-up round (binaries and the registry's blobs in the page cache), then
    /// `iterations` rounds of every contender. Series: wharf, ctr, skopeo, gzip | tar,
    /// wharf with the small image.
    fn measure(&mut self, iterations: usize, series: &mut [Series; 5]) -> Result<(), String> {
        for i in 0..=iterations {
            let (image, small) = (self.image.clone(), self.small_image.clone());
            let w = self.wharf_pull(&image, "wharf")?;
            let (c, hwm, idle) = self.ctr_pull()?;
            let s = self.skopeo_copy()?;
            let t = self.gunzip_tar()?;
            let ws = self.wharf_pull(&small, "wharf-small")?;
            self.end_round();
            if i == 0 {
                continue;
            }
            series[0].push(w);
            series[1].push(c);
            series[1].daemon_hwm_kb.push(hwm);
            series[1].daemon_idle_hwm_kb.push(idle);
            series[2].push(s);
            series[3].push(t);
            series[4].push(ws);
            eprintln!("image_pull: round {i}/{iterations} done");
        }
        Ok(())
    }

    /// `wharf pull -q IMAGE` into a fresh root (no config file: loopback is plain HTTP).
    fn wharf_pull(&mut self, image: &str, dir_name: &str) -> Result<Sample, String> {
        let root = self.fresh_dir(dir_name)?;
        measured(
            Command::new(&self.wharf)
                .args(["pull", "-q", image])
                .env("WHARF_ROOT", &root)
                .env("WHARF_CONFIG", self.work.join("no-config.json")),
            &format!("wharf pull {image}"),
            &self.work.join("wharf.log"),
        )
    }

    /// `ctr images pull --plain-http IMAGE` against a private containerd started with a
    /// fresh root (start not timed); returns also the daemon's VmHWM after the pull and
    /// before it, kB.
    fn ctr_pull(&mut self) -> Result<(Sample, u64, u64), String> {
        let dir = self.fresh_dir("containerd")?;
        let r = self.start_containerd(&dir).and_then(|sock| {
            let pid = self.containerd.as_ref().unwrap().id();
            let idle = vm_hwm_kb(pid)?;
            let s = measured(
                Command::new("ctr")
                    .arg("--address")
                    .arg(&sock)
                    .args(["--namespace", "bench", "images", "pull", "--plain-http"])
                    .arg(&self.image),
                &format!("ctr images pull {}", self.image),
                &self.work.join("ctr.log"),
            )?;
            let hwm = vm_hwm_kb(pid)?;
            // ctr unpacks by default; make sure it did (one snapshot per layer).
            let snapshots = dir.join("root/io.containerd.snapshotter.v1.overlayfs/snapshots");
            let n = fs::read_dir(&snapshots).map_or(0, |d| d.count());
            if n < self.layers.len() {
                return Err(format!(
                    "ctr pulled but left {n} snapshots in {} for {} layers",
                    snapshots.display(),
                    self.layers.len()
                ));
            }
            Ok((s, hwm, idle))
        });
        self.stop_containerd();
        unmount_below(&dir);
        r
    }

    /// `skopeo copy` of the image to a fresh OCI directory (blobs stay compressed).
    fn skopeo_copy(&mut self) -> Result<Sample, String> {
        let dir = self.fresh_dir("skopeo")?;
        measured(
            Command::new("skopeo")
                .args(["copy", "-q", "--src-tls-verify=false"])
                .arg(format!("docker://{}", self.image))
                .arg(format!("oci:{}:x", dir.join("oci").display()))
                .env("TMPDIR", &dir),
            &format!("skopeo copy {}", self.image),
            &self.work.join("skopeo.log"),
        )
    }

    /// Each layer decompressed by one `gzip -dc` (or `zstd -dc`) piped into `tar -x` into
    /// a directory of its own (as snapshots are), one layer after the other.
    fn gunzip_tar(&mut self) -> Result<Sample, String> {
        let dir = self.fresh_dir("tar")?;
        let script = r#"set -eo pipefail; d=$1; shift; i=0
            while [ $# -gt 0 ]; do
              mkdir "$d/$i"; $1 -dc "$2" | tar -x -C "$d/$i"; i=$((i+1)); shift 2
            done"#;
        let mut cmd = Command::new("bash");
        cmd.args(["-c", script, "bash"]).arg(&dir);
        for l in &self.layers {
            let tool = if l.media_type.ends_with("zstd") {
                "zstd"
            } else if l.media_type.ends_with("gzip") {
                "gzip"
            } else {
                // An uncompressed layer: `gzip -dc -f` copies what is not gzip.
                "gzip -f"
            };
            cmd.arg(tool).arg(&l.path);
        }
        measured(&mut cmd, "gzip -dc | tar -x", &self.work.join("tar.log"))
    }

    /// A new empty directory for one run, directly under the work dir (which is marked
    /// as a top of directory hierarchies, so ext4 places each run in a block group of its
    /// own choosing, away from other processes' churn); removed at the end of the round.
    fn fresh_dir(&mut self, name: &str) -> Result<PathBuf, String> {
        let dir = self.work.join(format!("{name}-{}", self.round));
        fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        self.outputs.push(dir.clone());
        Ok(dir)
    }

    /// Remove the round's outputs, flush, and wait until the inodes just freed no longer
    /// slow down the next round's file creation (ext4 without a journal, see
    /// [`recently_deleted_window`]).
    fn end_round(&mut self) {
        for dir in self.outputs.drain(..) {
            unmount_below(&dir);
            let _ = fs::remove_dir_all(&dir);
        }
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        std::thread::sleep(self.settle);
        self.round += 1;
    }

    /// A private containerd (own root, state and sockets under `dir`, the CRI plugin off),
    /// ready to answer; returns its socket.
    fn start_containerd(&mut self, dir: &Path) -> Result<PathBuf, String> {
        let sock = dir.join("containerd.sock");
        let config = format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{s}\"\n[ttrpc]\n  address = \"{s}.ttrpc\"\n\
             [debug]\n  address = \"\"\n",
            d = dir.display(),
            s = sock.display()
        );
        fs::write(dir.join("config.toml"), config).map_err(|e| e.to_string())?;
        let log = fs::File::create(self.work.join("containerd.log")).map_err(|e| e.to_string())?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .env("TMPDIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("containerd: {e}"))?;
        self.containerd = Some(child);
        let t = Instant::now();
        loop {
            let ok = Command::new("ctr")
                .arg("--address")
                .arg(&sock)
                .arg("version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(sock);
            }
            if t.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "containerd did not start: {}",
                    tail(&self.work.join("containerd.log"))
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop_containerd(&mut self) {
        if let Some(mut c) = self.containerd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// ext4 without a journal, when it allocates an inode, passes over every free inode of the
/// block group that was deleted less than `dirty_expire_centisecs` (+5 s) ago, reading the
/// inode table for each (fs/ext4/ialloc.c, `recently_deleted`): creating thousands of files
/// soon after thousands were deleted nearby turns quadratic (seconds for the multilayer
/// image on a host where other builds churn /var/tmp). The time to wait after deleting a
/// round's outputs on such a filesystem; zero elsewhere.
fn recently_deleted_window(dir: &Path) -> Duration {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::metadata(dir) else {
        return Duration::ZERO;
    };
    let dev = meta.dev();
    let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let Some(name) = fs::canonicalize(sys)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_os_string()))
    else {
        return Duration::ZERO;
    };
    let journal = Path::new("/sys/fs/ext4").join(name).join("journal_task");
    if fs::read_to_string(journal).map_or(true, |j| j.trim() != "<none>") {
        return Duration::ZERO;
    }
    let expire: u64 = fs::read_to_string("/proc/sys/vm/dirty_expire_centisecs")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(3000);
    Duration::from_secs(expire / 100 + 5 + 1)
}

/// Whether the registry of `image` answers; when it does not and it is the default fixture
/// registry, start it with the fixture kit's script (returns whether it was started).
fn ensure_registry(image: &str) -> Result<bool, String> {
    let host = image.split('/').next().unwrap_or_default();
    let up = || {
        Command::new("curl")
            .args(["-fsS", "-o", "/dev/null", "--max-time", "5"])
            .arg(format!("http://{host}/v2/"))
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if up() {
        return Ok(false);
    }
    if host != DEFAULT_REGISTRY || !Path::new(FIXTURES).join("oci/index.json").exists() {
        return Err(format!(
            "registry {host} does not answer; build and serve the fixtures with \
             `source scripts/test.d/20-images.sh` (or set WHARF_BENCH_IMAGE)"
        ));
    }
    run(
        registry_command("start").stdout(Stdio::null()),
        "starting the fixture registry",
    )?;
    if up() {
        Ok(true)
    } else {
        let _ = registry_command("stop").stdout(Stdio::null()).status();
        Err(format!("registry {host} does not answer after starting it"))
    }
}

/// The fixture kit's registry script, with the paths scripts/test.d/20-images.sh uses.
fn registry_command(verb: &str) -> Command {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/images");
    let mut c = Command::new(kit.join("registry.sh"));
    c.arg(verb)
        .env("REGISTRY_PORT", "35000")
        .env("REGISTRY_AUTH_PORT", "35001")
        .env("OCI", format!("{FIXTURES}/oci"))
        .env("REGISTRY_DATA", format!("{FIXTURES}/registry-data"))
        .env("REGISTRY_RUN", format!("{FIXTURES}/run"));
    c
}

/// Run `cmd` (after a `sync`); its wall time and `ru_maxrss`. Its output goes to `log` (shown on failure).
fn measured(cmd: &mut Command, what: &str, log: &Path) -> Result<Sample, String> {
    let err = fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    // What earlier runs wrote is flushed first, so this one does not pay for it.
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let t = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    let (status, rusage) = wait4(child.id() as libc::pid_t)?;
    let wall = t.elapsed();
    if !status.success() {
        return Err(format!("{what} failed ({status}): {}", tail(log)));
    }
    Ok(Sample {
        wall,
        max_rss_kb: rusage.ru_maxrss as u64,
    })
}

/// Reap `pid` with its resource usage (the largest RSS of it and its reaped descendants).
fn wait4(pid: libc::pid_t) -> Result<(ExitStatus, libc::rusage), String> {
    let mut status = 0;
    // SAFETY: rusage is plain data; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 writes only into the two out-parameters.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok((ExitStatus::from_raw(status), ru));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("wait4({pid}): {e}"));
        }
    }
}

/// The peak resident set of a live process since it started, kB.
fn vm_hwm_kb(pid: u32) -> Result<u64, String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no VmHWM in /proc/{pid}/status"))
}

/// The layers of the image tagged `tag` in the OCI layout `oci`.
fn oci_layers(oci: &Path, tag: &str) -> Result<Vec<Layer>, String> {
    let read_json = |p: &Path| -> Result<serde_json::Value, String> {
        let bytes = fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("parsing {}: {e}", p.display()))
    };
    let blob = |digest: &str| oci.join("blobs").join(digest.replacen(':', "/", 1));
    let index = read_json(&oci.join("index.json"))?;
    let manifest = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .and_then(|m| m["digest"].as_str())
        .ok_or_else(|| format!("no image {tag:?} in {}", oci.display()))?;
    let manifest = read_json(&blob(manifest))?;
    manifest["layers"]
        .as_array()
        .ok_or_else(|| format!("no layers in the manifest of {tag:?}"))?
        .iter()
        .map(|l| {
            Ok(Layer {
                path: blob(l["digest"].as_str().ok_or("layer without digest")?),
                media_type: l["mediaType"].as_str().unwrap_or_default().to_string(),
                size: l["size"].as_u64().ok_or("layer without size")?,
            })
        })
        .collect()
}

/// The uncompressed size a gzip file records in its trailer (modulo 4 GiB; exact for
/// single-member files below that).
fn gzip_isize(path: &Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = fs::File::open(path).ok()?;
    f.seek(SeekFrom::End(-4)).ok()?;
    let mut b = [0u8; 4];
    f.read_exact(&mut b).ok()?;
    Some(u32::from_le_bytes(b) as u64)
}

fn have(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", "command -v \"$1\"", "sh", bin])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The last lines of a log, for error messages.
fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn median_kb(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

fn describe(info: &ImageInfo) -> String {
    let (name, layers, total, largest, raw) = info;
    let raw = raw
        .map(|r| format!(" = {} as tar", mib(r)))
        .unwrap_or_default();
    format!(
        "{name}: {layers} layer{}, {} compressed, largest layer {}{raw}",
        if *layers == 1 { "" } else { "s" },
        mib(*total),
        mib(*largest)
    )
}

fn report(info: &[ImageInfo; 2], iterations: usize, series: &mut [Series; 5]) {
    let kb = |k: u64| mib(k * 1024);
    println!("{}", describe(&info[0]));
    println!("{iterations} iterations, each from an empty store, interleaved; medians:");
    println!("  {:<40} {:>12}   peak RSS", "", "wall");
    let names = [
        "wharf pull (download + unpack)",
        "ctr images pull (download + unpack)",
        "skopeo copy (download only)",
        "gzip -dc | tar -x (1 thread, local)",
    ];
    let mut medians = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let s = &mut series[i];
        let m = median(&mut s.wall);
        medians.push(m);
        let rss = median_kb(&s.rss_kb);
        let rss = match i {
            1 => format!(
                "ctr {} + containerd {} (VmHWM; {} idle)",
                kb(rss),
                kb(median_kb(&s.daemon_hwm_kb)),
                kb(median_kb(&s.daemon_idle_hwm_kb))
            ),
            3 => format!("{} (largest process)", kb(rss)),
            _ => kb(rss),
        };
        println!("  {name:<40} {:>12}   {rss}", ms(m));
    }
    let ratio = |j: usize| medians[0].as_secs_f64() / medians[j].as_secs_f64();
    println!(
        "  wharf / ctr        = {:.2}  (goal <= 0.50: {})",
        ratio(1),
        if ratio(1) <= 0.5 { "met" } else { "not met" }
    );
    println!("  wharf / skopeo     = {:.2}", ratio(2));
    println!("  wharf / gzip+tar   = {:.2}", ratio(3));
    println!("Wharf's peak RSS against layer size (median, max over the runs):");
    for (i, inf) in [(4, &info[1]), (0, &info[0])] {
        let s = &series[i];
        let (name, _, _, largest, raw) = inf;
        let short = name.rsplit('/').next().unwrap_or(name);
        let raw = raw
            .map(|r| format!(" ({} tar)", mib(r)))
            .unwrap_or_default();
        println!(
            "  {short:<26} largest layer {:>10}{raw:<16}   peak RSS {} (max {}), wall {}",
            mib(*largest),
            kb(median_kb(&s.rss_kb)),
            kb(*s.rss_kb.iter().max().unwrap()),
            ms(median(&mut s.wall.clone()))
        );
    }
}
