#!/bin/bash
# Kubernetes' node conformance suite (e2e_node, [NodeConformance]) against `wharf daemon`,
# offline, on a machine without systemd:
#
#   E2E_NODE=/path/e2e_node.test KUBELET=/path/kubelet AGNHOST=/path/agnhost \
#   [WHARF=target/release/wharf] [GINKGO=/path/ginkgo PROCS=4] tests/e2e_node/run.sh [flags]
#
# RUNTIME=containerd runs the same suite against containerd (CRI plugin, runc, cgroupfs, a
# CNI bridge of its own in the same namespace), for comparing the two on the same machine
# and selection. By default that is Debian's containerd 1.6 and runc; CONTAINERD_BIN=DIR
# takes containerd, containerd-shim-runc-v2 and runc from DIR instead (DIR comes first in
# the daemon's PATH, and runc's BinaryName is DIR/runc), e.g. containerd 2.x and a newer
# runc that you built. A containerd 2.x gets a config of version 3 (its plugin names, and
# registry mirrors as hosts.toml directories); a 1.x one a config of version 2. Where root
# lacks CAP_SYS_RESOURCE (as here), containerd keeps the pods' oom_score_adj at or above
# its own (restrict_oom_score_adj): runc cannot lower it and would fail every sandbox.
# In kubelet's mount namespace /run/containerd is the run's socket directory, where
# kubelet's cAdvisor looks for containerd.
#
# The tools are yours to build (see README.md): nothing here builds them. Without PROCS
# the suite runs its specs one by one and the flags are its own (--ginkgo.focus=...); with
# PROCS, ginkgo runs PROCS of them at once and the flags are ginkgo's (--focus, --skip).
# Default selection: [NodeConformance] minus [Flaky], [Slow], [Serial] and [Disruptive].
#
# Everything lives in a world of its own, removed at the end: the network namespace
# wharf-e2e (loopback, and a veth pair inside it for the API server's default route),
# where the registry (127.0.0.1:5056), the daemon and its built-in bridge, the suite's
# in-process etcd and API server and kubelet run; the state under /var/tmp/e2e-state;
# the cgroups /wharf-e2e. kubelet runs in a mount namespace of its own in which the
# sysctls it rewrites (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops) are
# read-only binds of the values it wants; its root dir is a shared mount, so its volumes
# reach the daemon. The suite starts kubelet through systemd-run: stand-ins for it,
# systemctl and sudo come first in its PATH. Logs: /var/tmp/e2e-logs/<time>/.
set -uo pipefail
E2E_NODE=${E2E_NODE:?path to e2e_node.test}
KUBELET=${KUBELET:?path to kubelet}
AGNHOST=${AGNHOST:?path to agnhost}
RUNTIME=${RUNTIME:-wharf}
WHARF=${WHARF:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/wharf}
case "$RUNTIME" in
  wharf) [ -x "$WHARF" ] && [ -x "$(dirname "$WHARF")/wharf-shim" ] || { echo "run.sh: $WHARF (and wharf-shim beside it) missing: cargo build --release" >&2; exit 2; };;
  containerd)
    # CONTAINERD_BIN: containerd, containerd-shim-runc-v2 and runc from there, first in PATH
    CONTAINERD_BIN=${CONTAINERD_BIN:-}
    if [ -n "$CONTAINERD_BIN" ]; then
      CONTAINERD_BIN=$(cd "$CONTAINERD_BIN" 2>/dev/null && pwd) || { echo "run.sh: CONTAINERD_BIN: no such directory" >&2; exit 2; }
      for b in containerd containerd-shim-runc-v2 runc; do
        [ -x "$CONTAINERD_BIN/$b" ] || { echo "run.sh: CONTAINERD_BIN=$CONTAINERD_BIN has no executable $b" >&2; exit 2; }
      done
    fi
    CTRD_PATH=${CONTAINERD_BIN:+$CONTAINERD_BIN:}$PATH
    CTRD=$(PATH=$CTRD_PATH command -v containerd) && PATH=$CTRD_PATH command -v containerd-shim-runc-v2 >/dev/null &&
      RUNC=$(PATH=$CTRD_PATH command -v runc) && [ -x /usr/lib/cni/bridge ] ||
      { echo "run.sh: RUNTIME=containerd needs containerd, runc and containernetworking-plugins (apt-get install containerd containernetworking-plugins, or CONTAINERD_BIN=DIR)" >&2; exit 2; }
    # "containerd github.com/containerd/containerd/v2 v2.4.2 ..." or "... 1.6.20~ds1 ..."
    CTRD_VERSION=$("$CTRD" --version | awk '{print $3}')
    CTRD_MAJOR=${CTRD_VERSION#v}; CTRD_MAJOR=${CTRD_MAJOR%%.*}
    case "$CTRD_MAJOR" in 1|2) ;; *) echo "run.sh: $CTRD: version ${CTRD_VERSION:-unknown}: this script knows containerd 1.x and 2.x" >&2; exit 2;; esac;;
  *) echo "run.sh: RUNTIME=$RUNTIME: use wharf or containerd" >&2; exit 2;;
