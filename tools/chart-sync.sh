#!/usr/bin/env bash
# Copies what charts/staticip takes unchanged from manifests/ (make generate; make verify
# fails when the copies are stale):
#  - manifests/crds -> charts/staticip/crds (Helm installs crds/ on first install only: see
#    charts/staticip/README.md, "Upgrading", for CRD upgrades);
#  - LICENSE and NOTICE -> charts/staticip/ (helm package ships them in the chart archive);
#  - the objects without values (RBAC, admission policies, the namespace) -> charts/staticip/files,
#    which templates/static.yaml renders with the chart's labels.
# The templated objects are compared with manifests/ by charts/chart_test.go instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/charts/staticip"
rm -rf "$chart/crds" "$chart/files"
cp "$root/LICENSE" "$root/NOTICE" "$chart/"
mkdir -p "$chart/crds"
cp "$root"/manifests/crds/*.yaml "$chart/crds/"
for f in cni/node-routes.yaml cni/rbac.yaml cni/admission.yaml admission/ip-address-policy.yaml admission/ippools-policy.yaml \
  user-roles/aggregated-roles.yaml controller-manager/namespace.yaml controller-manager/rbac.yaml controller-manager/admission.yaml \
  scheduler/base/rbac.yaml edge/rbac.yaml edge/statefulset-grid-daemon.yaml; do
  mkdir -p "$chart/files/$(dirname "$f")"
  cp "$root/manifests/$f" "$chart/files/$f"
done
