//! Kubernetes' view of a runtime: Wharf's CRI daemon (`wharf daemon`) against containerd
//! 1.6 with its CRI plugin and runc, both driven over the CRI v1 gRPC API by this one client
//! (so no client start-up is measured), both networking pods with the same CNI chain
//! (bridge + host-local, portmap) from a configuration directory of the benchmark's own.
//!
//! Measured, interleaved round-robin so machine noise hits both alike:
//! - pod ready: RunPodSandbox + CreateContainer + StartContainer of busybox `sleep 3600`
//!   until ContainerStatus says running (and each step's median);
//! - teardown as kubelet does it: StopContainer (timeout 0: no grace period) +
//!   StopPodSandbox + RemovePodSandbox; and once per engine, StopPodSandbox with the
//!   container still running (the CRI says it is then killed);
//!
//! then kubelet's load and memory, one engine at a time: N pods started by 10 concurrent
//! clients (all running after how long, each pod's ready time at p50 and p99), every
//! listing and stats call timed with them running, each daemon's RSS and PSS idle, with the
//! N pods and after the listings, and the engine's cost per pod (the daemon's growth plus
//! the pods' shims; containerd's pause processes are shown apart).
//!
//! Every engine gets private state under a work directory: its root on disk, its runtime
//! state on a tmpfs mounted there (where hosts keep /run), pods' cgroups below
//! /wharf-bench-cri-<pid>. The image (`WHARF_BENCH_IMAGE`, default
//! 127.0.0.1:35000/fixtures/busybox:latest; start the fixture registry with
//! scripts/test.d/20-images.sh) is pulled through each CRI first; containerd's sandbox
//! (pause) image is built here, the host's static busybox sleeping, and imported with ctr.
//! Then both daemons stop, the benchmark moves into a network namespace of its own and
//! starts them again on the same state, so the bridge, the pods' veths and portmap's rules
//! exist only there.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin cri_pod -- [ITERATIONS] [PODS]`
//! (env WHARF_BIN selects the wharf binary; default: target/release/wharf next to this one).
//! With env CRI_POD_PER_CALL set, it also prints what one listing or stats call of each
//! kind leaves resident in each daemon (anonymous and file-backed), each call made after
//! three quiet seconds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tonic::transport::Channel;
use wharf_bench::{Proc, median, ms, processes, quantile, remove_cgroup_tree, unmount_below};
use wharf_cri::api::image_service_client::ImageServiceClient;
use wharf_cri::api::runtime_service_client::RuntimeServiceClient;
use wharf_cri::api::*;
use wharf_testbed::layer_tar::{Entry, layer};

/// containerd's sandbox image, built by [`pause_image`] (never pulled).
const PAUSE_IMAGE: &str = "wharf.bench/pause:1";
/// What the pause process runs (how it is told from the pods' own processes).
const PAUSE_ARGS: [&str; 3] = ["/bin/busybox", "sleep", "infinity"];
/// The pods' container.
const SLEEP: [&str; 2] = ["sleep", "3600"];
/// How many clients start the pods of the scale phase at once.
const CLIENTS: usize = 10;
/// How many times each listing and stats call is timed with the pods running.
const LIST_ROUNDS: usize = 30;
/// The listing and stats calls timed (see [`time_listings`]), and Version: the round trip
/// of a call that does no work.
const LISTINGS: [&str; 8] = [
    "Version",
    "ListContainers",
    "ListPodSandbox",
    "ListContainerStats",
    "ListPodSandboxStats",
    "ListPodSandboxMetrics",
    "ContainerStats",
    "PodSandboxStats",
];

/// Directories containerd makes outside its root and state whatever its configuration
/// (libcni's result cache, the shims' sockets), children first.
const OUTSIDE_DIRS: [&str; 4] = [
    "/var/lib/cni/results",
    "/var/lib/cni",
    "/run/containerd/s",
    "/run/containerd",
];

/// What every engine's pods share.
#[derive(Clone)]
struct Bench {
    image: String,
    work: PathBuf,
    cgroup_parent: String,
    pid: u32,
    /// Those of [`OUTSIDE_DIRS`] absent at the start (removed at the end if empty).
    absent: Vec<&'static str>,
}

/// A daemon serving the CRI on a unix socket.
struct Daemon {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    sock: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// Start it and wait until its socket accepts connections.
    fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        let child = self.child.insert(child);
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.sock).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "{} exited ({status}); its log: {}",
                    self.program.display(),
                    self.log.display()
                ));
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("{} did not listen", self.program.display()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// SIGTERM, a wait, SIGKILL if it is still there.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) of the daemon this benchmark started (not yet reaped).
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while matches!(child.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Wharf,
    Containerd,
}

/// The two CRI clients of one daemon.
struct Cri {
    rt: RuntimeServiceClient<Channel>,
    img: ImageServiceClient<Channel>,
}

/// Per-iteration durations.
#[derive(Default)]
struct Samples {
    sandbox: Vec<Duration>,
    create: Vec<Duration>,
    start: Vec<Duration>,
    ready: Vec<Duration>,
    stop_container: Vec<Duration>,
    stop: Vec<Duration>,
    remove: Vec<Duration>,
    teardown: Vec<Duration>,
}

/// Memory in kB.
#[derive(Clone, Copy, Default)]
struct Usage {
    rss: u64,
    pss: u64,
    /// The anonymous (heap, stacks) and file-backed (the binary's code and data) parts of
    /// the RSS: what the process allocated against what it ran.
    anon: u64,
    file: u64,
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, o: Usage) -> Usage {
        Usage {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
            anon: self.anon + o.anon,
            file: self.file + o.file,
        }
    }
}

