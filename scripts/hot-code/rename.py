#!/usr/bin/env python3
"""Carry crates/wharf/hot-code.order over to a build whose symbol names changed.

The order file names functions by their mangled symbols, and a symbol's hash can change
without its function changing: adding a variant to `wharf_runtime::Error` renamed 87 of
the file's 3069 functions (every one whose type involves that error), and those fall
out of the ordered region until the file names them again. Profiling anew
(profile.sh) takes a daemon, uprobes and minutes; this maps each name the new binary lacks
to the new binary's function of the same path, without the hash.

Where one path has several functions (generic instantiations), the one of the same size
as the old name had in the old binary is taken; several of the same size are paired in
turn, which for laying code out is the same. Names it cannot map are listed, and the
file is left as it was.

    scripts/hot-code/rename.py OLD_WHARF NEW_WHARF    # the release builds before and after
"""

import collections
import re
import subprocess
import sys
from pathlib import Path

ORDER = Path(__file__).resolve().parents[2] / "crates/wharf/hot-code.order"
HASH = re.compile(r"17h[0-9a-f]{16}E(\.\d+)?$")


def symbols(binary):
    """Defined symbols of `binary`, with their sizes."""
    out = subprocess.run(
        ["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    return {f[3]: int(f[1], 16) for f in (line.split() for line in out.splitlines()) if len(f) == 4}


def main():
    old_bin, new_bin = sys.argv[1:3]
    old, new = symbols(old_bin), symbols(new_bin)
    lines = ORDER.read_text().splitlines()
    names = {line for line in lines if line and not line.startswith("#")}
    missing = sorted(n for n in names if n not in new)
    by_path = collections.defaultdict(list)
    for name, size in sorted(new.items()):
        if name not in names:
            by_path[HASH.sub("", name)].append((name, size))
    renamed, taken, lost = {}, set(), []
    for name in missing:
        candidates = [c for c, _ in by_path.get(HASH.sub("", name), []) if c not in taken]
        if len(candidates) > 1:
            candidates = [
                c for c, size in by_path[HASH.sub("", name)]
                if c not in taken and size == old.get(name)
            ]
        if candidates:
            renamed[name] = candidates[0]
            taken.add(candidates[0])
        else:
            lost.append(name)
    print(f"{len(names)} names, {len(missing)} not in {new_bin}, {len(renamed)} renamed")
    if lost:
        for name in lost:
            print(f"no function for {name}", file=sys.stderr)
        sys.exit(1)
    ORDER.write_text("".join(renamed.get(line, line) + "\n" for line in lines))


if __name__ == "__main__":
    main()
