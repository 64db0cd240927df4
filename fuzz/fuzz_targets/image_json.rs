//! Image manifests, indexes and configs as a registry or an archive would serve them: parsed
//! with each media type, platforms selected from indexes, configs read for their diff ids.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_image::manifest::{self, Parsed, Platform};

const TYPES: [&str; 6] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/json",
    "",
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let media_type = TYPES[selector as usize % TYPES.len()];
    match manifest::parse(body, media_type) {
        Ok(Parsed::Index(idx)) => {
            for p in [
                "linux/amd64",
                "linux/arm64/v8",
                "linux/arm/v7",
                "windows/amd64",
            ] {
                let _ = manifest::select_platform(&idx, &Platform::parse(p).unwrap());
            }
        }
        Ok(Parsed::Manifest(m)) => {
            let _ = m.config.digest();
            for l in &m.layers {
                let _ = l.digest();
                let _ = manifest::layer_compression(&l.media_type);
            }
        }
        Err(_) => {}
    }
    if let Ok((_, diff_ids)) = wharf_image::store::parse_config(body) {
        let _ = wharf_image::store::image_chain(&diff_ids);
    }
    if let Ok(s) = std::str::from_utf8(body) {
        let _ = Platform::parse(s);
        let _ = wharf_image::reference::Reference::parse(s);
    }
});
