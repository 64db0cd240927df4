//! The engine's name rules (`wharf_engine::validate`): whatever a rule lets through can
//! carry no line break, control character, whitespace or comment sign into a file, and
//! every refusal is one line naming the field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_engine::validate::{self, Rule};

const RULES: [Rule; 12] = [
    Rule::DnsLabel,
    Rule::Hostname,
    Rule::DnsName,
    Rule::HostAlias,
    Rule::SearchDomain,
    Rule::DnsOption,
    Rule::IpAddr,
    Rule::ObjectName,
    Rule::NetworkName,
    Rule::VolumeName,
    Rule::Key,
    Rule::Text,
];

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for rule in RULES {
        match validate::check("fuzzed field", s, rule) {
            Ok(()) => {
                assert!(
                    !s.chars().any(char::is_control),
                    "{rule:?} let {s:?} through"
                );
                if rule != Rule::Text {
                    assert!(
                        !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c == '#'),
                        "{rule:?} let {s:?} through"
                    );
                }
                if !matches!(rule, Rule::Text | Rule::Key) {
                    // resolv.conf takes ';' for a comment too.
                    assert!(!s.contains(';'), "{rule:?} let {s:?} through");
                }
                if matches!(
                    rule,
                    Rule::ObjectName | Rule::NetworkName | Rule::VolumeName
                ) {
                    // These name files and directories.
                    assert!(!s.contains('/') && s != "." && s != "..", "{s:?}");
                }
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with("invalid fuzzed field "), "{msg}");
                assert!(!msg.contains('\n') && !msg.contains('\r'), "{msg:?}");
            }
        }
    }
});
