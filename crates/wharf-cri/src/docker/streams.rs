//! Hijacked connections: `POST /containers/{id}/attach` and `POST /exec/{id}/start`
//! answer `101 UPGRADED` and the connection becomes the process's stdio. Without a
//! terminal, output goes in docker's multiplexed frames (8 bytes: the stream, three
//! zeros, the length big-endian, then the data); with one, raw. Input is the process's
//! stdin, until the client closes its side or types the detach keys (ctrl-p ctrl-q by
//! default), which end the attachment and leave the process running.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_engine::session::Output;

use super::Api;
use super::containers::frame;
use super::http::{ApiError, Reply, Req};
use crate::stream_process::{Input, bridge};

/// What an attachment relays.
#[derive(Debug, Clone)]
pub struct Relay {
    /// The process has a terminal (raw output, no frames).
    pub tty: bool,
    /// Send the client's input to the process.
    pub stdin: bool,
    /// Send the process's stdout to the client.
    pub stdout: bool,
    /// Send the process's stderr to the client.
    pub stderr: bool,
    /// The key sequence that detaches (as bytes).
    pub detach_keys: Vec<u8>,
}

/// docker's detach keys: `ctrl-p,ctrl-q`, `a`, `ctrl-@`... as the bytes a terminal sends.
pub fn detach_keys(spec: Option<&str>) -> Result<Vec<u8>, ApiError> {
    let spec = spec.filter(|s| !s.is_empty()).unwrap_or("ctrl-p,ctrl-q");
    spec.split(',')
        .map(|k| {
            let k = k.trim();
            if let Some(c) = k.strip_prefix("ctrl-") {
                let c = c.chars().next().filter(|_| c.chars().count() == 1);
                match c {
                    Some(c @ 'a'..='z') => Ok(c as u8 - b'a' + 1),
                    Some('@') => Ok(0),
                    Some(c @ '['..='_') => Ok(c as u8 - b'@'),
                    _ => Err(ApiError::bad(format!("invalid detach keys {spec:?}"))),
                }
            } else if k.len() == 1 && k.is_ascii() {
                Ok(k.as_bytes()[0])
            } else {
                Err(ApiError::bad(format!("invalid detach keys {spec:?}")))
            }
        })
        .collect()
}

/// The 101 answer of a hijacked endpoint.
pub fn upgraded(tty: bool) -> Reply {
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("Connection", "Upgrade")
        .header("Upgrade", "tcp")
        .header(
            "Content-Type",
            if tty {
                "application/vnd.docker.raw-stream"
            } else {
                "application/vnd.docker.multiplexed-stream"
            },
        )
        .body(
            http_body_util::Full::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed(),
        )
        .expect("a valid response")
}

/// The client asked for the connection to be hijacked (`Upgrade: tcp`).
pub fn wants_upgrade(r: &Req) -> Result<(), ApiError> {
    let up = r
        .headers
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if up.eq_ignore_ascii_case("tcp") {
        Ok(())
    } else {
        Err(ApiError::bad(
            "this endpoint hijacks the connection: send Connection: Upgrade and Upgrade: tcp",
        ))
    }
}

