//! The engine's error type: every error names the object (pod, container, image) and the
//! cause, so the CLI can print it as is.

/// What kind of failure an error is, whichever layer it comes from: what front ends react
/// to (the CLI's exit codes, the CRI server's gRPC codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No such object (container, pod, image, exec process).
    NotFound,
    /// The name or id is taken.
    AlreadyExists,
    /// The request is malformed or asks for something invalid.
    InvalidArgument,
    /// The object is not in a state that allows it (a running container to remove, a dead
    /// pod, an image in use).
    FailedPrecondition,
    /// A resource ran out (disk space, addresses).
    ResourceExhausted,
    /// A service the operation needs does not answer (a shim gone or stuck, a registry out
    /// of reach).
    Unavailable,
    /// The registry refused the credentials.
    Unauthenticated,
    /// The container's program does not exist (docker's exit 127).
    ProgramNotFound,
    /// The container's program cannot be executed (docker's exit 126).
    ProgramNotExecutable,
    /// Anything else: a bug, or a failure with no better name.
    Internal,
}

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
    /// The request is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The request does not fit the object's state.
    #[error("{0}")]
    Precondition(String),
    /// What the request would create exists already.
    #[error("{0}")]
    Exists(String),
    /// The pod's shim refused or failed the request (its message names the container and
    /// the cause), or could not be reached.
    #[error("{message}")]
    Shim {
        /// What kind of failure.
        kind: ErrorKind,
        /// The message.
        message: String,
    },
    /// The metadata store failed.
    #[error("metadata store: {0}")]
    Store(rusqlite::Error),
    /// The filesystem of the store is full: a change could not be written.
    #[error(
        "no space left on {dir}: free some (wharf rm, wharf image prune, or other files \
         there) and try again"
    )]
    NoSpace {
        /// The directory of the store.
        dir: String,
    },
    /// The store file is damaged, or missing while the state it described is still there.
    #[error("{0}")]
    StoreDamaged(String),
    /// The image subsystem failed.
    #[error(transparent)]
    Image(#[from] wharf_image::Error),
    /// The network subsystem failed.
    #[error(transparent)]
    Net(#[from] wharf_net::Error),
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] wharf_runtime::Error),
    /// systemd (the systemd cgroup driver) refused or could not be reached.
    #[error(transparent)]
    Systemd(#[from] wharf_systemd::Error),
    /// A file or syscall failed while doing `what`.
    #[error("{what}: {err}")]
    Os {
        /// What the engine was doing.
        what: String,
        /// The OS error.
        err: std::io::Error,
    },
    /// The program cannot be run as asked, before it starts (a user the container does not
    /// know for exec): docker's exit 126.
    #[error("{0}")]
    CannotExecute(String),
    /// A build step's command failed (docker's "returned a non-zero code").
    #[error("{message}")]
    BuildStep {
        /// The message, naming the command and its code.
        message: String,
        /// The command's exit code.
        code: i32,
    },
    /// Anything else, with its full message.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::NameInUse { .. } | Error::Exists(_) => ErrorKind::AlreadyExists,
            Error::Invalid(_) => ErrorKind::InvalidArgument,
            Error::Precondition(_) | Error::StoreDamaged(_) => ErrorKind::FailedPrecondition,
            Error::NoSpace { .. } => ErrorKind::ResourceExhausted,
            Error::Shim { kind, .. } => *kind,
            Error::CannotExecute(_) => ErrorKind::ProgramNotExecutable,
            Error::BuildStep { .. } => ErrorKind::FailedPrecondition,
            Error::Image(e) => image_kind(e),
            Error::Net(e) => match e {
                wharf_net::Error::Invalid(_) => ErrorKind::InvalidArgument,
                wharf_net::Error::Conflict(_) => ErrorKind::AlreadyExists,
                wharf_net::Error::NotFound(_) => ErrorKind::NotFound,
                wharf_net::Error::Exhausted(_) => ErrorKind::ResourceExhausted,
                _ => ErrorKind::Internal,
            },
            Error::Runtime(e) => runtime_kind(e),
            Error::Systemd(e) => match e {
                wharf_systemd::Error::Invalid(_) => ErrorKind::InvalidArgument,
                wharf_systemd::Error::NoSystemd(_) => ErrorKind::FailedPrecondition,
                wharf_systemd::Error::Unit { .. } => ErrorKind::Internal,
            },
            Error::Os { err, .. } if err.raw_os_error() == Some(libc::ENOSPC) => {
                ErrorKind::ResourceExhausted
            }
            Error::Store(_) | Error::Os { .. } | Error::Other(_) => ErrorKind::Internal,
        }
    }
}

fn image_kind(e: &wharf_image::Error) -> ErrorKind {
    use wharf_image::Error as E;
    match e {
        E::InvalidReference(..) | E::Invalid(_) | E::UnsupportedMediaType(_) => {
            ErrorKind::InvalidArgument
        }
        E::NotFound(_) | E::NoMatchingPlatform { .. } => ErrorKind::NotFound,
        E::Registry(_) => ErrorKind::Unavailable,
        E::Unauthorized(_) => ErrorKind::Unauthenticated,
        E::InUse(_) => ErrorKind::FailedPrecondition,
        E::Io { err, .. } if err.raw_os_error() == Some(libc::ENOSPC) => {
            ErrorKind::ResourceExhausted
        }
        E::Context { inner, .. } => image_kind(inner),
        _ => ErrorKind::Internal,
    }
}

fn runtime_kind(e: &wharf_runtime::Error) -> ErrorKind {
    use wharf_runtime::Error as E;
    match e {
        E::NotFound(_) => ErrorKind::NotFound,
        E::Exists(_) => ErrorKind::AlreadyExists,
        E::InvalidId(..) | E::Config(_) | E::Unsupported(_) => ErrorKind::InvalidArgument,
        E::State(_) => ErrorKind::FailedPrecondition,
        e if e.exec_status() == Some(127) => ErrorKind::ProgramNotFound,
        e if e.exec_status().is_some() => ErrorKind::ProgramNotExecutable,
        _ => ErrorKind::Internal,
    }
}

/// The store this process opened (the CLI and the daemon open one), for error messages
/// that name it.
static STORE_PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Record which store file errors are about.
pub(crate) fn set_store_path(path: &std::path::Path) {
    let _ = STORE_PATH.set(path.to_path_buf());
}

fn store_path() -> String {
    STORE_PATH
        .get()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "wharf.db".into())
}

/// What to tell a user whose store file is damaged.
pub fn damaged_store_message(path: &str, cause: &str) -> String {
    format!(
        "the metadata store {path} is damaged ({cause}): run `wharf system check` to see what \
         is affected, and `wharf system repair` to set the file aside and rebuild the store \
         from what is on disk"
    )
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        if let rusqlite::Error::SqliteFailure(f, _) = &e {
            match f.code {
                rusqlite::ErrorCode::DiskFull => {
                    let path = store_path();
                    let dir = std::path::Path::new(&path)
                        .parent()
                        .map(|d| d.display().to_string())
                        .unwrap_or(path);
                    return Error::NoSpace { dir };
                }
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase => {
                    return Error::StoreDamaged(damaged_store_message(
                        &store_path(),
                        &e.to_string(),
                    ));
                }
                _ => {}
            }
        }
        Error::Store(e)
    }
}

/// An image store error, with the store's own failures (a damaged or full file) told as
/// the engine tells them.
pub(crate) fn from_image(e: wharf_image::Error) -> Error {
    match e {
        wharf_image::Error::Db(e) => Error::from(e),
        e => Error::Image(e),
    }
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
