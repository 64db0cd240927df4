//! The result cache, in libcni's layout and format so DEL works after a restart and other
//! CNI tools (cnitool, crictl's inspect, podman) can read it:
//! `<cache dir>/results/<network>-<container id>-<ifname>`, a JSON object of kind
//! `cniCacheV1` with the configuration (base64, as Go encodes bytes), the result, and the
//! arguments of the ADD.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::sys;

/// Default CNI cache directory (libcni's).
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";

/// One cached attachment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// Always "cniCacheV1".
    pub kind: String,
    /// CNI_CONTAINERID of the ADD.
    #[serde(rename = "containerId")]
    pub container_id: String,
    /// The network configuration list's bytes, base64.
    pub config: String,
    /// CNI_IFNAME.
    #[serde(rename = "ifName")]
    pub if_name: String,
    /// Network name.
    #[serde(rename = "networkName")]
    pub network_name: String,
    /// CNI_NETNS of the ADD.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub netns: String,
    /// CNI_ARGS pairs.
    #[serde(rename = "cniArgs", default, skip_serializing_if = "Vec::is_empty")]
    pub cni_args: Vec<(String, String)>,
    /// Capability arguments (runtimeConfig values) of the ADD.
    #[serde(
        rename = "capabilityArgs",
        default,
        skip_serializing_if = "serde_json::Map::is_empty"
    )]
    pub capability_args: serde_json::Map<String, Value>,
    /// The final result of the ADD.
    #[serde(default)]
    pub result: Value,
}

/// The cache file of one attachment.
pub fn path(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    cache_dir
        .join("results")
        .join(format!("{network}-{container_id}-{ifname}"))
}

/// Write an entry (atomically, readable by root only: results can carry addresses and
/// arguments operators may consider private).
pub fn write(cache_dir: &Path, e: &CacheEntry) -> Result<()> {
    let p = path(cache_dir, &e.network_name, &e.container_id, &e.if_name);
    let data = serde_json::to_vec(e).expect("cache entries serialize");
    // Created 0600, so it is never readable by others, not even between the rename and
    // the chmod; the chmod only makes the mode exact whatever the umask.
    sys::write_atomic(&p, &data, 0o600)?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
    Ok(())
}

/// Read one entry.
pub fn read(path: &Path) -> Result<Option<CacheEntry>> {
    match std::fs::read(path) {
        Ok(d) => {
            let e: CacheEntry = serde_json::from_slice(&d).map_err(|e| {
                Error::Invalid(format!("unreadable CNI cache file {}: {e}", path.display()))
            })?;
            if e.kind != "cniCacheV1" {
                return Err(Error::Invalid(format!(
                    "CNI cache file {} has unknown kind {:?}",
                    path.display(),
                    e.kind
                )));
            }
            Ok(Some(e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::os(format!("read {}", path.display()), e)),
    }
}

/// Every entry of network `network` (optionally only those of one container), with its path.
pub fn list(
    cache_dir: &Path,
    network: &str,
    container_id: Option<&str>,
) -> Result<Vec<(PathBuf, CacheEntry)>> {
    let dir = cache_dir.join("results");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::os(format!("read {}", dir.display()), e)),
    };
    let prefix = match container_id {
        Some(c) => format!("{network}-{c}-"),
        None => format!("{network}-"),
    };
    let mut out = Vec::new();
    for ent in entries.flatten() {
        if !ent.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        // Names are ambiguous ('-' may appear in every part): the content decides.
        if let Ok(Some(e)) = read(&ent.path())
            && e.network_name == network
            && container_id.is_none_or(|c| e.container_id == c)
        {
            out.push((ent.path(), e));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (Go's encoding of []byte in JSON).
pub fn base64_encode(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Decode standard base64 (padding optional).
pub fn base64_decode(s: &str) -> Result<Vec<u8>> {
    let bad = || Error::Invalid("invalid base64 in a CNI cache file".into());
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = B64.iter().position(|x| *x == c).ok_or_else(bad)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_the_standard_encoding() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
        ] {
            assert_eq!(base64_encode(raw.as_bytes()), enc);
            assert_eq!(base64_decode(enc).unwrap(), raw.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)).unwrap(), all);
        assert!(base64_decode("ab!d").is_err());
    }

    #[test]
    fn entries_are_found_by_network_and_container_not_by_name_prefix_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let mk = |net: &str, c: &str| CacheEntry {
            kind: "cniCacheV1".into(),
            container_id: c.into(),
            config: base64_encode(b"{}"),
            if_name: "eth0".into(),
            network_name: net.into(),
            netns: String::new(),
            cni_args: vec![("K".into(), "V".into())],
            capability_args: Default::default(),
            result: serde_json::json!({"cniVersion":"1.0.0"}),
        };
        write(tmp.path(), &mk("net", "a")).unwrap();
        write(tmp.path(), &mk("net", "a-b")).unwrap();
        write(tmp.path(), &mk("net-a", "c")).unwrap();
        assert_eq!(list(tmp.path(), "net", Some("a")).unwrap().len(), 1);
        assert_eq!(list(tmp.path(), "net", None).unwrap().len(), 2);
        assert_eq!(list(tmp.path(), "net-a", None).unwrap().len(), 1);
        let text = std::fs::read_to_string(path(tmp.path(), "net", "a", "eth0")).unwrap();
        assert!(
            text.contains(r#""kind":"cniCacheV1""#) && text.contains(r#""containerId":"a""#),
            "{text}"
        );
        assert!(text.contains(r#""cniArgs":[["K","V"]]"#), "{text}");
    }
}