/// One engine's memory figures.
struct Memory {
    /// The daemon right after its (second) start, images present, no pod yet.
    fresh: Usage,
    /// The daemon after the timed runs, no pod left.
    idle: Usage,
    /// The daemon with the pods running.
    loaded: Usage,
    /// The pods' shims: how many, and their sum.
    shims: (usize, Usage),
    /// containerd's pause processes: how many, and their sum.
    pause: (usize, Usage),
    /// The daemon right after a round of every listing and stats call, and again after
    /// three quiet seconds.
    listed: Usage,
    listed_quiet: Usage,
}

/// The pods of the memory phase started at once, and kubelet's listings with them running.
struct Scale {
    /// From the first RunPodSandbox to the last pod running.
    total: Duration,
    /// Each pod's ready time.
    ready: Vec<Duration>,
    /// Each listing and stats call's durations (None: not implemented).
    calls: Vec<(&'static str, Option<Vec<Duration>>)>,
    /// CPU time over the start, in ms: the daemon's own, and that of the children it
    /// waited for (containerd's are its shims' start-up and the CNI plugins; Wharf's the
    /// CNI plugins, its shims being double-forked).
    cpu: (u64, u64),
}

/// A process's CPU time in ms: its own (utime + stime) and its waited-for children's
/// (cutime + cstime).
fn cpu_ms(pid: i32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis, from field 3 (state) on.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let at = |n: usize| f.get(n - 3).copied().unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let tick = 1000 / hz;
    ((at(14) + at(15)) * tick, (at(16) + at(17)) * tick)
}

/// A pod made and not yet removed, and its container once made.
struct Pod {
    id: String,
    container: Option<String>,
}

struct Engine {
    name: &'static str,
    /// Prefix of its pods' names.
    short: &'static str,
    kind: Kind,
    daemon: Daemon,
    cri: Option<Cri>,
    /// Pods made and not yet removed (what cleanup removes should a run fail).
    pods: Vec<Pod>,
    samples: Samples,
    memory: Option<Memory>,
    scale: Option<Scale>,
    fresh: Usage,
    /// StopPodSandbox of the warm-up pod, its container still running.
    stop_running: Duration,
}

impl Engine {
    fn cri(&mut self) -> Result<&mut Cri, String> {
        self.cri
            .as_mut()
            .ok_or_else(|| format!("{}: not connected", self.name))
    }

    /// RunPodSandbox + CreateContainer + StartContainer, then ContainerStatus until
    /// running; the three steps' durations (the last includes the status polls).
    async fn pod_up(&mut self, b: &Bench, name: &str) -> Result<[Duration; 3], String> {
        let mut rt = self.cri()?.rt.clone();
        pod_up(&mut rt, b, (self.name, self.short), name, &mut self.pods).await
    }

    /// As kubelet removes a pod: StopContainer (here with no grace period; skipped when
    /// `stop_container_first` is false), StopPodSandbox, RemovePodSandbox.
    async fn pod_down(
        &mut self,
        id: &str,
        stop_container_first: bool,
    ) -> Result<[Duration; 3], String> {
        let engine = self.name;
        let container = self
            .pods
            .iter()
            .find(|p| p.id == id)
            .and_then(|p| p.container.clone());
        let rt = &mut self.cri()?.rt;
        let start = Instant::now();
        if let Some(c) = container.filter(|_| stop_container_first) {
            rt.stop_container(StopContainerRequest {
                container_id: c.clone(),
                timeout: 0,
            })
            .await
            .map_err(|e| format!("{engine}: StopContainer {c}: {e}"))?;
        }
        let t0 = Instant::now();
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .map_err(|e| format!("{engine}: StopPodSandbox {id}: {e}"))?;
        let t1 = Instant::now();
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .map_err(|e| format!("{engine}: RemovePodSandbox {id}: {e}"))?;
        let t2 = Instant::now();
        self.pods.retain(|p| p.id != id);
        Ok([t0 - start, t1 - t0, t2 - t1])
    }

    /// Every pod of the daemon (and any this benchmark made), stopped and removed.
    async fn remove_all(&mut self) {
        let mut ids: Vec<String> = self.pods.iter().map(|p| p.id.clone()).collect();
        if let Ok(cri) = self.cri() {
            if let Ok(list) = cri
                .rt
                .list_pod_sandbox(ListPodSandboxRequest::default())
                .await
            {
                ids.extend(list.into_inner().items.into_iter().map(|p| p.id));
            }
            // Containers first, killed: a StopPodSandbox may wait out a grace period.
            if let Ok(list) = cri
                .rt
                .list_containers(ListContainersRequest::default())
                .await
            {
                for c in list.into_inner().containers {
                    let _ = cri
                        .rt
                        .stop_container(StopContainerRequest {
                            container_id: c.id,
                            timeout: 0,
                        })
                        .await;
                }
            }
        }
        ids.sort();
        ids.dedup();
        let mut failed = Vec::new();
        for id in ids {
            if let Err(e) = self.pod_down(&id, true).await {
                failed.push(e);
            }
        }
        if let Some(first) = failed.first() {
            eprintln!(
                "cri_pod: cleanup: {} pods not removed through {} (first: {first})",
                failed.len(),
                self.name
            );
        }
    }

