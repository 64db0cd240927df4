//! `wharf play`: Kubernetes manifests on this host. Pods are played as they are; each
//! workload (Deployment, ReplicaSet, DaemonSet, StatefulSet, Job) gets its first pods at
//! once and then a controller process of its own (`wharf kube-controller DIR`, detached,
//! like a pod's shim) that keeps them as its kind asks, with no CLI running. Its record
//! lives in `<root>/kube/workloads/<namespace>.<kind>.<name>/`:
//!
//! ```text
//! manifest.yaml    the manifest and the --configmap files it was played with
//! options.json     the workload, --network and --pull of the play
//! controller.pid   "<pid> <start time>" of its controller
//! controller.log   what the controller did (pods made and removed) and its errors
//! status.json      a finished Job's outcome
//! ```
//!
//! `play --down` stops the controller, then removes the pods (found by their owner label).
//! How a controller runs (detached, in a cgroup of its own, its pid recorded) is the
//! engine's ([`wharf_engine::controllers`]); what it does in its passes is this module's.
//! `wharf system restore` starts again the controllers of workloads still recorded.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use wharf_engine::controllers::Controller;
use wharf_engine::{Engine, PodFilter};
use wharf_kube::{self as kube, PlanOptions, PlayPlan, PullPolicy, Workload};

use super::args::Cli;
use super::{convert, ensure_image, open, output};

/// What a workload's controller needs besides its manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Options {
    kind: kube::WorkloadKind,
    name: String,
    network: String,
    pull: Option<String>,
}

/// A finished Job's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Outcome {
    complete: bool,
    message: Option<String>,
}

/// What `wharf play` does with its manifest.
#[derive(Debug, Clone, Copy)]
pub enum PlayMode {
    /// Play it; with `replace`, after taking down what an earlier play made.
    Up { replace: bool },
    /// Take it down; with `force`, the volumes of its claims too.
    Down { force: bool },
}

