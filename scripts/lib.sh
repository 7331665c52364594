# shellcheck shell=bash
# Shared helpers for the project's scripts. Source it; do not run it.
# Each step is stamped with the UTC time, so a CI log shows what every stage took.
step() { printf '\033[1m==> %s %s\033[0m\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
note() { printf '    %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
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
