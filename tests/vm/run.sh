#!/bin/bash
# Wharf on a real host: a Debian 12 guest that boots systemd on the unified cgroup
# hierarchy (no v1 mounts), under QEMU, with Wharf built here copied in.
#
#   tests/vm/run.sh            # build the release binary if needed, boot, check, report
#   WHARF=path/to/wharf tests/vm/run.sh
#
# The guest's root filesystem comes from debootstrap and its kernel from Debian's
# linux-image-cloud-amd64, installed into that root filesystem (never on this host). The
# image is cached under $VM_CACHE (/var/tmp/wharf-vm), keyed by the recipe below, so a
# second run boots a ready image. Each run boots it with -snapshot: what the guest writes
# lives only as long as that QEMU process (across the guest's own reboots), and the cached
# image stays as built.
#
# KVM is used only when VM_ACCEL=kvm: on machines whose /dev/kvm opens but whose guests
# hang (no working nested virtualization), software emulation (TCG) is the one that works.
#
# The guest has no network. It reaches us through two serial ports: ttyS0 is its console
# (kept in $VM_LOGS/console.log), ttyS1 carries the check results, one line each:
#   ok NAME | not ok NAME: WHY | done
# tests/vm/guest.sh runs them; it is on a second disk (with the binary and the units),
# so changing the checks needs no new image. Prints "N passed, M failed", exits non-zero
# on any failure, on a boot that never reports, or on a timeout ($VM_TIMEOUT s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "vm/run.sh: run as root (debootstrap, mkfs)" >&2; exit 1; }

VM_CACHE=${VM_CACHE:-/var/tmp/wharf-vm}
VM_TIMEOUT=${VM_TIMEOUT:-1800}
VM_MEM=${VM_MEM:-2048}
VM_CPUS=${VM_CPUS:-2}
VM_ACCEL=${VM_ACCEL:-tcg}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
VM_LOGS=${VM_LOGS:-$VM_CACHE/logs/$(date +%Y%m%d-%H%M%S)}

# What the guest has: systemd as PID 1, the cloud kernel (virtio built in or in its
# initramfs), what `wharf` loads or runs (nftables, procps), busybox-static for a test
# image, iproute2, kmod and curl (the Docker API socket, by hand), runc (Debian's 1.1,
# beside which the runtime-tools validation runs), and crun and containerd, which the
# benchmarks (VM_BENCH=1) measure Wharf against.
PACKAGES="systemd,systemd-sysv,udev,dbus,linux-image-cloud-amd64,initramfs-tools,nftables,procps,busybox-static,iproute2,kmod,curl,e2fsprogs,util-linux,runc,crun,containerd"
SUITE=bookworm

host_pkgs="qemu-system-x86 debootstrap e2fsprogs"
missing=""
for p in $host_pkgs; do
  dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "vm/run.sh: installing$missing"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# --- the image -------------------------------------------------------------------------
recipe=$( { echo "$SUITE $PACKAGES"; cat "$here/image.sh"; } | sha256sum | cut -c1-16)
image_dir=$VM_CACHE/image-$recipe
if [ ! -s "$image_dir/root.img" ]; then
  echo "vm/run.sh: building the guest image ($SUITE, debootstrap; a few minutes, once)"
  rm -rf "$image_dir.tmp"
  mkdir -p "$image_dir.tmp"
  SUITE=$SUITE PACKAGES=$PACKAGES MIRROR=$MIRROR "$here/image.sh" "$image_dir.tmp" \
    >"$VM_CACHE/image-build.log" 2>&1 || {
    echo "vm/run.sh: the image build failed; the end of $VM_CACHE/image-build.log:" >&2
    tail -20 "$VM_CACHE/image-build.log" >&2
    exit 1
  }
  rm -rf "$image_dir"
  mv "$image_dir.tmp" "$image_dir"
  # Older images (other recipes) are not needed again.
  find "$VM_CACHE" -maxdepth 1 -type d -name "image-*" ! -name "image-$recipe" -exec rm -rf {} +
fi

# --- the payload: the binaries, the units and the checks --------------------------------
if [ -z "${WHARF:-}" ]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/wharf-target}
  export PATH="$HOME/.cargo/bin:$PATH"
  (cd "$repo" && cargo build --release --locked -q -p wharf)
  WHARF=$CARGO_TARGET_DIR/release/wharf
