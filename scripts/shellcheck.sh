#!/usr/bin/env bash
# Runs shellcheck on every shell script under scripts/ (make vet). The tool
# comes from Debian, installed here when missing as scripts/proto.sh
# installs protoc; settings are in .shellcheckrc.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if ! command -v shellcheck >/dev/null; then
  step "installing shellcheck"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
fi

# Files not checked at all (none today).
skip=" "
# Per-file exclusions, each with its reason:
#   scripts/kernel/guest-image.sh hashes its own text into the qemu guest's
#   cache key, so an edit costs CI a 15-30 minute rebuild; its one note
#   (SC2012, ls of /lib/modules, whose names are kernel versions) waits for
#   the next real change to that script.
declare -A exclude=([scripts/kernel/guest-image.sh]=SC2012)

rc=0 files=() libraries=()
# Shell scripts: *.sh, and executables with a shell shebang (the kind node's
# entrypoint, the docker wrapper).
while IFS= read -r f; do
  case $f in *.sh) ;; *) head -1 "$f" | grep -qE '^#!.*[/ ](ba)?sh$' || continue ;; esac
  case $skip in *" $f "*) continue ;; esac
  if [ -n "${exclude[$f]:-}" ]; then
    shellcheck --exclude="${exclude[$f]}" "$f" || rc=1
  elif head -1 "$f" | grep -q '^#!'; then
    files+=("$f")
  else
    libraries+=("$f") # sourced, no shebang: bash
  fi
done < <(find scripts -type f \( -name '*.sh' -o -perm -u+x \) | sort)
shellcheck "${files[@]}" || rc=1
[ ${#libraries[@]} = 0 ] || shellcheck --shell=bash "${libraries[@]}" || rc=1
[ "$rc" = 0 ] || die "shellcheck found problems in scripts/ (see above)"
note "shellcheck: $(( ${#files[@]} + ${#libraries[@]} + ${#exclude[@]} )) scripts clean"
