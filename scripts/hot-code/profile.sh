#!/usr/bin/env bash
# Regenerates crates/wharf/hot-code.order (see profile.py for what and why) from a release
# build of wharf: run as root, with the fixture registry up (scripts/test.d/20-images.sh),
# after changing the daemon's code paths much, then rebuild the release binary.
#   scripts/hot-code/profile.sh [path/to/release/wharf]
# Needs python3-venv and PyPI (grpcio, grpcio-tools), the CNI plugins in /usr/lib/cni and
# tracefs; crictl on PATH (or CRICTL=/path/to/crictl) adds the calls of a Go gRPC client.
# Everything it makes (state, a network namespace, cgroups below /wharf-hot-code,
# the uprobes) is removed at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-${CARGO_TARGET_DIR:-$root/target}/release/wharf}
[ "$(id -u)" = 0 ] || { echo "profile.sh: run as root (uprobes, containers)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/wharf-hot-code.XXXXXX)
netns=wharf-hot-$$
daemon=""
cleanup() {
  set +e
  [ -n "$daemon" ] && kill "$daemon" && wait "$daemon" 2>/dev/null
  # Disabled one at a time by the kernel, each after a grace period: minutes.
  [ -e /sys/kernel/tracing/events/wharf_hot/enable ] && echo 0 > /sys/kernel/tracing/events/wharf_hot/enable
  echo > /sys/kernel/tracing/uprobe_events 2>/dev/null
  ip netns del "$netns" 2>/dev/null
  umount -R "$work/run" 2>/dev/null
  for d in /sys/fs/cgroup/*/wharf-hot-code /sys/fs/cgroup/unified/wharf-hot-code; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q grpcio grpcio-tools
"$work/venv/bin/python" -m grpc_tools.protoc -I"$root/crates/wharf-cri/proto" \
  --python_out="$work" --grpc_python_out="$work" runtime/v1/api.proto
export PYTHONPATH="$work"
mkdir -p "$work/run" "$work/cni" "$work/ipam"
mount -t tmpfs tmpfs "$work/run"
cp "$bin" "$work/wharf"
cat > "$work/cni/10-hot.conflist" <<J
{"cniVersion": "1.0.0", "name": "hot", "plugins": [
  {"type": "bridge", "bridge": "hotbr0", "isGateway": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.98.0.0/16"}]], "dataDir": "$work/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
J
echo '{"network": {"default": "cni"}, "registries": {}}' > "$work/config.json"
start() {
  env WHARF_ROOT="$work/root" WHARF_RUN="$work/run/wharf" WHARF_CGROUP_PARENT=/wharf-hot-code \
    WHARF_CONFIG="$work/config.json" WHARF_CNI_CONF_DIR="$work/cni" WHARF_CNI_BIN_DIR=/usr/lib/cni \
    WHARF_CNI_CACHE_DIR="$work/cni-cache" "$@" "$work/wharf" daemon --listen "$work/cri.sock" \
    >>"$work/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S "$work/cri.sock" ] && return; sleep 0.1; done
  echo "profile.sh: the daemon did not start:" >&2; cat "$work/daemon.log" >&2; exit 1
}
py() { "$work/venv/bin/python" "$here/profile.py" "$work/wharf" "$work/cri.sock" "$work/run/wharf/docker.sock" "$root/crates/wharf/hot-code.order" "$@"; }
# The image is pulled on the host's network (the registry listens on its loopback), the
# pods run in a network namespace of their own.
start
PYTHONPATH="$work:$here" "$work/venv/bin/python" -c "import drive; drive.Cri('$work/cri.sock').pull()"
kill "$daemon"; wait "$daemon" || true; daemon=""; rm -f "$work/cri.sock"
ip netns add "$netns"
nsenter --net="/run/netns/$netns" ip link set lo up
py define
start nsenter --net="/run/netns/$netns"
py
