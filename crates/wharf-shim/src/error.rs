//! Errors of the shim library (client, records, logs).

use std::path::PathBuf;

use crate::protocol::ErrorKind;

/// What went wrong talking to a shim or reading what it left on disk.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// Nothing listens on the shim's socket: the shim exited or was killed. The engine
    /// reacts with [`crate::reap::reap_dead_shim`].
    #[error("the shim of {state_dir} is not running: {cause}")]
    NotRunning {
        /// The pod's state directory.
        state_dir: PathBuf,
        /// What connecting said.
        cause: std::io::Error,
    },
    /// The shim refused the request.
    #[error("shim {state_dir}: {op}: {message}")]
    Remote {
        /// The pod's state directory.
        state_dir: PathBuf,
        /// The operation (with its container).
        op: String,
        /// Kind of failure, for callers that react to it.
        kind: ErrorKind,
        /// The shim's message (names the container and the cause).
        message: String,
    },
    /// The shim did not answer within the request's deadline: it is stuck or overloaded.
    /// (A `wait` with a deadline reports this too when the container simply runs on.)
    #[error(
        "shim {state_dir}: {op}: no answer within {secs} s (the shim is stuck or overloaded; \
         see {state_dir}/shim.log)"
    )]
    Timeout {
        /// The pod's state directory.
        state_dir: PathBuf,
        /// The operation (with its container).
        op: String,
        /// The deadline, in seconds.
        secs: u64,
    },
    /// The connection failed in the middle of a request.
    #[error("shim {state_dir}: {op}: {cause}")]
    Connection {
        /// The pod's state directory.
        state_dir: PathBuf,
        /// The operation (with its container).
        op: String,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The shim answered something that is not the protocol.
    #[error("shim {state_dir}: {op}: protocol error: {message}")]
    Protocol {
        /// The pod's state directory.
        state_dir: PathBuf,
        /// The operation.
        op: String,
        /// What was wrong.
        message: String,
    },
    /// Starting the shim failed.
    #[error("start the shim of pod {pod}: {message}")]
    Spawn {
        /// Pod id.
        pod: String,
        /// Why.
        message: String,
    },
    /// The shim is still running (a dead-shim cleanup was asked for a live one).
    #[error("the shim of {0} is still running (pid {1})")]
    StillRunning(PathBuf, i32),
    /// A file operation failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        cause: std::io::Error,
    },
    /// A record on disk is unreadable.
    #[error("corrupt shim record {0}")]
    Corrupt(String),
    /// The runtime library failed (dead-shim cleanup).
    #[error("{0}")]
    Runtime(String),
}

impl ShimError {
    /// An I/O error with a description of what was being done.
    pub fn io(what: impl Into<String>, cause: std::io::Error) -> Self {
        ShimError::Io {
            what: what.into(),
            cause,
        }
    }

    /// True if the shim is gone (the engine should reap it).
    pub fn is_not_running(&self) -> bool {
        matches!(self, ShimError::NotRunning { .. })
    }

    /// The shim's error kind, if the shim refused the request.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ShimError::Remote { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Result alias of the shim library.
pub type Result<T, E = ShimError> = std::result::Result<T, E>;
