#!/usr/bin/env bash
# Builds helm from the Go module proxy (no binary download) into _output/bin/helm, at the
# version tools/helm/go.mod pins (helm.sh/helm/v3). Skipped when the binary was built from
# the same go.mod/go.sum and this script (a stamp next to it), so calling it again costs nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/_output/bin"
mkdir -p "$bin"
stamp="$bin/.helm.stamp"
want=$(cat "$root/tools/helm/go.mod" "$root/tools/helm/go.sum" "$0" | sha256sum | cut -c1-64)
if [ -x "$bin/helm" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
version=$(cd "$root/tools/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
echo "helm: building helm.sh/helm/v3 $version into $bin/helm"
# The ldflags helm's own Makefile sets: the version `helm version` reports, and the Kubernetes
# version `helm template`/`helm lint` assume without a cluster (from client-go's: v0.X -> 1.X).
k8s=$(cd "$root/tools/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)
k8s_minor=$(echo "$k8s" | cut -d. -f2)
ldflags="-X helm.sh/helm/v3/internal/version.version=$version"
for p in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$k8s_minor"
done
(cd "$root/tools/helm" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/helm.tmp" helm.sh/helm/v3/cmd/helm)
mv "$bin/helm.tmp" "$bin/helm"
echo "$want" >"$stamp"
