//! `wharf daemon` over its real socket with a real gRPC client (tonic): version, status and
//! runtime config, the image service against the loopback fixture registry, error codes,
//! a second daemon on the same socket, and a clean stop on SIGTERM.

mod cri_support;
mod engine_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cri_support::{Daemon, connect, daemon_command, image};
use engine_support::{Wharf, wait_until};
use tonic::Code;
use tonic::transport::Channel;
use wharf_cri::api::image_service_client::ImageServiceClient;
use wharf_cri::api::runtime_service_client::RuntimeServiceClient;
use wharf_cri::api::*;

#[tokio::test(flavor = "current_thread")]
async fn the_daemon_serves_version_status_and_images_over_its_socket() {
    let mut d = Daemon::start("cri-daemon");
    let channel = connect(&d.socket).await;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut img = ImageServiceClient::new(channel);

    let v = rt
        .version(VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (v.runtime_name.as_str(), v.runtime_api_version.as_str()),
        ("wharf", "v1")
    );
    assert!(!v.runtime_version.is_empty());
    let st = rt
        .status(StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let conds = st.status.unwrap().conditions;
    let cond = |t: &str| conds.iter().find(|c| c.r#type == t).cloned().unwrap();
    assert!(cond("RuntimeReady").status);
    // The built-in bridge is the default network here: ready.
    assert!(cond("NetworkReady").status, "{conds:?}");
    assert!(st.info.contains_key("config"));
    let cfg = rt
        .runtime_config(RuntimeConfigRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        cfg.linux.unwrap().cgroup_driver,
        CgroupDriver::Cgroupfs as i32
    );
    // A method Wharf does not serve says so, naming itself.
    let e = rt
        .checkpoint_container(CheckpointContainerRequest {
            container_id: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("CheckpointContainer"), "{e:?}");

    // Images.
    let busybox = engine_support::busybox();
    let absent = img
        .image_status(ImageStatusRequest {
            image: image(&busybox),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(absent.image.is_none(), "not there yet: not an error");
    let pulled = img
        .pull_image(PullImageRequest {
            image: image(&busybox),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(pulled.image_ref.starts_with("sha256:"), "{pulled:?}");
    let list = img
        .list_images(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].id, pulled.image_ref);
    assert_eq!(list[0].repo_tags, vec![busybox.clone()]);
    assert!(list[0].repo_digests[0].contains("@sha256:"), "{list:?}");
    assert!(list[0].size > 0);
    let status = img
        .image_status(ImageStatusRequest {
            image: image(&pulled.image_ref),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.image.unwrap().id, pulled.image_ref);
    assert!(status.info["info"].contains("manifestDigest"));
    // The CLI works on the same state at the same time.
    let out = d.wharf(&["images"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fixtures/busybox"),
        "{out:?}"
    );
    let fs = img
        .image_fs_info(ImageFsInfoRequest::default())
        .await
        .unwrap()
        .into_inner();
    let used = fs.image_filesystems[0].used_bytes.unwrap().value;
    assert!(used > 1 << 20, "busybox takes more than 1 MiB: {used}");

    // Errors carry kubelet's codes.
    let e = img
        .pull_image(PullImageRequest {
            image: image("Not A Reference"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = img
        .pull_image(PullImageRequest {
            image: image(&format!(
                "{}/fixtures/no-such-image:1",
                engine_support::registry()
            )),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("no-such-image"), "{e:?}");
    let e = img
        .pull_image(PullImageRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // Removing, twice (the second finds nothing, which is fine).
    for _ in 0..2 {
        img.remove_image(RemoveImageRequest {
            image: image(&pulled.image_ref),
        })
        .await
        .unwrap();
    }
    let list = img
        .list_images(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert!(list.is_empty(), "{list:?}");

    // A second daemon on the same socket is refused; the first goes on.
    let out = daemon_command(&d.w, &d.socket).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use"), "{err}");
    rt.version(VersionRequest::default()).await.unwrap();

    // SIGTERM: a clean stop, the socket gone, what it logged in logfmt. With no client
    // connected, it does not wait out its grace period.
    drop((rt, img));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = std::time::Instant::now();
    assert_eq!(d.terminate(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(!d.socket.exists());
    let mut log = String::new();
    std::io::Read::read_to_string(d.child.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert!(log.contains("level=info msg=\"serving the CRI\""), "{log}");
    assert!(log.contains("signal=SIGTERM"), "{log}");
}

fn pod_config(d: &Daemon, name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: format!("{name}-host"),
        log_directory: d.w.path(&format!("logs/{name}")).display().to_string(),
        dns_config: Some(DnsConfig {
            servers: vec!["10.0.0.53".into()],
            searches: vec!["svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: [("app".to_string(), name.to_string())].into(),
        annotations: [("note".to_string(), "kept".to_string())].into(),
        linux: Some(LinuxPodSandboxConfig {
            // As kubelet sends it without shareProcessNamespace: a pid namespace per
            // container, the network and IPC ones the pod's.
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            cgroup_parent: format!("{}/kubepods/pod{name}", d.w.env.cgroup_parent),
            sysctls: [(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "0".to_string(),
            )]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(name: &str, script: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: image(&engine_support::busybox()),
        command: vec!["sh".into(), "-c".into(), script.into()],
        envs: vec![KeyValue {
            key: "GREETING".into(),
            value: b"hello".to_vec(),
        }],
        log_path: format!("{name}/0.log"),
        // As kubelet labels every container.
        labels: [
            ("tier", "front"),
            ("io.kubernetes.pod.name", "web"),
            ("io.kubernetes.pod.namespace", "default"),
            ("io.kubernetes.container.name", name),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into(),
        annotations: [("why".to_string(), "test".to_string())].into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                run_as_user: Some(Int64Value { value: 1000 }),
                run_as_group: Some(Int64Value { value: 1000 }),
                supplemental_groups: vec![5],
                readonly_rootfs: true,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A runtime client of `d`, whose store has the fixture busybox.
async fn runtime_with_busybox(d: &Daemon) -> RuntimeServiceClient<Channel> {
    let channel = connect(&d.socket).await;
    ImageServiceClient::new(channel.clone())
        .pull_image(PullImageRequest {
            image: image(&engine_support::busybox()),
            ..Default::default()
        })
        .await
        .unwrap();
    RuntimeServiceClient::new(channel)
}

/// Run a pod of `d`'s named `name` with one started container of config `cfg`; their ids.
async fn run_pod_with(
    rt: &mut RuntimeServiceClient<Channel>,
    d: &Daemon,
    name: &str,
    cfg: ContainerConfig,
) -> (String, String) {
    let config = pod_config(d, name);
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let ctr = start_in_pod(rt, &pod, config, cfg).await;
    (pod, ctr)
}

/// Create a container of config `cfg` in pod `pod` (made from `config`) and start it; its
/// id.
async fn start_in_pod(
    rt: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    config: PodSandboxConfig,
    cfg: ContainerConfig,
) -> String {
    let ctr = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.to_string(),
            config: Some(cfg),
            sandbox_config: Some(config),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: ctr.clone(),
    })
    .await
    .unwrap();
    ctr
}

/// StopPodSandbox then RemovePodSandbox, as kubelet ends a pod.
async fn stop_and_remove_pod(rt: &mut RuntimeServiceClient<Channel>, pod: &str) {
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.to_string(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod.to_string(),
    })
    .await
    .unwrap();
}

/// Stop the daemon (no client left connected) and check that nothing is left but
/// kubelet's pod cgroups, which are kubelet's to remove.
async fn stop_and_check_clean(mut d: Daemon) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(d.terminate(), Some(0));
    for dir in d.w.env.cgroup_dirs() {
        wharf_testbed::remove_cgroup_tree(&dir.join("kubepods"));
    }
    d.w.assert_clean();
}

fn event_types(events: &[ContainerEventResponse], id: &str) -> Vec<i32> {
    events
        .iter()
        .filter(|e| e.container_id == id)
        .map(|e| e.container_event_type)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_and_containers_live_and_die_through_the_cri() {
    let d = Daemon::start("cri-pods");
    let channel = connect(&d.socket).await;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut img = ImageServiceClient::new(channel);
    img.pull_image(PullImageRequest {
        image: image(&engine_support::busybox()),
        ..Default::default()
    })
    .await
    .unwrap();
    // Container events, followed from before anything happens.
    let mut stream = rt
        .get_container_events(GetEventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    let follower = tokio::spawn(async move {
        while let Ok(Some(e)) = stream.message().await {
            sink.lock().unwrap().push(e);
        }
    });

    // The sandbox.
    let config = pod_config(&d, "web");
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(PodSandboxConfig::default()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let st = rt
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let status = st.status.clone().unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(status.metadata, config.metadata);
    assert_eq!(status.labels, config.labels, "exactly kubelet's labels");
    assert_eq!(status.annotations, config.annotations);
    let ip: std::net::IpAddr = status.network.unwrap().ip.parse().unwrap();
    assert!(ip.is_ipv4());
    assert!(
        st.info["info"].contains("/kubepods/podweb/"),
        "{:?}",
        st.info
    );
    let listed = |state: Option<PodSandboxState>, app: &str| ListPodSandboxRequest {
        filter: Some(PodSandboxFilter {
            state: state.map(|s| PodSandboxStateValue { state: s as i32 }),
            label_selector: [("app".to_string(), app.to_string())].into(),
            ..Default::default()
        }),
    };
    let items = |r: ListPodSandboxResponse| r.items.into_iter().map(|p| p.id).collect::<Vec<_>>();
    let l = rt.list_pod_sandbox(listed(None, "web")).await.unwrap();
    assert_eq!(items(l.into_inner()), vec![pod.clone()]);
    let l = rt.list_pod_sandbox(listed(None, "db")).await.unwrap();
    assert!(items(l.into_inner()).is_empty());
    let l = rt
        .list_pod_sandbox(listed(Some(PodSandboxState::SandboxNotready), "web"))
        .await
        .unwrap();
    assert!(items(l.into_inner()).is_empty());

    // A container that logs, and says goodbye when it is stopped.
    let script = "echo out $GREETING; echo err >&2; trap 'echo bye; exit 0' TERM; \
                  while true; do sleep 0.1; done";
    let create = |cfg: ContainerConfig, pod: &str| CreateContainerRequest {
        pod_sandbox_id: pod.to_string(),
        config: Some(cfg),
        sandbox_config: Some(config.clone()),
    };
    let mut app = container_config("app", script);
    // A host device, as a device plugin would give it.
    app.devices = vec![Device {
        container_path: "/dev/host-null".into(),
        host_path: "/dev/null".into(),
        permissions: "rw".into(),
    }];
    let ctr = rt
        .create_container(create(app, &pod))
        .await
        .unwrap()
        .into_inner()
        .container_id;
    let e = rt
        .create_container(create(container_config("app", script), &pod))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let e = rt
        .create_container(create(container_config("other", script), "no-such-pod"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = rt
        .create_container(create(ContainerConfig::default(), &pod))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    rt.start_container(StartContainerRequest {
        container_id: ctr.clone(),
    })
    .await
    .unwrap();
    let status = |rt: &mut RuntimeServiceClient<Channel>, id: &str| {
        let req = ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        };
        let mut rt = rt.clone();
        async move { rt.container_status(req).await }
    };
    let st = status(&mut rt, &ctr).await.unwrap().into_inner();
    let s = st.status.unwrap();
    assert_eq!(s.state, ContainerState::ContainerRunning as i32);
    assert!(s.started_at > 0 && s.created_at > 0);
    assert_eq!(s.labels, container_config("app", script).labels);
    assert_eq!(s.annotations["why"], "test");
    assert_eq!(s.metadata.unwrap().name, "app");
    let log = d.w.path("logs/web/app/0.log");
    assert_eq!(Path::new(&s.log_path), log);
    assert!(st.info["info"].contains("runtimeSpec"));
    // The CLI sees it too.
    let ps = String::from_utf8_lossy(&d.wharf(&["ps"]).stdout).into_owned();
    assert!(ps.contains("app_0_web_default_uid-web_0"), "{ps}");
    assert!(
        ps.contains(" default/web"),
        "marked by its Kubernetes pod: {ps}"
    );

    // Inside: the user, groups, hostname, DNS, sysctl and cgroup kubelet asked for.
    let exec = |cmd: &str, timeout: i64| ExecSyncRequest {
        container_id: ctr.clone(),
        cmd: vec!["sh".into(), "-c".into(), cmd.into()],
        timeout,
    };
    let out = rt
        .exec_sync(exec(
            "id -u; id -g; id -G; hostname; cat /etc/resolv.conf; \
             cat /proc/sys/net/ipv4/ip_unprivileged_port_start; \
             touch /x 2>/dev/null || echo read-only; \
             echo discard > /dev/host-null && echo device-writable",
            10,
        ))
        .await
        .unwrap()
        .into_inner();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.exit_code,
        0,
        "{text} {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[..4],
        &["1000", "1000", "1000 5", "web-host"],
        "{text}"
    );
    for want in [
        "nameserver 10.0.0.53",
        "search svc.cluster.local",
        "ndots:5",
        "read-only",
        "device-writable",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert!(lines.contains(&"0"), "sysctl: {text}");
    // Its cgroup (hidden from it by its cgroup namespace) is below kubelet's pod cgroup.
    let below_kubelet = format!("kubepods/podweb/{pod}/{ctr}");
    let cgroups: Vec<_> = d.w.env.cgroup_dirs();
    assert!(
        cgroups.iter().any(|c| c.join(&below_kubelet).is_dir()),
        "{below_kubelet} in none of {cgroups:?}"
    );
    let out = rt
        .exec_sync(exec("echo oops >&2; exit 3", 10))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((out.exit_code, out.stderr.as_slice()), (3, &b"oops\n"[..]));
    assert!(out.stdout.is_empty());
    let t = std::time::Instant::now();
    let e = rt.exec_sync(exec("sleep 30", 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    // Its log, in the CRI format, at kubelet's path; rotated by kubelet and reopened.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains(" stdout F out hello\n"), "{logged}");
    assert!(logged.contains(" stderr F err\n"), "{logged}");
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    rt.reopen_container_log(ReopenContainerLogRequest {
        container_id: ctr.clone(),
    })
    .await
    .unwrap();
    assert!(log.exists(), "reopened at its path");

    // Stats and a resource update.
    let stats = rt
        .container_stats(ContainerStatsRequest {
            container_id: ctr.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    // Pressure stall information (KEP-4205) wherever the kernel keeps it: a hybrid host's
    // containers have it in their unified directory.
    if Path::new("/proc/pressure/cpu").exists() {
        let psi = |p: Option<&PsiStats>| {
            let p = p.unwrap_or_else(|| panic!("no PSI in {stats:?}"));
            let (some, full) = (p.some.unwrap(), p.full.unwrap());
            assert!(some.avg10 >= 0.0 && some.avg300 <= 100.0, "{p:?}");
            assert!(full.total <= some.total, "{p:?}");
            some.total
        };
        psi(stats.cpu.as_ref().and_then(|c| c.psi.as_ref()));
        psi(stats.memory.as_ref().and_then(|m| m.psi.as_ref()));
        psi(stats.io.as_ref().and_then(|i| i.psi.as_ref()));
    }
    assert!(stats.memory.unwrap().working_set_bytes.unwrap().value > 0);
    assert!(stats.cpu.unwrap().usage_core_nano_seconds.is_some());
    let all = rt
        .list_container_stats(ListContainerStatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(all.len(), 1);
    let pod_stats = rt
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let linux = pod_stats.linux.unwrap();
    assert_eq!(linux.containers.len(), 1);
    if Path::new("/proc/pressure/cpu").exists() {
        // The pod's own cgroup's stalls, beside its container's. (Not compared: the kernel
        // weighs each CPU's stall time by the group's non-idle time there, so a parent's
        // total can trail its child's on a machine with more than one CPU.)
        let pod_psi = linux.cpu.and_then(|c| c.psi).and_then(|p| p.some);
        let ctr_psi = linux.containers[0].cpu.as_ref().and_then(|c| c.psi);
        assert!(
            pod_psi.is_some() && ctr_psi.and_then(|p| p.some).is_some(),
            "pod and container PSI"
        );
        assert!(linux.io.and_then(|i| i.psi).is_some(), "no pod io PSI");
    }
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: ctr.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    // The first of `files` the container's cgroup has, in any hierarchy.
    let container_file = |files: &[&str]| {
        cgroups
            .iter()
            .map(|c| c.join(&below_kubelet))
            .find_map(|c| {
                files
                    .iter()
                    .find_map(|f| std::fs::read_to_string(c.join(f)).ok())
            })
    };
    let limit = container_file(&["memory.limit_in_bytes", "memory.max"]).expect("a memory cgroup");
    assert_eq!(limit.trim(), "67108864");
    // Raw cgroup v2 files (kubelet's memory.oom.group on a unified host; a core file here,
    // where the memory controller is v1's).
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: ctr.clone(),
        linux: Some(LinuxContainerResources {
            unified: [("cgroup.max.descendants".to_string(), "7".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let most = container_file(&["cgroup.max.descendants"]).expect("a unified cgroup");
    assert_eq!(most.trim(), "7");

    // Listing with filters.
    let list = |f: ContainerFilter| ListContainersRequest { filter: Some(f) };
    let ids =
        |r: ListContainersResponse| r.containers.into_iter().map(|c| c.id).collect::<Vec<_>>();
    let l = rt
        .list_containers(list(ContainerFilter {
            pod_sandbox_id: pod.clone(),
            state: Some(ContainerStateValue {
                state: ContainerState::ContainerRunning as i32,
            }),
            label_selector: [("tier".to_string(), "front".to_string())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(ids(l.into_inner()), vec![ctr.clone()]);
    let l = rt
        .list_containers(list(ContainerFilter {
            state: Some(ContainerStateValue {
                state: ContainerState::ContainerExited as i32,
            }),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert!(ids(l.into_inner()).is_empty());

    // The streaming list calls answer the same, in one message.
    let mut streamed = rt
        .stream_containers(StreamContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: pod.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let first = streamed.message().await.unwrap().unwrap();
    assert_eq!(first.containers.len(), 1);
    assert!(streamed.message().await.unwrap().is_none());
    let mut streamed = rt
        .stream_pod_sandbox_stats(StreamPodSandboxStatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = streamed.message().await.unwrap().unwrap();
    assert_eq!(first.pod_sandbox_stats.len(), 1);

    // Stopped: its trap runs, its exit is a clean one, its new log has the goodbye.
    rt.stop_container(StopContainerRequest {
        container_id: ctr.clone(),
        timeout: 10,
    })
    .await
    .unwrap();
    let s = status(&mut rt, &ctr)
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(s.state, ContainerState::ContainerExited as i32);
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"));
    assert!(s.finished_at >= s.started_at);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains(" stdout F bye\n")
    );
    rt.stop_container(StopContainerRequest {
        container_id: ctr.clone(),
        timeout: 10,
    })
    .await
    .expect("stopping a stopped container is fine");
    let e = rt
        .start_container(StartContainerRequest {
            container_id: ctr.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

    // The sandbox stops (not ready, its network gone) and goes, idempotently.
    for _ in 0..2 {
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap();
    }
    let st = rt
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        st.status.unwrap().state,
        PodSandboxState::SandboxNotready as i32
    );
    let e = rt
        .create_container(create(container_config("late", script), &pod))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    for _ in 0..2 {
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap();
    }
    let e = status(&mut rt, &ctr).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = rt
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.clone(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    rt.remove_container(RemoveContainerRequest {
        container_id: ctr.clone(),
    })
    .await
    .expect("removing an unknown container is fine");

    // The events kubelet's PLEG would have seen, in order.
    let want = [
        ContainerEventType::ContainerCreatedEvent,
        ContainerEventType::ContainerStartedEvent,
        ContainerEventType::ContainerStoppedEvent,
        ContainerEventType::ContainerDeletedEvent,
    ]
    .map(|t| t as i32);
    assert!(
        wait_until(Duration::from_secs(10), || event_types(
            &events.lock().unwrap(),
            &ctr
        ) == want),
        "{:?}",
        event_types(&events.lock().unwrap(), &ctr)
    );
    let started = events
        .lock()
        .unwrap()
        .iter()
        .find(|e| e.container_id == ctr && e.container_event_type == want[1])
        .cloned()
        .unwrap();
    assert_eq!(started.pod_sandbox_status.unwrap().id, pod);
    assert_eq!(started.containers_statuses.len(), 1);

    // kubelet's pod cgroup is kubelet's to remove; the daemon left nothing else.
    follower.abort();
    drop((rt, img));
    stop_and_check_clean(d).await;
}

/// Each container's (state, pod) as ListContainers answers `filter`.
async fn listed(
    rt: &RuntimeServiceClient<Channel>,
    filter: ContainerFilter,
) -> std::collections::BTreeMap<String, (i32, String)> {
    rt.clone()
        .list_containers(ListContainersRequest {
            filter: Some(filter),
        })
        .await
        .unwrap()
        .into_inner()
        .containers
        .into_iter()
        .map(|c| (c.id, (c.state, c.pod_sandbox_id)))
        .collect()
}

/// Each pod's state as ListPodSandbox answers.
async fn listed_pods(
    rt: &RuntimeServiceClient<Channel>,
) -> std::collections::BTreeMap<String, i32> {
    rt.clone()
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items
        .into_iter()
        .map(|p| (p.id, p.state))
        .collect()
}

/// The daemon keeps its listings in memory between calls: every way a listing can change
/// must show in the next one. A container exiting (only its shim knows: it marks the
/// change), a shim killed (it marks nothing: its lock goes), and a change another process
/// commits to the store (the CLI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_listings_show_exits_dead_shims_and_other_processes_changes() {
    let d = Daemon::start("cri-kept");
    let mut rt = runtime_with_busybox(&d).await;
    let mut ids = Vec::new();
    for (name, script) in [
        ("p0", "exec sleep 1000"),
        ("p1", "exec sleep 1000"),
        // Exits 3 a second after it is told to (so that a listing in between shows it
        // still running, and the exit reaches the daemon through the shim alone).
        (
            "p2",
            "while [ ! -e /tmp/go ]; do sleep 0.05; done; sleep 1; exit 3",
        ),
    ] {
        let mut cfg = container_config("c", script);
        cfg.linux = None;
        ids.push(run_pod_with(&mut rt, &d, name, cfg).await);
    }
    let running = ContainerState::ContainerRunning as i32;
    let exited = ContainerState::ContainerExited as i32;
    let all = listed(&rt, ContainerFilter::default()).await;
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all.values().all(|(s, _)| *s == running), "{all:?}");
    // Filters apply to the kept listing: by pod, by state, by id prefix, by label.
    let (p1, c1) = &ids[1];
    let tier = |v: &str| [("tier".to_string(), v.to_string())].into();
    for (filter, want) in [
        (
            ContainerFilter {
                pod_sandbox_id: p1.clone(),
                ..Default::default()
            },
            vec![c1],
        ),
        (
            ContainerFilter {
                id: c1[..12].to_string(),
                ..Default::default()
            },
            vec![c1],
        ),
        (
            ContainerFilter {
                label_selector: tier("back"),
                ..Default::default()
            },
            vec![],
        ),
        (
            ContainerFilter {
                pod_sandbox_id: p1.clone(),
                label_selector: tier("front"),
                ..Default::default()
            },
            vec![c1],
        ),
    ] {
        let got = listed(&rt, filter.clone()).await;
        assert_eq!(got.keys().collect::<Vec<_>>(), want, "{filter:?}: {got:?}");
    }
    let pods = listed_pods(&rt).await;
    let ready = PodSandboxState::SandboxReady as i32;
    assert!(
        pods.len() == 3 && pods.values().all(|s| *s == ready),
        "{pods:?}"
    );

    // The container of p2 exits: its shim marks the change, nobody else writes.
    let (_, c2) = &ids[2];
    let out = d.wharf(&["exec", c2, "touch", "/tmp/go"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(listed(&rt, ContainerFilter::default()).await[c2].0, running);
    let mut seen = None;
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let now = listed(&rt, ContainerFilter::default()).await[c2].0;
        if now == exited {
            seen = Some(now);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen,
        Some(exited),
        "the exit never showed in ListContainers"
    );
    let only_running = listed(
        &rt,
        ContainerFilter {
            state: Some(ContainerStateValue { state: running }),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(only_running.len(), 2, "{only_running:?}");

    // p0's shim killed: no mark, only its lock goes. Once the shims' registry has been
    // quiet for a while the daemon stops testing locks and goes by its watch of the
    // registry alone (the kernel's close of the dead shim's lock), so the kill comes then.
    let (p0, c0) = &ids[0];
    tokio::time::sleep(wharf_engine::listing_watch::SETTLED + Duration::from_millis(300)).await;
    assert_eq!(listed(&rt, ContainerFilter::default()).await[c0].0, running);
    let shim = d.w.shim_pid(p0);
    // SAFETY: kill(2) of the shim of a pod this test made.
    unsafe { libc::kill(shim, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || !Path::new(
        &format!("/proc/{shim}")
    )
    .exists()));
    let mut state = running;
    let t = std::time::Instant::now();
    while state == running && t.elapsed() < Duration::from_secs(10) {
        state = listed(&rt, ContainerFilter::default()).await[c0].0;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        state, exited,
        "a dead shim's container still listed running"
    );

    // The pod itself stays ready (its pinned namespaces outlive the shim), and that is
    // honest: kubelet's next container in it starts, with a new shim, and is listed.
    assert_eq!(listed_pods(&rt).await[p0], ready);
    let mut cfg = container_config("again", "exec sleep 1000");
    cfg.linux = None;
    let again = start_in_pod(&mut rt, p0, pod_config(&d, "p0"), cfg).await;
    let now = listed(&rt, ContainerFilter::default()).await;
    assert_eq!(now[&again], (running, p0.clone()), "{now:?}");
    assert_eq!(now[c0].0, exited, "{now:?}");

    // Another process commits: the CLI removes p1's container.
    let out = d.wharf(&["rm", "-f", c1]);
    assert!(out.status.success(), "{out:?}");
    let after = listed(&rt, ContainerFilter::default()).await;
    assert!(!after.contains_key(c1), "{after:?}");

    for (pod, _) in &ids {
        stop_and_remove_pod(&mut rt, pod).await;
    }
    assert!(listed_pods(&rt).await.is_empty());
    drop(rt);
    stop_and_check_clean(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_and_started_again_serves_the_same_pods_and_the_exits_it_missed() {
    let mut d = Daemon::start("cri-kill9");
    let mut rt = runtime_with_busybox(&d).await;
    // Three pods: one container runs on, one exits 7 while the daemon is down.
    let mut pods = Vec::new();
    let mut ctrs = Vec::new();
    for (i, script) in [
        "echo up; exec sleep 1000",
        "echo up; exec sleep 1000",
        // It leaves a second after the exec'd `touch` made the file: its end kills what is
        // left in its pid namespace, and a loaded machine may not have reaped `touch` yet.
        "echo up; while [ ! -e /tmp/go ]; do sleep 0.05; done; sleep 1; echo leaving; exit 7",
    ]
    .into_iter()
    .enumerate()
    {
        let mut cfg = container_config("c", script);
        cfg.linux = None;
        let (pod, ctr) = run_pod_with(&mut rt, &d, &format!("p{i}"), cfg).await;
        pods.push(pod);
        ctrs.push(ctr);
    }
    let list = |rt: &RuntimeServiceClient<Channel>| {
        let mut rt = rt.clone();
        async move {
            let mut v: Vec<(String, i32)> = rt
                .list_pod_sandbox(ListPodSandboxRequest::default())
                .await
                .unwrap()
                .into_inner()
                .items
                .into_iter()
                .map(|p| (p.id, p.state))
                .collect();
            v.sort();
            v
        }
    };
    let before = list(&rt).await;
    assert_eq!(before.len(), 3);
    drop(rt);

    // kill -9; the last container exits meanwhile.
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let out = d.wharf(&["exec", &ctrs[2], "touch", "/tmp/go"]);
    assert!(out.status.success(), "{out:?}");
    let log = d.w.path("logs/p2/c/0.log");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("leaving"))),
        "the container ran on without the daemon"
    );
    std::thread::sleep(Duration::from_millis(300));

    // Started again on the same socket (the dead one's is stale): the same answers.
    let child = daemon_command(&d.w, &d.socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    d.child = child;
    assert!(wait_until(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&d.socket).is_ok()
    }));
    let mut rt = RuntimeServiceClient::new(connect(&d.socket).await);
    assert_eq!(list(&rt).await, before);
    for (i, ctr) in ctrs.iter().enumerate() {
        let s = rt
            .container_status(ContainerStatusRequest {
                container_id: ctr.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        if i < 2 {
            assert_eq!(s.state, ContainerState::ContainerRunning as i32, "{s:?}");
        } else {
            assert_eq!(s.state, ContainerState::ContainerExited as i32, "{s:?}");
            assert_eq!((s.exit_code, s.reason.as_str()), (7, "Error"));
            assert!(s.finished_at > s.started_at);
        }
        let logged = std::fs::read_to_string(&s.log_path).unwrap();
        assert!(logged.contains(" stdout F up\n"), "{logged}");
    }
    let out = rt
        .exec_sync(ExecSyncRequest {
            container_id: ctrs[0].clone(),
            cmd: vec!["echo".into(), "still here".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.stdout, b"still here\n");
    for pod in &pods {
        stop_and_remove_pod(&mut rt, pod).await;
    }
    drop(rt);
    stop_and_check_clean(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_systemd_the_daemon_serves_its_socket_and_reloads_its_config_on_sighup() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let w = Wharf::new("cri-systemd");
    let registry = engine_support::registry();
    // The config file: JSON logs and a sandbox image from the daemon section; the
    // registry "wharf-mirror.invalid" is reachable only once a mirror is configured.
    let config = w.path("no-config.json");
    // Metrics on a loopback port that was free a moment ago.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let write_config = |mirror: Option<&str>| {
        let registries = match mirror {
            Some(m) => {
                serde_json::json!({"wharf-mirror.invalid": {"mirrors": [format!("http://{m}")]}})
            }
            None => serde_json::json!({}),
        };
        // The second registry's mirror comes from containerd's hosts.toml layout.
        let certs = w.path("certs.d");
        if let Some(m) = mirror {
            std::fs::create_dir_all(certs.join("wharf-hosts.invalid")).unwrap();
            std::fs::write(
                certs.join("wharf-hosts.invalid/hosts.toml"),
                format!("[host.\"http://{m}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
            )
            .unwrap();
        }
        let v = serde_json::json!({
            "registries": registries,
            "registry-config-path": certs,
            "daemon": {
                "log-format": "json",
                "sandbox-image": "registry.k8s.io/pause:3.10",
                "metrics-address": metrics,
            },
        });
        std::fs::write(&config, v.to_string()).unwrap();
    };
    write_config(None);
    // As systemd does: the sockets made and listening before the daemon starts, passed
    // as fds 3 and 4 with LISTEN_PID, LISTEN_FDS and their names (wharf.socket's
    // FileDescriptorName).
    let socket = w.path("systemd.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let fd = listener.as_raw_fd();
    let docker_socket = w.path("systemd-docker.sock");
    let docker_listener = std::os::unix::net::UnixListener::bind(&docker_socket).unwrap();
    let docker_fd = docker_listener.as_raw_fd();
    let cmd = w.cmd(&[]);
    let wharf = cmd.get_program().to_owned();
    let mut sh = Command::new("sh");
    sh.args([
        "-c",
        "LISTEN_PID=$$ LISTEN_FDS=2 LISTEN_FDNAMES=cri:docker exec \"$0\" daemon \
         --listen /nonexistent/x.sock --docker-listen /nonexistent/docker.sock",
    ])
    .arg(&wharf)
    .envs(
        cmd.get_envs()
            .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // SAFETY: dup2 in the child between fork and exec, on fds this process owns.
    unsafe {
        sh.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 || libc::dup2(docker_fd, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = KillOnDrop(sh.spawn().unwrap());
    drop(listener);
    drop(docker_listener);
    let mut rt = RuntimeServiceClient::new(connect(&socket).await);
    let mut img = ImageServiceClient::new(connect(&socket).await);
    rt.version(VersionRequest::default()).await.unwrap();
    // The Docker API answers on the second socket systemd passed.
    {
        use std::io::{Read, Write};
        let mut d = std::os::unix::net::UnixStream::connect(&docker_socket).unwrap();
        d.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        d.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("api-version: 1.50"), "{answer}");
    }
    let st = rt
        .status(StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    assert!(
        st.info["config"].contains("registry.k8s.io/pause:3.10"),
        "{:?}",
        st.info
    );
    let pull = |img: &mut ImageServiceClient<Channel>| {
        let mut img = img.clone();
        async move {
            img.pull_image(PullImageRequest {
                image: image("wharf-mirror.invalid/fixtures/busybox:latest"),
                ..Default::default()
            })
            .await
        }
    };
    assert!(pull(&mut img).await.is_err(), "no mirror yet");
    // The metrics count what was asked, and how it went.
    let scrape = {
        use std::io::{Read, Write};
        let mut t = std::net::TcpStream::connect(&metrics).unwrap();
        t.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut s = String::new();
        t.read_to_string(&mut s).unwrap();
        s
    };
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    for want in [
        "wharf_cri_requests_total{method=\"Version\",code=\"Ok\"} 1",
        "wharf_cri_request_duration_seconds_count{method=\"Status\"} 1",
        "wharf_image_pulls_total{result=\"failure\"} 1",
        "wharf_shims 0",
    ] {
        assert!(scrape.contains(want), "{want} in {scrape}");
    }
    // SIGHUP with a mirror: the next pull goes through it.
    write_config(Some(&registry));
    // SAFETY: kill(2) of the daemon this test started (sh exec'd it: same pid).
    unsafe { libc::kill(child.0.id() as i32, libc::SIGHUP) };
    assert!(
        wait_until(Duration::from_secs(10), || {
            futures_ready(pull(&mut img)).is_some_and(|r| r.is_ok())
        }),
        "the reloaded config's mirror serves the pull"
    );
    img.pull_image(PullImageRequest {
        image: image("wharf-hosts.invalid/fixtures/busybox:latest"),
        ..Default::default()
    })
    .await
    .expect("a mirror from hosts.toml serves the pull");
    // A broken config on SIGHUP: refused, the daemon keeps the last good one.
    std::fs::write(&config, "{ not json").unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGHUP) };
    tokio::time::sleep(Duration::from_millis(300)).await;
    rt.version(VersionRequest::default()).await.unwrap();
    drop((rt, img));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // SAFETY: as above.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    assert_eq!(child.0.wait().unwrap().code(), Some(0));
    assert!(socket.exists(), "systemd's socket is systemd's to remove");
    let mut log = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut log).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let msgs: Vec<&str> = lines.iter().filter_map(|l| l["msg"].as_str()).collect();
    assert!(msgs.contains(&"configuration reloaded"), "{log}");
    assert!(
        msgs.contains(&"configuration not reloaded: keeping the previous one"),
        "{log}"
    );
}

/// Whether `cmd` succeeds in container `ctr` within 10 s (ExecSync, retried).
async fn futures_ready_wait(rt: &RuntimeServiceClient<Channel>, ctr: &str, cmd: &str) -> bool {
    let mut rt = rt.clone();
    for _ in 0..100 {
        let r = rt
            .exec_sync(ExecSyncRequest {
                container_id: ctr.to_string(),
                cmd: vec!["sh".into(), "-c".into(), cmd.into()],
                timeout: 5,
            })
            .await;
        if r.is_ok_and(|r| r.into_inner().exit_code == 0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A child process killed when the test ends, whatever way it ends (a daemon left by a
/// failed test would run on).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run a future to completion on a runtime of its own (for polling from wait_until).
fn futures_ready<F: std::future::Future + Send + 'static>(f: F) -> Option<F::Output>
where
    F::Output: Send,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .join()
    .ok()
}

/// A WebSocket client of the streaming server, as client-go's: the v5 channel protocol.
async fn stream(url: &str) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    stream_with(
        url,
        "v5.channel.k8s.io, v4.channel.k8s.io",
        "v5.channel.k8s.io",
    )
    .await
}

/// A WebSocket client offering the subprotocols `offer`; the server must choose `chosen`.
async fn stream_with(
    url: &str,
    offer: &str,
    chosen: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    // As client-go: the URL's http scheme becomes ws.
    let mut req = url
        .replacen("http://", "ws://", 1)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", offer.parse().unwrap());
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.headers()["Sec-WebSocket-Protocol"], chosen);
    ws
}

/// Everything a stream delivered, by channel, until the server closed it.
async fn drain(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> std::collections::BTreeMap<u8, Vec<u8>> {
    use futures_util::StreamExt;
    let mut out = std::collections::BTreeMap::<u8, Vec<u8>>::new();
    use tokio_tungstenite::tungstenite::Message;
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Binary(b) => out.entry(b[0]).or_default().extend_from_slice(&b[1..]),
            // The base64 protocols: the channel as a digit, then the data.
            Message::Text(t) => {
                use base64::Engine as _;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&t.as_bytes()[1..])
                    .unwrap();
                out.entry(t.as_bytes()[0] - b'0')
                    .or_default()
                    .extend_from_slice(&data);
            }
            _ => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_attach_stream_over_websocket() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let d = Daemon::start("cri-stream");
    let mut rt = runtime_with_busybox(&d).await;
    let mut cfg = container_config("c", "read line; echo got $line; exec sleep 1000");
    cfg.linux = None;
    cfg.stdin = true;
    let (pod, ctr) = run_pod_with(&mut rt, &d, "st", cfg).await;
    let exec = |cmd: &[&str], stdin: bool| ExecRequest {
        container_id: ctr.clone(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        stdin,
        stdout: true,
        stderr: true,
        ..Default::default()
    };

    // Output on its channels, the exit code in the final status.
    let url = rt
        .exec(exec(&["sh", "-c", "echo out; echo err >&2; exit 3"], false))
        .await
        .unwrap()
        .into_inner()
        .url;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let got = drain(&mut stream(&url).await).await;
    assert_eq!(got[&1], b"out\n");
    assert_eq!(got[&2], b"err\n");
    let status: serde_json::Value = serde_json::from_slice(&got[&3]).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3");
    // A URL serves once.
    let again = tokio::net::TcpStream::connect(
        url.trim_start_matches("http://").split('/').next().unwrap(),
    )
    .await
    .unwrap();
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url
        .replacen("http://", "ws://", 1)
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "v5.channel.k8s.io".parse().unwrap(),
    );
    assert!(tokio_tungstenite::client_async(req, again).await.is_err());

    // The older protocol the API server's websocket exec asks for (`channel.k8s.io`): the
    // same channels, channel 3 only for a failure, with its message as text.
    let url = rt
        .exec(exec(&["echo", "remote execution test"], false))
        .await
        .unwrap()
        .into_inner()
        .url;
    let got = drain(&mut stream_with(&url, "channel.k8s.io", "channel.k8s.io").await).await;
    assert_eq!(got[&1], b"remote execution test\n");
    assert!(!got.contains_key(&3), "no status for a success: {got:?}");
    let url = rt
        .exec(exec(&["sh", "-c", "exit 3"], false))
        .await
        .unwrap()
        .into_inner()
        .url;
    let got = drain(&mut stream_with(&url, "channel.k8s.io", "channel.k8s.io").await).await;
    assert_eq!(
        String::from_utf8_lossy(&got[&3]),
        "command terminated with non-zero exit code: exit code 3"
    );
    // Its base64 form: text messages, and stdin the same way.
    let url = rt
        .exec(exec(&["cat"], true))
        .await
        .unwrap()
        .into_inner()
        .url;
    let mut ws = stream_with(&url, "base64.channel.k8s.io", "base64.channel.k8s.io").await;
    ws.send(Message::Text("0aGVsbG8K".into())).await.unwrap();
    let mut out = Vec::new();
    while !out.ends_with(b"hello\n") {
        use futures_util::StreamExt;
        match ws.next().await {
            Some(Ok(Message::Text(t))) if t.starts_with('1') => {
                use base64::Engine as _;
                out.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(&t.as_bytes()[1..])
                        .unwrap(),
                );
            }
            Some(Ok(_)) => {}
            other => panic!("the base64 stream ended early: {other:?}"),
        }
    }
    drop(ws);

    // Stdin, closed the v5 way; success.
    let url = rt
        .exec(exec(&["cat"], true))
        .await
        .unwrap()
        .into_inner()
        .url;
    let mut ws = stream(&url).await;
    ws.send(Message::Binary([&[0u8][..], b"hello\n"].concat().into()))
        .await
        .unwrap();
    ws.send(Message::Binary(vec![255u8, 0].into()))
        .await
        .unwrap();
    let got = drain(&mut ws).await;
    assert_eq!(got[&1], b"hello\n");
    let status: serde_json::Value = serde_json::from_slice(&got[&3]).unwrap();
    assert_eq!(status["status"], "Success", "{status}");

    // Attach: the main process reads what we send.
    let url = rt
        .attach(AttachRequest {
            container_id: ctr.clone(),
            stdin: true,
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let mut ws = stream(&url).await;
    ws.send(Message::Binary([&[0u8][..], b"world\n"].concat().into()))
        .await
        .unwrap();
    let log = d.w.path("logs/st/c/0.log");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("stdout F got world"))),
        "the attached stdin reached the container"
    );
    drop(ws);

    // Bad requests.
    let e = rt
        .exec(ExecRequest {
            container_id: ctr.clone(),
            cmd: vec!["true".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = rt
        .exec(ExecRequest {
            container_id: "nope".into(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    drop(rt);
    stop_and_check_clean(d).await;
}

/// Where the test's SPDY client sends its bytes: a TCP connection after the HTTP upgrade,
/// or a WebSocket whose binary messages carry them (client-go's tunnel).
trait Transport: Send {
    fn send(&mut self, b: &[u8]);
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    fn finish(&mut self);
}

impl Transport for std::net::TcpStream {
    fn send(&mut self, b: &[u8]) {
        std::io::Write::write_all(self, b).unwrap();
    }
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(self, buf)
    }
    fn finish(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

/// A synchronous WebSocket carrying a byte stream.
struct WsTransport {
    ws: tokio_tungstenite::tungstenite::WebSocket<std::net::TcpStream>,
    pending: Vec<u8>,
}

impl Transport for WsTransport {
    fn send(&mut self, b: &[u8]) {
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::Binary(
                b.to_vec().into(),
            ))
            .unwrap();
    }
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.is_empty() {
            match self.ws.read() {
                Ok(tokio_tungstenite::tungstenite::Message::Binary(b)) => {
                    self.pending.extend_from_slice(&b)
                }
                Ok(tokio_tungstenite::tungstenite::Message::Close(_)) | Err(_) => return Ok(0),
                Ok(_) => {}
            }
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        Ok(n)
    }
    fn finish(&mut self) {
        let _ = self.ws.close(None);
    }
}

/// A minimal SPDY/3.1 client of the streaming server (what client-go's SPDY executor and
/// port-forwarder send: the upgrade, SYN_STREAMs with `streamType` and friends, data with
/// FIN), with header blocks compressed without the SPDY dictionary (readers accept both).
struct Spdy {
    tcp: Box<dyn Transport>,
    deflate: flate2::Compress,
    buf: Vec<u8>,
    next_id: u32,
}

impl Spdy {
    fn connect(url: &str, protocol: &str) -> (Spdy, String) {
        use std::io::{Read, Write};
        let rest = url.trim_start_matches("http://");
        let (addr, path) = rest.split_at(rest.find('/').unwrap());
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            tcp,
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                tcp.read(&mut b).unwrap(),
                1,
                "{}",
                String::from_utf8_lossy(&head)
            );
            head.push(b[0]);
        }
        let spdy = Spdy {
            tcp: Box::new(tcp),
            deflate: flate2::Compress::new(flate2::Compression::fast(), true),
            buf: Vec::new(),
            next_id: 1,
        };
        (spdy, String::from_utf8_lossy(&head).into_owned())
    }

    /// SPDY through a WebSocket (`SPDY/3.1+portforward.k8s.io`), as client-go's
    /// port-forward dialer does.
    fn connect_tunnel(url: &str) -> Spdy {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let rest = url.trim_start_matches("http://");
        let addr = &rest[..rest.find('/').unwrap()];
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut req = url
            .replacen("http://", "ws://", 1)
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "SPDY/3.1+portforward.k8s.io".parse().unwrap(),
        );
        let (ws, resp) = tokio_tungstenite::tungstenite::client::client(req, tcp).unwrap();
        assert_eq!(
            resp.headers()["Sec-WebSocket-Protocol"],
            "SPDY/3.1+portforward.k8s.io"
        );
        Spdy {
            tcp: Box::new(WsTransport {
                ws,
                pending: Vec::new(),
            }),
            deflate: flate2::Compress::new(flate2::Compression::fast(), true),
            buf: Vec::new(),
            next_id: 1,
        }
    }

    /// Forward one HTTP request to `port` of the pod; the response.
    fn http_get(&mut self, port: &str, request: &str) -> String {
        let hdr = [("port", port), ("requestID", request)];
        let error = self.open(&[("streamType", "error"), hdr[0], hdr[1]]);
        let data = self.open(&[("streamType", "data"), hdr[0], hdr[1]]);
        self.send(data, b"GET /index.html HTTP/1.0\r\n\r\n", true);
        let (got, _) = self.drain(&[data, error]);
        assert!(got.get(&error).is_none_or(|e| e.is_empty()), "{got:?}");
        String::from_utf8_lossy(&got[&data]).into_owned()
    }

    fn open(&mut self, headers: &[(&str, &str)]) -> u32 {
        let mut plain = (headers.len() as u32).to_be_bytes().to_vec();
        for (k, v) in headers {
            for s in [k, v] {
                plain.extend((s.len() as u32).to_be_bytes());
                plain.extend(s.as_bytes());
            }
        }
        let mut block = Vec::with_capacity(1024);
        self.deflate
            .compress_vec(&plain, &mut block, flate2::FlushCompress::Sync)
            .unwrap();
        let id = self.next_id;
        self.next_id += 2;
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend([0u8; 6]);
        payload.extend(block);
        let mut f = vec![0x80, 3, 0, 1, 0];
        f.extend(&(payload.len() as u32).to_be_bytes()[1..]);
        f.extend(payload);
        self.tcp.send(&f);
        id
    }

    fn send(&mut self, id: u32, data: &[u8], fin: bool) {
        let mut f = id.to_be_bytes().to_vec();
        f.push(u8::from(fin));
        f.extend(&(data.len() as u32).to_be_bytes()[1..]);
        f.extend(data);
        self.tcp.send(&f);
    }

    /// Data per stream until the server ends the connection, or has ended each stream of
    /// `until` (FIN); the streams it replied to.
    fn drain(&mut self, until: &[u32]) -> (std::collections::BTreeMap<u32, Vec<u8>>, Vec<u32>) {
        let mut data = std::collections::BTreeMap::<u32, Vec<u8>>::new();
        let mut replied = Vec::new();
        let mut ended = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            while self.buf.len() >= 8 {
                let len = u32::from_be_bytes([0, self.buf[5], self.buf[6], self.buf[7]]) as usize;
                if self.buf.len() < 8 + len {
                    break;
                }
                let frame: Vec<u8> = self.buf.drain(..8 + len).collect();
                if frame[0] & 0x80 == 0 {
                    let id = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                    data.entry(id).or_default().extend(&frame[8..]);
                    if frame[4] & 1 != 0 {
                        ended.push(id);
                        if !until.is_empty() && until.iter().all(|u| ended.contains(u)) {
                            return (data, replied);
                        }
                    }
                } else if frame[3] == 2 {
                    replied.push(u32::from_be_bytes([
                        frame[8], frame[9], frame[10], frame[11],
                    ]));
                } else if frame[3] == 7 {
                    return (data, replied);
                }
            }
            match self.tcp.read_some(&mut chunk) {
                Ok(0) | Err(_) => return (data, replied),
                Ok(n) => self.buf.extend(&chunk[..n]),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_port_forward_stream_over_spdy() {
    let d = Daemon::start("cri-spdy");
    let mut rt = runtime_with_busybox(&d).await;
    let mut cfg = container_config(
        "web",
        "mkdir -p /tmp/www; echo hello-forwarded > /tmp/www/index.html; \
         exec httpd -f -p 8080 -h /tmp/www",
    );
    cfg.linux = None;
    let (pod, ctr) = run_pod_with(&mut rt, &d, "sp", cfg).await;

    // Exec: stdin in, stdout and stderr out, the exit code in the v4 status.
    let url = rt
        .exec(ExecRequest {
            container_id: ctr.clone(),
            cmd: ["sh", "-c", "read x; echo got $x; echo err >&2; exit 4"]
                .map(String::from)
                .to_vec(),
            stdin: true,
            stdout: true,
            stderr: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let got = tokio::task::spawn_blocking(move || {
        let (mut s, head) = Spdy::connect(&url, "v4.channel.k8s.io");
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(
            head.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"),
            "{head}"
        );
        let error = s.open(&[("streamType", "error")]);
        let stdin = s.open(&[("streamType", "stdin")]);
        let stdout = s.open(&[("streamType", "stdout")]);
        let stderr = s.open(&[("streamType", "stderr")]);
        s.send(stdin, b"spdy\n", true);
        let (data, replied) = s.drain(&[]);
        assert_eq!(replied, vec![error, stdin, stdout, stderr]);
        (
            data.get(&stdout).cloned().unwrap_or_default(),
            data.get(&stderr).cloned().unwrap_or_default(),
            data.get(&error).cloned().unwrap_or_default(),
        )
    })
    .await
    .unwrap();
    assert_eq!(got.0, b"got spdy\n");
    assert_eq!(got.1, b"err\n");
    let status: serde_json::Value = serde_json::from_slice(&got.2).unwrap();
    assert_eq!(status["details"]["causes"][0]["message"], "4", "{status}");

    // Port forwarding: an HTTP request to the pod's port 8080, on its loopback.
    let url = rt
        .port_forward(PortForwardRequest {
            pod_sandbox_id: pod.clone(),
            port: vec![8080],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    // (Once httpd answers inside.)
    assert!(
        futures_ready_wait(&rt, &ctr, "wget -q -O- http://127.0.0.1:8080/index.html").await,
        "httpd never answered in the pod"
    );
    let used = url.clone();
    let page = tokio::task::spawn_blocking(move || {
        let (mut s, head) = Spdy::connect(&url, "portforward.k8s.io");
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        // Two connections forwarded over the one SPDY connection, as client-go does.
        let pages = [s.http_get("8080", "0"), s.http_get("8080", "1")];
        assert!(pages[1].contains("hello-forwarded"), "{}", pages[1]);
        pages[0].clone()
    })
    .await
    .unwrap();
    assert!(page.contains("hello-forwarded"), "{page}");

    // An ephemeral debug container in the web container's pid namespace sees httpd.
    let mut debug = container_config("debugger", "exec sleep 1000");
    debug.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            namespace_options: Some(NamespaceOption {
                pid: NamespaceMode::Target as i32,
                target_id: ctr.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let debugger = start_in_pod(&mut rt, &pod, pod_config(&d, "sp"), debug).await;
    let seen = rt
        .exec_sync(ExecSyncRequest {
            container_id: debugger,
            cmd: ["sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '"]
                .map(String::from)
                .to_vec(),
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let seen = String::from_utf8_lossy(&seen.stdout).into_owned();
    assert!(
        seen.contains("httpd"),
        "pid 1 of the target's namespace: {seen:?}"
    );

    // The same through a WebSocket tunnel (kubectl's newer transport).
    let url = rt
        .port_forward(PortForwardRequest {
            pod_sandbox_id: pod.clone(),
            port: vec![8080],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let page = tokio::task::spawn_blocking(move || {
        let mut s = Spdy::connect_tunnel(&url);
        let page = s.http_get("8080", "0");
        s.tcp.finish();
        page
    })
    .await
    .unwrap();
    assert!(page.contains("hello-forwarded"), "{page}");

    // A URL serves once: used again, it is unknown.
    let head = tokio::task::spawn_blocking(move || Spdy::connect(&used, "portforward.k8s.io").1)
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    drop(rt);
    stop_and_check_clean(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_requests_roll_back_and_name_their_cause() {
    // The pods' network is a CNI network whose plugin does not exist: every sandbox's
    // network setup fails after its namespaces and cgroup were made.
    let d = Daemon::start_with("cri-faults", |w| {
        let conf = w.path("broken-cni");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("10-broken.conflist"),
            r#"{"cniVersion": "1.0.0", "name": "broken",
                "plugins": [{"type": "wharf-no-such-plugin"}]}"#,
        )
        .unwrap();
        // From the config file (the test world's variable is emptied, which unsets it).
        let cfg = serde_json::json!({
            "network": {"default": "cni", "cni-conf-dir": conf, "cni-bin-dir": ["/usr/lib/cni"]},
        });
        std::fs::write(w.path("no-config.json"), cfg.to_string()).unwrap();
        w.set_var("WHARF_CNI_CONF_DIR", "");
    });
    let mut rt = runtime_with_busybox(&d).await;
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(pod_config(&d, "broken")),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("wharf-no-such-plugin"), "{e:?}");
    let pods = rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(pods.is_empty(), "rolled back: {pods:?}");
    // A kubelet on the systemd driver names its pod's slice: with the cgroupfs driver that
    // is a driver mismatch, said as such before anything is made.
    let mut sliced = pod_config(&d, "sliced");
    sliced.linux.as_mut().unwrap().cgroup_parent = "kubepods-besteffort-pod1.slice".into();
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sliced),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(
            "cgroup parent \"kubepods-besteffort-pod1.slice\" is a systemd slice, but the \
             cgroup manager is cgroupfs"
        ),
        "{e:?}"
    );
    // Host-network pods need no CNI: the container-level failures.
    let mut config = pod_config(&d, "host");
    // The host's network: no network sysctls (kubelet sends none then).
    config.linux.as_mut().unwrap().sysctls.clear();
    config.linux.as_mut().unwrap().security_context = Some(LinuxSandboxSecurityContext {
        namespace_options: Some(NamespaceOption {
            network: NamespaceMode::Node as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let create = |cfg: ContainerConfig| CreateContainerRequest {
        pod_sandbox_id: pod.clone(),
        config: Some(cfg),
        sandbox_config: Some(config.clone()),
    };
    let mut missing = container_config("missing", "true");
    missing.image = image(&format!(
        "{}/fixtures/not-pulled:1",
        engine_support::registry()
    ));
    let e = rt.create_container(create(missing)).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("not-pulled"), "{e:?}");
    let mut bad_mount = container_config("badmount", "true");
    bad_mount.mounts = vec![Mount {
        container_path: "/proc/sys/kernel".into(),
        host_path: d.w.path("vol").display().to_string(),
        ..Default::default()
    }];
    let e = rt.create_container(create(bad_mount)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("/proc"), "{e:?}");
    let mut relative = container_config("relative", "true");
    relative.mounts = vec![Mount {
        container_path: "data".into(),
        host_path: "relative/path".into(),
        ..Default::default()
    }];
    let e = rt.create_container(create(relative)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let mut group_only = container_config("grouponly", "true");
    group_only.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            run_as_group: Some(Int64Value { value: 5 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = rt.create_container(create(group_only)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let mut not_a_device = container_config("notadevice", "true");
    not_a_device.devices = vec![Device {
        container_path: "/dev/x".into(),
        host_path: "/etc/hostname".into(),
        permissions: "rw".into(),
    }];
    let e = rt.create_container(create(not_a_device)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("not a device node"), "{e:?}");
    // An AppArmor profile by name: applied where the host has AppArmor (and the profile
    // is loaded there), a clear refusal here, where it has not.
    let mut confined = container_config("confined", "true");
    confined
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .apparmor = Some(SecurityProfile {
        profile_type: security_profile::ProfileType::Localhost as i32,
        localhost_ref: "wharf-test-profile".into(),
    });
    let e = rt.create_container(create(confined)).await.unwrap_err();
    if std::path::Path::new("/sys/module/apparmor/parameters/enabled").exists() {
        assert!(e.message().contains("wharf-test-profile"), "{e:?}");
    } else {
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(
            e.message()
                .contains("\"wharf-test-profile\" asked for, but AppArmor is not enabled"),
            "{e:?}"
        );
    }
    let mut rro_rw = container_config("rrorw", "true");
    rro_rw.mounts = vec![Mount {
        container_path: "/data".into(),
        host_path: d.w.path("vol").display().to_string(),
        recursive_read_only: true,
        ..Default::default()
    }];
    let e = rt.create_container(create(rro_rw)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("needs readonly"), "{e:?}");
    let image_volume = |sub: &str, readonly: bool| Mount {
        container_path: "/img".into(),
        readonly,
        image: image(&engine_support::busybox()),
        image_sub_path: sub.into(),
        ..Default::default()
    };
    for (sub, readonly, why) in [
        ("", false, "must be read-only"),
        ("../../../../etc", true, "leads out"),
        ("no-such-dir", true, "No such file"),
    ] {
        let mut c = container_config("imgvol", "true");
        c.mounts = vec![image_volume(sub, readonly)];
        let e = rt.create_container(create(c)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(why), "{why}: {e:?}");
    }
    // None of them left a container behind.
    let left = rt
        .list_containers(ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert!(left.is_empty(), "{left:?}");
    assert!(
        String::from_utf8_lossy(&d.wharf(&["ps", "-a", "-q"]).stdout)
            .trim()
            .is_empty()
    );
    // Malformed requests: clear codes, no crash.
    let e = rt
        .exec_sync(ExecSyncRequest {
            container_id: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = rt
        .update_container_resources(UpdateContainerResourcesRequest {
            container_id: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: "gvisor".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    rt.version(VersionRequest::default()).await.unwrap();

    // Recursive read-only reaches the mounts below the volume (a plain read-only bind
    // leaves them writable).
    let vol = d.w.path("rro");
    std::fs::create_dir_all(vol.join("sub")).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(vol.join("sub"))
        .status()
        .unwrap();
    assert!(mounted.success());
    let mut rro = container_config("rro", "exec sleep 1000");
    rro.linux = None;
    // As kubelet names the image: the id it pulled, and the name the pod spec gave.
    let id = ImageServiceClient::new(connect(&d.socket).await)
        .image_status(ImageStatusRequest {
            image: image(&engine_support::busybox()),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .unwrap()
        .id;
    rro.image = Some(ImageSpec {
        image: id.clone(),
        user_specified_image: engine_support::busybox(),
        ..Default::default()
    });
    rro.mounts = [("/plain", false), ("/recursive", true)]
        .map(|(path, recursive)| Mount {
            container_path: path.into(),
            host_path: vol.display().to_string(),
            readonly: true,
            recursive_read_only: recursive,
            ..Default::default()
        })
        .to_vec();
    // And the image itself, read-only, a path of it at /img (the view goes with the pod).
    rro.mounts.push(image_volume("bin", true));
    let ctr = rt
        .create_container(create(rro))
        .await
        .unwrap()
        .into_inner()
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: ctr.clone(),
    })
    .await
    .unwrap();
    let out = rt
        .exec_sync(ExecSyncRequest {
            container_id: ctr.clone(),
            cmd: [
                "sh",
                "-c",
                "touch /plain/sub/x && echo plain-writable; touch /recursive/sub/x || echo recursive-read-only; \
                 test -x /img/busybox && echo image-volume; touch /img/x || echo image-read-only",
            ]
            .map(String::from)
            .to_vec(),
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "plain-writable",
        "recursive-read-only",
        "image-volume",
        "image-read-only",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let st = rt
        .container_status(ContainerStatusRequest {
            container_id: ctr.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    // By its name, not the id kubelet created it from (as containerd shows a tag): kubelet
    // puts it in the pod's status.
    let shown = st.image.unwrap();
    assert_eq!(
        (shown.image, shown.user_specified_image),
        (engine_support::busybox(), engine_support::busybox())
    );
    assert_eq!(st.image_ref, id);
    let ps = String::from_utf8_lossy(&d.wharf(&["ps"]).stdout).into_owned();
    assert!(
        ps.contains(&engine_support::busybox()),
        "the name, not the id: {ps}"
    );
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    let _ = Command::new("umount").arg(vol.join("sub")).status();
    drop(rt);
    stop_and_check_clean(d).await;
}

/// A metric's value by name and the values of the labels after the six base ones (the
/// first one matching).
fn metric(ms: &[Metric], name: &str, extra: &[&str]) -> Option<u64> {
    ms.iter()
        .find(|m| m.name == name && m.label_values[6..] == *extra)
        .and_then(|m| m.value.as_ref())
        .map(|v| v.value)
}

async fn pod_metrics(rt: &mut RuntimeServiceClient<Channel>) -> Vec<PodSandboxMetrics> {
    rt.list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pod_metrics
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_describe_and_measure_a_running_pod() {
    let d = Daemon::start("cri-metrics");
    let mut rt = runtime_with_busybox(&d).await;
    let descs = rt
        .list_metric_descriptors(ListMetricDescriptorsRequest {})
        .await
        .unwrap()
        .into_inner()
        .descriptors;
    // cAdvisor's families kubelet's /metrics/cadvisor serves, with their labels.
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_fs_usage_bytes",
        "container_network_transmit_packets_total",
        "container_oom_events_total",
        "container_spec_cpu_quota",
        "container_threads_max",
    ] {
        let d = descs.iter().find(|d| d.name == name).expect(name);
        assert!(!d.help.is_empty());
        assert_eq!(
            d.label_keys[..6],
            ["container", "id", "image", "name", "namespace", "pod"]
        );
    }

    // A container with limits that writes 512 KiB into its writable layer and sends a
    // datagram off the pod (an ARP request at least leaves eth0).
    let mut cfg = container_config(
        "worker",
        "mkdir /data && dd if=/dev/zero of=/data/f bs=1024 count=512 2>/dev/null && \
         echo x | nc -u -w1 192.0.2.1 9; touch /tmp/ready; sleep 1000",
    );
    let linux = cfg.linux.as_mut().unwrap();
    linux.security_context.as_mut().unwrap().readonly_rootfs = false;
    linux.security_context.as_mut().unwrap().run_as_user = Some(Int64Value { value: 0 });
    linux.resources = Some(LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 20_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 64 << 20,
        memory_swap_limit_in_bytes: 64 << 20,
        ..Default::default()
    });
    let (pod, ctr) = run_pod_with(&mut rt, &d, "metered", cfg).await;
    assert!(futures_ready_wait(&rt, &ctr, "test -e /tmp/ready").await);
    // The pod's shim is the small `wharf-shim` built beside `wharf`.
    let shim_exe = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| {
            let cmd = std::fs::read(p.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmd)
                .contains(&format!("--pod\0{pod}"))
                .then(|| std::fs::read_link(p.path().join("exe")).ok())?
        })
        .collect::<Vec<_>>();
    assert_eq!(shim_exe.len(), 1, "{shim_exe:?}");
    assert_eq!(shim_exe[0].file_name().unwrap(), "wharf-shim");
    let all = pod_metrics(&mut rt).await;
    let pm = all
        .iter()
        .find(|m| m.pod_sandbox_id == pod)
        .expect("the pod");
    // Every metric names a family and carries a value for each of its label keys.
    let keys = |name: &str| {
        descs
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.label_keys.len())
    };
    for m in pm
        .metrics
        .iter()
        .chain(pm.container_metrics.iter().flat_map(|c| &c.metrics))
    {
        assert_eq!(keys(&m.name), Some(m.label_values.len()), "{m:?}");
    }
    // The pod's network: its interface and the traffic it sent.
    let net = &pm.metrics;
    assert_eq!(net[0].label_values[1], pod);
    assert_eq!(net[0].label_values[4..6], ["default", "metered"]);
    assert!(
        metric(net, "container_network_transmit_packets_total", &["eth0"]).unwrap() > 0,
        "{net:?}"
    );
    assert!(metric(net, "container_network_transmit_bytes_total", &["eth0"]).unwrap() > 0);

    assert_eq!(pm.container_metrics.len(), 1);
    let cm = &pm.container_metrics[0];
    assert_eq!(cm.container_id, ctr);
    let m = &cm.metrics;
    assert_eq!(m[0].label_values[0], "worker");
    assert_eq!(m[0].label_values[1], ctr);
    assert_eq!(m[0].label_values[4..6], ["default", "metered"]);
    let get = |name: &str| metric(m, name, &[]).unwrap_or_else(|| panic!("{name}: {m:?}"));
    // What the kernel holds for the container's limits.
    assert_eq!(get("container_spec_cpu_period"), 100_000);
    assert_eq!(get("container_spec_cpu_quota"), 20_000);
    assert_eq!(get("container_spec_cpu_shares"), 512);
    assert_eq!(get("container_spec_memory_limit_bytes"), 64 << 20);
    assert_eq!(get("container_spec_memory_swap_limit_bytes"), 64 << 20);
    // Its usage.
    assert!(get("container_memory_usage_bytes") > 0);
    assert!(get("container_memory_working_set_bytes") <= get("container_memory_usage_bytes"));
    assert_eq!(get("container_oom_events_total"), 0);
    assert!(get("container_processes") >= 1);
    assert!(get("container_threads") >= get("container_processes"));
    assert!(get("container_file_descriptors") >= 3);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let started = get("container_start_time_seconds");
    assert!(started <= now && started + 120 > now, "{started} vs {now}");
    assert!(get("container_last_seen") >= started);
    let fs = m
        .iter()
        .find(|x| x.name == "container_fs_usage_bytes")
        .expect("writable layer usage");
    assert!(fs.value.as_ref().unwrap().value >= 512 << 10, "{fs:?}");
    let device = &fs.label_values[6];
    let limit = metric(m, "container_fs_limit_bytes", &[device]).unwrap();
    assert!(limit > fs.value.as_ref().unwrap().value);
    // The block device holding the writable layer is always among the I/O devices (at
    // zero if nothing reached the disk yet), with every family kubelet's node conformance
    // asks for; the filesystem's own inode counts are not the container's, and absent.
    if device.starts_with("/dev/") {
        for family in [
            "container_fs_reads_bytes_total",
            "container_fs_writes_bytes_total",
            "container_fs_reads_total",
            "container_fs_writes_total",
            "container_fs_reads_merged_total",
            "container_fs_sector_reads_total",
            "container_fs_read_seconds_total",
            "container_fs_io_time_seconds_total",
            "container_fs_io_time_weighted_seconds_total",
            "container_fs_io_current",
        ] {
            assert!(
                metric(m, family, &[device]).is_some(),
                "{family} of {device}"
            );
        }
        let usage = |op: &str| {
            m.iter().find(|x| {
                x.name == "container_blkio_device_usage_total"
                    && x.label_values[6] == *device
                    && x.label_values[9] == op
            })
        };
        assert!(usage("Read").is_some() && usage("Write").is_some(), "{m:?}");
    }
    // The filesystem's inodes are the pod's, not each container's.
    assert!(!m.iter().any(|x| x.name.starts_with("container_fs_inodes")));
    assert!(
        metric(net, "container_fs_inodes_free", &[device]).unwrap()
            < metric(net, "container_fs_inodes_total", &[device]).unwrap()
    );
    assert_eq!(get("container_memory_events_max_total"), 0);
    assert_eq!(get("container_memory_events_high_total"), 0);
    assert!(
        metric(
            m,
            "container_memory_failures_total",
            &["pgfault", "container"]
        )
        .unwrap()
            > 0
    );
    assert!(metric(m, "container_ulimits_soft", &["max_open_files"]).unwrap() > 0);

    // PodSandboxStats reports the same interface.
    let stats = rt
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let eth0 = stats
        .linux
        .clone()
        .unwrap()
        .network
        .unwrap()
        .default_interface
        .unwrap();
    assert_eq!(eth0.name, "eth0");
    assert!(eth0.tx_bytes.unwrap().value > 0);
    // kubelet's summary lists every interface, the default among them.
    let linux = stats.linux.as_ref().unwrap();
    let names: Vec<_> = linux
        .network
        .as_ref()
        .unwrap()
        .interfaces
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, ["eth0"]);
    assert!(
        linux
            .process
            .as_ref()
            .unwrap()
            .process_count
            .as_ref()
            .unwrap()
            .value
            >= 1
    );
    let mem = linux.memory.as_ref().unwrap();
    assert!(
        mem.rss_bytes.is_some() && mem.page_faults.is_some(),
        "{mem:?}"
    );
    // Its one container has a limit, so the pod is bounded.
    assert!(mem.available_bytes.unwrap().value <= 64 << 20, "{mem:?}");
    // A container with a limit has what is left under it; CPU in cores comes with the
    // second sample, a second or more after the first.
    let cstats = |rt: &mut RuntimeServiceClient<Channel>| {
        let mut rt = rt.clone();
        let id = ctr.clone();
        async move {
            rt.container_stats(ContainerStatsRequest { container_id: id })
                .await
                .unwrap()
                .into_inner()
                .stats
                .unwrap()
        }
    };
    let first = cstats(&mut rt).await;
    let cmem = first.memory.unwrap();
    assert_eq!(
        cmem.available_bytes.unwrap().value,
        (64 << 20) - cmem.working_set_bytes.unwrap().value
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = cstats(&mut rt).await;
    let cores = second.cpu.unwrap().usage_nano_cores.expect("a rate").value;
    // at most the 0.2 CPU its quota allows, with slack for the accounting's granularity
    assert!(cores <= 300_000_000, "{cores}");
    let pod_cores = rt
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap()
        .linux
        .unwrap()
        .cpu
        .unwrap();
    assert!(pod_cores.usage_nano_cores.is_some(), "{pod_cores:?}");

    // The stream variant says the same in one message; a removed pod is gone from both.
    let mut s = rt
        .stream_pod_sandbox_metrics(StreamPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = s.message().await.unwrap().unwrap();
    assert!(
        first
            .pod_sandbox_metrics
            .iter()
            .any(|m| m.pod_sandbox_id == pod)
    );
    assert!(s.message().await.unwrap().is_none());
    stop_and_remove_pod(&mut rt, &pod).await;
    let all = pod_metrics(&mut rt).await;
    assert!(all.iter().all(|m| m.pod_sandbox_id != pod));
    drop(rt);
    stop_and_check_clean(d).await;
}

/// The descriptors a process holds.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_leave_cri_calls_and_exec_working() {
    let d = Daemon::start("cri-idle");
    let mut rt = runtime_with_busybox(&d).await;
    let mut cfg = container_config("c", "exec sleep 1000");
    cfg.linux = None;
    let (pod, ctr) = run_pod_with(&mut rt, &d, "idle", cfg).await;
    let exec = ExecRequest {
        container_id: ctr.clone(),
        cmd: vec!["echo".into(), "through".into()],
        stdout: true,
        ..Default::default()
    };
    let url = rt.exec(exec.clone()).await.unwrap().into_inner().url;
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let before = fd_count(d.child.id());
    // As an unprivileged local user could: connect, send nothing, hold on.
    let mut idle = Vec::new();
    for _ in 0..2000 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = fd_count(d.child.id());
    assert!(
        held < before + wharf_cri::conn_gate::MAX_WAITING + 64,
        "the daemon holds {held} descriptors (it held {before} before the idle connections)"
    );
    // The CRI answers, and a real exec streams (the URL asked for before the flood too).
    let t = std::time::Instant::now();
    let v = rt.version(VersionRequest::default()).await.unwrap();
    assert_eq!(v.into_inner().runtime_name, "wharf");
    let pods = rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(pods.len(), 1);
    for url in [url, rt.exec(exec).await.unwrap().into_inner().url] {
        let got = drain(&mut stream(&url).await).await;
        assert_eq!(got[&1], b"through\n");
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A connection that says nothing is closed within the handshake timeout.
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let t = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(
        wharf_cri::conn_gate::HANDSHAKE_TIMEOUT + Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut silent, &mut buf),
    )
    .await
    .expect("the silent connection was never closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    assert!(t.elapsed() >= wharf_cri::conn_gate::HANDSHAKE_TIMEOUT - Duration::from_secs(1));
    drop(idle);
    stop_and_remove_pod(&mut rt, &pod).await;
    stop_and_check_clean(d).await;
}

/// A pod config of `d` with its own user namespace mapping `0..65536` to `host..`.
fn userns_pod_config(d: &Daemon, name: &str, host: u32) -> PodSandboxConfig {
    let mut config = pod_config(d, name);
    let map = vec![IdMapping {
        host_id: host,
        container_id: 0,
        length: 65536,
    }];
    let ns = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
        .unwrap();
    ns.userns_options = Some(UserNamespace {
        mode: NamespaceMode::Pod as i32,
        uids: map.clone(),
        gids: map,
    });
    config
}

#[tokio::test(flavor = "current_thread")]
async fn user_namespaced_pods_run_with_kubelets_maps_and_id_mapped_volumes() {
    let d = Daemon::start("cri-userns");
    let mut rt = runtime_with_busybox(&d).await;
    let features = rt
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .runtime_handlers[0]
        .features
        .unwrap();
    assert!(features.user_namespaces, "kubelet admits hostUsers: false");

    // A volume as kubelet gives a user-namespaced pod: id-mapped with the pod's maps.
    let host = 300_000;
    let vol = d.w.path("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("from-host"), "x").unwrap();
    let config = userns_pod_config(&d, "uns", host);
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let mut cfg = container_config(
        "c",
        "cat /proc/self/uid_map; id -u; stat -c %u /vol/from-host; touch /vol/made; \
         ip addr add 10.99.0.1/32 dev lo && echo netadmin-ok; sleep 600",
    );
    let sc = cfg
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.run_as_user = Some(Int64Value { value: 0 });
    sc.run_as_group = Some(Int64Value { value: 0 });
    sc.readonly_rootfs = false;
    // CAP_NET_ADMIN, which the pod's root holds over its own network only.
    sc.capabilities = Some(Capability {
        add_capabilities: vec!["NET_ADMIN".into()],
        ..Default::default()
    });
    sc.namespace_options = config
        .linux
        .as_ref()
        .unwrap()
        .security_context
        .as_ref()
        .unwrap()
        .namespace_options
        .clone();
    let ns_map = sc
        .namespace_options
        .as_ref()
        .unwrap()
        .userns_options
        .clone()
        .unwrap();
    cfg.mounts = vec![Mount {
        container_path: "/vol".into(),
        host_path: vol.display().to_string(),
        uid_mappings: ns_map.uids.clone(),
        gid_mappings: ns_map.gids.clone(),
        ..Default::default()
    }];
    let ctr = start_in_pod(&mut rt, &pod, config.clone(), cfg).await;
    let log = d.w.path("logs/uns/c/0.log");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let done = wait_until(Duration::from_secs(20), || read().contains("netadmin-ok"));
    let text = read();
    assert!(done, "{text}");
    assert!(
        text.contains(&format!("0     {host}      65536")) || text.contains(&format!(" 0 {host} ")),
        "{text}"
    );
    let stdout: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    assert_eq!(
        stdout[1..3],
        ["0", "0"],
        "root inside, the host root's file is root's: {text}"
    );
    // What the pod's root made in the volume is the host's root's on disk.
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(vol.join("made")).unwrap()),
        0
    );
    // The host sees the container's root as the mapped id.
    let status = rt
        .container_status(ContainerStatusRequest {
            container_id: ctr.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let pid = serde_json::from_str::<serde_json::Value>(&status.info["info"]).unwrap()["pid"]
        .as_i64()
        .unwrap();
    let uid_line = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap()
        .to_string();
    assert!(uid_line.contains(&host.to_string()), "{uid_line}");
    // The sandbox reports its maps.
    let st = rt
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    let u = st
        .linux
        .unwrap()
        .namespaces
        .unwrap()
        .options
        .unwrap()
        .userns_options
        .unwrap();
    assert_eq!(u.mode, NamespaceMode::Pod as i32);
    assert_eq!(u.uids[0].host_id, host);

    // A second pod whose range overlaps the first's is refused, naming the cause; one of
    // its own runs.
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(userns_pod_config(&d, "overlap", host + 100)),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("overlap"), "{e:?}");
    // Maps kubelet would never send are refused: root unmapped, host root mapped in.
    for (name, container, host_id) in [("noroot", 1, 400_000), ("hostroot", 0, 0)] {
        let mut c = userns_pod_config(&d, name, 400_000);
        let ns = c
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
            .and_then(|n| n.userns_options.as_mut())
            .unwrap();
        ns.uids[0].container_id = container;
        ns.uids[0].host_id = host_id;
        let e = rt
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(c),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name}: {e:?}");
        assert!(e.message().contains("uid map"), "{name}: {e:?}");
    }
    stop_and_remove_pod(&mut rt, &pod).await;
    stop_and_check_clean(d).await;
}

/// `daemon.runtime-handlers` names more handlers for the one runtime (as containerd's
/// `runtimes.<name>` tables do; node e2e's RuntimeClass specs ask for "test-handler"):
/// Status lists them with the default's features, a pod asking for one runs and shows it,
/// and a name not configured is refused, naming it.
#[tokio::test(flavor = "current_thread")]
async fn configured_runtime_handlers_are_served_and_listed_and_others_refused() {
    let d = Daemon::start_with("cri-handlers", |w| {
        let cfg = serde_json::json!({"daemon": {"runtime-handlers": ["test-handler"]}});
        std::fs::write(w.path("no-config.json"), cfg.to_string()).unwrap();
    });
    let mut rt = RuntimeServiceClient::new(connect(&d.socket).await);
    let handlers = rt
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .runtime_handlers;
    let names: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["", "test-handler"]);
    assert_eq!(handlers[0].features, handlers[1].features);
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(pod_config(&d, "handled")),
            runtime_handler: "test-handler".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let status = rt
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(status.runtime_handler, "test-handler");
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(pod_config(&d, "unhandled")),
            runtime_handler: "other-handler".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("\"other-handler\""), "{e:?}");
    stop_and_remove_pod(&mut rt, &pod).await;
    drop(rt);
    stop_and_check_clean(d).await;
}

/// A container that fails after output no newline ended: its status says Error with no
/// message of Wharf's (kubelet appends the termination message to it), and its log ends
/// in a partial entry, so kubelet's FallbackToLogsOnError reads back exactly "DONE", as
/// with containerd.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_containers_last_output_is_its_termination_message_as_written() {
    let d = Daemon::start("cri-termination");
    let mut rt = runtime_with_busybox(&d).await;
    let mut cfg = container_config("t", "printf DONE; exit 1");
    cfg.linux = None;
    let (pod, ctr) = run_pod_with(&mut rt, &d, "term", cfg).await;
    let mut status = None;
    for _ in 0..100 {
        let s = rt
            .container_status(ContainerStatusRequest {
                container_id: ctr.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        if s.state == ContainerState::ContainerExited as i32 {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = status.expect("the container exited");
    assert_eq!((s.exit_code, s.reason.as_str()), (1, "Error"));
    assert_eq!(s.message, "", "no message of our own for a plain failure");
    let logged = std::fs::read_to_string(d.w.path("logs/term/t/0.log")).unwrap();
    assert!(logged.ends_with(" stdout P DONE\n"), "{logged:?}");
    stop_and_remove_pod(&mut rt, &pod).await;
    drop(rt);
    stop_and_check_clean(d).await;
}
