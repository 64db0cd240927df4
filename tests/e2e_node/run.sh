#!/bin/bash
# Kubernetes' node conformance suite (e2e_node, [NodeConformance]) against `wharf daemon`,
# offline, on a machine without systemd:
#
#   E2E_NODE=/path/e2e_node.test KUBELET=/path/kubelet AGNHOST=/path/agnhost \
#   [WHARF=target/release/wharf] [GINKGO=/path/ginkgo PROCS=4] tests/e2e_node/run.sh [flags]
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
WHARF=${WHARF:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/wharf}
[ -x "$WHARF" ] && [ -x "$(dirname "$WHARF")/wharf-shim" ] || { echo "run.sh: $WHARF (and wharf-shim beside it) missing: cargo build --release" >&2; exit 2; }
for b in "$E2E_NODE" "$KUBELET" "$AGNHOST"; do [ -x "$b" ] || { echo "run.sh: $b is not an executable" >&2; exit 2; }; done
[ "$(id -u)" = 0 ] || { echo "run.sh: run as root" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=/var/tmp/e2e-state
NS=wharf-e2e
NSPATH=/run/netns/$NS
CG=wharf-e2e
REG=127.0.0.1:5056
REGDIR=/var/tmp/e2e-registry
LOGS=/var/tmp/e2e-logs/$(date +%Y%m%d-%H%M%S)
SOCK=$STATE/run/wharf.sock
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
    if tr '\0' ' ' 2>/dev/null < /proc/$p/cmdline | grep -q -- "$STATE/bin/e2e_node.test" ||
       grep -qs "WHARF_RUN=$STATE/run" /proc/$p/environ; then
      kill -KILL "$p" 2>/dev/null
    fi
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
  for t in umoci skopeo gcc docker-registry; do command -v $t >/dev/null || apt-get install -y umoci skopeo gcc libc6-dev docker-registry >/dev/null; done
  # Debian's busybox is fetched outside the namespace (which reaches only its registry)
  IMAGES=/var/tmp/e2e-images
  mkdir -p "$IMAGES/deb"
  if [ ! -x "$IMAGES/deb/x/bin/busybox" ]; then
    (cd "$IMAGES/deb" && apt-get download busybox && dpkg-deb -x busybox_*.deb x) > "$LOGS/images.log" 2>&1 \
      || { tail -5 "$LOGS/images.log"; log "apt-get download busybox failed"; exit 2; }
  fi
  in_ns env REG=$REG AGNHOST="$AGNHOST" OUT="$IMAGES" "$HERE/images/build-images.sh" >> "$LOGS/images.log" 2>&1 \
    || { tail -20 "$LOGS/images.log"; log "image build failed"; exit 2; }
fi
cat > "$STATE/repo-list.yaml" <<EOF
promoterE2eRegistry: $REG/e2e-test-images
gcRegistry: $REG
gcEtcdRegistry: $REG
EOF

# ---- daemon -------------------------------------------------------------------------
cat > "$STATE/config.json" <<EOF
{ "registries": { "registry.k8s.io": { "mirrors": ["http://$REG"], "insecure": true },
                  "$REG": { "insecure": true } },
  "daemon": { "docker-listen": "", "stream-address": "127.0.0.1:0" } }
EOF
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/unified/; do mkdir -p "$h$CG"; done
nsenter --net="$NSPATH" env WHARF_ROOT="$STATE/root" WHARF_RUN="$STATE/run" WHARF_CGROUP_PARENT="/$CG/wharf" \
  WHARF_CNI_CONF_DIR="$STATE/empty-cni" WHARF_CNI_CACHE_DIR="$STATE/cni-cache" \
  WHARF_NET_HOST_NS="$NSPATH" WHARF_CONFIG="$STATE/config.json" TMPDIR="$STATE/tmp" \
  "$WHARF" daemon --listen "$SOCK" > "$LOGS/daemon.log" 2>&1 </dev/null &
echo $! > "$STATE/daemon.pid"
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.2; done
[ -S "$SOCK" ] || { tail "$LOGS/daemon.log"; log "daemon"; exit 2; }

# ---- kubelet: stand-ins for systemd-run/systemctl/sudo, its own mount namespace --------
S=$STATE/bin
mount --bind "$STATE/kubelet" "$STATE/kubelet" && mount --make-shared "$STATE/kubelet"
echo 1 > "$STATE/sysctl/overcommit_memory"; echo 10 > "$STATE/sysctl/panic"; echo 1 > "$STATE/sysctl/panic_on_oops"
cat > "$S/kubelet-in-ns" <<EOF
#!/bin/bash
# kubelet in a mount namespace of its own where the sysctls it rewrites are read-only binds
exec unshare --mount --propagation unchanged bash -c '
  mount --make-rslave /proc
  mount --bind -o ro $STATE/sysctl/overcommit_memory /proc/sys/vm/overcommit_memory
  mount --bind -o ro $STATE/sysctl/panic /proc/sys/kernel/panic
  mount --bind -o ro $STATE/sysctl/panic_on_oops /proc/sys/kernel/panic_on_oops
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
cp "$E2E_NODE" "$STATE/bin/e2e_node.test"; cp "$KUBELET" "$STATE/bin/kubelet"

cd "$STATE/work"
SUITE=(--container-runtime-endpoint="unix://$SOCK"
  --container-runtime-process-name=wharf --container-runtime-pid-file="$STATE/daemon.pid"
  --prepull-images=false
  --kubelet-config-file="$STATE/kubelet-base.yaml"
  --kubelet-flags="--root-dir=$STATE/kubelet --cgroup-root=/$CG --kubelet-cgroups=/$CG/kubelet --system-cgroups= --fail-cgroupv1=false --cluster-domain=cluster.local"
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
echo "=== e2e_node [NodeConformance] against $WHARF (logs: $LOGS)"
grep -E '^Ran [0-9]+ of [0-9]+ Specs|Passed \| [0-9]+ Failed' "$LOGS/e2e.log"
if grep -q '^Summarizing [0-9]* Failure' "$LOGS/e2e.log"; then
  echo "--- failed specs:"
  sed -n '/^Summarizing [0-9]* Failure/,$p' "$LOGS/e2e.log" | grep -E '^\s*\[(FAIL|PANICKED|TIMEDOUT|INTERRUPTED)\]'
fi
exit $rc
