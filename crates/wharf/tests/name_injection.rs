//! Names that end in a file another process reads (hosts, resolv.conf, hostname, the hosts
//! files of the other pods on a user network, records): a newline, carriage return, tab,
//! '#', space or NUL in each field, through each front end that takes it (the CLI, a
//! `wharf play` manifest, a CRI request), is refused with a message naming the field, and
//! the other containers' files stay as they were.

mod cri_support;
mod engine_support;

use cri_support::{Daemon, connect};
use engine_support::{Wharf, busybox};
use tonic::Code;
use wharf_cri::api::runtime_service_client::RuntimeServiceClient;
use wharf_cri::api::*;

/// The characters an injection needs, by name.
const HOSTILE: [(&str, &str); 6] = [
    ("newline", "\n"),
    ("carriage return", "\r"),
    ("tab", "\t"),
    ("hash", "#"),
    ("space", " "),
    ("NUL", "\0"),
];

/// A name carrying `c`, shaped as the spoofing line of the report.
fn hostile_name(c: &str) -> String {
    format!("ali{c}6.6.6.6 registry.example.com")
}

/// An address carrying `c`.
fn hostile_ip(c: &str) -> String {
    format!("10.0.0.9{c}6.6.6.6")
}

/// The name files a container sees.
fn name_files(w: &Wharf, container: &str) -> String {
    w.ok(&[
        "exec",
        container,
        "cat",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/etc/hostname",
    ])
}

/// A victim on user network `appnet`, and a neighbour with a valid alias that the victim's
/// hosts file lists (so that the channel the attacks use is shown to work).
fn victim(w: &Wharf) -> String {
    w.pull_busybox();
    w.ok(&["network", "create", "appnet"]);
    for (name, alias) in [("victim", "victim-alias"), ("friend", "good-alias")] {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "appnet",
            "--network-alias",
            alias,
            &busybox(),
            "sleep",
            "1000",
        ]);
    }
    let files = name_files(w, "victim");
    assert!(files.contains("good-alias"), "{files}");
    files
}

fn assert_untouched(w: &Wharf, before: &str) {
    let now = name_files(w, "victim");
    assert_eq!(now, before, "the victim's name files changed");
    assert!(!now.contains("6.6.6.6"), "{now}");
}

/// Refused with docker's exit code (125 for `run`, whose own code would be the
/// container's; 1 otherwise), in one line naming the field.
fn assert_refused(w: &Wharf, args: &[&str], field: &str) {
    let out = w.run(args);
    let code = if args[0] == "run" { 125 } else { 1 };
    assert_eq!(out.code, code, "{args:?} was not refused: {out:?}");
    let err = out.stderr.trim_end();
    assert!(
        err.contains(&format!("invalid {field}")),
        "{args:?}: the error does not name {field}: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
}

#[test]
fn the_cli_refuses_hostile_names_in_every_field_and_leaves_the_network_alone() {
    let w = Wharf::new("names-cli");
    let before = victim(&w);
    let bb = busybox();
    for (what, c) in HOSTILE {
        if c == "\0" {
            // execve(2) cannot pass a NUL in an argument: the CRI and play cover it.
            continue;
        }
        let name = hostile_name(c);
        let ip = hostile_ip(c);
        let add_host_name = format!("{name}:10.0.0.9");
        let label = format!("{name}=x");
        let cases: [(&str, &str, &str); 8] = [
            ("--network-alias", &name, "network alias"),
            ("--hostname", &name, "hostname"),
            ("--add-host", &add_host_name, "extra host name"),
            ("--dns-search", &name, "DNS search domain"),
            ("--dns-option", &name, "DNS option"),
            ("--dns", &ip, "DNS server"),
            ("--name", &name, "container name"),
            ("--label", &label, "label key"),
        ];
        for (flag, value, field) in cases {
            eprintln!("{what} through run {flag}");
            assert_refused(
                &w,
                &[
                    "run",
                    "-d",
                    "--network",
                    "appnet",
                    flag,
                    value,
                    &bb,
                    "sleep",
                    "1",
                ],
                field,
            );
        }
        // The address of --add-host is the CLI's to split, and refused as an address.
        let out = w.run(&[
            "run",
            "--rm",
            "--add-host",
            &format!("db:{ip}"),
            &bb,
            "true",
        ]);
        assert_eq!(out.code, 125, "{what}: {out:?}");
        assert!(out.stderr.contains("is not an IP address"), "{out:?}");
        assert_refused(&w, &["network", "create", &name], "network name");
        assert_refused(
            &w,
            &["network", "create", "--label", &label, "othernet"],
            "label key",
        );
        assert_refused(&w, &["volume", "create", &name], "volume name");
        assert_refused(
            &w,
            &["volume", "create", "--label", &label, "othervol"],
            "label key",
        );
        assert_refused(&w, &["pod", "create", "--name", &name], "pod name");
        assert_refused(&w, &["pod", "create", "--hostname", &name], "hostname");
        assert_refused(&w, &["rename", "friend", &name], "container name");
    }
    assert_untouched(&w, &before);
    // Nothing half-made: the two containers, their network, no volume, no other pod.
    assert_eq!(w.ok(&["ps", "-a", "-q"]).lines().count(), 2);
    assert_eq!(w.ok(&["pod", "ls", "-q"]).lines().count(), 2);
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "");
    let nets = w.ok(&["network", "ls", "--format", "{{.Name}}"]);
    assert!(!nets.contains("othernet"), "{nets}");
    w.ok(&["rm", "-f", "victim", "friend"]);
    w.ok(&["network", "rm", "appnet"]);
    w.assert_clean();
}

