//! A container on several user networks (`wharf network connect`/`disconnect`, docker's
//! commands of the same name): the second network comes through eth1 without a default
//! route, its pods find the newcomer by name and alias, leaving it takes the interface and
//! the names away, and the first network cannot be left.

mod engine_support;

use engine_support::{Wharf, busybox};

/// The IPv4 addresses of `container`'s interfaces other than lo, as "ifname addr" lines.
fn addresses(w: &Wharf, container: &str) -> Vec<String> {
    let out = w.ok(&["exec", container, "ip", "-o", "-4", "addr"]);
    out.lines()
        .filter(|l| !l.contains(" lo "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!("{} {}", f[1], f[3])
        })
        .collect()
}

#[test]
fn a_container_joins_and_leaves_a_second_network() {
    let mut w = Wharf::new("net-connect");
    w.set_var("WHARF_DNS_UPSTREAM", "127.0.0.1:9");
    w.pull_busybox();
    let bb = busybox();
    w.ok(&["network", "create", "--subnet", "10.97.1.0/24", "front"]);
    w.ok(&["network", "create", "--subnet", "10.97.2.0/24", "back"]);
    let run = |name: &str, net: &str| {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--network",
            net,
            &bb,
            "sleep",
            "1000",
        ]);
    };
    run("web", "front");
    run("db", "back");
    assert_eq!(addresses(&w, "web").len(), 1);
    // web and db share no network: no name, no route.
    w.fails(1, &["exec", "db", "ping", "-c1", "-W1", "web"]);

    w.ok(&["network", "connect", "--alias", "frontend", "back", "web"]);
    let addrs = addresses(&w, "web");
    assert_eq!(addrs.len(), 2, "{addrs:?}");
    assert!(addrs[0].starts_with("eth0 10.97.1."), "{addrs:?}");
    assert!(addrs[1].starts_with("eth1 10.97.2."), "{addrs:?}");
    // One default route, through the first network.
    let routes = w.ok(&["exec", "web", "ip", "-4", "route"]);
    let defaults: Vec<&str> = routes
        .lines()
        .filter(|l| l.starts_with("default"))
        .collect();
    assert_eq!(defaults.len(), 1, "{routes}");
    assert!(defaults[0].contains("dev eth0"), "{routes}");
    // Both ways, by name and alias, through hosts files and the DNS responder.
    for name in ["web", "frontend"] {
        w.ok(&["exec", "db", "ping", "-c1", "-W2", name]);
        let out = w.ok(&["exec", "db", "nslookup", "-type=a", name]);
        assert!(out.contains("Address: 10.97.2."), "{name}: {out}");
    }
    w.ok(&["exec", "web", "ping", "-c1", "-W2", "db"]);
    let hosts = w.ok(&["exec", "web", "cat", "/etc/hosts"]);
    assert!(hosts.contains("# pods on networks front, back"), "{hosts}");
    let nets = &w.inspect("web")["NetworkSettings"]["Networks"];
    assert!(
        nets["front"]["IPAddress"]
            .as_str()
            .unwrap()
            .starts_with("10.97.1.")
    );
    assert!(
        nets["back"]["IPAddress"]
            .as_str()
            .unwrap()
            .starts_with("10.97.2.")
    );
    let aliases = nets["back"]["Aliases"].to_string();
    assert!(aliases.contains("frontend"), "{aliases}");

    // Twice is a conflict; the built-in networks and unknown ones cannot be joined.
    let again = w.run(&["network", "connect", "back", "web"]);
    assert!(
        again.code != 0 && again.stderr.contains("already exists"),
        "{again:?}"
    );
    for net in ["bridge", "host", "none", "nosuchnet"] {
        let out = w.run(&["network", "connect", net, "web"]);
        assert!(out.code != 0, "{net}: {out:?}");
        assert!(out.stderr.contains(net), "{net}: {out:?}");
    }

    // Kept across a restart of the container.
    w.ok(&["restart", "-t", "0", "web"]);
    assert_eq!(addresses(&w, "web").len(), 2);
    w.ok(&["exec", "db", "ping", "-c1", "-W2", "frontend"]);

    // The first network cannot be left; the second can, and takes its names along.
    let first = w.run(&["network", "disconnect", "front", "web"]);
    assert!(
        first.code != 0 && first.stderr.contains("front"),
        "{first:?}"
    );
    w.ok(&["network", "disconnect", "back", "web"]);
    let addrs = addresses(&w, "web");
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    let hosts = w.ok(&["exec", "db", "cat", "/etc/hosts"]);
    assert!(
        !hosts.contains("web") && !hosts.contains("frontend"),
        "{hosts}"
    );
    w.fails(1, &["exec", "db", "ping", "-c1", "-W1", "frontend"]);
    let out = w.run(&["network", "disconnect", "back", "web"]);
    assert!(out.code != 0, "{out:?}");

    // Removing a network in use by a second attachment is refused; rm leaves nothing.
    w.ok(&["network", "connect", "back", "web"]);
    let busy = w.run(&["network", "rm", "back"]);
    assert!(busy.code != 0, "{busy:?}");
    w.ok(&["rm", "-f", "web", "db"]);
    w.ok(&["network", "rm", "front", "back"]);
    w.assert_clean();
}
