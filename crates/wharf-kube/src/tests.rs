//! Whole manifests through `parse` and `plan`.

use std::path::PathBuf;

use super::*;
use wharf_engine::model::{NetworkMode, RestartPolicy, SeccompMode, VolumeMount};

fn opts() -> PlanOptions {
    PlanOptions {
        seccomp_dir: "/var/lib/wharf/seccomp".into(),
        node_name: "node-1".into(),
        node_cpus: 4,
        node_memory: 8 << 30,
    }
}

fn play(yaml: &str) -> wharf_engine::Result<PlayPlan> {
    plan_with(&parse(yaml)?, None, &opts())
}

fn err(yaml: &str) -> String {
    match play(yaml) {
        Ok(p) => panic!("expected an error, got a plan: {p:#?}"),
        Err(e) => e.to_string(),
    }
}

fn env<'a>(c: &'a wharf_engine::model::ContainerSpec, name: &str) -> Option<&'a str> {
    c.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn vol_mount(source: &str, dest: &str, readonly: bool) -> VolumeMount {
    VolumeMount {
        source: source.into(),
        destination: dest.into(),
        readonly,
        kind: VOLUME_MOUNT_KIND.into(),
        options: vec![],
    }
}

const FULL: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  LOG_LEVEL: debug
  index.html: "<h1>hi</h1>\n"
  feature.flag: "on"
binaryData:
  logo.png: iVBORw0K
---
apiVersion: v1
kind: Secret
metadata:
  name: db
type: Opaque
data:
  password: czNjcjN0
  user: YWRtaW4=
stringData:
  user: root
---
apiVersion: v1
kind: Pod
metadata:
  name: shop
  namespace: prod
  labels:
    app: shop
  annotations:
    team: payments
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 10
  shareProcessNamespace: true
  hostname: shop-host
  securityContext:
    runAsUser: 1000
    runAsGroup: 1000
    runAsNonRoot: true
    fsGroup: 2000
    seccompProfile:
      type: RuntimeDefault
  initContainers:
  - name: init-content
    image: registry.local/tools:1.2
    command: ["sh", "-c", "cp /config/index.html /www/"]
    volumeMounts:
    - name: www
      mountPath: /www
    - name: config
      mountPath: /config
  containers:
  - name: web
    image: registry.local/httpd:latest
    imagePullPolicy: IfNotPresent
    command: ["httpd"]
    args: ["-f", "-p", "$(PORT)", "-h", "/www"]
    workingDir: /www
    ports:
    - containerPort: 80
      hostPort: 8080
    - containerPort: 81
      hostPort: 8081
      hostIP: 127.0.0.1
      protocol: UDP
    - containerPort: 9090
    env:
    - name: PORT
      value: "80"
    - name: URL
      value: http://$(MY_IP):$(PORT)/
    - name: MY_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: DB_PASSWORD
      valueFrom:
        secretKeyRef:
          name: db
          key: password
    - name: POD
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: NS
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: TEAM
      valueFrom:
        fieldRef:
          fieldPath: metadata.annotations['team']
    - name: CPU_MILLI
      valueFrom:
        resourceFieldRef:
          resource: limits.cpu
          divisor: 1m
    envFrom:
    - prefix: CFG_
      configMapRef:
        name: web-config
    resources:
      limits:
        cpu: 500m
        memory: 128Mi
      requests:
        cpu: 250m
        memory: 64Mi
    securityContext:
      runAsUser: 1001
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities:
        add: [NET_BIND_SERVICE]
        drop: [ALL]
    volumeMounts:
    - name: www
      mountPath: /www
      readOnly: true
    - name: config
      mountPath: /etc/web/log-level
      subPath: LOG_LEVEL
    - name: secrets
      mountPath: /run/secrets/db
    - name: cache
      mountPath: /cache
  - name: logger
    image: registry.local/tools:1.2
    imagePullPolicy: Always
    stdin: true
    tty: true
    command: ["sh", "-c", "tail -F /www/access.log"]
    env:
    - name: DB_USER
      valueFrom:
        secretKeyRef:
          name: db
          key: user
    volumeMounts:
    - name: www
      mountPath: /www
    securityContext:
      privileged: true
      seccompProfile:
        type: Unconfined
  volumes:
  - name: www
    emptyDir: {}
  - name: cache
    emptyDir:
      medium: Memory
      sizeLimit: 64Mi
  - name: config
    configMap:
      name: web-config
      items:
      - key: index.html
        path: index.html
      - key: LOG_LEVEL
        path: LOG_LEVEL
        mode: 0600
  - name: secrets
    secret:
      secretName: db
      defaultMode: 0400
  - name: host-logs
    hostPath:
      path: /var/log/shop
      type: DirectoryOrCreate
"#;

