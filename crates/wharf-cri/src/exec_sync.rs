//! ExecSync: run a command in a container and return its output and exit code (what
//! kubelet's exec probes use). A timeout kills the command and answers DeadlineExceeded,
//! which kubelet counts as a probe timeout.

use std::time::{Duration, Instant};

use tonic::Status;
use wharf_engine::session::Output;
use wharf_engine::{Engine, ExecRequest};

use crate::api::{ExecSyncRequest, ExecSyncResponse};
use crate::status::from_engine;

/// Most output kept per stream (kubelet keeps far less of a probe's).
const MAX_OUTPUT: usize = 16 << 20;

/// ExecSync.
pub fn exec_sync(e: &Engine, req: ExecSyncRequest) -> Result<ExecSyncResponse, Status> {
    if req.cmd.is_empty() {
        return Err(Status::invalid_argument(format!(
            "ExecSync in container {}: no command given",
            req.container_id
        )));
    }
    let exec = ExecRequest {
        command: req.cmd.clone(),
        ..Default::default()
    };
    let (exec_id, session) = e
        .exec(&req.container_id, &exec, true)
        .map_err(from_engine)?;
    let mut session = session.expect("attached exec has a session");
    let deadline =
        (req.timeout > 0).then(|| Instant::now() + Duration::from_secs(req.timeout as u64));
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let keep = |buf: &mut Vec<u8>, data: Vec<u8>| {
        let room = MAX_OUTPUT.saturating_sub(buf.len());
        buf.extend_from_slice(&data[..data.len().min(room)]);
    };
    loop {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = session.signaller().signal(libc::SIGKILL);
                let _ = e.wait_exec(&req.container_id, &exec_id, Some(Duration::from_secs(5)));
                return Err(Status::deadline_exceeded(format!(
                    "command {:?} in container {} timed out after {} s",
                    req.cmd, req.container_id, req.timeout
                )));
            }
            session
                .stream
                .set_read_timeout(Some(left))
                .map_err(|err| Status::internal(format!("exec stream: {err}")))?;
        }
        match session.stream.recv() {
            Ok(Some(Output::Stdout(d))) => keep(&mut stdout, d),
            Ok(Some(Output::Stderr(d))) => keep(&mut stderr, d),
            Ok(Some(Output::Exit(rec))) => {
                return Ok(ExecSyncResponse {
                    stdout,
                    stderr,
                    exit_code: rec.exit_code,
                });
            }
            Ok(None) => break,
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(err) => {
                return Err(Status::internal(format!(
                    "exec in container {}: its stream broke: {err}",
                    req.container_id
                )));
            }
        }
    }
    // The stream ended without an exit: ask the shim for it.
    let exit = e
        .wait_exec(&req.container_id, &exec_id, Some(Duration::from_secs(5)))
        .map_err(from_engine)?;
    Ok(ExecSyncResponse {
        stdout,
        stderr,
        exit_code: exit.code,
    })
}
