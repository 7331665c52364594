#!/usr/bin/env bash
# The real-kernel run (make e2e-kernel): boots the Debian guest of
# scripts/kernel/guest-image.sh under qemu (TCG) with the freshly built
# static pillar-agent and the guest test binary (conformance/kernel/guest)
# on a payload disk, with the chart's agent and node pods and their
# production images (run under runc in the guest), plus two blank virtual
# disks for LVM and ZFS, and
# reports the guest's PASS/FAIL. The console is kept in
# bin/artifacts/kernel/console.log.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
t0=$SECONDS

if ! command -v qemu-system-x86_64 >/dev/null; then
  step "installing qemu-system-x86"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 missing (e2fsprogs)"

step "guest image (cached by package list)"
guest=$(bash scripts/kernel/guest-image.sh | tail -1)
[ -f "$guest/rootfs.img" ] || die "no guest image in $guest"
note "guest: $guest (kernel $(cat "$guest/kver"))"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
payload=$work/payload
mkdir -p "$payload"

step "building the static agent and the guest test binary"
for b in pillar-agent pillar-controller pillar-node; do CGO_ENABLED=0 go build -trimpath -o "$payload/$b" ./impl/cmd/$b; done
CGO_ENABLED=0 go test -c -tags kernelguest -trimpath -o "$payload/guest.test" ./conformance/kernel/guest
# The chart's agent and node pods (rendered with the guest's values) and
# the production images they name, unpacked once per shared layer: the
# guest runs them under runc (TestChartOnRealKernel).
step "the chart's pods and their images (scripts/images.sh, cached by content)"
bash scripts/images.sh
go run ./conformance/kernel/cmd/chartpayload "$payload/chart"
cat >"$payload/init" <<'INIT'
#!/bin/sh
# The guest's test run, started by /sbin/pillar-init as PID 1.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t tmpfs tmpfs /run && mkdir -p /run/lock
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
ip link set lo up
echo "PILLAR-E2E: guest up, kernel $(uname -r)"
# Every debugging key of sysrq (blocked tasks, memory, CPU backtraces), which
# the host sends over the serial line when the run overstays (below).
echo 1 >/proc/sys/kernel/sysrq
# A heartbeat on the console only (the host's filter drops it): when a run
# hangs, the console's tail says whether user space still ran and how much
# memory it had.
while sleep 120; do
  echo "pillar-heartbeat: up $(cut -d' ' -f1 /proc/uptime)s load $(cut -d' ' -f1-3 /proc/loadavg) $(grep -E '^(MemAvailable|Dirty):' /proc/meminfo | tr -s ' \n' ' ')"
done &
/lib/systemd/systemd-udevd --daemon >/dev/null 2>&1
udevadm trigger --action=add >/dev/null 2>&1; udevadm settle --timeout=30
# configfs may be a module: load it (nvmet pulls it in too) before mounting.
for m in configfs nvmet nvmet_tcp nvme_tcp dm_thin_pool loop zfs; do
  modprobe "$m" || echo "PILLAR-E2E: modprobe $m failed"
done
mount -t configfs configfs /sys/kernel/config || echo "PILLAR-E2E: mounting configfs failed"
[ -d /sys/kernel/config/nvmet ] || echo "PILLAR-E2E: no nvmet in configfs"
# From the DMI product UUID qemu is given (-uuid): without one it is zero
# and so is the NQN, which the node refuses as a shared identity.
nvme gen-hostnqn >/etc/nvme/hostnqn
echo "PILLAR-E2E: modules loaded; host $(cat /etc/nvme/hostnqn)"
cd /tmp
run=$(cat /payload/run 2>/dev/null)
/payload/guest.test -test.v -test.timeout 38m -test.parallel 2 ${run:+-test.run "$run"}
rc=$?
if [ $rc -eq 0 ]; then echo "PILLAR-E2E: PASS"; else echo "PILLAR-E2E: FAIL (exit $rc)"; fi
sync
echo o >/proc/sysrq-trigger
sleep 30
INIT
chmod 0755 "$payload/init"
# PILLAR_KERNEL_RUN narrows the guest's run to matching tests (go test -run),
# for a quick loop on one failure; CI runs them all.
printf '%s' "${PILLAR_KERNEL_RUN:-}" >"$payload/run"
# Room for the file system's own metadata, and an inode per file of the
# images' layers.
size_mb=$(( $(du -sm "$payload" | cut -f1) * 11 / 10 + 64 ))
inodes=$(( $(find "$payload" | wc -l) + 4096 ))
truncate -s "${size_mb}M" "$work/payload.img"
mkfs.ext4 -q -F -L payload -N "$inodes" -d "$payload" "$work/payload.img"
truncate -s 2G "$work/lvm.img" "$work/zfs.img"

