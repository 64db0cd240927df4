//! Manifests and indexes: OCI image manifest / index and Docker schema 2 manifest / manifest
//! list (the same JSON shapes with other media types), platform selection from an index, and
//! the media types of layers. Docker schema 1 is refused with an explanation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{Error, Result};

/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image config.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Docker manifest list (schema 2).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker image manifest (schema 2).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker image config (schema 2).
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// Docker schema 1, unsigned and signed.
pub const DOCKER_V1: &str = "application/vnd.docker.distribution.manifest.v1+json";
/// Docker schema 1, signed.
pub const DOCKER_V1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";
/// OCI layer media types.
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
/// OCI gzip layer.
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// OCI zstd layer.
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
/// Docker gzip layer.
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The `Accept` header of a manifest request: everything we can use, plus schema 1 so that
/// a registry that only has schema 1 says so instead of "not found".
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v2+json, \
application/vnd.docker.distribution.manifest.v1+prettyjws;q=0.5, \
application/vnd.docker.distribution.manifest.v1+json;q=0.5";

/// A content descriptor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the referenced content.
    #[serde(default)]
    pub media_type: String,
    /// Its digest.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Platform (index entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Alternative download locations (foreign layers); not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urls: Option<Vec<String>>,
}

impl Descriptor {
    /// The validated digest.
    pub fn digest(&self) -> Result<Digest> {
        self.digest.parse()
    }
}

/// A platform (`os`/`architecture`/`variant`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Platform {
    /// e.g. `amd64`, `arm64`.
    pub architecture: String,
    /// e.g. `linux`.
    pub os: String,
    /// e.g. `v8`, `v7`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// OS version (Windows only).
    #[serde(
        default,
        rename = "os.version",
        skip_serializing_if = "Option::is_none"
    )]
    pub os_version: Option<String>,
}

impl Platform {
    /// The platform this binary runs on, in Go's names (what images use).
    pub fn host() -> Platform {
        let (arch, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "s390x" => ("s390x", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Platform {
            architecture: arch.to_string(),
            os: "linux".to_string(),
            variant: variant.map(str::to_string),
            os_version: None,
        }
    }

    /// Parse `os/arch[/variant]` (the `--platform` flag).
    pub fn parse(s: &str) -> Result<Platform> {
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(Error::Invalid(format!(
                "invalid platform {s:?}: want os/arch[/variant], e.g. linux/arm64/v8"
            )));
        }
        let arch = match parts[1] {
            "x86_64" | "x86-64" => "amd64",
            "aarch64" => "arm64",
            a => a,
        };
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: arch.to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
            os_version: None,
        })
    }

    /// Whether an index entry for `other` runs here (wanted = self). Variants compare with
    /// arm64's default `v8` filled in; an entry without variant matches any variant.
    pub fn matches(&self, other: &Platform) -> bool {
        let norm = |p: &Platform| match (p.architecture.as_str(), p.variant.as_deref()) {
            ("arm64", None) => Some("v8".to_string()),
            (_, v) => v.map(str::to_string),
        };
        self.os == other.os
            && self.architecture == other.architecture
            && match (norm(self), norm(other)) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// An image manifest (OCI or Docker schema 2).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own media type (optional in OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The image config.
    pub config: Descriptor,
    /// Layers, base first.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// An image index (OCI) or manifest list (Docker).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// The index's own media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Entries.
    pub manifests: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// A parsed manifest document.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // short-lived, parsed once per pull
pub enum Parsed {
    /// A multi-platform index.
    Index(Index),
    /// A single image manifest.
    Manifest(Manifest),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<serde_json::Value>,
    #[serde(default)]
    config: Option<serde_json::Value>,
}

/// Parse a manifest or index. `content_type` is what the server (or descriptor) said; the
/// document's own `mediaType` and shape decide when that is missing or generic.
pub fn parse(bytes: &[u8], content_type: &str) -> Result<Parsed> {
    let ct = content_type.split(';').next().unwrap_or("").trim();
    let probe: Probe = serde_json::from_slice(bytes)
        .map_err(|e| Error::Invalid(format!("manifest is not valid JSON: {e}")))?;
    let mt = match ct {
        OCI_INDEX | OCI_MANIFEST | DOCKER_LIST | DOCKER_MANIFEST | DOCKER_V1 | DOCKER_V1_SIGNED => {
            ct.to_string()
        }
        _ => probe.media_type.clone().unwrap_or_default(),
    };
    if probe.schema_version == Some(1) || mt == DOCKER_V1 || mt == DOCKER_V1_SIGNED {
        return Err(Error::UnsupportedMediaType(format!(
            "{}: Docker schema 1 manifests are not supported (deprecated since 2019; \
             push the image again with a current docker or skopeo)",
            if mt.is_empty() { DOCKER_V1 } else { &mt }
        )));
    }
    let bad = |e: serde_json::Error| Error::Invalid(format!("malformed manifest ({mt}): {e}"));
    match mt.as_str() {
        OCI_INDEX | DOCKER_LIST => Ok(Parsed::Index(serde_json::from_slice(bytes).map_err(bad)?)),
        OCI_MANIFEST | DOCKER_MANIFEST => Ok(Parsed::Manifest(
            serde_json::from_slice(bytes).map_err(bad)?,
        )),
        "" if probe.manifests.is_some() => {
            Ok(Parsed::Index(serde_json::from_slice(bytes).map_err(bad)?))
        }
        "" if probe.config.is_some() => Ok(Parsed::Manifest(
            serde_json::from_slice(bytes).map_err(bad)?,
        )),
        other => Err(Error::UnsupportedMediaType(format!(
            "{:?} (not an image manifest or index)",
            if other.is_empty() { ct } else { other }
        ))),
    }
}

/// Pick the manifest for `want` from an index.
pub fn select_platform<'a>(index: &'a Index, want: &Platform) -> Result<&'a Descriptor> {
    index
        .manifests
        .iter()
        .find(|d| d.platform.as_ref().is_some_and(|p| want.matches(p)))
        .ok_or_else(|| Error::NoMatchingPlatform {
            wanted: want.to_string(),
            available: {
                let v: Vec<String> = index
                    .manifests
                    .iter()
                    .filter_map(|d| d.platform.as_ref().map(|p| p.to_string()))
                    .collect();
                if v.is_empty() {
                    "no platforms".to_string()
                } else {
                    v.join(", ")
                }
            },
        })
}

