//! The network library's error type. Every message names the object (pod, network,
//! interface, plugin, file) and the cause.

use std::io;

/// Errors of the network library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A syscall, netlink request or file operation failed; `what` says what was being done.
    #[error("{what}: {err}")]
    Os {
        /// What the library was doing.
        what: String,
        /// The OS error (shown in the message, so not chained as a source).
        err: io::Error,
    },
    /// Bad input from the caller or a configuration file.
    #[error("{0}")]
    Invalid(String),
    /// Something that must not exist already does (a pod already attached, a port taken).
    #[error("{0}")]
    Conflict(String),
    /// Something that must exist does not (a network, a plugin, a namespace).
    #[error("{0}")]
    NotFound(String),
    /// No address left in a subnet.
    #[error("{0}")]
    Exhausted(String),
    /// A CNI plugin failed: its error as the CNI spec defines it.
    #[error("CNI plugin {plugin} ({command}) failed: {msg} (code {code}){}", details_suffix(.details))]
    Plugin {
        /// The plugin's type (binary name).
        plugin: String,
        /// ADD, DEL, CHECK, STATUS, GC, VERSION.
        command: String,
        /// The CNI error code (1-99 reserved by the spec, 100+ plugin-specific; 0 when the
        /// plugin printed no error object).
        code: u32,
        /// The plugin's message.
        msg: String,
        /// The plugin's details, if any.
        details: String,
    },
    /// Applying nftables rules failed.
    #[error("nftables: {0}")]
    Firewall(String),
    /// Several cleanup steps failed; all were attempted.
    #[error("{}", .0.join("; "))]
    Multiple(Vec<String>),
}

fn details_suffix(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(": {details}")
    }
}

/// An OS error of joining a namespace from a helper thread ([`crate::netns::run_in`]).
impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        Error::os("join the network namespace", err)
    }
}

/// Result alias of the network library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An OS error with a description of the operation that failed.
    pub fn os(what: impl Into<String>, err: impl Into<io::Error>) -> Self {
        Error::Os {
            what: what.into(),
            err: err.into(),
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
