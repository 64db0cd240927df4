//! Wharf's container and pod commands: `run`, `create`, `start`, `ps`, `logs`, `exec`,
//! `attach`, `stop`, `kill`, `rm`, `wait`, `inspect`, `stats`, `top`, `pod ...`, `events`,
//! `play`, over the engine (no daemon: every command opens the engine's state on disk).
//!
//! Errors print as one line on stderr (`wharf: ...`) and exit 1 (125 when `run` itself
//! fails before the container runs, as docker does); usage errors exit 2.

pub mod args;
mod convert;
pub use wharf_docker::views as docker_json;
mod build;
mod build_progress;
mod files;
mod kube;
mod kube_objects;
mod networks;
mod output;
mod space;
mod systemd_unit;
mod volumes;
// Signal masks and sigwait for forwarding signals to the container.
#[allow(unsafe_code)]
mod relay;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use wharf_engine::hooks::step;
use wharf_engine::{Engine, EngineOptions, ExecRequest, PodChoice, SessionEnd};

use args::{Cli, Cmd, PodCmd, RunArgs, SystemCmd};

/// Entry point; `argv` is the whole command line.
#[allow(unsafe_code)] // SIGPIPE back to its default, see below.
pub fn main(cli: Cli) -> i32 {
    step("main");
    if prints_only(&cli.cmd) {
        // `wharf ps | head`: a reader that goes away ends the command quietly, as it ends
        // other Unix tools (Rust ignores SIGPIPE, so println! would panic on EPIPE). Only
        // for commands that just print: the others clean up after their output ends.
        // SAFETY: setting a signal disposition; no handler runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if lists_every_row(&cli.cmd) {
        wharf_heap::BumpHeap::start();
    }
    let r = dispatch(&cli);
    step("dispatched");
    match r {
        Ok(code) => code,
        Err(e) => {
            match out_of_space(&e) {
                Some(what) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "wharf: no space left on {}: {what}",
                        space_owner(&cli.root, &cli.run, &e)
                    );
                }
                None => {
                    let _ = writeln!(std::io::stderr(), "wharf: {e:#}");
                }
            }
            exit_code(&cli.cmd, &e)
        }
    }
}

/// The exit status of a failed command, as docker gives it: for the commands that run a
/// program (run, exec, start), 127 when the program does not exist and 126 when it cannot
/// be executed; 125 when `run` fails otherwise; 1 for everything else.
fn exit_code(cmd: &Cmd, e: &anyhow::Error) -> i32 {
    use wharf_engine::error::ErrorKind;
    let kind = e
        .chain()
        .find_map(|c| c.downcast_ref::<wharf_engine::Error>())
        .map(|e| e.kind());
    let runs_a_program = matches!(
        cmd,
        Cmd::Run(_) | Cmd::Exec(_) | Cmd::Start { .. } | Cmd::Create(_)
    );
    match kind {
        Some(ErrorKind::ProgramNotFound) if runs_a_program => 127,
        Some(ErrorKind::ProgramNotExecutable) if runs_a_program => 126,
        _ if matches!(cmd, Cmd::Run(_)) => 125,
        _ => 1,
    }
}

/// If `e` comes from a full filesystem (ENOSPC, or SQLite's "disk is full"), the message
/// to print after "no space left on <where>".
fn out_of_space(e: &anyhow::Error) -> Option<String> {
    let full = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::ENOSPC))
            || c.downcast_ref::<wharf_engine::Error>()
                .is_some_and(|w| matches!(w, wharf_engine::Error::NoSpace { .. }))
            || c.to_string().contains("No space left on device")
            || c.to_string().contains("database or disk is full")
    });
    full.then(|| format!("{e:#}"))
}

/// Which state directory the full filesystem holds, as far as the message tells.
fn space_owner(root: &std::path::Path, run: &std::path::Path, e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    if text.contains(&run.display().to_string()) && !text.contains(&root.display().to_string()) {
        run.display().to_string()
    } else {
        root.display().to_string()
    }
}

/// Do `f` to each name, printing the name when it worked and the error when not (docker's
/// `rm` output); 1 if any failed.
fn each_named<E: std::fmt::Display>(
    names: &[String],
    f: impl Fn(&str) -> std::result::Result<(), E>,
) -> i32 {
    let mut code = 0;
    for n in names {
        match f(n) {
            Ok(()) => println!("{n}"),
            Err(e) => {
                eprintln!("wharf: {e}");
                code = 1;
            }
        }
    }
    code
}

