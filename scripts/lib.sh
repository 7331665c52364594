# shellcheck shell=bash
# Shared helpers for the project's scripts. Source it; do not run it.
# Each step is stamped with the UTC time, so a CI log shows what every stage took.
step() { printf '\033[1m==> %s %s\033[0m\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
note() { printf '    %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# free_disk says how much room is left where the tests write: the
# repository (bin/, caches under $HOME), temporary files (the kernel
# guest's disks and overlay) and Docker's root (images, kind's nodes).
# A full disk fails far from its cause (a docker save, a guest write).
free_disk() {
  local d dev seen="" out=""
  for d in "$PWD" "${TMPDIR:-/tmp}" /var/tmp /var/lib/docker; do
    [ -e "$d" ] || continue
    dev=$(df --output=source "$d" | tail -1)
    case " $seen " in *" $dev "*) continue ;; esac
    seen="$seen $dev"
    out="$out $d: $(df -h --output=avail "$d" | tail -1 | tr -d ' ') free;"
  done
  echo "${out# }"
}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# pg_bindir prints the directory holding PostgreSQL's server binaries.
pg_bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
  echo /usr/lib/postgresql/15/bin
}
# Heavy artifacts are cached outside the repository, keyed by content.
PILLAR_CACHE=${PILLAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pillar}
export PILLAR_CACHE
# Pinned versions (scripts/versions.env), exported for the scripts and the
# Go builds they start; a variable already set in the environment wins.
load_versions() {
  local key value
  while IFS='=' read -r key value; do
    case $key in '' | '#'*) continue ;; esac
    [ -n "${!key:-}" ] || printf -v "$key" '%s' "$value"
    export "${key?}"
  done <"$(dirname "${BASH_SOURCE[0]}")/versions.env"
}
load_versions