#[test]
fn a_full_pod_translates_field_by_field() {
    let plan = play(FULL).unwrap();
    assert!(plan.warnings.is_empty(), "{:#?}", plan.warnings);

    // The pod.
    let pod = &plan.pod;
    assert_eq!(pod.name.as_deref(), Some("shop"));
    assert_eq!(pod.namespace.as_deref(), Some("prod"));
    assert_eq!(pod.hostname.as_deref(), Some("shop-host"));
    assert_eq!(pod.network, NetworkMode::Default);
    assert!(pod.share_pid && !pod.host_pid && !pod.host_ipc);
    assert_eq!(pod.restart, RestartPolicy::OnFailure);
    assert_eq!(pod.labels.get("app").map(String::as_str), Some("shop"));
    assert_eq!(
        pod.ports,
        vec![
            wharf_engine::model::PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: None
            },
            wharf_engine::model::PortMapping {
                host_port: 8081,
                container_port: 81,
                protocol: "udp".into(),
                host_ip: Some("127.0.0.1".into())
            },
        ]
    );
    assert_eq!(plan.grace_period, Some(10));

    // The init container.
    assert_eq!(plan.init_containers.len(), 1);
    let init = &plan.init_containers[0];
    assert!(init.init);
    assert_eq!(init.name.as_deref(), Some("shop-init-content"));
    assert_eq!(
        init.entrypoint,
        Some(vec![
            "sh".into(),
            "-c".into(),
            "cp /config/index.html /www/".into()
        ])
    );
    assert_eq!(init.command, None);
    assert_eq!(init.user.as_deref(), Some("1000:1000"));
    assert_eq!(init.groups, vec![2000]);
    assert!(init.run_as_non_root);
    assert_eq!(
        init.mounts,
        vec![
            vol_mount("www", "/www", false),
            vol_mount("config", "/config", true)
        ]
    );
    assert_eq!(init.stop_timeout, Some(10));
    assert_eq!(
        init.labels.get(LABEL_CONTAINER_NAME).map(String::as_str),
        Some("init-content")
    );
    assert_eq!(
        init.labels.get(LABEL_POD_NAMESPACE).map(String::as_str),
        Some("prod")
    );

    // The web container.
    assert_eq!(plan.containers.len(), 2);
    let web = &plan.containers[0];
    assert!(!web.init);
    assert_eq!(web.name.as_deref(), Some("shop-web"));
    assert_eq!(web.image, "registry.local/httpd:latest");
    assert_eq!(web.entrypoint, Some(vec!["httpd".into()]));
    assert_eq!(
        web.command,
        Some(["-f", "-p", "80", "-h", "/www"].map(String::from).to_vec())
    );
    assert_eq!(web.workdir.as_deref(), Some("/www"));
    // envFrom first (prefixed), then env; $(VAR) only sees earlier variables.
    let names: Vec<&str> = web.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "CFG_LOG_LEVEL",
            "CFG_feature.flag",
            "CFG_index.html",
            "PORT",
            "URL",
            "MY_IP",
            "DB_PASSWORD",
            "POD",
            "NS",
            "TEAM",
            "CPU_MILLI"
        ]
    );
    assert_eq!(env(web, "CFG_LOG_LEVEL"), Some("debug"));
    // binaryData keys are files, never variables (as in the kubelet).
    assert_eq!(env(web, "CFG_logo.png"), None);
    assert_eq!(env(web, "URL"), Some("http://$(MY_IP):80/"));
    assert_eq!(env(web, "MY_IP"), Some(POD_IP_PLACEHOLDER));
    assert_eq!(env(web, "DB_PASSWORD"), Some("s3cr3t"));
    assert_eq!(env(web, "POD"), Some("shop"));
    assert_eq!(env(web, "NS"), Some("prod"));
    assert_eq!(env(web, "TEAM"), Some("payments"));
    assert_eq!(env(web, "CPU_MILLI"), Some("500"));
    assert_eq!(web.memory, Some(128 << 20));
    assert_eq!(web.cpus, Some(0.5));
    assert_eq!(web.cpu_shares, Some(256));
    assert_eq!(web.memory_reservation, Some(64 << 20));
    assert_eq!(web.user.as_deref(), Some("1001:1000"));
    assert!(web.read_only && web.no_new_privileges && !web.privileged);
    assert_eq!(web.cap_add, vec!["CAP_NET_BIND_SERVICE"]);
    assert_eq!(web.cap_drop, vec!["ALL"]);
    assert_eq!(web.seccomp, SeccompMode::RuntimeDefault);
    assert_eq!(
        web.mounts,
        vec![
            vol_mount("www", "/www", true),
            vol_mount("config/LOG_LEVEL", "/etc/web/log-level", true),
            vol_mount("secrets", "/run/secrets/db", true),
            vol_mount("cache", "/cache", false),
        ]
    );
    let r = volume_ref(&web.mounts[1]).unwrap();
    assert_eq!(r.volume, "config");
    assert_eq!(r.sub_path, Some(std::path::Path::new("LOG_LEVEL")));
    assert_eq!(
        volume_ref(&web.mounts[0]),
        Some(VolumeRef {
            volume: "www",
            sub_path: None
        })
    );

    // The logger: stringData wins over data; privileged and unconfined.
    let logger = &plan.containers[1];
    assert_eq!(env(logger, "DB_USER"), Some("root"));
    assert!(logger.privileged && logger.stdin && logger.tty);
    assert_eq!(logger.seccomp, SeccompMode::Unconfined);
    assert_eq!(logger.memory, None);

    // Volumes.
    let by_name = |n: &str| plan.volumes.iter().find(|v| v.name == n).unwrap();
    assert_eq!(plan.volumes.len(), 5);
    assert_eq!(
        by_name("www").source,
        VolumeSource::EmptyDir {
            memory: false,
            size_limit: None
        }
    );
    assert_eq!(by_name("www").fs_group, Some(2000));
    assert_eq!(
        by_name("cache").source,
        VolumeSource::EmptyDir {
            memory: true,
            size_limit: Some(64 << 20)
        }
    );
    assert_eq!(
        by_name("config").source,
        VolumeSource::Files {
            origin: "ConfigMap web-config".into(),
            files: vec![
                VolumeFile {
                    path: "index.html".into(),
                    data: b"<h1>hi</h1>\n".to_vec(),
                    mode: 0o644
                },
                VolumeFile {
                    path: "LOG_LEVEL".into(),
                    data: b"debug".to_vec(),
                    mode: 0o600
                },
            ],
            in_memory: false,
        }
    );
    match &by_name("secrets").source {
        VolumeSource::Files {
            files, in_memory, ..
        } => {
            assert!(in_memory);
            let listed: Vec<(PathBuf, &[u8], u32)> = files
                .iter()
                .map(|f| (f.path.clone(), f.data.as_slice(), f.mode))
                .collect();
            assert_eq!(
                listed,
                vec![
                    (PathBuf::from("password"), &b"s3cr3t"[..], 0o400),
                    (PathBuf::from("user"), &b"root"[..], 0o400)
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        by_name("host-logs").source,
        VolumeSource::HostPath {
            path: "/var/log/shop".into(),
            kind: HostPathType::DirectoryOrCreate
        }
    );
    assert_eq!(by_name("host-logs").fs_group, None);

    // Images: each once, the strictest policy wins.
    assert_eq!(
        plan.images,
        vec![
            ImagePull {
                image: "registry.local/tools:1.2".into(),
                policy: PullPolicy::Always
            },
            ImagePull {
                image: "registry.local/httpd:latest".into(),
                policy: PullPolicy::IfNotPresent
            },
        ]
    );

    // The pod IP is put in by the engine, at each bundle.
    assert_eq!(env(&plan.containers[0], "MY_IP"), Some(POD_IP_PLACEHOLDER));
}

#[test]
fn a_minimal_pod_gets_kubernetes_defaults() {
    let plan = play(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a-fairly-long-pod-name.with-dots.and-parts-that-go-on-past-six-three-chars\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    )
    .unwrap();
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    assert_eq!(plan.pod.restart, RestartPolicy::Always);
    assert_eq!(plan.grace_period, Some(DEFAULT_GRACE_PERIOD));
    assert_eq!(plan.pod.namespace.as_deref(), Some("default"));
    // The hostname is the pod name cut to 63 characters, without a trailing '-'.
    let h = plan.pod.hostname.as_deref().unwrap();
    // Cut to 63 characters ("...-six-"), then without the trailing '-'.
    assert_eq!(
        h,
        "a-fairly-long-pod-name.with-dots.and-parts-that-go-on-past-six"
    );
    assert!(plan.pod.dns == Default::default());
    let c = &plan.containers[0];
    assert_eq!((c.entrypoint.as_ref(), c.command.as_ref()), (None, None));
    assert_eq!(c.user, None);
    assert_eq!(c.seccomp, SeccompMode::RuntimeDefault);
    assert_eq!(c.stop_timeout, Some(DEFAULT_GRACE_PERIOD));
    assert!(c.env.is_empty() && c.mounts.is_empty());
    assert_eq!(plan.images[0].policy, PullPolicy::Always);
}

#[test]
fn unknown_and_unsupported_fields_are_warned_about_by_path() {
    let plan = play(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a: b}
extra: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  creationTimestamp: null
spec:
  nodeSelector: {disk: ssd}
  serviceAccountName: builder
  dnsPolicy: ClusterFirst
  enableServiceLinks: true
  schedulerName: default-scheduler
  containers:
  - name: web
    image: nginx:1.25
    imagePulPolicy: Never
    terminationMessagePath: /dev/termination-log
    livenessProbe:
      grpc: {port: 80}
      gprcTimeout: 3
    stdinOnce: true
    resources:
      limits: {nvidia.com/gpu: 1}
    securityContext:
      seLinuxOptions: {level: "s0:c1"}
    volumeMounts:
    - name: data
      mountPath: /data
      mountPropagaton: None
  volumes:
  - name: data
    emptyDir:
      sizeLimit: 1Gi
      medum: Memory
status: {}
"#,
    )
    .unwrap();
    let expected = [
        "document 1 (Service web): a ClusterIP Service without a node port is ignored: there is no cluster network or service proxy on one host (a NodePort Service's ports, or a container's hostPort, are published on this host)",
        "document 2 (ConfigMap cfg): extra is not supported and is ignored",
        "spec.nodeSelector is not supported and is ignored: scheduling has no meaning on a single host",
        "spec.containers[0].imagePulPolicy is not supported and is ignored",
        "spec.containers[0].livenessProbe.gprcTimeout is not supported and is ignored",
        "spec.containers[0].securityContext.seLinuxOptions is not supported and is ignored: SELinux labels are not applied",
        "spec.containers[0].volumeMounts[0].mountPropagaton is not supported and is ignored",
        "spec.containers[0].resources.limits.nvidia.com/gpu is not supported and is ignored: only cpu and memory are limited",
        "spec.volumes[0].emptyDir.medum is not supported and is ignored",
        "spec.containers[0].stdinOnce is not supported and is ignored: stdin stays open while the container runs",
        "spec.serviceAccountName \"builder\" is not supported and is ignored: no service account token is mounted",
    ];
    for e in expected {
        assert!(
            plan.warnings.iter().any(|w| w == e),
            "missing warning {e:?} in {:#?}",
            plan.warnings
        );
    }
    assert_eq!(plan.warnings.len(), expected.len(), "{:#?}", plan.warnings);
    // A disk emptyDir's sizeLimit is enforced by eviction: the shim is told.
    assert_eq!(plan.pod.disk_limits.get("data"), Some(&(1 << 30)));
}

const POD_HEAD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n";

fn pod(spec: &str) -> String {
    format!("{POD_HEAD}{spec}")
}

#[test]
fn missing_references_are_errors_unless_optional() {
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n    env:\n    - name: A\n      valueFrom:\n        configMapKeyRef: {name: nope, key: k}\n",
    ));
    assert_eq!(
        e,
        "spec.containers[0].env[0].valueFrom.configMapKeyRef: ConfigMap \"nope\" is not in the manifest (add it, give it with --configmap FILE, create it with wharf configmap|secret create, or set optional: true)"
    );
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {k: v}\n---\n";
    let e = err(&format!(
        "{cm}{}",
        pod(
            "  containers:\n  - name: c\n    image: i\n    env:\n    - name: A\n      valueFrom:\n        configMapKeyRef: {name: cm, key: other}\n"
        )
    ));
    assert_eq!(
        e,
        "spec.containers[0].env[0].valueFrom.configMapKeyRef: ConfigMap \"cm\" has no key \"other\" (set optional: true if it may be missing)"
    );
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n    envFrom:\n    - secretRef: {name: s}\n",
    ));
    assert!(
        e.starts_with(
            "spec.containers[0].envFrom[0].secretRef: Secret \"s\" is not in the manifest"
        ),
        "{e}"
    );
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: v\n    secret: {secretName: s}\n",
    ));
    assert!(
        e.starts_with("spec.volumes[0].secret.secretName: Secret \"s\" is not in the manifest"),
        "{e}"
    );
    let e = err(&format!(
        "{cm}{}",
        pod(
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: v\n    configMap:\n      name: cm\n      items: [{key: x, path: x}]\n"
        )
    ));
    assert_eq!(
        e,
        "spec.volumes[0].configMap.items[0].key: ConfigMap \"cm\" has no key \"x\""
    );
    // Objects in another namespace are invisible, as in Kubernetes.
    let e = err(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: other}}\nstringData: {{k: v}}\n---\n{}",
        pod("  containers:\n  - name: c\n    image: i\n    envFrom:\n    - secretRef: {name: s}\n")
    ));
    assert!(
        e.contains("is in namespace \"other\", not the pod's namespace \"default\""),
        "{e}"
    );

    // Optional: the variable or volume content is simply absent.
    let plan = play(&format!(
        "{cm}{}",
        pod("  containers:\n  - name: c\n    image: i\n    env:\n    - name: A\n      valueFrom:\n        configMapKeyRef: {name: cm, key: other, optional: true}\n    - name: B\n      valueFrom:\n        secretKeyRef: {name: nope, key: k, optional: true}\n    envFrom:\n    - configMapRef: {name: nope, optional: true}\n  volumes:\n  - name: v\n    secret: {secretName: nope, optional: true}\n")
    ))
    .unwrap();
    assert!(plan.containers[0].env.is_empty());
    assert_eq!(
        plan.volumes[0].source,
        VolumeSource::Files {
            origin: "Secret nope".into(),
            files: vec![],
            in_memory: true
        }
    );
}

