#!/usr/bin/env bash
# Regenerates the Go code of the project's protobuf APIs (make proto):
# protoc from Debian's protobuf-compiler, the Go plugins pinned here and
# installed from the Go module proxy into bin/tools.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
if ! command -v protoc >/dev/null; then
  step "installing protobuf-compiler"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null
fi
tools=$PWD/bin/tools
mkdir -p "$tools"
GOBIN=$tools go install google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO
GOBIN=$tools go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC
find impl -name "*.proto" | sort | while read -r f; do
  step "protoc $f"
  PATH=$tools:$PATH protoc -I "$(dirname "$f")" \
    --go_out="$(dirname "$f")" --go_opt=paths=source_relative \
    --go-grpc_out="$(dirname "$f")" --go-grpc_opt=paths=source_relative \
    "$f"
done
