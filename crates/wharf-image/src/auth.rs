//! Registry credentials and authentication challenges.
//!
//! Credentials come from `--creds user:password` or from docker's `config.json`
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`; podman's
//! `$XDG_RUNTIME_DIR/containers/auth.json` as well), `auths.<registry>.auth` =
//! base64(`user:password`), and the credential helpers it names, as docker runs them:
//! `credHelpers.<registry>` first, then the inline entry in `auths`, then `credsStore`;
//! a helper is `docker-credential-<name> get`, given the server on stdin, answering
//! `{"Username": ..., "Secret": ...}` on stdout.
//!
//! A 401 answer carries a `WWW-Authenticate` challenge: `Basic realm=...` means "send the
//! credentials with every request"; `Bearer realm=...,service=...,scope=...` (Docker Hub and
//! most registries) means "get a token from `realm` (with the credentials, if any) and send
//! it as `Authorization: Bearer <token>`".

use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;

/// A user name and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password or personal access token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <hidden>)", self.username)
    }
}

impl Credentials {
    /// Parse `user:password` (the `--creds` flag).
    pub fn parse(s: &str) -> Option<Credentials> {
        let (u, p) = s.split_once(':')?;
        (!u.is_empty()).then(|| Credentials {
            username: u.to_string(),
            password: p.to_string(),
        })
    }

    /// The `Authorization: Basic ...` header value.
    pub fn basic_header(&self) -> String {
        format!(
            "Basic {}",
            B64.encode(format!("{}:{}", self.username, self.password))
        )
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::HashMap<String, DockerAuth>,
    #[serde(default)]
    cred_helpers: std::collections::HashMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

#[derive(Deserialize, Default)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The auth files searched for credentials, most specific first.
pub fn auth_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
        files.push(PathBuf::from(d).join("config.json"));
    } else if let Some(h) = std::env::var_os("HOME") {
        files.push(PathBuf::from(h).join(".docker/config.json"));
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        files.push(PathBuf::from(x).join("containers/auth.json"));
    }
    files
}

/// Credentials for `registry` from the auth files (and the helpers they name), if any has
/// them.
pub fn lookup(registry: &str) -> Option<Credentials> {
    auth_files()
        .iter()
        .find_map(|f| lookup_with_helpers(&std::fs::read(f).ok()?, registry, &run_helper))
}

/// Credentials for `registry` in one config.json text (its `auths` only).
pub fn lookup_in(text: &[u8], registry: &str) -> Option<Credentials> {
    lookup_with_helpers(text, registry, &|_, _| None)
}

/// Credentials for `registry` in one config.json text, asking `helper(name, server)` where
/// it names a credential helper.
fn lookup_with_helpers(
    text: &[u8],
    registry: &str,
    helper: &dyn Fn(&str, &str) -> Option<Credentials>,
) -> Option<Credentials> {
    let cfg: DockerConfig = serde_json::from_slice(text).ok()?;
    let want = normalize_key(registry);
    // Docker Hub's credentials are stored under its v1 address.
    let server = if want == "docker.io" {
        "https://index.docker.io/v1/".to_string()
    } else {
        want.clone()
    };
    if let Some((_, name)) = cfg
        .cred_helpers
        .iter()
        .find(|(k, _)| normalize_key(k) == want)
    {
        return helper(name, &server);
    }
    let entry = cfg
        .auths
        .iter()
        .find(|(k, _)| normalize_key(k) == want)
        .map(|(_, v)| v)
        .filter(|e| e.auth.is_some() || e.username.is_some());
    let Some(entry) = entry else {
        return cfg
            .creds_store
            .as_deref()
            .and_then(|name| helper(name, &server));
    };
    if let Some(a) = &entry.auth {
        let raw = B64.decode(a.trim()).ok()?;
        return Credentials::parse(&String::from_utf8(raw).ok()?);
    }
    Some(Credentials {
        username: entry.username.clone()?,
        password: entry.password.clone()?,
    })
}

/// `https://index.docker.io/v1/` -> `docker.io`; `http://host:5000/x` -> `host:5000`.
fn normalize_key(k: &str) -> String {
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let host = k.split('/').next().unwrap_or(k);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_string()
        }
        h => h.to_string(),
    }
}