#[test]
fn invalid_pods_are_errors_naming_the_field() {
    let cases: &[(&str, &str)] = &[
        (
            "  containers:\n  - name: web\n    image: i\n  - name: web\n    image: i\n",
            "spec.containers[1].name: container name \"web\" is already used by spec.containers[0]",
        ),
        (
            "  initContainers:\n  - name: web\n    image: i\n  containers:\n  - name: web\n    image: i\n",
            "spec.containers[0].name: container name \"web\" is already used by spec.initContainers[0]",
        ),
        (
            "  containers:\n  - name: Web_1\n    image: i\n",
            "spec.containers[0].name \"Web_1\" is invalid: must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
        ),
        (
            "  containers:\n  - name: c\n",
            "spec.containers[0].image is required",
        ),
        (
            "  containers: []\n",
            "spec.containers: a pod needs at least one container",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: data, mountPath: /data}\n",
            "spec.containers[0].volumeMounts[0].name: no volume named \"data\" in spec.volumes",
        ),
        (
            "  containers:\n  - name: a\n    image: i\n    ports: [{containerPort: 80, hostPort: 8080}]\n  - name: b\n    image: i\n    ports: [{containerPort: 81, hostPort: 8080, hostIP: 127.0.0.1}]\n",
            "spec.containers[1].ports[0].hostPort 8080/tcp is already used by spec.containers[0].ports[0]",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    ports: [{containerPort: 80, protocol: SCTP, hostPort: 1}]\n",
            "spec.containers[0].ports[0].protocol SCTP is not supported (TCP or UDP)",
        ),
        (
            "  restartPolicy: Sometimes\n  containers:\n  - name: c\n    image: i\n",
            "spec.restartPolicy \"Sometimes\" is invalid (Always, OnFailure or Never)",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: v, mountPath: /v, subPath: ../../etc}\n  volumes:\n  - {name: v, emptyDir: {}}\n",
            "spec.containers[0].volumeMounts[0].subPath \"../../etc\" must be a relative path without '..'",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: data\n    nfs: {server: nas, path: /x}\n",
            "spec.volumes[0] (data): nfs volumes are not supported (supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim, image)",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: tools\n    image: {pullPolicy: Always}\n",
            "spec.volumes[0].image.reference is required",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: tools\n    image: {reference: tools:1, pullPolicy: Sometimes}\n",
            "spec.volumes[0].image.pullPolicy \"Sometimes\" is invalid (Always, IfNotPresent or Never)",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: data, mountPath: /d, subPath: x/../../y}\n  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: data}\n",
            "spec.containers[0].volumeMounts[0].subPath \"x/../../y\" must be a relative path without '..'",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - {name: v, emptyDir: {}, hostPath: {path: /x}}\n",
            "spec.volumes[0] (v): a volume must have exactly one source",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - {name: v, hostPath: {path: /x/../etc}}\n",
            "spec.volumes[0].hostPath.path \"/x/../etc\" must be an absolute path without '..'",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    ports: [{containerPort: 70000}]\n",
            "manifest document 1 (Pod p): spec.containers[0].ports[0].containerPort: invalid value: integer `70000`, expected u16",
        ),
        (
            "  shareProcessNamespace: true\n  hostPID: true\n  containers:\n  - name: c\n    image: i\n",
            "spec: shareProcessNamespace and hostPID cannot both be true",
        ),
        (
            "  dnsPolicy: None\n  containers:\n  - name: c\n    image: i\n",
            "spec.dnsConfig.nameservers: dnsPolicy None needs at least one name server",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    env:\n    - name: A\n      value: x\n      valueFrom:\n        fieldRef: {fieldPath: metadata.name}\n",
            "spec.containers[0].env[0]: value and valueFrom cannot both be set",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    env:\n    - name: A\n      valueFrom:\n        fieldRef: {fieldPath: status.hostIP}\n",
            "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath \"status.hostIP\" is not supported here",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: v, mountPath: /v}\n    - {name: v, mountPath: /v}\n  volumes:\n  - {name: v, emptyDir: {}}\n",
            "spec.containers[0].volumeMounts[1].mountPath \"/v\" is mounted twice in the container",
        ),
        (
            "  containers:\n  - name: c\n    image: i\n  volumes:\n  - {name: v, emptyDir: {}}\n  - {name: v, emptyDir: {}}\n",
            "spec.volumes[1].name: volume \"v\" is defined twice",
        ),
        (
            "  hostNetwork: true\n  containers:\n  - name: c\n    image: i\n    ports: [{containerPort: 80, hostPort: 8080}]\n",
            "spec.containers[0].ports[0].hostPort must equal containerPort on the host's network",
        ),
    ];
    for (spec, want) in cases {
        let e = err(&pod(spec));
        assert!(
            e.starts_with(want),
            "for\n{spec}\nwant {want:?}\ngot  {e:?}"
        );
    }
}

