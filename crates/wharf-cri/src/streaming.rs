//! The streaming server: Exec and Attach answer with a URL on it, and kubelet or crictl
//! connect there to talk to the process. This step speaks the WebSocket variant of
//! Kubernetes' remotecommand protocol (`v5.channel.k8s.io` and `v4.channel.k8s.io`): binary
//! messages whose first byte is the channel (0 stdin, 1 stdout, 2 stderr, 3 the final
//! status as a metav1.Status, 4 terminal resizes as `{"Width":w,"Height":h}`; v5 adds 255,
//! the client closing one of its channels); the older `channel.k8s.io`, whose channel 3
//! carries only a failure's message (what the API server's websocket exec still asks
//! for), and the `base64.` forms of v4 and the older one (text messages: the channel as a
//! digit, then the data in base64); SPDY/3.1 (crictl's default, kubelet's classic
//! one: see [`crate::spdy_streams`], which also serves port forwarding), and SPDY tunnelled
//! through WebSocket for port forwarding (`SPDY/3.1+portforward.k8s.io`, kubectl's newer
//! transport).
//!
//! A URL holds a random single-use token that expires after a minute, and the server
//! listens on loopback unless configured otherwise (`daemon.stream-address`), as kubelet's
//! and containerd's do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use wharf_engine::session::Output;

use crate::conn_gate;
use crate::engines::Engines;
use crate::log::{Level, log};
use crate::stream_process::{Input, Pending, exit_status, failure, open_process, resize_input};

/// How long a URL may wait for its connection.
const TOKEN_TTL: Duration = Duration::from_secs(60);

/// The channel subprotocols served, preferred first.
const PROTOCOLS: [&str; 5] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];

/// How a channel subprotocol frames its messages and ends a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Channels {
    /// v5: the client may close its stdin (channel 255).
    close: bool,
    /// Text messages, the channel a digit and the data base64, instead of binary ones.
    base64: bool,
    /// The final status as a metav1.Status always (v4, v5); else only a failure's
    /// message, as text (the older protocols).
    status_json: bool,
}

impl Channels {
    fn of(protocol: &str) -> Channels {
        Channels {
            close: protocol.starts_with("v5."),
            base64: protocol.contains("base64."),
            status_json: protocol.starts_with("v4.") || protocol.starts_with("v5."),
        }
    }

    /// A message on `channel`.
    fn frame(self, channel: u8, data: &[u8]) -> Message {
        if self.base64 {
            use base64::Engine as _;
            let mut t = String::with_capacity(data.len() * 4 / 3 + 4);
            t.push(char::from(b'0' + channel));
            t.push_str(&base64::engine::general_purpose::STANDARD.encode(data));
            Message::Text(t.into())
        } else {
            frame(channel, data)
        }
    }

    /// A message from the client as (channel, data).
    fn read(self, m: &Message) -> Option<(u8, Vec<u8>)> {
        match m {
            Message::Binary(b) if !self.base64 && !b.is_empty() => Some((b[0], b[1..].to_vec())),
            Message::Text(t) if self.base64 && !t.is_empty() => {
                use base64::Engine as _;
                let ch = t.as_bytes()[0].checked_sub(b'0')?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&t.as_bytes()[1..])
                    .ok()?;
                Some((ch, data))
            }
            _ => None,
        }
    }

    /// The error channel's message for a failure (`message` the text, `json` its Status).
    fn failure(self, message: &str, json: &str) -> Message {
        if self.status_json {
            self.frame(ERROR, json.as_bytes())
        } else {
            self.frame(ERROR, message.as_bytes())
        }
    }

    /// The error channel's message for an exit: none for a success in the older
    /// protocols.
    fn exit(self, code: i32) -> Option<Message> {
        if self.status_json {
            return Some(self.frame(ERROR, exit_status(code).as_bytes()));
        }
        (code != 0).then(|| {
            self.frame(
                ERROR,
                format!("command terminated with non-zero exit code: exit code {code}").as_bytes(),
            )
        })
    }
}

/// SPDY port forwarding tunnelled through WebSocket.
const TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// The streaming server's address and its pending URLs.
pub struct StreamServer {
    base: String,
    pending: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl StreamServer {
    /// Listen on `addr` (host:port; port 0 picks one).
    pub async fn bind(addr: &str) -> Result<(Arc<StreamServer>, TcpListener), String> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("streaming server: listen on {addr}: {e}"))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("streaming server: {e}"))?;
        Ok((
            Arc::new(StreamServer {
                base: format!("http://{local}"),
                pending: Mutex::new(HashMap::new()),
            }),
            listener,
        ))
    }

    /// A URL for `p`, valid once, for a minute.
    pub fn url(&self, kind: &str, p: Pending) -> String {
        let mut raw = [0u8; 16];
        rustix::rand::getrandom(&mut raw, rustix::rand::GetRandomFlags::empty())
            .expect("getrandom");
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, (t, _)| t.elapsed() < TOKEN_TTL);
        pending.insert(token.clone(), (Instant::now(), p));
        format!("{}/{kind}/{token}", self.base)
    }

    pub(crate) fn take(&self, path: &str) -> Option<Pending> {
        let token = path.rsplit('/').next()?;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .remove(token)
            .filter(|(t, _)| t.elapsed() < TOKEN_TTL)
            .map(|(_, p)| p)
    }
}

