//! What crosses a shim's socket: request lines as the shim parses them, and the attach
//! stream's frames as clients read them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_shim::{frame, protocol};

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<protocol::Request>(data);
    let _ = serde_json::from_slice::<protocol::Response>(data);
    let mut rest = data;
    while let Ok(Some((_, range))) = frame::parse(rest) {
        assert!(range.end <= rest.len());
        if range.end == 0 {
            break;
        }
        rest = &rest[range.end..];
    }
    let mut reader = data;
    while let Ok(Some(_)) = frame::read(&mut reader) {}
});