#[test]
fn manifest_level_errors() {
    let e = parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap_err();
    assert!(e.to_string().contains("holds no Pod"), "{e}");
    let e = parse("kind: Pod\nmetadata: {name: a}\nspec:\n  containers: [\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("manifest document 1: invalid YAML: "),
        "{e}"
    );
    assert!(e.to_string().contains("line"), "{e}");
    let e = parse("apiVersion: apps/v1\nkind: Pod\nmetadata: {name: a}\nspec: {}\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("apiVersion \"apps/v1\" is not supported"),
        "{e}"
    );
    let e =
        parse("apiVersion: v1\nkind: Pod\nmetadata: {generateName: a-}\nspec: {}\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("metadata.generateName is not supported"),
        "{e}"
    );
    let e = parse("- a\n- b\n").unwrap_err();
    assert!(e.to_string().contains("is not a Kubernetes object"), "{e}");
    let e = parse("apiVersion: v1\nmetadata: {name: a}\n").unwrap_err();
    assert!(e.to_string().contains("has no kind"), "{e}");
    let e = parse(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: '%%%'}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {}\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("data.k: not valid base64"), "{e}");

    // Two pods: plan needs a name; --down gets both.
    let two = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: i}]}\n";
    let m = parse(two).unwrap();
    assert_eq!(m.pod_names(), vec!["a", "b"]);
    let e = plan_with(&m, None, &opts()).unwrap_err().to_string();
    assert_eq!(
        e,
        "the manifest holds 2 pods (a, b); wharf play runs one pod: name it"
    );
    assert_eq!(
        plan_with(&m, Some("b"), &opts())
            .unwrap()
            .pod
            .name
            .as_deref(),
        Some("b")
    );
    let e = plan_with(&m, Some("c"), &opts()).unwrap_err().to_string();
    assert_eq!(e, "the manifest has no pod \"c\" (it has a, b)");
    let e = parse(&format!("{two}---\n{}", two.split("---\n").next().unwrap())).unwrap_err();
    assert_eq!(e.to_string(), "the manifest defines pod \"a\" twice");
}

