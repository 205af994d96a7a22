#!/usr/bin/env bash
# Alternating pod-burst rounds on the local cluster: for each round and each CNI, bring the
# cluster up with that CNI, burst D Deployments x R replicas (and, on staticip, the same as
# static-IP EnhancedStatefulSets), take it down. The same nodes, machine and binaries for all.
# With RESTARTS > 0, the CNIs that keep a StatefulSet pod's IP also time RESTARTS deletions of
# one of RESTART_REPLICAS pods -> its successor Running with the same IP (another IP fails the
# run): staticip a static-IP EnhancedStatefulSet, spiderpool a native StatefulSet (its
# SpiderEndpoint keeps the IP); same pod template, same count.
# Rounds alternate the order of the CNIs (the list in odd rounds, reversed in even ones), so the
# machine's drift hits every CNI alike. Every pod's raw timings go to CSV (beside the README by
# default); at the end the per-round figures, their medians and min–max, and the ratios to the
# first CNI are printed (podburst --summarize).
#   ROUNDS (3), CNIS ("staticip bridge spiderpool"), WORKLOADS (D, 10), REPLICAS (10),
#   RESTARTS (24), RESTART_REPLICAS (3), CLUSTER_FLAGS (as make up, plus the cluster's identity),
#   CSV (tools/podburst/results-<UTC date and time>.csv)
# spiderpool needs `make spiderpool helm` first (tools/spiderpool/README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
cnis=${CNIS:-staticip bridge spiderpool}
d=${WORKLOADS:-10}
r=${REPLICAS:-10}
restarts=${RESTARTS:-24}
restart_replicas=${RESTART_REPLICAS:-3}
state=${CLUSTER_STATE_DIR:-/var/lib/staticip-localcluster}
flags=${CLUSTER_FLAGS:---nodes=3 --spare-nodes=1 --failover-window=5s --state-dir=$state}
lc=_output/cluster/localcluster
log=_output/podburst-up.log
csv=${CSV:-tools/podburst/results-$(date -u +%Y%m%dT%H%M).csv}
go build -C tools -o "$PWD/_output/bin/podburst" ./podburst   # tools/ is a module of its own
go build -C tools -o "$PWD/$lc" ./localcluster
load() { cut -d' ' -f1-3 /proc/loadavg; }
for round in $(seq "$rounds"); do
  order=$cnis
  if [ $((round % 2)) -eq 0 ]; then
    order=$(echo "$cnis" | tr ' ' '\n' | tac | tr '\n' ' ')
  fi
  for cni in $order; do
    echo "podburst: round $round, --cni=$cni, $(date -u +%FT%TZ), load $(load)" >&2
    # shellcheck disable=SC2086
    $lc down $flags >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    $lc up $flags --cni="$cni" >"$log" 2>&1 || { tail -30 "$log" >&2; exit 1; }
    kc="$state/kubeconfig"
    _output/bin/podburst --kubeconfig="$kc" --workloads="$d" --replicas="$r" --kind=deployment --label="$cni" --csv="$csv" --round="$round"
    echo "podburst: load after the burst $(load)" >&2
    case $cni in
    staticip)
      _output/bin/podburst --kubeconfig="$kc" --workloads="$d" --replicas="$r" --kind=ests --label="$cni" --csv="$csv" --round="$round"
      if [ "$restarts" -gt 0 ]; then
        _output/bin/podburst --kubeconfig="$kc" --replicas="$restart_replicas" --restarts="$restarts" --kind=ests --label="$cni"
      fi
      ;;
    spiderpool)
      if [ "$restarts" -gt 0 ]; then
        # Its namespace takes minutes to go (Spiderpool's StatefulSet SpiderEndpoints hold
        # finalizers until its GC runs); `down` follows, so do not wait for it.
        _output/bin/podburst --kubeconfig="$kc" --replicas="$restart_replicas" --restarts="$restarts" --kind=statefulset --label="$cni" --cleanup-timeout=10s
      fi
      ;;
    esac
  done
done
# shellcheck disable=SC2086
$lc down $flags >/dev/null
echo "podburst: raw per-pod timings in $csv" >&2
_output/bin/podburst --summarize="$csv"
