//! `/images/...` and `/distribution/...`: pull with docker's progress messages (what docker
//! and compose draw as progress bars), list, inspect, history, tag, remove, prune, load,
//! save and push. Registry credentials come from the `X-Registry-Auth` header.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use hyper::StatusCode;
use serde_json::{Value, json};
use wharf_engine::images::{
    ArchiveFormat, BlobOutcome, Credentials, Images, Platform, PullEvent, PullOptions,
    PullProgress, Reference,
};
use wharf_engine::registry;

use super::Api;
use super::containers::ChannelWriter;
use super::http::{self, ApiError, Reply, Req};

/// docker's short id of a layer digest (12 hex digits).
fn short(d: &impl std::fmt::Display) -> String {
    let s = d.to_string();
    let hex = s.split_once(':').map_or(s.as_str(), |(_, h)| h);
    hex.chars().take(12).collect()
}

/// Credentials of `X-Registry-Auth` (base64url JSON `{"username", "password"}`; an
/// identity token is taken as a password for the token user, as registries expect).
fn registry_auth(r: &Req) -> Result<Option<Credentials>, ApiError> {
    let Some(raw) = r
        .headers
        .get("x-registry-auth")
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(None);
    };
    let raw = raw.trim();
    if raw.is_empty() || raw == "e30=" || raw == "e30" {
        return Ok(None);
    }
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(raw)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(raw))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(raw))
        .map_err(|_| ApiError::bad("X-Registry-Auth is not base64"))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad(format!("X-Registry-Auth is not JSON: {e}")))?;
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    if !s("identitytoken").is_empty() {
        return Ok(Some(Credentials {
            username: "<token>".into(),
            password: s("identitytoken"),
        }));
    }
    if s("username").is_empty() {
        return Ok(None);
    }
    Ok(Some(Credentials {
        username: s("username"),
        password: s("password"),
    }))
}

/// Pull progress as docker's JSON messages.
struct Progress {
    tx: tokio::sync::mpsc::Sender<bytes::Bytes>,
    last: Mutex<std::collections::HashMap<String, u64>>,
}

impl Progress {
    fn send(&self, v: Value) {
        let _ = self.tx.blocking_send(http::line(&v));
    }
}

fn bar(done: u64, total: u64) -> String {
    let width = 50u64;
    let filled = (done.min(total) * width).checked_div(total).unwrap_or(0);
    let mut s = String::from("[");
    for i in 0..width {
        s.push(if i < filled.saturating_sub(1) {
            '='
        } else if i + 1 == filled {
            '>'
        } else {
            ' '
        });
    }
    s.push(']');
    s
}

