#!/usr/bin/env bash
# Uninstalls staticip and cleans up after it (charts/staticip/README.md, "Uninstall"):
#   1. refuses while workloads that use static IPs exist (EnhancedStatefulSets and grids:
#      delete them first; their pods' addresses go with staticip);
#   2. rolls the agents into staticip-agent --cleanup and drops the chart's IPPools (helm
#      upgrade --reuse-values --set agent.cleanup=true,ipPools=null --wait): each agent removes
#      its node's plugin binary, conflist, plugin kubeconfig, IPAM database, the agent's
#      routes and its NAT table (nftables inet staticip), and turns Ready when its node is clean;
#   3. deletes every IPPool (pools first, or the range allocator hands out new blocks),
#      StaticIP, NodeFailover and IPRange while the controller-manager still runs (it holds
#      the NodeFailovers' finalizer);
#   4. helm uninstall --wait;
#   5. with --delete-crds, the CRDs too (Helm never deletes crds/);
#   6. the leftover check: no instance of any staticip CRD remains.
# Pods that still run keep their network namespaces, but no new pod gets an address until
# another CNI is installed.
#
#   charts/staticip/scripts/uninstall.sh RELEASE RELEASE_NAMESPACE [--delete-crds]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RELEASE RELEASE_NAMESPACE [--delete-crds]" >&2; exit 2; }
release=$1 relns=$2
delete_crds=${3:-}
chart=$(cd "$(dirname "$0")/.." && pwd)
helm=${HELM:-helm}
kubectl=${KUBECTL:-kubectl}
log() { echo "uninstall: $*" >&2; }

# The staticip CRDs' resources (plural.group), from the chart's crds/.
resources=()
for f in "$chart"/crds/*.yaml; do
  r=$(basename "$f" .yaml)            # <group>_<plural>
  resources+=("${r#*_}.${r%%_*}")
done
exists() { "$kubectl" get crd "$1" >/dev/null 2>&1; }

busy=""
for r in enhancedstatefulsets.jke.jdcloud.com statefulsetgrids.superedge.io deploymentgrids.superedge.io servicegrids.superedge.io; do
  exists "$r" || continue
  left=$("$kubectl" get "$r" -A --no-headers -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name 2>/dev/null || true)
  [ -n "$left" ] && busy+="$r:"$'\n'"$left"$'\n'
done
if [ -n "$busy" ]; then
  log "workloads still use staticip; delete them first:"
  echo "$busy" >&2
  exit 1
fi

release_exists=0
"$helm" status "$release" -n "$relns" >/dev/null 2>&1 && release_exists=1
if [ $release_exists = 1 ]; then
  log "agents: staticip-agent --cleanup on every node; the chart's IPPools removed (helm upgrade --reuse-values --set agent.cleanup=true,ipPools=null)"
  "$helm" upgrade "$release" "$chart" -n "$relns" --reuse-values --set agent.cleanup=true --set ipPools=null --wait --timeout 10m >&2
  "$kubectl" -n kube-system rollout status daemonset/staticip-agent --timeout=600s >&2
else
  log "no Helm release $release in $relns: roll the agents into --cleanup yourself (README.md, \"Uninstall\")"
fi

# Pools first (or the range allocator hands out new blocks), while the controller-manager
# still runs (it holds the NodeFailovers' finalizer).
for r in ippools.jke.jdcloud.com staticips.jke.jdcloud.com nodefailovers.jke.jdcloud.com ipranges.jke.jdcloud.com; do
  exists "$r" || continue
  log "kubectl delete $r --all -A"
  "$kubectl" delete "$r" --all -A --wait=true --timeout=300s >&2
done

if [ $release_exists = 1 ]; then
  log "helm uninstall $release"
  "$helm" uninstall "$release" -n "$relns" --wait --timeout 10m >&2
fi

if [ "$delete_crds" = --delete-crds ]; then
  log "kubectl delete -f $chart/crds"
  "$kubectl" delete -f "$chart/crds" --ignore-not-found --wait=true >&2
fi

left=0
for r in "${resources[@]}"; do
  exists "$r" || continue
  n=$("$kubectl" get "$r" -A --no-headers 2>/dev/null | grep -c . || true)
  if [ "$n" -gt 0 ]; then
    log "leftover: $n $r"
    left=1
  fi
done
[ $left -eq 0 ] && log "done: no staticip object is left"
exit $left