#[test]
fn env_expansion_downward_api_and_the_pod_ip() {
    let plan = play(&pod(r#"  containers:
  - name: app
    image: i
    command: ["/app", "--listen=$(POD_IP):$(PORT)", "--escaped=$$(PORT)", "--unknown=$(NOPE)"]
    args: ["$(NODE)"]
    env:
    - name: LATER
      value: "$(PORT)"
    - name: PORT
      value: "8080"
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: NODE
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    - name: SA
      valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}
    - name: LABEL
      valueFrom: {fieldRef: {fieldPath: "metadata.labels['missing']"}}
    - name: MEM
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    - name: SIDE_CPU
      valueFrom: {resourceFieldRef: {containerName: side, resource: requests.cpu, divisor: 1m}}
    - name: PORT
      value: "9090"
  - name: side
    image: i
    resources: {limits: {cpu: "1.5"}}
"#))
    .unwrap();
    let c = &plan.containers[0];
    // A reference to a later variable is not expanded; a redefinition keeps the first
    // position with the last value.
    assert_eq!(env(c, "LATER"), Some("$(PORT)"));
    assert_eq!(env(c, "PORT"), Some("9090"));
    assert_eq!(c.env.iter().filter(|(k, _)| k == "PORT").count(), 1);
    assert_eq!(env(c, "NODE"), Some("node-1"));
    assert_eq!(env(c, "SA"), Some("default"));
    assert_eq!(env(c, "LABEL"), Some(""));
    // No limit: the host's memory.
    assert_eq!(env(c, "MEM"), Some("8192"));
    // The side container's request defaults to its limit.
    assert_eq!(env(c, "SIDE_CPU"), Some("1500"));
    assert_eq!(
        c.entrypoint.as_deref().unwrap(),
        [
            "/app".to_string(),
            format!("--listen={POD_IP_PLACEHOLDER}:9090"),
            "--escaped=$(PORT)".into(),
            "--unknown=$(NOPE)".into()
        ]
    );
    assert_eq!(c.command.as_deref().unwrap(), ["node-1".to_string()]);
    assert_eq!(env(c, "POD_IP"), Some(POD_IP_PLACEHOLDER));
}

#[test]
fn secrets_config_maps_and_file_modes() {
    let plan = play(&format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: tls}}
type: kubernetes.io/tls
data:
  tls.crt: |
    LS0tLS1CRUdJTiBD
    RVJUSUZJQ0FURS0t
  tls.key: AAEC/w==
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg}}
data:
  a: "1"
  nested: x
---
{}"#,
        pod(r#"  containers:
  - name: c
    image: i
    volumeMounts:
    - {name: tls, mountPath: /tls}
    - {name: cfg, mountPath: /cfg}
    - {name: info, mountPath: /info}
  volumes:
  - name: tls
    secret:
      secretName: tls
      defaultMode: 256
      items:
      - {key: tls.crt, path: certs/server.crt, mode: 0444}
      - {key: tls.key, path: private/server.key}
  - name: cfg
    configMap:
      name: cfg
      defaultMode: 0o755
  - name: info
    downwardAPI:
      defaultMode: 0600
      items:
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory}}
"#)
    ))
    .unwrap();
    let files = |n: &str| match &plan.volumes.iter().find(|v| v.name == n).unwrap().source {
        VolumeSource::Files { files, .. } => files
            .iter()
            .map(|f| (f.path.to_str().unwrap().to_string(), f.data.clone(), f.mode))
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        files("tls"),
        vec![
            (
                "certs/server.crt".into(),
                b"-----BEGIN CERTIFICATE--".to_vec(),
                0o444
            ),
            ("private/server.key".into(), vec![0, 1, 2, 255], 0o400),
        ]
    );
    assert_eq!(
        files("cfg"),
        vec![
            ("a".into(), b"1".to_vec(), 0o755),
            ("nested".into(), b"x".to_vec(), 0o755)
        ]
    );
    assert_eq!(
        files("info"),
        vec![
            ("name".into(), b"p".to_vec(), 0o600),
            ("mem".into(), (8u64 << 30).to_string().into_bytes(), 0o600)
        ]
    );
    // Projected volumes are mounted read-only even without readOnly.
    assert!(plan.containers[0].mounts.iter().all(|m| m.readonly));

    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: v\n    configMap: {name: x, optional: true, defaultMode: 0999}\n",
    ));
    assert!(
        e.contains(
            "spec.volumes[0].configMap.defaultMode: file mode \"0999\" is not an octal mode"
        ),
        "{e}"
    );
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: v\n    configMap: {name: x, optional: true, defaultMode: 1000}\n",
    ));
    assert!(e.contains("outside 0..0777"), "{e}");
}

#[test]
fn host_namespaces_sidecars_dns_and_hosts() {
    let plan = play(&pod(r#"  hostNetwork: true
  hostIPC: true
  hostPID: true
  hostname: ignored
  dnsPolicy: None
  dnsConfig:
    nameservers: [192.0.2.53]
    searches: [svc.example]
    options:
    - {name: ndots, value: "2"}
    - {name: edns0}
  hostAliases:
  - {ip: 192.0.2.10, hostnames: [db, db.local]}
  initContainers:
  - name: setup
    image: i
  - name: proxy
    image: i
    restartPolicy: Always
  containers:
  - name: app
    image: i
    ports: [{containerPort: 8080, hostPort: 8080}]
"#))
    .unwrap();
    assert_eq!(plan.pod.network, NetworkMode::Host);
    assert!(plan.pod.host_ipc && plan.pod.host_pid && !plan.pod.share_pid);
    assert_eq!(plan.pod.hostname, None);
    assert!(plan.pod.ports.is_empty(), "the host's ports are the pod's");
    assert_eq!(plan.pod.dns.servers, vec!["192.0.2.53"]);
    assert_eq!(plan.pod.dns.searches, vec!["svc.example"]);
    assert_eq!(plan.pod.dns.options, vec!["ndots:2", "edns0"]);
    assert_eq!(
        plan.pod.extra_hosts,
        vec![(
            "192.0.2.10".to_string(),
            vec!["db".to_string(), "db.local".into()]
        )]
    );
    let names: Vec<_> = plan
        .init_containers
        .iter()
        .map(|c| c.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p-setup", "p-proxy"]);
    let names: Vec<_> = plan
        .containers
        .iter()
        .map(|c| c.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p-app"]);
    // The sidecar is an init container its shim keeps running (and restarts always).
    assert!(plan.init_containers[1].init);
    assert!(
        plan.init_containers[1]
            .kube
            .as_ref()
            .is_some_and(|k| k.sidecar)
    );
    assert!(plan.init_containers[0].kube.is_none());
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.starts_with("spec.hostname is ignored"))
    );
}

#[test]
fn lists_and_empty_documents() {
    let plan = play(
        r#"---
# a comment-only document
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: cm}
  data: {k: v}
- apiVersion: v1
  kind: Pod
  metadata: {name: listed}
  spec:
    containers:
    - name: c
      image: i
      env:
      - name: K
        valueFrom: {configMapKeyRef: {name: cm, key: k}}
...
"#,
    )
    .unwrap();
    assert_eq!(plan.pod.name.as_deref(), Some("listed"));
    assert_eq!(env(&plan.containers[0], "K"), Some("v"));
}

#[test]
fn seccomp_localhost_profiles_and_subpath_expr() {
    let plan = play(&pod(r#"  securityContext:
    seccompProfile: {type: Localhost, localhostProfile: profiles/strict.json}
  containers:
  - name: c
    image: i
    env:
    - name: POD
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    volumeMounts:
    - {name: logs, mountPath: /logs, subPathExpr: "$(POD)/logs"}
    - {name: host, mountPath: /host, readOnly: true, mountPropagation: HostToContainer}
  volumes:
  - {name: logs, emptyDir: {}}
  - {name: host, hostPath: {path: /srv, type: Directory}}
"#))
    .unwrap();
    let c = &plan.containers[0];
    assert_eq!(
        c.seccomp,
        SeccompMode::Localhost("/var/lib/wharf/seccomp/profiles/strict.json".into())
    );
    assert_eq!(c.mounts[0].source, PathBuf::from("logs/p/logs"));
    assert_eq!(c.mounts[1].options, vec!["rslave"]);
    assert!(c.mounts[1].readonly);
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: v, mountPath: /v, mountPropagation: Bidirectional}\n  volumes:\n  - {name: v, emptyDir: {}}\n",
    ));
    assert!(
        e.contains("Bidirectional needs a privileged container"),
        "{e}"
    );
}

