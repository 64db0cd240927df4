//! A synchronous client for the OCI distribution / Docker Registry v2 API: manifests and
//! blobs of one repository, with anonymous, Basic and Bearer-token auth, mirrors, plain HTTP
//! for loopback and configured hosts, and redirects to blob storage (which never receive our
//! `Authorization` header).
//!
//! HTTP is ureq (blocking; parallel layer downloads run on threads) with TLS by rustls,
//! verified against the system's CA store. (The system's OpenSSL would be loaded by every
//! exec of the wharf binary, runtime commands included: ~1.4 ms each.)

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use ureq::Agent;
use ureq::http::Response;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};

use crate::auth::{self, Challenge, Credentials};
use crate::config::RegistriesConfig;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::manifest::MANIFEST_ACCEPT;
use crate::reference::{DOCKER_HUB, DOCKER_HUB_API, Reference};

/// Largest manifest accepted (containerd's limit too).
pub const MAX_MANIFEST_SIZE: u64 = 4 << 20;

/// Shared HTTP agents and registry settings.
pub struct Client {
    agent: Agent,
    insecure_agent: Agent,
    config: RegistriesConfig,
    creds: Option<Credentials>,
}

/// A manifest as fetched.
pub struct FetchedManifest {
    /// The raw bytes (their digest is the manifest's digest).
    pub bytes: Vec<u8>,
    /// `Content-Type` of the answer.
    pub media_type: String,
    /// sha256 of `bytes`.
    pub digest: Digest,
}

/// An open blob download.
pub struct BlobStream {
    /// The body (from `offset` on when `resumed`).
    pub reader: Box<dyn Read + Send>,
    /// Whether the server honoured the range request.
    pub resumed: bool,
}

fn agent(insecure: bool) -> Agent {
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::PlatformVerifier)
        .disable_verification(insecure)
        .build();
    Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(10)
        .user_agent(concat!("wharf/", env!("CARGO_PKG_VERSION")))
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(120)))
        .timeout_per_read(Some(Duration::from_secs(120)))
        .tls_config(tls)
        .build()
        .into()
}

/// An agent for plain downloads (verified TLS, redirects followed).
pub(crate) fn http_agent() -> Agent {
    agent(false)
}

impl Client {
    /// A client with registry settings and optional credentials that override the auth
    /// files (the `--creds` flag).
    pub fn new(config: RegistriesConfig, creds: Option<Credentials>) -> Client {
        Client {
            agent: agent(false),
            insecure_agent: agent(true),
            config,
            creds,
        }
    }

    /// A session for the repository of `r` (mirrors first, then the registry).
    pub fn repository(&self, r: &Reference) -> Repository<'_> {
        let host_cfg = self.config.host(&r.registry);
        let mut endpoints = Vec::new();
        for m in &host_cfg.mirrors {
            endpoints.push(self.endpoint_for_url(m, true));
        }
        let api_host = if r.registry == DOCKER_HUB {
            DOCKER_HUB_API.to_string()
        } else {
            r.registry.clone()
        };
        endpoints.push(Endpoint {
            host: api_host,
            explicit_scheme: None,
            prefix: String::new(),
            allow_http: self.config.plain_http_allowed(&r.registry),
            insecure_tls: host_cfg.insecure,
            mirror: false,
        });
        Repository {
            client: self,
            registry: r.registry.clone(),
            repository: r.repository.clone(),
            endpoints,
            auth: Mutex::new(HashMap::new()),
            base: Mutex::new(HashMap::new()),
        }
    }

    fn endpoint_for_url(&self, url: &str, mirror: bool) -> Endpoint {
        let (scheme, rest) = match url.split_once("://") {
            Some((s, r)) => (Some(s.to_string()), r),
            None => (None, url),
        };
        let (host, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h.to_string(), format!("/{}", p.trim_matches('/'))),
            None => (rest.to_string(), String::new()),
        };
        let host_cfg = self.config.host(&host);
        Endpoint {
            allow_http: scheme.as_deref() == Some("http") || self.config.plain_http_allowed(&host),
            insecure_tls: host_cfg.insecure,
            host,
            explicit_scheme: scheme,
            prefix: if prefix == "/" { String::new() } else { prefix },
            mirror,
        }
    }

    fn credentials_for(&self, registry: &str) -> Option<Credentials> {
        self.creds.clone().or_else(|| auth::lookup(registry))
    }
}

