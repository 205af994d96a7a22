#!/bin/sh
# The EnhancedStatefulSet part of `make demo`: waits for ests/web (tools/localcluster/demo.yaml)
# to run with a Bound StaticIP per pod, rolls it from testserver v1 to v2 and tells whether
# every pod kept its IP. KUBECTL is the kubectl command line (binary and --kubeconfig).
set -eu
: "${KUBECTL:?set KUBECTL to the kubectl command line}"
k() { $KUBECTL "$@"; }

# settled: the controller saw the latest spec, and every replica is ready at the update
# revision, which is also the current one.
settled() {
	k get ests web -o jsonpath='{.metadata.generation}|{.status.observedGeneration}|{.spec.replicas}|{.status.readyReplicas}|{.status.updatedReplicas}|{.status.currentRevision}|{.status.updateRevision}' |
		awk -F'|' '$1 == $2 && $3 == $4 && $3 == $5 && $6 == $7 && $6 != "" { print "yes" }'
}
bound() {
	k get sip -o jsonpath='{range .items[*]}{.spec.kind}/{.spec.ref} {.status.phase}{"\n"}{end}' | grep -c '^EnhancedStatefulSet/web Bound$' || true
}
wait_for() { # what, command, wanted output
	i=0
	until [ "$($2)" = "$3" ]; do
		i=$((i + 1))
		if [ $i -gt 360 ]; then
			echo "timed out waiting for $1" >&2
			k get ests,sip,pods -o wide >&2
			exit 1
		fi
		sleep 0.5
	done
}
ips() { k get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP} {.spec.nodeName}{"\n"}{end}' | sort; }

replicas=$(k get ests web -o jsonpath='{.spec.replicas}')
wait_for "ests/web ready" settled yes
wait_for "a Bound StaticIP per pod" bound "$replicas"
echo; echo "== EnhancedStatefulSet web at v1: pods and their StaticIPs =="
k get ests,sip,pods -o wide
before=$(ips)

echo; echo "== rolling web to localhost/staticip/testserver:v2 (maxUnavailable 2, pods recreated) =="
k patch ests web --type json -p '[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"localhost/staticip/testserver:v2"}]'
start=$(date +%s)
wait_for "the rollout" settled yes
wait_for "a Bound StaticIP per pod" bound "$replicas"
echo "rolled in $(($(date +%s) - start))s"
k get ests,sip,pods -o wide
after=$(ips)

echo; echo "== pod IP node, before and after the rolling update =="
echo "$before" | sed 's/^/v1: /'
echo "$after" | sed 's/^/v2: /'
if [ "$before" = "$after" ]; then
	echo "IPs kept: yes"
else
	echo "IPs kept: no"
	exit 1
fi