/// docker's question before a prune: true when the answer on stdin is yes.
fn confirm(what: &str) -> Result<bool> {
    use std::io::BufRead;
    eprint!("WARNING! This will remove {what}.\nAre you sure you want to continue? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Commands that only read state and print it (no shim connections, nothing to undo).
fn prints_only(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Ps { .. }
            | Cmd::Logs { .. }
            | Cmd::Inspect { .. }
            | Cmd::Stats { .. }
            | Cmd::Top { .. }
            | Cmd::Events { .. }
            | Cmd::Pod {
                cmd: PodCmd::Ls { .. } | PodCmd::Inspect { .. }
            }
            | Cmd::Volume {
                cmd: args::VolumeCmd::Ls { .. } | args::VolumeCmd::Inspect { .. }
            }
            | Cmd::Network {
                cmd: args::NetworkCmd::Ls { .. } | args::NetworkCmd::Inspect { .. }
            }
    )
}

/// The listings of every container or pod: they read and parse every row of the store,
/// print, and exit, so they take their memory from the bump heap (see [`wharf_heap`]),
/// which never frees. Nothing that may run long is here.
fn lists_every_row(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Ps { .. }
            | Cmd::Pod {
                cmd: PodCmd::Ls { .. }
            }
    )
}

/// The config file as JSON (null when there is none), read once for the keys below.
fn config_json(config: &std::path::Path) -> Result<serde_json::Value> {
    let text = match std::fs::read(config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(serde_json::Value::Null),
        Err(e) => return Err(e).with_context(|| format!("read {}", config.display())),
    };
    serde_json::from_slice(&text).with_context(|| format!("config file {}", config.display()))
}

/// The config file's `network.default` (`{"network": {"default": "mynet"}}`): the built-in
/// network unless it names another.
fn default_network(v: &serde_json::Value) -> wharf_engine::sandbox::DefaultNetwork {
    match v["network"]["default"].as_str() {
        Some(name) => wharf_engine::sandbox::DefaultNetwork::parse(name),
        None => Default::default(),
    }
}

/// The config file's `engine.cgroup-manager` (podman's containers.conf `cgroup_manager`).
fn config_cgroup_manager(
    config: &std::path::Path,
    v: &serde_json::Value,
) -> Result<Option<String>> {
    match &v["engine"]["cgroup-manager"] {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        other => anyhow::bail!(
            "config file {}: engine.cgroup-manager must be \"cgroupfs\" or \"systemd\", not {other}",
            config.display()
        ),
    }
}

