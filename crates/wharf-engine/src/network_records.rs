//! The records of user networks (`<root>/networks/NAME.json`) and the built-in network
//! configuration each one stands for: what the sandbox needs to attach a pod, apart from
//! the engine's commands on networks ([`crate::user_networks`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::paths::Paths;

/// A user network's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct UserNetwork {
    /// Its name.
    pub name: String,
    /// Its id (32 hex digits).
    pub id: String,
    /// When it was made (RFC 3339).
    pub created: String,
    /// IPv4 subnet.
    pub subnet: String,
    /// The bridge's address, the pods' gateway.
    pub gateway: String,
    /// The bridge interface.
    pub bridge: String,
    /// Its labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Names a user network cannot take: the modes and the built-in network.
pub(crate) const RESERVED: [&str; 7] = [
    "wharf", "builtin", "bridge", "default", "none", "host", "cni",
];

pub(crate) fn record_path(paths: &Paths, name: &str) -> PathBuf {
    paths.root.join("networks").join(format!("{name}.json"))
}

pub(crate) fn valid(name: &str) -> bool {
    crate::validate::Rule::NetworkName.allows(name)
}

/// The user network `name`, if there is one.
pub fn load(paths: &Paths, name: &str) -> Result<Option<UserNetwork>> {
    if !valid(name) {
        return Ok(None);
    }
    match std::fs::read(record_path(paths, name)) {
        Ok(t) => serde_json::from_slice(&t)
            .map(Some)
            .map_err(|e| Error::Other(format!("network {name}: its record is damaged: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Os {
            what: format!("reading network {name}"),
            err: e,
        }),
    }
}

/// The built-in network configuration of user network `n`.
pub fn builtin_config(
    paths: &Paths,
    n: &UserNetwork,
    host_netns: Option<PathBuf>,
) -> Result<wharf_net::BuiltinConfig> {
    let mut c = wharf_net::BuiltinConfig::new(paths.root.join("net/user").join(&n.id));
    c.name = n.name.clone();
    c.bridge = n.bridge.clone();
    c.subnet = n
        .subnet
        .parse()
        .map_err(|_| Error::Other(format!("network {}: bad subnet {}", n.name, n.subnet)))?;
    c.gateway = n.gateway.parse().ok();
    c.nft_table = format!("wharf_{}", &n.id[..12]);
    c.host_netns = host_netns;
    Ok(c)
}