    /// The pods' shim processes and (containerd) pause processes, from a process list.
    fn helpers(&self, b: &Bench, procs: &[Proc]) -> (Vec<i32>, Vec<i32>) {
        let daemon = self.daemon.pid();
        let work = b.work.display().to_string();
        let sock = self.daemon.sock.display().to_string();
        let shims: Vec<i32> = procs
            .iter()
            .filter(|p| Some(p.pid) != daemon)
            .filter(|p| match self.kind {
                Kind::Wharf => p.cmdline.contains("shim") && p.cmdline.contains(&work),
                Kind::Containerd => {
                    p.cmdline.contains("containerd-shim") && p.cmdline.contains(&sock)
                }
            })
            .map(|p| p.pid)
            .collect();
        let pause = procs
            .iter()
            .filter(|p| shims.contains(&p.ppid) && p.cmdline == PAUSE_ARGS.join(" "))
            .map(|p| p.pid)
            .collect();
        (shims, pause)
    }
}

async fn connect(sock: &Path) -> Result<Cri, String> {
    let socket = sock.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://cri.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .map_err(|e| format!("connect to {}: {e}", sock.display()))?;
    Ok(Cri {
        rt: RuntimeServiceClient::new(channel.clone()),
        img: ImageServiceClient::new(channel),
    })
}

/// RunPodSandbox + CreateContainer + StartContainer through `rt`, then ContainerStatus
/// until running; the three steps' durations (the last includes the status polls). The
/// pod is added to `made` as soon as it exists (and its container once made), for cleanup.
async fn pod_up(
    rt: &mut RuntimeServiceClient<Channel>,
    b: &Bench,
    (engine, short): (&str, &str),
    name: &str,
    made: &mut Vec<Pod>,
) -> Result<[Duration; 3], String> {
    let config = pod_config(b, short, name)?;
    let container = container_config(&b.image);
    let t0 = Instant::now();
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map_err(|e| format!("{engine}: RunPodSandbox {name}: {e}"))?
        .into_inner()
        .pod_sandbox_id;
    let t1 = Instant::now();
    made.push(Pod {
        id: pod.clone(),
        container: None,
    });
    let id = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod,
            config: Some(container),
            sandbox_config: Some(config),
        })
        .await
        .map_err(|e| format!("{engine}: CreateContainer in {name}: {e}"))?
        .into_inner()
        .container_id;
    let t2 = Instant::now();
    if let Some(p) = made.last_mut() {
        p.container = Some(id.clone());
    }
    rt.start_container(StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .map_err(|e| format!("{engine}: StartContainer in {name}: {e}"))?;
    loop {
        let st = rt
            .container_status(ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await
            .map_err(|e| format!("{engine}: ContainerStatus in {name}: {e}"))?
            .into_inner()
            .status
            .ok_or_else(|| format!("{engine}: ContainerStatus in {name}: no status"))?;
        if st.state == ContainerState::ContainerRunning as i32 {
            break;
        }
        if st.state == ContainerState::ContainerExited as i32 {
            return Err(format!(
                "{engine}: the container of {name} exited: {} {}",
                st.reason, st.message
            ));
        }
        if t2.elapsed() > Duration::from_secs(30) {
            return Err(format!("{engine}: the container of {name} never ran"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok([t1 - t0, t2 - t1, t2.elapsed()])
}

/// `pods` pods started by `clients` concurrent clients, each on a connection of its own
/// taking the next pod as it finishes one (kubelet's pod workers); the time from the
/// first RunPodSandbox to the last pod running, and each pod's ready time.
async fn start_concurrently(
    e: &mut Engine,
    b: &Bench,
    pods: usize,
    clients: usize,
) -> Result<(Duration, Vec<Duration>), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(b.clone());
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(connect(&e.daemon.sock).await?.rt);
    }
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for mut rt in conns {
        let (next, b, names) = (next.clone(), shared.clone(), (e.name, e.short));
        set.spawn(async move {
            let (mut made, mut ready) = (Vec::new(), Vec::<Duration>::new());
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pods {
                    return (made, ready, None);
                }
                match pod_up(&mut rt, &b, names, &format!("scale{i}"), &mut made).await {
                    Ok(steps) => ready.push(steps.iter().sum()),
                    Err(err) => return (made, ready, Some(err)),
                }
            }
        });
    }
    let (mut ready, mut failed) = (Vec::new(), None);
    while let Some(done) = set.join_next().await {
        let (made, r, err) = done.map_err(|err| format!("{}: a client failed: {err}", e.name))?;
        e.pods.extend(made);
        ready.extend(r);
        failed = failed.or(err);
    }
    match failed {
        Some(err) => Err(err),
        None => Ok((t.elapsed(), ready)),
    }
}

/// Every listing and stats call kubelet makes (its PLEG, its metrics), `rounds` times
/// each, interleaved; each call's durations, or None where the daemon does not implement
/// it.
async fn time_listings(
    e: &mut Engine,
    rounds: usize,
    which: &[&'static str],
) -> Result<Vec<(&'static str, Option<Vec<Duration>>)>, String> {
    let name = e.name;
    let mut rt = e.cri()?.rt.clone();
    let pod = e.pods.first().map(|p| p.id.clone()).unwrap_or_default();
    let container = e.pods.first().and_then(|p| p.container.clone());
    let container = container.unwrap_or_default();
    let mut calls: Vec<(&'static str, Option<Vec<Duration>>)> =
        which.iter().map(|c| (*c, Some(Vec::new()))).collect();
    for _ in 0..rounds {
        for (call, slot) in calls.iter_mut() {
            let Some(samples) = slot.as_mut() else {
                continue;
            };
            let t = Instant::now();
            let r = match *call {
                "Version" => rt.version(VersionRequest::default()).await.map(drop),
                "ListContainers" => rt
                    .list_containers(ListContainersRequest::default())
                    .await
                    .map(drop),
                "ListPodSandbox" => rt
                    .list_pod_sandbox(ListPodSandboxRequest::default())
                    .await
                    .map(drop),
                "ListContainerStats" => rt
                    .list_container_stats(ListContainerStatsRequest::default())
                    .await
                    .map(drop),
                "ListPodSandboxStats" => rt
                    .list_pod_sandbox_stats(ListPodSandboxStatsRequest::default())
                    .await
                    .map(drop),
                "ListPodSandboxMetrics" => rt
                    .list_pod_sandbox_metrics(ListPodSandboxMetricsRequest::default())
                    .await
                    .map(drop),
                "ContainerStats" => rt
                    .container_stats(ContainerStatsRequest {
                        container_id: container.clone(),
                    })
                    .await
                    .map(drop),
                _ => rt
                    .pod_sandbox_stats(PodSandboxStatsRequest {
                        pod_sandbox_id: pod.clone(),
                    })
                    .await
                    .map(drop),
            };
            match r {
                Ok(()) => samples.push(t.elapsed()),
                Err(s) if s.code() == tonic::Code::Unimplemented => *slot = None,
                Err(s) => return Err(format!("{name}: {call}: {s}")),
            }
        }
    }
    Ok(calls)
}

/// Connect, then wait until the runtime and its network say they are ready.
async fn connect_ready(sock: &Path) -> Result<Cri, String> {
    let t = Instant::now();
    loop {
        let last = match connect(sock).await {
            Ok(mut cri) => match cri.rt.status(StatusRequest { verbose: false }).await {
                Ok(st) => {
                    let conds = st.into_inner().status.unwrap_or_default().conditions;
                    let ready = |c: &str| conds.iter().any(|x| x.r#type == c && x.status);
                    if ready("RuntimeReady") && ready("NetworkReady") {
                        return Ok(cri);
                    }
                    format!("not ready: {conds:?}")
                }
                Err(e) => format!("Status: {e}"),
            },
            Err(e) => e,
        };
        if t.elapsed() > Duration::from_secs(30) {
            return Err(format!("{}: {last}", sock.display()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Kubelet's namespaces for a pod and its containers: the pod's network and IPC, a PID
/// namespace per container.
fn namespaces() -> Option<NamespaceOption> {
    Some(NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    })
}

/// A pod as kubelet describes it (its log directory made first, as kubelet makes it).
fn pod_config(b: &Bench, short: &str, name: &str) -> Result<PodSandboxConfig, String> {
    let name = format!("{short}-{name}");
    let uid = format!("{name}-{}", b.pid);
    let logs = b.work.join("logs").join(&name);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    Ok(PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name,
        log_directory: logs.display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/kubepods/pod{uid}", b.cgroup_parent),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: namespaces(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn container_config(image: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: SLEEP.map(String::from).to_vec(),
        log_path: "c/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: namespaces(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Whether an ELF executable is static (no PT_INTERP program header).
fn is_static_elf(bin: &[u8]) -> bool {
    let u16_at = |o: usize| bin.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_at = |o: usize| {
        bin.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    if !bin.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..phnum as usize).all(|i| {
        let o = phoff as usize + i * phentsize as usize;
        bin.get(o..o + 4) != Some(&3u32.to_le_bytes()[..])
    })
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// containerd's sandbox image, as `docker save` writes one: a layer holding the host's
/// static busybox, which the pause process runs to sleep forever.
fn pause_image(path: &Path) -> Result<(), String> {
    let src = wharf_testbed::busybox();
    let busybox = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    if !is_static_elf(&busybox) {
        return Err(format!(
            "{} is not a static executable (install busybox-static)",
            src.display()
        ));
    }
    let rootfs = layer(vec![
        Entry::dir("bin/"),
        Entry {
            mode: 0o755,
            ..Entry::file("bin/busybox", &busybox)
        },
    ]);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": { "Entrypoint": PAUSE_ARGS },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{}", sha256_hex(&rootfs))] },
    })
    .to_string();
    let config_name = format!("{}.json", sha256_hex(config.as_bytes()));
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [PAUSE_IMAGE],
        "Layers": ["layer.tar"],
    }])
    .to_string();
    let archive = layer(vec![
        Entry::file("manifest.json", manifest.as_bytes()),
        Entry::file(&config_name, config.as_bytes()),
        Entry::file("layer.tar", &rootfs),
    ]);
    std::fs::write(path, archive).map_err(|e| format!("{}: {e}", path.display()))
}

/// The CNI chain both engines use: a bridge of ours with host-local addresses (kept in the
/// work dir), and portmap.
fn cni_config(dir: &Path, ipam: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "benchnet",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "benchbr0",
                "isGateway": true,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": "10.99.0.0/16" }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": ipam.display().to_string(),
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    });
    let file = dir.join("10-benchnet.conflist");
    std::fs::write(&file, serde_json::to_string_pretty(&conf).unwrap())
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// A private containerd with the CRI plugin: own root, state, sockets, the bench's CNI
/// configuration, runc with cgroupfs (its state on the tmpfs too), the fixture registry
/// over plain HTTP, the sandbox image of [`pause_image`].
fn containerd(b: &Bench, state: &Path, cni: &Path, registry: &str) -> Result<Daemon, String> {
    let dir = b.work.join("containerd");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let sock = dir.join("containerd.sock");
    let config = format!(
        r#"version = 2
root = "{dir}/root"
state = "{state}/containerd"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{dir}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{cni}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{state}/runc"
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{registry}"]
      endpoint = ["http://{registry}"]
"#,
        dir = dir.display(),
        state = state.display(),
        sock = sock.display(),
        cni = cni.display(),
    );
    let file = dir.join("config.toml");
    std::fs::write(&file, config).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Daemon {
        program: "containerd".into(),
        args: vec!["--config".into(), file.display().to_string()],
        env: Vec::new(),
        sock,
        log: dir.join("containerd.log"),
        child: None,
    })
}

/// Wharf's daemon: private root and run directory, the bench's cgroup parent, CNI
/// configuration and plugins, and a config file making the first CNI network the default.
fn wharf_daemon(b: &Bench, state: &Path, cni: &Path) -> Result<Daemon, String> {
    let dir = b.work.join("wharf");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"network": {"default": "cni"}, "registries": {}}"#,
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    let sock = dir.join("wharf.sock");
    let s = |p: &Path| p.display().to_string();
    Ok(Daemon {
        program: wharf_bench::wharf_bin(),
        args: vec!["daemon".into(), "--listen".into(), s(&sock)],
        env: vec![
            ("WHARF_ROOT".into(), s(&dir.join("root"))),
            ("WHARF_RUN".into(), s(&state.join("wharf"))),
            ("WHARF_CGROUP_PARENT".into(), b.cgroup_parent.clone()),
            ("WHARF_CONFIG".into(), s(&config)),
            ("WHARF_CNI_CONF_DIR".into(), s(cni)),
            ("WHARF_CNI_BIN_DIR".into(), "/usr/lib/cni".into()),
            ("WHARF_CNI_CACHE_DIR".into(), s(&b.work.join("cni-cache"))),
        ],
        sock,
        log: dir.join("daemon.log"),
        child: None,
    })
}

/// With `CRI_POD_SMAPS=DIR`, copy the daemon's /proc/PID/smaps to `DIR/<engine>.<suffix>`;
/// the directory and the daemon's pid, for more of the same.
fn save_smaps(e: &Engine, suffix: &str) -> Option<(PathBuf, i32)> {
    let dir = PathBuf::from(std::env::var_os("CRI_POD_SMAPS")?);
    let pid = e.daemon.pid()?;
    let to = dir.join(format!("{}.{suffix}", e.name));
    let _ = std::fs::copy(format!("/proc/{pid}/smaps"), to);
    Some((dir, pid))
}

/// The file offsets of the resident pages of process `pid`'s executable file mappings, one
/// `PATH OFFSET` line each (from /proc/PID/pagemap): which functions a call left mapped,
/// once matched with the binary's symbols.
fn resident_code_pages(pid: i32) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let Ok(mut pagemap) = std::fs::File::open(format!("/proc/{pid}/pagemap")) else {
        return String::new();
    };
    let mut out = String::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [range, "r-xp", offset, _, _, path] = f[..] else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi), Ok(offset)) = (
            u64::from_str_radix(lo, 16),
            u64::from_str_radix(hi, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        let mut entries = vec![0u8; ((hi - lo) / 4096 * 8) as usize];
        if pagemap.seek(SeekFrom::Start(lo / 4096 * 8)).is_err()
            || pagemap.read_exact(&mut entries).is_err()
        {
            continue;
        }
        for (i, e) in entries.chunks_exact(8).enumerate() {
            let e = u64::from_le_bytes(e.try_into().unwrap_or_default());
            if e >> 63 == 1 {
                out.push_str(&format!("{path} {:#x}\n", offset + i as u64 * 4096));
            }
        }
    }
    out
}

