//! The Docker API's container create request (`wharf_docker::CreateRequest`, the body of
//! `POST /containers/create`): whatever JSON arrives, decoding and the conversion into the
//! engine's specs end in a spec or an error, never a panic; and a spec the engine's name
//! rules accept carries no control character into a name file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_docker::{CreateRequest, ImageFacts, Placement};

fuzz_target!(|data: &[u8]| {
    let Ok(req) = serde_json::from_slice::<CreateRequest>(data) else {
        return;
    };
    let facts = ImageFacts {
        exposed_ports: vec!["80/tcp".into(), "53/udp".into()],
    };
    let Ok(specs) = req.to_specs(Some("fuzzed"), &facts) else {
        return;
    };
    if wharf_engine::validate::container_spec(&specs.container).is_err() {
        return;
    }
    if let Placement::Own(pod) = &specs.placement
        && wharf_engine::validate::pod_spec(pod).is_ok()
    {
        let names = pod
            .network_aliases
            .iter()
            .chain(pod.hostname.iter())
            .chain(pod.dns.searches.iter())
            .chain(pod.dns.options.iter())
            .chain(pod.extra_hosts.iter().flat_map(|(_, n)| n.iter()));
        for n in names {
            assert!(
                !n.chars().any(|c| c.is_control() || c.is_whitespace() || c == '#'),
                "{n:?} passed"
            );
        }
    }
});
