//! `POST /build`: the classic builder's API, as `DOCKER_BUILDKIT=0 docker build` and
//! compose's classic path speak it. The body is the context as a tar; the query says the
//! rest (`t`, `dockerfile`, `buildargs`, `target`, `nocache`, `pull`, `labels`,
//! `networkmode`, `q`; `rm` and `forcerm` are what Wharf does anyway: step containers
//! always go). The answer is the JSON stream docker's CLI prints: `stream` lines, the
//! image id in `aux`, and a failure as `errorDetail`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use wharf_engine::build::{BuildEvent, BuildRequest};
use wharf_engine::model::NetworkMode;

use super::Api;
use super::http::{self, ApiError, Reply, Req};

/// A JSON object of strings in a query value (`buildargs`, `labels`); absent is empty.
fn string_map(r: &Req, key: &str) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(v) = r.q(key).filter(|v| !v.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let m: BTreeMap<String, Option<String>> =
        serde_json::from_str(v).map_err(|e| ApiError::bad(format!("invalid {key}: {e}")))?;
    Ok(m.into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect())
}

/// `POST /build`.
pub async fn build(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let network = match r.q("networkmode").unwrap_or("default") {
        "" | "default" | "bridge" => NetworkMode::Default,
        "none" => NetworkMode::None,
        "host" => NetworkMode::Host,
        n => {
            return Err(ApiError::bad(format!(
                "networkmode {n:?}: Wharf's builder takes default, bridge, none or host"
            )));
        }
    };
    if let Some(p) = r.q("platform").filter(|p| !p.is_empty()) {
        let host = format!(
            "linux/{}",
            wharf_engine::images::Platform::host().architecture
        );
        if p != host && p != "linux" {
            return Err(ApiError::bad(format!(
                "platform {p}: Wharf builds for this host's platform only ({host})"
            )));
        }
    }
    let mut req = BuildRequest {
        dockerfile_name: r.q("dockerfile").unwrap_or("Dockerfile").to_string(),
        tags: r.query_all.get("t").cloned().unwrap_or_default(),
        build_args: string_map(&r, "buildargs")?,
        target: r.q("target").filter(|t| !t.is_empty()).map(str::to_string),
        no_cache: r.flag("nocache", false),
        pull: r.flag("pull", false),
        network,
        labels: string_map(&r, "labels")?,
        ..Default::default()
    };
    let quiet = r.flag("q", false);
    let chunks = r.body_chunks();
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::spawn(move || {
        let send = |v: Value| {
            let _ = tx.blocking_send(http::line(&v));
        };
        let fail = |msg: String, code: i32| {
            send(json!({"errorDetail": {"message": msg, "code": code}, "error": msg}));
        };
        let e = match wharf_engine::Engine::open(opts) {
            Ok(e) => e,
            Err(err) => return fail(err.to_string(), 1),
        };
        let context = match e.unpack_context(http::ChunkReader::new(chunks)) {
            Ok(c) => c,
            Err(err) => return fail(err.to_string(), 1),
        };
        let path = match wharf_engine::build::context::resolve(context.path(), &req.dockerfile_name)
        {
            Ok(p) => p,
            Err(err) => return fail(format!("the Dockerfile: {err}"), 1),
        };
        req.dockerfile = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(err) => {
                return fail(
                    format!(
                        "Cannot locate specified Dockerfile: {} ({err})",
                        req.dockerfile_name
                    ),
                    1,
                );
            }
        };
        req.context = context.path().to_path_buf();
        // A client that leaves stops the build (docker's CLI closes on Ctrl-C).
        let interrupt = Arc::new(AtomicBool::new(false));
        req.interrupt = Some(interrupt.clone());
        let finished = Arc::new(AtomicBool::new(false));
        {
            let (tx, finished) = (tx.clone(), finished.clone());
            std::thread::spawn(move || {
                while !finished.load(Ordering::Relaxed) {
                    if tx.is_closed() {
                        interrupt.store(true, Ordering::Relaxed);
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            });
        }
        let built = e.build(&req, &mut |ev| {
            if quiet {
                return;
            }
            let text = match ev {
                BuildEvent::Step {
                    number,
                    total,
                    text,
                } => format!("Step {number}/{total} : {text}\n"),
                BuildEvent::Pulling(image) => format!("Pulling {image}\n"),
                BuildEvent::Output { bytes, .. } => String::from_utf8_lossy(bytes).into_owned(),
                BuildEvent::Cached { .. } => " ---> Using cache\n".to_string(),
                BuildEvent::StepDone { image, .. } => format!(" ---> {}\n", image.short()),
            };
            send(json!({"stream": text}));
        });
        match built {
            Ok(b) => {
                if !b.unused_args.is_empty() {
                    send(json!({"stream": format!(
                        "[Warning] One or more build-args [{}] were not consumed\n",
                        b.unused_args.join(" ")
                    )}));
                }
                let id = b.image.id.to_string();
                send(json!({"aux": {"ID": id}}));
                if quiet {
                    send(json!({"stream": format!("{id}\n")}));
                } else {
                    send(json!({"stream": format!("Successfully built {}\n", b.image.id.short())}));
                    for t in &b.tags {
                        send(json!({"stream": format!(
                            "Successfully tagged {}\n",
                            wharf_docker::views::familiar(t)
                        )}));
                    }
                }
            }
            Err(wharf_engine::Error::BuildStep { message, code }) => fail(message, code),
            Err(err) => fail(err.to_string(), 1),
        }
        finished.store(true, Ordering::Relaxed);
        e.release_pod_locks();
    });
    Ok(http::streamed("application/json", rx))
}
