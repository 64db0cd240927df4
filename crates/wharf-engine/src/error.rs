//! The engine's error type: every error names the object (pod, container, image) and the
//! cause, so the CLI can print it as is.

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No pod or container by that name or id.
    #[error("no such {kind}: {name}")]
    NotFound {
        /// "pod" or "container".
        kind: &'static str,
        /// What the caller asked for.
        name: String,
    },
    /// A name already used by another pod or container.
    #[error("the {kind} name {name:?} is already in use by {id}")]
    NameInUse {
        /// "pod" or "container".
        kind: &'static str,
        /// The name.
        name: String,
        /// Who has it.
        id: String,
    },
    /// The request does not fit the object's state or is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The metadata store failed.
    #[error("metadata store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The image subsystem failed.
    #[error("{0}")]
    Image(#[from] wharf_image::Error),
    /// The network subsystem failed.
    #[error("{0}")]
    Net(#[from] wharf_net::Error),
    /// The runtime failed.
    #[error("{0}")]
    Runtime(#[from] wharf_runtime::Error),
    /// A file or syscall failed while doing `what`.
    #[error("{what}: {err}")]
    Os {
        /// What the engine was doing.
        what: String,
        /// The OS error.
        err: std::io::Error,
    },
    /// Anything else, with its full message.
    #[error("{0}")]
    Other(String),
}

/// Result alias of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach "what was being done" to I/O errors.
pub trait Context<T> {
    /// Turn the error into [`Error::Os`] described by `what`.
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<std::io::Error>> Context<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Os {
            what: what(),
            err: e.into(),
        })
    }
}
