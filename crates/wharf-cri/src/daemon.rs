//! `wharf daemon`: serve the CRI on a unix socket until SIGTERM or SIGINT. Pods keep running
//! when it stops (they belong to their shims), and the next start serves them again.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use wharf_engine::{Engine, EngineOptions};

use crate::api::image_service_server::ImageServiceServer;
use crate::api::runtime_service_server::RuntimeServiceServer;
use crate::engines::Engines;
use crate::log::{Level, log};

/// Default socket (containerd's is /run/containerd/containerd.sock).
pub const DEFAULT_SOCKET: &str = "/run/wharf/wharf.sock";

/// How long a stop waits for requests in flight and connected clients.
const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the daemon serves and how it logs.
#[derive(Clone)]
pub struct DaemonOptions {
    /// The socket to listen on.
    pub listen: PathBuf,
    /// The Docker Engine API's socket (None: not served).
    pub docker_listen: Option<PathBuf>,
    /// A group given access to the Docker API socket besides root.
    pub docker_group: Option<u32>,
    /// The engine's options (state, run directory, networks, registries).
    pub engine: EngineOptions,
    /// Log level.
    pub log_level: Level,
    /// Log as JSON lines instead of logfmt.
    pub log_json: bool,
    /// The config file's `daemon` section.
    pub config: crate::config::DaemonConfig,
    /// Reads the config file again (on SIGHUP): new engine options and daemon section.
    pub reload: Option<Reload>,
}

/// How the daemon reads its configuration again.
pub type Reload = std::sync::Arc<
    dyn Fn() -> Result<(EngineOptions, crate::config::DaemonConfig), String> + Send + Sync,
>;

/// Parse a `--log-level` value.
pub fn parse_level(s: &str) -> Option<Level> {
    Level::parse(s)
}

/// Run the daemon; the process's exit code.
pub fn run(opts: DaemonOptions) -> i32 {
    crate::log::init(opts.log_level, opts.log_json);
    // Before any thread exists (it edits the environment).
    let inherited = match inherited_listeners(&opts.listen, opts.docker_listen.as_deref()) {
        Ok(l) => l,
        Err(msg) => {
            log(Level::Error, &msg, &[]);
            return 1;
        }
    };
    // SAFETY: before any thread exists (it edits the environment).
    #[allow(unsafe_code)]
    let notifier = unsafe { crate::sd_notify::Notifier::from_env() };
    // Before any thread exists.
    crate::idle::tune_malloc();
    // The code, constants and libraries that calls run, faulted in page by page rather than
    // with their 64 kB neighbourhood (see fault_around.rs).
    match crate::fault_around::off_for(&crate::idle::droppable_ranges()) {
        Ok(n) => log(
            Level::Debug,
            "code faulted in page by page",
            &[("mappings", &n.to_string())],
        ),
        Err(e) => log(
            Level::Debug,
            "code faulted in with its neighbourhood",
            &[("reason", &e.to_string())],
        ),
    }
    // Few threads, and engine threads that go when idle (the engines they ran are closed
    // by the idle trim, below), so that an idle daemon holds little memory.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(32)
        .thread_keep_alive(std::time::Duration::from_secs(2))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(
                Level::Error,
                "cannot start the async runtime",
                &[("error", &e.to_string())],
            );
            return 1;
        }
    };
    match rt.block_on(serve(opts, inherited, notifier)) {
        Ok(()) => 0,
        Err(msg) => {
            log(Level::Error, &msg, &[]);
            1
        }
    }
}

