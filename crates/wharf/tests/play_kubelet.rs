//! `wharf play` as a single-host kubelet: readiness and startup probes (exec, httpGet,
//! tcpSocket) run by the pod's shim and shown in the pod's status, postStart and preStop
//! hooks in kubelet's order, sidecars that start before and stop after the app, and a
//! failing init container shown as kubectl shows it, and taken down cleanly.

mod engine_support;

use std::time::Duration;

use engine_support::{Wharf, busybox, wait_until};
use serde_json::Value;

/// A manifest written to the test's directory, with `IMAGE` replaced by the fixture image.
fn manifest(w: &Wharf, name: &str, text: &str) -> String {
    let path = w.path(name);
    std::fs::write(&path, text.replace("IMAGE", &busybox())).unwrap();
    path.to_str().unwrap().to_string()
}

/// `play --status --format json`: the status of the manifest's first pod.
fn status(w: &Wharf, manifest: &str) -> Value {
    let v: Value =
        serde_json::from_str(&w.ok(&["play", "--status", "--format", "json", manifest])).unwrap();
    v[0]["status"].clone()
}

fn container<'a>(st: &'a Value, list: &str, name: &str) -> &'a Value {
    st[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {st:#}"))
}

fn condition(st: &Value, kind: &str) -> String {
    st["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == kind))
        .map(|c| c["status"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no condition {kind} in {st:#}"))
}

/// Timestamps (seconds since boot) of the lines `<event> <uptime>` a pod wrote to `file`.
fn events(file: &std::path::Path) -> Vec<(String, f64)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (e, t) = l.split_once(' ')?;
            Some((e.to_string(), t.trim().parse().ok()?))
        })
        .collect()
}

fn at(events: &[(String, f64)], name: &str) -> f64 {
    events
        .iter()
        .find(|(e, _)| e == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no {name} in {events:?}"))
}

/// Wait (up to `secs`) until the pod wrote `name` to `file`.
fn wait_for_event(file: &std::path::Path, name: &str, secs: u64) {
    assert!(
        wait_until(Duration::from_secs(secs), || events(file)
            .iter()
            .any(|(e, _)| e == name)),
        "no {name}: {:?}",
        events(file)
    );
}

/// Shell that defines T (the time since boot) for the pods' commands.
const T: &str = "T() { read t x < /proc/uptime; echo $t; };";

/// A startup probe holds the others back and the container is "not started" until it
/// passes; a readiness probe (httpGet, with a header) makes the pod Ready and unready
/// again; a tcpSocket liveness probe that passes leaves the container alone; a failing
/// postStart hook kills its container, which the restart policy brings back.
#[test]
fn readiness_and_startup_probes_show_in_the_pods_status() {
    let w = Wharf::new("kubelet-probes");
    w.pull_busybox();
    let m = manifest(
        &w,
        "probes.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "mkdir -p /www; sleep 2; touch /tmp/started; httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
    startupProbe:
      exec: {command: [test, -f, /tmp/started]}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      httpGet:
        path: /ready
        port: http
        httpHeaders: [{name: X-Probe, value: wharf}]
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
  - name: hook
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sleep, "1000"]
    lifecycle:
      postStart:
        exec: {command: [sh, -c, "echo hook broke; exit 3"]}
"#,
    );
    let out = w.run(&["play", "--network", "none", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stderr.contains("Probe"),
        "probes run, unwarned: {out:?}"
    );
    // Before the startup probe passes: running, not started, not ready.
    let st = status(&w, &m);
    let web = container(&st, "containerStatuses", "web");
    assert_eq!(web["started"], false, "{st:#}");
    assert_eq!(web["ready"], false, "{st:#}");
    assert_eq!(condition(&st, "Ready"), "False");
    // Started, then ready once /ready is served.
    assert!(
        wait_until(Duration::from_secs(15), || {
            container(&status(&w, &m), "containerStatuses", "web")["started"] == true
        }),
        "{:#}",
        status(&w, &m)
    );
    let st = status(&w, &m);
    let web = container(&st, "containerStatuses", "web");
    assert_eq!(web["ready"], false, "no /ready yet: {st:#}");
    assert!(
        web["probeFailure"].as_str().is_some_and(
            |f| f.contains("Readiness probe failed: HTTP probe failed with statuscode: 404")
        ),
        "{st:#}"
    );
    w.ok(&["exec", "probed-web", "touch", "/www/ready"]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            container(&status(&w, &m), "containerStatuses", "web")["ready"] == true
        }),
        "{:#}",
        status(&w, &m)
    );
    // Unready again when it stops answering 2xx; the liveness probe never killed it.
    w.ok(&["exec", "probed-web", "rm", "/www/ready"]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            container(&status(&w, &m), "containerStatuses", "web")["ready"] == false
        }),
        "{:#}",
        status(&w, &m)
    );
    let st = status(&w, &m);
    assert_eq!(
        container(&st, "containerStatuses", "web")["restartCount"],
        0
    );
    assert_eq!(st["phase"], "Running", "{st:#}");
    // The failed postStart hook killed its container, which waits to be restarted.
    let hook = container(&st, "containerStatuses", "hook");
    assert!(
        hook["probeFailure"].as_str().is_some_and(
            |f| f.contains("PostStartHook failed: command failed: exit code 3: hook broke")
        ),
        "{st:#}"
    );
    assert_eq!(
        hook["state"]["waiting"]["reason"], "CrashLoopBackOff",
        "{st:#}"
    );
    // kubectl's columns: READY counts ready containers, STATUS names the crash loop.
    let table = w.ok(&["play", "--status", &m]);
    let line = table.lines().nth(1).unwrap();
    assert!(
        line.starts_with("probed") && line.contains("0/2") && line.contains("CrashLoopBackOff"),
        "{table}"
    );
    assert!(
        table.contains("probed/hook: Waiting: CrashLoopBackOff"),
        "{table}"
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// postStart runs right after the start and the pod's next container waits for it;
/// preStop runs before the stop signal, inside the grace period.
#[test]
fn post_start_and_pre_stop_hooks_run_in_kubelets_order() {
    let w = Wharf::new("kubelet-hooks");
    w.pull_busybox();
    let log = w.path("log");
    std::fs::create_dir_all(&log).unwrap();
    let m = manifest(
        &w,
        "hooks.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: hooks
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: app
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "{T} echo app-start $(T) >> /log/events; trap 'echo app-term $(T) >> /log/events; exit 0' TERM; while true; do sleep 0.1; done"]
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, "{T} echo post-start $(T) >> /log/events; sleep 1; echo post-start-done $(T) >> /log/events"]}}
      preStop:
        exec: {{command: [sh, -c, "{T} echo pre-stop $(T) >> /log/events; sleep 1; echo pre-stop-done $(T) >> /log/events"]}}
    volumeMounts: [{{name: log, mountPath: /log}}]
  - name: next
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "{T} echo next-start $(T) >> /log/events; trap 'exit 0' TERM; while true; do sleep 0.1; done"]
    lifecycle:
      preStop:
        sleep: {{seconds: 1}}
    volumeMounts: [{{name: log, mountPath: /log}}]
  volumes:
  - name: log
    hostPath: {{path: {}}}
