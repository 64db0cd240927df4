#!/bin/bash
# Builds offline stand-ins for the images e2e_node's [NodeConformance] specs (Kubernetes
# v1.37) pull, and pushes them to a registry under the names the suite asks for once
# KUBE_TEST_REPO_LIST points promoterE2eRegistry and gcRegistry at it (run.sh does):
#   e2e-test-images/busybox:1.37.0-2    Debian's dynamic busybox (applets as hard links) + glibc,
#                                       bash as /bin/sh
#   e2e-test-images/agnhost:2.66.1      busybox + the real agnhost ($AGNHOST, built by you from
#                                       k8s.io/kubernetes/test/images/agnhost), curl and
#                                       Debian's netcat-openbsd (nc -u, -z) beside it, and a
#                                       self-signed /localhost.crt and .key
#   e2e-test-images/nginx:1.27.0-2      busybox + fake-nginx (HTTP 200 on :80)
#   e2e-test-images/nonewprivs:1.4      busybox + setuid-root nnp printing "Effective uid: N"
#   e2e-test-images/nonroot:1.5         busybox, USER 1234
#   e2e-test-images/glibc-dns-testing:2.1.1  busybox (nslookup, hostname)
#   pause:3.10.2                        a static pause
# Adapted from the critest stand-ins (shared/fixtures/critest-images).
# Needs: gcc, umoci, skopeo, apt-get download (Debian), curl, openssl, a registry at $REG.
# Env: REG (default 127.0.0.1:5056), AGNHOST (required), OUT (scratch; default next to this).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=${OUT:-$HERE}
AGNHOST=${AGNHOST:?the agnhost binary}
REG=${REG:-127.0.0.1:5056}
OCI=$TOP/oci
WORK=$TOP/"work"
BIN=$WORK/bin                  # the compiled helper programs
RFS=rootfs                     # the rootfs directory inside a umoci bundle
mkdir -p "$TOP"; cd "$TOP"
rm -rf "$OCI" "$WORK"; mkdir -p "$WORK" "$BIN"

gcc -O2 -static -s -o "$BIN/pause" "$HERE/src/pause.c"
gcc -O2 -static -s -o "$BIN/fake-nginx" "$HERE/src/fake-nginx.c"
gcc -O2 -static -s -o "$BIN/nnp" "$HERE/src/nnp.c"
gcc -O2 -static -s -o "$BIN/nmeter" "$HERE/src/nmeter.c"

# Debian's *dynamic* busybox (package "busybox", only extracted, not installed): unlike
# busybox-static it is built without FEATURE_SH_STANDALONE, so `sh -c ls` really execs /bin/ls
# (critest's MaskedPaths test masks /bin/ls and expects "Permission denied").
if [ ! -x "$TOP/deb/x/bin/busybox" ] || [ ! -x "$TOP/deb/x/bin/nc.openbsd" ]; then
  mkdir -p "$TOP/deb"
  (cd "$TOP/deb" && apt-get download busybox netcat-openbsd libbsd0 libmd0 &&
    for d in *.deb; do dpkg-deb -x "$d" x; done)
fi
BUSYBOX=$TOP/deb/x/bin/busybox

umoci init --layout "$OCI"
umoci new --image "$OCI:empty"

PATHENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# derive BASE NEW FUNC : unpack BASE, run FUNC <rootfs>, repack as NEW (adds one layer)
derive() {
  local base=$1 new=$2 fn=$3 b="$WORK/bundle-$2"
  rm -rf "$b"
  umoci unpack --image "$OCI:$base" "$b" >/dev/null
  "$fn" "$b/$RFS"
  umoci repack --image "$OCI:$new" "$b"
  rm -rf "$b"
}

# ---- pause (sandbox image) --------------------------------------------------
f_pause() { install -m 0755 "$BIN/pause" "$1/pause"; }
derive empty pause f_pause
umoci config --image "$OCI:pause" --config.entrypoint /pause --config.user 65535:65535

# ---- busybox base (stand-in for registry.k8s.io/e2e-test-images/busybox:1.29-2)
f_busybox() {
  local r=$1
  mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,home,var/www,var/run,var/spool/mail,proc,sys,dev}
  (cd "$r" && chmod 1777 tmp && chmod 0700 root)
  install -m 0755 "$BUSYBOX" "$r/bin/busybox"
  for a in $("$BUSYBOX" --list); do
    # hard links (as in the upstream busybox image): masking /bin/ls must not mask /bin/busybox
    [ "$a" = busybox ] || ln -f "$r/bin/busybox" "$r/bin/$a"
  done
  # Debian's busybox lacks pgrep and ipcs, which critest execs.
  cat > "$r/bin/pgrep" <<'EOF'
#!/bin/sh
# minimal pgrep: print pids whose comm contains $1
[ $# -ge 1 ] || { echo "usage: pgrep PATTERN" >&2; exit 2; }
pat=$1; rc=1; self=$$
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ "$pid" = "$self" ] && continue
  c=; read -r c < "$d/comm" 2>/dev/null || continue
  case "$c" in *"$pat"*) echo "$pid"; rc=0;; esac