/// How long a credential helper may take (it may ask a keyring, never a person).
const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Run `docker-credential-<name> get` for `server`. None when it is missing, fails (as it
/// does for "credentials not found"), hangs, or answers with an identity token, which
/// needs an OAuth exchange Wharf does not do.
fn run_helper(name: &str, server: &str) -> Option<Credentials> {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let mut child = Command::new(format!("docker-credential-{name}"))
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let _ = child.stdin.take()?.write_all(server.as_bytes());
    let deadline = std::time::Instant::now() + HELPER_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let mut out = Vec::new();
    child.stdout.take()?.read_to_end(&mut out).ok()?;
    if !status.success() {
        return None;
    }
    parse_helper_answer(&out)
}

/// A helper's answer: `{"ServerURL": ..., "Username": ..., "Secret": ...}`.
fn parse_helper_answer(out: &[u8]) -> Option<Credentials> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        username: String,
        secret: String,
    }
    let a: Answer = serde_json::from_slice(out).ok()?;
    (a.username != "<token>" && !a.username.is_empty()).then_some(Credentials {
        username: a.username,
        password: a.secret,
    })
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// `basic` or `bearer` (lowercase).
    pub scheme: String,
    /// Parameters (`realm`, `service`, `scope`, ...), names lowercase.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// A parameter's value.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(serde::Deserialize)]
struct TokenBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// The `Authorization` value from a token server's answer (`token`, or OAuth's
/// `access_token`), or an error naming `realm`.
pub fn bearer_from_token_answer(raw: &[u8], realm: &str) -> crate::Result<String> {
    let body: TokenBody = serde_json::from_slice(raw)
        .map_err(|e| crate::Error::Unauthorized(format!("bad token answer from {realm}: {e}")))?;
    let token = body.token.or(body.access_token).filter(|t| !t.is_empty());
    token.map(|t| format!("Bearer {t}")).ok_or_else(|| {
        crate::Error::Unauthorized(format!("token server {realm} returned no token"))
    })
}

/// Parse a `WWW-Authenticate` header value (one challenge; quoted values may hold commas).
pub fn parse_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, rest) = match h.split_once(' ') {
        Some((s, r)) => (s, r),
        None => (h, ""),
    };
    let mut params = Vec::new();
    let b = rest.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b' ' || b[i] == b',') {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let key = rest[start..i].trim().to_ascii_lowercase();
        i += 1;
        let mut val = String::new();
        if i < b.len() && b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                val.push(b[i] as char);
                i += 1;
            }
            i += 1;
        } else {
            let s = i;
            while i < b.len() && b[i] != b',' {
                i += 1;
            }
            val = rest[s..i].trim().to_string();
        }
        params.push((key, val));
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// Percent-encode a query parameter value.
pub fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The file `login` writes: docker's config.json (`$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`).
pub fn login_file() -> PathBuf {
    match std::env::var_os("DOCKER_CONFIG") {
        Some(d) => PathBuf::from(d).join("config.json"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .join(".docker/config.json"),
    }
}

/// The key docker's config.json files credentials of `registry` under.
pub fn server_key(registry: &str) -> String {
    let k = normalize_key(registry);
    if k == "docker.io" {
        "https://index.docker.io/v1/".into()
    } else {
        k
    }
}

/// Keep `creds` for `registry`: in the credential store the config names (`credsStore`,
/// run as `docker-credential-NAME store`), else base64 in its `auths`, as docker does. The
/// rest of the file is kept as it is.
pub fn store_login(registry: &str, creds: &Credentials) -> std::io::Result<PathBuf> {
    let path = login_file();
    let mut cfg = read_config_value(&path)?;
    let server = server_key(registry);
    if let Some(store) = creds_store(&cfg) {
        let input = serde_json::json!({"ServerURL": server, "Username": creds.username, "Secret": creds.password});
        run_helper_op(&store, "store", input.to_string().as_bytes())?;
        return Ok(path);
    }
    let auths = cfg
        .as_object_mut()
        .ok_or_else(|| bad_config(&path))?
        .entry("auths")
        .or_insert_with(|| serde_json::json!({}));
    auths
        .as_object_mut()
        .ok_or_else(|| bad_config(&path))?
        .insert(
            server,
            serde_json::json!({"auth": B64.encode(format!("{}:{}", creds.username, creds.password))}),
        );
    write_config_value(&path, &cfg)?;
    Ok(path)
}

/// Forget the credentials of `registry` (from the store or the `auths`); false when none
/// were kept.
pub fn remove_login(registry: &str) -> std::io::Result<bool> {
    let path = login_file();
    let mut cfg = read_config_value(&path)?;
    let server = server_key(registry);
    if let Some(store) = creds_store(&cfg) {
        return Ok(run_helper_op(&store, "erase", server.as_bytes()).is_ok());
    }
    let removed = cfg
        .get_mut("auths")
        .and_then(|a| a.as_object_mut())
        .map(|a| {
            let keys: Vec<String> = a
                .keys()
                .filter(|k| normalize_key(k) == normalize_key(&server))
                .cloned()
                .collect();
            for k in &keys {
                a.remove(k);
            }
            !keys.is_empty()
        })
        .unwrap_or(false);
    if removed {
        write_config_value(&path, &cfg)?;
    }
    Ok(removed)
}

/// The credential store a config names (`credsStore`), if any.
fn creds_store(cfg: &serde_json::Value) -> Option<String> {
    cfg.get("credsStore")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
}

fn bad_config(path: &std::path::Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{} is not a JSON object", path.display()),
    )
}

