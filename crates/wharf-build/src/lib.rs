//! Dockerfiles for the engine's builder (`wharf build`, the Docker API's `/build`).
//!
//! This crate reads; the engine builds. [`parse`] turns a Dockerfile into typed
//! [`Stage`]s of [`Instruction`]s, each with its line (for errors) and its text (for the
//! image's history); nothing is expanded here, because expansion needs the environment a
//! step sees (the base image's ENV, earlier ENV and ARG), which only the builder knows as it
//! goes: it calls [`expand::expand`] with that environment. [`ignore`] matches
//! `.dockerignore` patterns and [`context`] resolves the paths COPY and ADD name inside
//! the build context, refusing any that lead out of it.

pub mod context;
pub mod expand;
pub mod heredoc;
pub mod ignore;
mod parse;
mod types;

pub use parse::parse;
pub use types::*;

/// What can be wrong with a Dockerfile, named by file, line and instruction.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The text does not parse.
    #[error("{file}:{line}: {instruction}: {msg}")]
    Syntax {
        /// The Dockerfile's name as the user gave it.
        file: String,
        /// 1-based line of the instruction.
        line: usize,
        /// The instruction's keyword (e.g. `COPY`), or `Dockerfile` when none applies.
        instruction: String,
        /// What is wrong.
        msg: String,
    },
    /// A variable reference that cannot be expanded (`${V:?msg}`, a bad `${...}`).
    #[error("{0}")]
    Expand(String),
    /// A path that leads out of the build context.
    #[error("{path}: {msg}")]
    Context {
        /// The path as written.
        path: String,
        /// Why it is refused.
        msg: String,
    },
}

/// This crate's results.
pub type Result<T> = std::result::Result<T, Error>;
