//! `wharf net` end to end, inside namespaces under a temp dir (never the machine's own).

use std::process::Command;

fn wharf_net(env: &wharf_testbed::Env, args: &[&str]) -> (bool, String, String) {
    let run = env.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .arg("net")
        .arg("--run-dir")
        .arg(&run)
        .arg("--root")
        .arg(env.path().join("root"))
        .arg("--cni-conf-dir")
        .arg(env.path().join("no-cni"))
        .arg("--host-netns")
        .arg(run.join("netns/host"))
        .args(args)
        .output()
        .expect("run wharf net");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Pins<'a>(&'a wharf_testbed::Env);

impl Drop for Pins<'_> {
    fn drop(&mut self) {
        for n in ["pod", "host"] {
            let _ = wharf_net::netns::remove(&self.0.path().join("run"), n);
        }
    }
}

#[test]
fn namespaces_attach_detach_and_name_files_from_the_command_line() {
    let env = wharf_testbed::Env::new("net-cli");
    let _pins = Pins(&env);
    // The host namespace must exist before --host-netns can open it: create it with the
    // library (the CLI opens the host namespace only for attach/detach).
    wharf_net::netns::create(&env.path().join("run"), "host").unwrap();
    let (ok, pod, err) = wharf_net(&env, &["netns-create", "pod"]);
    assert!(ok, "{err}");
    let pod = pod.trim().to_string();
    assert!(pod.ends_with("run/netns/pod"), "{pod}");
    let (ok, out, _) = wharf_net(&env, &["netns-ls"]);
    assert!(ok && out.lines().count() == 2, "{out}");

    let (ok, out, err) = wharf_net(&env, &["attach", "-p", "8080:80", "pod-1", &pod]);
    assert!(ok, "{err}");
    let att: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        att["network"], "wharf",
        "no CNI configuration: the built-in network"
    );
    let ip = att["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.88."), "{ip}");

    let (ok, _, err) = wharf_net(&env, &["attach", "-p", "8080:81", "pod-2", &pod]);
    assert!(
        !ok && err.contains("8080") && err.contains("pod-1"),
        "{err}"
    );
    let (ok, _, err) = wharf_net(&env, &["attach", "-p", "80", "pod-3", &pod]);
    assert!(!ok && err.contains("HOSTPORT:PODPORT"), "{err}");

    let dir = env.path().join("etc");
    let addr = ip.split('/').next().unwrap();
    let (ok, _, err) = wharf_net(
        &env,
        &[
            "dns",
            "--dir",
            dir.to_str().unwrap(),
            "--hostname",
            "web",
            "--ip",
            addr,
        ],
    );
    assert!(ok, "{err}");
    assert!(
        std::fs::read_to_string(dir.join("hosts"))
            .unwrap()
            .contains(&format!("{addr}\tweb"))
    );

    for _ in 0..2 {
        let (ok, _, err) = wharf_net(&env, &["detach", "pod-1", &pod]);
        assert!(ok, "{err}");
    }
    let (ok, out, err) = wharf_net(&env, &["recover"]);
    assert!(
        ok && out.contains("orphan leases released: 0"),
        "{out}{err}"
    );
    let (ok, _, err) = wharf_net(&env, &["netns-rm", "pod"]);
    assert!(ok, "{err}");
}
