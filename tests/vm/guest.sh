#!/bin/bash
# The checks tests/vm/run.sh runs inside its guest (Debian 12, systemd as PID 1, cgroup v2
# only), from the payload disk at /mnt/payload. Two boots: the first installs Wharf as
# install.sh does, checks, leaves containers that must come back, and reboots the guest
# (systemctl reboot); the second checks what came back. Every result is one line on
# ttyS1: "ok NAME" or "not ok NAME: WHY"; "done" ends the run, then the guest powers off.
set -uo pipefail
P=/mnt/payload
STATE=/var/lib/wharf-vm
OUT=/dev/ttyS1
mkdir -p "$STATE"
stty -F "$OUT" raw -echo 2>/dev/null || true
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

report() { echo "$*" >"$OUT"; echo "$*" >>"$STATE/results"; echo "wharf-vm: $*"; }
# check NAME COMMAND...: one result line; a failure carries the last lines of the output.
# A check that hangs is looked into and then ended by its watchdog (see `watchdog`).
check() {
  local name=$1; shift
  local out rc wd self=$BASHPID
  # (An asynchronous command's words are expanded in its own process: not $BASHPID there.)
  watchdog "$name" "$self" &
  wd=$!
  out=$("$@" 2>&1); rc=$?
  kill $wd $(pgrep -P $wd) 2>/dev/null; wait $wd 2>/dev/null
  if [ $rc = 0 ]; then
    report "ok $name"
  else
    report "not ok $name: exit $rc: $(echo "$out" | tail -4 | tr '\n' '|')"
    echo "$out" | tail -20
    diagnose
  fi
  return $rc
}
# What a failed run needs for its diagnosis, on the console (run.sh keeps it).
diagnose() {
  echo "=== wharf-vm: diagnosis"
  systemctl status --no-pager wharf.service wharf.socket container-gen.service 2>&1 | tail -30
  journalctl -b --no-pager -u wharf.service -u wharf.socket -u wharf-restore.service 2>&1 | head -30
  journalctl -b --no-pager -u wharf.service -u wharf.socket -u wharf-restore.service -u container-gen.service 2>&1 | tail -30
  # What the pods' shims logged (each pod's shim.log: an OOM watch it could not open, a
  # runtime call that failed), the last lines of each that has any.
  find /run/wharf -name shim.log -size +0 2>/dev/null | while read -r f; do
    echo "--- $f"
    tail -5 "$f"
  done
}
# watchdog NAME PID: after HANG_DUMP s of check NAME (none waits that long for anything:
# wait_for's longest is 300 s), what every process of Wharf's waits for goes to the console
# (the kernel's stacks, open files, the blocked tasks); after HANG_KILL s the check's own
# processes (PID's descendants) are killed, so it fails with a reason and the run goes on.
HANG_DUMP=${HANG_DUMP:-360} HANG_KILL=${HANG_KILL:-480}
watchdog() {
  local name=$1 shell=$2 me=$BASHPID p t
  sleep "$HANG_DUMP"
  echo "=== wharf-vm: check $name still runs after ${HANG_DUMP}s; the processes:"
  ps -eo pid,ppid,stat,wchan:30,etimes,args --forest
  for p in $(pgrep -f 'wharf|runc'); do
    [ "$p" = "$me" ] && continue
    echo "--- pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
    for t in /proc/$p/task/*; do
      echo "  task ${t##*/}: $(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
      sed 's/^/    /' "$t/stack" 2>/dev/null
    done
    ls -l "/proc/$p/fd" 2>/dev/null | sed 1d | sed 's/^.* \([0-9]* -> \)/  fd \1/'
  done
  echo w >/proc/sysrq-trigger
  journalctl -b --no-pager -n 40
  sleep $((HANG_KILL - HANG_DUMP))
  echo "=== wharf-vm: check $name killed after ${HANG_KILL}s"
  descendants() { local c; for c in $(pgrep -P "$1"); do [ "$c" != "$me" ] && { echo "$c"; descendants "$c"; }; done; }
  kill -9 $(descendants "$shell") 2>/dev/null
}
finish() { report done; sync; systemctl poweroff; exit 0; }
# want EXPECTED COMMAND...: the command's output (trimmed) is EXPECTED.
want() {
  local expected=$1; shift
  local got
  got=$("$@" 2>&1) || { echo "$got"; return 1; }
  got=$(echo "$got" | tr -d '\r' | sed -e 's/[[:space:]]*$//')
  [ "$got" = "$expected" ] || { echo "expected '$expected', got '$got'"; return 1; }
}
# The cgroup directory (v2) of a container's main process.
cgroup_of() {
  local pid
  pid=$(wharf inspect -f '{{.State.Pid}}' "$1") || return 1
  echo "/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$pid/cgroup")"
}
wait_for() { # wait_for SECONDS COMMAND...
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.5; done
}

