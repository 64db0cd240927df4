//! What the streaming server's protocols share: what a URL was made for, and the process
//! behind it (started for an exec, joined for an attach) as a pair of channels, since the
//! engine's session is blocking; the final status in the form client-go reads.

use tokio::sync::mpsc;
use tonic::Status;
use wharf_engine::session::Output;

use crate::engines::Engines;

/// What a URL was made for.
#[derive(Debug, Clone)]
pub enum Pending {
    /// Run a command in a container.
    Exec {
        /// The container.
        container: String,
        /// The command.
        cmd: Vec<String>,
        /// Which streams the client wants.
        streams: Streams,
    },
    /// Attach to a container's main process.
    Attach {
        /// The container.
        container: String,
        /// Which streams the client wants.
        streams: Streams,
    },
    /// Forward connections to ports of a pod.
    PortForward {
        /// The pod's network namespace (None: the host's).
        netns: Option<std::path::PathBuf>,
    },
}

/// The streams a client asked for.
#[derive(Debug, Clone, Copy)]
pub struct Streams {
    /// A terminal.
    pub tty: bool,
    /// It sends input.
    pub stdin: bool,
    /// It reads standard output.
    pub stdout: bool,
    /// It reads standard error.
    pub stderr: bool,
}

impl Streams {
    /// The CRI's rules for a request: some stream, and no stderr with a terminal (a terminal
    /// has one output).
    pub fn check(&self, method: &str) -> Result<(), Status> {
        if !(self.stdin || self.stdout || self.stderr) {
            return Err(Status::invalid_argument(format!(
                "{method}: one of stdin, stdout or stderr must be set"
            )));
        }
        if self.tty && self.stderr {
            return Err(Status::invalid_argument(format!(
                "{method}: tty and stderr cannot both be set (a terminal has one output)"
            )));
        }
        Ok(())
    }
}

/// What goes to the process.
pub(crate) enum Input {
    Stdin(Vec<u8>),
    CloseStdin,
    Resize(u16, u16),
}

/// Start (exec) or join (attach) the process a URL was made for, with a thread reading its
/// output into the returned receiver (None: the stream ended without an exit) and one
/// writing what the sender gets to it (the engine's session is blocking).
pub(crate) async fn open_process(
    engines: &Engines,
    pending: Pending,
) -> Result<
    (
        mpsc::Receiver<Option<Output>>,
        std::sync::mpsc::Sender<Input>,
    ),
    Status,
> {
    let session = engines
        .call(move |e| match pending {
            Pending::Exec {
                container,
                cmd,
                streams,
            } => {
                let req = wharf_engine::ExecRequest {
                    command: cmd,
                    tty: streams.tty,
                    stdin: streams.stdin,
                    ..Default::default()
                };
                e.exec(&container, &req, true)
                    .map(|(_, s)| s.expect("attached"))
                    .map_err(crate::status::from_engine)
            }
            Pending::Attach { container, .. } => e
                .attach_session(&container)
                .map_err(crate::status::from_engine),
            Pending::PortForward { .. } => Err(Status::internal("not a process")),
        })
        .await?;
    bridge(session).map_err(|e| Status::internal(format!("stream: {e}")))
}

/// A session as a pair of channels: a thread reads the process's output into the
/// returned receiver (None: the stream ended without an exit), another writes what the
/// sender gets to it (the engine's session is blocking).
#[allow(clippy::type_complexity)]
pub(crate) fn bridge(
    session: wharf_engine::Session,
) -> std::io::Result<(
    mpsc::Receiver<Option<Output>>,
    std::sync::mpsc::Sender<Input>,
)> {
    let mut stream = session.stream;
    let mut input = stream.input()?;
    let (out_tx, out_rx) = mpsc::channel::<Option<Output>>(64);
    std::thread::spawn(move || {
        loop {
            match stream.recv() {
                Ok(Some(o)) => {
                    let exit = matches!(o, Output::Exit(_));
                    if out_tx.blocking_send(Some(o)).is_err() || exit {
                        return;
                    }
                }
                _ => {
                    let _ = out_tx.blocking_send(None);
                    return;
                }
            }
        }
    });
    let (in_tx, in_rx) = std::sync::mpsc::channel::<Input>();
    std::thread::spawn(move || {
        while let Ok(i) = in_rx.recv() {
            let r = match i {
                Input::Stdin(d) => input.write_stdin(&d),
                Input::CloseStdin => input.close_stdin(),
                Input::Resize(rows, cols) => input.resize(rows, cols),
            };
            if r.is_err() {
                return;
            }
        }
    });
    Ok((out_rx, in_tx))
}

/// The final status of a process: Success, or the failure client-go turns into its code.
pub(crate) fn exit_status(code: i32) -> String {
    if code == 0 {
        r#"{"metadata":{},"status":"Success"}"#.to_string()
    } else {
        failure(
            &format!("command terminated with non-zero exit code: exit code {code}"),
            Some(code),
        )
    }
}

/// A resize message (`{"Width":w,"Height":h}`) as input for the process's terminal.
pub(crate) fn resize_input(json: &[u8]) -> Option<Input> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let dim = |k: &str| v[k].as_u64().and_then(|n| u16::try_from(n).ok());
    Some(Input::Resize(dim("Height")?, dim("Width")?))
}

/// A metav1.Status of failure; with an exit code, the form client-go turns into one.
pub(crate) fn failure(message: &str, exit_code: Option<i32>) -> String {
    let mut v = serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
    });
    if let Some(code) = exit_code {
        v["reason"] = "NonZeroExitCode".into();
        v["details"] = serde_json::json!({
            "causes": [{"reason": "ExitCode", "message": code.to_string()}],
        });
    } else {
        v["reason"] = "InternalError".into();
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_resizes_are_what_client_go_reads() {
        let s: serde_json::Value = serde_json::from_str(&failure("x", Some(3))).unwrap();
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
        assert!(matches!(
            resize_input(br#"{"Width":80,"Height":24}"#),
            Some(Input::Resize(24, 80))
        ));
        assert!(resize_input(b"{}").is_none());
        let bad = Streams {
            tty: true,
            stdin: false,
            stdout: true,
            stderr: true,
        };
        assert_eq!(
            bad.check("Exec").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
