#!/usr/bin/env bash
# Builds the project's container images locally, without any container
# registry: the Debian base comes from debootstrap and Debian's mirror, the Go
# images are FROM scratch with static binaries. Every image is tagged with a
# hash of what went into it and skipped ("cached") when that tag exists, and is
# also tagged with the stable name the tests use. See docs/images.md.
#   scripts/images.sh [--print-tags] [--rebuild] [--prune] [IMAGE...]
#     IMAGE         debian-base, postgres, proxy, sim (default: all; an image's
#                   dependencies are always built)
#     --print-tags  after building, print NAME=TAG lines on stdout, e.g.
#                   PILLAR_IMAGE_POSTGRES=pillar/postgres:15-0123456789ab
#     --rebuild     ignore cached images and root file systems
#     --prune       afterwards remove older hash-tagged builds of these images
#   PILLAR_DEBIAN_MIRROR  overrides the mirror read from apt's sources
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/lib.sh"

print_tags=
rebuild=
do_prune=
want=()
for a in "$@"; do
  case $a in
    --print-tags) print_tags=1 ;;
    --rebuild) rebuild=1 ;;
    --prune) do_prune=1 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    debian-base | postgres | proxy | sim) want+=("$a") ;;
    *) die "unknown argument '$a' (see --help)" ;;
  esac
done
[ ${#want[@]} -gt 0 ] || want=(debian-base postgres proxy sim)
wanted() { local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

suite=bookworm
variant=minbase
base_packages=() # added to debootstrap's minbase set; part of the cache key
pg_major=15
cache=$PILLAR_CACHE/images
mkdir -p "$cache"

# Before taking the lock: a dockerd started here must not inherit its fd.
bash "$here/docker.sh"
# One build at a time per cache: parallel test set-ups share the result.
exec 9>"$cache/.lock"
flock 9

t_all=$SECONDS
now_ms() { date +%s%3N; }
took() { local ms=$(($(now_ms) - $1)); printf '%d.%01ds' $((ms / 1000)) $((ms % 1000 / 100)); }
key_of() { sha256sum | cut -c1-12; }
have_image() { [ -z "$rebuild" ] && docker image inspect "$1" >/dev/null 2>&1; }
# tag_stable points the stable test-facing name at the hash-tagged image.
tag_stable() { docker tag "$1" "$2"; }

declare -A tags=() current=()
failed=()

# prune removes hash-tagged builds other than the current ones. Only on
# request: another checkout on this machine may be using its own hashes.
prune() {
  local repo keep t
  for repo in "${!current[@]}"; do
    keep=${current[$repo]}
    for t in $(docker image ls "$repo" --format '{{.Tag}}'); do
      case $t in local | "$pg_major-local" | "$keep") ;; *)
        if docker rmi "$repo:$t" >/dev/null 2>&1; then note "removed $repo:$t"; else note "kept $repo:$t (in use)"; fi ;;
      esac
    done
  done
}

# ---- debian-base -----------------------------------------------------------

# apt_sources prints "URI SUITE" for every enabled deb entry of apt's sources,
# both one-line (.list) and deb822 (.sources) styles.
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ } print $i, $(i + 1) }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^#/) continue
          key = tolower(line); sub(/:.*/, "", key)
          val = line; sub(/^[^:]*:[ \t]*/, "", val)
          if (key == "types") types = val
          else if (key == "uris") uris = val
          else if (key == "suites") suites = val
          else if (key == "enabled") enabled = tolower(val)
        }
        if (enabled == "no" || (" " types " ") !~ / deb /) next
        nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
        for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++) if (u[a] != "" && s[b] != "") print u[a], s[b]
      }' "$f"
  done
}