/// Relay `session` over the upgraded connection `io`; the exit code when it exited.
/// `on_end` learns how it ended before the connection closes (a client asks for an exec's
/// exit code as soon as its stream ends).
pub async fn relay(
    io: hyper::upgrade::Upgraded,
    session: wharf_engine::Session,
    how: Relay,
    on_start: impl FnOnce(std::sync::mpsc::Sender<Input>) + Send,
    on_end: impl FnOnce(Option<i32>) + Send,
) -> Option<i32> {
    let (mut out_rx, in_tx) = match bridge(session) {
        Ok(b) => b,
        Err(_) => {
            on_end(None);
            return None;
        }
    };
    on_start(in_tx.clone());
    let io = TokioIo::new(io);
    let (mut rd, mut wr) = tokio::io::split(io);
    let input = {
        let how = how.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            let mut matched = 0usize;
            loop {
                let n = match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        if how.stdin {
                            let _ = in_tx.send(Input::CloseStdin);
                        }
                        return false;
                    }
                    Ok(n) => n,
                };
                if !how.stdin {
                    continue;
                }
                // The detach keys, across reads.
                let mut data = Vec::with_capacity(n);
                for &b in &buf[..n] {
                    if !how.detach_keys.is_empty() && b == how.detach_keys[matched] {
                        matched += 1;
                        if matched == how.detach_keys.len() {
                            if !data.is_empty() {
                                let _ = in_tx.send(Input::Stdin(data));
                            }
                            return true;
                        }
                        continue;
                    }
                    if matched > 0 {
                        data.extend_from_slice(&how.detach_keys[..matched]);
                        matched = 0;
                    }
                    data.push(b);
                }
                if !data.is_empty() && in_tx.send(Input::Stdin(data)).is_err() {
                    return false;
                }
            }
        })
    };
    let mut code = None;
    let mut input = input;
    loop {
        tokio::select! {
            o = out_rx.recv() => {
                let chunk = match o {
                    Some(Some(Output::Stdout(d))) if how.stdout => {
                        if how.tty { Bytes::from(d) } else { frame(1, &d) }
                    }
                    Some(Some(Output::Stderr(d))) if how.stderr => {
                        if how.tty { Bytes::from(d) } else { frame(2, &d) }
                    }
                    Some(Some(Output::Exit(x))) => {
                        code = Some(x.exit_code);
                        break;
                    }
                    Some(Some(_)) => continue,
                    Some(None) | None => break,
                };
                if wr.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            detached = &mut input => {
                if detached.unwrap_or(false) {
                    break;
                }
                // The client closed its side: its output still flows.
                input = tokio::spawn(std::future::pending());
            }
        }
    }
    on_end(code);
    let _ = wr.flush().await;
    let _ = wr.shutdown().await;
    input.abort();
    code
}

/// `POST /containers/{id}/attach?stream=&stdin=&stdout=&stderr=&logs=&detachKeys=`:
/// before the container starts (docker's run: attach, then start), nothing it prints is
/// missed.
pub async fn attach(api: &Arc<Api>, mut r: Req) -> Result<Reply, ApiError> {
    wants_upgrade(&r)?;
    let id = r.param("id").to_string();
    let keys = detach_keys(r.q("detachKeys"))?;
    let (stdin, stdout, stderr) = (
        r.flag("stdin", false),
        r.flag("stdout", false),
        r.flag("stderr", false),
    );
    let upgrade = r
        .upgrade
        .take()
        .ok_or_else(|| ApiError::internal("no upgrade"))?;
    let prepared = api
        .engine(move |e| match e.attach_before_start(&id) {
            Ok(s) => Ok(Some(s)),
            // What would fail its start too: the start says why (docker's CLI reads the
            // exit code it gives from that message); the attachment just ends.
            Err(err)
                if matches!(
                    err.kind(),
                    wharf_engine::error::ErrorKind::ProgramNotFound
                        | wharf_engine::error::ErrorKind::ProgramNotExecutable
                ) || matches!(err, wharf_engine::Error::CannotExecute(_)) =>
            {
                Ok(None)
            }
            Err(err) => Err(err.into()),
        })
        .await?;
    let Some(session) = prepared else {
        tokio::spawn(async move {
            if let Ok(io) = upgrade.await {
                let mut io = TokioIo::new(io);
                let _ = io.shutdown().await;
            }
        });
        return Ok(upgraded(false));
    };
    let how = Relay {
        tty: session.tty,
        stdin: stdin && session.stdin,
        stdout,
        stderr,
        detach_keys: keys,
    };
    let tty = how.tty;
    tokio::spawn(async move {
        if let Ok(io) = upgrade.await {
            relay(io, session, how, |_| {}, |_| {}).await;
        }
    });
    Ok(upgraded(tty))
}

/// `POST /containers/{id}/resize?h=&w=`.
pub async fn resize_container(api: &Arc<Api>, r: &Req) -> Result<Reply, ApiError> {
    let id = r.param("id").to_string();
    let (h, w) = size(r)?;
    api.engine(move |e| {
        let s = e.attach_session(&id)?;
        let mut input = s
            .stream
            .input()
            .map_err(|err| ApiError::internal(format!("resize: {err}")))?;
        input
            .resize(h, w)
            .map_err(|err| ApiError::internal(format!("resize: {err}")))?;
        Ok(super::http::empty(StatusCode::OK))
    })
    .await
}

/// `h` and `w` of a resize.
pub fn size(r: &Req) -> Result<(u16, u16), ApiError> {
    let dim = |k: &str| -> Result<u16, ApiError> {
        r.int(k)?
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| ApiError::bad(format!("resize needs {k} (rows h, columns w)")))
    };
    Ok((dim("h")?, dim("w")?))
}