#[test]
fn the_examples_play_without_warnings() {
    for (name, yaml) in [
        (
            "pod-web.yaml",
            include_str!("../../../examples/pod-web.yaml"),
        ),
        (
            "pod-config.yaml",
            include_str!("../../../examples/pod-config.yaml"),
        ),
        (
            "pod-pair.yaml",
            include_str!("../../../examples/pod-pair.yaml"),
        ),
    ] {
        let plan = play(yaml).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(plan.warnings.is_empty(), "{name}: {:#?}", plan.warnings);
        assert!(
            plan.all_containers().all(|c| c.image == "busybox:latest"),
            "{name}: every image is substitutable"
        );
    }
    let web = play(include_str!("../../../examples/pod-web.yaml")).unwrap();
    assert_eq!(web.pod.ports.len(), 1);
    assert_eq!(web.pod.ports[0].host_port, 8080);
    assert_eq!(
        web.init_containers[0].entrypoint.as_ref().unwrap()[2],
        "echo \"hello from web\" > /www/index.html"
    );
    let config = play(include_str!("../../../examples/pod-config.yaml")).unwrap();
    let c = &config.containers[0];
    assert_eq!(env(c, "greeting"), Some("hello"));
    assert_eq!(env(c, "PASSWORD"), Some("s3cr3t"));
    assert_eq!(env(c, "MEMORY_LIMIT_MI"), Some("64"));
    assert_eq!(c.user.as_deref(), Some("1000:1000"));
    assert_eq!(c.groups, vec![3000, 2000]);
    let pair = play(include_str!("../../../examples/pod-pair.yaml")).unwrap();
    assert!(pair.pod.share_pid);
}

#[test]
fn quantities_and_modes_may_be_yaml_numbers() {
    let plan = play(&pod(r#"  containers:
  - name: c
    image: i
    resources:
      limits: {cpu: 1.5, memory: 1e9}
      requests: {cpu: 1, memory: 268435456}
    volumeMounts: [{name: v, mountPath: /v}]
  volumes:
  - name: v
    downwardAPI:
      defaultMode: 420
      items:
      - {path: a, fieldRef: {fieldPath: metadata.name}, mode: 0}
      - {path: b, fieldRef: {fieldPath: metadata.namespace}, mode: 0o600}
"#))
    .unwrap();
    let c = &plan.containers[0];
    assert_eq!(c.cpus, Some(1.5));
    assert_eq!(c.memory, Some(1_000_000_000));
    assert_eq!(c.cpu_shares, Some(1024));
    assert_eq!(c.memory_reservation, Some(256 << 20));
    match &plan.volumes[0].source {
        VolumeSource::Files { files, .. } => {
            assert_eq!(files[0].mode, 0);
            assert_eq!(files[1].mode, 0o600);
        }
        other => panic!("{other:?}"),
    }
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n    resources: {limits: {cpu: 2 cores}}\n",
    ));
    assert_eq!(
        e,
        "spec.containers[0].resources.limits.cpu: \"2 cores\" is not a quantity: unknown suffix (use Ki, Mi, Gi, m, k, M, G, ... or e<N>)"
    );
    let e = err(&pod(
        "  containers:\n  - name: c\n    image: i\n    env: [{name: N, value: 80}]\n",
    ));
    assert!(
        e.ends_with(
            "spec.containers[0].env[0].value: invalid type: integer `80`, expected a string"
        ),
        "{e}"
    );
}