/// VmRSS (from status) and Pss (from smaps_rollup) of a process, in kB.
fn usage(pid: i32) -> Option<Usage> {
    let field = |text: &str, name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    Some(Usage {
        rss: field(&status, "VmRSS:")?,
        pss: field(&rollup, "Pss:")?,
        anon: field(&status, "RssAnon:")?,
        file: field(&status, "RssFile:")?,
    })
}

fn sum(pids: &[i32]) -> Result<(usize, Usage), String> {
    let mut total = Usage::default();
    for pid in pids {
        total = total + usage(*pid).ok_or_else(|| format!("pid {pid} is gone"))?;
    }
    Ok((pids.len(), total))
}

fn daemon_usage(e: &Engine) -> Result<Usage, String> {
    e.daemon
        .pid()
        .and_then(usage)
        .ok_or_else(|| format!("{}: the daemon is gone", e.name))
}

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    // At least one of each: the report takes medians (and cleanup follows it).
    let mut count = |default: usize| {
        args.next()
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
            .max(1)
    };
    let iterations = count(30);
    let pods = count(100);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let pid = std::process::id();
    let b = Bench {
        image: std::env::var("WHARF_BENCH_IMAGE")
            .unwrap_or_else(|_| "127.0.0.1:35000/fixtures/busybox:latest".into()),
        work: PathBuf::from(format!("/var/tmp/wharf-bench-cri-{pid}")),
        cgroup_parent: format!("/wharf-bench-cri-{pid}"),
        pid,
        absent: OUTSIDE_DIRS
            .into_iter()
            .filter(|d| !Path::new(d).exists())
            .collect(),
    };
    std::fs::create_dir_all(&b.work).unwrap();
    // Runtime state goes where hosts keep it, on a tmpfs (/run), for both engines alike.
    let run_fs = b.work.join("run");
    std::fs::create_dir_all(&run_fs).unwrap();
    let mounted = run_ok(
        Command::new("mount")
            .args(["-t", "tmpfs", "wharf-bench-cri"])
            .arg(&run_fs),
        "mount the runtime tmpfs",
    );
    let mut engines = Vec::new();
    let setup = mounted.and_then(|()| {
        let cni = b.work.join("cni");
        cni_config(&cni, &b.work.join("cni-ipam"))?;
        pause_image(&b.work.join("pause.tar"))?;
        let registry = b.image.split('/').next().unwrap_or_default().to_string();
        // `CRI_POD_ONLY=wharf` (or containerd) runs one engine, for a quicker look at it.
        let only = std::env::var("CRI_POD_ONLY").ok();
        let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
        let mut daemons = Vec::new();
        if wanted("wharf") {
            daemons.push(("wharf", "w", Kind::Wharf, wharf_daemon(&b, &run_fs, &cni)?));
        }
        if wanted("containerd") {
            let daemon = containerd(&b, &run_fs, &cni, &registry)?;
            daemons.push(("containerd", "c", Kind::Containerd, daemon));
        }
        for (name, short, kind, daemon) in daemons {
            engines.push(Engine {
                name,
                short,
                kind,
                daemon,
                cri: None,
                pods: Vec::new(),
                samples: Samples::default(),
                memory: None,
                scale: None,
                fresh: Usage::default(),
                stop_running: Duration::ZERO,
            });
        }
        Ok(())
    });
    let outcome = setup.and_then(|()| bench(&b, &mut engines, iterations, pods));
    if outcome.is_ok() {
        report(&b, iterations, pods, &mut engines);
    }
    cleanup(&b, &mut engines);
    if let Err(err) = outcome {
        eprintln!("cri_pod: {err}");
        std::process::exit(1);
    }
}

