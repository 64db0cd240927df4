//! The writers of a pod's hosts and resolv.conf (`wharf_net::dns`): whatever entries they
//! accept, the file they write parses back to exactly those entries (no line injected,
//! none lost), and hosts lines of a user network's neighbours likewise.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use wharf_net::dns::{self, PodNames, ResolvConf};

#[derive(Arbitrary, Debug)]
struct Input {
    hostname: String,
    ips: Vec<IpAddr>,
    extra: Vec<(IpAddr, Vec<String>)>,
    servers: Vec<IpAddr>,
    searches: Vec<String>,
    options: Vec<String>,
}

fuzz_target!(|input: Input| {
    let mut names = PodNames::new(input.hostname.clone(), input.ips.clone());
    names.extra_hosts = input.extra.clone();
    // Every resolv.conf setting given, so the host's file is not read.
    names.dns.servers = Some(input.servers.clone());
    names.dns.searches = Some(input.searches.clone());
    names.dns.options = Some(input.options.clone());
    if let Ok(text) = dns::hosts(&names) {
        let mut want: Vec<(IpAddr, Vec<String>)> = dns::parse_hosts(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n",
        );
        want.extend(input.extra.iter().filter(|(_, n)| !n.is_empty()).cloned());
        want.extend(
            input
                .ips
                .iter()
                .map(|ip| (*ip, vec![input.hostname.clone()])),
        );
        assert_eq!(dns::parse_hosts(&text), want, "{text:?}");
    }
    if let Ok(text) = dns::resolv_conf(&names) {
        let got = ResolvConf::parse(&text);
        assert_eq!(
            got.nameservers,
            input
                .servers
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>(),
            "{text:?}"
        );
        assert_eq!(got.search, input.searches, "{text:?}");
        assert_eq!(got.options, input.options, "{text:?}");
    }
    for (ip, n) in &input.extra {
        if let Ok(line) = dns::hosts_line(*ip, n) {
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert_eq!(dns::parse_hosts(&line), vec![(*ip, n.clone())], "{line:?}");
        }
    }
});
