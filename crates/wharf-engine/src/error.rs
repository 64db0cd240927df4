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