/// One place to talk to: the registry or a mirror of it.
#[derive(Clone, Debug)]
struct Endpoint {
    host: String,
    explicit_scheme: Option<String>,
    prefix: String,
    allow_http: bool,
    insecure_tls: bool,
    mirror: bool,
}

/// A session with one repository: remembers the scheme that works and the auth header each
/// endpoint wants, so the challenge dance happens once per pull. Shared by the download
/// threads.
pub struct Repository<'c> {
    client: &'c Client,
    registry: String,
    repository: String,
    endpoints: Vec<Endpoint>,
    auth: Mutex<HashMap<String, String>>,
    base: Mutex<HashMap<String, String>>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl Repository<'_> {
    /// Fetch the manifest (or index) `reference` (a tag or digest). A digest reference is
    /// verified against the bytes.
    pub fn manifest(&self, reference: &str) -> Result<FetchedManifest> {
        let path = format!("/v2/{}/manifests/{reference}", self.repository);
        let mut resp = self.get_any(&path, Some(MANIFEST_ACCEPT), None, "manifest")?;
        let media_type = header(&resp, "content-type").unwrap_or_default();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_MANIFEST_SIZE)
            .read_to_vec()
            .map_err(|e| {
                Error::Registry(format!(
                    "reading manifest {reference} from {}: {e}",
                    self.registry
                ))
            })?;
        let digest = Digest::of(&bytes);
        if reference.starts_with("sha256:") && digest.as_str() != reference {
            return Err(Error::DigestMismatch {
                what: format!("manifest {}@{reference}", self.repository),
                expected: reference.to_string(),
                actual: digest.to_string(),
            });
        }
        Ok(FetchedManifest {
            bytes,
            media_type,
            digest,
        })
    }

    /// Open blob `digest` from byte `offset` on (a `Range` request; the server may ignore
    /// it, see [`BlobStream::resumed`]). `size` caps what the body may deliver.
    pub fn blob(&self, digest: &Digest, offset: u64, size: u64) -> Result<BlobStream> {
        let path = format!("/v2/{}/blobs/{digest}", self.repository);
        let range = (offset > 0).then_some(offset);
        let resp = self.get_any(&path, None, range, "blob")?;
        let resumed = resp.status().as_u16() == 206;
        let remaining = if resumed { size - offset } else { size };
        let reader = resp
            .into_body()
            .into_with_config()
            .limit(remaining)
            .reader();
        Ok(BlobStream {
            reader: Box::new(reader),
            resumed,
        })
    }

    /// Check that the registry accepts the credentials (`GET /v2/` with the challenge
    /// answered), as `docker login` does.
    pub fn check_login(&self) -> Result<()> {
        let ep = self
            .endpoints
            .iter()
            .find(|e| !e.mirror)
            .cloned()
            .ok_or_else(|| Error::Registry("no registry endpoint".into()))?;
        self.get(&ep, "/v2/", None, None, "login").map(drop)
    }

    /// The registry itself (not a mirror): where pushes go.
    fn origin(&self) -> Result<Endpoint> {
        self.endpoints
            .iter()
            .find(|e| !e.mirror)
            .cloned()
            .ok_or_else(|| Error::Registry("no registry endpoint".into()))
    }

    /// A request of a push: `method` on `target` (a path below the registry, or a URL it
    /// gave), with `body`; a 401 is answered once (the challenge names the push scope).
    fn send(
        &self,
        ep: &Endpoint,
        method: &str,
        target: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<Response<ureq::Body>> {
        let url = if target.starts_with("http://") || target.starts_with("https://") {
            target.to_string()
        } else {
            format!("{}{target}", self.base_url(ep)?)
        };
        let mut retried_auth = false;
        loop {
            let auth = self.auth.lock().unwrap().get(&ep.host).cloned();
            let agent = self.agent(ep);
            let resp = match method {
                "HEAD" | "GET" | "DELETE" => {
                    let mut r = match method {
                        "HEAD" => agent.head(&url),
                        "DELETE" => agent.delete(&url),
                        _ => agent.get(&url),
                    };
                    if let Some(h) = &auth {
                        r = r.header("Authorization", h);
                    }
                    r.call()
                }
                _ => {
                    let mut r = if method == "PUT" {
                        agent.put(&url)
                    } else {
                        agent.post(&url)
                    };
                    if let Some(h) = &auth {
                        r = r.header("Authorization", h);
                    }
                    if let Some(ct) = content_type {
                        r = r.header("Content-Type", ct);
                    }
                    r.send(body.unwrap_or_default())
                }
            }
            .map_err(|e| self.transport_error(ep, e))?;
            if resp.status().as_u16() == 401 && !retried_auth {
                retried_auth = true;
                self.answer_challenge(ep, &resp)?;
                continue;
            }
            return Ok(resp);
        }
    }

    /// Whether the repository has blob `d` already (a push skips it).
    pub fn blob_exists(&self, d: &Digest) -> Result<bool> {
        let ep = self.origin()?;
        let path = format!("/v2/{}/blobs/{d}", self.repository);
        let resp = self.send(&ep, "HEAD", &path, None, None)?;
        match resp.status().as_u16() {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => Err(self.status_error(&ep, resp, "blob", &path)),
        }
    }

    /// Ask the registry to link blob `d` from repository `from` of the same registry
    /// (a cross-repository mount); false when it would not, and the blob must be uploaded.
    pub fn mount_blob(&self, d: &Digest, from: &str) -> Result<bool> {
        let ep = self.origin()?;
        let path = format!(
            "/v2/{}/blobs/uploads/?mount={d}&from={}",
            self.repository,
            auth::query_escape(from)
        );
        let resp = self.send(&ep, "POST", &path, None, Some(&[]))?;
        match resp.status().as_u16() {
            201 => Ok(true),
            202 => {
                // An upload session was opened instead: cancel it.
                if let Some(loc) = header(&resp, "location") {
                    let _ = self.send(&ep, "DELETE", &loc, None, None);
                }
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Upload blob `d` (its bytes `data`) in one request.
    pub fn upload_blob(&self, d: &Digest, data: &[u8]) -> Result<()> {
        let ep = self.origin()?;
        let path = format!("/v2/{}/blobs/uploads/", self.repository);
        let resp = self.send(&ep, "POST", &path, None, Some(&[]))?;
        if resp.status().as_u16() != 202 {
            return Err(self.status_error(&ep, resp, "upload", &path));
        }
        let loc = header(&resp, "location").ok_or_else(|| {
            Error::Registry(format!("{} opened an upload without a Location", ep.host))
        })?;
        let loc = if loc.starts_with('/') {
            format!("{}{loc}", self.base_url(&ep)?)
        } else {
            loc
        };
        let sep = if loc.contains('?') { '&' } else { '?' };
        let put = format!("{loc}{sep}digest={d}");
        let resp = self.send(
            &ep,
            "PUT",
            &put,
            Some("application/octet-stream"),
            Some(data),
        )?;
        match resp.status().as_u16() {
            201 | 204 => Ok(()),
            _ => Err(self.status_error(&ep, resp, "blob", &path)),
        }
    }

    /// Put manifest `bytes` (of `media_type`) under `reference` (a tag or its digest).
    pub fn put_manifest(&self, reference: &str, media_type: &str, bytes: &[u8]) -> Result<()> {
        let ep = self.origin()?;
        let path = format!("/v2/{}/manifests/{reference}", self.repository);
        let resp = self.send(&ep, "PUT", &path, Some(media_type), Some(bytes))?;
        match resp.status().as_u16() {
            200..=299 => Ok(()),
            _ => Err(self.status_error(&ep, resp, "manifest", &path)),
        }
    }

    /// GET `path` from the first endpoint that answers it (mirrors, then the registry).
    fn get_any(
        &self,
        path: &str,
        accept: Option<&str>,
        range: Option<u64>,
        what: &str,
    ) -> Result<Response<ureq::Body>> {
        let mut last = None;
        for ep in &self.endpoints {
            match self.get(ep, path, accept, range, what) {
                Ok(r) => return Ok(r),
                Err(e) if ep.mirror => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Registry("no registry endpoint".into())))
    }

    fn agent(&self, ep: &Endpoint) -> &Agent {
        if ep.insecure_tls {
            &self.client.insecure_agent
        } else {
            &self.client.agent
        }
    }

    /// `scheme://host[/prefix]` of an endpoint: https, or http where allowed and https does
    /// not answer (checked once with `GET /v2/`).
    fn base_url(&self, ep: &Endpoint) -> Result<String> {
        if let Some(s) = &ep.explicit_scheme {
            return Ok(format!("{s}://{}{}", ep.host, ep.prefix));
        }
        if let Some(b) = self.base.lock().unwrap().get(&ep.host) {
            return Ok(b.clone());
        }
        let https = format!("https://{}{}", ep.host, ep.prefix);
        let base = if !ep.allow_http {
            https
        } else {
            match self.agent(ep).get(format!("{https}/v2/")).call() {
                Ok(_) => https,
                Err(e) if is_dns_error(&e) => {
                    return Err(Error::Registry(format!(
                        "unknown host {}: the name does not resolve",
                        ep.host
                    )));
                }
                Err(_) => format!("http://{}{}", ep.host, ep.prefix),
            }
        };
        self.base
            .lock()
            .unwrap()
            .insert(ep.host.clone(), base.clone());
        Ok(base)
    }

    fn get(
        &self,
        ep: &Endpoint,
        path: &str,
        accept: Option<&str>,
        range: Option<u64>,
        what: &str,
    ) -> Result<Response<ureq::Body>> {
        let base = self.base_url(ep)?;
        let url = format!("{base}{path}");
        let mut retried_auth = false;
        loop {
            let mut req = self.agent(ep).get(&url);
            if let Some(a) = accept {
                req = req.header("Accept", a);
            }
            if let Some(off) = range {
                req = req.header("Range", format!("bytes={off}-"));
            }
            if let Some(h) = self.auth.lock().unwrap().get(&ep.host) {
                req = req.header("Authorization", h);
            }
            let resp = req.call().map_err(|e| self.transport_error(ep, e))?;
            let status = resp.status().as_u16();
            match status {
                200..=299 => return Ok(resp),
                401 if !retried_auth => {
                    retried_auth = true;
                    self.answer_challenge(ep, &resp)?;
                }
                _ => return Err(self.status_error(ep, resp, what, path)),
            }
        }
    }

    /// Answer a 401's challenge: the header for the endpoint's next requests.
    fn answer_challenge(&self, ep: &Endpoint, resp: &Response<ureq::Body>) -> Result<()> {
        let challenge = header(resp, "www-authenticate")
            .and_then(|h| auth::parse_challenge(&h))
            .ok_or_else(|| {
                Error::Unauthorized(format!(
                    "401 Unauthorized from {} without an authentication challenge",
                    ep.host
                ))
            })?;
        let h = self.authenticate(ep, &challenge)?;
        self.auth.lock().unwrap().insert(ep.host.clone(), h);
        Ok(())
    }

    /// The `Authorization` header answering `challenge`.
    fn authenticate(&self, ep: &Endpoint, challenge: &Challenge) -> Result<String> {
        let creds = self.client.credentials_for(&self.registry);
        match challenge.scheme.as_str() {
            "basic" => creds.map(|c| c.basic_header()).ok_or_else(|| {
                Error::Unauthorized(format!(
                    "401 Unauthorized: {} requires credentials for {} (use --creds user:password \
                     or log in with docker login)",
                    ep.host, self.registry
                ))
            }),
            "bearer" => self.fetch_token(ep, challenge, creds.as_ref()),
            other => Err(Error::Unauthorized(format!(
                "401 Unauthorized: {} asks for unsupported auth scheme {other:?}",
                ep.host
            ))),
        }
    }

    fn fetch_token(
        &self,
        ep: &Endpoint,
        challenge: &Challenge,
        creds: Option<&Credentials>,
    ) -> Result<String> {
        let realm = challenge.param("realm").ok_or_else(|| {
            Error::Unauthorized(format!("{}: bearer challenge without realm", ep.host))
        })?;
        let realm_host = realm
            .split_once("://")
            .map(|(_, r)| r.split('/').next().unwrap_or(r))
            .unwrap_or("");
        let plain_ok = ep.allow_http || crate::config::is_loopback(realm_host);
        if !(realm.starts_with("https://") || (realm.starts_with("http://") && plain_ok)) {
            return Err(Error::Unauthorized(format!(
                "{}: refusing token realm {realm:?} (must be https)",
                ep.host
            )));
        }
        // A login (no repository) asks for a token of no scope.
        let scope = challenge.param("scope").map(str::to_string).or_else(|| {
            (!self.repository.is_empty()).then(|| format!("repository:{}:pull", self.repository))
        });
        let mut params = Vec::new();
        if let Some(s) = &scope {
            params.push(format!("scope={}", auth::query_escape(s)));
        }
        if let Some(s) = challenge.param("service") {
            params.push(format!("service={}", auth::query_escape(s)));
        }
        let url = if params.is_empty() {
            realm.to_string()
        } else {
            format!("{realm}?{}", params.join("&"))
        };
        let scope = scope.unwrap_or_default();
        let mut req = self.agent(ep).get(&url);
        if let Some(c) = creds {
            req = req.header("Authorization", c.basic_header());
        }
        let mut resp = req
            .call()
            .map_err(|e| Error::Unauthorized(format!("token request to {realm} failed: {e}")))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let hint = if creds.is_some() {
                "the credentials were refused"
            } else {
                "anonymous access is refused; use --creds user:password or docker login"
            };
            return Err(Error::Unauthorized(format!(
                "{status} from token server {realm} for {scope}: {hint}"
            )));
        }
        let raw = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| Error::Unauthorized(format!("reading the token from {realm}: {e}")))?;
        auth::bearer_from_token_answer(&raw, realm)
    }

    fn transport_error(&self, ep: &Endpoint, e: ureq::Error) -> Error {
        if is_dns_error(&e) {
            return Error::Registry(format!(
                "unknown host {}: the name does not resolve",
                ep.host
            ));
        }
        match &e {
            ureq::Error::HostNotFound => Error::Registry(format!(
                "unknown host {}: the name does not resolve",
                ep.host
            )),
            ureq::Error::ConnectionFailed => {
                Error::Registry(format!("cannot connect to {}", ep.host))
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                Error::Registry(format!("cannot connect to {}: connection refused", ep.host))
            }
            ureq::Error::Timeout(t) => {
                Error::Registry(format!("timed out talking to {} ({t})", ep.host))
            }
            // rustls talking to a plain-HTTP server sees its reply as garbage or a closed
            // connection, before any HTTP exchange.
            ureq::Error::Tls(_) | ureq::Error::Rustls(_) if !ep.allow_http => {
                Error::Registry(format!(
                    "TLS with {} failed ({e}); a registry that speaks plain HTTP must be marked \"insecure\" in the config file",
                    ep.host
                ))
            }
            ureq::Error::Io(io)
                if !ep.allow_http
                    && matches!(
                        io.kind(),
                        std::io::ErrorKind::UnexpectedEof
                            | std::io::ErrorKind::InvalidData
                            | std::io::ErrorKind::ConnectionReset
                    ) =>
            {
                Error::Registry(format!(
                    "TLS with {} failed ({io}); a registry that speaks plain HTTP must be marked \"insecure\" in the config file",
                    ep.host
                ))
            }
            ureq::Error::Io(io) => Error::Registry(format!("{}: {io}", ep.host)),
            _ => Error::Registry(format!("{}: {e}", ep.host)),
        }
    }

    fn status_error(
        &self,
        ep: &Endpoint,
        mut resp: Response<ureq::Body>,
        what: &str,
        path: &str,
    ) -> Error {
        let status = resp.status();
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_vec()
            .unwrap_or_default();
        let detail = serde_json::from_slice::<ErrorBody>(&body)
            .ok()
            .and_then(|b| {
                b.errors
                    .first()
                    .map(|e| format!("{} ({})", e.message, e.code))
            })
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&body)
                    .trim()
                    .chars()
                    .take(200)
                    .collect()
            });
        let code = status.as_u16();
        let reason = status.canonical_reason().unwrap_or("");
        match code {
            401 | 403 => Error::Unauthorized(format!(
                "{code} {reason} from {} for {path}: {detail}",
                ep.host
            )),
            404 => Error::NotFound(format!(
                "{what} unknown: {} answered 404 Not Found for {path} ({detail})",
                ep.host
            )),
            _ => Error::Registry(format!(
                "{} answered {code} {reason} for {path}: {detail}",
                ep.host
            )),
        }
    }
}

/// A name resolution failure (ureq reports the resolver's error as I/O).
fn is_dns_error(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => {
            let m = io.to_string();
            m.contains("lookup address") || m.contains("Name or service not known")
        }
        _ => false,
    }
}

fn header(resp: &Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}
