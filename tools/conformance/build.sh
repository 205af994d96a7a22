#!/usr/bin/env bash
# Builds the upstream e2e suite (e2e.test) and agnhost from k8s.io/kubernetes at the version
# the main module pins, in the module tools/conformance/suite (the main module's go.mod plus
# what test/e2e needs, so every shared dependency is the cluster's). Cached under
# $CONFORMANCE_CACHE/<k8s version>/ (default ~/.cache/staticip-conformance), so a warm machine
# skips the ~10-minute build. Prints the cache directory on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here/suite"
want=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
have=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
if [ "$want" != "$have" ]; then
  echo "conformance: go.mod pins k8s.io/kubernetes $want but tools/conformance/suite/go.mod has $have;" >&2
  echo "  copy the main go.mod's require/replace blocks into tools/conformance/suite/go.mod and run go mod tidy there" >&2
  exit 1
fi
# Every module both go.mods list must be at the same version (the suite's client-go, api, ... = the cluster's:
# tools/go.mod is where build-k8s-bins.sh builds the cluster's binaries).
mismatch=$(join <(cd "$root/tools" && go list -m -f '{{.Path}} {{.Version}}' all 2>/dev/null | sort) \
                <(go list -m -f '{{.Path}} {{.Version}}' all 2>/dev/null | sort) | awk '$2 != $3 && $1 ~ /^k8s\.io\//')
if [ -n "$mismatch" ]; then
  echo "conformance: k8s.io modules differ from the main module's:" >&2; echo "$mismatch" >&2; exit 1
fi
cache=${CONFORMANCE_CACHE:-$HOME/.cache/staticip-conformance}/$want
go_version=$(go env GOVERSION)
mkdir -p "$cache"
build() { # name package mode
  local name=$1 pkg=$2 mode=$3 stamp="$cache/.$1.version" want_stamp="$want $go_version $(sha256sum go.sum | cut -c1-16)"
  if [ -x "$cache/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want_stamp" ]; then
    echo "conformance: $name $want is up to date ($cache/$name)" >&2
    return
  fi
  echo "conformance: building $name $want (e2e.test takes ~10 min on 2 cores) ..." >&2
  local start=$SECONDS
  if [ "$mode" = test ]; then
    CGO_ENABLED=0 go test -c -trimpath -ldflags "-s -w" -o "$cache/$name.tmp" "$pkg"
  else
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$cache/$name.tmp" "$pkg"
  fi
  mv -f "$cache/$name.tmp" "$cache/$name"
  echo "$want_stamp" >"$stamp"
  echo "conformance: built $name in $((SECONDS - start))s" >&2
}
build e2e.test k8s.io/kubernetes/test/e2e test
build agnhost k8s.io/kubernetes/test/images/agnhost build
# The ginkgo CLI runs e2e.test in parallel processes (go.mod's tool line pins it with ginkgo's version).
build ginkgo github.com/onsi/ginkgo/v2/ginkgo build
echo "$cache"