/// Serve connections until the daemon stops. A connection must show a valid token within
/// [`conn_gate::HANDSHAKE_TIMEOUT`] of its accept, and at most [`conn_gate::MAX_WAITING`]
/// may be waiting to at once (see [`crate::conn_gate`]): idle connections cannot use up
/// the daemon's descriptors.
pub async fn serve(server: Arc<StreamServer>, listener: TcpListener, engines: Engines) {
    let gate = conn_gate::Gate::new();
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of descriptors (EMFILE) and the like: the connection stays in the
                // backlog; try again in a moment rather than spin.
                log(
                    Level::Warn,
                    "streaming server: accept failed",
                    &[("error", &e.to_string())],
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ticket = gate.enter();
        let (server, engines) = (server.clone(), engines.clone());
        tokio::spawn(async move {
            // Refusals are logged at debug level only: whoever opens connections by the
            // thousand must not flood the log as well.
            let opened = match ticket.handshake(handshake(&server, tcp)).await {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => {
                    log(Level::Debug, "stream refused", &[("error", &e)]);
                    return;
                }
                Err(refused) => {
                    log(
                        Level::Debug,
                        "stream refused",
                        &[("error", &refused.to_string())],
                    );
                    return;
                }
            };
            if let Err(e) = opened.serve(engines).await {
                log(Level::Info, "stream ended with an error", &[("error", &e)]);
            }
        });
    }
}

#[allow(clippy::result_large_err)]
fn refuse(code: u16, msg: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(msg.to_string()));
    *r.status_mut() = tokio_tungstenite::tungstenite::http::StatusCode::from_u16(code)
        .unwrap_or(tokio_tungstenite::tungstenite::http::StatusCode::BAD_REQUEST);
    r
}

/// A connection that showed a valid token (or was answered with a refusal by the
/// protocol it spoke), ready for its stream.
enum Opened {
    /// An SPDY upgrade: its head, and the URL's purpose if its token was valid.
    Spdy(
        crate::spdy_streams::SpdyRequest,
        Option<Pending>,
        tokio::net::TcpStream,
    ),
    /// A WebSocket whose handshake took a valid token, with the subprotocol chosen.
    WebSocket(
        Box<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>>,
        Pending,
        &'static str,
    ),
}

impl Opened {
    async fn serve(self, engines: Engines) -> Result<(), String> {
        match self {
            Opened::Spdy(head, pending, tcp) => {
                crate::spdy_streams::serve(pending, head, tcp, engines).await
            }
            Opened::WebSocket(ws, pending, chosen) => {
                if chosen == TUNNEL {
                    return tunnel(*ws, pending, engines).await;
                }
                relay(*ws, pending, Channels::of(chosen), engines).await
            }
        }
    }
}

/// The most a WebSocket message (or frame) from a client may hold: stdin arrives in
/// small chunks, and tungstenite's own default (64 MiB) is memory for the taking.
const MAX_WS_MESSAGE: usize = 4 << 20;

// The handshake callback's error type is tungstenite's (an HTTP response).
#[allow(clippy::result_large_err)]
async fn handshake(server: &StreamServer, tcp: tokio::net::TcpStream) -> Result<Opened, String> {
    let mut tcp = tcp;
    if let Some(head) = crate::spdy_streams::upgrade_request(&mut tcp).await? {
        let pending = server.take(&head.path);
        return Ok(Opened::Spdy(head, pending, tcp));
    }
    let mut found: Option<Pending> = None;
    let mut chosen: &'static str = "";
    let callback = |req: &Request, mut resp: Response| {
        let offered: Vec<String> = req
            .headers()
            .get_all("Sec-WebSocket-Protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(',').map(|p| p.trim().to_string()))
            .collect();
        let Some(pending) = server.take(req.uri().path()) else {
            return Err(refuse(404, "unknown or expired stream URL"));
        };
        // Port forwarding over WebSocket is SPDY tunnelled through it (client-go's
        // SPDY-over-WebSocket dialer); exec and attach use the channel protocols.
        let served: &[&'static str] = match pending {
            Pending::PortForward { .. } => &[TUNNEL],
            _ => &PROTOCOLS,
        };
        let Some(p) = served.iter().find(|p| offered.iter().any(|o| o == *p)) else {
            return Err(refuse(
                400,
                &format!(
                    "no supported subprotocol: Wharf serves {} here over WebSocket",
                    served.join(", ")
                ),
            ));
        };
        chosen = p;
        found = Some(pending);
        resp.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            p.parse().expect("a valid header value"),
        );
        Ok(resp)
    };
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_WS_MESSAGE))
        .max_frame_size(Some(MAX_WS_MESSAGE));
    let ws = tokio_tungstenite::accept_hdr_async_with_config(tcp, callback, Some(config))
        .await
        .map_err(|e| format!("websocket handshake: {e}"))?;
    let pending = found.expect("the handshake succeeded");
    Ok(Opened::WebSocket(Box::new(ws), pending, chosen))
}