# Files written into the debootstrapped tree before it is packed; its text is
# part of the cache key (declare -f below), so editing it rebuilds the base.
customise_rootfs() {
  local r=$1
  # Package installs in image builds must never start services.
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
  chmod 755 "$r/usr/sbin/policy-rc.d"
  # Small images: no recommends, no docs, man pages or translations.
  cat >"$r/etc/apt/apt.conf.d/90pillar" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
APT
  cat >"$r/etc/dpkg/dpkg.cfg.d/90pillar-slim" <<'DPKG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
DPKG
  printf '%s\n' "${sources_lines[@]}" >"$r/etc/apt/sources.list"
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/var/log/*.log "$r"/var/log/apt/*
  # Docker provides these per container; keep the host's out of the image.
  : >"$r/etc/resolv.conf"
  : >"$r/etc/hostname"
}

mirror=${PILLAR_DEBIAN_MIRROR:-}
sources_lines=()
while read -r uri s; do
  case $s in
    "$suite") [ -n "$mirror" ] || mirror=$uri ;;
    "$suite-updates" | "$suite-security") ;;
    *) continue ;;
  esac
  sources_lines+=("deb $uri $s main")
done < <(apt_sources | awk '!seen[$0]++')
[ -n "$mirror" ] || die "no '$suite' entry in /etc/apt/sources.list{,.d}; set PILLAR_DEBIAN_MIRROR to a Debian mirror URL"
printf '%s\n' "${sources_lines[@]}" | grep -q " $suite main$" || sources_lines=("deb $mirror $suite main" "${sources_lines[@]}")

base_key=$({
  echo "suite=$suite variant=$variant packages=${base_packages[*]}"
  printf '%s\n' "${sources_lines[@]}"
  declare -f customise_rootfs
} | key_of)
base_tag=pillar/debian-base:$base_key
base_tar=$cache/debian-base-$base_key.tar

build_base() {
  local t0 t rootfs inc=()
  t0=$(now_ms)
  step "debian-base: $base_tag"
  if have_image "$base_tag"; then
    note "cached"
  else
    if [ -n "$rebuild" ] || [ ! -s "$base_tar" ]; then
      command -v debootstrap >/dev/null || {
        note "installing debootstrap with apt-get"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
      }
      rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
      chmod 755 "$rootfs" # it becomes the image's /, which every user must traverse
      # shellcheck disable=SC2064 # expand now: the trap must remove this tree
      trap "as_root rm -rf '$rootfs'" EXIT
      [ ${#base_packages[@]} -eq 0 ] || inc=(--include="$(
        IFS=,
        echo "${base_packages[*]}"
      )")
      t=$(now_ms)
      note "debootstrap $suite ($variant) from $mirror (log: $cache/debootstrap.log)"
      mkdir -p "$cache/debs"
      as_root debootstrap --variant="$variant" "${inc[@]}" --cache-dir="$cache/debs" \
        "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed; full log: $cache/debootstrap.log"; }
      note "debootstrap done in $(took "$t")"
      as_root bash -c "$(declare -f customise_rootfs); sources_lines=($(printf '%q ' "${sources_lines[@]}")); customise_rootfs '$rootfs'"
      t=$(now_ms)
      as_root tar -C "$rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
        -cf "$base_tar.tmp" .
      mv "$base_tar.tmp" "$base_tar"
      as_root rm -rf "$rootfs"
      trap - EXIT
      note "root file system packed in $(took "$t"): $base_tar ($(du -h "$base_tar" | cut -f1))"
    else
      note "root file system from cache: $base_tar"
    fi
    t=$(now_ms)
    docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["bash"]' \
      --message "pillar debian-base $suite $variant $base_key" \
      "$base_tar" "$base_tag" >/dev/null
    note "imported in $(took "$t")"
  fi
  tag_stable "$base_tag" pillar/debian-base:local
  tags[PILLAR_IMAGE_DEBIAN_BASE]=$base_tag
  current[pillar/debian-base]=$base_key
  note "debian-base ready in $(took "$t0")"
}

# ---- postgres ----------------------------------------------------------------

build_postgres() {
  local t0 ctx=$here/images/postgres key tag
  t0=$(now_ms)
  key=$({
    echo "base=$base_key pg=$pg_major"
    cat "$ctx/Dockerfile" "$ctx/docker-entrypoint.sh"
  } | key_of)
  tag=pillar/postgres:$pg_major-$key
  step "postgres: $tag"
  if have_image "$tag"; then
    note "cached"
  else
    note "docker build with apt-get install postgresql-$pg_major (log: $cache/build-postgres.log)"
    # The classic builder sees local images directly; --network host lets apt
    # reach the Debian mirror without depending on the bridge's NAT.
    DOCKER_BUILDKIT=0 docker build --network host --build-arg BASE="$base_tag" \
      --label "pillar.recipe=$key" -t "$tag" "$ctx" >"$cache/build-postgres.log" 2>&1 ||
      { tail -n 20 "$cache/build-postgres.log" >&2; echo "error: postgres image build failed; full log: $cache/build-postgres.log" >&2; return 1; }
  fi
  tag_stable "$tag" "pillar/postgres:$pg_major-local"
  tags[PILLAR_IMAGE_POSTGRES]=$tag
  current[pillar/postgres]=$pg_major-$key
  note "postgres ready in $(took "$t0")"
}

# ---- proxy, sim (static Go binaries FROM scratch) ----------------------------

# build_go_image NAME PACKAGE: the key is the binary's own hash (Go builds with
# -trimpath and without VCS stamping are reproducible) plus the Dockerfile's.
build_go_image() {
  local name=$1 pkg=$2 t0 t ctx key tag
  t0=$(now_ms)
  step "$name: go build $pkg"
  ctx=$cache/ctx-$name
  rm -rf "$ctx"
  mkdir -p "$ctx/rootfs/tmp"
  chmod 1777 "$ctx/rootfs/tmp"
  t=$(now_ms)
  # The image runs on this machine's engine: Linux, the host's architecture,
  # whatever GOOS/GOARCH a caller's environment may hold for other builds.
  if ! (cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=$(go env GOHOSTARCH) \
    go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$ctx/rootfs/$name" "$pkg") >"$cache/build-$name.log" 2>&1; then
    sed -n '1,30p' "$cache/build-$name.log" >&2
    echo "error: $name image: \`go build $pkg\` failed; full log: $cache/build-$name.log" >&2
    return 1
  fi
  note "compiled in $(took "$t")"
  cp "$here/images/$name/Dockerfile" "$ctx/Dockerfile"
  key=$(cat "$ctx/rootfs/$name" "$ctx/Dockerfile" | key_of)
  tag=pillar/$name:$key
  note "image $tag"
  if have_image "$tag"; then
    note "cached"
  else
    DOCKER_BUILDKIT=0 docker build --label "pillar.recipe=$key" -t "$tag" "$ctx" >>"$cache/build-$name.log" 2>&1 ||
      { tail -n 20 "$cache/build-$name.log" >&2; echo "error: $name image build failed; full log: $cache/build-$name.log" >&2; return 1; }
  fi
  tag_stable "$tag" "pillar/$name:local"
  tags[PILLAR_IMAGE_${name^^}]=$tag
  current[pillar/$name]=$key
  note "$name ready in $(took "$t0")"
}

# ---- run ---------------------------------------------------------------------

if wanted debian-base || wanted postgres; then
  build_base
fi
if wanted postgres; then build_postgres || failed+=(postgres); fi
if wanted proxy; then build_go_image proxy ./impl/cmd/proxy || failed+=(proxy); fi
if wanted sim; then build_go_image sim ./sim/cmd/sim || failed+=(sim); fi

[ -z "$do_prune" ] || prune
if [ -n "$print_tags" ]; then
  for n in PILLAR_IMAGE_DEBIAN_BASE PILLAR_IMAGE_POSTGRES PILLAR_IMAGE_PROXY PILLAR_IMAGE_SIM; do
    [ -z "${tags[$n]:-}" ] || echo "$n=${tags[$n]}"
  done
fi
if [ ${#failed[@]} -gt 0 ]; then
  die "images not built: ${failed[*]} (the others are ready, $((SECONDS - t_all))s)"
fi
step "images ready in $((SECONDS - t_all))s"
