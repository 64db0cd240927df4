//! Registries, where the image store is not needed: whether a registry accepts a login
//! (`wharf login`, the Docker API's `/auth`) and what a reference names there (the Docker
//! API's `/distribution`). The engine speaks to registries with its registry settings
//! (mirrors, plain-HTTP hosts); a front end gives those settings and the credentials, and
//! never builds a registry client itself.
//!
//! Logins are kept where docker keeps them (its config.json, which pulls read): the
//! functions that write and remove them are handed on from the image library as they are.

use crate::error::Result;
use crate::images::{Credentials, Digest, Reference, RegistriesConfig};

pub use wharf_image::auth::{remove_login, server_key, store_login};

/// The registry host of a server as users write it to log in (`https://host/`,
/// `host:port`, `index.docker.io`): docker's index and registry names are `docker.io`.
pub fn login_host(server: &str) -> String {
    let s = server
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    match s.split('/').next().unwrap_or(s) {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => "docker.io".into(),
        h => h.to_string(),
    }
}

/// Check that the registry at `host` accepts `creds` (`GET /v2/` with its challenge
/// answered), as `docker login` does.
pub fn check_login(registries: &RegistriesConfig, host: &str, creds: Credentials) -> Result<()> {
    let client = wharf_image::registry::Client::new(registries.clone(), Some(creds));
    let r = Reference {
        registry: host.to_string(),
        repository: String::new(),
        tag: None,
        digest: None,
    };
    Ok(client.repository(&r).check_login()?)
}

/// The manifest a reference names in its registry, as the registry describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteManifest {
    /// Its digest (of the bytes the registry sent).
    pub digest: Digest,
    /// Its media type (an index for a multi-platform image).
    pub media_type: String,
    /// Its size in bytes.
    pub size: usize,
}

/// Ask the registry of `reference` for the manifest it names (by digest, else by tag,
/// else `latest`), with `creds` if given (else the user's kept logins).
pub fn remote_manifest(
    registries: &RegistriesConfig,
    reference: &Reference,
    creds: Option<Credentials>,
) -> Result<RemoteManifest> {
    let client = wharf_image::registry::Client::new(registries.clone(), creds);
    let tag = reference
        .digest
        .as_ref()
        .map(|d| d.to_string())
        .or(reference.tag.clone())
        .unwrap_or_else(|| "latest".into());
    let m = client.repository(reference).manifest(&tag)?;
    Ok(RemoteManifest {
        digest: m.digest,
        media_type: m.media_type,
        size: m.bytes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_hosts_as_docker_names_them() {
        assert_eq!(login_host("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(login_host("registry-1.docker.io"), "docker.io");
        assert_eq!(login_host("http://127.0.0.1:5000/"), "127.0.0.1:5000");
        assert_eq!(login_host("quay.io"), "quay.io");
    }
}
