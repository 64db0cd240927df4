#!/usr/bin/env bash
# Install Wharf on Debian/Ubuntu (as root) and run a first container.
#   - installs the build dependencies (apt) and a Rust toolchain if cargo is missing
#   - builds the release binaries and installs them as /usr/local/bin/wharf and
#     /usr/local/bin/wharf-shim (the per-pod shim, smaller than the whole of wharf)
#     (plus /usr/local/bin/wharf-runc, the runc-compatible name engines can point at)
#   - installs systemd units for `wharf daemon` (the CRI and Docker API server) and starts them where
#     systemd runs, and wharf-restore.service (restart policies applied at boot)
#   - runs a first container with `wharf run --rm busybox` (pulled from Docker Hub; when
#     that is unreachable, a busybox image made from this machine's busybox-static)
set -euo pipefail
cd "$(dirname "$0")"
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
./scripts/deps.sh --demo
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p wharf
target="${CARGO_TARGET_DIR:-target}/release/wharf"
install -m 0755 "$target" /usr/local/bin/wharf
install -m 0755 "$target-shim" /usr/local/bin/wharf-shim
ln -sf wharf /usr/local/bin/wharf-runc
echo "installed $(/usr/local/bin/wharf --version) to /usr/local/bin/wharf"

# The daemon: the CRI for kubelet and crictl and the Docker Engine API for docker's CLI,
# compose and docker-py; systemd units (socket-activated on /run/wharf/wharf.sock and
# /run/wharf/docker.sock), enabled and started where systemd runs.
install -m 0644 contrib/systemd/wharf.service contrib/systemd/wharf.socket \
  contrib/systemd/wharf-restore.service contrib/systemd/wharf.slice /etc/systemd/system/
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable --now wharf.socket wharf.service
  # At boot: containers with --restart always|unless-stopped come back; at shutdown
  # (the unit's stop, so it is started now too), every container is stopped in 10 s.
  systemctl enable --now wharf-restore.service
  echo "wharf daemon: started by systemd, serving the CRI on /run/wharf/wharf.sock and the" \
    "Docker API on /run/wharf/docker.sock (export DOCKER_HOST=unix:///run/wharf/docker.sock)"
else
  echo "wharf daemon: systemd is not running here; units installed in /etc/systemd/system;" \
    "start it by hand with: wharf daemon &"
fi

# The main job: run a container from an image, in a pod with the built-in bridge network.
image=docker.io/library/busybox:latest
if ! wharf pull -q "$image" >/dev/null 2>&1; then
  echo "install.sh: $image cannot be pulled here; importing a busybox image made from this machine's busybox-static"
  demo=$(mktemp -d /tmp/wharf-demo.XXXXXX)
  trap 'rm -rf "$demo"' EXIT
  mkdir -p "$demo/rootfs/bin" "$demo/rootfs/etc" "$demo/rootfs/proc" "$demo/rootfs/sys" \
    "$demo/rootfs/dev" "$demo/rootfs/tmp"
  cp "$(command -v busybox)" "$demo/rootfs/bin/busybox"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$demo/rootfs/etc/passwd"
  echo 'root:x:0:' >"$demo/rootfs/etc/group"
  for applet in $(busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$demo/rootfs/bin/$applet"
  done
  tar -C "$demo/rootfs" -cf "$demo/rootfs.tar" .
  image=localhost/busybox:latest
  wharf import "$demo/rootfs.tar" "$image" >/dev/null
fi
wharf run --rm "$image" sh -c \
  'echo "Hello from a Wharf container: hostname $(hostname), $(id), address $(ip -4 -o addr show eth0 | awk "{print \$4}")"'
