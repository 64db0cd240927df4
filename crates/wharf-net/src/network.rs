//! The one entry point the engine uses per pod: a [`Network`] is either a CNI network
//! (the named one, or the default: first configuration in lexical order) or, when no CNI
//! configuration exists, the built-in bridge network.

use std::path::Path;

use crate::builtin::{BuiltinConfig, BuiltinNetwork};
use crate::cni::{CniConfig, CniNetwork};
use crate::error::Result;
use crate::types::{AttachOptions, Attachment};

/// Which network a pod joins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Selection {
    /// The default CNI network if any configuration exists, else the built-in network.
    #[default]
    Default,
    /// The CNI network of this name (an error if it does not exist).
    Cni(String),
    /// The built-in network, even if CNI configurations exist.
    Builtin,
}

/// A pod network: CNI or built-in, with the same attach/detach/check calls.
pub enum Network {
    /// The built-in bridge network.
    Builtin(BuiltinNetwork),
    /// A CNI network.
    Cni(CniNetwork),
}

impl Network {
    /// Resolve `sel` against the CNI configuration directories.
    pub fn open(sel: &Selection, cni: CniConfig, builtin: BuiltinConfig) -> Result<Network> {
        match sel {
            Selection::Builtin => Ok(Network::Builtin(BuiltinNetwork::new(builtin)?)),
            Selection::Cni(name) => Ok(Network::Cni(
                CniNetwork::load(cni, Some(name))?.expect("a named network loads or errors"),
            )),
            Selection::Default => match CniNetwork::load(cni, None)? {
                Some(n) => Ok(Network::Cni(n)),
                None => Ok(Network::Builtin(BuiltinNetwork::new(builtin)?)),
            },
        }
    }

    /// The network's name.
    pub fn name(&self) -> &str {
        match self {
            Network::Builtin(b) => &b.config().name,
            Network::Cni(c) => c.name(),
        }
    }

    /// Whether this is the built-in network.
    pub fn is_builtin(&self) -> bool {
        matches!(self, Network::Builtin(_))
    }

    /// Connect the pod whose network namespace is pinned at `netns_path`. On failure
    /// nothing is left behind.
    pub fn attach(
        &self,
        pod_id: &str,
        netns_path: &Path,
        opts: &AttachOptions,
    ) -> Result<Attachment> {
        match self {
            Network::Builtin(b) => b.attach(pod_id, netns_path, opts),
            Network::Cni(c) => c.attach(pod_id, netns_path, opts),
        }
    }

    /// Disconnect a pod. Idempotent; works after a restart, after a half-done attach, and
    /// when the pod's namespace is already gone.
    pub fn detach(&self, pod_id: &str, netns_path: Option<&Path>) -> Result<()> {
        match self {
            Network::Builtin(b) => b.detach(pod_id, netns_path),
            Network::Cni(c) => c.detach(pod_id, netns_path),
        }
    }

    /// Check that a pod's network is still as set up.
    pub fn check(&self, pod_id: &str, netns_path: &Path) -> Result<()> {
        match self {
            Network::Builtin(b) => b.check(pod_id),
            Network::Cni(c) => c.check(pod_id, netns_path),
        }
    }
}