/// A pod manifest with `field` set to `value` (a JSON string, which is YAML too).
fn manifest(field: &str, value: &str) -> String {
    let v = serde_json::to_string(value).unwrap();
    let (name, labels, host_aliases, hostname, subdomain, dns, container, ns) = (
        if field == "metadata.name" {
            v.clone()
        } else {
            "\"web\"".into()
        },
        if field == "metadata.labels" {
            format!("{v}: \"x\"")
        } else {
            "app: web".into()
        },
        match field {
            "spec.hostAliases[0].hostnames[0]" => {
                format!("[{{ip: \"10.0.0.9\", hostnames: [{v}]}}]")
            }
            "spec.hostAliases[0].ip" => format!("[{{ip: {v}, hostnames: [db]}}]"),
            _ => "[]".into(),
        },
        if field == "spec.hostname" {
            v.clone()
        } else {
            "\"web\"".into()
        },
        if field == "spec.subdomain" {
            format!("subdomain: {v}")
        } else {
            String::new()
        },
        match field {
            "spec.dnsConfig.searches[0]" => format!("{{searches: [{v}]}}"),
            "spec.dnsConfig.options[0]" => format!("{{options: [{{name: {v}}}]}}"),
            "spec.dnsConfig.nameservers[0]" => format!("{{nameservers: [{v}]}}"),
            _ => "{}".into(),
        },
        if field == "spec.containers[0].name" {
            v.clone()
        } else {
            "\"app\"".into()
        },
        if field == "metadata.namespace" {
            v.clone()
        } else {
            "\"default\"".into()
        },
    );
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    {labels}\n\
         spec:\n  hostname: {hostname}\n  {subdomain}\n  hostAliases: {host_aliases}\n  dnsConfig: {dns}\n\
         \x20 containers:\n  - name: {container}\n    image: IMAGE\n    command: [sleep, \"1000\"]\n"
    )
    .replace("IMAGE", &busybox())
}

