#!/usr/bin/env bash
# make conformance: Kubernetes' own conformance specs against a running cluster (README.md).
#   run.sh prepare: steps 1 and 2 without a cluster (make test builds before its cluster is up).
#   1. e2e.test, agnhost and the ginkgo CLI from k8s.io/kubernetes at go.mod's version (build.sh, cached);
#   2. the test images, built locally (rootfs.sh + ./tools/conformance/images) and imported into
#      every node under the remapped and the literal upstream names, so nothing is ever pulled;
#   3. e2e.test --provider=skeleton on the focused Conformance specs, JUnit into $out, and the
#      passed/failed/skipped summary.
# Settings (environment):
#   KUBECONFIG          the cluster (default: the local cluster's, $CLUSTER_STATE_DIR/kubeconfig)
#   CLUSTER_STATE_DIR   the local cluster (/var/lib/staticip-localcluster): images go into its nodes' containerd
#   KIND_CLUSTER        a kind cluster's name: images go in with `kind load image-archive`
#   CONFORMANCE_FOCUS   ginkgo focus regex (default: the full selection, $full_focus); or
#                       ci (the CI subset), dualstack (upstream's [Feature:IPv6DualStack] specs for a
#                       CNI, on a dual-stack cluster: kind's default), ci+dualstack (both in one run)
#   CONFORMANCE_PROCS   parallel ginkgo processes (3); [Serial] specs run alone at the end
#   CONFORMANCE_OUT     JUnit and logs (_output/conformance)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
log() { echo "conformance: $*" >&2; }
start=$SECONDS

state=${CLUSTER_STATE_DIR:-/var/lib/staticip-localcluster}
kubeconfig=${KUBECONFIG:-$state/kubeconfig}
out=${CONFORMANCE_OUT:-$root/_output/conformance}
procs=${CONFORMANCE_PROCS:-3}
full_focus='\[sig-network\]|\[sig-scheduling\] SchedulerPredicates|\[sig-apps\] StatefulSet Basic StatefulSet functionality'
# The CI subset (make test runs it on the e2e suite's local cluster): CONFORMANCE_FOCUS=ci; HostPort
# because it found a defect (the conflist had no portmap).
ci_focus='\[sig-network\] Networking Granular Checks: Pods|\[sig-network\] DNS|\[sig-network\] HostPort'
# Upstream's dual-stack specs (not Conformance-labelled): every spec of test/e2e/network/dual_stack.go
# but SCTP's (README.md, "Dual-stack"). Their namespaces carry e2e-framework=dualstack, which
# kind's dual-stack pools select (tools/kind/README.md).
dualstack_focus='\[sig-network\] \[Feature:IPv6DualStack\]'
dualstack_labels='Feature:IPv6DualStack && !Feature:SCTPConnectivity'
focus=${CONFORMANCE_FOCUS:-$full_focus}
labels=Conformance
# The image tarballs the selection needs go into the nodes (all of them, unless a selection
# names fewer): each is ~110 MB, and kind load of all of them into 4 nodes took ~210 s.
wanted_images='*'
case "$focus" in
  ci) focus=$ci_focus ;;
  # Every dual-stack spec runs agnhost (pods, netservers, the host-network test container).
  dualstack) focus=$dualstack_focus labels=$dualstack_labels wanted_images='agnhost_2.63.0' ;;
  ci+dualstack) focus="$ci_focus|$dualstack_focus" labels="Conformance || ($dualstack_labels)" ;;
esac
registry=localhost/conformance
kubectl="$root/_output/bin/kubectl --kubeconfig=$kubeconfig"
mkdir -p "$out"

# 1. Binaries (cached by k8s version).
cache=$("$here/build.sh" | tail -1)

# 2. Images: a Debian userland (cached), its layer tar (cached beside it), the tarballs
#    (rebuilt when an input changes), then the import.
rootfs=$("$here/rootfs.sh" | tail -1)
layer="$rootfs.layer.tar"
if [ ! -s "$layer" ]; then
  tar -C "$rootfs" --numeric-owner --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* --exclude=./.complete \
    -cf "$layer.tmp" . && mv "$layer.tmp" "$layer"