#[allow(clippy::type_complexity)]
async fn serve(
    opts: DaemonOptions,
    (inherited, inherited_docker): (
        Option<std::os::unix::net::UnixListener>,
        Option<std::os::unix::net::UnixListener>,
    ),
    notifier: crate::sd_notify::Notifier,
) -> Result<(), String> {
    // Open the engine once up front: reconcile what a crash left, and fail now (not on the
    // first request) when the state cannot be opened.
    let engine_opts = opts.engine.clone();
    tokio::task::spawn_blocking(move || Engine::open(engine_opts).map(drop))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("opening Wharf's state: {e}"))?;
    let (listener, activated) = match inherited {
        Some(l) => (
            UnixListener::from_std(l).map_err(|e| {
                format!("the socket systemd passed (fd 3) is not a unix socket: {e}")
            })?,
            true,
        ),
        None => (bind(&opts.listen).await?, false),
    };
    let engines = Engines::new(opts.engine.clone());
    // The Docker Engine API, from the same engines.
    let docker_activated = inherited_docker.is_some();
    let docker = match (inherited_docker, &opts.docker_listen) {
        (Some(l), _) => Some(UnixListener::from_std(l).map_err(|e| {
            format!("the Docker API socket systemd passed is not a unix socket: {e}")
        })?),
        (None, Some(path)) => Some(bind_docker(path, opts.docker_group).await?),
        (None, None) => None,
    };
    if let Some(l) = docker {
        let address = opts
            .docker_listen
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "socket-activated".into());
        log(
            Level::Info,
            "serving the Docker API",
            &[("address", &address)],
        );
        tokio::spawn(crate::docker::serve(
            l,
            crate::docker::Api::new(engines.clone()),
        ));
    }
    let socket = opts.listen.display().to_string();
    log(
        Level::Info,
        "serving the CRI",
        &[("address", &socket), ("version", env!("CARGO_PKG_VERSION"))],
    );
    // The signal starts a graceful stop: requests in flight finish, but a client that keeps
    // its connection open (kubelet always does) does not hold the daemon past GRACE.
    let stream_addr = opts
        .config
        .stream_address
        .clone()
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let (streams, stream_listener) = crate::streaming::StreamServer::bind(&stream_addr).await?;
    tokio::spawn(crate::streaming::serve(
        streams.clone(),
        stream_listener,
        engines.clone(),
    ));
    if let Some(addr) = opts
        .config
        .metrics_address
        .clone()
        .filter(|a| !a.is_empty())
    {
        let l = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("metrics: listen on {addr}: {e}"))?;
        let local = l.local_addr().map_err(|e| e.to_string())?.to_string();
        log(Level::Info, "serving metrics", &[("address", &local)]);
        tokio::spawn(crate::metrics::serve(l, engines.clone()));
    }
    // Half a second after a burst (kubelet's calls for one pod come closer together than
    // that, its relists a second apart), with the engines the burst ran at once closed but
    // one, and again after the engine threads' keep-alive (2 s), with that one closed too,
    // so that what they held is given back.
    let quiet = engines.clone();
    tokio::spawn(crate::idle::trimmer(
        vec![
            std::time::Duration::from_millis(500),
            std::time::Duration::from_millis(2500),
        ],
        move |stage| quiet.close_idle(usize::from(stage == 0)),
    ));
    if let Some(reload) = opts.reload.clone() {
        tokio::spawn(reload_on_sighup(reload, engines.clone()));
    }
    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
    let stop_notifier = notifier.clone();
    let shutdown = async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .expect("SIGINT handler");
        let signal = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        log(
            Level::Info,
            "stopping (pods keep running)",
            &[("signal", signal)],
        );
        let _ = stop_notifier.notify("STOPPING=1");
        let _ = stopping_tx.send(true);
    };
    let server = tonic::transport::Server::builder()
        .layer(tower_layer::layer_fn(crate::give_back::GiveBack))
        .add_service(RuntimeServiceServer::new(crate::runtime::Runtime::new(
            engines.clone(),
            opts.config.clone(),
            streams,
        )))
        .add_service(ImageServiceServer::new(crate::images::Images::new(engines)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown);
    // Every socket listens (connections queue until the server polls them): systemd may
    // start what is ordered after the daemon.
    if let Err(e) = notifier.notify("READY=1\nSTATUS=serving the CRI and the Docker API") {
        log(
            Level::Warn,
            "cannot tell systemd the daemon is ready",
            &[("error", &e.to_string())],
        );
    }
    let deadline = async move {
        let mut rx = stopping_rx;
        let _ = rx.wait_for(|s| *s).await;
        tokio::time::sleep(GRACE).await;
    };
    let served = tokio::select! {
        r = server => r,
        () = deadline => {
            log(Level::Warn, "clients still connected after the grace period: closing", &[]);
            Ok(())
        }
    };
    // A socket systemd made is systemd's to keep (it listens for the next start).
    if !activated {
        let _ = std::fs::remove_file(&opts.listen);
    }
    if !docker_activated && let Some(p) = &opts.docker_listen {
        let _ = std::fs::remove_file(p);
    }
    served.map_err(|e| format!("serving {socket}: {e}"))?;
    log(Level::Info, "stopped", &[]);
    Ok(())
}

