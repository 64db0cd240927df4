//! A front end's live connection to one process of a container (its main process or an
//! exec'd one): the stream of its stdio, a way to signal it, and how it ended. The CLI relays
//! a session to a terminal; the CRI server will relay it to a streaming connection.

use std::path::PathBuf;
use std::time::Duration;

pub use wharf_shim::{Attach as Stream, AttachInput as StreamInput, Output};

use crate::db::ContainerRow;
use crate::engine::Engine;
use crate::error::Result;

/// An attached process.
#[derive(Debug)]
pub struct Session {
    /// The container.
    pub container: ContainerRow,
    /// The exec process, for a session of `exec`.
    pub exec_id: Option<String>,
    /// Its output, and input to it.
    pub stream: Stream,
    /// It has a terminal.
    pub tty: bool,
    /// It reads what the front end sends.
    pub stdin: bool,
    shim_dir: PathBuf,
}

/// Sends signals to a session's process (from any thread, while the session streams).
#[derive(Debug, Clone)]
pub struct Signaller {
    shim_dir: PathBuf,
    id: String,
    exec_id: Option<String>,
}

impl Signaller {
    /// Send `signal` to the process.
    pub fn signal(&self, signal: i32) -> Result<()> {
        let shim = wharf_shim::ShimClient::connect(&self.shim_dir)?;
        match &self.exec_id {
            Some(e) => shim.kill_exec(&self.id, e, signal)?,
            None => shim.kill(&self.id, signal, false)?,
        }
        Ok(())
    }
}

impl Session {
    pub(crate) fn new(
        container: ContainerRow,
        exec_id: Option<String>,
        stream: Stream,
        tty: bool,
        stdin: bool,
        shim_dir: PathBuf,
    ) -> Session {
        Session {
            container,
            exec_id,
            stream,
            tty,
            stdin,
            shim_dir,
        }
    }

    /// A handle for signalling the process while the stream is read elsewhere.
    pub fn signaller(&self) -> Signaller {
        Signaller {
            shim_dir: self.shim_dir.clone(),
            id: self.container.id.clone(),
            exec_id: self.exec_id.clone(),
        }
    }
}

/// How a session's stream ended, as the front end saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The stream delivered the process's exit code.
    Exited(i32),
    /// The stream ended without one (the shim went away, or the connection broke).
    Lost,
}

impl Engine {
    /// The exit code of a session's process once its stream has ended, with the exit
    /// recorded in the store (255 when nothing tells it, as docker reports a lost process).
    pub fn session_exit(&self, session: &Session, end: SessionEnd) -> i32 {
        let id = &session.container.id;
        match (&session.exec_id, end) {
            (None, SessionEnd::Exited(code)) => {
                // Recorded now, so that the next command does not have to.
                let _ = self.wait(id);
                code
            }
            (None, SessionEnd::Lost) => self.wait(id).map(|e| e.code).unwrap_or(255),
            (Some(_), SessionEnd::Exited(code)) => code,
            (Some(exec), SessionEnd::Lost) => self
                .wait_exec(id, exec, Some(Duration::from_secs(5)))
                .map(|e| e.code)
                .unwrap_or(255),
        }
    }
}