fn read_config_value(path: &std::path::Path) -> std::io::Result<serde_json::Value> {
    match std::fs::read(path) {
        Ok(b) if b.iter().all(u8::is_ascii_whitespace) => Ok(serde_json::json!({})),
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(serde_json::json!({})),
        Err(e) => Err(e),
    }
}

/// Written owner-only (it holds passwords), replaced atomically.
fn write_config_value(path: &std::path::Path, v: &serde_json::Value) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let data = serde_json::to_vec_pretty(v).expect("json");
    wharf_sys::fs::write_atomic(path, &data, 0o600, wharf_sys::fs::Durability::Sync)
}

/// `docker-credential-NAME OP` with `input` on its stdin.
fn run_helper_op(name: &str, op: &str, input: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    if name.contains('/') {
        return Err(std::io::Error::other(format!(
            "bad credential helper name {name:?}"
        )));
    }
    let bin = format!("docker-credential-{name}");
    let mut child = Command::new(&bin)
        .arg(op)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("running {bin}: {e}")))?;
    child.stdin.take().expect("piped").write_all(input)?;
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{bin} {op} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_docker_hub_challenge() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.param("service"), Some("registry.docker.io"));
        assert_eq!(
            c.param("scope"),
            Some("repository:library/busybox:pull,push")
        );
        let b = parse_challenge(r#"Basic realm="fixture-registry""#).unwrap();
        assert_eq!(b.scheme, "basic");
        assert_eq!(b.param("realm"), Some("fixture-registry"));
    }

    #[test]
    fn reads_docker_config() {
        let text = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"127.0.0.1:5001":{{"auth":"{}"}}}}}}"#,
            B64.encode("hub:secret"),
            B64.encode("fixture:fixture-pass")
        );
        let c = lookup_in(text.as_bytes(), "docker.io").unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("hub", "secret")
        );
        let c = lookup_in(text.as_bytes(), "127.0.0.1:5001").unwrap();
        assert_eq!(c.password, "fixture-pass");
        assert!(lookup_in(text.as_bytes(), "quay.io").is_none());
    }

    #[test]
    fn creds_flag() {
        let c = Credentials::parse("u:p:q").unwrap();
        assert_eq!(c.password, "p:q");
        assert!(Credentials::parse("nocolon").is_none());
    }

    #[test]
    fn credential_helpers_come_first_then_auths_then_the_store() {
        let asked = std::cell::RefCell::new(Vec::new());
        let helper = |name: &str, server: &str| {
            asked.borrow_mut().push(format!("{name} {server}"));
            Some(Credentials {
                username: name.to_string(),
                password: server.to_string(),
            })
        };
        let cfg = br#"{"credHelpers": {"gcr.io": "gcloud"},
            "auths": {"gcr.io": {"auth": "dTpw"}, "quay.io": {"auth": "dTpw"}, "ghcr.io": {}},
            "credsStore": "pass"}"#;
        // credHelpers wins over an inline entry for the same registry.
        let c = lookup_with_helpers(cfg, "gcr.io", &helper).unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("gcloud", "gcr.io")
        );
        // An inline entry wins over the store.
        let c = lookup_with_helpers(cfg, "quay.io", &helper).unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
        // An empty entry (what docker login leaves with a store) and unknown registries go
        // to the store; Docker Hub under its v1 address.
        let c = lookup_with_helpers(cfg, "ghcr.io", &helper).unwrap();
        assert_eq!(c.username, "pass");
        let c = lookup_with_helpers(cfg, "docker.io", &helper).unwrap();
        assert_eq!(c.password, "https://index.docker.io/v1/");
        assert_eq!(asked.borrow().len(), 3);
        // Without helpers: only auths.
        assert!(lookup_in(cfg, "ghcr.io").is_none());
    }

    #[test]
    fn helper_answers_and_identity_tokens() {
        let c = parse_helper_answer(br#"{"ServerURL":"x","Username":"me","Secret":"s3"}"#);
        assert_eq!(c.unwrap().password, "s3");
        assert!(
            parse_helper_answer(br#"{"ServerURL":"x","Username":"<token>","Secret":"t"}"#)
                .is_none()
        );
        assert!(parse_helper_answer(b"credentials not found in native keychain").is_none());
        assert!(run_helper("wharf-surely-missing", "x").is_none());
        assert!(run_helper("../evil", "x").is_none());
    }
}