/// SPDY carried in WebSocket binary messages, served as if it came over TCP.
async fn tunnel(
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    pending: Pending,
    engines: Engines,
) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (mut rd, mut wr) = tokio::io::split(ours);
    let (mut sink, mut source) = ws.split();
    let inbound = tokio::spawn(async move {
        while let Some(Ok(m)) = source.next().await {
            match m {
                Message::Binary(b) if wr.write_all(&b).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = wr.shutdown().await;
    });
    let outbound = tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink
                        .send(Message::Binary(buf[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        close(&mut sink).await;
    });
    let r = crate::spdy_streams::run(theirs, pending, engines).await;
    let _ = outbound.await;
    inbound.abort();
    r
}

async fn relay(
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    pending: Pending,
    ch: Channels,
    engines: Engines,
) -> Result<(), String> {
    let (mut sink, mut source) = ws.split();
    let (streams, what) = match &pending {
        Pending::Exec {
            streams, container, ..
        } => (*streams, format!("exec in {container}")),
        Pending::Attach {
            streams, container, ..
        } => (*streams, format!("attach to {container}")),
        Pending::PortForward { .. } => {
            let m = "port forwarding is served over SPDY only";
            let _ = sink.send(ch.failure(m, &failure(m, None))).await;
            close(&mut sink).await;
            return Err("port forwarding over WebSocket is not served".into());
        }
    };
    let (mut out_rx, in_tx) = match open_process(&engines, pending).await {
        Ok(p) => p,
        Err(status) => {
            let m = status.message();
            let _ = sink.send(ch.failure(m, &failure(m, None))).await;
            close(&mut sink).await;
            return Err(format!("{what}: {}", status.message()));
        }
    };
    // Tell the client the streams are open: an empty message on the first it reads.
    let first = if streams.stdout {
        STDOUT
    } else if streams.stderr {
        STDERR
    } else {
        ERROR
    };
    sink.send(ch.frame(first, b""))
        .await
        .map_err(|e| e.to_string())?;
    let mut client_open = true;
    loop {
        tokio::select! {
            out = out_rx.recv() => match out.flatten() {
                Some(Output::Stdout(d)) if streams.stdout => {
                    sink.send(ch.frame(STDOUT, &d)).await.map_err(|e| e.to_string())?;
                }
                Some(Output::Stderr(d)) if streams.stderr => {
                    sink.send(ch.frame(STDERR, &d)).await.map_err(|e| e.to_string())?;
                }
                Some(Output::Exit(rec)) => {
                    if let Some(m) = ch.exit(rec.exit_code) {
                        let _ = sink.send(m).await;
                    }
                    close(&mut sink).await;
                    return Ok(());
                }
                Some(_) => {}
                None => {
                    let m = "the process's stream ended without an exit";
                    let _ = sink.send(ch.failure(m, &failure(m, None))).await;
                    close(&mut sink).await;
                    return Ok(());
                }
            },
            msg = source.next(), if client_open => match msg {
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                    let send = match ch.read(&m) {
                        Some((STDIN, d)) if streams.stdin => Some(Input::Stdin(d)),
                        Some((RESIZE, d)) => resize_input(&d),
                        Some((CLOSE, d)) if ch.close && d.first() == Some(&STDIN) => {
                            Some(Input::CloseStdin)
                        }
                        _ => None,
                    };
                    if let Some(i) = send {
                        let _ = in_tx.send(i);
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    // The client went: an attached stdin ends; the process goes on, as
                    // with kubelet (an exec'd one ends when its stdin does, if it reads).
                    let _ = in_tx.send(Input::CloseStdin);
                    client_open = false;
                    if !streams.stdout && !streams.stderr {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
            },
        }
    }
}

/// End the connection with a normal closure (1000): client-go reads anything else as an
/// error, even after the final status.
async fn close<S>(sink: &mut S)
where
    S: futures_util::Sink<Message> + Unpin,
{
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    let _ = sink.close().await;
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}