esac
for b in "$E2E_NODE" "$KUBELET" "$AGNHOST"; do [ -x "$b" ] || { echo "run.sh: $b is not an executable" >&2; exit 2; }; done
[ "$(id -u)" = 0 ] || { echo "run.sh: run as root" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
# One run at a time: each kubelet's garbage collector removes the pod log directories in
# /var/log/pods it does not know (the suite reads them there), so a second kubelet would
# take the first one's logs.
exec 9>/var/tmp/e2e-node-run.lock
flock -n 9 || { echo "run.sh: another run.sh holds /var/tmp/e2e-node-run.lock: one run at a time" >&2; exit 2; }
# a run against containerd has names of its own: neither run's cleanup touches the other's
SUFFIX=$([ "$RUNTIME" = wharf ] || echo "-$RUNTIME")
STATE=/var/tmp/e2e-state$SUFFIX
NS=wharf-e2e$SUFFIX
NSPATH=/run/netns/$NS
CG=wharf-e2e$SUFFIX
REG=127.0.0.1:5056
REGDIR=/var/tmp/e2e-registry$SUFFIX
IMAGES=/var/tmp/e2e-images$SUFFIX
LOGS=/var/tmp/e2e-logs/$(date +%Y%m%d-%H%M%S)
SOCK=$STATE/run/$RUNTIME.sock
log() { echo "run.sh: $*" >&2; }
in_ns() { nsenter --net="$NSPATH" "$@"; }

cleanup() {
  set +e
  [ -f "$STATE/units/pids" ] && for p in $(cat "$STATE/units/pids"); do kill -KILL "$p" 2>/dev/null; done
  if [ -f "$STATE/daemon.pid" ]; then
    p=$(cat "$STATE/daemon.pid")
    kill -TERM "$p" 2>/dev/null; sleep 2; kill -KILL "$p" 2>/dev/null
  fi
  for _ in 1 2 3; do
    pids=$(find /sys/fs/cgroup/pids/$CG /sys/fs/cgroup/unified/$CG -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [ -z "$pids" ] && break
    kill -KILL $pids 2>/dev/null; sleep 0.5
  done
  # the suite, ginkgo's workers, kubelet, the daemon and its shims: by their binary or
  # command line (under $STATE) or environment
  for p in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$p" = $$ ] && continue
    case "$(readlink /proc/$p/exe 2>/dev/null)" in "$STATE"/*) kill -KILL "$p" 2>/dev/null; continue;; esac
    if tr '\0' ' ' 2>/dev/null < /proc/$p/cmdline | grep -qE -- "$STATE/bin/e2e_node.test|-address $STATE/" ||
       grep -qs "WHARF_RUN=$STATE/run" /proc/$p/environ; then
      kill -KILL "$p" 2>/dev/null
    fi
  done
  # containerd's shims listen in /run/containerd/s (a fixed place), and killed ones leave
  # their sockets there: each task's bundle under $STATE names its shim's (1.x in the file
  # address, 2.x in bootstrap.json)
  T=$STATE/containerd/state/io.containerd.runtime.v2.task
  for a in $(grep -oh 'unix:///run/containerd/s/[0-9a-f]*' "$T"/*/*/address "$T"/*/*/bootstrap.json 2>/dev/null); do
    rm -f "${a#unix://}"
  done
  if [ -f "$REGDIR/registry.pid" ]; then kill "$(cat "$REGDIR/registry.pid")" 2>/dev/null; rm -f "$REGDIR/registry.pid"; fi
  for _ in 1 2 3; do
    m=$(awk -v s="$STATE" '$5 == s || index($5, s "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [ -z "$m" ] && break
    for x in $m; do umount "$x" 2>/dev/null || umount -l "$x" 2>/dev/null; done
  done
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/unified/; do
    [ -d "$h$CG" ] && find "$h$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  if [ -e "$NSPATH" ]; then ip netns delete "$NS" 2>/dev/null || { umount "$NSPATH"; rm -f "$NSPATH"; }; fi
  rm -rf --one-file-system "$STATE" 2>/dev/null
}
trap cleanup EXIT
trap 'log "interrupted"; exit 2' INT TERM
cleanup
mkdir -p "$STATE"/{run,root,tmp,empty-cni,cni-cache,units,kubelet,work,sysctl,bin} "$LOGS"

# ---- netns, registry, images --------------------------------------------------------
ip netns add "$NS" && in_ns ip link set lo up || { log "netns"; exit 2; }
# the API server wants an address with a default route: a veth pair inside the namespace
in_ns ip link add e2e0 type veth peer name e2e1 && in_ns ip addr add 10.250.0.1/24 dev e2e0 &&
  in_ns ip link set e2e0 up && in_ns ip link set e2e1 up && in_ns ip route add default via 10.250.0.2 dev e2e0 ||
  { log "netns routes"; exit 2; }
# the stand-ins are built again when their recipe changed since they were pushed
STAMP=$(cat "$HERE"/images/build-images.sh "$HERE"/images/src/* | sha256sum | cut -c1-16)
[ "$(cat "$REGDIR/images.stamp" 2>/dev/null)" = "$STAMP" ] || rm -rf "$REGDIR/data" "$REGDIR/images.stamp"
mkdir -p "$REGDIR/data"
cat > "$REGDIR/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $REGDIR/data}, delete: {enabled: true}}
http: {addr: $REG}
EOF
nsenter --net="$NSPATH" docker-registry serve "$REGDIR/config.yml" >>"$REGDIR/registry.log" 2>&1 </dev/null &
echo $! > "$REGDIR/registry.pid"
for _ in $(seq 50); do in_ns curl -sf "http://$REG/v2/" >/dev/null && break; sleep 0.2; done
push() { in_ns skopeo copy --quiet --dest-tls-verify=false "oci:$1:$2" "docker://$REG/$3" ; }
if ! in_ns curl -sf -o /dev/null "http://$REG/v2/e2e-test-images/agnhost/manifests/2.66.1" \
     -H 'Accept: application/vnd.oci.image.manifest.v1+json'; then
  log "building and pushing the stand-in images (log: $LOGS/images.log)"
  for t in umoci skopeo gcc docker-registry openssl; do command -v $t >/dev/null || apt-get install -y umoci skopeo gcc libc6-dev docker-registry openssl >/dev/null; done
  # Debian's busybox and netcat are fetched outside the namespace (which reaches only its
  # registry)
  mkdir -p "$IMAGES/deb"
  if [ ! -x "$IMAGES/deb/x/bin/busybox" ] || [ ! -x "$IMAGES/deb/x/bin/nc.openbsd" ]; then
    (cd "$IMAGES/deb" && apt-get download busybox netcat-openbsd libbsd0 libmd0 &&
      for d in *.deb; do dpkg-deb -x "$d" x; done) > "$LOGS/images.log" 2>&1 \
      || { tail -5 "$LOGS/images.log"; log "apt-get download of busybox and netcat failed"; exit 2; }
  fi
  in_ns env REG=$REG AGNHOST="$AGNHOST" OUT="$IMAGES" "$HERE/images/build-images.sh" >> "$LOGS/images.log" 2>&1 \
    || { tail -20 "$LOGS/images.log"; log "image build failed"; exit 2; }
  echo "$STAMP" > "$REGDIR/images.stamp"
fi
cat > "$STATE/repo-list.yaml" <<EOF
promoterE2eRegistry: $REG/e2e-test-images
gcRegistry: $REG
gcEtcdRegistry: $REG
EOF

# ---- daemon -------------------------------------------------------------------------
# Both runtimes serve the handler "test-handler" besides the default, as the suite's
# RuntimeClass specs (e2enode.PreconfiguredRuntimeClassHandler) expect of a node.
cat > "$STATE/config.json" <<EOF
{ "registries": { "registry.k8s.io": { "mirrors": ["http://$REG"], "insecure": true },
                  "$REG": { "insecure": true } },
  "daemon": { "docker-listen": "", "stream-address": "127.0.0.1:0",
              "runtime-handlers": ["test-handler"] } }
EOF
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/unified/; do mkdir -p "$h$CG"; done
if [ "$RUNTIME" = wharf ]; then
  nsenter --net="$NSPATH" env WHARF_ROOT="$STATE/root" WHARF_RUN="$STATE/run" WHARF_CGROUP_PARENT="/$CG/wharf" \
    WHARF_CNI_CONF_DIR="$STATE/empty-cni" WHARF_CNI_CACHE_DIR="$STATE/cni-cache" \
    WHARF_NET_HOST_NS="$NSPATH" WHARF_CONFIG="$STATE/config.json" TMPDIR="$STATE/tmp" \
    "$WHARF" daemon --listen "$SOCK" > "$LOGS/daemon.log" 2>&1 </dev/null &
  echo $! > "$STATE/daemon.pid"
else
  # containerd with its CRI plugin: everything under $STATE/containerd, runc's state there
  # too, pods on a CNI bridge of this namespace, the stand-in registry over plain HTTP.
  C=$STATE/containerd
  mkdir -p "$C/cni" "$C/ipam"
  # Without CAP_SYS_RESOURCE (not in this machine's bounding set) no process may lower
  # its oom_score_adj, and runc fails to start every pod sandbox (which asks for -998) with
  # "can't get final child's PID from pipe: EOF" (its debug log: "failed to update
  # /proc/self/oom_score_adj: Permission denied"). restrict_oom_score_adj keeps the
  # scores at or above containerd's own instead.
  RESTRICT_OOM=false
  (( (0x$(awk '/^CapEff:/ {print $2}' /proc/self/status) >> 24) & 1 )) || RESTRICT_OOM=true
  cat > "$C/cni/10-e2e.conflist" <<EOF
{ "cniVersion": "1.0.0", "name": "e2e",
  "plugins": [ { "type": "bridge", "bridge": "e2ebr0", "isGateway": true, "ipMasq": false,
                 "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.100.0.0/24" }]],
                           "routes": [{ "dst": "0.0.0.0/0" }], "dataDir": "$C/ipam" } },
               { "type": "portmap", "capabilities": { "portMappings": true } } ] }
EOF
  if [ "$CTRD_MAJOR" = 1 ]; then
  cat > "$C/config.toml" <<EOF
version = 2
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$C/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$REG/pause:3.10.2"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = $RESTRICT_OOM
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$C/cni"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$C/runc"
          BinaryName = "$RUNC"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
          SystemdCgroup = false
          Root = "$C/runc"
          BinaryName = "$RUNC"
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.k8s.io"]
      endpoint = ["http://$REG"]
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REG"]
      endpoint = ["http://$REG"]
EOF
  else
  # containerd 2.x: the CRI plugin is split in three (images, runtime, and the gRPC
  # server), the pause image is a pinned image, mirrors are hosts.toml files under
  # config_path; NRI (whose socket would be /var/run/nri) is off, CDI reads only $C/cdi.
  mkdir -p "$C/certs.d/registry.k8s.io" "$C/certs.d/$REG" "$C/cdi"
  printf 'server = "https://registry.k8s.io"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REG" \
    > "$C/certs.d/registry.k8s.io/hosts.toml"
  printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve", "push"]\n' "$REG" "$REG" \
    > "$C/certs.d/$REG/hosts.toml"
  cat > "$C/config.toml" <<EOF
version = 3
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$C/opt"
  [plugins."io.containerd.nri.v1.nri"]
    disable = true
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$REG/pause:3.10.2"
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "$C/certs.d"
  [plugins."io.containerd.cri.v1.runtime"]
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = $RESTRICT_OOM
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = ["$C/cdi"]
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$C/cni"
      max_conf_num = 1
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$C/runc"
          BinaryName = "$RUNC"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler.options]
          SystemdCgroup = false
          Root = "$C/runc"
          BinaryName = "$RUNC"
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
  fi
  nsenter --net="$NSPATH" env PATH="$CTRD_PATH" TMPDIR="$STATE/tmp" "$CTRD" --config "$C/config.toml" > "$LOGS/daemon.log" 2>&1 </dev/null &
  echo $! > "$STATE/daemon.pid"
fi
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.2; done
[ -S "$SOCK" ] || { tail "$LOGS/daemon.log"; log "daemon"; exit 2; }

# ---- kubelet: stand-ins for systemd-run/systemctl/sudo, its own mount namespace --------
S=$STATE/bin
mount --bind "$STATE/kubelet" "$STATE/kubelet" && mount --make-shared "$STATE/kubelet"
echo 1 > "$STATE/sysctl/overcommit_memory"; echo 10 > "$STATE/sysctl/panic"; echo 1 > "$STATE/sysctl/panic_on_oops"
# cAdvisor asks containerd at /run/containerd/containerd.sock and nowhere else: in kubelet's
# mount namespace that directory is this run's $STATE/run (containerd creates
# /run/containerd itself, for its shims' sockets).
NSBIND=
if [ "$RUNTIME" = containerd ]; then
  mkdir -p /run/containerd
  NSBIND="mount --make-slave \$(findmnt -n -o TARGET --target /run/containerd) && mount --bind $STATE/run /run/containerd"
fi
cat > "$S/kubelet-in-ns" <<EOF
#!/bin/bash
# kubelet in a mount namespace of its own where the sysctls it rewrites are read-only binds
exec unshare --mount --propagation unchanged bash -c '
  mount --make-rslave /proc
  mount --bind -o ro $STATE/sysctl/overcommit_memory /proc/sys/vm/overcommit_memory
  mount --bind -o ro $STATE/sysctl/panic /proc/sys/kernel/panic
  mount --bind -o ro $STATE/sysctl/panic_on_oops /proc/sys/kernel/panic_on_oops
  $NSBIND
  exec "\$@"' kubelet "\$@"
EOF
cat > "$S/systemd-run" <<EOF
#!/bin/bash
[ "\${1:-}" = --version ] && { echo "systemd 252 (stand-in)"; exit 0; }
unit=x; logf=/dev/null
while [ \$# -gt 0 ]; do
  case "\$1" in
    --unit=*) unit=\${1#--unit=};;
    -p) shift; case "\$1" in StandardError=append:*) logf=\${1#StandardError=append:};; esac;;
    --*) ;;
    *) break;;
  esac; shift
done
args=(); for a in "\$@"; do a=\${a//%%/%}; a=\${a//\\\$\\\$/\\\$}; args+=("\$a"); done
printf '%q ' "\${args[@]}" > $STATE/units/\$unit.cmd
setsid $S/kubelet-in-ns "\${args[@]}" >>"\$logf" 2>&1 </dev/null &
echo \$! > $STATE/units/\$unit.pid; echo \$! >> $STATE/units/pids
exit 0
EOF
cat > "$S/systemctl" <<EOF
#!/bin/bash
cmd=\${1:-}; shift
for a in "\$@"; do case "\$a" in -*) ;; *) unit=\${a%.service};; esac; done
pidf=$STATE/units/\${unit:-x}.service.pid; [ -f "\$pidf" ] || pidf=$STATE/units/\${unit:-x}.pid
case "\$cmd" in
  kill|stop) [ -f "\$pidf" ] && { p=\$(cat "\$pidf"); kill -TERM \$p 2>/dev/null; for _ in \$(seq 50); do kill -0 \$p 2>/dev/null || break; sleep 0.2; done; kill -KILL \$p 2>/dev/null; }; exit 0;;
  list-units) for f in $STATE/units/*.pid; do [ -e "\$f" ] && kill -0 \$(cat "\$f") 2>/dev/null && basename "\$f" .pid; done; exit 0;;
  *) exit 0;;
esac
EOF
printf '#!/bin/sh\nexec "$@"\n' > "$S/sudo"
chmod +x "$S"/*
# The suite's own default (test/e2e_node/jenkins/default-kubelet-config.yaml), with: the
# cgroups under /$CG; eviction at 1% of the disk (this machine's is 80% full: the default
# 10% reported disk pressure and the node never turned Ready); cgroup v1 allowed.
cat > "$STATE/kubelet-base.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /$CG
podCIDR: "10.100.0.0/24"
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard:
  memory.available: 250Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
evictionMinimumReclaim:
  nodefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
failCgroupV1: false
EOF
# kubelet's built-in cAdvisor names the containers it finds in the cgroups by asking
# containerd, CRI-O or docker, and no other runtime: a node running another one takes its
# container and pod metrics from the CRI instead (PodAndContainerStatsFromCRI, beta).
if [ "$RUNTIME" = wharf ]; then
  printf 'featureGates:\n  PodAndContainerStatsFromCRI: true\n' >> "$STATE/kubelet-base.yaml"
fi
cp "$E2E_NODE" "$STATE/bin/e2e_node.test"; cp "$KUBELET" "$STATE/bin/kubelet"

cd "$STATE/work"
SUITE=(--container-runtime-endpoint="unix://$SOCK"
  --container-runtime-process-name=$RUNTIME --container-runtime-pid-file="$STATE/daemon.pid"
  --prepull-images=false
  --kubelet-config-file="$STATE/kubelet-base.yaml"
  # --node-ip: without it kubelet looks its node name up in DNS before it registers the
  # node, and no DNS server answers in this namespace: 20 s of timeouts, after which the
  # CSINode initialisation had often given up its early tries and kept the node NotReady.
  --kubelet-flags="--root-dir=$STATE/kubelet --cgroup-root=/$CG --kubelet-cgroups=/$CG/kubelet --system-cgroups= --fail-cgroupv1=false --cluster-domain=cluster.local --node-ip=10.250.0.1"
  --dns-domain=cluster.local --node-name=e2e-node --report-dir="$LOGS")
FOCUS='\[NodeConformance\]'
SKIP='\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]'
if [ $# -eq 0 ] && [ -n "${PROCS:-}" ]; then set -- --focus="$FOCUS" --skip="$SKIP"; fi
if [ $# -eq 0 ]; then set -- --ginkgo.focus="$FOCUS" --ginkgo.skip="$SKIP"; fi
if [ -n "${PROCS:-}" ]; then
  # "$@": ginkgo's own flags (--focus, --skip)
  in_ns env PATH="$S:$PATH" KUBE_TEST_REPO_LIST="$STATE/repo-list.yaml" \
    "${GINKGO:?GINKGO: the ginkgo CLI, for PROCS}" --procs="$PROCS" --no-color --timeout=24h "$@" "$STATE/bin/e2e_node.test" -- "${SUITE[@]}" \
    > "$LOGS/e2e.log" 2>&1
else
  in_ns env PATH="$S:$PATH" KUBE_TEST_REPO_LIST="$STATE/repo-list.yaml" \
    "$STATE/bin/e2e_node.test" "${SUITE[@]}" --ginkgo.no-color --ginkgo.timeout=24h "$@" > "$LOGS/e2e.log" 2>&1
fi
rc=$?
cd /
echo "=== e2e_node [NodeConformance] against $([ "$RUNTIME" = wharf ] && echo "$WHARF" || echo "$("$CTRD" --version) with $("$RUNC" --version | head -1) ($RUNC)") (logs: $LOGS)"
grep -E '^Ran [0-9]+ of [0-9]+ Specs|Passed \| [0-9]+ Failed' "$LOGS/e2e.log"
if grep -q '^Summarizing [0-9]* Failure' "$LOGS/e2e.log"; then
  echo "--- failed specs:"
  sed -n '/^Summarizing [0-9]* Failure/,$p' "$LOGS/e2e.log" | grep -E '^\s*\[(FAIL|PANICKED|TIMEDOUT|INTERRUPTED)\]'
fi
exit $rc