[ -e $P/debug.sh ] && { . $P/debug.sh; finish; }
# The OCI runtime-tools validation suite (RUNTIME_TOOLS= of run.sh: binaries you built),
# against `wharf runtime` and Debian's runc on this same host: one result per binary, a
# failure only where Wharf fails a spec runc passes. The TAP of both is on the console.
runtime_tools() {
  local rt=$P/runtime-tools t name wf rk extra wrc rrc
  # A TAP file's "not ok" and "ok" test numbers; "none" when it has no plan (nothing ran).
  numbers() { # numbers FILE ok|not
    grep -q '^1\.\.' "$1" || { echo none; return; }
    if [ "$2" = ok ]; then sed -n 's/^ok \([0-9]*\).*/\1/p' "$1"; else sed -n 's/^not ok \([0-9]*\).*/\1/p' "$1"; fi | sort -u
  }
  # A copy on the root filesystem: some tests leave the guest's mounts changed, and the
  # tests read runtimetest and the rootfs from their working directory.
  mkdir -p /var/tmp/rt && cp -r $rt /var/tmp/rt-tools && rt=/var/tmp/rt-tools || return
  # linux_ns_itype last: after it, no test starts any more, for runc as for Wharf.
  for t in $(ls $rt/*.t | grep -v /linux_ns_itype.t) $(ls $rt/linux_ns_itype.t 2>/dev/null); do
    cd $rt || return
    name=$(basename "$t" .t)
    wf=/var/tmp/rt/$name.wharf rk=/var/tmp/rt/$name.runc
    (cd /var/tmp/rt && rm -rf ocitest*)
    RUNTIME=/usr/local/bin/wharf-runc TMPDIR=/var/tmp/rt timeout 300 "$t" >"$wf" 2>&1; wrc=$?
    RUNTIME=/usr/sbin/runc TMPDIR=/var/tmp/rt timeout 300 "$t" >"$rk" 2>&1; rrc=$?
    # A regression: a test Wharf fails (or never reaches) that runc passes. A binary that
    # prints no TAP and exits 0 passed: the *_fail ones want the runtime to refuse the
    # config (process_capabilities_fail: an unknown capability MUST be an error), and
    # print nothing more when it does.
    if [ "$(numbers "$wf" not)" = none ]; then
      if [ $wrc = 0 ]; then extra=; else extra=$(numbers "$rk" ok | grep -v none | head -1); fi
    else
      extra=$(comm -12 <(numbers "$wf" not) <(numbers "$rk" ok))
    fi
    echo "runtime-tools $name: wharf $(grep -c '^ok' "$wf") ok, $(grep -c '^not ok' "$wf") not ok, exit $wrc;" \
      "runc $(grep -c '^ok' "$rk") ok, $(grep -c '^not ok' "$rk") not ok, exit $rrc"
    grep -q '^1\.\.' "$wf" || { echo "--- wharf (no TAP):"; head -3 "$wf"; }
    if grep -q '^not ok' "$wf" "$rk"; then
      echo "--- wharf:"; grep -v '^ok' "$wf" | head -8; echo "--- runc:"; grep -v '^ok' "$rk" | head -8
    fi
    if [ -z "$extra" ]; then
      report "ok runtime-tools-$name"
    else
      report "not ok runtime-tools-$name: fails tests runc passes: $(echo $extra | cut -c1-80)"
    fi
  done
  cd /
}

# VM_BENCH=1 of run.sh: the benchmarks on this unified host; each line of their reports
# goes to ttyS1 as "# NAME: LINE".
benches() {
  local b name n out
  wharf save -o /var/tmp/bench-image.tar localhost/busybox:latest || { report "not ok bench-image"; return; }
  for b in runtime_lifecycle:20 run_rm:10; do
    name=${b%%:*}; n=${b#*:}
    out=$(cd /var/tmp && WHARF_BIN=/usr/local/bin/wharf WHARF_BENCH_IMAGE=localhost/busybox:latest \
      WHARF_BENCH_IMAGE_ARCHIVE=/var/tmp/bench-image.tar timeout 1200 $P/bench/$name $n 2>&1)
    if [ $? = 0 ]; then report "ok bench-$name"; else report "not ok bench-$name: $(echo "$out" | tail -3 | tr '\n' '|')"; fi
    echo "$out" | grep -v '^$' | sed "s/^/# $name: /" >"$OUT"
    echo "$out"
  done
}

# KUBELET= of run.sh: a kubelet you built (never by this repository), standalone with a
# static pod, on the systemd cgroup driver, which Wharf reports to it (RuntimeConfig).
kubelet_checks() {
  install -m 0755 $P/kubelet /usr/local/bin/kubelet
  mkdir -p /etc/kubernetes/manifests /var/lib/kubelet
  cat >/etc/kubernetes/kubelet.yaml <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
containerRuntimeEndpoint: unix:///run/wharf/wharf.sock
cgroupDriver: systemd
failSwapOn: false
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
EOF
  cat >/etc/kubernetes/manifests/web.yaml <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - name: main
    image: localhost/busybox:latest
    imagePullPolicy: Never
    command: [sleep, "100000"]
    resources: {limits: {memory: 64Mi, cpu: 250m}}
EOF
  healthy() { [ "$(curl -s --max-time 5 http://127.0.0.1:10248/healthz)" = ok ]; }
  kpid() {
    local c; c=$(wharf ps -q --filter label=io.kubernetes.container.name=main) && [ -n "$c" ] &&
      wharf inspect -f '{{.State.Pid}}' "$c"
  }
  check kubelet-starts sh -c 'systemd-run --unit kubelet /usr/local/bin/kubelet --config /etc/kubernetes/kubelet.yaml \
    --hostname-override vm'
  check kubelet-healthy wait_for 300 healthy
  check kubelet-pod-runs wait_for 300 kpid
  local pid; pid=$(kpid)
  check kubelet-pod-in-kubepods-slice sh -c "grep -Eq '^0::/kubepods.slice/(kubepods-[a-z]+.slice/)?kubepods-([a-z]+-)?pod[0-9a-f_]+.slice/wharf-pod-[0-9a-f]+.scope/' /proc/$pid/cgroup ||
    { cat /proc/$pid/cgroup; exit 1; }"
  check kubelet-pod-limits sh -c "d=/sys/fs/cgroup\$(sed -n 's/^0:://p' /proc/$pid/cgroup) &&
    [ \"\$(cat \$d/memory.max)\" = 67108864 ] && [ \"\$(cat \$d/cpu.max)\" = '25000 100000' ] &&
    [ \"\$(cat \$d/memory.oom.group)\" = 1 ]"
  check kubelet-driver-systemd sh -c "journalctl -u kubelet --no-pager | grep -i 'cgroup driver' | grep -q systemd"
  check kubelet-restart-keeps-pod sh -c "systemctl restart kubelet && sleep 5 && for i in \$(seq 120); do
      [ \"\$(curl -s --max-time 5 http://127.0.0.1:10248/healthz)\" = ok ] && break; sleep 1; done && sleep 20 &&
    kill -0 $pid && [ \"\$(wharf ps -q --filter label=io.kubernetes.container.name=main | wc -l)\" = 1 ]"
  check wharf-restart-keeps-kubelet-pod sh -c "systemctl restart wharf.service && sleep 30 && kill -0 $pid &&
    [ \"\$(wharf inspect -f '{{.State.Pid}}' \$(wharf ps -q --filter label=io.kubernetes.container.name=main))\" = $pid ]"
  check kubelet-pod-removed sh -c "rm /etc/kubernetes/manifests/web.yaml && for i in \$(seq 180); do
      [ -z \"\$(wharf ps -q --filter label=io.kubernetes.container.name=main)\" ] && exit 0; sleep 1; done; exit 1"
  journalctl -u kubelet --no-pager | tail -40
  systemctl stop kubelet
}

phase=$(cat "$STATE/phase" 2>/dev/null || echo 1)
echo "wharf-vm: phase $phase"

if [ "$phase" = 1 ]; then
  # --- the host is what the issue describes -------------------------------------------
  check host-systemd-pid1 want systemd cat /proc/1/comm
  check host-unified-only sh -c '[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] &&
    ! grep -q " cgroup " /proc/mounts && grep -q nsdelegate /proc/mounts'

  # --- install as install.sh does -------------------------------------------------------
  do_install() {
    install -m 0755 $P/wharf /usr/local/bin/wharf
    [ -e $P/wharf-shim ] && install -m 0755 $P/wharf-shim /usr/local/bin/wharf-shim
    ln -sf wharf /usr/local/bin/wharf-runc
    cp $P/units/* /etc/systemd/system/
    systemctl daemon-reload
    systemctl enable --now wharf.socket wharf.service
    systemctl enable --now wharf-restore.service
  }
  check install do_install || finish

  # A busybox image made from the guest's busybox-static (there is no registry).
  image() {
    local d; d=$(mktemp -d)
    mkdir -p "$d/r/bin" "$d/r/etc" "$d/r/proc" "$d/r/sys" "$d/r/dev" "$d/r/tmp"
    cp /bin/busybox "$d/r/bin/busybox"
    echo 'root:x:0:0:root:/root:/bin/sh' >"$d/r/etc/passwd"
    echo 'root:x:0:' >"$d/r/etc/group"
    for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$d/r/bin/$a"; done
    tar -C "$d/r" -cf "$d/r.tar" . && wharf import "$d/r.tar" localhost/busybox:latest && rm -rf "$d"
  }
  check image-import image || finish
  B=localhost/busybox:latest

  # --- containers on the unified hierarchy --------------------------------------------
  check run-rm want hello wharf run --rm $B echo hello
  check run-bridge-network sh -c "wharf run --rm $B ip -4 -o addr show eth0 | grep -q 'inet 10\.88\.'"
  check run-exit-code sh -c "wharf run --rm $B sh -c 'exit 3'; [ \$? = 3 ]"

  check resources-start wharf run -d --name res --memory 64m --memory-reservation 32m \
    --cpus 0.5 --cpu-shares 512 --pids-limit 64 --cpuset-cpus 0 $B sleep 1000
  cg=$(cgroup_of res)
  check resources-memory want 67108864 cat "$cg/memory.max"
  check resources-memory-low want 33554432 cat "$cg/memory.low"
  check resources-cpu-max want "50000 100000" cat "$cg/cpu.max"
  check resources-pids want 64 cat "$cg/pids.max"
  check resources-cpuset want 0 cat "$cg/cpuset.cpus"
  check resources-update sh -c "wharf update --memory 96m --memory-swap 128m res &&
    [ \$(cat $cg/memory.max) = 100663296 ] && [ \$(cat $cg/memory.swap.max) = 33554432 ]"
  check cgroupns-root want "0::/" wharf exec res cat /proc/self/cgroup
  check cgroupns-own-limits want 100663296 wharf exec res cat /sys/fs/cgroup/memory.max
  check freezer-pause sh -c "wharf pause res && grep -qx 'frozen 1' $cg/cgroup.events &&
    [ \"\$(wharf inspect -f '{{.State.Status}}' res)\" = paused ]"
  check freezer-unpause sh -c "wharf unpause res && grep -qx 'frozen 0' $cg/cgroup.events &&
    wharf exec res true"
  check stats sh -c "wharf stats --no-stream --format '{{.MemUsage}} {{.PIDs}}' res | grep -Eq '^[0-9.]+[kKMG]i?B / 96MiB 1$'"
  check stats-pressure sh -c "wharf stats --no-stream --format '{{.CPUPressure}}|{{.MemPressure}}|{{.IOPressure}}' res |
    grep -Eq '^(some [0-9.]+% full [0-9.]+%\|?){3}\$'"
  check oom-killed sh -c "wharf run --name oom --memory 16m --memory-swap 16m $B sh -c 'tail /dev/zero'
    rc=\$?; [ \$rc = 137 ] || { echo exit \$rc; exit 1; }
    [ \"\$(wharf inspect -f '{{.State.OOMKilled}}' oom)\" = true ]"
  check device-filter-denies sh -c "! wharf run --rm $B sh -c 'mknod /tmp/vda b 254 0 && head -c1 /tmp/vda >/dev/null'"
  check device-given want ok wharf run --rm --device /dev/null:/dev/given $B sh -c 'echo x >/dev/given && echo ok'

  # --- the systemd cgroup driver: the default here, since systemd booted the host ----------
  # A pod is a scope systemd made (Delegate=yes) in wharf.slice, its shim in a leaf of it
  # and its containers' cgroups beside that; the pod's limits are the scope's properties.
  check driver-systemd sh -c "wharf info | grep -qx ' Cgroup Driver: systemd'"
  scope=$(basename "$(dirname "$cg")")
  check pod-in-systemd-scope sh -c "case '$cg' in /sys/fs/cgroup/wharf.slice/wharf-pod-*.scope/*) ;; *) echo 'cgroup $cg'; exit 1;; esac &&
    [ \"\$(systemctl show -P ActiveState $scope)\" = active ] && [ \"\$(systemctl show -P Delegate $scope)\" = yes ] &&
    [ \"\$(systemctl show -P Slice $scope)\" = wharf.slice ] &&
    [ -n \"\$(cat /sys/fs/cgroup/wharf.slice/$scope/wharf-shim/cgroup.procs)\" ]"
  wharf pod create --name lim --memory 128m --cpus 0.5 --pids-limit 50 >/dev/null &&
    wharf run -d --name inlim --pod lim $B sleep 1000 >/dev/null
  lcg=$(cgroup_of inlim); lscope=$(basename "$(dirname "$lcg")"); ldir=$(dirname "$lcg")
  check pod-limits-are-unit-properties sh -c "[ \"\$(systemctl show -P MemoryMax $lscope)\" = 134217728 ] &&
    [ \"\$(systemctl show -P TasksMax $lscope)\" = 50 ] && [ \"\$(systemctl show -P CPUQuotaPerSecUSec $lscope)\" = 500ms ] &&
    [ \"\$(cat $ldir/memory.max)\" = 134217728 ] && [ \"\$(cat $ldir/pids.max)\" = 50 ] &&
    [ \"\$(cat $ldir/cpu.max)\" = '50000 100000' ]"
  check pod-update-sets-unit-properties sh -c "wharf pod update --memory 192m --pids-limit 60 lim >/dev/null &&
    [ \"\$(systemctl show -P MemoryMax $lscope)\" = 201326592 ] && [ \"\$(systemctl show -P TasksMax $lscope)\" = 60 ] &&
    [ \"\$(cat $ldir/memory.max)\" = 201326592 ] && [ \"\$(cat $ldir/cpu.max)\" = '50000 100000' ]"
  check units-removed-with-pod sh -c "wharf pod rm -f lim >/dev/null && [ ! -d $ldir ] &&
    [ -z \"\$(systemctl list-units --all --plain --no-legend $lscope)\" ]"
  wharf rm -f res oom >/dev/null 2>&1
  check units-removed-with-container sh -c "[ ! -d /sys/fs/cgroup/wharf.slice/$scope ] &&
    [ -z \"\$(systemctl list-units --all --plain --no-legend $scope)\" ]"

  # --- the cgroupfs driver on the unified hierarchy: docker's layout -----------------------
  # A container `run` makes a pod for takes that pod's cgroup, /wharf/<pod id>, with nothing
  # below it; its shim lives in /wharf/wharf-shim, the leaf such shims share, which the
  # last pod's removal takes away. A root of its own, beside the systemd driver's pods.
  cgfs() { WHARF_ROOT=/var/lib/wharf-cgfs WHARF_RUN=/run/wharf-cgfs WHARF_CGROUP_MANAGER=cgroupfs wharf "$@"; }
  cgfs_image() { wharf save $B | cgfs load >/dev/null; }
  check cgfs-image cgfs_image
  check cgfs-run-rm want hello cgfs run --rm --network none $B echo hello
  check cgfs-run-d cgfs run -d --name flat --memory 64m $B sleep 1000
  fpid=$(cgfs inspect -f '{{.State.Pid}}' flat)
  fcg=/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$fpid/cgroup")
  cgfs_layout() {
    case "$fcg" in
      /sys/fs/cgroup/wharf/wharf-shim | /sys/fs/cgroup/wharf/*/*) echo "cgroup $fcg"; return 1 ;;
      /sys/fs/cgroup/wharf/?*) ;;
      *) echo "cgroup $fcg"; return 1 ;;
    esac
    local below p shims=0
    below=$(find "$fcg" -mindepth 1 -type d)
    [ -z "$below" ] || { echo "cgroups below $fcg: $below"; return 1; }
    [ "$(cat "$fcg/memory.max")" = 67108864 ] || { echo "memory.max $(cat "$fcg/memory.max")"; return 1; }
    for p in $(cat /sys/fs/cgroup/wharf/wharf-shim/cgroup.procs); do
      [ "$(cat "/proc/$p/comm")" = wharf-shim ] || { echo "pid $p in the shim leaf: $(cat "/proc/$p/comm")"; return 1; }
      shims=$((shims + 1))
    done
    [ "$shims" -ge 1 ] || { echo "no shim in /sys/fs/cgroup/wharf/wharf-shim"; return 1; }
  }
  check cgfs-docker-layout cgfs_layout
  cgfs_pause() {
    cgfs pause flat && grep -qx 'frozen 1' "$fcg/cgroup.events" &&
      cgfs unpause flat && grep -qx 'frozen 0' "$fcg/cgroup.events" && cgfs exec flat true
  }
  check cgfs-pause-unpause cgfs_pause
  cgfs_removed() {
    cgfs rm -f flat >/dev/null || return 1
    local left
    left=$(find /sys/fs/cgroup/wharf -mindepth 1 -type d)
    [ -z "$left" ] || { echo "left behind: $left"; return 1; }
  }
  check cgfs-removal-leaves-nothing cgfs_removed

  # --- the daemon under systemd -------------------------------------------------------
  ping() { curl -sf --max-time 20 --unix-socket /run/wharf/docker.sock http://d/_ping; }
  check daemon-active wait_for 120 systemctl is-active --quiet wharf.service
  check socket-activation sh -c 'systemctl stop wharf.service && [ "$(systemctl is-active wharf.service)" != active ] &&
    [ "$(curl -sf --max-time 20 --unix-socket /run/wharf/docker.sock http://d/_ping)" = OK ] &&
    [ "$(systemctl is-active wharf.service)" = active ]'
  # Type=notify: active only once the daemon said READY=1, with its status text.
  check daemon-notify sh -c 'systemctl show -p StatusText wharf.service | grep -q "StatusText=serving"'
  check daemon-journal sh -c 'journalctl -u wharf.service -b --no-pager | grep -q wharf'
  api_run() { # a container made through the Docker API
    curl -sf --max-time 20 --unix-socket /run/wharf/docker.sock -H 'Content-Type: application/json' \
      -d "{\"Image\":\"$B\",\"Cmd\":[\"sleep\",\"1000\"]}" "http://d/v1.41/containers/create?name=$1" >/dev/null &&
      curl -sf --max-time 20 --unix-socket /run/wharf/docker.sock -X POST "http://d/v1.41/containers/$1/start"
  }
  check api-run api_run viaapi
  pid_before=$(wharf inspect -f '{{.State.Pid}}' viaapi 2>/dev/null)
  check restart-keeps-pods sh -c "systemctl restart wharf.service &&
    [ -n '$pid_before' ] && kill -0 $pid_before && grep -q '^0::/wharf.slice/wharf-pod-' /proc/$pid_before/cgroup &&
    [ \"\$(curl -sf --max-time 20 --unix-socket /run/wharf/docker.sock http://d/v1.41/containers/viaapi/json | grep -o '\"Running\":true')\" = '\"Running\":true' ]"

  # --- a container managed by systemd (wharf generate systemd) ---------------------------
  unit_of() {
    wharf create --name gen $B sh -c 'sleep 100000' >/dev/null &&
      (cd /etc/systemd/system && wharf generate systemd --files gen) | grep -qx /etc/systemd/system/container-gen.service &&
      systemctl daemon-reload && systemctl enable --now container-gen.service &&
      wait_for 60 sh -c '[ "$(wharf inspect -f {{.State.Running}} gen)" = true ]'
  }
  check generate-systemd-start unit_of
  check generate-systemd-stop sh -c 'systemctl stop container-gen.service &&
    [ "$(wharf inspect -f {{.State.Running}} gen)" = false ] && systemctl start container-gen.service'

  # --- what must come back after a reboot ---------------------------------------------
  check restart-always-start wharf run -d --name always --restart always $B sleep 100000
  check restart-no-start wharf run -d --name norestart $B sleep 100000
  echo 2 >"$STATE/phase"
  date +%s >"$STATE/reboot-at"
  sync
  report "reboot"
  systemctl reboot
  exit 0
fi

if [ "$phase" = 2 ]; then
  echo 3 >"$STATE/phase"
  # The shutdown stopped the containers (wharf-restore's ExecStop runs `wharf system
  # shutdown`, which prints each), instead of leaving them to the final SIGTERM, which
  # sleep as PID 1 ignores, and 90 s before SIGKILL. The journal is kept across boots.
  echo "reboot to the checks: $(( $(date +%s) - $(cat "$STATE/reboot-at") ))s"
  check reboot-shutdown-stopped-containers sh -c 'journalctl -b -1 --no-pager -o cat -u wharf-restore.service |
    grep -x always && journalctl -b -1 --no-pager -o cat -u wharf-restore.service | grep -q "^Stopped wharf-restore"'
  # The pods' scopes outlived that stop: wharf.slice (contrib/systemd) leaves the shutdown
  # for last, so systemd stopped no pod's scope before the restore unit's stop began.
  check reboot-scopes-after-restore-stop sh -c 'journalctl -b -1 --no-pager -o cat |
    awk "/^Stopping wharf-restore/ { r = 1 } /^Stopping wharf-pod-/ && !r { bad = 1 } END { exit bad }"'
  check reboot-restore-ran wait_for 300 systemctl is-active --quiet wharf-restore.service
  check reboot-always-back sh -c '[ "$(wharf inspect -f "{{.State.Running}}" always)" = true ] || {
    wharf ps -a; journalctl -b --no-pager -o cat -u wharf-restore.service | tail -n 20; exit 1; }'
  check reboot-no-restart-stays-exited sh -c '[ "$(wharf inspect -f "{{.State.Running}}" norestart)" = false ]'
  check reboot-daemon-active want active systemctl is-active wharf.service
  # The generated unit, enabled: its `wharf start --attach` makes the pod again at boot.
  check reboot-generated-unit-back sh -c 'for i in $(seq 120); do
    [ "$(wharf inspect -f {{.State.Running}} gen)" = true ] && exit 0; sleep 0.5; done; exit 1'
  check reboot-run-rm want hello wharf run --rm localhost/busybox:latest echo hello
  [ -e $P/kubelet ] && kubelet_checks
  [ -d $P/bench ] && benches
  [ -d $P/runtime-tools ] && runtime_tools
  finish
fi
report "not ok phase: unexpected phase '$phase'"
finish