/// Read the configuration again on each SIGHUP: registries, networks and the rest of the
/// engine's options apply to the next request (each thread opens its engine again). The
/// socket and log settings stay as they were: they need a restart.
async fn reload_on_sighup(reload: Reload, engines: Engines) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        log(
            Level::Warn,
            "no SIGHUP handler: the config cannot be reloaded",
            &[],
        );
        return;
    };
    while hup.recv().await.is_some() {
        let r = reload.clone();
        match tokio::task::spawn_blocking(move || r()).await {
            Ok(Ok((engine, _daemon))) => {
                engines.replace(engine);
                log(
                    Level::Info,
                    "configuration reloaded",
                    &[("signal", "SIGHUP")],
                );
            }
            Ok(Err(e)) => log(
                Level::Error,
                "configuration not reloaded: keeping the previous one",
                &[("error", &e)],
            ),
            Err(e) => log(
                Level::Error,
                "configuration not reloaded",
                &[("error", &e.to_string())],
            ),
        }
    }
}

/// The listening sockets systemd passed (socket activation: `LISTEN_PID` is this process,
/// `LISTEN_FDS` at least 1, the sockets from fd 3 on): the CRI's, and the Docker API's when
/// there is a second one. Which is which is told by [`socket_roles`].
#[allow(clippy::type_complexity)]
fn inherited_listeners(
    cri_path: &std::path::Path,
    docker_path: Option<&std::path::Path>,
) -> Result<
    (
        Option<std::os::unix::net::UnixListener>,
        Option<std::os::unix::net::UnixListener>,
    ),
    String,
> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let count: i32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if !ours || count <= 0 {
        return Ok((None, None));
    }
    let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
        .unwrap_or_default()
        .split(':')
        .map(str::to_string)
        .collect();
    // Not for the daemon's children (the shims it starts).
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        // SAFETY: the daemon has not started any other thread yet (the async runtime is
        // built after this), so nothing reads the environment concurrently.
        #[allow(unsafe_code)]
        unsafe {
            std::env::remove_var(v)
        };
    }
    let mut listeners = Vec::new();
    for i in 0..count.min(2) {
        let fd = 3 + i;
        // SAFETY: fds 3.. are the sockets systemd passed to this process (LISTEN_PID says
        // so); nothing else in the process owns them.
        #[allow(unsafe_code)]
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let l = std::os::unix::net::UnixListener::from(fd);
        l.set_nonblocking(true)
            .map_err(|e| format!("the socket systemd passed (fd {}): {e}", 3 + i))?;
        let path = l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(std::path::Path::to_path_buf));
        let name = names.get(i as usize).cloned().unwrap_or_default();
        listeners.push((l, path, name));
    }
    let described: Vec<(Option<&std::path::Path>, &str)> = listeners
        .iter()
        .map(|(_, p, n)| (p.as_deref(), n.as_str()))
        .collect();
    let roles = socket_roles(&described, cri_path, docker_path);
    let (mut cri, mut docker) = (None, None);
    for ((l, _, _), role) in listeners.into_iter().zip(roles) {
        match role {
            SocketRole::Docker => docker = Some(l),
            SocketRole::Cri => cri = Some(l),
        }
    }
    Ok((cri, docker))
}

/// What a socket systemd passed serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SocketRole {
    Cri,
    Docker,
}

/// Which of the sockets systemd passed (their paths and `LISTEN_FDNAMES` names, in fd
/// order) is the CRI's and which the Docker API's:
/// 1. a socket bound at the daemon's CRI or Docker API path is that one;
/// 2. else its name, `cri` or `docker`, when the names differ: `FileDescriptorName=`
///    names every socket of its unit alike, so one unit with two `ListenStream=` passes
///    two sockets of the same name, which say nothing;
/// 3. else the order: the first is the CRI's, the second the Docker API's.
fn socket_roles(
    sockets: &[(Option<&std::path::Path>, &str)],
    cri_path: &std::path::Path,
    docker_path: Option<&std::path::Path>,
) -> Vec<SocketRole> {
    let names_differ = sockets
        .iter()
        .enumerate()
        .all(|(i, (_, n))| sockets[..i].iter().all(|(_, m)| m != n));
    sockets
        .iter()
        .enumerate()
        .map(|(i, (path, name))| {
            let at = |p: Option<&std::path::Path>| p.is_some() && *path == p;
            let by_path = (at(Some(cri_path)), at(docker_path));
            let by_name = (
                names_differ && *name == "cri",
                names_differ && *name == "docker",
            );
            match (by_path, by_name) {
                ((true, _), _) => SocketRole::Cri,
                ((_, true), _) | (_, (_, true)) => SocketRole::Docker,
                (_, (true, _)) => SocketRole::Cri,
                _ if i == 1 => SocketRole::Docker,
                _ => SocketRole::Cri,
            }
        })
        .collect()
}