/// `wharf play FILE` (`--down`, `--replace`).
pub fn play(
    cli: &Cli,
    file: &Path,
    mode: PlayMode,
    network: &str,
    (pull, configmaps): (Option<&str>, &[PathBuf]),
) -> Result<i32> {
    if let Some(p) = pull
        && !matches!(p, "always" | "missing" | "never")
    {
        bail!("invalid --pull {p:?}: always, missing or never");
    }
    // Each warning once, however many pods or passes bring it up.
    let mut warned = std::collections::HashSet::new();
    let mut warn = |w: String| {
        if warned.insert(w.clone()) {
            eprintln!("wharf: warning: {w}");
        }
    };
    let mut text = read_text(file)?;
    let mut manifest =
        kube::parse(&text).with_context(|| format!("manifest {}", file.display()))?;
    for f in configmaps {
        let more = convert::read_bounded(
            std::fs::File::open(f).with_context(|| format!("read {}", f.display()))?,
            kube::MAX_MANIFEST_BYTES,
            &format!("--configmap {}", f.display()),
        )?;
        let objects = kube::parse_objects(&more, &f.display().to_string())?;
        manifest
            .add_objects(objects)
            .with_context(|| format!("--configmap {}", f.display()))?;
        text.push_str("\n---\n");
        text.push_str(&more);
    }
    manifest.add_stored_objects(
        kube::ObjectStore::new(&cli.root)
            .all()
            .context("Wharf's ConfigMaps and Secrets")?,
    );
    let engine = open(cli)?;
    let opts = PlanOptions::for_host(&cli.root);
    let replace = match mode {
        PlayMode::Down { force } => return play_down(&engine, &manifest, &opts, force),
        PlayMode::Up { replace } => replace,
    };
    let mut plans = Vec::new();
    for name in manifest.pod_names() {
        let plan = kube::plan_with(&manifest, Some(name), &opts)
            .with_context(|| format!("manifest {}: pod {name}", file.display()))?;
        plans.push(plan);
    }
    if replace {
        // Only once the manifest is known to be playable: a bad edit keeps what runs.
        play_down(&engine, &manifest, &opts, false)?;
    }
    for name in plans.iter().filter_map(|p| p.pod.name.as_deref()) {
        kube::ensure_new(&engine, name)?;
    }
    for w in manifest.workloads() {
        if controller_of(&engine, w)
            .dir()
            .join("options.json")
            .exists()
        {
            bail!(
                "{} {} already runs: take it down first (wharf play --down), or play with --replace",
                w.kind.as_str(),
                w.name
            );
        }
    }
    for w in manifest.warnings() {
        warn(w.clone());
    }
    let general: std::collections::HashSet<&String> = manifest.warnings().iter().collect();
    let mut made: Vec<String> = Vec::new();
    let mut started: Vec<&Workload> = Vec::new();
    let result = (|| -> Result<()> {
        for mut plan in plans {
            let name = plan.pod.name.clone().unwrap_or_default();
            // The manifest's own warnings were said already, without a pod's name.
            for w in plan.warnings.iter().filter(|w| !general.contains(*w)) {
                warn(format!("pod {name}: {w}"));
            }
            prepare(&engine, &mut plan, network, pull).with_context(|| format!("pod {name}"))?;
            let played =
                kube::play(&engine, plan).with_context(|| format!("playing pod {name}"))?;
            made.push(played.pod.id.clone());
            println!("Pod:\n{}\nContainers:", played.pod.id);
            for c in &played.containers {
                println!("{}", c.id);
            }
        }
        for w in manifest.workloads() {
            let label = format!("{} {}", w.kind.as_str(), w.name);
            let controller = controller_of(&engine, w);
            let dir = controller.dir();
            write_record(dir, &text, w, network, pull)
                .with_context(|| format!("{label}: record {}", dir.display()))?;
            started.push(w);
            // The first pods now, so that what is wrong with them is said here.
            let mut state = kube::ControllerState::default();
            let mut first_warnings = Vec::new();
            let (lines, _) = kube::reconcile(
                &engine,
                &manifest,
                w,
                &opts,
                &mut state,
                &mut |plan: &mut PlayPlan| {
                    first_warnings.extend(
                        plan.warnings
                            .iter()
                            .filter(|x| !general.contains(*x))
                            .map(|x| format!("{label}: {x}")),
                    );
                    prepare(&engine, plan, network, pull).map_err(engine_error)
                },
            )
            .with_context(|| label.clone())?;
            for x in first_warnings {
                warn(x);
            }
            println!("{}:", label);
            for l in lines {
                println!("{l}");
            }
            spawn_controller(cli, &controller)
                .with_context(|| format!("{label}: its controller"))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        // All or nothing: what did come up goes again.
        for w in started {
            let _ = take_down_workload(&engine, w, Some(Duration::ZERO));
        }
        for id in made {
            let _ = kube::play_down(&engine, &id, Some(Duration::ZERO));
        }
        return Err(e);
    }
    Ok(0)
}

/// The pull policy and `--network` of the play applied to a pod's plan; its images
/// pulled as that policy says.
fn prepare(engine: &Engine, plan: &mut PlayPlan, network: &str, pull: Option<&str>) -> Result<()> {
    if network != "default" && plan.pod.network != wharf_engine::model::NetworkMode::Host {
        plan.pod.network = convert::network(network);
    }
    for img in &plan.images {
        let policy = pull.unwrap_or(match img.policy {
            PullPolicy::Always => "always",
            PullPolicy::IfNotPresent => "missing",
            PullPolicy::Never => "never",
        });
        ensure_image(engine, &img.image, policy)?;
    }
    Ok(())
}

/// A CLI step's error where the engine's kind is expected (its whole chain as the text).
fn engine_error(e: anyhow::Error) -> wharf_engine::Error {
    match e.downcast::<wharf_engine::Error>() {
        Ok(e) => e,
        Err(e) => wharf_engine::Error::Other(format!("{e:#}")),
    }
}

/// `play --down`: the manifest's pods (by name: a pod whose ConfigMaps are not given
/// again still comes down), then its workloads (controller first, then their pods).
fn play_down(
    engine: &Engine,
    manifest: &kube::Manifest,
    opts: &PlanOptions,
    force: bool,
) -> Result<i32> {
    let mut claims = std::collections::BTreeSet::new();
    for name in manifest.pod_names() {
        let plan = kube::plan_with(manifest, Some(name), opts).ok();
        claims.extend(plan.iter().flat_map(|p| kube::claim_names(&p.volumes)));
        let grace = plan.and_then(|p| p.grace_period);
        let name = name.to_string();
        // What the wait is for: a pod's containers may take their whole grace period.
        if engine.pod(&name).is_ok() {
            match grace {
                Some(g) => eprintln!("wharf: stopping pod {name} (grace period {g}s)"),
                None => eprintln!("wharf: stopping pod {name}"),
            }
        }
        match kube::play_down(engine, &name, grace.map(Duration::from_secs)) {
            Ok(pod) => println!("{}", pod.id),
            Err(wharf_engine::Error::NotFound { .. }) => {
                eprintln!("wharf: pod {name} does not exist")
            }
            Err(e) => return Err(e).with_context(|| format!("taking pod {name} down")),
        }
    }
    for w in manifest.workloads() {
        let label = format!("{} {}", w.kind.as_str(), w.name);
        let n =
            take_down_workload(engine, w, None).with_context(|| format!("taking {label} down"))?;
        if n == 0 && !controller_of(engine, w).dir().exists() {
            eprintln!("wharf: {label} does not exist");
        }
        // The template's claims, and each pod's of a StatefulSet.
        if let Ok(plan) = kube::plan_workload_pod(manifest, w, &w.name, 0, opts) {
            claims.extend(kube::claim_names(&plan.volumes));
        }
        for i in 0..w.replicas {
            claims.extend(
                w.claims(&format!("{}-{i}", w.name))
                    .into_iter()
                    .map(|(_, c)| c),
            );
        }
    }
    let mut code = 0;
    for claim in claims {
        if !force {
            if engine.volume(&claim).is_ok() {
                eprintln!(
                    "wharf: volume {claim} (persistentVolumeClaim) is kept: play --down --force removes it"
                );
            }
            continue;
        }
        match engine.remove_volume(&claim) {
            Ok(()) => println!("{claim}"),
            Err(wharf_engine::Error::NotFound { .. }) => {}
            Err(e) => {
                eprintln!("wharf: volume {claim}: {e}");
                code = 1;
            }
        }
    }
    Ok(code)
}

/// Stop workload `w`'s controller, remove its pods and its record. Returns how many
/// pods were removed.
fn take_down_workload(engine: &Engine, w: &Workload, grace: Option<Duration>) -> Result<usize> {
    let controller = controller_of(engine, w);
    // First the controller, so that it makes no pod while they go.
    controller.stop();
    let _ = std::fs::remove_file(controller.dir().join("options.json"));
    let pods = owned_pods(engine, w)?;
    // Together: the replicas share one grace period.
    let ids: Vec<&str> = pods.iter().map(|p| p.row.id.as_str()).collect();
    for p in &pods {
        eprintln!("wharf: stopping pod {}", p.row.name);
    }
    engine.stop_pods(&ids, grace)?;
    for p in &pods {
        let pod = kube::play_down(engine, &p.row.id, grace)?;
        println!("{}", pod.id);
    }
    // Last: a shim the controller started sits in its cgroup until the shim is idle.
    controller
        .remove_cgroup()
        .with_context(|| format!("remove the cgroup of {}'s controller", w.name))?;
    controller.remove_record()?;
    Ok(pods.len())
}

fn owned_pods(engine: &Engine, w: &Workload) -> Result<Vec<wharf_engine::PodView>> {
    let mut pods = engine.list_pods(&PodFilter {
        labels: [(kube::LABEL_OWNER.to_string(), w.owner())].into(),
        ..Default::default()
    })?;
    pods.sort_by(|a, b| a.row.name.cmp(&b.row.name));
    Ok(pods)
}

/// Workload `w`'s controller, recorded as `<namespace>.<kind>.<name>`.
fn controller_of<'e>(engine: &'e Engine, w: &Workload) -> Controller<'e> {
    engine.controller(&format!(
        "{}.{}.{}",
        w.namespace.as_deref().unwrap_or("default"),
        w.kind.as_str().to_lowercase(),
        w.name
    ))
}

