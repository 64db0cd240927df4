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
    let st = status(&w, &m);
    assert_eq!(st["phase"], "Running", "{st:#}");
    assert_eq!(condition(&st, "Initialized"), "True", "{st:#}");
    let proxy = container(&st, "initContainerStatuses", "proxy");
    assert!(proxy["state"]["running"].is_object(), "{st:#}");
    let table = w.ok(&["play", "--status", &m]);
    assert!(table.lines().nth(1).unwrap().contains("2/2"), "{table}");
    w.ok(&["play", "--down", &m]);
    let ev = events(&file);
    // The sidecar got its stop signal only after the app had exited (and its handler
    // takes half a second, so a simultaneous signal would have shown first).
    assert!(at(&ev, "app-term") <= at(&ev, "proxy-term"), "{ev:?}");

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
    assert!(
        wait_until(Duration::from_secs(10), || {
            w.ok(&["play", "--status", &m])
                .contains("Init:CrashLoopBackOff")
        }),
        "{}",
        w.ok(&["play", "--status", &m])
    );
    let table = w.ok(&["play", "--status", &m]);
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
