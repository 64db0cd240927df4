#!/bin/bash
# Builds the VM test bed's guest image into $1 (tests/vm/run.sh calls it, once per recipe):
#   root.img     ext4 root filesystem (debootstrap $SUITE with $PACKAGES), label "root"
#   vmlinuz, initrd.img   the kernel and initramfs Debian installed into it
# The guest boots into systemd, which runs wharf-vm.service: it mounts the disk labelled
# "payload" and runs its guest.sh (the checks, from the repository), so the image itself
# holds nothing of Wharf.
set -euo pipefail
out=$1
: "${SUITE:?}" "${PACKAGES:?}" "${MIRROR:?}"
root=$out/rootfs
mkdir -p "$root"

debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR"

echo wharf-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 wharf-vm\n' >"$root/etc/hosts"
printf 'LABEL=root / ext4 rw,errors=remount-ro 0 1\n' >"$root/etc/fstab"
# A journal kept across boots: the second boot's checks read the first one's shutdown.
mkdir -p "$root/var/log/journal"
# No password, no login: the guest is driven by wharf-vm.service alone.
chroot "$root" passwd -d root >/dev/null
# Quiet and quick boots under emulation: nothing on a timer, no waiting for a network.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
  systemd-networkd-wait-online.service; do
  chroot "$root" systemctl mask "$unit" >/dev/null 2>&1 || true
done

cat >"$root/usr/local/sbin/wharf-vm-entry" <<'EOF'
#!/bin/sh
# Mounts the payload disk and runs its checks; their result lines go to ttyS1.
set -u
mkdir -p /mnt/payload
mountpoint -q /mnt/payload || mount -o ro LABEL=payload /mnt/payload || {
  echo "not ok payload: the payload disk cannot be mounted" >/dev/ttyS1; echo done >/dev/ttyS1
  systemctl poweroff; exit 1; }
exec /bin/bash /mnt/payload/guest.sh
EOF
chmod 0755 "$root/usr/local/sbin/wharf-vm-entry"
cat >"$root/etc/systemd/system/wharf-vm.service" <<'EOF'
[Unit]
Description=Wharf VM test bed: the checks on the payload disk
After=basic.target
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/wharf-vm-entry
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
EOF
chroot "$root" systemctl enable wharf-vm.service >/dev/null 2>&1

cp -L "$root/vmlinuz" "$out/vmlinuz"
cp -L "$root/initrd.img" "$out/initrd.img"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
# Room for images and containers in the guest (written to a throwaway snapshot per run).
size_mb=$(( $(du -sm "$root" | cut -f1) + 1536 ))
mkfs.ext4 -q -L root -d "$root" "$out/root.img" "${size_mb}M"
rm -rf "$root"
