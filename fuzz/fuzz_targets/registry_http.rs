//! What a registry or token server answers: WWW-Authenticate challenges, token answers,
//! docker config files with credentials, image references.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_image::auth;

fuzz_target!(|data: &[u8]| {
    let _ = auth::bearer_from_token_answer(data, "https://auth.example/token");
    let _ = auth::lookup_in(data, "registry.example:5000");
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(c) = auth::parse_challenge(s) {
        for p in ["realm", "service", "scope", "error"] {
            let _ = c.param(p);
        }
    }
    let _ = auth::Credentials::parse(s);
    let _ = auth::query_escape(s);
    let _ = wharf_image::reference::Reference::parse(s);
});
