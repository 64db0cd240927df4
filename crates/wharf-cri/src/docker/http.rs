//! The HTTP side of the Docker API: requests as handlers see them (path parameters, query,
//! a body read within a bound), docker's JSON errors with docker's status codes, and
//! responses: JSON, empty, streamed (logs, events, progress) or raw.

use std::collections::HashMap;
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{HeaderMap, Method, Response, StatusCode};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use wharf_engine::error::ErrorKind;

/// What a handler returns.
pub type Reply = Response<BoxBody<Bytes, Infallible>>;

/// The most a JSON request body may hold (a create request is a few kilobytes).
pub const MAX_JSON_BODY: usize = 4 << 20;

/// An error as docker answers it: a status and `{"message": ...}`.
#[derive(Debug)]
pub struct ApiError {
    /// The status.
    pub status: StatusCode,
    /// The message (one line, naming the object and the cause).
    pub message: String,
}

impl ApiError {
    /// 400.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    /// 501: an endpoint or feature Wharf does not serve.
    pub fn not_implemented(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, message)
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// Any status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// docker's error response.
    pub fn reply(&self) -> Reply {
        json_status(self.status, &serde_json::json!({ "message": self.message }))
    }
}

impl From<wharf_engine::Error> for ApiError {
    fn from(e: wharf_engine::Error) -> ApiError {
        let status = match e.kind() {
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::AlreadyExists | ErrorKind::FailedPrecondition => StatusCode::CONFLICT,
            ErrorKind::InvalidArgument => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &e {
            // docker's words, which clients and users know.
            wharf_engine::Error::NotFound { kind, name } => {
                format!("No such {kind}: {name}")
            }
            wharf_engine::Error::NameInUse { kind, name, id } => format!(
                "Conflict. The {kind} name \"/{name}\" is already in use by {kind} \"{id}\". \
                 You have to remove (or rename) that {kind} to be able to reuse that name."
            ),
            _ => e.to_string(),
        };
        ApiError::new(status, message)
    }
}

impl From<wharf_docker::syntax::Invalid> for ApiError {
    fn from(e: wharf_docker::syntax::Invalid) -> ApiError {
        ApiError::bad(e.0)
    }
}

impl From<wharf_engine::validate::Invalid> for ApiError {
    fn from(e: wharf_engine::validate::Invalid) -> ApiError {
        ApiError::bad(e.to_string())
    }
}

/// What a handler gets.
pub struct Req {
    /// The method.
    pub method: Method,
    /// The path without the version prefix.
    pub path: String,
    /// The API version the client speaks (e.g. 1.50).
    pub version: (u32, u32),
    /// Path parameters (`{id}`, `{name}`).
    pub params: HashMap<String, String>,
    /// The query, decoded; a key given several times keeps its last value in `query`
    /// and all of them in `query_all`.
    pub query: HashMap<String, String>,
    /// Every value of each query key.
    pub query_all: HashMap<String, Vec<String>>,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, not yet read.
    pub body: Option<Incoming>,
    /// The request itself, for an upgrade (hijack).
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

impl Req {
    /// A path parameter (always there: the route names it).
    pub fn param(&self, name: &str) -> &str {
        self.params.get(name).map(String::as_str).unwrap_or("")
    }

    /// A query value.
    pub fn q(&self, key: &str) -> Option<&str> {
        self.query.get(key).map(String::as_str)
    }

    /// A boolean query value, as docker reads them (`1`, `true`, `True`; absent: `default`).
    pub fn flag(&self, key: &str, default: bool) -> bool {
        match self.q(key) {
            None => default,
            Some(v) => matches!(v, "1" | "true" | "True" | "TRUE" | "yes"),
        }
    }

