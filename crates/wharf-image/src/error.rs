//! The image library's error type.
//!
//! Every message names the object (image, blob, layer entry) and the cause, because the CLI
//! prints it as is: "pulling 127.0.0.1:5000/x:latest: manifest unknown: ...".

use std::io;

/// Errors of the image library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A reference that does not parse as an image name.
    #[error("invalid image reference {0:?}: {1}")]
    InvalidReference(String, String),
    /// No image (or no blob) by that name or id in the store.
    #[error("{0}")]
    NotFound(String),
    /// The registry could not be reached or answered with an error.
    #[error("{0}")]
    Registry(String),
    /// The registry refused our credentials, or wants some we do not have.
    #[error("{0}")]
    Unauthorized(String),
    /// Content whose digest or size differs from what its descriptor promised.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The blob, manifest or layer being verified.
        what: String,
        /// What the descriptor said.
        expected: String,
        /// What the bytes hash to (or their size).
        actual: String,
    },
    /// A manifest, layer or archive in a format Wharf does not handle.
    #[error("unsupported media type {0}")]
    UnsupportedMediaType(String),
    /// An index without a manifest for the wanted platform.
    #[error("no matching platform: wanted {wanted}, the index has {available}")]
    NoMatchingPlatform {
        /// The platform asked for.
        wanted: String,
        /// The platforms the index offers.
        available: String,
    },
    /// A manifest, config or archive that is malformed.
    #[error("{0}")]
    Invalid(String),
    /// A layer entry that Wharf refuses to unpack (it would leave its snapshot).
    #[error("unsafe layer entry {entry:?}: {reason}")]
    UnsafeEntry {
        /// The entry's name in the tar stream.
        entry: String,
        /// Why it is refused.
        reason: String,
    },
    /// The object is still used (by a container, a mount or a running operation).
    #[error("{0}")]
    InUse(String),
    /// The metadata store failed.
    #[error("metadata store: {0}")]
    Db(#[from] rusqlite::Error),
    /// A syscall or file operation failed; `what` says what was being done.
    #[error("{what}: {err}")]
    Io {
        /// What the library was doing.
        what: String,
        /// The OS error.
        err: io::Error,
    },
    /// An error with the operation (e.g. "pulling busybox") it happened in.
    #[error("{context}: {inner}")]
    Context {
        /// What was being done.
        context: String,
        /// The cause (in the message, so not chained as a source).
        inner: Box<Error>,
    },
}

/// Result alias of the image library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error with a description of the operation that failed.
    pub fn io(what: impl Into<String>, err: impl Into<io::Error>) -> Self {
        Error::Io {
            what: what.into(),
            err: err.into(),
        }
    }

    /// Wrap with the operation it happened in.
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context {
            context: context.into(),
            inner: Box::new(self),
        }
    }

    /// The innermost error (below any [`Error::Context`]).
    pub fn root_cause(&self) -> &Error {
        match self {
            Error::Context { inner, .. } => inner.root_cause(),
            e => e,
        }
    }
}

/// `.ctx("what")` on I/O results.
pub(crate) trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<io::Error>> IoContext<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}
