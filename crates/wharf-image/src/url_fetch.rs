//! Plain downloads of a URL (the builder's `ADD https://...`), with the registry client's
//! TLS settings: the system's CA store, redirects followed, timeouts.

use std::io::Write;

use crate::error::{Error, Result};

/// What a download left.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Bytes written.
    pub size: u64,
    /// The answer's `Last-Modified`, as unix seconds (what docker stamps on the file).
    pub modified: Option<i64>,
}

/// Download `url` into `out`, at most `limit` bytes. A status other than 200 is an error
/// naming the URL and the status.
pub fn fetch(url: &str, out: &mut impl Write, limit: u64) -> Result<Fetched> {
    let agent = crate::registry::http_agent();
    let what = |msg: String| Error::Invalid(format!("{url}: {msg}"));
    let resp = agent.get(url).call().map_err(|e| what(e.to_string()))?;
    let status = resp.status();
    if status.as_u16() != 200 {
        return Err(what(format!("the server answered {status}")));
    }
    let modified = resp
        .headers()
        .get("last-modified")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64);
    let mut body = resp.into_body();
    let mut reader = body.as_reader();
    let mut limited = std::io::Read::take(&mut reader, limit + 1);
    let size = std::io::copy(&mut limited, out).map_err(|e| what(e.to_string()))?;
    if size > limit {
        return Err(what(format!("larger than {limit} bytes")));
    }
    Ok(Fetched { size, modified })
}