done
exit $rc
EOF
  chmod 0755 "$r/bin/pgrep"
  # ...and nmeter, which the Containers Lifecycle specs take the time from (src/nmeter.c)
  install -m 0755 "$BIN/nmeter" "$r/bin/nmeter"
  # util-linux ipcs (dynamically linked against glibc only)
  mkdir -p "$r/lib/x86_64-linux-gnu" "$r/lib64"
  install -m 0755 /usr/bin/ipcs "$r/usr/bin/ipcs"
  cp -L /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libresolv.so.2 "$r/lib/x86_64-linux-gnu/"
  cp -L /lib64/ld-linux-x86-64.so.2 "$r/lib64/"
  # /bin/sh is bash: upstream busybox 1.37's sh passes variables whose names are no shell
  # names (a ConfigMap's "data-1") on to the commands it runs, as the Secret and ConfigMap
  # environment specs expect of `sh -c env`; Debian's 1.35 drops them, bash keeps them.
  install -m 0755 /bin/bash "$r/bin/bash"
  cp -L /lib/x86_64-linux-gnu/libtinfo.so.6 "$r/lib/x86_64-linux-gnu/"
  rm -f "$r/bin/sh"; ln -s bash "$r/bin/sh"
  { printf 'root:x:0:0:root:/%s:/bin/sh\n' root; cat <<'EOF'
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
  } > "$r/etc/passwd"
  cat > "$r/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
EOF
  echo 'root:*:10933:0:99999:7:::' > "$r/etc/shadow"; chmod 0640 "$r/etc/shadow"
  : > "$r/etc/hostname"; : > "$r/etc/hosts"; : > "$r/etc/resolv.conf"
}
derive empty busybox f_busybox
umoci config --image "$OCI:busybox" --config.cmd sh --config.env "$PATHENV"

# ---- nginx (stand-in for e2e-test-images/nginx:1.14-2) ----------------------
f_nginx() {
  local r=$1
  install -m 0755 "$BIN/fake-nginx" "$r/usr/sbin/nginx"
  mkdir -p "$r/usr/share/nginx/html" "$r/etc/nginx/conf.d" "$r/var/log/nginx"
  echo '<html><body><h1>Welcome to nginx!</h1></body></html>' > "$r/usr/share/nginx/html/index.html"
}
derive busybox nginx f_nginx
umoci config --image "$OCI:nginx" --config.cmd nginx --config.cmd -g --config.cmd 'daemon off;' \
  --config.exposedports 80/tcp --config.stopsignal SIGTERM
umoci config --image "$OCI:nginx" --tag hostnet-nginx --config.env NGINX_PORT=12003 --config.exposedports 12003/tcp

# ---- nonewprivs (stand-in for e2e-test-images/nonewprivs:1.3) ---------------
f_nnp() { mkdir -p "$1/usr/local/bin"; install -o 0 -g 0 -m 4755 "$BIN/nnp" "$1/usr/local/bin/nnp"; }
derive busybox nonewprivs f_nnp
umoci config --image "$OCI:nonewprivs" --config.entrypoint /usr/local/bin/nnp --clear config.cmd

# ---- nonroot (FROM busybox; USER 1234) ---------------------------------------
umoci config --image "$OCI:busybox" --tag nonroot --config.user 1234

# ---- agnhost: busybox + the agnhost binary + curl (lifecycle hooks exec it) ----
f_agnhost() {
  local r=$1 lib
  install -m 0755 "$AGNHOST" "$r/agnhost"
  ln -s agnhost "$r/agnhost-2"
  mkdir -p "$r/uploads" "$r/usr/bin"
  install -m 0755 /usr/bin/curl "$r/usr/bin/curl"
  for lib in $(ldd /usr/bin/curl | awk '/=> \//{print $3}'); do
    mkdir -p "$r$(dirname "$lib")"; cp -L "$lib" "$r$lib"
  done
  # the networking specs run `nc -w 1 -u IP PORT` in agnhost: the real image's busybox nc
  # takes -u, Debian's does not, so netcat-openbsd comes first in PATH
  mkdir -p "$r/usr/local/bin" "$r/lib/x86_64-linux-gnu"
  install -m 0755 "$TOP/deb/x/bin/nc.openbsd" "$r/usr/local/bin/nc"
  for lib in libbsd.so.0 libmd.so.0; do cp -L "$TOP/deb/x/usr/lib/x86_64-linux-gnu/$lib" "$r/lib/x86_64-linux-gnu/"; done
  # the real image's /localhost.crt and /localhost.key (netexec --tls-cert-file, for the
  # https lifecycle hooks): a self-signed pair made here
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$r/localhost.key" -out "$r/localhost.crt" 2>/dev/null
  echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >> "$r/etc/passwd"
  echo 'user-defined-in-image:x:1000:' >> "$r/etc/group"
  echo 'group-defined-in-image:x:50000:user-defined-in-image' >> "$r/etc/group"
}
derive busybox agnhost f_agnhost
umoci config --image "$OCI:agnhost" --config.entrypoint /agnhost --config.cmd pause

umoci gc --layout "$OCI"

# ---- push to the registry -------------------------------------------------------
push() { skopeo copy --quiet --dest-tls-verify=false "oci:$OCI:$1" "docker://$REG/$2"; echo "pushed $2"; }
E=e2e-test-images
push busybox    $E/busybox:1.37.0-2
push agnhost    $E/agnhost:2.66.1
push nginx      $E/nginx:1.27.0-2
push nonewprivs $E/nonewprivs:1.4
push nonroot    $E/nonroot:1.5
push busybox    $E/glibc-dns-testing:2.1.1
push pause      pause:3.10.2
echo done
