//! A small registry on loopback for tests that need answers a real registry will not give:
//! Bearer-token auth with its own token endpoint, schema 1 manifests, blobs whose bytes do
//! not match their digest, redirects to "blob storage", unknown media types, hostile layers.
//!
//! HTTP/1.1, one request per connection (`Connection: close`), GET and HEAD only. It serves
//! whatever [`FakeRegistry::route`] was given, behind optional auth; paths under `/storage/`
//! play the blob storage a registry redirects to and need no auth.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha2::{Digest as _, Sha256};

/// A canned answer.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Reply {
    /// 200 with a content type.
    pub fn ok(content_type: &str, body: Vec<u8>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }
}

/// Access control of the fake registry.
#[derive(Clone, Debug)]
pub enum Auth {
    /// Anyone.
    None,
    /// `Authorization: Bearer <token>` required; `/token` hands out the token, to anyone
    /// when `creds` is None, else only with those Basic credentials.
    Bearer {
        /// The token.
        token: String,
        /// `user:password` the token endpoint wants.
        creds: Option<String>,
    },
}

struct Shared {
    routes: Mutex<HashMap<String, Reply>>,
    /// Paths whose next answer breaks off after this many body bytes.
    cut: Mutex<HashMap<String, usize>>,
    auth: Mutex<Auth>,
    requests: Mutex<Vec<String>>,
    stop: AtomicBool,
    hits: AtomicUsize,
}

