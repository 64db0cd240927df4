//! The streaming server's SPDY side: Kubernetes' remotecommand protocol (`v4.channel.k8s.io`;
//! a client offering v5 over SPDY gets v4, whose streams are the same) for Exec and Attach,
//! and `portforward.k8s.io` for PortForward. Clients open one SPDY stream per channel,
//! named by a `streamType` header: error, stdin, stdout, stderr, resize (remotecommand), or
//! data and error per forwarded connection, with `port` and `requestID` (port forwarding).

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use wharf_engine::session::Output;

use crate::engines::Engines;
use crate::spdy::{self, FLAG_FIN, Frame, HeaderReader, HeaderWriter, kind};
use crate::stream_process::{Input, Pending, exit_status, failure, open_process};

/// How long a client may take to open the streams it asked for.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Frames off the connection.
struct Reader {
    rd: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    buf: Vec<u8>,
}

impl Reader {
    /// The next frame; None when the client closed the connection.
    async fn next(&mut self) -> Result<Option<Frame>, String> {
        loop {
            if let Some(f) = spdy::parse(&mut self.buf)? {
                return Ok(Some(f));
            }
            let mut chunk = [0u8; 32 * 1024];
            let n = self.rd.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// What the connection's writer task sends.
type Out = mpsc::UnboundedSender<Vec<u8>>;

/// Serve one SPDY connection whose upgrade request `head` was read.
pub async fn serve(
    pending: Option<Pending>,
    head: SpdyRequest,
    mut tcp: TcpStream,
    engines: Engines,
) -> Result<(), String> {
    let Some(pending) = pending else {
        let body = "unknown or expired stream URL";
        let _ = tcp
            .write_all(
                format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        return Err(format!("{}: {body}", head.path));
    };
    let wanted = match pending {
        Pending::PortForward { .. } => "portforward.k8s.io",
        _ => "v4.channel.k8s.io",
    };
    let offered = |p: &str| head.protocols.iter().any(|o| o == p);
    let protocol = match wanted {
        "v4.channel.k8s.io" if offered(wanted) || offered("v5.channel.k8s.io") => wanted,
        "portforward.k8s.io" if offered(wanted) || head.protocols.is_empty() => wanted,
        _ => {
            let body = format!("no supported protocol: Wharf serves {wanted} over SPDY");
            let _ = tcp
                .write_all(
                    format!(
                        "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
            return Err(body);
        }
    };
    tcp.write_all(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: {protocol}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    run(tcp, pending, engines).await
}

/// Speak SPDY on `io` (after the upgrade: a TCP connection, or a WebSocket tunnel) for
/// the URL's purpose.
pub async fn run<S>(io: S, pending: Pending, engines: Engines) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (rd, mut wr) = tokio::io::split(io);
    let (out, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(b) = out_rx.recv().await {
            if wr.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    let reader = Reader {
        rd: Box::new(rd),
        buf: Vec::new(),
    };
    let r = match pending {
        Pending::PortForward { netns } => port_forward(reader, out, netns).await,
        p => remote_command(reader, out, p, engines).await,
    };
    let _ = writer.await;
    r
}

/// Accept a stream: its headers, and a SYN_REPLY.
fn accept(
    payload: &[u8],
    headers: &mut HeaderReader,
    writer: &mut HeaderWriter,
    out: &Out,
) -> Result<(u32, HashMap<String, String>), String> {
    let id = spdy::stream_id(payload).ok_or("SYN_STREAM without a stream id")?;
    // Stream id, associated id, priority and slot come before the header block.
    let h = headers.read(payload.get(10..).unwrap_or_default())?;
    let _ = out.send(spdy::syn_reply(id, writer));
    Ok((id, h))
}

/// Answer what every connection gets: pings echoed.
fn housekeeping(kind_: u16, payload: &[u8], out: &Out) {
    if kind_ == kind::PING {
        let _ = out.send(spdy::control(kind::PING, 0, payload));
    }
}

fn goaway(out: &Out) {
    let _ = out.send(spdy::control(kind::GOAWAY, 0, &[0, 0, 0, 0, 0, 0, 0, 0]));
}

async fn remote_command(
    mut reader: Reader,
    out: Out,
    pending: Pending,
    engines: Engines,
) -> Result<(), String> {
    let streams = match &pending {
        Pending::Exec { streams, .. } | Pending::Attach { streams, .. } => *streams,
        Pending::PortForward { .. } => unreachable!("served by port_forward"),
    };
    let (mut hr, mut hw) = (HeaderReader::default(), HeaderWriter::default());
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut early_stdin: Vec<Input> = Vec::new();
    let complete = |ids: &HashMap<String, u32>| {
        ids.contains_key("error")
            && (!streams.stdin || ids.contains_key("stdin"))
            && (!streams.stdout || ids.contains_key("stdout"))
            && (!streams.stderr || ids.contains_key("stderr"))
            && (!streams.tty || ids.contains_key("resize"))
    };
    // The client opens its streams first.
    let opening = async {
        while !complete(&ids) {
            match reader.next().await? {
                Some(Frame::Control {
                    kind: kind::SYN_STREAM,
                    payload,
                    ..
                }) => {
                    let (id, h) = accept(&payload, &mut hr, &mut hw, &out)?;
                    if let Some(t) = h.get("streamtype") {
                        ids.insert(t.clone(), id);
                    }
                }
                Some(Frame::Control {
                    kind: k, payload, ..
                }) => housekeeping(k, &payload, &out),
                Some(Frame::Data { data, flags, .. }) => {
                    early_stdin.push(Input::Stdin(data));
                    if flags & FLAG_FIN != 0 {
                        early_stdin.push(Input::CloseStdin);
                    }
                }
                None => return Err("the client left before opening its streams".to_string()),
            }
        }
        Ok(())
    };
    tokio::time::timeout(OPEN_TIMEOUT, opening)
        .await
        .map_err(|_| "the client did not open its streams in time".to_string())??;
    let id = |t: &str| ids.get(t).copied();
    let error_id = id("error").expect("complete");
    let fin_all = |out: &Out, status: &str| {
        for t in ["stdout", "stderr"] {
            if let Some(i) = id(t) {
                let _ = out.send(spdy::data(i, FLAG_FIN, b""));
            }
        }
        let _ = out.send(spdy::data(error_id, 0, status.as_bytes()));
        let _ = out.send(spdy::data(error_id, FLAG_FIN, b""));
        goaway(out);
    };
    let (mut out_rx, in_tx) = match open_process(&engines, pending).await {
        Ok(p) => p,
        Err(status) => {
            fin_all(&out, &failure(status.message(), None));
            return Err(status.message().to_string());
        }
    };
    for i in early_stdin {
        let _ = in_tx.send(i);
    }
    let mut resize_buf = Vec::new();
    let mut client_open = true;
    loop {
        tokio::select! {
            o = out_rx.recv() => match o.flatten() {
                Some(Output::Stdout(d)) => {
                    if let Some(i) = id("stdout") {
                        let _ = out.send(spdy::data(i, 0, &d));
                    }
                }
                Some(Output::Stderr(d)) => {
                    if let Some(i) = id("stderr") {
                        let _ = out.send(spdy::data(i, 0, &d));
                    }
                }
                Some(Output::Exit(rec)) => {
                    fin_all(&out, &exit_status(rec.exit_code));
                    return Ok(());
                }
                None => {
                    fin_all(&out, &failure("the process's stream ended without an exit", None));
                    return Ok(());
                }
            },
            f = reader.next(), if client_open => match f {
                Ok(Some(Frame::Data { stream, flags, data })) => {
                    if Some(stream) == id("stdin") {
                        if !data.is_empty() {
                            let _ = in_tx.send(Input::Stdin(data));
                        }
                        if flags & FLAG_FIN != 0 {
                            let _ = in_tx.send(Input::CloseStdin);
                        }
                    } else if Some(stream) == id("resize") {
                        resize_buf.extend_from_slice(&data);
                        while let Some(nl) = resize_buf.iter().position(|b| *b == b'\n') {
                            let line: Vec<u8> = resize_buf.drain(..=nl).collect();
                            if let Some(r) = crate::stream_process::resize_input(&line) {
                                let _ = in_tx.send(r);
                            }
                        }
                    }
                }
                Ok(Some(Frame::Control { kind: kind::SYN_STREAM, payload, .. })) => {
                    let _ = accept(&payload, &mut hr, &mut hw, &out);
                }
                Ok(Some(Frame::Control { kind: k, payload, .. })) => housekeeping(k, &payload, &out),
                Ok(None) | Err(_) => {
                    // The client went: its stdin ends; the process goes on.
                    let _ = in_tx.send(Input::CloseStdin);
                    client_open = false;
                }
            },
        }
    }
}

/// One forwarded connection's streams.
#[derive(Default)]
struct Forward {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    /// To the pod's socket (None: the client's FIN).
    to_pod: Option<mpsc::UnboundedSender<Option<Vec<u8>>>>,
}

async fn port_forward(
    mut reader: Reader,
    out: Out,
    netns: Option<std::path::PathBuf>,
) -> Result<(), String> {
    let (mut hr, mut hw) = (HeaderReader::default(), HeaderWriter::default());
    let mut forwards: HashMap<String, Forward> = HashMap::new();
    let mut by_data: HashMap<u32, String> = HashMap::new();
    loop {
        match reader.next().await? {
            Some(Frame::Control {
                kind: kind::SYN_STREAM,
                payload,
                ..
            }) => {
                let (id, h) = accept(&payload, &mut hr, &mut hw, &out)?;
                let request = h.get("requestid").cloned().unwrap_or_default();
                let f = forwards.entry(request.clone()).or_default();
                f.port = h.get("port").and_then(|p| p.parse().ok()).unwrap_or(0);
                match h.get("streamtype").map(String::as_str) {
                    Some("error") => f.error = Some(id),
                    Some("data") => {
                        f.data = Some(id);
                        by_data.insert(id, request.clone());
                    }
                    _ => {}
                }
                if let (Some(error), Some(data), None) = (f.error, f.data, &f.to_pod) {
                    let (tx, rx) = mpsc::unbounded_channel();
                    f.to_pod = Some(tx);
                    tokio::spawn(forward(f.port, netns.clone(), error, data, rx, out.clone()));
                }
            }
            Some(Frame::Data {
                stream,
                flags,
                data,
            }) => {
                let Some(f) = by_data.get(&stream).and_then(|r| forwards.get(r)) else {
                    continue;
                };
                if let Some(tx) = &f.to_pod {
                    if !data.is_empty() {
                        let _ = tx.send(Some(data));
                    }
                    if flags & FLAG_FIN != 0 {
                        let _ = tx.send(None);
                    }
                }
            }
            Some(Frame::Control {
                kind: k, payload, ..
            }) => housekeeping(k, &payload, &out),
            None => return Ok(()),
        }
    }
}

/// Connect to `port` on the pod's loopback (in its network namespace) and relay.
async fn forward(
    port: u16,
    netns: Option<std::path::PathBuf>,
    error: u32,
    data: u32,
    mut from_client: mpsc::UnboundedReceiver<Option<Vec<u8>>>,
    out: Out,
) {
    let connected = tokio::task::spawn_blocking(move || -> Result<std::net::TcpStream, String> {
        let fd = match &netns {
            Some(p) => Some(wharf_net::netns::open(p).map_err(|e| e.to_string())?),
            None => None,
        };
        wharf_net::netns::run_in(fd.as_ref().map(std::os::fd::AsFd::as_fd), || {
            std::net::TcpStream::connect(("127.0.0.1", port))
        })
        .map_err(|e| format!("connect to port {port} in the pod: {e}"))
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r)
    .and_then(|s| {
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        TcpStream::from_std(s).map_err(|e| e.to_string())
    });
    let sock = match connected {
        Ok(s) => s,
        Err(msg) => {
            let _ = out.send(spdy::data(error, 0, msg.as_bytes()));
            let _ = out.send(spdy::data(error, FLAG_FIN, b""));
            let _ = out.send(spdy::data(data, FLAG_FIN, b""));
            return;
        }
    };
    let (mut rd, mut wr) = sock.into_split();
    let to_pod = tokio::spawn(async move {
        while let Some(Some(d)) = from_client.recv().await {
            if wr.write_all(&d).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(spdy::data(data, 0, &buf[..n])).is_err() {
                    break;
                }
            }
        }
    }
    let _ = out.send(spdy::data(data, FLAG_FIN, b""));
    let _ = out.send(spdy::data(error, FLAG_FIN, b""));
    to_pod.abort();
}

/// A SPDY upgrade request's head, read off the connection (None: not SPDY; the bytes stay
/// for the WebSocket handshake).
pub(crate) struct SpdyRequest {
    /// The request path.
    pub path: String,
    /// The protocols the client offers (X-Stream-Protocol-Version), in its order.
    pub protocols: Vec<String>,
}

/// Read an SPDY upgrade request off `tcp` (None: not one; its bytes stay for the
/// WebSocket handshake). The caller bounds the time it may take
/// ([`crate::conn_gate::Ticket::handshake`]).
pub(crate) async fn upgrade_request(
    tcp: &mut tokio::net::TcpStream,
) -> Result<Option<SpdyRequest>, String> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 16 * 1024];
    let mut seen = 0;
    let end = loop {
        let n = tcp.peek(&mut buf).await.map_err(|e| e.to_string())?;
        if let Some(i) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if n == buf.len() || n == 0 {
            return Err("no complete HTTP request".into());
        }
        // peek returns at once while the bytes it saw are unread: wait for more before
        // looking again.
        if n == seen {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seen = n;
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_string();
    let mut spdy = false;
    let mut protocols = Vec::new();
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "upgrade" && v.eq_ignore_ascii_case("spdy/3.1") {
            spdy = true;
        }
        if k == "x-stream-protocol-version" {
            protocols.extend(v.split(',').map(|p| p.trim().to_string()));
        }
    }
    if !spdy {
        return Ok(None);
    }
    // Consume the head: the rest of the connection is SPDY frames.
    let mut head_bytes = vec![0u8; end];
    tcp.read_exact(&mut head_bytes)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some(SpdyRequest { path, protocols }))
}