fi
mkdir -p "$VM_LOGS"
payload=$(mktemp -d /var/tmp/wharf-vm-payload.XXXXXX)
trap 'rm -rf "$payload"' EXIT
mkdir -p "$payload/files/units"
cp "$WHARF" "$payload/files/wharf"
[ -x "$WHARF-shim" ] && cp "$WHARF-shim" "$payload/files/wharf-shim"
cp "$repo"/contrib/systemd/*.service "$repo"/contrib/systemd/*.socket "$repo"/contrib/systemd/*.slice \
  "$payload/files/units/"
cp "$here/guest.sh" "$payload/files/guest.sh"
# RUNTIME_TOOLS=DIR: the OCI runtime-tools validation binaries you built (*.t, runtimetest,
# rootfs-amd64.tar.gz; never built by this repository) run in the guest against `wharf
# runtime` and Debian's runc (RUNTIME_TOOLS_ONLY="default process ..." picks some).
if [ -n "${RUNTIME_TOOLS:-}" ]; then
  mkdir -p "$payload/files/runtime-tools"
  cp "$RUNTIME_TOOLS/runtimetest" "$RUNTIME_TOOLS/rootfs-amd64.tar.gz" "$payload/files/runtime-tools/"
  for t in ${RUNTIME_TOOLS_ONLY:-$(cd "$RUNTIME_TOOLS" && ls *.t | sed 's/\.t$//')}; do
    cp "$RUNTIME_TOOLS/$t.t" "$payload/files/runtime-tools/"
  done
fi
# VM_BENCH=1: bench/runtime_lifecycle (wharf runtime, runc, crun) and bench/run_rm (wharf
# with either cgroup driver, containerd's ctr with runc) run in the guest after the
# checks; their reports come back as "# " lines.
if [ -n "${VM_BENCH:-}" ]; then
  (cd "$repo" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/wharf-target} cargo build --release --locked -q -p wharf-bench --bin runtime_lifecycle --bin run_rm)
  mkdir -p "$payload/files/bench"
  cp "${CARGO_TARGET_DIR:-/var/tmp/wharf-target}"/release/{runtime_lifecycle,run_rm} "$payload/files/bench/"
fi
# KUBELET=PATH: a kubelet you built (go build k8s.io/kubernetes/cmd/kubelet; never by this
# repository) runs standalone in the guest after the reboot checks, with a static pod, on
# the systemd cgroup driver.
[ -n "${KUBELET:-}" ] && cp "$KUBELET" "$payload/files/kubelet"
# VM_DEBUG=script.sh: the guest runs that instead of the checks (its output is on the
# console; it reports on ttyS1 itself), for looking into a failure by hand.
[ -n "${VM_DEBUG:-}" ] && cp "$VM_DEBUG" "$payload/files/debug.sh"
size_mb=$(( $(du -sm "$payload/files" | cut -f1) + 64 ))
mkfs.ext4 -q -L payload -d "$payload/files" "$payload/payload.img" "${size_mb}M" >/dev/null

# --- boot --------------------------------------------------------------------------------
accel=$VM_ACCEL
[ "$accel" = tcg ] && accel="tcg,thread=multi"
results=$VM_LOGS/results.txt
: >"$results"
echo "vm/run.sh: booting ($VM_ACCEL, $VM_CPUS vCPUs, ${VM_MEM} MB); console in $VM_LOGS/console.log"
start=$(date +%s)
set +e
timeout --foreground -k 10 "$VM_TIMEOUT" qemu-system-x86_64 \
  -accel "$accel" -machine q35 -cpu max -smp "$VM_CPUS" -m "$VM_MEM" \
  -kernel "$image_dir/vmlinuz" -initrd "$image_dir/initrd.img" \
  -append "root=LABEL=root rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all panic=-1 net.ifnames=0" \
  -drive "file=$image_dir/root.img,format=raw,if=virtio,cache=unsafe" \
  -drive "file=$payload/payload.img,format=raw,if=virtio,readonly=on" \
  -snapshot -nic none -display none -monitor none -no-user-config -nodefaults \
  -serial "file:$VM_LOGS/console.log" -serial "file:$results" \
  </dev/null
rc=$?
set -e
secs=$(( $(date +%s) - start ))
tr -d '\r' <"$results" >"$results.clean" && mv "$results.clean" "$results"

grep -E '^(ok|not ok|#) ' "$results" || true
passed=$(grep -c '^ok ' "$results" || true)
failed=$(grep -c '^not ok ' "$results" || true)
if ! grep -qx done "$results"; then
  if [ "$rc" = 124 ]; then
    echo "not ok vm: no result after ${VM_TIMEOUT}s (timeout); the console's end:"
  else
    echo "not ok vm: the guest stopped (qemu exit $rc) before reporting done; the console's end:"
  fi
  tail -30 "$VM_LOGS/console.log" | tr -d '\r'
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed (${secs}s in the guest; logs in $VM_LOGS)"
[ "$failed" = 0 ]
