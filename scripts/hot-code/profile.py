#!/usr/bin/env python3
"""Which functions of the wharf binary the CRI daemon runs, in the order its work needs them.

Writes crates/wharf/hot-code.order, the symbol ordering file the release link lays the
binary's code out by (crates/wharf/build.rs). Why: the daemon's code is spread over the
20 MB text of the one wharf binary, and every page fault on it maps the 64 kB around it
(the kernel's fault-around), so one CRI call that runs a few hundred functions made the
daemon's RSS grow by 8 MB of code. Laid out together, those functions fill a few windows.

How: an uprobe on the entry of every function of a copy of the binary, then a daemon of
that copy driven through phases (the heartbeat alone; listings and stats on one
connection, then each on a connection of its own, then from crictl if it is on PATH or
in $CRICTL; pod lifecycle and the calls kubelet makes around it; the Docker API), reading each probe's
hit count after each phase. The order file lists the functions first hit in each phase,
phase by phase (in the phase, by their place in the binary as built). Functions never hit
keep their place after these (the daemon's start-up code among them: the first idle trim
drops it for good).

The probes are enabled once the daemon has started, so its start-up code stays out of the
order. A heartbeat, ListPodSandbox every 100 ms (kubelet's relist, sped up), runs
throughout; before the probes count it is a call that lists nothing, so that the first
listing is profiled. The pods are described as kubelet describes them (hostname, log
directory and path), since the stats calls parse those records back. The idle trim leaves
code mappings that hold breakpoints alone (crates/wharf-cri/src/idle.rs), so probes are
not lost between phases.

Run by scripts/hot-code/profile.sh (as root, fixture registry up), not by CI.
"""

import os
import shutil
import subprocess
import sys
import threading
import time

TRACING = "/sys/kernel/tracing"
GROUP = "wharf_hot"


def text_symbols(binary):
    """(address, name) of every function with a size, one per address, in address order."""
    out = subprocess.run(
        ["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    seen, syms = set(), []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tT" and int(f[1], 16) > 0 and f[0] not in seen:
            seen.add(f[0])
            syms.append((int(f[0], 16), f[3]))
    return sorted(syms)


def text_file_delta(binary):
    """Virtual address minus file offset of the executable segment."""
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in f[-2]:
            return int(f[2], 16) - int(f[1], 16)
    sys.exit(f"{binary}: no executable segment")


def define_probes(binary, syms):
    delta = text_file_delta(binary)
    fd = os.open(f"{TRACING}/uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        for i, (addr, _) in enumerate(syms):
            os.write(fd, f"p:{GROUP}/f{i} {binary}:0x{addr - delta:x}\n".encode())
    finally:
        os.close(fd)


def enable_probes(n):
    """Enable each probe on its own: a group write stops at the first probe the kernel
    cannot place, leaving the rest off. The indices of those it could not place."""
    failed = []
    for i in range(n):
        try:
            with open(f"{TRACING}/events/{GROUP}/f{i}/enable", "w") as f:
                f.write("1")
        except OSError:
            failed.append(i)
    return failed


def hits():
    counts = {}
    with open(f"{TRACING}/uprobe_profile") as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[1].startswith("f"):
                counts[int(p[1][1:])] = int(p[2])
    return counts


def main():
    binary, sock, docker_sock, out = sys.argv[1:5]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import drive  # noqa: E402 (the stubs are generated at run time)

    syms = text_symbols(binary)
    cri = drive.Cri(sock)
    if sys.argv[5:] == ["define"]:
        define_probes(binary, syms)
        return
    # The daemon runs: start the heartbeat, then enable the probes.
    stop = threading.Event()

    # Until the probes count, an engine call that lists nothing (only engine calls count as
    # activity for the idle trim; Version does not): the first listing opens the daemon's
    # listings' watch, and that first listing is part of the profile (a daemon's first
    # relist, the first call of cri_pod's round).
    beat = [cri.busy]

    def heartbeat():
        while not stop.is_set():
            beat[0]()
            time.sleep(0.1)

    threading.Thread(target=heartbeat, daemon=True).start()
    # Pods for the listings to list, made before the probes count (the lifecycle phase
    # makes its own). Forty, not a few: a listing of a node's pods runs code that a
    # listing of three does not (the sort of more than twenty rows, tables that grow).
    for i in range(40):
        cri.pod(100 + i)
    failed = enable_probes(len(syms))
    print(f"profile: {len(syms)} probes, {len(failed)} could not be placed", flush=True)
    beat[0] = cri.heartbeat
    crictl = os.environ.get("CRICTL") or shutil.which("crictl")
    phases = [
        ("relist", lambda: time.sleep(1)),
        ("listings and stats", lambda: cri.listings(3)),
        ("listings, a connection each", lambda: cri.listings_each_connected(sock, 2)),
        ("crictl", lambda: crictl and drive.crictl(crictl, sock)),
        ("pod lifecycle", lambda: cri.lifecycle(10)),
        ("docker api", lambda: drive.docker(docker_sock)),
        ("teardown", cri.teardown),
    ]
    # A function whose first instruction the kernel cannot probe (a lock-prefixed one: the
    # reference counts of tokio's and the futures' wakers, the drop of a shared `Bytes`) is
    # counted as hit in the first phase: a dozen or two small functions, and the wakers are
    # on every call's path (left in place, each faulted a window of its own in).
    first_hit = {i: phases[0][0] for i in failed}
    try:
        for name, run in phases:
            run()
            for i, c in hits().items():
                if c > 0 and i not in first_hit:
                    first_hit[i] = name
            print(f"profile: after {name}: {len(first_hit)} functions", flush=True)
    finally:
        stop.set()
        cri.teardown()
    order = []
    for name, _ in phases:
        order += [syms[i][1] for i in sorted(first_hit) if first_hit[i] == name]
    with open(out, "w") as f:
        f.write("".join(s + "\n" for s in order))
    print(f"profile: {len(order)} functions written to {out}", flush=True)
    # Each probe disabled waits for a grace period of the kernel's (about 30 ms here): with
    # tens of thousands of probes this is the longest part of the run.
    with open(f"{TRACING}/events/{GROUP}/enable", "w") as f:
        f.write("0")


if __name__ == "__main__":
    main()
