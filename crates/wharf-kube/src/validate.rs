//! Name and path rules of the Kubernetes API that `wharf play` enforces.

use std::path::{Component, Path};

use wharf_engine::validate::Rule;

/// RFC 1123 label in lower case (container, volume, port names; namespaces): the engine's
/// [`Rule::DnsLabel`], which Kubernetes narrows to lower case.
pub fn is_dns_label(s: &str) -> bool {
    Rule::DnsLabel.allows(s) && !s.bytes().any(|b| b.is_ascii_uppercase())
}

/// RFC 1123 subdomain in lower case (pod and object names): the engine's
/// [`Rule::DnsName`], in lower case.
pub fn is_dns_subdomain(s: &str) -> bool {
    Rule::DnsName.allows(s) && !s.bytes().any(|b| b.is_ascii_uppercase())
}

/// Keys of ConfigMaps and Secrets: [-._a-zA-Z0-9]+, not "." or "..", at most 253.
pub fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

/// Environment variable names as Kubernetes accepts them: printable ASCII without '='.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'=')
}

/// A path that stays below its base: relative, no `..`, not empty (volume item paths,
/// subPath).
pub fn is_descending_path(s: &str) -> bool {
    let p = Path::new(s);
    !s.is_empty()
        && !s.contains('\0')
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && p.components().any(|c| matches!(c, Component::Normal(_)))
}

/// Why `s` is not a DNS label, for error messages.
pub fn dns_label_hint() -> &'static str {
    "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
}

/// Why `s` is not a DNS subdomain, for error messages.
pub fn dns_subdomain_hint() -> &'static str {
    "must be at most 253 characters of lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_name_rules() {
        assert!(is_dns_label("web-1"));
        assert!(is_dns_label("a"));
        for bad in ["", "Web", "-a", "a-", "a_b", "a.b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(is_dns_subdomain("web.example-1"));
        assert!(!is_dns_subdomain("web..x"));
        assert!(!is_dns_subdomain("web."));
        assert!(is_config_key("index.html"));
        assert!(is_config_key("..data_x"));
        assert!(!is_config_key(".."));
        assert!(!is_config_key("a/b"));
        assert!(is_env_name("MY_VAR.x-1"));
        assert!(!is_env_name("A=B"));
        assert!(!is_env_name(""));
        assert!(is_descending_path("a/b.txt"));
        assert!(is_descending_path("./a"));
        assert!(!is_descending_path("/etc/passwd"));
        assert!(!is_descending_path("a/../../b"));
        assert!(!is_descending_path(".."));
        assert!(!is_descending_path("."));
        assert!(!is_descending_path(""));
    }
}