fn write_record(
    dir: &Path,
    text: &str,
    w: &Workload,
    network: &str,
    pull: Option<&str>,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let _ = std::fs::remove_file(dir.join("status.json"));
    std::fs::write(dir.join("manifest.yaml"), text)?;
    let opts = Options {
        kind: w.kind,
        name: w.name.clone(),
        network: network.to_string(),
        pull: pull.map(str::to_string),
    };
    // Written last: its presence is what keeps a controller going.
    std::fs::write(dir.join("options.json"), serde_json::to_vec(&opts)?)?;
    Ok(())
}

/// Start the controller, `wharf kube-controller DIR` on this command's state, as the
/// engine starts one (detached, in its own cgroup); it is reparented to init once this
/// command exits.
fn spawn_controller(cli: &Cli, controller: &Controller<'_>) -> Result<()> {
    let args: Vec<OsString> = vec![
        "--root".into(),
        cli.root.clone().into(),
        "--run-dir".into(),
        cli.run.clone().into(),
        "--config".into(),
        cli.config.clone().into(),
        "kube-controller".into(),
        controller.dir().into(),
    ];
    let started = controller.start(&args)?;
    if let Some(e) = started.cgroup_error {
        // It still works where it is, as a shim that could not move does.
        eprintln!("wharf: warning: the controller stays in this command's cgroup: {e}");
    }
    Ok(())
}

