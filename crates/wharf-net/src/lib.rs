//! Wharf's pod networking.
//!
//! (Crate overview: see the module list; the full guide is written as the API settles.)

pub mod error;
pub mod netlink;
pub mod netns;
pub mod sys;

pub use error::{Context, Error, Result};
pub use netns::{NetNs, NsHandle};
