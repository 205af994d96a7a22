#!/bin/sh
# The edge DNS part of `make demo` (after demo-grids.sh): from a pod of each zone, the
# StatefulSetGrid's names {ssg}-{i}.{svc}.default.svc.cluster.local resolve to that zone's pod
# (statefulset-grid-daemon's hosts file, read by the zone's CoreDNS), and HTTP to the name is
# answered by that pod. KUBECTL is the kubectl command line (binary and --kubeconfig).
set -eu
: "${KUBECTL:?set KUBECTL to the kubectl command line}"
k() { $KUBECTL "$@"; }
if ! k -n kube-system get deploymentgrid edge-coredns >/dev/null 2>&1; then
	echo; echo "== edge DNS not installed (cluster up with --central-dns or --kube-proxy-direct): no per-zone names =="
	exit 0
fi
name() { echo "statefulsetgrid-demo-$1.servicegrid-demo-svc.default.svc.cluster.local"; }
# Wait until every zone's caller resolves every name to its own zone's pod.
for zone in zone-0 zone-1; do
	caller=statefulsetgrid-demo-$zone-0
	for i in 0 1 2; do
		want=$(k get pod "statefulsetgrid-demo-$zone-$i" -o jsonpath='{.status.podIP}')
		n=0
		until [ "$(k exec "$caller" -- /testserver lookup "$(name $i)." 2>/dev/null)" = "$want" ]; do
			n=$((n + 1))
			if [ $n -gt 120 ]; then
				echo "timed out: $(name $i) from $caller does not resolve to $want" >&2
				exit 1
			fi
			sleep 0.5
		done
	done
done
echo; echo "== edge DNS: the same names from each zone, answered by that zone's pod =="
printf '%-8s %-30s %-68s %-14s %s\n' zone caller name "resolves to" "pod name (HTTP answer)"
for zone in zone-0 zone-1; do
	caller=statefulsetgrid-demo-$zone-0
	for i in 0 1 2; do
		ip=$(k exec "$caller" -- /testserver lookup "$(name $i).")
		pod=$(k exec "$caller" -- /testserver get "http://$(name $i):8080/" | sed -n 's/.*"pod":"\([^"]*\)".*/\1/p')
		printf '%-8s %-30s %-68s %-14s %s\n' "$zone" "$caller" "$(name $i)" "$ip" "$pod"
	done
done
