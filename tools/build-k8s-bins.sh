#!/usr/bin/env bash
# Builds the Kubernetes components the tests and the local cluster run, from the module
# versions go.mod pins (nothing is downloaded but Go modules):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
#   kubectl, kubeadm (the `tool` directives of tools/go.mod; kubeadm for the kind node image),
#   coredns (tools/coredns module)
#   and kwok (tools/kwok module: tools/scalebench's fake nodes)
# into _output/bin. A stamp file records the versions; a binary is rebuilt only when it is
# missing or the pinned version changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/_output/bin"
mkdir -p "$out"

# The tools module (tools/go.mod) holds the `tool` directives; it requires the product module
# (replace ../) with the same k8s.io replace block, so k8s.io/kubernetes is the product's version.
k8s_version=$(cd tools && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd tools && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
coredns_version=$(cd tools/coredns && go list -m -f '{{.Version}}' github.com/coredns/coredns)
go_version=$(go env GOVERSION)

# Kubernetes binaries report the version they were built from (kubectl version, the
# Node's kubeletVersion, version skew checks), as hack/lib/version.sh would set it.
IFS=. read -r major minor _ <<<"${k8s_version#v}"
ldflags_k8s="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags_k8s+=" -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
  ldflags_k8s+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
done

build() { # name version dir package ldflags
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5
  local stamp="$out/.$name.version" want="$version $go_version"
  if [ -x "$out/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "k8s-bins: $name $version is up to date"
    return
  fi
  echo "k8s-bins: building $name $version ..."
  local start=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
  mv -f "$out/$name.tmp" "$out/$name"
  echo "$want" >"$stamp"
  echo "k8s-bins: built $name in $((SECONDS - start))s"
}

build etcd "$etcd_version" "$root/tools" go.etcd.io/etcd/server/v3 "-s -w"
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kubeadm; do
  build "$c" "$k8s_version" "$root/tools" "k8s.io/kubernetes/cmd/$c" "$ldflags_k8s"
done
build coredns "$coredns_version" "$root/tools/coredns" github.com/coredns/coredns "-s -w"
# kind, from its own module (tools/kind/kindcli) so its dependencies never touch ours:
# `make kind-up` / `make e2e-kind`.
kind_version=$(cd tools/kind/kindcli && go list -m -f '{{.Version}}' sigs.k8s.io/kind)
build kind "$kind_version" "$root/tools/kind/kindcli" sigs.k8s.io/kind "-s -w"
# kwok, from its own module (tools/kwok): tools/scalebench's fake nodes and pods.
kwok_version=$(cd tools/kwok && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
build kwok "$kwok_version" "$root/tools/kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w"
