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
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The socket to listen on.
    pub listen: PathBuf,
    /// The engine's options (state, run directory, networks, registries).
    pub engine: EngineOptions,
    /// Log level.
    pub log_level: Level,
    /// Log as JSON lines instead of logfmt.
    pub log_json: bool,
}

/// Parse a `--log-level` value.
pub fn parse_level(s: &str) -> Option<Level> {
    Level::parse(s)
}

/// Run the daemon; the process's exit code.
pub fn run(opts: DaemonOptions) -> i32 {
    crate::log::init(opts.log_level, opts.log_json);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    match rt.block_on(serve(opts)) {
        Ok(()) => 0,
        Err(msg) => {
            log(Level::Error, &msg, &[]);
            1
        }
    }
}

async fn serve(opts: DaemonOptions) -> Result<(), String> {
    // Open the engine once up front: reconcile what a crash left, and fail now (not on the
    // first request) when the state cannot be opened.
    let engine_opts = opts.engine.clone();
    tokio::task::spawn_blocking(move || Engine::open(engine_opts).map(drop))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("opening Wharf's state: {e}"))?;
    let listener = bind(&opts.listen).await?;
    let engines = Engines::new(opts.engine.clone());
    let socket = opts.listen.display().to_string();
    log(
        Level::Info,
        "serving the CRI",
        &[("address", &socket), ("version", env!("CARGO_PKG_VERSION"))],
    );
    // The signal starts a graceful stop: requests in flight finish, but a client that keeps
    // its connection open (kubelet always does) does not hold the daemon past GRACE.
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
    let _ = std::fs::remove_file(&opts.listen);
    served.map_err(|e| format!("serving {socket}: {e}"))?;
    log(Level::Info, "stopped", &[]);
    Ok(())
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
