#!/usr/bin/env bash
# Leak check: N sequential `wharf run --rm IMAGE true` in a private setup (own state root,
# run directory, cgroup parent and "host" network namespace), stopping at the first
# failure; then compares with the state after one warm-up run: mounts, cgroups, pinned
# network namespaces, links (veths) and nftables rules in the host namespace, IP leases and
# network records, pod/container/runtime/lock directories, container snapshots, store rows,
# shim processes, and file descriptors any process holds on Wharf's files. Prints a summary;
# exits 1 on a failed run or a leak.
#
# Run as root:  bash bench/leak_check.sh
# Env: WHARF (the binary; default target/release/wharf, else target/debug/wharf),
#      IMAGE (default 127.0.0.1:35000/fixtures/busybox:latest, the fixture registry's),
#      N (default 1000).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-1000}
IMAGE=${IMAGE:-127.0.0.1:35000/fixtures/busybox:latest}
if [ -z "${WHARF:-}" ]; then
  for b in "$here/target/release/wharf" "$here/target/debug/wharf"; do
    [ -x "$b" ] && { WHARF=$b; break; }
  done
fi
[ -x "${WHARF:-}" ] || { echo "leak_check: set WHARF to the wharf binary" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "leak_check: run as root" >&2; exit 2; }

base=$(mktemp -d /tmp/wharf-leak.XXXXXX)
tmp=$base/w # Wharf's directories; the reports stay outside
mkdir "$tmp"
cg_parent=/wharf-leak-$$
export WHARF_ROOT=$tmp/root WHARF_RUN=$tmp/run WHARF_CGROUP_PARENT=$cg_parent
export WHARF_CNI_CONF_DIR=$tmp/cni-conf WHARF_NET_HOST_NS=$tmp/hostns
export WHARF_CONFIG=$tmp/no-config.json DOCKER_CONFIG=$tmp/no-docker-config
unset WHARF_CRASH_AT WHARF_TIMING
mkdir -p "$WHARF_CNI_CONF_DIR" "$WHARF_RUN"

cgroup_dirs() {
  grep -E ' - cgroup2? ' /proc/self/mountinfo | awk '$4 == "/" { print $5 }' | sort -u |
    while read -r m; do echo "$m$cg_parent"; done
}

# Processes whose command line names our directory (shims), or that hold one of its files.
our_procs() {
  local p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = $$ ] && continue
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$tmp"; then echo "${p#/proc/}"; fi
  done
}

cleanup() {
  local pid d m
  for _ in 1 2 3; do
    for pid in $(our_procs); do kill -9 "$pid" 2>/dev/null || true; done
    for d in $(cgroup_dirs); do
      [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
        while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done
    done
    sleep 0.1
  done
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  awk -v t="$tmp" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$base"
}
trap cleanup EXIT

touch "$WHARF_NET_HOST_NS"
unshare --net="$WHARF_NET_HOST_NS" true
nsenter --net="$WHARF_NET_HOST_NS" ip link set lo up

w() { "$WHARF" "$@"; }

# What there is: one line per object, so a diff names what leaked.
inventory() {
  local d
  awk -v t="$tmp" 'index($5, t) == 1 { print "mount " $5 }' /proc/self/mountinfo | sort
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && find "$d" -mindepth 1 -type d | sed 's/^/cgroup /'
  done
  find "$WHARF_RUN/netns" -mindepth 1 2>/dev/null | sed 's/^/netns /'
  nsenter --net="$WHARF_NET_HOST_NS" ip -o link show | awk -F': ' '{ print "link " $2 }' |
    sed 's/@.*//'
  echo "nft-rules $(nsenter --net="$WHARF_NET_HOST_NS" nft list ruleset 2>/dev/null | grep -c . || true)"
  find "$WHARF_ROOT/net/builtin/ipam" -mindepth 1 2>/dev/null | grep -E '/[0-9a-f.:]+$' |
    grep -v last_reserved | sed 's/^/lease /' || true
  find "$WHARF_ROOT/net/builtin/pods" -mindepth 1 2>/dev/null | sed 's/^/net-record /' || true
  # (Each of these appears only once something needs it.)
  for d in "$WHARF_ROOT/pods" "$WHARF_ROOT/containers" "$WHARF_RUN/pods" \
    "$WHARF_RUN/containers" "$WHARF_RUN/runtime" "$WHARF_RUN/locks"; do
    [ -d "$d" ] || continue
    find "$d" -mindepth 1 -maxdepth 1 | sed 's/^/dir /'
  done
  echo "snapshots $(find "$WHARF_ROOT/image/snapshots" -mindepth 1 -maxdepth 1 | wc -l)"
  w ps -aq | sed 's/^/container /'
  w pod ls -q | sed 's/^/pod /'
  for d in $(our_procs); do echo "process $d $({ tr '\0' ' ' <"/proc/$d/cmdline"; } 2>/dev/null)"; done
  # Descriptors of any process (but this script) open on Wharf's files.
  find /proc/[0-9]*/fd -maxdepth 1 -type l -lname "$tmp*" -printf '%h %l\n' 2>/dev/null |
    grep -v "^/proc/$$/" | sed 's/^/fd /' || true
}

w pull "$IMAGE" >/dev/null 2>&1 || { echo "leak_check: cannot pull $IMAGE" >&2; exit 1; }
# Warm-up: the bridge, the lazily made directories and the image's snapshots exist after it.
w run --rm "$IMAGE" true
inventory >"$base/before"
files_before=$(cut -f1 /proc/sys/fs/file-nr)

fails=0
start=$(date +%s.%N)
for ((i = 1; i <= N; i++)); do
  if ! out=$(w run --rm "$IMAGE" true 2>&1); then
    fails=$((fails + 1))
    echo "run $i failed: $out"
    break
  fi
  if [ -n "$out" ]; then
    echo "run $i printed: $out"
    fails=$((fails + 1))
    break
  fi
done
end=$(date +%s.%N)
runs=$((i > N ? N : i))

inventory >"$base/after"
files_after=$(cut -f1 /proc/sys/fs/file-nr)
awk -v s="$start" -v e="$end" -v n="$runs" -v f="$fails" -v b="$WHARF" 'BEGIN {
  printf "leak_check: %d runs, %d failures in %.1fs (%.1f ms/run) with %s\n", n, f, e - s, (e - s) * 1000 / n, b }'
echo "leak_check: kernel file handles in use: $files_before before, $files_after after (whole host, informational)"
if diff "$base/before" "$base/after" >"$base/diff"; then
  echo "leak_check: no leaks (inventory of mounts, cgroups, netns, links, nft rules, leases, directories, snapshots, rows, processes and fds unchanged: $(wc -l <"$base/before") lines)"
else
  echo "leak_check: LEAKS (< before, > after):"
  cat "$base/diff"
  exit 1
fi
[ "$fails" = 0 ]
