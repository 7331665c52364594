#!/usr/bin/env bash
# make verify: regenerates every generated file (make generate), tidies
# go.mod, and fails when either changed anything, so generated code, chart
# docs and go.mod/go.sum never drift from their sources. It compares the
# whole work tree (tracked and untracked files, .gitignore respected) before
# and after, so uncommitted work of your own does not fail it; on a clean
# checkout (CI) that is `git diff --exit-code` plus no new files.
# Then two checks no tool does for us:
#   - the Kubernetes version conformance/charts renders for is the one
#     scripts/versions.env pins (a Go constant cannot read that file);
#   - the product packages (impl/, sim/) and their tests stay free of the
#     test-only dependencies (docs/decisions.md, "One Go module").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

# snapshot: a tree object of the work tree as it is, through a scratch index
# (the real index and HEAD are untouched).
snapshot() {
  local index
  index=$(mktemp)
  rm -f "$index"
  GIT_INDEX_FILE=$index git add -A . && GIT_INDEX_FILE=$index git write-tree
  rm -f "$index"
}
before=$(snapshot)
step "make generate"
make --no-print-directory generate
step "go mod tidy"
go mod tidy
after=$(snapshot)
if [ "$before" != "$after" ]; then
  git --no-pager diff --stat "$before" "$after" >&2
  git --no-pager diff "$before" "$after" | head -60 >&2
  die "make generate or go mod tidy changed the files above: commit their output"
fi

step "pins and dependency boundary"
grep -q "Version: \"$KUBE_VERSION\"" conformance/charts/render.go ||
  die "conformance/charts/render.go renders for another Kubernetes version than KUBE_VERSION=$KUBE_VERSION (scripts/versions.env)"
# Modules only the conformance suites may use.
test_only='github.com/chromedp/|github.com/openai/|helm.sh/helm/|sigs.k8s.io/kind|github.com/testcontainers/|github.com/kubernetes-csi/csi-test/|github.com/onsi/'
leaks=$(go list -deps -test -f '{{with .Module}}{{.Path}}{{end}}' ./impl/... ./sim/... | sort -u | grep -E "^($test_only)" || true)
[ -z "$leaks" ] || die "impl/ or sim/ now depends on test-only modules: $leaks (docs/decisions.md, One Go module)"
note "generated files, go.mod and pins current"
