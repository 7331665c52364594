#!/usr/bin/env bash
# Regenerates the Go code of the project's protobuf APIs (make proto):
# protoc from Debian's protobuf-compiler, the Go plugins installed from the
# Go module proxy into bin/tools; versions in scripts/versions.env.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if ! command -v protoc >/dev/null; then
  step "installing protobuf-compiler"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null
fi
# protoc writes its version into the generated files: another release would
# show as a diff in make verify, so say so instead.
have=$(protoc --version | awk '{print $2}')
[ "$have" = "$PROTOC_VERSION" ] || die "protoc $have found, scripts/versions.env pins $PROTOC_VERSION (Debian bookworm's protobuf-compiler)"
tools=$PWD/bin/tools
mkdir -p "$tools"
GOBIN=$tools go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN=$tools go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
find impl -name "*.proto" | sort | while read -r f; do
  step "protoc $f"
  PATH=$tools:$PATH protoc -I "$(dirname "$f")" \
    --go_out="$(dirname "$f")" --go_opt=paths=source_relative \
    --go-grpc_out="$(dirname "$f")" --go-grpc_opt=paths=source_relative \
    "$f"
done
