#!/usr/bin/env bash
# Alternating pod-burst rounds on the local cluster: for each round and each CNI, bring the
# cluster up with that CNI, burst D Deployments x R replicas (and, on staticip, the same as
# static-IP EnhancedStatefulSets), take it down. The same nodes, machine and binaries for both.
#   ROUNDS (2), CNIS ("staticip bridge"), WORKLOADS (D, 6), REPLICAS (10), CLUSTER_FLAGS (as make up)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
rounds=${ROUNDS:-2}
cnis=${CNIS:-staticip bridge}
d=${WORKLOADS:-6}
r=${REPLICAS:-10}
state=${CLUSTER_STATE_DIR:-/var/lib/staticip-localcluster}
flags=${CLUSTER_FLAGS:---nodes=3 --spare-nodes=1 --failover-window=5s --state-dir=$state}
lc=_output/cluster/localcluster
go build -o _output/bin/podburst ./tools/podburst
go build -o "$lc" ./tools/localcluster
for round in $(seq "$rounds"); do
  for cni in $cnis; do
    echo "podburst: round $round, --cni=$cni" >&2
    $lc down --state-dir="$state" >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    $lc up $flags --cni="$cni" >_output/podburst-up.log 2>&1 || { tail -20 _output/podburst-up.log >&2; exit 1; }
    _output/bin/podburst --kubeconfig="$state/kubeconfig" --workloads="$d" --replicas="$r" --kind=deployment --label="$cni"
    if [ "$cni" = staticip ]; then
      _output/bin/podburst --kubeconfig="$state/kubeconfig" --workloads="$d" --replicas="$r" --kind=ests --label="$cni"
    fi
  done
done
$lc down --state-dir="$state" >/dev/null