/// `wharf system restore`'s part for plays: start the controller of each workload still
/// recorded (not taken down, not a finished Job) whose controller does not run, as after
/// a reboot. Returns, per controller started or failed, the workload and the outcome.
pub fn restore_controllers(cli: &Cli, engine: &Engine) -> Vec<(String, Result<()>)> {
    let mut out = Vec::new();
    for controller in engine.controllers() {
        let dir = controller.dir();
        let Ok(bytes) = std::fs::read(dir.join("options.json")) else {
            continue;
        };
        if dir.join("status.json").exists() || controller.running() {
            continue;
        }
        let done = serde_json::from_slice::<Options>(&bytes)
            .with_context(|| format!("read {}", dir.join("options.json").display()))
            .map(|o| format!("{} {}", o.kind.as_str(), o.name));
        let label = done
            .as_ref()
            .map_or_else(|_| dir.display().to_string(), String::clone);
        out.push((label, done.and_then(|_| spawn_controller(cli, &controller))));
    }
    out
}

/// `wharf kube-controller DIR`: keep the workload recorded in DIR, a pass a second,
/// until its record goes (`play --down`) or, for a Job, it completes or fails.
pub fn controller(cli: &Cli, dir: &Path) -> Result<i32> {
    let opts: Options = serde_json::from_slice(
        &std::fs::read(dir.join("options.json"))
            .with_context(|| format!("read {}", dir.join("options.json").display()))?,
    )?;
    let text = std::fs::read_to_string(dir.join("manifest.yaml"))?;
    let manifest = kube::parse(&text)?;
    let w = manifest
        .workloads()
        .iter()
        .find(|w| w.kind == opts.kind && w.name == opts.name)
        .with_context(|| format!("the manifest has no {} {}", opts.kind.as_str(), opts.name))?
        .clone();
    let plan_opts = PlanOptions::for_host(&cli.root);
    let mut state = kube::ControllerState::default();
    let log = |msg: &str| {
        eprintln!(
            "{} {} {}: {msg}",
            wharf_sys::time::now_rfc3339_nano(),
            opts.kind.as_str(),
            opts.name
        )
    };
    log("controller started");
    loop {
        if !dir.join("options.json").exists() {
            log("taken down: controller stops");
            return Ok(0);
        }
        let pass = open(cli).and_then(|engine| {
            Ok(kube::reconcile(
                &engine,
                &manifest,
                &w,
                &plan_opts,
                &mut state,
                &mut |plan: &mut PlayPlan| {
                    prepare(&engine, plan, &opts.network, opts.pull.as_deref())
                        .map_err(engine_error)
                },
            )?)
        });
        match pass {
            Ok((lines, progress)) => {
                for l in lines {
                    log(&l);
                }
                let outcome = match progress {
                    kube::Progress::Active => None,
                    kube::Progress::Complete => Some(Outcome {
                        complete: true,
                        message: None,
                    }),
                    kube::Progress::Failed(m) => Some(Outcome {
                        complete: false,
                        message: Some(m),
                    }),
                };
                if let Some(o) = outcome {
                    log(if o.complete {
                        "Job complete"
                    } else {
                        "Job failed"
                    });
                    std::fs::write(dir.join("status.json"), serde_json::to_vec(&o)?)?;
                    return Ok(0);
                }
            }
            Err(e) => log(&format!("{e:#}")),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `wharf play --status FILE`: the manifest's pods (its workloads' too) as `kubectl get
/// pods` shows them, each container's state below; exit 1 when a pod does not exist.
pub fn play_status(cli: &Cli, file: &Path, format: Option<&str>) -> Result<i32> {
    let manifest =
        kube::parse(&read_text(file)?).with_context(|| format!("manifest {}", file.display()))?;
    let engine = open(cli)?;
    let mut code = 0;
    let mut docs = Vec::new();
    let mut rows = vec![
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
            .map(String::from)
            .to_vec(),
    ];
    let mut details = Vec::new();
    // The manifest's pods, then its workloads' (true: the manifest names it).
    let mut names: Vec<(String, bool)> = manifest
        .pod_names()
        .into_iter()
        .map(|n| (n.to_string(), true))
        .collect();
    let mut workloads = Vec::new();
    for w in manifest.workloads() {
        let pods = owned_pods(&engine, w)?;
        let controller = controller_of(&engine, w);
        let dir = controller.dir();
        let outcome: Option<Outcome> = std::fs::read(dir.join("status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let label = format!("{}/{}", w.kind.as_str(), w.name);
        let line = match (&outcome, w.job) {
            (Some(o), _) if o.complete => format!("{label}: Complete"),
            (Some(o), _) => format!("{label}: Failed: {}", o.message.as_deref().unwrap_or("")),
            (None, Some(j)) => format!(
                "{label}: {} pods, {} completions wanted",
                pods.len(),
                j.completions
            ),
            (None, None) => format!("{label}: {} pods, {} wanted", pods.len(), w.replicas),
        };
        // Nothing keeps it then: say so, and what starts its controller again.
        let line =
            if outcome.is_none() && dir.join("options.json").exists() && !controller.running() {
                format!("{line} (its controller is not running: wharf system restore starts it)")
            } else {
                line
            };
        if !dir.exists() && pods.is_empty() {
            eprintln!("wharf: {} {} does not exist", w.kind.as_str(), w.name);
            code = 1;
            continue;
        }
        workloads.push(line);
        names.extend(pods.into_iter().map(|p| (p.row.name, false)));
    }
    for (name, named) in &names {
        let view = match engine.pod(name) {
            Ok(v) => v,
            Err(wharf_engine::Error::NotFound { .. }) if *named => {
                eprintln!("wharf: pod {name} does not exist");
                code = 1;
                continue;
            }
            // A workload's controller may remove a pod between the listing and here.
            Err(wharf_engine::Error::NotFound { .. }) => continue,
            Err(e) => return Err(e).with_context(|| format!("pod {name}")),
        };
        let st = wharf_kube::pod_status(&view);
        rows.push(vec![
            name.clone(),
            format!("{}/{}", st.ready.0, st.ready.1),
            st.summary.clone(),
            st.restarts.to_string(),
            output::age(&view.row.created_at),
        ]);
        for c in st
            .init_container_statuses
            .iter()
            .chain(&st.container_statuses)
        {
            details.push(format!(
                "  {name}/{}: {}",
                c.name,
                output::container_state_line(c)
            ));
        }
        docs.push(serde_json::json!({"name": name, "status": st}));
    }
    match format.unwrap_or("table") {
        "json" => println!("{}", serde_json::to_string_pretty(&docs)?),
        "table" => {
            if rows.len() > 1 {
                print!("{}", output::table(&rows));
                for d in details {
                    println!("{d}");
                }
            }
            for w in workloads {
                println!("{w}");
            }
        }
        other => bail!("invalid --format {other:?}: table or json"),
    }
    Ok(code)
}

/// A manifest file's text (`-` for stdin), within the size limit.
fn read_text(file: &Path) -> Result<String> {
    let limit = kube::MAX_MANIFEST_BYTES;
    if file.as_os_str() == "-" {
        convert::read_bounded(std::io::stdin(), limit, "the manifest on stdin")
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("read {}", file.display()))?;
        convert::read_bounded(f, limit, &format!("manifest {}", file.display()))
    }
}

/// `wharf kube-probe https|grpc ...`: a check for a pod's shim (see the argument list in
/// `args::Cmd::KubeProbe`); exit 0 on success, 1 with kubelet's message otherwise.
pub fn probe(kind: &str, args: &[String]) -> Result<i32> {
    let arg = |i: usize, what: &str| -> Result<&String> {
        args.get(i)
            .with_context(|| format!("kube-probe {kind}: {what} is missing"))
    };
    let port: u16 = arg(1, "PORT")?.parse().context("kube-probe: PORT")?;
    let timeout = Duration::from_millis(
        arg(3, "TIMEOUT_MS")?
            .parse()
            .context("kube-probe: TIMEOUT_MS")?,
    );
    let result = match kind {
        "https" => {
            let headers: Vec<(String, String)> = args[4..]
                .iter()
                .filter_map(|h| h.split_once(": "))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            wharf_engine::probes::probe_https(
                arg(0, "HOST")?,
                port,
                arg(2, "PATH")?,
                &headers,
                timeout,
            )
        }
        "grpc" => wharf_cri::grpc_probe::grpc_health_check(
            arg(0, "HOST")?,
            port,
            arg(2, "SERVICE")?,
            timeout,
        ),
        other => bail!("kube-probe: {other:?} is not a check (https or grpc)"),
    };
    match result {
        Ok(()) => Ok(0),
        Err(msg) => {
            println!("{msg}");
            Ok(1)
        }
    }
}
