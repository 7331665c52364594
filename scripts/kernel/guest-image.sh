#!/usr/bin/env bash
# Builds (or reuses) the qemu guest of the real-kernel tests: a Debian
# bookworm root file system from debootstrap with the stock kernel, the
# NVMe-oF target and initiator tools, LVM (thin included), ZFS (module
# built once by dkms from contrib for the guest kernel) and runc (the
# chart's agent and node containers run under it: conformance/kernel/
# chartpod), as a raw ext4
# image plus the kernel and initrd to boot it with. The guest's PID 1 is a
# stub that runs /init from the payload disk (/dev/vdb), so the test
# programs change without rebuilding this image.
#
# Cached under $PILLAR_CACHE/kernel/guest-<hash>, the hash covering the
# package list and this script. Prints the directory.
#   scripts/kernel/guest-image.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

suite=bookworm
packages="linux-image-amd64 linux-headers-amd64 initramfs-tools kmod udev lvm2 thin-provisioning-tools nvme-cli e2fsprogs xfsprogs util-linux mount iproute2 procps dkms zfs-dkms zfsutils-linux runc"
hash=$({ cat "$0"; echo "$suite $packages"; } | sha256sum | cut -c1-12)
out=$PILLAR_CACHE/kernel/guest-$hash
if [ -f "$out/rootfs.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  echo "$out"; exit 0
fi

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
  step "installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

mkdir -p "$PILLAR_CACHE/kernel"
work=$(mktemp -d "$PILLAR_CACHE/kernel/build.XXXXXX")
root=$work/root
log=$work/build.log
cleanup() {
  for m in dev/pts dev sys proc; do as_root umount "$root/$m" 2>/dev/null || true; done
  as_root rm -rf "$work"
}
trap cleanup EXIT
t0=$SECONDS

step "kernel guest: debootstrap $suite (minbase, main+contrib) — log in $log"
mkdir -p "$root"
as_root debootstrap --variant=minbase --components=main,contrib "$suite" "$root" "$mirror" >"$log" 2>&1 \
  || { tail -20 "$log" >&2; die "debootstrap failed"; }
note "debootstrap done at $((SECONDS - t0))s"

printf 'deb %s %s main contrib\n' "$mirror" "$suite" | as_root tee "$root/etc/apt/sources.list" >/dev/null
as_root cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev dev/pts; do as_root mkdir -p "$root/$m"; done
as_root mount -t proc proc "$root/proc"
as_root mount -t sysfs sys "$root/sys"
as_root mount --bind /dev "$root/dev"
as_root mount --bind /dev/pts "$root/dev/pts"

step "kernel guest: installing the kernel, storage tools and zfs-dkms (the zfs build takes several minutes)"
as_root chroot "$root" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages" >>"$log" 2>&1 \
  || { tail -30 "$log" >&2; die "installing the guest packages failed"; }
kver=$(ls "$root/lib/modules" | sort -V | tail -1)
note "packages installed at $((SECONDS - t0))s; guest kernel $kver"
if ! ls "$root/lib/modules/$kver/updates/dkms/"zfs.ko* >/dev/null 2>&1; then
  step "kernel guest: dkms autoinstall for $kver"
  as_root chroot "$root" dkms autoinstall -k "$kver" >>"$log" 2>&1 || { tail -30 "$log" >&2; die "dkms build of zfs failed"; }
fi
ls "$root/lib/modules/$kver/updates/dkms/"zfs.ko* >/dev/null 2>&1 || { tail -30 "$log" >&2; die "no zfs module for $kver after dkms"; }
as_root chroot "$root" depmod "$kver"

# No udev rule may rename or hide devices the tests look for, LVM must not
# wait on udev for nodes it can make itself, and nvme-cli needs a host NQN.
as_root sed -i 's/^\(\s*\)# *udev_sync = 1/\1udev_sync = 0/; s/^\(\s*\)# *udev_rules = 1/\1udev_rules = 0/' "$root/etc/lvm/lvm.conf" || true
as_root mkdir -p "$root/etc/nvme"
echo "pillar-guest" | as_root tee "$root/etc/hostname" >/dev/null
as_root tee "$root/sbin/pillar-init" >/dev/null <<'INIT'
#!/bin/sh
# PID 1 of the test guest: mount the payload disk and hand over to it.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /payload
if mount -o ro /dev/vdb /payload && [ -x /payload/init ]; then
  exec /payload/init
fi
echo "PILLAR-E2E: FAIL (no payload)"
echo o > /proc/sysrq-trigger
sleep 60
INIT
as_root chmod 0755 "$root/sbin/pillar-init"

for m in dev/pts dev sys proc; do as_root umount "$root/$m"; done
as_root chroot "$root" apt-get clean
as_root rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/src/"*/.tmp* 2>/dev/null || true

step "kernel guest: root image (mkfs.ext4 -d)"
mkdir -p "$work/out"
as_root cp "$root/boot/vmlinuz-$kver" "$work/out/vmlinuz"
as_root cp "$root/boot/initrd.img-$kver" "$work/out/initrd.img"
as_root chmod 0644 "$work/out/vmlinuz" "$work/out/initrd.img"
size_mb=$(( $(as_root du -sm "$root" | cut -f1) + 768 ))
truncate -s "${size_mb}M" "$work/out/rootfs.img"
as_root mkfs.ext4 -q -F -L pillar-root -d "$root" "$work/out/rootfs.img" >>"$log" 2>&1 || { tail -20 "$log" >&2; die "mkfs.ext4 -d failed"; }
echo "$kver" >"$work/out/kver"
rm -rf "$out"; mv "$work/out" "$out"
note "guest image ready in $((SECONDS - t0))s: $out (${size_mb} MiB)"
echo "$out"