"#,
            log.display()
        ),
    );
    let file = log.join("events");
    w.ok(&["play", "--network", "none", &m]);
    wait_for_event(&file, "next-start", 15);
    let ev = events(&file);
    assert!(at(&ev, "app-start") <= at(&ev, "post-start"), "{ev:?}");
    // The next container started once the hook had returned.
    assert!(
        at(&ev, "post-start-done") <= at(&ev, "next-start"),
        "{ev:?}"
    );
    assert!(
        at(&ev, "post-start-done") - at(&ev, "post-start") >= 0.9,
        "{ev:?}"
    );
    let started = std::time::Instant::now();
    let out = w.run(&["play", "--down", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    let took = started.elapsed();
    let ev = events(&file);
    // preStop, then (once it returned) the stop signal, well inside the grace period.
    assert!(at(&ev, "pre-stop") < at(&ev, "pre-stop-done"), "{ev:?}");
    assert!(at(&ev, "pre-stop-done") <= at(&ev, "app-term"), "{ev:?}");
    assert!(at(&ev, "app-term") - at(&ev, "pre-stop") >= 0.9, "{ev:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "the hooks' second, not the grace period: {took:?}"
    );
    w.assert_clean();
}

/// A sidecar (an init container with restartPolicy: Always) starts before the app, once
/// its startup probe passes, stays running, and stops after the app; when the app of a
/// restartPolicy: Never pod completes, the sidecar is stopped and the pod is Completed.
#[test]
fn a_sidecar_starts_before_and_stops_after_the_app() {
    let w = Wharf::new("kubelet-sidecar");
    w.pull_busybox();
    let log = w.path("log");
    std::fs::create_dir_all(&log).unwrap();
    let text = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: NAME
spec:
  restartPolicy: POLICY
  terminationGracePeriodSeconds: 10
  initContainers:
  - name: setup
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "{T} echo setup $(T) >> /log/NAME"]
    volumeMounts: [{{name: log, mountPath: /log}}]
  - name: proxy
    image: IMAGE
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: [sh, -c, "{T} echo proxy-start $(T) >> /log/NAME; trap 'sleep 0.5; echo proxy-term $(T) >> /log/NAME; exit 0' TERM; sleep 1; touch /tmp/up; while true; do sleep 0.1; done"]
    startupProbe:
      exec: {{command: [test, -f, /tmp/up]}}
      periodSeconds: 1
    volumeMounts: [{{name: log, mountPath: /log}}]
  - name: logger
    image: IMAGE
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: [sh, -c, "{T} echo logger-start $(T) >> /log/NAME; trap 'sleep 0.3; echo logger-term $(T) >> /log/NAME; exit 0' TERM; while true; do sleep 0.1; done"]
    volumeMounts: [{{name: log, mountPath: /log}}]
  containers:
  - name: app
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "{T} echo app-start $(T) >> /log/NAME; trap 'echo app-term $(T) >> /log/NAME; exit 0' TERM; APP"]
    volumeMounts: [{{name: log, mountPath: /log}}]
  volumes:
  - name: log
    hostPath: {{path: {}}}
