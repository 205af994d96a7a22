#!/usr/bin/env bash
# make verify: fails when anything generated is stale, gofmt or go vet complain, or any
# go.mod is untidy. It regenerates into the working tree and asks git what changed, so run
# it on a clean tree (CI does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fail=0

unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "verify: gofmt would change:"; echo "$unformatted"; fail=1
fi

if ! go vet ./...; then echo "verify: go vet failed"; fail=1; fi
if ! (cd tools/helm && go vet ./...); then echo "verify: go vet (tools/helm) failed"; fail=1; fi
if ! (cd tools/release && go vet ./...); then echo "verify: go vet (tools/release) failed"; fail=1; fi

# Every module whose go.mod/go.sum must be tidy, and every generated path (make generate).
MODULES=(. tools/controller-gen tools/coredns tools/kind/kindcli tools/helm tools/kwok tools/conformance/suite tools/release tools/registry)
GENERATED=(go.mod go.sum apis scheduler-plugins/apis manifests/crds charts/staticip/crds charts/staticip/files tools/controller-gen tools/coredns tools/kind/kindcli tools/helm tools/kwok tools/conformance/suite tools/release tools/registry)
before=$(git status --porcelain -- "${GENERATED[@]}")
for mod in "${MODULES[@]}"; do
  (cd "$mod" && go mod tidy)
done
./tools/codegen.sh >/dev/null
after=$(git status --porcelain -- "${GENERATED[@]}")
if [ "$before" != "$after" ] || [ -n "$(git diff --stat -- "${GENERATED[@]}")" ]; then
  echo "verify: generated code, CRDs or go.mod/go.sum are stale; run 'make generate' and commit:"
  git status --porcelain -- "${GENERATED[@]}"
  git --no-pager diff --stat -- "${GENERATED[@]}"
  fail=1
fi
# The chart (make chart-lint: default values and every alternative).
./tools/helm.sh
if ! make --no-print-directory -s chart-lint; then echo "verify: helm lint charts/staticip failed"; fail=1; fi
[ $fail -eq 0 ] && echo "verify: clean"
exit $fail
