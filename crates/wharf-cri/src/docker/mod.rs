//! The Docker Engine API, served by `wharf daemon` beside the CRI from the same engine:
//! what docker's CLI, docker compose, docker-py and the testcontainers libraries speak.
//!
//! HTTP/1.1 on a unix socket (root-only: the API is root on the host, as docker's is),
//! versioned (`/v1.41/...` up to [`MAX_VERSION`]) and unversioned paths, docker's JSON
//! errors and status codes, and hijacked connections for attach and exec (see
//! [`streams`]). Every handler goes through the engine's typed API; a container's create
//! request is the one `wharf run` makes ([`wharf_docker::CreateRequest`]).
//!
//! Connections are admitted through the daemon's gate ([`crate::conn_gate`]): each must
//! send its first request head within 10 s, and at most 128 may be waiting to.

mod build;
mod containers;
mod exec;
pub mod http;
mod images;
mod networks;
mod streams;
mod system;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use tokio::net::UnixListener;

use crate::conn_gate::{self, Gate};
use crate::engines::Engines;
use crate::log::{Level, log};
use http::{ApiError, Reply, Req};

/// The newest API version served (docker 28.2's).
pub const MAX_VERSION: (u32, u32) = (1, 50);
/// The oldest API version served.
pub const MIN_VERSION: (u32, u32) = (1, 41);

/// Default socket (docker's is /run/docker.sock).
pub const DEFAULT_SOCKET: &str = "/run/wharf/docker.sock";

/// What the handlers share.
pub struct Api {
    /// Where engine calls run.
    pub engines: Engines,
    /// Exec instances made by `POST /containers/{id}/exec`, by id.
    pub execs: exec::Execs,
}

impl Api {
    /// The API over `engines`.
    pub fn new(engines: Engines) -> Arc<Api> {
        Arc::new(Api {
            engines,
            execs: Default::default(),
        })
    }

    /// Run an engine call on the blocking pool.
    pub async fn engine<T: Send + 'static>(
        &self,
        f: impl FnOnce(&wharf_engine::Engine) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.engines
            .with(f, ApiError::from, |e| {
                ApiError::internal(format!("engine call failed: {e}"))
            })
            .await
    }
}

/// Serve the API on `listener` until the daemon stops.
pub async fn serve(listener: UnixListener, api: Arc<Api>) {
    let gate = Gate::new();
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                log(
                    Level::Warn,
                    "docker API: accept failed",
                    &[("error", &e.to_string())],
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let ticket = gate.enter();
        let api = api.clone();
        tokio::spawn(connection(stream, api, ticket));
    }
}