/// A group's id by name (or number).
pub fn group_id(group: &str) -> Option<u32> {
    if let Ok(n) = group.parse() {
        return Some(n);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == group).then(|| f.nth(1)?.parse().ok())?
    })
}

/// Listen for the Docker API on `path`: root's, and `group`'s when one is configured
/// (0660, as docker's socket with its `docker` group).
async fn bind_docker(path: &std::path::Path, group: Option<u32>) -> Result<UnixListener, String> {
    bind_as(path, 0o660, group.unwrap_or(0)).await
}

/// Listen on `path`, root's only (as containerd's socket: whoever can talk to it can run
/// anything).
async fn bind(path: &std::path::Path) -> Result<UnixListener, String> {
    bind_as(path, 0o600, 0).await
}

/// Listen on `path` with `mode`, owned by root and `gid`: a socket left by a daemon that
/// died is replaced; one that a live daemon answers on is refused. The socket is made
/// under a name of its own and renamed into place once its owner and mode are set, so
/// nobody connects to it in between (whatever the umask).
async fn bind_as(path: &std::path::Path, mode: u32, gid: u32) -> Result<UnixListener, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    if std::fs::symlink_metadata(path).is_ok()
        && tokio::net::UnixStream::connect(path).await.is_ok()
    {
        return Err(format!(
            "{} is in use: another daemon serves on it",
            path.display()
        ));
    }
    let mut fresh = path.as_os_str().to_owned();
    fresh.push(format!(".{}.new", std::process::id()));
    let fresh = std::path::PathBuf::from(fresh);
    let _ = std::fs::remove_file(&fresh);
    let listener =
        UnixListener::bind(&fresh).map_err(|e| format!("listen on {}: {e}", path.display()))?;
    let placed = rustix::fs::chown(
        &fresh,
        Some(rustix::fs::Uid::ROOT),
        Some(rustix::fs::Gid::from_raw(gid)),
    )
    .map_err(|e| format!("chown {}: {e}", path.display()))
    .and_then(|()| {
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", path.display()))
    })
    // Over a stale socket, if one was left.
    .and_then(|()| {
        std::fs::rename(&fresh, path).map_err(|e| format!("listen on {}: {e}", path.display()))
    });
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&fresh);
        return Err(e);
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::SocketRole::{Cri, Docker};
    use super::*;
    use std::path::Path;

    #[test]
    fn passed_sockets_are_told_apart_by_path_then_distinct_names_then_order() {
        let cri = Path::new("/run/wharf/wharf.sock");
        let docker = Path::new("/run/wharf/docker.sock");
        // One socket unit with two ListenStream= and one FileDescriptorName= (systemd
        // names both alike): the paths decide, in either order.
        let same_name = [(Some(docker), "docker"), (Some(cri), "docker")];
        assert_eq!(socket_roles(&same_name, cri, Some(docker)), [Docker, Cri]);
        // Paths other than the daemon's: distinct names decide.
        let elsewhere = Path::new("/tmp/a.sock");
        let other = Path::new("/tmp/b.sock");
        let named = [(Some(elsewhere), "docker"), (Some(other), "cri")];
        assert_eq!(socket_roles(&named, cri, Some(docker)), [Docker, Cri]);
        // Neither: the order.
        let unnamed = [(Some(elsewhere), "x"), (Some(other), "x")];
        assert_eq!(socket_roles(&unnamed, cri, Some(docker)), [Cri, Docker]);
        assert_eq!(socket_roles(&[(None, "")], cri, None), [Cri]);
    }
}
