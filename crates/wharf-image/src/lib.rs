//! wharf-image
pub mod archive;
pub mod auth;
pub mod config;
pub mod content;
pub mod db;
pub mod digest;
pub mod error;
mod gc;
pub mod lock;
pub mod manifest;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod snapshot;
pub mod store;
pub mod unpack;

pub use error::{Error, Result};
pub use pull::{PullEvent, PullOptions, PullProgress};
pub use store::{GcStats, Image, ImageStore, ImageSummary, Lease, Rootfs};