"#,
        log.display()
    );
    // A long-running app: the sidecar comes down after it.
    let m = manifest(
        &w,
        "serve.yaml",
        &text
            .replace("NAME", "serve")
            .replace("POLICY", "Always")
            .replace("APP", "while true; do sleep 0.1; done"),
    );
    let file = log.join("serve");
    w.ok(&["play", "--network", "none", &m]);
    wait_for_event(&file, "app-start", 15);
    let ev = events(&file);
    assert!(at(&ev, "setup") <= at(&ev, "proxy-start"), "{ev:?}");
    // After the sidecar's startup probe passed (it touches /tmp/up after 1 s).
    assert!(
        at(&ev, "app-start") - at(&ev, "proxy-start") >= 0.9,
        "{ev:?}"
    );
    // The app wrote its line as it started; its shim records it as running a moment
    // later.
    let mut st = status(&w, &m);
    assert!(
        wait_until(Duration::from_secs(5), || {
            st = status(&w, &m);
            container(&st, "containerStatuses", "app")["state"]["running"].is_object()
        }),
        "{st:#}"
    );
    assert_eq!(st["phase"], "Running", "{st:#}");
    assert_eq!(condition(&st, "Initialized"), "True", "{st:#}");
    let proxy = container(&st, "initContainerStatuses", "proxy");
    assert!(proxy["state"]["running"].is_object(), "{st:#}");
    let table = w.ok(&["play", "--status", &m]);
    assert!(table.lines().nth(1).unwrap().contains("3/3"), "{table}");
    w.ok(&["play", "--down", &m]);
    let ev = events(&file);
    // The sidecars got their stop signals only after the app had exited, in the reverse
    // of their start order (their handlers take a while, so simultaneous signals would
    // have shown: the proxy's takes longer than the logger's).
    assert!(at(&ev, "proxy-start") <= at(&ev, "logger-start"), "{ev:?}");
    assert!(at(&ev, "logger-start") <= at(&ev, "app-start"), "{ev:?}");
    assert!(at(&ev, "app-term") <= at(&ev, "logger-term"), "{ev:?}");
    assert!(at(&ev, "logger-term") <= at(&ev, "proxy-term"), "{ev:?}");

    // An app that completes: the sidecar is stopped, the pod Succeeded.
    let m = manifest(
        &w,
        "job.yaml",
        &text
            .replace("NAME", "job")
            .replace("POLICY", "Never")
            .replace("APP", "echo app-done $(T) >> /log/job"),
    );
    let file = log.join("job");
    w.ok(&["play", "--network", "none", &m]);
    assert!(
        wait_until(Duration::from_secs(20), || status(&w, &m)["phase"]
            == "Succeeded"),
        "{:#}",
        status(&w, &m)
    );
    // The sidecar's TERM handler takes half a second.
    wait_for_event(&file, "proxy-term", 10);
    let ev = events(&file);
    assert!(at(&ev, "app-done") <= at(&ev, "proxy-term"), "{ev:?}");
    let table = w.ok(&["play", "--status", &m]);
    assert!(
        table.lines().nth(1).unwrap().contains("Completed"),
        "{table}"
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// An init container that fails: Init:Error under restartPolicy Never,
/// Init:CrashLoopBackOff under Always; the app containers are never started (ps shows
/// them Created, not Up); pod stop, play --down and pod rm all work on such pods.
#[test]
fn a_failing_init_container_is_shown_as_kubectl_would_and_comes_down() {
    let w = Wharf::new("kubelet-initfail");
    w.pull_busybox();
    let pod = |name: &str, policy: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: setup\n    image: IMAGE\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"echo no config; exit 3\"]\n  containers:\n  - name: app\n    image: IMAGE\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"1000\"]\n"
        )
    };
    let m = manifest(
        &w,
        "init.yaml",
        &format!("{}---\n{}", pod("never", "Never"), pod("always", "Always")),
    );
    w.ok(&["play", "--network", "none", &m]);
    let never = w.path("never.yaml");
    std::fs::write(&never, pod("never", "Never").replace("IMAGE", &busybox())).unwrap();
    let never = never.to_str().unwrap();
    // One snapshot for every row: a second `play --status` could land after the
    // back-off, while the init container is being started again.
    let mut table = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            table = w.ok(&["play", "--status", &m]);
            table.contains("Init:CrashLoopBackOff")
        }),
        "{table}"
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {table}"))
            .to_string()
    };
    assert!(row("never").contains("Init:Error"), "{table}");
    assert!(row("never").contains("0/1"), "{table}");
    assert!(row("always").contains("Init:CrashLoopBackOff"), "{table}");
    let st = status(&w, never);
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(condition(&st, "Initialized"), "False");
    assert_eq!(
        container(&st, "containerStatuses", "app")["state"]["waiting"]["reason"],
        "PodInitializing",
        "{st:#}"
    );
    assert_eq!(
        container(&st, "initContainerStatuses", "setup")["state"]["terminated"]["exitCode"],
        3,
        "{st:#}"
    );
    // Never Up: not in ps, Created in ps -a.
    let ps = w.ok(&["ps"]);
    assert!(
        !ps.contains("never-app") && !ps.contains("always-app"),
        "{ps}"
    );
    let all = w.ok(&["ps", "-a", "--format", "{{.Names}} {{.State}}"]);
    assert!(all.contains("never-app created"), "{all}");
    assert!(all.contains("always-app created"), "{all}");
    // pod ls shows what play --status does.
    let pods = w.ok(&["pod", "ls", "--format", "{{.Name}} {{.Status}} {{.Ready}}"]);
    assert!(pods.contains("never Init:Error 0/1"), "{pods}");
    // Each way down works.
    w.ok(&["pod", "stop", "always"]);
    w.ok(&["pod", "rm", "always"]);
    w.ok(&["play", "--down", never]);
    let out = w.run(&["play", "--down", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("pod never does not exist"), "{out:?}");
    w.assert_clean();
}

