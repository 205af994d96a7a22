#!/usr/bin/env bash
# Pins k8s.io/kubernetes and every k8s.io/* staging module it replaces with ./staging/...
# Kubernetes' own go.mod requires staging modules at v0.0.0 and replaces them with local
# paths; a module that imports k8s.io/kubernetes must replace each of them with a real
# version. This script derives that list from the pinned k8s.io/kubernetes go.mod, so a
# version bump is one command: tools/pin-kubernetes.sh v1.36.4
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-$(go list -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null || echo v1.36.3)}
staging=v0${version#v1}   # v1.36.3 -> v0.36.3
modfile=$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
[ -f "$modfile" ] || { echo "cannot read go.mod of k8s.io/kubernetes@${version}" >&2; exit 1; }
mods=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile" | sort -u)
[ -n "$mods" ] || { echo "no staging replaces found in $modfile" >&2; exit 1; }
go mod edit -require="k8s.io/kubernetes@${version}"
for m in $mods; do
  go mod edit -replace="${m}=${m}@${staging}"
done
# Tidy, then state the real version of every staging module we require directly: tidy
# records a replaced module it finds only through the replace as v0.0.0-00010101000000-...
go mod tidy
for m in $(go mod edit -json | sed -n 's#.*"Path": "\(k8s.io/[a-z0-9-]*\)",#\1#p' | sort -u); do
  if echo "$mods" | grep -qx "$m" && grep -Eq "^[[:space:]]*$m v0\.0\.0(-00010101000000-000000000000)?( |$)" go.mod; then
    go mod edit -require="${m}@${staging}"
  fi
done
go mod tidy
# The tools module (tools/go.mod) and the e2e module (e2e/go.mod) build against the product
# module (replace ../): the same k8s.io/kubernetes and the same staging replaces, so the
# cluster's binaries (built in tools/) are at the version the product pins.
for sub in tools e2e; do
  (cd "$sub" && go mod edit -require="k8s.io/kubernetes@${version}" && \
    for m in $mods; do go mod edit -replace="${m}=${m}@${staging}"; done && go mod tidy)
done
echo "pinned k8s.io/kubernetes ${version} and $(echo "$mods" | wc -l) staging modules at ${staging}"