/// The running server; stops when dropped.
pub struct FakeRegistry {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// `sha256:<hex>` of bytes.
pub fn digest(b: &[u8]) -> String {
    let h = Sha256::digest(b);
    let mut s = String::from("sha256:");
    for x in h {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

impl FakeRegistry {
    /// Start on a free loopback port.
    pub fn start() -> FakeRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Shared {
            routes: Mutex::new(HashMap::new()),
            cut: Mutex::new(HashMap::new()),
            auth: Mutex::new(Auth::None),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            hits: AtomicUsize::new(0),
        });
        let s2 = shared.clone();
        let a2 = addr.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s2.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    let s3 = s2.clone();
                    let a3 = a2.clone();
                    std::thread::spawn(move || {
                        let _ = serve(c, &s3, &a3);
                    });
                }
            }
        });
        FakeRegistry {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// Answer GET `path` with `reply`.
    pub fn route(&self, path: &str, reply: Reply) {
        self.shared
            .routes
            .lock()
            .unwrap()
            .insert(path.to_string(), reply);
    }

    /// Make the next GET of `path` close the connection after `bytes` bytes of its body
    /// (a network failure in the middle of a download).
    pub fn cut_next(&self, path: &str, bytes: usize) {
        self.shared
            .cut
            .lock()
            .unwrap()
            .insert(path.to_string(), bytes);
    }

    /// Set the access control.
    pub fn set_auth(&self, auth: Auth) {
        *self.shared.auth.lock().unwrap() = auth;
    }

    /// Request lines seen so far (`GET /v2/... auth=<Authorization header or ->`).
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Serve a blob; returns its digest.
    pub fn blob(&self, repo: &str, bytes: Vec<u8>) -> String {
        let d = digest(&bytes);
        self.route(
            &format!("/v2/{repo}/blobs/{d}"),
            Reply::ok("application/octet-stream", bytes),
        );
        d
    }

    /// Serve a manifest under `reference` (tag) and under its digest; returns the digest.
    pub fn manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> String {
        let d = digest(&bytes);
        let mut r = Reply::ok(media_type, bytes);
        r.headers.push(("Docker-Content-Digest".into(), d.clone()));
        self.route(&format!("/v2/{repo}/manifests/{reference}"), r.clone());
        self.route(&format!("/v2/{repo}/manifests/{d}"), r);
        d
    }

    /// Serve an OCI image of uncompressed `layers` (tar streams) as `repo:tag`; returns the
    /// manifest digest.
    pub fn image(&self, repo: &str, tag: &str, layers: &[Vec<u8>]) -> String {
        let layers: Vec<(Vec<u8>, String, &str)> = layers
            .iter()
            .map(|l| {
                (
                    l.clone(),
                    digest(l),
                    "application/vnd.oci.image.layer.v1.tar",
                )
            })
            .collect();
        self.image_of(repo, tag, &layers)
    }

    /// Serve an OCI image of `(blob, diff id, media type)` layers as `repo:tag` (compressed
    /// layers, or ones whose diff id lies); returns the manifest digest.
    pub fn image_of(&self, repo: &str, tag: &str, layers: &[(Vec<u8>, String, &str)]) -> String {
        let diff_ids: Vec<&String> = layers.iter().map(|(_, d, _)| d).collect();
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Cmd": ["sh"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        let config = serde_json::to_vec(&config).unwrap();
        let cd = self.blob(repo, config.clone());
        let descs: Vec<serde_json::Value> = layers
            .iter()
            .map(|(l, _, media_type)| {
                let d = self.blob(repo, l.clone());
                serde_json::json!({"mediaType": media_type, "digest": d, "size": l.len()})
            })
            .collect();
        let m = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": config.len()},
            "layers": descs,
        });
        self.manifest(
            repo,
            tag,
            "application/vnd.oci.image.manifest.v1+json",
            serde_json::to_vec(&m).unwrap(),
        )
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(c: TcpStream, s: &Shared, addr: &str) -> std::io::Result<()> {
    s.hits.fetch_add(1, Ordering::SeqCst);
    let mut r = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let authz = headers.get("authorization").cloned();
    let range = headers.get("range").cloned();
    s.requests.lock().unwrap().push(format!(
        "{method} {target} auth={}{}",
        authz.as_deref().unwrap_or("-"),
        range
            .as_deref()
            .map(|r| format!(" range={r}"))
            .unwrap_or_default()
    ));
    let path = target.split('?').next().unwrap_or("").to_string();
    let auth = s.auth.lock().unwrap().clone();
    let reply = if path == "/token" {
        match &auth {
            Auth::Bearer { token, creds } => {
                let allowed = match creds {
                    None => true,
                    Some(c) => authz.as_deref() == Some(&basic(c)),
                };
                if allowed {
                    Reply::ok(
                        "application/json",
                        serde_json::to_vec(&serde_json::json!({"token": token})).unwrap(),
                    )
                } else {
                    Reply {
                        status: 401,
                        headers: vec![],
                        body: b"{\"details\":\"bad credentials\"}".to_vec(),
                    }
                }
            }
            Auth::None => Reply {
                status: 404,
                headers: vec![],
                body: vec![],
            },
        }
    } else if let Auth::Bearer { token, .. } = &auth
        && !path.starts_with("/storage/")
        && authz.as_deref() != Some(&format!("Bearer {token}"))
    {
        let repo = path
            .strip_prefix("/v2/")
            .and_then(|p| {
                p.rsplit_once("/manifests/")
                    .or_else(|| p.rsplit_once("/blobs/"))
            })
            .map(|(r, _)| r.to_string())
            .unwrap_or_default();
        Reply {
            status: 401,
            headers: vec![(
                "WWW-Authenticate".into(),
                format!(
                    "Bearer realm=\"http://{addr}/token\",service=\"fake-registry\",scope=\"repository:{repo}:pull\""
                ),
            )],
            body: br#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#
                .to_vec(),
        }
    } else if path == "/v2/" {
        Reply::ok("application/json", b"{}".to_vec())
    } else {
        s.routes
            .lock()
            .unwrap()
            .get(&path)
            .cloned()
            .unwrap_or(Reply {
                status: 404,
                headers: vec![("Content-Type".into(), "application/json".into())],
                body: br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#
                    .to_vec(),
            })
    };
    // Byte ranges of blobs (`bytes=N-`), as registries serve them for resumed downloads.
    let mut reply = reply;
    if let Some(off) = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok())
        && reply.status == 200
        && path.contains("/blobs/")
        && off <= reply.body.len()
    {
        reply.status = 206;
        reply.headers.push((
            "Content-Range".into(),
            format!(
                "bytes {off}-{}/{}",
                reply.body.len().saturating_sub(1),
                reply.body.len()
            ),
        ));
        reply.body = reply.body[off..].to_vec();
    }
    let mut out = c;
    let reason = match reply.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    let cut = s.cut.lock().unwrap().remove(&path);
    if method != "HEAD" {
        match cut {
            Some(n) => {
                out.write_all(&reply.body[..n.min(reply.body.len())])?;
                out.flush()?;
                return out.shutdown(std::net::Shutdown::Both);
            }
            None => out.write_all(&reply.body)?,
        }
    }
    out.flush()
}

fn basic(creds: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = creds.as_bytes();
    let mut s = String::from("Basic ");
    for chunk in b.chunks(3) {
        let n = match chunk.len() {
            3 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8 | chunk[2] as u32,
            2 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8,
            _ => (chunk[0] as u32) << 16,
        };
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}