/// A 200 KB file of nested brackets took a minute of CPU in the YAML parser: it is refused
/// before parsing, at once; deep block nesting stops at the parser's recursion limit.
#[test]
fn deeply_nested_manifests_are_refused_quickly() {
    let t = std::time::Instant::now();
    let deep = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = err(&deep);
    assert!(e.contains("nested more than 100 levels"), "{e}");
    let mut block = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n");
    for i in 0..1000 {
        block.push_str(&" ".repeat(i + 1));
        block.push_str("a:\n");
    }
    let e = err(&block);
    assert!(e.contains("recursion limit"), "{e}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    // Ordinary nesting is fine.
    let ok = "apiVersion: v1\nkind: Pod\nmetadata: {name: x, labels: {a: '[[b]]'}}\nspec:\n  containers: [{name: c, image: busybox}]\n";
    play(ok).unwrap();
}

#[test]
fn probes_and_hooks_take_kubelets_defaults_and_named_ports() {
    use wharf_shim::protocol::Action;
    let plan = play(&pod(r#"  terminationGracePeriodSeconds: 7
  containers:
  - name: web
    image: i
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: healthz, port: http, httpHeaders: [{name: X-A, value: b}]}
    livenessProbe:
      tcpSocket: {port: "8080"}
      initialDelaySeconds: 5
      periodSeconds: 2
      timeoutSeconds: 3
      failureThreshold: 4
      terminationGracePeriodSeconds: 2
    startupProbe:
      httpGet: {port: 8443, scheme: HTTPS}
    lifecycle:
      postStart:
        exec: {command: [touch, /ready]}
      preStop:
        sleep: {seconds: 3}
"#))
    .unwrap();
    let k = plan.containers[0].kube.as_ref().unwrap();
    assert_eq!(k.grace_ms, 7000);
    assert!(!k.sidecar);
    let r = k.readiness.as_ref().unwrap();
    assert_eq!(
        r.action,
        Action::HttpGet {
            host: None,
            port: 8080,
            path: "/healthz".into(),
            headers: vec![("X-A".into(), "b".into())],
            https: false,
        }
    );
    assert_eq!(
        (
            r.period_ms,
            r.timeout_ms,
            r.success_threshold,
            r.failure_threshold
        ),
        (10_000, 1000, 1, 3)
    );
    let l = k.liveness.as_ref().unwrap();
    assert_eq!(
        l.action,
        Action::TcpSocket {
            host: None,
            port: 8080
        }
    );
    assert_eq!(
        (
            l.initial_delay_ms,
            l.period_ms,
            l.timeout_ms,
            l.failure_threshold,
            l.grace_ms
        ),
        (5000, 2000, 3000, 4, Some(2000))
    );
    // HTTPS: made by the probe helper, the certificate not verified.
    assert_eq!(
        k.startup.as_ref().unwrap().action,
        Action::HttpGet {
            host: None,
            port: 8443,
            path: "/".into(),
            headers: Vec::new(),
            https: true,
        }
    );
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    assert_eq!(
        k.post_start,
        Some(Action::Exec {
            command: vec!["touch".into(), "/ready".into()]
        })
    );
    assert_eq!(k.pre_stop, Some(Action::Sleep { ms: 3000 }));
}

#[test]
fn invalid_probes_and_hooks_are_refused_by_path() {
    for (spec, want) in [
        (
            "readinessProbe: {periodSeconds: 1}",
            "spec.containers[0].readinessProbe has no handler",
        ),
        (
            "livenessProbe: {exec: {command: [a]}, tcpSocket: {port: 1}}",
            "spec.containers[0].livenessProbe may not have more than one handler",
        ),
        (
            "livenessProbe: {exec: {command: [a]}, successThreshold: 2}",
            "successThreshold must be 1 for liveness and startup probes",
        ),
        (
            "readinessProbe: {tcpSocket: {port: web}}",
            "readinessProbe.tcpSocket.port: the container has no port named \"web\"",
        ),
        (
            "readinessProbe: {tcpSocket: {port: 70000}}",
            "70000 is not a port",
        ),
        (
            "readinessProbe: {exec: {command: [a]}, terminationGracePeriodSeconds: 1}",
            "terminationGracePeriodSeconds must not be set for readiness probes",
        ),
        (
            "lifecycle: {preStop: {sleep: {seconds: -1}}}",
            "spec.containers[0].lifecycle.preStop.sleep.seconds must be 0 or more",
        ),
        (
            "lifecycle: {postStart: {}}",
            "spec.containers[0].lifecycle.postStart must have exactly one handler",
        ),
        (
            "readinessProbe: {httpGet: {port: 80, httpHeaders: [{name: \"a:b\", value: c}]}}",
            "is not a valid header",
        ),
    ] {
        let e = err(&pod(&format!(
            "  containers:\n  - name: c\n    image: i\n    {spec}\n"
        )));
        assert!(e.contains(want), "{spec}: {e}");
    }
    // Probes and hooks belong to app containers and sidecars, not to init containers.
    let e = err(&pod(
        "  initContainers:\n  - name: i\n    image: i\n    livenessProbe: {exec: {command: [a]}}\n  containers:\n  - name: c\n    image: i\n",
    ));
    assert!(
        e.contains("spec.initContainers[0].livenessProbe may only be set on an init container with restartPolicy: Always"),
        "{e}"
    );
}

const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  selector:\n    matchLabels: {app: web}\n  strategy: {type: RollingUpdate}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: c\n        image: i\n";

#[test]
fn workloads_are_read_and_their_pods_planned_as_their_controllers_make_them() {
    let m = parse(DEPLOY).unwrap();
    assert!(m.pod_names().is_empty());
    let w = &m.workloads()[0];
    assert_eq!(
        (w.kind, w.name.as_str(), w.replicas),
        (WorkloadKind::Deployment, "web", 3)
    );
    assert!(m.warnings().is_empty(), "{:?}", m.warnings());
    let name = w.pod_name(0);
    assert!(
        name.starts_with(&format!("web-{}-", w.template_hash)),
        "{name}"
    );
    let plan = plan_workload_pod(&m, w, &name, 0, &opts()).unwrap();
    assert_eq!(plan.pod.name.as_deref(), Some(name.as_str()));
    assert_eq!(plan.pod.labels[LABEL_OWNER], "Deployment/web");
    assert_eq!(plan.pod.labels["pod-template-hash"], w.template_hash);
    assert_eq!(plan.pod.labels["app"], "web");
    assert_eq!(
        plan.containers[0].name.as_deref(),
        Some(format!("{name}-c").as_str())
    );
    // The same template hashes the same; another does not.
    let again = parse(DEPLOY).unwrap();
    assert_eq!(again.workloads()[0].template_hash, w.template_hash);
    let other = parse(&DEPLOY.replace("image: i", "image: j")).unwrap();
    assert_ne!(other.workloads()[0].template_hash, w.template_hash);

    // A StatefulSet's pods are named and host-named by ordinal; a Job's defaults.
    let sts = DEPLOY.replace("Deployment", "StatefulSet").replace(
        "  strategy: {type: RollingUpdate}\n",
        "  serviceName: web\n",
    );
    let m = parse(&sts).unwrap();
    let w = &m.workloads()[0];
    assert!(w.ordered);
    assert_eq!(w.pod_name(1), "web-1");
    let plan = plan_workload_pod(&m, w, "web-1", 1, &opts()).unwrap();
    assert_eq!(plan.pod.hostname.as_deref(), Some("web-1"));
    assert_eq!(plan.pod.labels["apps.kubernetes.io/pod-index"], "1");
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: pi\nspec:\n  template:\n    spec:\n      restartPolicy: OnFailure\n      containers:\n      - name: c\n        image: i\n";
    let m = parse(job).unwrap();
    let w = &m.workloads()[0];
    assert_eq!(
        w.job,
        Some(JobSpec {
            completions: 1,
            parallelism: 1,
            backoff_limit: 6,
            indexed: false,
        })
    );
    let plan = plan_workload_pod(&m, w, "pi-abcde", 0, &opts()).unwrap();
    assert_eq!(plan.pod.max_restarts, Some(6));
    assert_eq!(plan.pod.labels["job-name"], "pi");
    let ds = DEPLOY
        .replace("Deployment", "DaemonSet")
        .replace("  strategy: {type: RollingUpdate}\n", "");
    assert_eq!(parse(&ds).unwrap().workloads()[0].replicas, 1);
}

#[test]
fn workloads_the_api_server_would_refuse_are_refused() {
    for (yaml, want) in [
        (
            DEPLOY.replace("matchLabels: {app: web}", "matchLabels: {app: api}"),
            "selector does not match template labels (app: api)",
        ),
        (
            DEPLOY.replace("    spec:\n      containers", "    spec:\n      restartPolicy: Never\n      containers"),
            "restartPolicy \"Never\": a Deployment's pods need \"Always\"",
        ),
        (
            DEPLOY.replace("apps/v1", "extensions/v1beta1"),
            "apiVersion \"extensions/v1beta1\" is not supported (Deployment is apps/v1)",
        ),
        (
            DEPLOY.replace("  selector:\n    matchLabels: {app: web}\n", ""),
            "spec.selector is required",
        ),
        (
            DEPLOY.replace("replicas: 3", "replicas: -1"),
            "spec.replicas -1 is out of range",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: pi\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        image: i\n".to_string(),
            "a Job's pods need \"OnFailure\" or \"Never\"",
        ),
        (
            DEPLOY.replace("Deployment", "StatefulSet").replace(
                "  strategy: {type: RollingUpdate}\n",
                "  volumeClaimTemplates:\n  - spec: {}\n",
            ),
            "spec.volumeClaimTemplates[0].metadata.name is required",
        ),
    ] {
        let e = parse(&yaml).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "want {want:?}, got {e:?}");
    }
    // A CronJob's schedule has no meaning here: said, and skipped.
    let m = parse(&format!(
        "{DEPLOY}---\napiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: nightly}}\nspec: {{}}\n"
    ))
    .unwrap();
    assert!(
        m.warnings().iter().any(|w| w
            .contains("kind CronJob is not supported and is ignored: nothing keeps a schedule")),
        "{:?}",
        m.warnings()
    );
}

/// Kubernetes' image volumes: the engine's read-only image views (a subPath inside),
/// their images pulled with the containers' under their own policy.
#[test]
fn image_volumes_are_read_only_views_of_images_pulled_with_the_pod() {
    let plan = play(&pod(
        "  containers:\n  - name: c\n    image: app:1\n    volumeMounts:\n    - {name: tools, mountPath: /tools}\n    - {name: tools, mountPath: /bin-tools, subPath: bin, readOnly: false}\n  volumes:\n  - name: tools\n    image: {reference: tools:2, pullPolicy: Never}\n",
    ))
    .unwrap();
    let m = &plan.containers[0].mounts;
    let view = |i: usize| {
        (
            m[i].kind.as_str(),
            m[i].source.to_str().unwrap(),
            m[i].readonly,
            m[i].options.clone(),
        )
    };
    assert_eq!(view(0), ("image", "tools:2", true, vec![]));
    assert_eq!(
        view(1),
        ("image", "tools:2", true, vec!["subpath=bin".to_string()])
    );
    let pulls: Vec<(&str, PullPolicy)> = plan
        .images
        .iter()
        .map(|p| (p.image.as_str(), p.policy))
        .collect();
    assert_eq!(
        pulls,
        [
            ("app:1", PullPolicy::IfNotPresent),
            ("tools:2", PullPolicy::Never)
        ]
    );
    assert!(claim_names(&plan.volumes).is_empty());
}

#[test]
fn claims_are_named_volumes_and_statefulset_claim_templates_one_per_pod() {
    let plan = play(&pod(
        "  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: data, mountPath: /data}\n    - {name: ro, mountPath: /ro}\n    - {name: data, mountPath: /logs, subPath: ./logs/app}\n  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: db-data}\n  - name: ro\n    persistentVolumeClaim: {claimName: shared, readOnly: true}\n",
    ))
    .unwrap();
    let mounts = &plan.containers[0].mounts;
    assert_eq!(
        (
            mounts[0].kind.as_str(),
            mounts[0].source.to_str(),
            mounts[0].readonly
        ),
        ("volume", Some("db-data"), false)
    );
    assert_eq!(
        (
            mounts[1].kind.as_str(),
            mounts[1].source.to_str(),
            mounts[1].readonly
        ),
        ("volume", Some("shared"), true)
    );
    // A subPath: the engine resolves it inside the volume.
    assert_eq!(
        (mounts[2].source.to_str(), mounts[2].options.as_slice()),
        (Some("db-data"), ["subpath=logs/app".to_string()].as_slice())
    );
    assert_eq!(claim_names(&plan.volumes), ["db-data", "shared"]);
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: db}\n  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers:\n      - name: c\n        image: i\n        volumeMounts:\n        - {name: data, mountPath: /var/lib/db}\n";
    let m = parse(sts).unwrap();
    assert!(
        m.warnings()
            .iter()
            .any(|w| w.contains("volumeClaimTemplates become named volumes")),
        "{:?}",
        m.warnings()
    );
    let w = &m.workloads()[0];
    let plan = plan_workload_pod(&m, w, "db-1", 1, &opts()).unwrap();
    assert_eq!(claim_names(&plan.volumes), ["data-db-1"]);
    assert_eq!(
        plan.containers[0].mounts[0].source.to_str(),
        Some("data-db-1")
    );
}