    /// An integer query value (absent or empty: None; not a number: 400).
    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.q(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad(format!("invalid value for {key}: {v:?} is not a number"))
            }),
        }
    }

    /// The API version is at least `minor` (1.minor).
    pub fn at_least(&self, minor: u32) -> bool {
        self.version >= (1, minor)
    }

    /// docker's `filters` query parameter: `{"key": ["value", ...]}` (or the old
    /// `{"key": {"value": true}}` form).
    pub fn filters(&self) -> Result<HashMap<String, Vec<String>>, ApiError> {
        let Some(raw) = self.q("filters").filter(|f| !f.is_empty()) else {
            return Ok(HashMap::new());
        };
        let v: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| ApiError::bad(format!("invalid filters {raw:?}: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| ApiError::bad(format!("invalid filters {raw:?}: not an object")))?;
        let mut out = HashMap::new();
        for (k, vals) in obj {
            let list: Vec<String> = match vals {
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|x| x.as_str().unwrap_or_default().to_string())
                    .collect(),
                serde_json::Value::Object(m) => m
                    .iter()
                    .filter(|(_, on)| on.as_bool().unwrap_or(false))
                    .map(|(v, _)| v.clone())
                    .collect(),
                _ => return Err(ApiError::bad(format!("invalid filters {raw:?}: {k}"))),
            };
            out.insert(k.clone(), list);
        }
        Ok(out)
    }

    /// The body as bytes, at most `limit` of them (more: 413).
    pub async fn bytes(&mut self, limit: usize) -> Result<Bytes, ApiError> {
        let Some(body) = self.body.take() else {
            return Ok(Bytes::new());
        };
        match http_body_util::Limited::new(body, limit).collect().await {
            Ok(c) => Ok(c.to_bytes()),
            Err(e)
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body is larger than {limit} bytes"),
                ))
            }
            Err(e) => Err(ApiError::bad(format!("reading the request body: {e}"))),
        }
    }

    /// The body as JSON of type `T` (an empty body: `T::default()`). A member that is
    /// `null` counts as absent, as Go's decoder takes it (Go clients send `null` for every
    /// nil map and slice).
    pub async fn json<T: DeserializeOwned + Default>(&mut self) -> Result<T, ApiError> {
        let b = self.bytes(MAX_JSON_BODY).await?;
        if b.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        let mut v: serde_json::Value =
            serde_json::from_slice(&b).map_err(|e| ApiError::bad(format!("invalid JSON: {e}")))?;
        drop_nulls(&mut v);
        serde_json::from_value(v).map_err(|e| ApiError::bad(format!("invalid request: {e}")))
    }

    /// The body as a channel of chunks (for bodies streamed to disk: archives, loads).
    pub fn body_chunks(&mut self) -> mpsc::Receiver<Result<Bytes, String>> {
        let (tx, rx) = mpsc::channel(16);
        if let Some(mut body) = self.body.take() {
            tokio::spawn(async move {
                while let Some(frame) = body.frame().await {
                    match frame {
                        Ok(f) => {
                            if let Ok(data) = f.into_data()
                                && tx.send(Ok(data)).await.is_err()
                            {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string())).await;
                            return;
                        }
                    }
                }
            });
        }
        rx
    }
}

/// Remove the members of every object that are `null`.
fn drop_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A blocking reader over a body's chunks (for engine calls that read a stream).
pub struct ChunkReader {
    rx: mpsc::Receiver<Result<Bytes, String>>,
    current: Bytes,
}

impl ChunkReader {
    /// Read `rx`'s chunks in order.
    pub fn new(rx: mpsc::Receiver<Result<Bytes, String>>) -> ChunkReader {
        ChunkReader {
            rx,
            current: Bytes::new(),
        }
    }
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        let _ = self.current.split_to(n);
        Ok(n)
    }
}

/// Decode a query string (`a=1&b=x%20y`).
pub fn parse_query(q: &str) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let dec = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        out.entry(dec(k)).or_default().push(dec(v));
    }
    out
}

fn boxed(b: Full<Bytes>) -> BoxBody<Bytes, Infallible> {
    b.boxed()
}

/// A JSON response with `status`.
pub fn json_status(status: StatusCode, v: &impl serde::Serialize) -> Reply {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(boxed(Full::new(Bytes::from(body))))
        .expect("a valid response")
}

/// A 200 JSON response.
pub fn json(v: &impl serde::Serialize) -> Reply {
    json_status(StatusCode::OK, v)
}

/// A response with no body.
pub fn empty(status: StatusCode) -> Reply {
    Response::builder()
        .status(status)
        .body(boxed(Full::new(Bytes::new())))
        .expect("a valid response")
}

/// A plain-text response.
pub fn text(status: StatusCode, t: &str) -> Reply {
    Response::builder()
        .status(status)
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(boxed(Full::new(Bytes::from(t.to_string()))))
        .expect("a valid response")
}

/// A raw body of `content_type`.
pub fn raw(content_type: &str, data: Vec<u8>) -> Reply {
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", content_type)
        .body(boxed(Full::new(Bytes::from(data))))
        .expect("a valid response")
}

/// A streamed response: what `rx` gets, each chunk sent as it comes (docker's clients
/// render JSON-message streams line by line).
pub fn streamed(content_type: &str, rx: mpsc::Receiver<Bytes>) -> Reply {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", content_type)
        .body(StreamBody::new(stream).boxed())
        .expect("a valid response")
}

/// One JSON message of a stream, with its newline.
pub fn line(v: &serde_json::Value) -> Bytes {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_as_go_decodes_them() {
        let q = parse_query("name=web&filters=%7B%22a%22%3A%5B%22b%22%5D%7D&x=a+b&x=c&e=");
        assert_eq!(q["name"], ["web"]);
        assert_eq!(q["filters"], [r#"{"a":["b"]}"#]);
        assert_eq!(q["x"], ["a b", "c"]);
        assert_eq!(q["e"], [""]);
    }

    #[test]
    fn engine_errors_keep_dockers_words_and_codes() {
        let e = ApiError::from(wharf_engine::Error::NotFound {
            kind: "container",
            name: "web".into(),
        });
        assert_eq!(
            (e.status, e.message.as_str()),
            (StatusCode::NOT_FOUND, "No such container: web")
        );
        let e = ApiError::from(wharf_engine::Error::Precondition("running".into()));
        assert_eq!(e.status, StatusCode::CONFLICT);
        let e = ApiError::from(wharf_engine::Error::Invalid("bad".into()));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }
}
