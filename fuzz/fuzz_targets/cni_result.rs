//! What CNI plugins print and what their configuration files say: results of every spec
//! version turned into attachments, configuration lists and cached entries parsed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_net::cni;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = cni::result::to_attachment("fuzz", &v);
    }
    let _ = cni::NetworkList::parse(data, true, None);
    let _ = cni::NetworkList::parse(data, false, None);
    let _ = cni::NetworkList::from_cached(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = cni::cache::base64_decode(s);
    }
});