/// One connection: its first request must come within the handshake timeout, unless newer
/// connections push it out first; after that it is a client's (docker's clients keep
/// connections for more requests).
async fn connection(stream: tokio::net::UnixStream, api: Arc<Api>, ticket: conn_gate::Ticket) {
    let evicted = ticket.evicted();
    let ticket = Arc::new(std::sync::Mutex::new(Some(ticket)));
    let seen = Arc::new(AtomicBool::new(false));
    let svc = {
        let (ticket, seen) = (ticket.clone(), seen.clone());
        hyper::service::service_fn(move |req: Request<Incoming>| {
            // Shown a request: no longer waiting.
            seen.store(true, Ordering::Relaxed);
            ticket.lock().unwrap_or_else(|e| e.into_inner()).take();
            let api = api.clone();
            async move { Ok::<_, std::convert::Infallible>(dispatch(api, req).await) }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(conn_gate::HANDSHAKE_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
        .with_upgrades();
    let silent = {
        let seen = seen.clone();
        async move {
            tokio::time::sleep(conn_gate::HANDSHAKE_TIMEOUT).await;
            if seen.load(Ordering::Relaxed) {
                std::future::pending::<()>().await;
            }
        }
    };
    let evicted_first = async move {
        evicted.notified().await;
        if seen.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                log(Level::Debug, "docker API: connection ended", &[("error", &e.to_string())]);
            }
        }
        () = silent => {}
        () = evicted_first => {}
    }
}

/// `(1, 50)` of `1.50`.
fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Route a request to its handler; every error becomes docker's JSON error.
async fn dispatch(api: Arc<Api>, mut req: Request<Incoming>) -> Reply {
    // The daemon gives back what a busy spell left once it has been quiet a while.
    crate::idle::touch();
    let method = req.method().clone();
    let uri_path = req.uri().path().to_string();
    let query = http::parse_query(req.uri().query().unwrap_or(""));
    // `/v1.50/containers/json` or `/containers/json`.
    let (version, path) = match uri_path
        .strip_prefix("/v")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(v, rest)| parse_version(v).map(|v| (v, format!("/{rest}"))))
    {
        Some((v, p)) => (v, p),
        None => (MAX_VERSION, uri_path.clone()),
    };
    if version > MAX_VERSION {
        return ApiError::bad(format!(
            "client version {}.{} is too new. Maximum supported API version is {}.{}",
            version.0, version.1, MAX_VERSION.0, MAX_VERSION.1
        ))
        .reply();
    }
    if version < MIN_VERSION {
        return ApiError::bad(format!(
            "client version {}.{} is too old. Minimum supported API version is {}.{}, please upgrade your client to a newer version",
            version.0, version.1, MIN_VERSION.0, MIN_VERSION.1
        ))
        .reply();
    }
    let upgrade = Some(hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let r = Req {
        method: method.clone(),
        path: path.clone(),
        version,
        params: HashMap::new(),
        query: query
            .iter()
            .map(|(k, v)| (k.clone(), v.last().cloned().unwrap_or_default()))
            .collect(),
        query_all: query,
        headers: parts.headers,
        body: Some(body),
        upgrade,
    };
    log(
        Level::Debug,
        "docker API request",
        &[("method", method.as_str()), ("path", &path)],
    );
    let mut reply = match route(api, r).await {
        Ok(reply) => reply,
        Err(e) => {
            if e.status.is_server_error() {
                log(
                    Level::Warn,
                    "docker API request failed",
                    &[
                        ("method", method.as_str()),
                        ("path", &path),
                        ("error", &e.message),
                    ],
                );
            }
            e.reply()
        }
    };
    let h = reply.headers_mut();
    h.insert(
        "Api-Version",
        format!("{}.{}", MAX_VERSION.0, MAX_VERSION.1)
            .parse()
            .expect("a header value"),
    );
    h.insert(
        "Docker-Experimental",
        "false".parse().expect("a header value"),
    );
    h.insert("Ostype", "linux".parse().expect("a header value"));
    h.insert(
        "Server",
        concat!("Wharf/", env!("CARGO_PKG_VERSION"), " (linux)")
            .parse()
            .expect("a header value"),
    );
    reply
}

/// The segments of a path, without empty ones.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

async fn route(api: Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let path = r.path.clone();
    let seg = segments(&path);
    let m = r.method.clone();
    let mut param = |k: &str, v: &str| {
        r.params.insert(k.to_string(), v.to_string());
    };
    use Method as M;
    match (&m, seg.as_slice()) {
        (&M::GET | &M::HEAD, ["_ping"]) => Ok(system::ping(&r)),
        (&M::GET, ["version"]) => system::version(&api).await,
        (&M::GET, ["info"]) => system::info(&api).await,
        (&M::GET, ["events"]) => system::events(&api, &r).await,
        (&M::GET, ["system", "df"]) => system::df(&api, &r).await,
        (&M::POST, ["auth"]) => system::auth(&api, &mut r).await,

        (&M::POST, ["containers", "create"]) => containers::create(&api, r).await,
        (&M::GET, ["containers", "json"]) => containers::list(&api, &r).await,
        (&M::POST, ["containers", "prune"]) => containers::prune(&api, &r).await,
        (_, ["containers", id, rest @ ..]) => {
            let id = id.to_string();
            param("id", &id);
            match (&m, rest) {
                (&M::GET, ["json"]) => containers::inspect(&api, &r).await,
                (&M::POST, ["start"]) => containers::start(&api, &r).await,
                (&M::POST, ["stop"]) => containers::stop(&api, &r).await,
                (&M::POST, ["restart"]) => containers::restart(&api, &r).await,
                (&M::POST, ["kill"]) => containers::kill(&api, &r).await,
                (&M::POST, ["pause"]) => containers::pause(&api, &r, true).await,
                (&M::POST, ["unpause"]) => containers::pause(&api, &r, false).await,
                (&M::POST, ["wait"]) => containers::wait(&api, &r).await,
                (&M::DELETE, []) => containers::remove(&api, &r).await,
                (&M::GET, ["logs"]) => containers::logs(&api, &r).await,
                (&M::GET, ["top"]) => containers::top(&api, &r).await,
                (&M::GET, ["stats"]) => containers::stats(&api, &r).await,
                (&M::GET, ["changes"]) => containers::changes(&api, &r).await,
                (&M::GET, ["export"]) => containers::export(&api, &r).await,
                (&M::POST, ["rename"]) => containers::rename(&api, &r).await,
                (&M::POST, ["update"]) => containers::update(&api, r).await,
                (&M::POST, ["resize"]) => streams::resize_container(&api, &r).await,
                (&M::POST, ["attach"]) => streams::attach(&api, r).await,
                (&M::GET, ["attach", "ws"]) => Err(ApiError::not_implemented(
                    "attach over WebSocket is not supported: use the hijacked attach",
                )),
                (&M::POST, ["exec"]) => exec::create(&api, r).await,
                (&M::GET | &M::HEAD | &M::PUT, ["archive"]) => containers::archive(&api, r).await,
                _ => Err(no_route(&m, &path)),
            }
        }
        (_, ["exec", id, rest @ ..]) => {
            param("id", id);
            match (&m, rest) {
                (&M::POST, ["start"]) => exec::start(&api, r).await,
                (&M::GET, ["json"]) => exec::inspect(&api, &r).await,
                (&M::POST, ["resize"]) => exec::resize(&api, &r).await,
                _ => Err(no_route(&m, &path)),
            }
        }
        (&M::POST, ["commit"]) => containers::commit(&api, r).await,

        (&M::POST, ["images", "create"]) => images::pull(&api, &r).await,
        (&M::GET, ["images", "json"]) => images::list(&api, &r).await,
        (&M::POST, ["images", "prune"]) => images::prune(&api, &r).await,
        (&M::POST, ["images", "load"]) => images::load(&api, r).await,
        (&M::GET, ["images", "search"]) => Err(ApiError::not_implemented(
            "image search is not supported: Wharf does not query a registry's index",
        )),
        (&M::GET, ["images", "get"]) => images::save(&api, &r).await,
        (_, ["images", name @ .., last]) if !name.is_empty() => {
            let name = name.join("/");
            param("name", &name);
            match (&m, *last) {
                (&M::GET, "json") => images::inspect(&api, &r).await,
                (&M::GET, "history") => images::history(&api, &r).await,
                (&M::POST, "tag") => images::tag(&api, &r).await,
                (&M::POST, "push") => images::push(&api, &r).await,
                (&M::GET, "get") => images::save(&api, &r).await,
                (&M::DELETE, _) => {
                    param("name", &format!("{name}/{last}"));
                    images::remove(&api, &r).await
                }
                _ => Err(no_route(&m, &path)),
            }
        }
        (&M::DELETE, ["images", name]) => {
            param("name", name);
            images::remove(&api, &r).await
        }
        (&M::GET, ["distribution", name @ .., "json"]) => {
            param("name", &name.join("/"));
            images::distribution(&api, &r).await
        }
        (&M::POST, ["build"]) => build::build(&api, r).await,
        (&M::POST, ["build", "prune"]) => {
            let pruned = api.engine(|e| Ok(e.prune_build_cache()?)).await?;
            Ok(http::json(&serde_json::json!({
                "CachesDeleted": pruned.images,
                "SpaceReclaimed": pruned.bytes,
            })))
        }

        (&M::GET, ["networks"]) => networks::list(&api, &r).await,
        (&M::POST, ["networks", "create"]) => networks::create(&api, r).await,
        (&M::POST, ["networks", "prune"]) => networks::prune(&api, &r).await,
        (_, ["networks", id, rest @ ..]) => {
            param("id", id);
            match (&m, rest) {
                (&M::GET, []) => networks::inspect(&api, &r).await,
                (&M::DELETE, []) => networks::remove(&api, &r).await,
                (&M::POST, ["connect"]) => networks::connect(&api, r).await,
                (&M::POST, ["disconnect"]) => networks::disconnect(&api, r).await,
                _ => Err(no_route(&m, &path)),
            }
        }
        (&M::GET, ["volumes"]) => networks::volume_list(&api, &r).await,
        (&M::POST, ["volumes", "create"]) => networks::volume_create(&api, r).await,
        (&M::POST, ["volumes", "prune"]) => networks::volume_prune(&api, &r).await,
        (_, ["volumes", name]) => {
            param("name", name);
            match m {
                M::GET => networks::volume_inspect(&api, &r).await,
                M::DELETE => networks::volume_remove(&api, &r).await,
                _ => Err(no_route(&m, &path)),
            }
        }
        (
            _,
            ["swarm", ..]
            | ["services", ..]
            | ["nodes", ..]
            | ["tasks", ..]
            | ["secrets", ..]
            | ["configs", ..]
            | ["plugins", ..],
        ) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "This node is not a swarm manager. Wharf serves no swarm, services, secrets, configs or plugins.",
        )),
        _ => Err(no_route(&m, &path)),
    }
}

fn no_route(m: &Method, path: &str) -> ApiError {
    ApiError::not_found(format!("page not found: {m} {path}"))
}