/// The names of the pods `play --status` lists.
fn pod_names(w: &Wharf, manifest: &str) -> Vec<String> {
    let v: Value =
        serde_json::from_str(&w.ok(&["play", "--status", "--format", "json", manifest])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// A Deployment runs its replicas (named `<name>-<template hash>-<suffix>`, labelled
/// with the hash); a pod that is removed, or whose shim is killed, is replaced by its
/// controller with no CLI running; `--down` stops the controller and removes every pod.
#[test]
fn a_deployment_whose_pod_is_killed_comes_back() {
    let w = Wharf::new("kubelet-deploy");
    w.pull_busybox();
    let m = manifest(
        &w,
        "deploy.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      nodeSelector: {disk: ssd}
      containers:
      - name: web
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
"#,
    );
    let out = w.run(&["play", "--network", "none", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    // Each warning once: the template's, and the manifest's (the Service).
    assert_eq!(out.stderr.matches("nodeSelector").count(), 1, "{out:?}");
    assert_eq!(out.stderr.matches("(Service web)").count(), 1, "{out:?}");
    let first = pod_names(&w, &m);
    assert_eq!(first.len(), 2, "{first:?}");
    for n in &first {
        assert!(
            n.starts_with("web-") && n.len() == "web-".len() + 10 + 1 + 5,
            "{n}"
        );
    }
    let pod = w.ok(&["pod", "inspect", &first[0]]);
    assert!(pod.contains("pod-template-hash"), "{pod}");
    // Removed by hand: replaced.
    w.ok(&["pod", "rm", "-f", &first[0]]);
    // Its shim killed (the pod dies with it): replaced.
    let id = w.ok(&["pod", "inspect", "--format", "{{.Id}}", &first[1]]);
    let shim = w.shim_pid(id.trim());
    // SAFETY: a signal to the test's own pod's shim.
    unsafe { libc::kill(shim, libc::SIGKILL) };
    assert!(
        wait_until(Duration::from_secs(20), || {
            let now = pod_names(&w, &m);
            now.len() == 2 && now.iter().all(|n| !first.contains(n))
        }),
        "not replaced: {:?} (was {first:?})\n{}",
        pod_names(&w, &m),
        w.ok(&["play", "--status", &m])
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            w.ok(&["play", "--status", &m])
                .lines()
                .filter(|l| l.starts_with("web-") && l.contains("1/1") && l.contains("Running"))
                .count()
                == 2
        }),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    // Its controller runs in a cgroup of its own below the engine's parent. Killed, as a
    // reboot kills it, `system restore` starts it again, and it keeps the replicas again.
    let record = w.root().join("kube/workloads/default.deployment.web");
    let controller = || -> i32 {
        std::fs::read_to_string(record.join("controller.pid"))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let pid = controller();
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(
        cgroups.contains("/kube-controller.default.deployment.web\n"),
        "{cgroups}"
    );
    // SAFETY: a signal to the test's own workload controller.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(5), || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    }));
    let table = w.ok(&["play", "--status", &m]);
    assert!(
        table.contains(
            "Deployment/web: 2 pods, 2 wanted (its controller is not running: wharf system restore starts it)"
        ),
        "{table}"
    );
    assert_eq!(w.ok(&["system", "restore"]).trim(), "Deployment web");
    assert!(
        !w.ok(&["play", "--status", &m]).contains("not running"),
        "restored"
    );
    assert_ne!(controller(), pid);
    assert_eq!(
        w.ok(&["system", "restore"]),
        "",
        "it runs: not started twice"
    );
    let before = pod_names(&w, &m);
    w.ok(&["pod", "rm", "-f", &before[0]]);
    assert!(
        wait_until(Duration::from_secs(20), || {
            let now = pod_names(&w, &m);
            now.len() == 2 && !now.contains(&before[0])
        }),
        "not replaced by the restored controller: {:?}",
        pod_names(&w, &m)
    );
    w.ok(&["play", "--down", &m]);
    // Nothing comes back: the controller is gone with them.
    std::thread::sleep(Duration::from_millis(1500));
    w.assert_clean();
}

/// `play --replace` (podman's flag) takes down what an earlier play of the manifest made
/// and plays its new text; without it a second play is refused and changes nothing; a
/// broken edit is refused before anything is taken down.
#[test]
fn play_replace_takes_down_what_an_earlier_play_made() {
    let w = Wharf::new("kubelet-replace");
    w.pull_busybox();
    let text = |greeting: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: solo}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sleep, "1000"]
    env: [{{name: GREETING, value: {greeting}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command: [sleep, "1000"]
        env: [{{name: GREETING, value: {greeting}}}]
"#
        )
        .replace("IMAGE", &busybox())
    };
    let m = manifest(&w, "replace.yaml", &text("one"));
    w.ok(&["play", "--network", "none", &m]);
    let first = pod_names(&w, &m);
    assert_eq!(first.len(), 2, "{first:?}");
    let out = w.run(&["play", "--network", "none", &m]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("pod solo already exists") && out.stderr.contains("--replace"),
        "{out:?}"
    );
    assert_eq!(pod_names(&w, &m), first, "a refused play changed nothing");
    std::fs::write(&m, text("two")).unwrap();
    let out = w.run(&["play", "--replace", "--network", "none", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    let greeting = |pod: &str, container: &str| {
        w.ok(&[
            "exec",
            &format!("{pod}-{container}"),
            "sh",
            "-c",
            "echo $GREETING",
        ])
        .trim()
        .to_string()
    };
    assert_eq!(greeting("solo", "app"), "two");
    let now = pod_names(&w, &m);
    let web = now.iter().find(|n| n.starts_with("web-")).unwrap();
    assert!(!first.contains(web), "a new template, a new pod: {now:?}");
    assert_eq!(greeting(web, "web"), "two");
    // A broken edit: refused by name, and what runs is kept.
    std::fs::write(&m, text("three").replace("apps/v1", "apps/v2")).unwrap();
    let out = w.run(&["play", "--replace", "--network", "none", &m]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("apps/v2"), "{out:?}");
    std::fs::write(&m, text("two")).unwrap();
    assert_eq!(pod_names(&w, &m), now);
    assert_eq!(greeting("solo", "app"), "two");
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// A Job whose pod fails twice and then succeeds completes within its backoffLimit (its
/// failed pods kept, as Kubernetes keeps them); one that keeps failing stops at its
/// backoffLimit (BackoffLimitExceeded).
#[test]
fn a_job_that_fails_twice_then_succeeds_within_its_backoff_limit() {
    let mut w = Wharf::new("kubelet-job");
    // The controller's back-off between failed pods, shortened as for the shim.
    w.set_var("WHARF_RESTART_BACKOFF_MS", "200");
    w.pull_busybox();
    let state = w.path("state");
    std::fs::create_dir_all(&state).unwrap();
    let job = |name: &str, limit: u32, succeed_at: u32| {
        format!(
            r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  backoffLimit: {limit}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: try
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "n=$(cat /state/{name} 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/{name}; echo attempt $n; [ $n -ge {succeed_at} ]"]
        volumeMounts: [{{name: state, mountPath: /state}}]
      volumes:
      - name: state
        hostPath: {{path: {}}}
"#,
            state.display()
        )
    };
    let m = manifest(&w, "job.yaml", &job("flaky", 3, 3));
    w.ok(&["play", "--network", "none", &m]);
    assert!(
        wait_until(Duration::from_secs(30), || w
            .ok(&["play", "--status", &m])
            .contains("Job/flaky: Complete")),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    let table = w.ok(&["play", "--status", &m]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .filter(|l| l.starts_with("flaky-"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert_eq!(
        rows.iter().filter(|r| r[2] == "Error").count(),
        2,
        "{table}"
    );
    assert_eq!(
        rows.iter().filter(|r| r[2] == "Completed").count(),
        1,
        "{table}"
    );
    assert_eq!(
        std::fs::read_to_string(state.join("flaky")).unwrap().trim(),
        "3"
    );
    w.ok(&["play", "--down", &m]);

    let m = manifest(&w, "doomed.yaml", &job("doomed", 1, 99));
    w.ok(&["play", "--network", "none", &m]);
    assert!(
        wait_until(Duration::from_secs(30), || w
            .ok(&["play", "--status", &m])
            .contains("Job/doomed: Failed: BackoffLimitExceeded")),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    // backoffLimit 1: the first pod and one more, no third.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        std::fs::read_to_string(state.join("doomed"))
            .unwrap()
            .trim(),
        "2"
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// A StatefulSet's pods are `<name>-0`, `<name>-1` (hostnames too), made in order, each
/// once the one before is ready; a DaemonSet runs one pod on this host.
#[test]
fn statefulset_pods_are_ordered_and_a_daemonset_runs_one_pod() {
    let w = Wharf::new("kubelet-sts");
    w.pull_busybox();
    let m = manifest(
        &w,
        "sts.yaml",
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 2
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: db
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "hostname > /tmp/host; sleep 1; touch /tmp/ready; trap 'exit 0' TERM; while true; do sleep 0.1; done"]
        readinessProbe:
          exec: {command: [test, -f, /tmp/ready]}
          periodSeconds: 1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: agent
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
"#,
    );
    let out = w.ok(&["play", "--network", "none", &m]);
    // Only db-0 at first: db-1 waits for it to be ready.
    assert!(
        out.contains("pod db-0 created") && !out.contains("db-1"),
        "{out}"
    );
    assert!(
        wait_until(Duration::from_secs(20), || pod_names(&w, &m)
            .contains(&"db-1".to_string())),
        "{:?}",
        pod_names(&w, &m)
    );
    let st0 = w.ok(&["pod", "inspect", "--format", "{{.Created}}", "db-0"]);
    let st1 = w.ok(&["pod", "inspect", "--format", "{{.Created}}", "db-1"]);
    assert!(st0 < st1, "{st0} {st1}");
    assert!(
        wait_until(Duration::from_secs(10), || w
            .run(&["exec", "db-1-db", "cat", "/tmp/host"])
            .stdout
            .trim()
            == "db-1"),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    let names = pod_names(&w, &m);
    assert_eq!(
        names.iter().filter(|n| n.starts_with("agent-")).count(),
        1,
        "{names:?}"
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// A persistentVolumeClaim is the engine's named volume of the claim's name: made on
/// first use, kept by `play --down` (and seen again by the next play), removed by
/// `play --down --force`.
#[test]
fn a_claim_outlives_its_pod_until_down_force() {
    let w = Wharf::new("kubelet-claim");
    w.pull_busybox();
    let m = manifest(
        &w,
        "claim.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: keeper
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "cat /data/count 2>/dev/null || echo none; echo kept > /data/count"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: keeper-data}
"#,
    );
    w.ok(&["play", "--network", "none", &m]);
    assert_eq!(w.wait_for_log("keeper-c", "\n"), "none\n");
    assert!(w.ok(&["volume", "ls", "-q"]).contains("keeper-data"));
    let out = w.run(&["play", "--down", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(
            "volume keeper-data (persistentVolumeClaim) is kept: play --down --force removes it"
        ),
        "{out:?}"
    );
    w.ok(&["play", "--network", "none", &m]);
    assert_eq!(w.wait_for_log("keeper-c", "\n"), "kept\n");
    w.ok(&["play", "--down", "--force", &m]);
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "");
    w.assert_clean();
}

/// A claim's subPath: each mount sees its path inside the one volume (a file, a
/// directory, one made when missing); a symlink a container planted in the volume cannot
/// lead a subPath out of it (CVE-2017-1002101); a subPath is resolved when its container
/// starts, after the init containers (an emptyDir's file an init container wrote); the
/// files stay in the volume under their paths, and removing the pod unmounts every
/// staged subPath.
#[test]
fn a_claims_sub_paths_stay_inside_its_volume() {
    let w = Wharf::new("kubelet-claimsub");
    w.pull_busybox();
    let m = manifest(
        &w,
        "claimsub.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: sub
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: plant
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "mkdir -p /data/app/logs && echo hi > /data/app/conf && ln -s / /data/escape && ln -s /etc /data/app/etc && echo from-init > /work/init.conf"]
    volumeMounts: [{name: data, mountPath: /data}, {name: work, mountPath: /work}]
  containers:
  - name: app
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo written > /logs/out; sleep 1000"]
    volumeMounts:
    - {name: data, mountPath: /logs, subPath: app/logs}
    - {name: data, mountPath: /etc/app.conf, subPath: app/conf, readOnly: true}
    - {name: data, mountPath: /escape, subPath: escape}
    - {name: data, mountPath: /etc-link, subPath: app/etc}
    - {name: data, mountPath: /made, subPath: new/dir}
    - {name: work, mountPath: /etc/init.conf, subPath: init.conf}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: sub-data}
  - {name: work, emptyDir: {}}
"#,
    );
    w.ok(&["play", "--network", "none", &m]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            w.run(&["exec", "sub-app", "cat", "/logs/out"]).stdout == "written\n"
        }),
        "{}{}",
        w.ok(&["play", "--status", &m]),
        w.run(&["logs", "sub-plant"]).stdout
    );
    let sh = |cmd: &str| w.ok(&["exec", "sub-app", "sh", "-c", cmd]);
    assert_eq!(sh("cat /etc/app.conf"), "hi\n");
    // Resolved when the app container starts, as the kubelet does: what the init
    // container wrote, not a directory made for the mount before it ran.
    assert_eq!(sh("cat /etc/init.conf"), "from-init\n");
    assert_ne!(
        sh("echo x > /etc/app.conf 2>&1; echo $?"),
        "0\n",
        "readOnly"
    );
    // Both symlinks resolve inside the volume: "/" to its root, "/etc" to its etc, made
    // there (empty, not the host's /etc).
    assert_eq!(sh("ls /escape | tr '\n' ' '"), "app escape etc new ");
    assert_eq!(sh("ls -A /etc-link | wc -l"), "0\n", "not the host's /etc");
    assert_eq!(sh("test -d /made && echo dir"), "dir\n");
    let generated = w.ok(&["kube", "generate", "sub"]);
    assert!(generated.contains("subPath: app/logs"), "{generated}");
    let mountpoint = w.ok(&[
        "volume",
        "inspect",
        "--format",
        "{{.Mountpoint}}",
        "sub-data",
    ]);
    let data = std::path::Path::new(mountpoint.trim());
    assert_eq!(
        std::fs::read_to_string(data.join("app/logs/out")).unwrap(),
        "written\n"
    );
    assert!(data.join("new/dir").is_dir());
    w.ok(&["play", "--down", &m]);
    assert!(data.join("app/logs/out").exists(), "the claim is kept");
    w.ok(&["volume", "rm", "sub-data"]);
    w.assert_clean();
}

/// An image volume (Kubernetes' `image` source): the image's files, read-only, whole or
/// a subPath inside; its image pulled under its own pull policy, and a missing one with
/// `Never` refused by name, leaving nothing behind.
#[test]
fn an_image_volume_mounts_an_images_files_read_only() {
    let w = Wharf::new("kubelet-imagevol");
    w.pull_busybox();
    let text = |reference: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: iv}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sleep, "1000"]
    volumeMounts:
    - {{name: tools, mountPath: /tools}}
    - {{name: tools, mountPath: /tools-bin, subPath: bin}}
  volumes:
  - name: tools
    image: {{reference: "{reference}", pullPolicy: Never}}
"#
        )
    };
    let m = manifest(&w, "iv.yaml", &text("127.0.0.1:1/absent/tools:1"));
    let out = w.run(&["play", "--network", "none", &m]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("127.0.0.1:1/absent/tools:1"),
        "names the image: {out:?}"
    );
    w.assert_clean();
    let m = manifest(&w, "iv.yaml", &text(&busybox()));
    w.ok(&["play", "--network", "none", &m]);
    let sh = |cmd: &str| w.run(&["exec", "iv-c", "sh", "-c", cmd]);
    assert!(
        wait_until(Duration::from_secs(10), || sh("true").code == 0),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    assert_eq!(sh("test -x /tools/bin/busybox && echo yes").stdout, "yes\n");
    assert_eq!(sh("test -x /tools-bin/busybox && echo yes").stdout, "yes\n");
    let write = sh("touch /tools/x /tools-bin/x");
    assert_ne!(write.code, 0, "read-only: {write:?}");
    assert!(write.stderr.contains("Read-only file system"), "{write:?}");
    let generated = w.ok(&["kube", "generate", "iv"]);
    assert!(
        generated.contains("image:\n      reference:") && generated.contains("subPath: bin"),
        "{generated}"
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// `kube generate` writes the Pod manifest of a running container's pod; `play` of it
/// makes the same container again (command, env, limits, capabilities, volumes).
#[test]
fn kube_generate_writes_a_manifest_that_plays_back() {
    let w = Wharf::new("kubelet-generate");
    w.pull_busybox();
    let host_dir = w.path("shared");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("hello"), "from the host\n").unwrap();
    let bind = format!("{}:/host:ro", host_dir.display());
    w.ok(&[
        "run",
        "-d",
        "--name",
        "gen",
        "--network",
        "none",
        "-e",
        "GREETING=hi",
        "-v",
        "gen-data:/data",
        "-v",
        &bind,
        "--memory",
        "64m",
        "--cpus",
        "0.5",
        "--cap-drop",
        "NET_RAW",
        "--stop-timeout",
        "1",
        &busybox(),
        "sh",
        "-c",
        "echo $GREETING; cat /host/hello; echo saved > /data/f; sleep 1000",
    ]);
    w.wait_for_log("gen", "from the host");
    let yaml = w.path("gen.yaml");
    w.ok(&["kube", "generate", "-f", yaml.to_str().unwrap(), "gen"]);
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(text.contains("play it with --network none"), "{text}");
    assert!(text.contains("claimName: gen-data"), "{text}");
    assert!(!text.contains("io.wharf."), "engine labels left in: {text}");
    assert!(text.contains("terminationGracePeriodSeconds: 1"), "{text}");
    w.ok(&["rm", "-f", "gen"]);
    w.ok(&["play", "--network", "none", yaml.to_str().unwrap()]);
    assert_eq!(
        w.wait_for_log("gen-gen", "from the host"),
        "hi\nfrom the host\n"
    );
    let c = w.inspect("gen-gen");
    assert_eq!(c["HostConfig"]["Memory"], 64 << 20, "{c:#}");
    assert_eq!(c["HostConfig"]["NanoCpus"], 500_000_000, "{c:#}");
    assert!(
        c["HostConfig"]["CapDrop"].to_string().contains("NET_RAW"),
        "{c:#}"
    );
    assert!(
        c["Config"]["Env"].to_string().contains("GREETING=hi"),
        "{c:#}"
    );
    // The named volume came back as the claim: the same data.
    assert_eq!(w.ok(&["exec", "gen-gen", "cat", "/data/f"]), "saved\n");
    w.ok(&["play", "--down", "--force", yaml.to_str().unwrap()]);
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "");
    w.assert_clean();
}

/// ConfigMaps and Secrets kept by Wharf (`configmap|secret create`, kubectl's flags) are
/// found by `play` when the manifest does not define them; a Secret's values are not
/// shown by `inspect`; a manifest's own definition wins.
#[test]
fn stored_configmaps_and_secrets_serve_plays() {
    let w = Wharf::new("kubelet-store");
    w.pull_busybox();
    let file = w.path("motd");
    std::fs::write(&file, "welcome\n").unwrap();
    let from_file = format!("banner={}", file.display());
    w.ok(&[
        "configmap",
        "create",
        "cfg",
        "--from-literal",
        "greeting=hello",
        "--from-file",
        &from_file,
    ]);
    w.ok(&["secret", "create", "sec", "--from-literal", "token=s3cret"]);
    let err = w.fails(1, &["secret", "create", "sec", "--from-literal", "token=x"]);
    assert!(err.contains("Secret sec already exists"), "{err}");
    let ls = w.ok(&["secret", "ls"]);
    assert!(
        ls.contains("default") && ls.contains("sec") && ls.contains(" 1 "),
        "{ls}"
    );
    let shown = w.ok(&["secret", "inspect", "sec"]);
    assert!(
        shown.contains("6 bytes") && !shown.contains("s3cret"),
        "{shown}"
    );
    assert!(w.ok(&["configmap", "inspect", "cfg"]).contains("welcome"));
    let m = manifest(
        &w,
        "uses.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: uses
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo $GREETING; cat /cfg/banner /s/token; echo"]
    env:
    - name: GREETING
      valueFrom:
        configMapKeyRef: {name: cfg, key: greeting}
    volumeMounts:
    - {name: c, mountPath: /cfg}
    - {name: s, mountPath: /s}
  volumes:
  - name: c
    configMap: {name: cfg}
  - name: s
    secret: {secretName: sec}
"#,
    );
    w.ok(&["play", "--network", "none", &m]);
    assert_eq!(
        w.wait_for_log("uses-c", "s3cret"),
        "hello\nwelcome\ns3cret\n"
    );
    w.ok(&["play", "--down", &m]);
    // The manifest's own ConfigMap wins over the stored one.
    let own = std::fs::read_to_string(&m).unwrap()
        + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {greeting: hi, banner: own}\n";
    std::fs::write(&m, own).unwrap();
    w.ok(&["play", "--network", "none", &m]);
    assert_eq!(w.wait_for_log("uses-c", "s3cret"), "hi\nowns3cret\n");
    w.ok(&["play", "--down", &m]);
    w.ok(&["secret", "rm", "sec"]);
    w.ok(&["configmap", "rm", "cfg"]);
    assert_eq!(w.ok(&["secret", "ls", "-q"]), "");
    let err = w.fails(1, &["play", "--network", "none", &m]);
    assert!(
        err.contains("Secret \"sec\" is not in the manifest"),
        "{err}"
    );
    w.assert_clean();
}

/// A disk emptyDir that grows past its sizeLimit gets its pod evicted, as kubelet's
/// eviction manager does: its containers killed, none restarted, the pod Failed with
/// kubelet's message; a medium: Memory one is a tmpfs of that size.
#[test]
fn an_empty_dir_over_its_size_limit_evicts_the_pod() {
    let mut w = Wharf::new("kubelet-evict");
    w.set_var("WHARF_EVICTION_INTERVAL_MS", "300");
    w.pull_busybox();
    let m = manifest(
        &w,
        "evict.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "df -k /mem | tail -1; sleep 1; dd if=/dev/zero of=/cache/big bs=1024 count=2048; sleep 1000"]
    volumeMounts:
    - {name: cache, mountPath: /cache}
    - {name: mem, mountPath: /mem}
  volumes:
  - name: cache
    emptyDir: {sizeLimit: 1Mi}
  - name: mem
    emptyDir: {medium: Memory, sizeLimit: 4Mi}
"#,
    );
    let out = w.run(&["play", "--network", "none", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stderr.contains("sizeLimit"),
        "enforced, not warned: {out:?}"
    );
    assert!(
        wait_until(Duration::from_secs(15), || status(&w, &m)["phase"]
            == "Failed"),
        "{:#}",
        status(&w, &m)
    );
    let st = status(&w, &m);
    assert!(
        st["message"].as_str().is_some_and(|m| m.starts_with(
            "Evicted: Usage of EmptyDir volume \"cache\" exceeds the limit \"1048576\""
        )),
        "{st:#}"
    );
    let table = w.ok(&["play", "--status", &m]);
    assert!(table.lines().nth(1).unwrap().contains("Evicted"), "{table}");
    // Killed, and not restarted under restartPolicy Always.
    std::thread::sleep(Duration::from_millis(1500));
    let c = container(&status(&w, &m), "containerStatuses", "c").clone();
    assert!(c["state"]["terminated"].is_object(), "{c:#}");
    assert_eq!(c["restartCount"], 0, "{c:#}");
    // The memory one: a 4 MiB tmpfs (df's size column, in KiB).
    let log = w.ok(&["logs", "hog-c"]);
    assert!(log.contains(" 4096 "), "{log}");
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// A NodePort Service's node port is published on this host, to the pod its selector
/// picks (its named targetPort resolved), reachable from the (test's) host; a ClusterIP
/// Service is said to be skipped.
#[test]
fn a_node_port_service_is_published_on_the_host() {
    let w = Wharf::new("kubelet-nodeport");
    w.pull_busybox();
    let m = manifest(
        &w,
        "svc.yaml",
        r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - port: 80
    targetPort: http
    nodePort: 30080
---
apiVersion: v1
kind: Service
metadata:
  name: internal
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "mkdir /w && echo hello-service > /w/index.html && exec httpd -f -p 8080 -h /w"]
    ports: [{name: http, containerPort: 8080}]
"#,
    );
    let out = w.run(&["play", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("node port 30080/tcp is published on this host, to pod web port 8080"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .contains("(Service internal): a ClusterIP Service without a node port is ignored"),
        "{out:?}"
    );
    assert_eq!(w.ok(&["port", "web-httpd"]), "8080/tcp -> 0.0.0.0:30080\n");
    let resp = w.http_get("127.0.0.1:30080");
    assert!(
        resp.contains(" 200 ") && resp.contains("hello-service"),
        "{resp}"
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// A free TCP port on loopback (bound and let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// gRPC and HTTPS probes (which the shim hands to `wharf kube-probe`): a gRPC readiness
/// probe follows a real grpc.health.v1 server's status; an HTTPS liveness probe passes
/// against a TLS server whose certificate nobody trusts (kubelet does not verify) and
/// restarts the container once that server is gone.
#[test]
fn grpc_and_https_probes_are_run() {
    let mut w = Wharf::new("kubelet-grpc");
    w.set_var("WHARF_RESTART_BACKOFF_MS", "200");
    w.pull_busybox();
    // A gRPC health server, in this process.
    let gport = free_port();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (reporter, service) = tonic_health::server::health_reporter();
    rt.block_on(reporter.set_service_status("", tonic_health::ServingStatus::Serving));
    let addr: std::net::SocketAddr = format!("127.0.0.1:{gport}").parse().unwrap();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve(addr),
    );
    // An HTTPS server with a self-signed certificate.
    let hport = free_port();
    let (cert, key) = (w.path("cert.pem"), w.path("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=probe",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let mut tls = std::process::Command::new("openssl")
        .args(["s_server", "-www", "-quiet", "-accept"])
        .arg(format!("127.0.0.1:{hport}"))
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let m = manifest(
        &w,
        "grpc.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: probes
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
    readinessProbe:
      grpc: {{port: {gport}}}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      httpGet: {{scheme: HTTPS, port: {hport}, path: /}}
      periodSeconds: 1
      failureThreshold: 2
"#
        ),
    );
    let out = w.run(&["play", &m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stderr.contains("grpc") && !out.stderr.contains("HTTPS"),
        "{out:?}"
    );
    let c = |w: &Wharf| container(&status(w, &m), "containerStatuses", "c").clone();
    assert!(
        wait_until(Duration::from_secs(15), || c(&w)["ready"] == true),
        "{:#}",
        c(&w)
    );
    rt.block_on(reporter.set_service_status("", tonic_health::ServingStatus::NotServing));
    assert!(
        wait_until(Duration::from_secs(10), || c(&w)["ready"] == false),
        "{:#}",
        c(&w)
    );
    let now = c(&w);
    assert!(
        now["probeFailure"].as_str().is_some_and(|f| f.contains(
            "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
        )),
        "{now:#}"
    );
    // The HTTPS liveness probe has passed all along.
    assert_eq!(now["restartCount"], 0, "{now:#}");
    let _ = tls.kill();
    let _ = tls.wait();
    assert!(
        wait_until(Duration::from_secs(20), || c(&w)["restartCount"].as_u64()
            >= Some(1)),
        "{:#}",
        c(&w)
    );
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}

/// An Indexed Job: each pod gets an index (0..completions) in its name, its
/// JOB_COMPLETION_INDEX and its completion-index annotation (read here through the
/// downward API), at most `parallelism` at once; the Job completes when every index has
/// succeeded.
#[test]
fn an_indexed_job_runs_each_index_once() {
    let w = Wharf::new("kubelet-indexed");
    w.pull_busybox();
    let m = manifest(
        &w,
        "indexed.yaml",
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: idx
spec:
  completions: 3
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: worker
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "echo index=$JOB_COMPLETION_INDEX file=$(cat /meta/index)"]
        volumeMounts: [{name: meta, mountPath: /meta}]
      volumes:
      - name: meta
        downwardAPI:
          items:
          - path: index
            fieldRef: {fieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
"#,
    );
    let out = w.ok(&["play", "--network", "none", &m]);
    // Two at once: indexes 0 and 1 first.
    assert!(
        out.contains("pod idx-0-") && out.contains("pod idx-1-"),
        "{out}"
    );
    assert!(!out.contains("pod idx-2-"), "{out}");
    assert!(
        wait_until(Duration::from_secs(30), || w
            .ok(&["play", "--status", &m])
            .contains("Job/idx: Complete")),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    let names = pod_names(&w, &m);
    assert_eq!(names.len(), 3, "{names:?}");
    for i in 0..3 {
        let name = names
            .iter()
            .find(|n| n.starts_with(&format!("idx-{i}-")))
            .unwrap_or_else(|| panic!("no pod of index {i} in {names:?}"));
        let log = w.wait_for_log(&format!("{name}-worker"), "file=");
        assert_eq!(log, format!("index={i} file={i}\n"));
    }
    w.ok(&["play", "--down", &m]);
    w.assert_clean();
}