impl PullProgress for Progress {
    fn event(&self, e: PullEvent<'_>) {
        match e {
            PullEvent::Resolved { layers, .. } => {
                for l in layers {
                    self.send(json!({"status": "Pulling fs layer", "progressDetail": {}, "id": short(&l.digest)}));
                }
            }
            PullEvent::LayerExists { digest } => {
                self.send(
                    json!({"status": "Already exists", "progressDetail": {}, "id": short(digest)}),
                );
            }
            PullEvent::Downloading {
                digest,
                done,
                total,
            } => {
                // At most one message a percent.
                let id = short(digest);
                let step = (total / 100).max(1);
                {
                    let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                    let prev = last.entry(id.clone()).or_insert(u64::MAX);
                    if *prev != u64::MAX && done / step == *prev / step && done != total {
                        return;
                    }
                    *prev = done;
                }
                self.send(json!({
                    "status": "Downloading",
                    "progressDetail": {"current": done, "total": total},
                    "progress": format!("{} {}B/{}B", bar(done, total), done, total),
                    "id": id,
                }));
            }
            PullEvent::Downloaded { digest } => {
                self.send(json!({"status": "Download complete", "progressDetail": {}, "id": short(digest)}));
            }
            PullEvent::Extracting { digest, .. } => {
                self.send(
                    json!({"status": "Extracting", "progressDetail": {}, "id": short(digest)}),
                );
            }
            PullEvent::Extracted { digest } => {
                self.send(
                    json!({"status": "Pull complete", "progressDetail": {}, "id": short(digest)}),
                );
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

/// `POST /images/create?fromImage=&tag=&platform=` (pull), or `?fromSrc=-&repo=&tag=`
/// (import of a root filesystem tarball in the body).
pub async fn pull(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    if let Some(src) = r.q("fromSrc").filter(|s| !s.is_empty()) {
        if src != "-" {
            return Err(ApiError::not_implemented(
                "import from a URL is not supported: send the tarball as the body (fromSrc=-)",
            ));
        }
        return Err(ApiError::not_implemented(
            "import (fromSrc) is served by `wharf import`; not through the API yet",
        ));
    }
    let image = r
        .q("fromImage")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad("fromImage is empty"))?
        .to_string();
    let tag = r.q("tag").filter(|t| !t.is_empty()).map(str::to_string);
    let reference = match &tag {
        Some(t) if t.starts_with("sha256:") => format!("{image}@{t}"),
        Some(t) => format!("{image}:{t}"),
        None if image.contains(':') || image.contains('@') => image.clone(),
        None => format!("{image}:latest"),
    };
    let platform = r
        .q("platform")
        .filter(|p| !p.is_empty())
        .map(Platform::parse)
        .transpose()
        .map_err(|e| ApiError::bad(e.to_string()))?;
    let creds = registry_auth(r)?;
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::spawn(move || {
        let progress = Progress {
            tx: tx.clone(),
            last: Default::default(),
        };
        let shown = tag.clone().unwrap_or_else(|| "latest".into());
        progress
            .send(json!({"status": format!("Pulling from {}", repo_path(&image)), "id": shown}));
        let images = match Images::open(&opts.root, &opts.run, opts.registries.clone()) {
            Ok(s) => s,
            Err(e) => {
                progress.send(
                    json!({"errorDetail": {"message": e.to_string()}, "error": e.to_string()}),
                );
                return;
            }
        };
        let had = images.resolve(&reference).ok().map(|i| i.id);
        let po = PullOptions {
            platform,
            creds,
            ..Default::default()
        };
        match images.pull(&reference, &po, &progress) {
            Ok(img) => {
                progress.send(json!({"status": format!("Digest: {}", img.manifest_digest)}));
                let verdict = if had.as_ref() == Some(&img.id) {
                    format!("Status: Image is up to date for {reference}")
                } else {
                    format!("Status: Downloaded newer image for {reference}")
                };
                progress.send(json!({"status": verdict}));
            }
            Err(e) => {
                let msg = e.to_string();
                progress.send(json!({"errorDetail": {"message": msg}, "error": msg}));
            }
        }
    });
    Ok(http::streamed("application/json", rx))
}

/// `library/busybox` of `busybox`, as docker's "Pulling from" says it.
fn repo_path(image: &str) -> String {
    match Reference::parse(image) {
        Ok(r) => r.repository,
        Err(_) => image.to_string(),
    }
}

/// `GET /images/json?all=&filters=`: one summary per image.
pub async fn list(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let filters = r.filters()?;
    let all = r.flag("all", false);
    let docs = api
        .engine(move |e| {
            let rows = e.images().list_shown(all)?;
            let users: Vec<String> = e
                .list_containers(&wharf_engine::ContainerFilter {
                    all: true,
                    ..Default::default()
                })?
                .into_iter()
                .map(|c| c.row.image_id)
                .collect();
            let mut order: Vec<String> = Vec::new();
            let mut by_id: std::collections::HashMap<String, (Vec<String>, Vec<String>, u64, i64)> =
                Default::default();
            for row in rows {
                let entry = by_id.entry(row.id.clone()).or_insert_with(|| {
                    order.push(row.id.clone());
                    (Vec::new(), Vec::new(), row.size, row.created_at)
                });
                if let Some(n) = &row.name {
                    if n.contains('@') {
                        entry.1.push(n.clone());
                    } else {
                        entry.0.push(wharf_docker::views::familiar(n));
                        let repo = n.rsplit_once(':').map_or(n.as_str(), |(r, _)| r);
                        entry.1.push(format!(
                            "{}@{}",
                            wharf_docker::views::familiar(repo),
                            row.digest
                        ));
                    }
                }
            }
            let mut out = Vec::new();
            for id in order {
                let (tags, digests, size, created) = by_id.remove(&id).unwrap_or_default();
                let dangling = tags.is_empty();
                let keep = filters.iter().all(|(k, vals)| {
                    vals.iter().all(|v| match k.as_str() {
                        "dangling" => (v == "true") == dangling,
                        // A name with or without its tag, globs within path elements.
                        "reference" => tags.iter().any(|t| {
                            let repo = match t.rfind(':') {
                                Some(i) if !t[i..].contains('/') => &t[..i],
                                _ => t.as_str(),
                            };
                            t == v || repo == v || glob(v, t) || glob(v, repo)
                        }),
                        "label" => true,
                        _ => true,
                    })
                });
                if !keep {
                    continue;
                }
                let digests: BTreeSet<String> = digests.into_iter().collect();
                out.push(json!({
                    "Id": id,
                    "ParentId": "",
                    "RepoTags": tags,
                    "RepoDigests": digests,
                    "Created": created,
                    "Size": size,
                    "SharedSize": -1,
                    "VirtualSize": size,
                    "Labels": {},
                    "Containers": users.iter().filter(|u| **u == id).count(),
                }));
            }
            Ok(out)
        })
        .await?;
    Ok(http::json(&docs))
}

/// docker's `reference` filter patterns: `*` matches within a path element.
fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && n[0] != b'/' && go(p, &n[1..])),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// `GET /images/{name}/json`.
pub async fn inspect(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let doc = api
        .engine(move |e| {
            let details = e
                .images()
                .inspect(&name)
                .map_err(|_| ApiError::not_found(format!("No such image: {name}")))?;
            let mut doc = wharf_docker::views::image(&details);
            // docker's names: `busybox:latest` for docker.io/library/busybox:latest.
            for key in ["RepoTags", "RepoDigests"] {
                if let Some(list) = doc[key].as_array_mut() {
                    for v in list.iter_mut() {
                        if let Some(s) = v.as_str() {
                            *v = Value::String(wharf_docker::views::familiar(s));
                        }
                    }
                }
            }
            Ok(doc)
        })
        .await?;
    Ok(http::json(&doc))
}

/// `GET /images/{name}/history`.
pub async fn history(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let docs = api
        .engine(move |e| {
            let img = e
                .images()
                .resolve(&name)
                .map_err(|_| ApiError::not_found(format!("No such image: {name}")))?;
            let steps = e.images().history(&img)?;
            Ok(steps
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    json!({
                        "Id": if i == 0 { img.id.to_string() } else { "<missing>".into() },
                        "Created": wharf_docker::listing::epoch(&h.created).unwrap_or(0),
                        "CreatedBy": h.created_by,
                        "Tags": if i == 0 { img.names.iter().filter(|n| !n.contains('@')).map(|n| wharf_docker::views::familiar(n)).collect::<Vec<_>>() } else { Vec::new() },
                        "Size": h.size,
                        "Comment": h.comment,
                    })
                })
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(http::json(&docs))
}

/// `POST /images/{name}/tag?repo=&tag=`.
pub async fn tag(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let repo = r
        .q("repo")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad("repository name must have at least one component"))?;
    let target = match r.q("tag").filter(|t| !t.is_empty()) {
        Some(t) => format!("{repo}:{t}"),
        None => format!("{repo}:latest"),
    };
    api.engine(move |e| {
        let img = e
            .images()
            .resolve(&name)
            .map_err(|_| ApiError::not_found(format!("No such image: {name}")))?;
        e.images()
            .tag(&img, &target)
            .map_err(|err| ApiError::bad(format!("tagging {name} as {target}: {err}")))?;
        Ok(http::empty(StatusCode::CREATED))
    })
    .await
}

/// `DELETE /images/{name}?force=&noprune=`.
pub async fn remove(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let force = r.flag("force", false);
    let docs = api
        .engine(move |e| {
            e.images()
                .resolve(&name)
                .map_err(|_| ApiError::not_found(format!("No such image: {name}")))?;
            let (names, deleted) = e.images().remove(&name, force).map_err(|err| {
                let msg = err.to_string();
                if msg.contains("in use") || msg.contains("used by") {
                    ApiError::conflict(msg)
                } else {
                    ApiError::from(err)
                }
            })?;
            let mut out: Vec<Value> = names
                .iter()
                .map(|n| json!({"Untagged": wharf_docker::views::familiar(n)}))
                .collect();
            if let Some(id) = deleted {
                out.push(json!({"Deleted": id.to_string()}));
            }
            Ok(out)
        })
        .await?;
    Ok(http::json(&docs))
}

/// `POST /images/prune?filters=`: unnamed images (with `dangling=false`, every unused one).
pub async fn prune(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let all = r
        .filters()?
        .get("dangling")
        .is_some_and(|v| v.iter().any(|d| d == "false" || d == "0"));
    let doc = api
        .engine(move |e| {
            let used: HashSet<String> = e
                .list_containers(&wharf_engine::ContainerFilter {
                    all: true,
                    ..Default::default()
                })?
                .into_iter()
                .map(|c| c.row.image_id)
                .collect();
            let mut deleted = Vec::new();
            let mut space = 0u64;
            let mut seen = HashSet::new();
            for row in e.images().list()? {
                if !seen.insert(row.id.clone()) || used.contains(&row.id) {
                    continue;
                }
                if !all && row.name.is_some() {
                    continue;
                }
                if let Ok((names, Some(id))) = e.images().remove(&row.id, true) {
                    for n in names {
                        deleted.push(json!({"Untagged": n}));
                    }
                    deleted.push(json!({"Deleted": id.to_string()}));
                    space += row.size;
                }
            }
            let _ = e.images().collect_garbage();
            Ok(json!({"ImagesDeleted": deleted, "SpaceReclaimed": space}))
        })
        .await?;
    Ok(http::json(&doc))
}

/// `POST /images/load?quiet=`: a docker-save or OCI archive in the body.
pub async fn load(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    let chunks = r.body_chunks();
    let loaded = api
        .engine(move |e| {
            Ok(e.images()
                .load(http::ChunkReader::new(chunks), "the request body")?)
        })
        .await?;
    let (tx, rx) = tokio::sync::mpsc::channel(loaded.len() + 1);
    for l in loaded {
        let what = match l.names.first() {
            Some(n) => format!("Loaded image: {}", wharf_docker::views::familiar(n)),
            None => format!("Loaded image ID: {}", l.id),
        };
        let _ = tx.try_send(http::line(&json!({"stream": format!("{what}\n")})));
    }
    Ok(http::streamed("application/json", rx))
}

/// `GET /images/{name}/get`, `GET /images/get?names=`: docker-save archives.
pub async fn save(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let mut names: Vec<String> = r.query_all.get("names").cloned().unwrap_or_default();
    if !r.param("name").is_empty() {
        names.push(r.param("name").to_string());
    }
    if names.is_empty() {
        return Err(ApiError::bad("no image to save"));
    }
    {
        let names = names.clone();
        api.engine(move |e| {
            for n in &names {
                e.images()
                    .resolve(n)
                    .map_err(|_| ApiError::not_found(format!("No such image: {n}")))?;
            }
            Ok(())
        })
        .await?;
    }
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        let Ok(images) = Images::open(&opts.root, &opts.run, opts.registries.clone()) else {
            return;
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let _ = images.save(
            &refs,
            ArchiveFormat::Docker,
            std::io::BufWriter::with_capacity(64 << 10, ChannelWriter(tx)),
        );
    });
    Ok(http::streamed("application/x-tar", rx))
}

/// `POST /images/{name}/push?tag=`: progress messages as docker's.
pub async fn push(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let reference = match r.q("tag").filter(|t| !t.is_empty()) {
        Some(t) => format!("{name}:{t}"),
        None => name.clone(),
    };
    let creds = registry_auth(r)?;
    {
        let reference = reference.clone();
        api.engine(move |e| {
            e.images()
                .resolve(&reference)
                .map_err(|_| ApiError::not_found(format!("No such image: {reference}")))?;
            Ok(())
        })
        .await?;
    }
    let opts = api.engines.options();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        let send = |v: Value| {
            let _ = tx.blocking_send(http::line(&v));
        };
        send(json!({"status": format!("The push refers to repository [{}]", name)}));
        // Credentials from the header are not passed on: the push uses docker's
        // config.json, as `wharf push` does.
        let _ = creds;
        let result = Images::open(&opts.root, &opts.run, opts.registries.clone()).and_then(|s| {
            s.push(&reference, &mut |d, outcome| {
                let status = match outcome {
                    BlobOutcome::Exists | BlobOutcome::Mounted(_) => "Layer already exists",
                    BlobOutcome::Pushed => "Pushed",
                };
                send(json!({"status": status, "progressDetail": {}, "id": short(d)}));
            })
        });
        match result {
            Ok(report) => {
                let tag = reference
                    .rsplit_once(':')
                    .map_or("latest", |(_, t)| t)
                    .to_string();
                send(json!({
                    "status": format!("{tag}: digest: {} size: {}", report.digest, report.size),
                    "aux": {"Tag": tag, "Digest": report.digest.to_string(), "Size": report.size},
                }))
            }
            Err(e) => {
                let m = e.to_string();
                send(json!({"errorDetail": {"message": m}, "error": m}));
            }
        }
    });
    Ok(http::streamed("application/json", rx))
}

/// `GET /distribution/{name}/json`: the image's descriptor in its registry.
pub async fn distribution(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let name = r.param("name").to_string();
    let creds = registry_auth(r)?;
    let registries = api.engines.options().registries;
    let doc = tokio::task::spawn_blocking(move || -> Result<Value, ApiError> {
        let reference = Reference::parse(&name).map_err(|e| ApiError::bad(e.to_string()))?;
        let m = registry::remote_manifest(&registries, &reference, creds)
            .map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e.to_string()))?;
        Ok(json!({
            "Descriptor": {"mediaType": m.media_type, "digest": m.digest.to_string(), "size": m.size},
            "Platforms": [{"architecture": Platform::host().architecture, "os": "linux"}],
        }))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(http::json(&doc))
}