/// `network.cni-conf-dir` and `network.cni-bin-dir` of the config file (a path or a
/// list of paths each; the environment's WHARF_CNI_CONF_DIR / WHARF_CNI_BIN_DIR win).
type Dirs = Option<Vec<PathBuf>>;
fn cni_dirs(config: &std::path::Path, v: &serde_json::Value) -> Result<(Dirs, Dirs)> {
    let dirs = |key: &str| -> Result<Dirs> {
        match &v["network"][key] {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::String(s) => Ok(Some(vec![PathBuf::from(s)])),
            serde_json::Value::Array(a) => a
                .iter()
                .map(|p| {
                    p.as_str().map(PathBuf::from).ok_or_else(|| {
                        anyhow::anyhow!(
                            "config file {}: network.{key} must be a path or a list of paths",
                            config.display()
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            _ => anyhow::bail!(
                "config file {}: network.{key} must be a path or a list of paths",
                config.display()
            ),
        }
    };
    Ok((dirs("cni-conf-dir")?, dirs("cni-bin-dir")?))
}

/// Engine options from the global options (state, run directory, config file, cgroup
/// manager) and the environment; the daemon's too.
pub fn engine_options(
    root: &std::path::Path,
    run: &std::path::Path,
    config: &std::path::Path,
    cgroup_manager: Option<&str>,
) -> Result<EngineOptions> {
    let mut opts = EngineOptions {
        root: root.to_path_buf(),
        run: run.to_path_buf(),
        registries: wharf_engine::images::RegistriesConfig::load(config)?,
        defaults: wharf_engine::defaults::ContainerDefaults::load(config)?,
        ..Default::default()
    };
    let list = |v: &str| -> Vec<PathBuf> {
        v.split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect()
    };
    let file = config_json(config)?;
    opts.net.default_network = default_network(&file);
    let (conf_dirs, bin_dirs) = cni_dirs(config, &file)?;
    opts.net.cni_conf_dirs = conf_dirs;
    opts.net.cni_bin_dirs = bin_dirs;
    opts.cgroup_driver = match cgroup_manager
        .map(str::to_string)
        .or(config_cgroup_manager(config, &file)?)
    {
        Some(name) => wharf_engine::cgroup_driver::CgroupDriver::parse(&name)
            .with_context(|| format!("config file {}", config.display()))?,
        None => wharf_engine::cgroup_driver::CgroupDriver::host_default(),
    };
    opts.cgroup_driver.check_host()?;
    opts.cgroup_parent = match std::env::var("WHARF_CGROUP_PARENT") {
        Ok(v) => v,
        Err(_) => opts.cgroup_driver.default_parent().to_string(),
    };
    // Set and not empty, the environment wins over the config file.
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let Some(v) = env("WHARF_CNI_CONF_DIR") {
        opts.net.cni_conf_dirs = Some(list(&v));
    }
    if let Some(v) = env("WHARF_CNI_BIN_DIR") {
        opts.net.cni_bin_dirs = Some(list(&v));
    }
    if let Ok(v) = std::env::var("WHARF_CNI_CACHE_DIR") {
        opts.net.cni_cache_dir = Some(v.into());
    }
    if let Ok(v) = std::env::var("WHARF_NET_HOST_NS") {
        opts.net.host_netns = Some(v.into());
    }
    // Where user networks' DNS responders forward (ip:port, comma-separated; tests).
    if let Some(v) = env("WHARF_DNS_UPSTREAM") {
        opts.net.dns_upstream = Some(v.split(',').map(str::to_string).collect());
    }
    Ok(opts)
}

/// The containers and pods a command works on, when it works on named ones: opening the
/// engine for it then reconciles only those (and what interrupted operations left), so its
/// cost does not grow with the pods of the node. `pod ls`, `system` and everything else
/// reconcile every pod.
fn touched(cmd: &Cmd) -> Option<Vec<String>> {
    let one = |c: &String| Some(vec![c.clone()]);
    match cmd {
        Cmd::Run(a) | Cmd::Create(a) => {
            let mut keys: Vec<String> = a.pod.iter().cloned().collect();
            // `--network container:NAME` joins that container's pod.
            if let Some(c) = a.network.strip_prefix("container:") {
                keys.push(c.to_string());
            }
            Some(keys)
        }
        Cmd::Exec(e) => one(&e.container),
        Cmd::Logs { container, .. }
        | Cmd::Attach { container, .. }
        | Cmd::Export { container, .. }
        | Cmd::Diff { container }
        | Cmd::Rename { container, .. }
        | Cmd::Port { container, .. }
        | Cmd::Top { container, .. } => one(container),
        Cmd::Start { containers, .. }
        | Cmd::Stop { containers, .. }
        | Cmd::Restart { containers, .. }
        | Cmd::Pause { containers }
        | Cmd::Unpause { containers }
        | Cmd::Kill { containers, .. }
        | Cmd::Rm { containers, .. }
        | Cmd::Wait { containers } => Some(containers.clone()),
        Cmd::Inspect { objects, .. } => Some(objects.clone()),
        // `ps` refreshes each running container from its shim's records as it lists it
        // (a dead shim is reaped there): the per-pod checks of a full reconcile would
        // only repeat that.
        Cmd::Ps { .. } => Some(Vec::new()),
        Cmd::Cp { src, dest, .. } => Some(
            [src, dest]
                .iter()
                .filter_map(|p| p.split_once(':').map(|(c, _)| c.to_string()))
                .collect(),
        ),
        _ => None,
    }
}

fn open(cli: &Cli) -> Result<Engine> {
    let mut opts = engine_options(
        &cli.root,
        &cli.run,
        &cli.config,
        cli.cgroup_manager.as_deref(),
    )?;
    if let Some(keys) = touched(&cli.cmd) {
        opts.reconcile = wharf_engine::reconcile::Reconcile::Touched(keys);
    } else if matches!(
        &cli.cmd,
        Cmd::Pod {
            cmd: PodCmd::Ls { .. }
        }
    ) {
        opts.reconcile = wharf_engine::reconcile::Reconcile::Listing;
    }
    // One command, one acknowledgment: its commits reach the disk together, with one fsync
    // where each would take one (`run -d` commits seven times).
    opts.commits = wharf_engine::db::Commits::Grouped;
    let engine = Engine::open(opts)
        .with_context(|| format!("opening Wharf's state in {}", cli.root.display()))?;
    // Opening reconciles the state with reality (crashed commands, dead shims).
    print_reconciled(engine.reconciled());
    Ok(engine)
}

/// What a reconcile did: its warnings always, its repairs with `WHARF_DEBUG`.
fn print_reconciled(report: &wharf_engine::reconcile::Report) {
    for w in &report.warnings {
        eprintln!("wharf: warning: {w}");
    }
    if std::env::var_os("WHARF_DEBUG").is_some() {
        for r in &report.repaired {
            eprintln!("wharf: reconciled: {r}");
        }
    }
}

fn dispatch(cli: &Cli) -> Result<i32> {
    match &cli.cmd {
        Cmd::Run(a) => run(cli, a, true),
        Cmd::Create(a) => run(cli, a, false),
        Cmd::Start { attach, containers } => start(cli, *attach, containers),
        Cmd::Ps {
            all,
            quiet,
            no_trunc,
            last,
            latest,
            size: _,
            format,
            pod,
            filter,
        } => output::ps(
            &open(cli)?,
            (*all, if *latest { Some(1) } else { *last }),
            (*quiet, *no_trunc),
            format,
            pod.as_deref(),
            filter,
        ),
        Cmd::Logs {
            follow,
            tail,
            since,
            until,
            timestamps,
            container,
        } => output::logs(
            &open(cli)?,
            container,
            (*follow, *tail),
            (since.as_deref(), until.as_deref()),
            *timestamps,
        ),
        Cmd::Exec(e) => exec(cli, e),
        Cmd::Attach {
            detach_keys,
            no_stdin,
            container,
        } => attach(cli, container, detach_keys, !*no_stdin),
        Cmd::Stop { time, containers } => each_in_parallel(cli, containers, |engine, c| {
            engine.stop(c, time.map(Duration::from_secs))?;
            Ok(())
        }),
        Cmd::Restart { time, containers } => each_in_parallel(cli, containers, |engine, c| {
            engine.stop(c, time.map(Duration::from_secs))?;
            engine.start(c, false)?;
            Ok(())
        }),
        Cmd::Rename {
            container,
            new_name,
        } => {
            open(cli)?.rename(container, new_name)?;
            Ok(0)
        }
        Cmd::Pause { containers } => each_in_parallel(cli, containers, |engine, c| {
            engine.set_paused(c, true)?;
            Ok(())
        }),
        Cmd::Unpause { containers } => each_in_parallel(cli, containers, |engine, c| {
            engine.set_paused(c, false)?;
            Ok(())
        }),
        Cmd::Kill { signal, containers } => {
            let engine = open(cli)?;
            let sig = crate::runtime_cli::parse_signal(signal)?;
            for c in containers {
                engine.kill(c, sig)?;
                println!("{c}");
            }
            Ok(0)
        }
        Cmd::Rm {
            force,
            volumes,
            containers,
        } => {
            let engine = open(cli)?;
            let mut code = 0;
            for c in containers {
                let removed = if *volumes {
                    engine.remove_with_volumes(c, *force)
                } else {
                    engine.remove(c, *force)
                };
                match removed {
                    Ok(()) => println!("{c}"),
                    Err(e) => {
                        eprintln!("wharf: {e:#}");
                        code = 1;
                    }
                }
            }
            Ok(code)
        }
        Cmd::Wait { containers } => {
            let engine = open(cli)?;
            for c in containers {
                println!("{}", engine.wait(c)?.code);
            }
            Ok(0)
        }
        Cmd::Inspect {
            tree,
            format,
            kind,
            objects,
        } => output::inspect(
            &open(cli)?,
            objects,
            *tree,
            format.as_deref(),
            kind.as_deref(),
        ),
        Cmd::Stats {
            no_stream,
            format,
            containers,
        } => output::stats(&open(cli)?, containers, *no_stream, format),
        Cmd::Top { container, format } => output::top(&open(cli)?, container, format),
        Cmd::Update {
            memory,
            memory_swap,
            cpus,
            cpu_shares,
            pids_limit,
            containers,
        } => {
            let res = convert::update_resources(
                memory.as_deref(),
                memory_swap.as_deref(),
                *cpus,
                *cpu_shares,
                *pids_limit,
            )?;
            each_in_parallel(cli, containers, |engine, c| {
                engine.update_resources(c, &res)?;
                Ok(())
            })
        }
        Cmd::Port { container, port } => output::ports(&open(cli)?, container, port.as_deref()),
        Cmd::Cp { archive, src, dest } => files::cp(&open(cli)?, src, dest, *archive),
        Cmd::Export { output, container } => {
            files::export(&open(cli)?, container, output.as_deref())
        }
        Cmd::Diff { container } => files::diff(&open(cli)?, container),
        c @ Cmd::Build { .. } => build::run(&open(cli)?, c),
        Cmd::Builder {
            cmd: args::BuilderCmd::Prune { .. },
        } => build::prune(&open(cli)?),
        Cmd::Commit {
            author,
            change,
            message,
            pause,
            container,
            reference,
        } => {
            let img = open(cli)?.commit(
                container,
                &wharf_engine::files::CommitRequest {
                    name: reference.as_deref(),
                    changes: change,
                    comment: message.as_deref(),
                    author: author.as_deref(),
                    pause: *pause,
                },
            )?;
            println!("{}", img.id);
            Ok(0)
        }
        Cmd::Pod { cmd } => pod(cli, cmd),
        Cmd::Volume { cmd } => volumes::run(&open(cli)?, cmd),
        Cmd::ContainerPrune { force } => space::prune_containers(&open(cli)?, *force),
        Cmd::Info { format } => space::info(&open(cli)?, &cli.root, format.as_deref()),
        Cmd::Network { cmd } => networks::run(&open(cli)?, cmd),
        Cmd::System { cmd } => system(cli, cmd),
        Cmd::Events {
            follow,
            format,
            since,
            until,
            filter,
        } => output::events(
            &open(cli)?,
            *follow,
            format,
            since.as_deref(),
            until.as_deref(),
            filter,
        ),
        Cmd::Play {
            status: true,
            format,
            file,
            ..
        } => kube::play_status(cli, file, format.as_deref()),
        Cmd::Play {
            down,
            force,
            replace,
            network,
            pull,
            configmap,
            file,
            ..
        } => kube::play(
            cli,
            file,
            if *down {
                kube::PlayMode::Down { force: *force }
            } else {
                kube::PlayMode::Up { replace: *replace }
            },
            network,
            (pull.as_deref(), configmap),
        ),
        Cmd::KubeController { dir } => kube::controller(cli, dir),
        Cmd::KubeProbe { kind, args } => kube::probe(kind, args),
        Cmd::Configmap { cmd } => kube_objects::run(cli, "ConfigMap", cmd),
        Cmd::Secret { cmd } => kube_objects::run(cli, "Secret", cmd),
        Cmd::Generate {
            cmd:
                args::GenerateCmd::Systemd {
                    files,
                    restart_policy,
                    time,
                    container,
                },
        } => generate_systemd(cli, container, restart_policy, *time, *files),
        Cmd::Kube {
            cmd: args::KubeCmd::Generate { filename, name },
        } => {
            let yaml = wharf_kube::generate(&open(cli)?, name)?;
            match filename {
                Some(f) => {
                    std::fs::write(f, yaml).with_context(|| format!("write {}", f.display()))?
                }
                None => print!("{yaml}"),
            }
            Ok(0)
        }
    }
}

/// Each object's name on stdout when done, else `wharf: DOING NAME: ERROR` on stderr;
/// the exit code: 1 if any failed.
fn print_each<T>(doing: &str, results: Vec<(String, wharf_engine::Result<T>)>) -> i32 {
    let mut code = 0;
    for (name, done) in results {
        match done {
            Ok(_) => println!("{name}"),
            Err(e) => {
                eprintln!("wharf: {doing} {name}: {e}");
                code = 1;
            }
        }
    }
    code
}

/// `wharf generate systemd`.
fn generate_systemd(cli: &Cli, key: &str, restart: &str, time: u64, files: bool) -> Result<i32> {
    if !systemd_unit::RESTART_POLICIES.contains(&restart) {
        bail!(
            "--restart-policy {restart:?} is not one of systemd's: {}",
            systemd_unit::RESTART_POLICIES.join(", ")
        );
    }
    let engine = open(cli)?;
    let c = engine.container(key)?;
    let wharf = std::env::current_exe().context("the path of the wharf binary")?;
    let (default_root, default_run) = (
        Path::new(wharf_engine::paths::DEFAULT_ROOT),
        Path::new(wharf_engine::paths::DEFAULT_RUN),
    );
    let unit = systemd_unit::unit(
        &c.row.name,
        &c.row.id,
        &systemd_unit::UnitOptions {
            wharf: &wharf,
            root: Some(cli.root.as_path()).filter(|r| *r != default_root),
            run: Some(cli.run.as_path()).filter(|r| *r != default_run),
            restart,
            stop_time: time,
        },
    );
    if files {
        let file = std::env::current_dir()
            .context("the current directory")?
            .join(systemd_unit::unit_name(&c.row.name));
        std::fs::write(&file, unit).with_context(|| format!("write {}", file.display()))?;
        println!("{}", file.display());
    } else {
        print!("{unit}");
    }
    Ok(0)
}

/// Make sure the image is in the store (pull per `policy`: missing, always, never).
pub fn ensure_image(engine: &Engine, image: &str, policy: &str) -> Result<()> {
    ensure_image_as(engine, image, policy, None, false)
}

/// [`ensure_image`] for a platform (`--platform`), quietly (`-q`) if asked.
pub fn ensure_image_as(
    engine: &Engine,
    image: &str,
    policy: &str,
    platform: Option<&str>,
    quiet: bool,
) -> Result<()> {
    let present = engine.images().resolve(image).is_ok();
    match policy {
        "never" if !present => bail!("image {image} is not in the store and --pull=never"),
        "never" => return Ok(()),
        "missing" if present => return Ok(()),
        "missing" | "always" => {}
        other => bail!("invalid --pull {other:?}: missing, always or never"),
    }
    let opts = wharf_engine::images::PullOptions {
        platform: platform
            .map(wharf_engine::images::Platform::parse)
            .transpose()
            .with_context(|| format!("invalid --platform {:?}", platform.unwrap_or_default()))?,
        ..Default::default()
    };
    // The store's error says "pulling <the full reference>" already.
    if quiet {
        engine.images().pull(image, &opts, &())?;
    } else {
        let display =
            crate::image_cli::progress::Display::on_stderr(std::io::stderr().is_terminal());
        engine.images().pull(image, &opts, &display)?;
    }
    Ok(())
}

/// What of an image a create request's conversion needs.
fn image_facts(engine: &Engine, image: &str) -> Result<wharf_docker::ImageFacts> {
    let img = engine.images().resolve(image)?;
    let docker = engine.images().docker_config(&img);
    Ok(wharf_docker::ImageFacts::of(&img, docker.as_ref()))
}

fn run(cli: &Cli, a: &RunArgs, start: bool) -> Result<i32> {
    step("run: begin");
    let engine = open(cli)?;
    step("run: engine opened");
    // A standalone container's pod takes its name too: a taken container name is reported
    // as such, before a pull or a pod is made for nothing.
    if let Some(name) = &a.name {
        engine.check_container_name(name)?;
    }
    if a.pod.is_some() && matches!(a.network.split_once(':'), Some(("container" | "pod", _))) {
        bail!(
            "--network {} and --pod both choose the pod: give one",
            a.network
        );
    }
    let joined = match a.network.split_once(':') {
        Some(("container" | "pod", n)) => Some(n.to_string()),
        _ => a.pod.clone(),
    };
    if let Some(p) = joined {
        let flags = convert::pod_flags(a);
        if !flags.is_empty() {
            bail!(
                "{} set up a container's own pod: they cannot be used with --pod {p}",
                flags.join(", ")
            );
        }
    }
    // docker's create request, as docker's CLI makes it of its flags; every name that would
    // reach a file is checked before a pull (the engine checks again when it makes the pod
    // and the container).
    let request = convert::create_request(a)?;
    let checked = request.to_specs(a.name.as_deref(), &wharf_docker::ImageFacts::default())?;
    wharf_engine::validate::container_spec(&checked.container)?;
    if let wharf_docker::Placement::Own(p) = &checked.placement {
        wharf_engine::validate::pod_spec(p)?;
    }
    ensure_image_as(&engine, a.image(), &a.pull, a.platform.as_deref(), a.quiet)?;
    // A standalone container's pod is named (and its hostname defaults) after it.
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| wharf_engine::paths::generated_name(a.image()));
    // The image's exposed ports (for -P) and its HEALTHCHECK.
    let facts = image_facts(&engine, a.image())?;
    let specs = request.to_specs(Some(&name), &facts)?;
    let mut spec = specs.container;
    // Attached, the CLI removes it when it exits; detached, its shim does.
    spec.auto_remove = a.rm && a.detach;
    if let Some(note) = engine.apply_container_defaults(&mut spec)
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
    {
        eprintln!("wharf: note: {note}");
    }
    step("run: image resolved");
    // `--network container:NAME` / `pod:NAME`, `--pod NAME`: the container joins that pod
    // (and so its network namespace).
    let pod = match specs.placement {
        wharf_docker::Placement::Own(p) => PodChoice::Own(p),
        wharf_docker::Placement::WithContainer(c) => {
            PodChoice::Existing(engine.container(&c)?.pod_name)
        }
        wharf_docker::Placement::InPod(p) => PodChoice::Existing(engine.pod(&p)?.row.name),
    };
    let row = engine.create(pod, &spec)?;
    step("run: container created");
    if let Some(f) = &a.cidfile {
        std::fs::write(f, &row.id).with_context(|| format!("writing --cidfile {}", f.display()))?;
    }
    if !start {
        engine.sync_store()?;
        println!("{}", row.id);
        return Ok(0);
    }
    // Foreground --rm: should this process die, a later command removes the container.
    let _rm_guard = if a.rm && !a.detach {
        Some(engine.hold_rm_guard(&row.id)?)
    } else {
        None
    };
    let started = engine.start(&row.id, !a.detach);
    step("run: started");
    let session = match started {
        Ok((_, session)) => session,
        Err(e) => {
            if a.rm {
                let _ = engine.remove_with_volumes(&row.id, true);
            }
            return Err(e.into());
        }
    };
    // Started: on disk before the answer, or before the wait an attached run may make.
    engine.sync_store()?;
    let Some(mut session) = session else {
        println!("{}", row.id);
        return Ok(0);
    };
    let keys = relay::parse_keys(&a.detach_keys)?;
    let end = relay::relay(&mut session, true, &keys)?;
    let code = engine.session_exit(&session, end);
    step("run: exited");
    if a.rm {
        // The container goes with its own pod, in one removal (the pod's network comes
        // down on a thread of its own meanwhile).
        engine.remove_with_volumes(&row.id, true)?;
        step("run: removed");
    }
    Ok(code)
}

fn start(cli: &Cli, attach: bool, containers: &[String]) -> Result<i32> {
    let engine = open(cli)?;
    let mut code = 0;
    for c in containers {
        let attach = attach && containers.len() == 1;
        // Starting a running container does nothing, as with docker.
        if !attach && engine.container(c)?.row.state == wharf_engine::model::ContainerState::Running
        {
            println!("{c}");
            continue;
        }
        let (_, session) = engine.start(c, attach)?;
        match session {
            Some(mut session) => {
                let end = relay::relay(&mut session, true, &relay::parse_keys("ctrl-p,ctrl-q")?)?;
                code = engine.session_exit(&session, end);
            }
            None => println!("{c}"),
        }
    }
    Ok(code)
}

/// Do `f` to each container at once, each on a thread with an engine of its own (stopping
/// twenty containers takes one grace period, not twenty), then name each that succeeded
/// and report each failure, in the order given: exit 1 if any failed, as docker does.
fn each_in_parallel(
    cli: &Cli,
    containers: &[String],
    f: impl Fn(&Engine, &str) -> Result<()> + Sync,
) -> Result<i32> {
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = containers
            .iter()
            .map(|c| s.spawn(|| f(&open(cli)?, c)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker panicked")))
            })
            .collect()
    });
    let mut code = 0;
    for (c, r) in containers.iter().zip(results) {
        match r {
            Ok(()) => println!("{c}"),
            Err(e) => {
                eprintln!("wharf: {e:#}");
                code = 1;
            }
        }
    }
    Ok(code)
}

fn exec(cli: &Cli, e: &args::ExecArgs) -> Result<i32> {
    let engine = open(cli)?;
    let req = ExecRequest {
        command: e.command.clone(),
        env: e.env.iter().map(|kv| convert::kv(kv)).collect(),
        user: e.user.clone(),
        workdir: e.workdir.clone(),
        tty: e.tty,
        stdin: e.interactive,
        privileged: e.privileged,
    };
    let (_, session) = engine.exec(&e.container, &req, !e.detach)?;
    let Some(mut session) = session else {
        return Ok(0);
    };
    let end = relay::relay(&mut session, true, &relay::parse_keys("ctrl-p,ctrl-q")?)?;
    Ok(engine.session_exit(&session, end))
}

fn attach(cli: &Cli, container: &str, detach_keys: &str, stdin: bool) -> Result<i32> {
    let engine = open(cli)?;
    let mut session = engine.attach_session(container)?;
    let end = relay::relay(&mut session, stdin, &relay::parse_keys(detach_keys)?)?;
    Ok(match end {
        SessionEnd::Exited(c) => c,
        SessionEnd::Lost => 0,
    })
}

fn pod(cli: &Cli, cmd: &PodCmd) -> Result<i32> {
    let engine = open(cli)?;
    match cmd {
        PodCmd::Create {
            name,
            hostname,
            network,
            publish,
            share_pid,
            userns,
            restart,
            limits,
        } => {
            let (restart, max_restarts) = convert::restart(restart)?;
            let spec = wharf_engine::model::PodSpec {
                name: name.clone(),
                hostname: hostname.clone(),
                network: convert::network(network),
                ports: publish
                    .iter()
                    .map(|p| convert::ports(p))
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .flatten()
                    .collect(),
                share_pid: *share_pid,
                userns: wharf_docker::create::userns_mode(userns.as_deref().unwrap_or(""))?,
                restart,
                max_restarts,
                resources: convert::pod_limits(limits)?.map(Box::new),
                ..Default::default()
            };
            println!("{}", engine.create_pod(&spec)?.id);
        }
        PodCmd::Update { limits, pod } => {
            let Some(res) = convert::pod_limits(limits)? else {
                anyhow::bail!(
                    "wharf pod update {pod}: no limit given (--memory, --cpus, --cpuset-cpus, --pids-limit)"
                );
            };
            println!("{}", engine.update_pod_resources(pod, &res)?.id);
        }
        PodCmd::Ls { format, quiet } => output::pods(&engine, format, *quiet)?,
        PodCmd::Inspect { pods, format } => output::inspect_pods(&engine, pods, format.as_deref())?,
        PodCmd::Stop { time, pods } => {
            for p in pods {
                // A pod's containers stop together, within one grace period.
                engine.stop_pod(p, time.map(Duration::from_secs))?;
                println!("{p}");
            }
        }
        PodCmd::Rm { force, pods } => {
            for p in pods {
                engine.remove_pod_with_containers(p, *force)?;
                println!("{p}");
            }
        }
    }
    Ok(0)
}

fn system(cli: &Cli, cmd: &SystemCmd) -> Result<i32> {
    match cmd {
        SystemCmd::Df { format } => space::df(&open(cli)?, format),
        SystemCmd::Restore => {
            let engine = open(cli)?;
            // A played pod's volumes are made again before its containers start.
            let volumes = |pod: &wharf_engine::db::PodRow| {
                wharf_kube::restore_volumes(&engine.pod_volumes_dir(&pod.id))
            };
            let mut code = print_each("restoring", engine.restore(&volumes)?);
            // Then the plays' controllers, which find the pods restored above alive.
            for (workload, done) in kube::restore_controllers(cli, &engine) {
                match done {
                    Ok(()) => println!("{workload}"),
                    Err(e) => {
                        eprintln!("wharf: restoring the controller of {workload}: {e:#}");
                        code = 1;
                    }
                }
            }
            Ok(code)
        }
        SystemCmd::Shutdown { time } => {
            let stopped = open(cli)?.shutdown(time.map(Duration::from_secs))?;
            Ok(print_each("stopping", stopped))
        }
        SystemCmd::Prune {
            all,
            volumes,
            force,
        } => space::prune(&open(cli)?, *all, *volumes, *force),
        SystemCmd::Check => {
            let engine = open(cli)?;
            let r = engine.check()?;
            let db = &r.store;
            if r.integrity == ["ok"] {
                println!("store {}: integrity ok", db.display());
            } else {
                for line in &r.integrity {
                    println!("store {}: {line}", db.display());
                }
            }
            for u in &r.unrecorded {
                println!("on disk, not in the store: {u}");
            }
            for m in &r.missing {
                println!("in the store, gone from disk: {m}");
            }
            if r.problems() {
                println!("problems found: `wharf system repair` restores what the store lacks");
                Ok(1)
            } else {
                println!("no problems found");
                Ok(0)
            }
        }
        SystemCmd::Repair => {
            let (_engine, report) = wharf_engine::system::repair(engine_options(
                &cli.root,
                &cli.run,
                &cli.config,
                cli.cgroup_manager.as_deref(),
            )?)?;
            for line in &report.lines {
                println!("{line}");
            }
            Ok(0)
        }
    }
}
