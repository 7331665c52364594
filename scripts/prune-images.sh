#!/usr/bin/env bash
# Drops the project's stale images. Images are tagged by the content they
# were built from (scripts/images.sh, scripts/kind/), so every change of the
# code adds a set of about 320 MB of unique layers, and nothing removed the
# old sets: a long-lived CI machine or workstation fills its disk, and a
# full disk shows up far from its cause (a silently paused qemu guest, a
# failed docker save). Of each pillar/* repository the three newest images
# are kept (the current ones; a tree checked out again later may rebuild),
# with every tag they carry; images a container uses are never removed.
# Dangling images (the previous content of a re-tagged name) go too.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
keep=${PILLAR_KEEP_IMAGES:-3}

docker info >/dev/null 2>&1 || die "no Docker engine (scripts/docker.sh starts one)"
before=$(docker system df --format '{{.Type}} {{.Size}}' | awk '$1 == "Images" {print $2}')
removed=0
# Each repository's images as "id tag", newest first (by creation time).
while read -r repo; do
  n=0 last=""
  while read -r id tag; do
    if [ "$id" != "$last" ]; then n=$((n + 1)) last=$id; fi
    [ $n -le "$keep" ] && continue
    if docker rmi "$repo:$tag" >/dev/null 2>&1; then removed=$((removed + 1)); fi
  done < <(docker images "$repo" --format '{{.CreatedAt}}|{{.ID}} {{.Tag}}' | sort -r | cut -d'|' -f2)
done < <(docker images --format '{{.Repository}}' | grep '^pillar/' | sort -u)
docker image prune -f >/dev/null
after=$(docker system df --format '{{.Type}} {{.Size}}' | awk '$1 == "Images" {print $2}')
note "stale images: $removed tags removed (of each pillar/* repository the $keep newest kept); images $before -> $after"