art=bin/artifacts/kernel
mkdir -p "$art"
log=$art/console.log
: >"$log"
# The serial line's input: the host holds it open and writes to it only
# when the guest overstays (sysrq, below).
mkfifo "$work/serial"
exec 9<>"$work/serial"
# Past the guest test's own timeout (38m), by which the guest has printed
# its goroutines and powered off unless its kernel is stuck.
deadline=$(( ${PILLAR_KERNEL_DEADLINE_MIN:-44} * 60 ))
# A host write that fails (above all a full disk: the root's snapshot
# overlay is a temporary file on the host) reaches the guest as an I/O
# error, which fails the run where it happens. qemu's default pauses the
# guest on a full disk, silently, until the deadline.
onerror=werror=report,rerror=report
step "booting the guest (qemu TCG; the console follows, also in $log)"
qemu-system-x86_64 \
  -machine q35,accel=tcg -cpu max -smp 2 -m 3072 \
  -uuid "$(cat /proc/sys/kernel/random/uuid)" \
  -nographic -no-reboot -nic none \
  -kernel "$guest/vmlinuz" -initrd "$guest/initrd.img" \
  -append "console=ttyS0 root=/dev/vda rw init=/sbin/pillar-init panic=-1 loglevel=4" \
  -drive file="$guest/rootfs.img",if=virtio,format=raw,snapshot=on,$onerror \
  -drive file="$work/payload.img",if=virtio,format=raw,readonly=on,$onerror \
  -drive file="$work/lvm.img",if=virtio,format=raw,$onerror \
  -drive file="$work/zfs.img",if=virtio,format=raw,$onerror \
  <"$work/serial" >"$log" 2>&1 &
qemu=$! booted=$SECONDS
tail -n +1 -f --pid=$qemu "$log" | grep --line-buffered -a -E '^(=== RUN|--- (PASS|FAIL)|PASS|FAIL|PILLAR-E2E|panic|\s+\S+_test\.go:[0-9]+:)' &
shown=$!
timedout=no
while kill -0 $qemu 2>/dev/null; do
  if [ $((SECONDS - booted)) -ge "$deadline" ]; then
    timedout=yes
    # qemu's monitor (ctrl-a c) says whether the guest runs at all; then a
    # serial BREAK (ctrl-a b) and a key is sysrq: the console's log level
    # up, then blocked tasks, memory and every CPU's backtrace.
    printf '\001cinfo status\n' >&9; sleep 2; printf '\001c' >&9; sleep 1
    for k in 8 w m l; do printf '\001b' >&9; sleep 1; printf '%s' "$k" >&9; sleep 5; done
    sleep 10
    kill $qemu 2>/dev/null || true
    break
  fi
  sleep 5
done
rc=0
wait $qemu || rc=$?
wait $shown 2>/dev/null || true
if grep -q '^PILLAR-E2E: PASS' "$log"; then
  step "kernel e2e PASS in $((SECONDS - t0))s ($(grep -c '^--- PASS' "$log") tests passed)"
  exit 0
fi
# The console's own end (kernel messages, goroutines, heartbeats), which the
# filter above leaves out and a CI log would not otherwise have.
note "the last 300 lines of the guest's console:"
tail -n 300 "$log" | sed 's/^/    | /' >&2
[ $timedout = yes ] && note "the guest was still running after $((deadline / 60)) min (PILLAR_KERNEL_DEADLINE_MIN); qemu's status and the sysrq dumps are above"
note "disk (the guest's disks and its root's overlay are host files): $(free_disk)"
die "kernel e2e FAILED (qemu exit $rc); console in $log"
