//! Wharf's pod networking.
//!
//! (Crate overview: see the module list; the full guide is written as the API settles.)

pub mod builtin;
pub mod cni;
pub mod dns;
pub mod error;
pub mod ipnet;
pub mod netlink;
pub mod netns;
pub mod network;
pub mod nft;
pub mod sys;
pub mod sysctl;
pub mod types;

pub use builtin::{BuiltinConfig, BuiltinNetwork};
pub use cni::{CniConfig, CniNetwork};
pub use error::{Context, Error, Result};
pub use ipnet::IpNet;
pub use netns::{NetNs, NsHandle};
pub use network::{Network, Selection};
pub use types::{AttachOptions, Attachment, PortMapping, Protocol};
