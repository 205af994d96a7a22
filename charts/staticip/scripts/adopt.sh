#!/usr/bin/env bash
# Adopts an existing kustomize install of staticip (README.md, "Installing into a cluster",
# the kubectl apply -k steps) into a Helm release, so that `helm upgrade --install` takes the
# objects over instead of failing on them: every object the chart renders with your values
# that exists already gets the label app.kubernetes.io/managed-by=Helm and the annotations
# meta.helm.sh/release-name and meta.helm.sh/release-namespace. Nothing else is changed and
# no pod restarts. charts/staticip/README.md, "Upgrading from a kustomize install".
#
#   charts/staticip/scripts/adopt.sh RELEASE RELEASE_NAMESPACE [helm template flags, e.g. -f my-values.yaml]
#
# HELM and KUBECTL name the binaries (default: helm, kubectl; KUBECONFIG as usual).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RELEASE RELEASE_NAMESPACE [helm template flags]" >&2; exit 2; }
release=$1 relns=$2
shift 2
chart=$(cd "$(dirname "$0")/.." && pwd)
helm=${HELM:-helm}
kubectl=${KUBECTL:-kubectl}
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
"$helm" template "$release" "$chart" --namespace "$relns" "$@" >"$rendered"
n=0
while read -r kind apiversion namespace name; do
  group=""
  [[ "$apiversion" == */* ]] && group=".${apiversion%/*}"
  ref="${kind,,}${group}/${name}"
  nsflag=()
  [ "$namespace" != "<none>" ] && nsflag=(-n "$namespace")
  "$kubectl" label "${nsflag[@]}" "$ref" app.kubernetes.io/managed-by=Helm --overwrite >/dev/null
  "$kubectl" annotate "${nsflag[@]}" "$ref" "meta.helm.sh/release-name=$release" "meta.helm.sh/release-namespace=$relns" --overwrite >/dev/null
  echo "adopted ${namespace/<none>/-} $ref"
  n=$((n + 1))
done < <("$kubectl" get -f "$rendered" --ignore-not-found --no-headers \
  -o 'custom-columns=KIND:.kind,APIVERSION:.apiVersion,NAMESPACE:.metadata.namespace,NAME:.metadata.name')
echo "adopt: $n existing objects now belong to release $release (namespace $relns); next: helm upgrade --install $release $chart -n $relns <same flags>"
