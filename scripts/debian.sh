# Debian image roots for the project's images (scripts/images.sh) and the
# kind node (scripts/kind/node-image.sh). Source it from the repository
# root after scripts/lib.sh; it makes the debootstrap base ($base_tar,
# cached by content) and defines apt_root_tar.
cache=$PILLAR_CACHE/images
mkdir -p "$cache"
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
suite=bookworm
hashof() { sha256sum | cut -c1-12; }
exists() { docker image inspect "$1" >/dev/null 2>&1; }
# timed runs a command and says how long it took, keeping its exit status
# (callers check it: a failed apt-get must not make an image anyway).
timed() { local t0=$SECONDS rc=0; "$@" || rc=$?; note "done in $((SECONDS - t0))s"; return $rc; }

base_hash=$(printf "debootstrap --variant=minbase %s v2\n" "$suite" | hashof)
base_tar=$cache/debian-base-$base_hash.tar
if [ ! -f "$base_tar" ]; then
  command -v debootstrap >/dev/null || { as_root apt-get update -qq; DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq debootstrap >/dev/null; }
  step "debootstrap $suite (minbase) from $mirror"
  root=$(mktemp -d); chmod 0755 "$root"
  timed as_root debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log" >&2; die "debootstrap failed"; }
  as_root rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  as_root chmod 0755 "$root"
  as_root tar -C "$root" -cf "$base_tar.$$" . && mv "$base_tar.$$" "$base_tar"
  as_root rm -rf "$root"
fi

# apt_root_tar OUT COMPONENTS PACKAGES [PREP [FINISH]]: a copy of the base with
# PACKAGES installed from the mirror's COMPONENTS, tarred to OUT. PREP (a
# function) runs on the root before apt, FINISH after (both optional).
apt_root_tar() {
  local out=$1 components=$2 packages=$3 prep=${4:-} finish=${5:-} root
  root=$(mktemp -d); chmod 0755 "$root"
  as_root tar -C "$root" -xf "$base_tar"
  as_root cp /etc/resolv.conf "$root/etc/resolv.conf"
  echo "deb $mirror $suite $components" | as_root tee "$root/etc/apt/sources.list" >/dev/null
  [ -z "$prep" ] || "$prep" "$root"
  as_root mount -t proc proc "$root/proc"
  # No trap here: it would replace the caller's (node-image.sh's removal of
  # its build directory, a 1 GB images.tar left in /tmp on every build).
  if ! timed as_root chroot "$root" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/tmp/apt.log 2>&1 && apt-get clean && rm -rf /var/lib/apt/lists/*"; then
    as_root umount "$root/proc" 2>/dev/null || true
    as_root tail -20 "$root/tmp/apt.log" >&2 || true
    as_root rm -rf "$root"
    die "installing $packages in the image root failed"
  fi
  as_root umount "$root/proc"
  [ -z "$finish" ] || "$finish" "$root"
  as_root rm -f "$root/etc/resolv.conf"
  as_root chmod 0755 "$root"
  as_root tar -C "$root" -cf "$out.$$" . && mv "$out.$$" "$out"
  as_root rm -rf "$root"
}