#[test]
fn projected_volumes_merge_their_sources_and_say_what_a_token_is() {
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {mode: fast}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: sec}\nstringData: {password: s3cret}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: web}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts: [{name: all, mountPath: /etc/all}]\n  volumes:\n  - name: all\n    projected:\n      defaultMode: 0440\n      sources:\n      - configMap: {name: cfg}\n      - secret:\n          name: sec\n          items: [{key: password, path: db/password}]\n      - downwardAPI:\n          items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]\n      - serviceAccountToken: {path: token, expirationSeconds: 3600}\n";
    let plan = play(yaml).unwrap();
    let VolumeSource::Files {
        files, in_memory, ..
    } = &plan.volumes[0].source
    else {
        panic!("{:?}", plan.volumes[0])
    };
    assert!(*in_memory, "a secret is in it: kept off the disk");
    let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["mode", "db/password", "labels", "token"]);
    assert_eq!(files[1].data, b"s3cret");
    assert_eq!(files[2].data, b"app=\"web\"\n");
    assert!(files.iter().all(|f| f.mode == 0o440), "{files:?}");
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("serviceAccountToken: token holds a placeholder, not a token")),
        "{:?}",
        plan.warnings
    );
    // Two sources may not write the same file.
    let e = err(&yaml.replace("path: db/password", "path: mode"));
    assert!(
        e.contains("\"mode\" collides with another file of the volume"),
        "{e}"
    );
}

#[test]
fn apparmor_profiles_from_fields_and_annotations() {
    let plan = play(&pod_with_annotations(
        "container.apparmor.security.beta.kubernetes.io/c: localhost/k8s-deny-write",
        "  containers:\n  - name: c\n    image: i\n  - name: d\n    image: i\n    securityContext:\n      appArmorProfile: {type: RuntimeDefault}\n",
    ))
    .unwrap();
    assert_eq!(
        plan.containers[0].apparmor_profile.as_deref(),
        Some("k8s-deny-write")
    );
    assert_eq!(plan.containers[1].apparmor_profile, None);
    assert!(
        plan.warnings.iter().any(|w| w
            .contains("appArmorProfile: RuntimeDefault: Wharf has no default AppArmor profile")),
        "{:?}",
        plan.warnings
    );
    let e = err(&pod_with_annotations(
        "container.apparmor.security.beta.kubernetes.io/c: strict",
        "  containers:\n  - name: c\n    image: i\n",
    ));
    assert!(e.contains("\"strict\" is not an AppArmor profile"), "{e}");
    let e = err(&pod(
        "  securityContext:\n    appArmorProfile: {type: Localhost}\n  containers:\n  - name: c\n    image: i\n",
    ));
    assert!(
        e.contains("spec.securityContext.appArmorProfile.localhostProfile is required"),
        "{e}"
    );
    // A manifest with nothing to run says what it holds.
    let e = parse("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec: {}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("it holds CronJob nightly;"), "{e}");
}

fn pod_with_annotations(annotation: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    {annotation}\nspec:\n{spec}"
    )
}
