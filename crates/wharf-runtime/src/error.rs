//! The runtime's error type.
//!
//! Messages follow runc's wording where engines match on it (containerd and podman look for
//! "does not exist", "not running", "already exists" in the runtime's stderr or log), and
//! otherwise always name the object and the cause.

use std::io;
use std::path::Path;

/// Errors of the runtime library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No state directory for this id under the runtime root.
    #[error("container does not exist: {0}")]
    NotFound(String),
    /// create with an id that is already taken.
    #[error("container with id exists: {0}")]
    Exists(String),
    /// An id that cannot name a directory safely.
    #[error("invalid container id {0:?}: {1}")]
    InvalidId(String, &'static str),
    /// config.json is unreadable, malformed or asks for something invalid.
    #[error("invalid config.json: {0}")]
    Config(String),
    /// state.json does not parse: torn by a crash of the machine on a runtime root that is
    /// on a disk (the file is replaced by a rename, never synced), or damaged by hand.
    #[error("corrupt state file {0}")]
    CorruptState(String),
    /// The operation does not fit the container's status.
    #[error("{0}")]
    State(String),
    /// A syscall or file operation failed; `what` says what the runtime was doing.
    #[error("{what}: {err}")]
    Os {
        /// What the runtime was doing.
        what: String,
        /// The OS error (shown in the message, so not chained as a source).
        err: io::Error,
    },
    /// The host lacks something the configuration asks for.
    #[error("{0}")]
    Unsupported(String),
    /// A hook failed or timed out.
    #[error("{0}")]
    Hook(String),
    /// The container's init reported a failure while setting itself up.
    #[error("{0}")]
    Init(String),
    /// The container's program could not be executed (docker's exit 127 when it is not
    /// found, 126 otherwise). `detail` replaces the errno's text where runc says more
    /// ("executable file not found in $PATH").
    #[error("{}", exec_message(program, *errno, detail.as_deref()))]
    Exec {
        /// The program as the config names it.
        program: String,
        /// Why it could not be executed.
        errno: i32,
        /// Runc's wording, when it has one.
        detail: Option<String>,
    },
    /// Anything else, with its full message.
    #[error("{0}")]
    Other(String),
}

/// runc's wording: `exec: "sh": executable file not found in $PATH`, `exec "/x": Permission
/// denied (os error 13)`.
fn exec_message(program: &str, errno: i32, detail: Option<&str>) -> String {
    match detail {
        Some(d) => format!("exec: {program:?}: {d}"),
        None => format!("exec {program:?}: {}", io::Error::from_raw_os_error(errno)),
    }
}

impl Error {
    /// For a program that could not be executed, the exit status docker gives: 127 when it
    /// is not there, 126 when it cannot be run.
    pub fn exec_status(&self) -> Option<i32> {
        match self {
            Error::Exec { errno, .. } if *errno == libc::ENOENT => Some(127),
            Error::Exec { .. } => Some(126),
            _ => None,
        }
    }
}

/// Result alias of the runtime library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An OS error with a description of the operation that failed.
    pub fn os(what: impl Into<String>, source: impl Into<io::Error>) -> Self {
        Error::Os {
            what: what.into(),
            err: source.into(),
        }
    }

    /// The errno of an OS error, if this is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Os { err, .. } => err.raw_os_error(),
            _ => None,
        }
    }
}

/// Attach "what was being done" to low-level errors.
pub trait Context<T> {
    /// Turn the error into [`Error::Os`] described by `what`.
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<io::Error>> Context<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::os(what(), e))
    }
}

/// Display helper for paths in messages.
pub(crate) fn p(path: &Path) -> std::path::Display<'_> {
    path.display()
}