#[test]
fn play_refuses_hostile_names_in_every_manifest_field() {
    let w = Wharf::new("names-play");
    let before = victim(&w);
    // The manifest works with harmless values: the refusals below are the values'.
    let ok = w.path("ok.yaml");
    std::fs::write(&ok, manifest("none", "")).unwrap();
    w.ok(&["play", "--network", "none", ok.to_str().unwrap()]);
    w.ok(&["play", "--down", ok.to_str().unwrap()]);
    let fields = [
        "metadata.name",
        "metadata.namespace",
        "metadata.labels",
        "spec.hostname",
        "spec.subdomain",
        "spec.hostAliases[0].hostnames[0]",
        "spec.hostAliases[0].ip",
        "spec.dnsConfig.searches[0]",
        "spec.dnsConfig.options[0]",
        "spec.dnsConfig.nameservers[0]",
        "spec.containers[0].name",
    ];
    for (what, c) in HOSTILE {
        for field in fields {
            let value = if field.ends_with(".ip") || field.contains("nameservers") {
                hostile_ip(c)
            } else {
                hostile_name(c)
            };
            let path = w.path("hostile.yaml");
            std::fs::write(&path, manifest(field, &value)).unwrap();
            let out = w.run(&["play", "--network", "none", path.to_str().unwrap()]);
            assert_ne!(out.code, 0, "{what} in {field} was played: {out:?}");
            assert!(
                out.stderr.contains("invalid") || out.stderr.contains("is invalid"),
                "{what} in {field}: {out:?}"
            );
            assert_eq!(
                w.ok(&["pod", "ls", "-q"]).lines().count(),
                2,
                "{what} in {field}: a pod was left"
            );
        }
    }
    assert_untouched(&w, &before);
}

fn sandbox(d: &Daemon, name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: d.w.path(&format!("logs/{name}")).display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/kubepods/pod{name}", d.w.env.cgroup_parent),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_cri_refuses_hostile_names_in_every_request_field() {
    let d = Daemon::start("names-cri");
    let before = victim(&d.w);
    let mut rt = RuntimeServiceClient::new(connect(&d.socket).await);
    let list = ListPodSandboxRequest::default();
    let pods_before = rt
        .list_pod_sandbox(list.clone())
        .await
        .unwrap()
        .into_inner()
        .items;
    // A harmless sandbox is made and removed: the refusals below are the values'.
    let ok = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox(&d, "fine")),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: ok.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: ok })
        .await
        .unwrap();
    type Edit = fn(&mut PodSandboxConfig, String);
    let edits: [(&str, Edit); 8] = [
        ("hostname", |c, v| c.hostname = v),
        ("DNS search domain", |c, v| {
            c.dns_config = Some(DnsConfig {
                searches: vec![v],
                ..Default::default()
            })
        }),
        ("DNS option", |c, v| {
            c.dns_config = Some(DnsConfig {
                options: vec![v],
                ..Default::default()
            })
        }),
        ("DNS server", |c, v| {
            c.dns_config = Some(DnsConfig {
                servers: vec![v],
                ..Default::default()
            })
        }),
        ("label key", |c, v| {
            c.labels.insert(v, "x".into());
        }),
        ("annotation key", |c, v| {
            c.annotations.insert(v, "x".into());
        }),
        ("port mapping host address", |c, v| {
            c.port_mappings = vec![PortMapping {
                container_port: 80,
                host_port: 18080,
                host_ip: v,
                ..Default::default()
            }]
        }),
        ("pod name", |c, v| {
            c.metadata.as_mut().unwrap().name = v;
        }),
    ];
    for (what, c) in HOSTILE {
        for (field, edit) in edits {
            let mut config = sandbox(&d, "hostile");
            let value = if field.contains("address") || field.contains("server") {
                hostile_ip(c)
            } else {
                hostile_name(c)
            };
            edit(&mut config, value);
            let err = rt
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
                .expect_err(&format!("{what} in {field} was accepted"));
            assert_eq!(
                err.code(),
                Code::InvalidArgument,
                "{what} in {field}: {err:?}"
            );
            assert!(
                err.message().contains(&format!("invalid {field}")),
                "{what} in {field}: {}",
                err.message()
            );
        }
    }
    let pods = rt.list_pod_sandbox(list).await.unwrap().into_inner().items;
    assert_eq!(pods, pods_before, "a sandbox was left");
    assert_untouched(&d.w, &before);
}