fi
agnhost_src=$(cd "$here/suite" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost
images="$out/images"
key=$( { sha256sum "$cache/agnhost" "$layer" | cut -c1-64; cat tools/conformance/images/main.go tools/images/imagebuilder/imagebuilder.go tools/images/pause/*.go; } | sha256sum | cut -c1-16)
if [ "$(cat "$images/.key" 2>/dev/null)" != "$key" ]; then
  log "building the test images ..."
  rm -rf "$images"
  tools/run.sh conformance/images --rootfs-layer "$layer" --rootfs "$rootfs" --agnhost "$cache/agnhost" \
    --agnhost-src "$agnhost_src" --registry "$registry" --out "$images" >&2
  echo "$key" >"$images/.key"
fi
[ "${1:-}" = prepare ] && { log "binaries and images ready in $((SECONDS - start))s"; exit 0; }
tars=("$images"/$wanted_images.tar)
[ -e "${tars[0]}" ] || { log "no image tarball $images/$wanted_images.tar"; exit 1; }
refs=$(for t in "${tars[@]}"; do tar -xOf "$t" manifest.json; echo; done | sed 's/.*"RepoTags":\[\([^]]*\)\].*/\1/' | tr ',' '\n' | tr -d '"')
if [ -n "${KIND_CLUSTER:-}" ]; then
  kind=$(command -v kind || echo "$root/_output/bin/kind")   # make k8s-bins builds it there
  t0=$SECONDS
  for t in "${tars[@]}"; do "$kind" load image-archive --name "$KIND_CLUSTER" "$t" >&2; done
  log "kind load of ${#tars[@]} image tarball(s) in $((SECONDS - t0))s"
elif [ "$kubeconfig" = "$state/kubeconfig" ]; then
  for sock in "$state"/node-*/containerd/containerd.sock; do
    have=$(ctr --address "$sock" -n k8s.io images ls -q)
    missing=$(comm -23 <(echo "$refs" | sort -u) <(echo "$have" | sort -u))
    [ -z "$missing" ] && continue
    log "importing the test images into $(basename "$(dirname "$(dirname "$sock")")") ..."
    for t in "${tars[@]}"; do ctr --address "$sock" -n k8s.io images import "$t" >/dev/null; done
  done
else
  log "KUBECONFIG is neither the local cluster's nor KIND_CLUSTER set: the nodes must already have these images:"
  echo "$refs" | sed 's/^/  /' >&2
fi

# 3. The run. Schedulable nodes are the untainted ones; every taint on a node (the local
#    cluster's spare: staticip.jke.jdcloud.com/spare) goes into --non-blocking-taints, or the
#    suite waits for that node forever. --num-nodes: without it, specs that need N nodes see -1 and skip.
nodes=$($kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.spec.taints[*].key}{"\n"}{end}')
num_nodes=$(echo "$nodes" | awk 'NF == 1' | wc -l)
taints=$(echo "$nodes" | awk 'NF > 1 {for (i = 2; i <= NF; i++) print $i}' | sort -u | paste -sd, -)
taints=${taints:+$taints,}node-role.kubernetes.io/control-plane
log "$num_nodes schedulable nodes; non-blocking taints: $taints; focus: $focus; labels: $labels; $procs processes"
rm -f "$out"/junit_*.xml
args=(
  --kubeconfig="$kubeconfig" --provider=skeleton --num-nodes="$num_nodes" --non-blocking-taints="$taints"
  --kube-test-repo-list="$images/repo-list.yaml" --report-dir="$out"
)
ginkgo=(--focus="$focus" --label-filter="$labels" --no-color --timeout=2h --poll-progress-after=5m)
run_start=$SECONDS
rc=0
if [ "$procs" -gt 1 ]; then
  "$cache/ginkgo" --procs="$procs" "${ginkgo[@]}" "$cache/e2e.test" -- "${args[@]}" >"$out/e2e.log" 2>&1 || rc=$?
else
  "$cache/e2e.test" "${args[@]}" "${ginkgo[@]/#--/--ginkgo.}" >"$out/e2e.log" 2>&1 || rc=$?
fi
run_time=$((SECONDS - run_start))
grep -E '^(Ran [0-9]+ of|SUCCESS!|FAIL!|Test Suite (Passed|Failed))' "$out/e2e.log" >&2 || true
if [ ! -s "$out/junit_01.xml" ]; then
  log "no JUnit report (exit $rc); the last lines of $out/e2e.log:"; tail -40 "$out/e2e.log" >&2; exit 1
fi
tools/run.sh conformance/summary "$out/junit_01.xml" || rc=1
log "specs ran in ${run_time}s, make conformance took $((SECONDS - start))s (log: $out/e2e.log, JUnit: $out/junit_01.xml)"
exit "$rc"
