//! Image references, normalised as docker does: `busybox` is
//! `docker.io/library/busybox:latest`, `me/app` is `docker.io/me/app:latest`, and a first
//! component with a `.` or a `:` (or `localhost`) names the registry.

use std::fmt;

use crate::digest::Digest;
use crate::error::{Error, Result};

/// Docker Hub's canonical registry name.
pub const DOCKER_HUB: &str = "docker.io";
/// The host that serves Docker Hub's registry API.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// A parsed, normalised image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Registry host (and port), e.g. `docker.io`, `127.0.0.1:5000`.
    pub registry: String,
    /// Repository path, e.g. `library/busybox`.
    pub repository: String,
    /// Tag; `latest` when neither a tag nor a digest was given.
    pub tag: Option<String>,
    /// Digest, when pulling by digest (wins over the tag, as docker does).
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parse and normalise `s`.
    pub fn parse(s: &str) -> Result<Reference> {
        let bad = |why: &str| Error::InvalidReference(s.to_string(), why.to_string());
        if s.is_empty() {
            return Err(bad("empty"));
        }
        let (name_tag, digest) = match s.split_once('@') {
            Some((n, d)) => (
                n,
                Some(d.parse::<Digest>().map_err(|e| bad(&e.to_string()))?),
            ),
            None => (s, None),
        };
        let (name, tag) = match name_tag.rfind(':') {
            Some(i) if !name_tag[i..].contains('/') => {
                (&name_tag[..i], Some(name_tag[i + 1..].to_string()))
            }
            _ => (name_tag, None),
        };
        if let Some(t) = &tag
            && !valid_tag(t)
        {
            return Err(bad(
                "a tag is 1-128 of [A-Za-z0-9_.-], not starting with . or -",
            ));
        }
        let (registry, mut repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        let registry = if registry == "index.docker.io" {
            DOCKER_HUB.to_string()
        } else {
            registry
        };
        if !valid_registry(&registry) {
            return Err(bad("invalid registry host"));
        }
        if registry == DOCKER_HUB && !repository.contains('/') {
            repository = format!("library/{repository}");
        }
        if repository.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(bad("repository name must be lowercase"));
        }
        if !repository.split('/').all(valid_path_component) {
            return Err(bad(
                "repository path components are lowercase letters and digits separated by ., _, __ or -",
            ));
        }
        if registry.len() + 1 + repository.len() > 255 {
            return Err(bad("name longer than 255 characters"));
        }
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository` without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// What to ask the registry's manifest endpoint for: the digest if any, else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        }
    }

    /// The name an image pulled by this reference is stored under: `name:tag` or
    /// `name@digest` (a pull by digest records no tag).
    pub fn store_name(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => format!("{}@{d}", self.name()),
            (None, Some(t)) => format!("{}:{t}", self.name()),
            (None, None) => format!("{}:latest", self.name()),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && !t.starts_with(['.', '-'])
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn valid_registry(r: &str) -> bool {
    let (host, port) = if let Some(rest) = r.strip_prefix('[') {
        // [ipv6]:port
        match rest.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return false,
        }
    } else {
        match r.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (r, None),
        }
    };
    if let Some(p) = port
        && (p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> String {
        Reference::parse(s).unwrap().to_string()
    }

    #[test]
    fn normalises_like_docker() {
        assert_eq!(n("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(n("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(n("me/app"), "docker.io/me/app:latest");
        assert_eq!(n("index.docker.io/me/app:v1"), "docker.io/me/app:v1");
        assert_eq!(n("localhost/app"), "localhost/app:latest");
        assert_eq!(
            n("127.0.0.1:5000/fixtures/busybox:multiarch"),
            "127.0.0.1:5000/fixtures/busybox:multiarch"
        );
        let d = "sha256:58b9126d60448cbc9e36a15aeb4ffa48bc4346207b10994a0dd804b9f12e7b1d";
        let r = Reference::parse(&format!("quay.io/a/b@{d}")).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.manifest_ref(), d);
        assert_eq!(r.store_name(), format!("quay.io/a/b@{d}"));
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "a//b",
            "-a",
            "a@sha256:12",
            "a:b:c",
            "reg.io/../x",
            "busybox:.tag",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