/// How a layer blob is compressed (decided by its media type; the unpacker also checks the
/// magic bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

/// The compression of a layer media type; an error for anything that is not a layer we can
/// unpack (foreign Windows layers, encrypted layers, artifacts).
pub fn layer_compression(media_type: &str) -> Result<Compression> {
    match media_type {
        OCI_LAYER
        | "application/vnd.oci.image.layer.nondistributable.v1.tar"
        | "application/vnd.docker.image.rootfs.diff.tar" => Ok(Compression::None),
        OCI_LAYER_GZIP
        | DOCKER_LAYER_GZIP
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip" => Ok(Compression::Gzip),
        OCI_LAYER_ZSTD
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
        | "application/vnd.docker.image.rootfs.diff.tar.zstd" => Ok(Compression::Zstd),
        other => Err(Error::UnsupportedMediaType(format!(
            "{other:?} for a layer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_matching() {
        let host = Platform::parse("linux/arm64").unwrap();
        assert!(host.matches(&Platform::parse("linux/arm64/v8").unwrap()));
        assert!(!host.matches(&Platform::parse("linux/amd64").unwrap()));
        let v7 = Platform::parse("linux/arm/v7").unwrap();
        assert!(!v7.matches(&Platform::parse("linux/arm/v6").unwrap()));
        assert!(Platform::parse("linux").is_err());
    }

    #[test]
    fn schema1_is_refused_clearly() {
        let e = parse(br#"{"schemaVersion":1,"name":"x","fsLayers":[]}"#, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema 1"), "{e}");
    }

    #[test]
    fn index_without_match_lists_platforms() {
        let idx: Index = serde_json::from_str(
            r#"{"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:00","size":1,"platform":{"os":"linux","architecture":"s390x"}}]}"#,
        )
        .unwrap();
        let e = select_platform(&idx, &Platform::parse("linux/amd64").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("linux/s390x") && e.contains("linux/amd64"),
            "{e}"
        );
    }
}
