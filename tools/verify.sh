#!/usr/bin/env bash
# make verify: fails when anything generated is stale (code, CRDs, the chart's copies of
# manifests/, the chart README's values table), gofmt or go vet complain, or any
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

# go vet in every module with Go code of ours: the product, tools/ (its own module), e2e/ (its
# own module; its tests, like the local cluster's lifecycle test, build only with -tags e2e)
# and tools/helm's chart test.
for mod in . tools e2e tools/helm tools/release; do
  if ! (cd "$mod" && go vet ./... && go vet -tags e2e ./...); then echo "verify: go vet ($mod) failed"; fail=1; fi
done
# The e2e suite's binary must start: a dependency that registers a global -kubeconfig flag at
# init (controller-runtime, through internal/testenv) panics it before any test ("flag
# redefined: kubeconfig": the CI run of 1330d5f). Listing no test runs every init and nothing else.
e2ebin=$(mktemp -d)
if ! (cd e2e && go test -c -tags e2e -o "$e2ebin/e2e.test" .) || "$e2ebin/e2e.test" -test.list 'x^' 2>&1 | grep -q '^panic:'; then
  echo "verify: the e2e test binary does not start (a flag registered twice at init?)"; fail=1
fi
rm -rf "$e2ebin"
# The product module must not need the tools or e2e module.
if grep -q 'github.com/staticip/staticip/\(tools\|e2e\)' go.mod; then
  echo "verify: go.mod requires the tools or e2e module; product code must not import them"; fail=1
fi

# Every module whose go.mod/go.sum must be tidy, and every generated path (make generate).
MODULES=(. tools e2e tools/controller-gen tools/coredns tools/kind/kindcli tools/helm tools/kwok tools/conformance/suite tools/release tools/registry)
GENERATED=(go.mod go.sum tools/go.mod tools/go.sum e2e/go.mod e2e/go.sum apis scheduler-plugins/apis manifests/crds charts/staticip/crds charts/staticip/files charts/staticip/LICENSE charts/staticip/NOTICE tools/controller-gen tools/coredns tools/kind/kindcli tools/helm tools/kwok tools/conformance/suite tools/release tools/registry)
before=$(git status --porcelain -- "${GENERATED[@]}")
for mod in "${MODULES[@]}"; do
  (cd "$mod" && go mod tidy)
done
# The chart README's values table (tools/helm-docs-lite), checked before codegen rewrites it.
if ! tools/run.sh helm-docs-lite -check; then fail=1; fi
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