fn list_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// Pull with both (host network), stop both, move into a network namespace of our own,
/// start both again, then measure.
fn bench(b: &Bench, engines: &mut [Engine], iterations: usize, pods: usize) -> Result<(), String> {
    let rt = runtime();
    for e in engines.iter_mut() {
        e.daemon.start()?;
        let mut cri = rt.block_on(connect_ready(&e.daemon.sock))?;
        rt.block_on(cri.img.pull_image(PullImageRequest {
            image: Some(ImageSpec {
                image: b.image.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .map_err(|err| format!("{}: PullImage {}: {err}", e.name, b.image))?;
        if e.kind == Kind::Containerd {
            run_ok(
                Command::new("ctr")
                    .arg("--address")
                    .arg(&e.daemon.sock)
                    .args(["-n", "k8s.io", "images", "import"])
                    .arg(b.work.join("pause.tar")),
                "ctr images import (the sandbox image)",
            )?;
            let st = rt
                .block_on(cri.img.image_status(ImageStatusRequest {
                    image: Some(ImageSpec {
                        image: PAUSE_IMAGE.into(),
                        ..Default::default()
                    }),
                    verbose: false,
                }))
                .map_err(|err| format!("containerd: ImageStatus {PAUSE_IMAGE}: {err}"))?;
            if st.into_inner().image.is_none() {
                return Err(format!("containerd does not see {PAUSE_IMAGE}"));
            }
        }
        drop(cri);
        e.daemon.stop();
    }
    drop(rt);

    // From here on, networks are made in a namespace of our own (single-threaded: the
    // whole process moves, and the daemons we start inherit it).
    if threads() != 1 {
        return Err(format!("{} threads left before unshare", threads()));
    }
    // SAFETY: unshare of the calling (only) thread.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if unshared != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        ));
    }
    run_ok(
        Command::new("ip").args(["link", "set", "lo", "up"]),
        "lo up",
    )?;
    let rt = runtime();
    for e in engines.iter_mut() {
        e.daemon.start()?;
        e.cri = Some(rt.block_on(connect_ready(&e.daemon.sock))?);
    }
    std::thread::sleep(Duration::from_secs(1));
    for e in engines.iter_mut() {
        e.fresh = daemon_usage(e)?;
    }

    // One warm-up pod each, removed with StopPodSandbox while its container runs (the
    // CRI says the container is then killed), then `iterations` rounds in which each
    // engine makes and removes one pod.
    for e in engines.iter_mut() {
        rt.block_on(e.pod_up(b, "warmup"))?;
        let id = e.pods.last().unwrap().id.clone();
        e.stop_running = rt.block_on(e.pod_down(&id, false))?[1];
    }
    for i in 0..iterations {
        for e in engines.iter_mut() {
            let [sandbox, create, start] = rt.block_on(e.pod_up(b, &i.to_string()))?;
            let id = e.pods.last().unwrap().id.clone();
            let [stop_container, stop, remove] = rt.block_on(e.pod_down(&id, true))?;
            let s = &mut e.samples;
            s.sandbox.push(sandbox);
            s.create.push(create);
            s.start.push(start);
            s.ready.push(sandbox + create + start);
            s.stop_container.push(stop_container);
            s.stop.push(stop);
            s.remove.push(remove);
            s.teardown.push(stop_container + stop + remove);
        }
    }

    // Memory: one engine at a time, `pods` pods running.
    for e in engines.iter_mut() {
        // Idle: three seconds without a request (Wharf's engine threads go after two, and it
        // trims its memory after two and a half).
        std::thread::sleep(Duration::from_secs(3));
        let idle = daemon_usage(e)?;
        let pid = e.daemon.pid().unwrap_or(0);
        let cpu_before = cpu_ms(pid);
        let (total, ready) = rt.block_on(start_concurrently(e, b, pods, CLIENTS))?;
        let cpu_after = cpu_ms(pid);
        let cpu = (
            cpu_after.0.saturating_sub(cpu_before.0),
            cpu_after.1.saturating_sub(cpu_before.1),
        );
        // Let the shims settle (Wharf's trims its memory once it has been quiet for 200 ms).
        std::thread::sleep(Duration::from_secs(2));
        let loaded = daemon_usage(e)?;
        // The daemon's mappings with the pods running, before the round below.
        save_smaps(e, "loaded.smaps");
        let (shims, pause) = e.helpers(b, &processes());
        let shims = sum(&shims)?;
        let pause = sum(&pause)?;
        if std::env::var_os("CRI_POD_PER_CALL").is_some() {
            // What one call of each kind leaves resident, each from a quiet daemon.
            for call in LISTINGS {
                std::thread::sleep(Duration::from_secs(3));
                let before = daemon_usage(e)?;
                rt.block_on(time_listings(e, 1, &[call]))?;
                let after = daemon_usage(e)?;
                println!(
                    "{}: {call}: anon {} -> {}, file {} -> {} kB",
                    e.name, before.anon, after.anon, before.file, after.file
                );
            }
            std::thread::sleep(Duration::from_secs(3));
        }
        let calls = rt.block_on(time_listings(e, LIST_ROUNDS, &LISTINGS))?;
        let listed = daemon_usage(e)?;
        // The daemon's mappings right after the round, to see what its RSS holds, and
        // which of its code pages are resident.
        if let Some((dir, pid)) = save_smaps(e, "smaps") {
            let to = dir.join(format!("{}.code-pages", e.name));
            let _ = std::fs::write(to, resident_code_pages(pid));
        }
        std::thread::sleep(Duration::from_secs(3));
        let listed_quiet = daemon_usage(e)?;
        e.memory = Some(Memory {
            fresh: e.fresh,
            idle,
            loaded,
            shims,
            pause,
            listed,
            listed_quiet,
        });
        e.scale = Some(Scale {
            total,
            ready,
            calls,
            cpu,
        });
        let ids: Vec<String> = e.pods.iter().map(|p| p.id.clone()).collect();
        for id in ids {
            rt.block_on(e.pod_down(&id, true))?;
        }
    }
    Ok(())
}

/// Medians of the timed runs, memory, and Wharf's ratios to containerd.
fn report(b: &Bench, iterations: usize, pods: usize, engines: &mut [Engine]) {
    let ratio = |w: Duration, c: Duration| w.as_secs_f64() / c.as_secs_f64();
    println!(
        "{} `{}` in one container per pod, over the CRI, {iterations} iterations each, medians:",
        b.image,
        SLEEP.join(" ")
    );
    type Pick = fn(&mut Samples) -> &mut Vec<Duration>;
    // One timed phase: each engine's median total and the medians of its calls, then the
    // ratio of the totals.
    let mut phase = |title: &str, total: Pick, calls: [(&str, Pick); 3]| {
        println!("  {title}:");
        let mut totals = Vec::new();
        for e in engines.iter_mut() {
            let s = &mut e.samples;
            let m = median(total(s));
            totals.push(m);
            let parts: Vec<String> = calls
                .iter()
                .map(|(name, pick)| format!("{name} {}", ms(median(pick(s)))))
                .collect();
            println!("    {:<12} {:>11}   ({})", e.name, ms(m), parts.join(", "));
        }
        if let [wharf, containerd] = totals[..] {
            println!("    wharf / containerd = {:.2}", ratio(wharf, containerd));
        }
    };
    phase(
        "pod ready (RunPodSandbox + CreateContainer + StartContainer, until running)",
        |s| &mut s.ready,
        [
            ("RunPodSandbox", |s| &mut s.sandbox),
            ("CreateContainer", |s| &mut s.create),
            ("StartContainer", |s| &mut s.start),
        ],
    );
    phase(
        "teardown as kubelet does it (StopContainer with timeout 0 + StopPodSandbox + RemovePodSandbox)",
        |s| &mut s.teardown,
        [
            ("StopContainer", |s| &mut s.stop_container),
            ("StopPodSandbox", |s| &mut s.stop),
            ("RemovePodSandbox", |s| &mut s.remove),
        ],
    );
    println!("  StopPodSandbox with the container still running (the warm-up pod, once):");
    for e in engines.iter() {
        println!("    {:<12} {:>11}", e.name, ms(e.stop_running));
    }

    println!("{pods} pods started by {CLIENTS} concurrent clients:");
    let mut totals = Vec::new();
    for e in engines.iter_mut() {
        let Some(sc) = &mut e.scale else { continue };
        let p50 = median(&mut sc.ready);
        let p99 = quantile(&mut sc.ready, 0.99);
        println!(
            "    {:<12} all running after {}   pod ready p50 {}, p99 {} (p99 / p50 = {:.2})",
            e.name,
            ms(sc.total),
            ms(p50),
            ms(p99),
            ratio(p99, p50)
        );
        println!(
            "    {:<12} CPU over the start: daemon {} ms, its waited-for children {} ms ({:.1} and {:.1} ms per pod)",
            "",
            sc.cpu.0,
            sc.cpu.1,
            sc.cpu.0 as f64 / pods as f64,
            sc.cpu.1 as f64 / pods as f64
        );
        totals.push(sc.total);
    }
    if let [w, c] = totals[..] {
        println!("    wharf / containerd (all running) = {:.2}", ratio(w, c));
    }
    println!("listing and stats calls with {pods} pods running, {LIST_ROUNDS} each (median, p99):");
    for (i, call) in LISTINGS.iter().enumerate() {
        let mut medians = Vec::new();
        let mut cells = Vec::new();
        for e in engines.iter_mut() {
            let Some(sc) = &mut e.scale else { continue };
            match &mut sc.calls[i].1 {
                Some(samples) if !samples.is_empty() => {
                    let m = median(samples);
                    medians.push(m);
                    cells.push(format!(
                        "{} {} / {}",
                        e.name,
                        ms(m),
                        ms(quantile(samples, 0.99))
                    ));
                }
                _ => cells.push(format!("{} not implemented", e.name)),
            }
        }
        let r = match medians[..] {
            [w, c] => format!("   wharf / containerd = {:.2}", ratio(w, c)),
            _ => String::new(),
        };
        println!("    {call:<22} {}{r}", cells.join(", "));
    }

    println!("memory with {pods} pods running, kB (RSS / PSS):");
    let kb = |u: Usage| format!("{} / {}", u.rss, u.pss);
    let per_pod = |u: Usage| format!("{} / {}", u.rss / pods as u64, u.pss / pods as u64);
    let mut cost = Vec::new();
    for e in engines.iter() {
        let Some(m) = &e.memory else { continue };
        let growth = Usage {
            rss: m.loaded.rss.saturating_sub(m.idle.rss),
            pss: m.loaded.pss.saturating_sub(m.idle.pss),
            ..Usage::default()
        };
        println!("  {}:", e.name);
        println!(
            "    daemon: fresh {}, idle after the timed runs {}, with the pods {} (anon {}, file {}; +{} per pod)",
            kb(m.fresh),
            kb(m.idle),
            kb(m.loaded),
            m.loaded.anon,
            m.loaded.file,
            per_pod(growth)
        );
        println!(
            "    daemon after a round of every listing and stats call: {} (anon {}, file {}), three seconds later {} (anon {}, file {})",
            kb(m.listed),
            m.listed.anon,
            m.listed.file,
            kb(m.listed_quiet),
            m.listed_quiet.anon,
            m.listed_quiet.file
        );
        println!(
            "    shims: {} processes, {} ({} per pod)",
            m.shims.0,
            kb(m.shims.1),
            per_pod(m.shims.1)
        );
        if m.pause.0 > 0 {
            println!(
                "    pause: {} processes, {} ({} per pod)",
                m.pause.0,
                kb(m.pause.1),
                per_pod(m.pause.1)
            );
        }
        let engine = growth + m.shims.1;
        println!(
            "    per pod (daemon growth + shims): {}{}",
            per_pod(engine),
            if m.pause.0 > 0 {
                format!(", with the pause process {}", per_pod(engine + m.pause.1))
            } else {
                String::new()
            }
        );
        cost.push((engine, engine + m.pause.1));
    }
    if let [(w, _), (c, c_pause)] = cost[..] {
        println!(
            "  per pod, wharf / containerd: RSS {:.2} (with pause {:.2}), PSS {:.2} (with pause {:.2})",
            w.rss as f64 / c.rss as f64,
            w.rss as f64 / c_pause.rss as f64,
            w.pss as f64 / c.pss as f64,
            w.pss as f64 / c_pause.pss as f64
        );
    }
}

/// Remove every pod through its daemon, stop the daemons, kill whatever of this run is
/// left (and say so), unmount and remove the work dir and the cgroups.
fn cleanup(b: &Bench, engines: &mut [Engine]) {
    let rt = runtime();
    for e in engines.iter_mut() {
        e.cri = None;
        match e.daemon.child.as_mut().map(|c| c.try_wait()) {
            None => continue,
            Some(Ok(None)) => {}
            Some(_) => {
                eprintln!("cri_pod: cleanup: the {} daemon is gone", e.name);
                continue;
            }
        }
        match rt.block_on(connect(&e.daemon.sock)) {
            Ok(cri) => {
                e.cri = Some(cri);
                rt.block_on(e.remove_all());
            }
            Err(err) => eprintln!("cri_pod: cleanup: {err}"),
        }
        e.cri = None;
    }
    drop(rt);
    // Shims still running (their daemon gone) and anything in our cgroups: killed.
    let procs = processes();
    let mut leftover = Vec::new();
    for e in engines.iter() {
        let (shims, pause) = e.helpers(b, &procs);
        leftover.extend(shims.iter().chain(&pause).copied());
    }
    for e in engines.iter_mut() {
        e.daemon.stop();
    }
    for dir in wharf_bench::cgroup_dirs(&b.cgroup_parent) {
        leftover.extend(wharf_bench::pids_below(&dir));
    }
    leftover.sort();
    leftover.dedup();
    if !leftover.is_empty() {
        eprintln!(
            "cri_pod: cleanup: killing {} leftover processes",
            leftover.len()
        );
    }
    for pid in &leftover {
        // SAFETY: kill(2) of a shim of this run or a process in the benchmark's cgroups.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let t = Instant::now();
    while leftover
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    // A containerd shim killed leaves its socket in /run/containerd/s (wherever the state
    // directory is); each task's bundle says which.
    let tasks = b.work.join("run/containerd/io.containerd.runtime.v2.task");
    for bundle in list_dir(&tasks).iter().flat_map(|ns| list_dir(ns)) {
        if let Ok(addr) = std::fs::read_to_string(bundle.join("address"))
            && let Some(path) = addr.trim().strip_prefix("unix://")
        {
            let _ = std::fs::remove_file(path);
        }
    }
    unmount_below(&b.work);
    let _ = std::fs::remove_dir_all(&b.work);
    remove_cgroup_tree(&b.cgroup_parent);
    for d in &b.absent {
        let _ = std::fs::remove_dir(d);
    }
}
