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
    let inherited = match inherited_listener() {
        Ok(l) => l,
        Err(msg) => {
            log(Level::Error, &msg, &[]);
            return 1;
        }
    };
    // Few threads, and engine threads that go when idle (each holds an engine: its store
    // connections and caches), so that an idle daemon holds little memory.
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
    match rt.block_on(serve(opts, inherited)) {
        Ok(()) => 0,
        Err(msg) => {
            log(Level::Error, &msg, &[]);
            1
        }
    }
}

async fn serve(
    opts: DaemonOptions,
    inherited: Option<std::os::unix::net::UnixListener>,
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
    // After the engine threads' keep-alive (2 s), so that what they held is given back too.
    tokio::spawn(crate::idle::trimmer(std::time::Duration::from_millis(2500)));
    if let Some(reload) = opts.reload.clone() {
        tokio::spawn(reload_on_sighup(reload, engines.clone()));
    }
    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
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
        let _ = stopping_tx.send(true);
    };
    let server = tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(crate::runtime::Runtime::new(
            engines.clone(),
            opts.config.clone(),
            streams,
        )))
        .add_service(ImageServiceServer::new(crate::images::Images::new(engines)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown);
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

/// The listening socket systemd passed (socket activation: `LISTEN_PID` is this process
/// and `LISTEN_FDS` at least 1, the socket being fd 3), if it passed one.
fn inherited_listener() -> Result<Option<std::os::unix::net::UnixListener>, String> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let count: u32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if !ours || count == 0 {
        return Ok(None);
    }
    // Not for the daemon's children (the shims it starts).
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        // SAFETY: the daemon has not started any other thread yet (the async runtime is
        // built after this), so nothing reads the environment concurrently.
        #[allow(unsafe_code)]
        unsafe {
            std::env::remove_var(v)
        };
    }
    // SAFETY: fd 3 is the socket systemd passed to this process (LISTEN_PID says so);
    // nothing else in the process owns it.
    #[allow(unsafe_code)]
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(3) };
    let std_listener = std::os::unix::net::UnixListener::from(fd);
    std_listener
        .set_nonblocking(true)
        .map_err(|e| format!("the socket systemd passed (fd 3): {e}"))?;
    Ok(Some(std_listener))
}

/// Listen on `path`: a socket left by a daemon that died is replaced; one that a live
/// daemon answers on is refused.
async fn bind(path: &std::path::Path) -> Result<UnixListener, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    if std::fs::symlink_metadata(path).is_ok() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(format!(
                "{} is in use: another daemon serves on it",
                path.display()
            ));
        }
        std::fs::remove_file(path).map_err(|e| format!("remove stale {}: {e}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("listen on {}: {e}", path.display()))?;
    // Root's only, as containerd's socket: whoever can talk to it can run anything.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    Ok(listener)
}
