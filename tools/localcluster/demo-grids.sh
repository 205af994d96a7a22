#!/bin/sh
# The grid part of `make demo`: applies the published StatefulSetGrid + ServiceGrid and a
# DeploymentGrid (manifests/examples, images swapped for the local testserver, the
# DeploymentGrid keyed on the local nodes' "zone" label), waits until every unit's workload is
# ready and shows them. KUBECTL is the kubectl command line (binary and --kubeconfig).
set -eu
: "${KUBECTL:?set KUBECTL to the kubectl command line}"
k() { $KUBECTL "$@"; }
examples=$(dirname "$0")/../../manifests/examples
image=localhost/staticip/testserver:v1

# The published shapes, with the container swapped for the testserver (no registry here).
local_image() {
	sed -e "s#image: superedge/echoserver:2.2#image: $image\n            imagePullPolicy: Never\n            args: [serve, --listen=:8080]#" "$1"
}
local_image "$examples/servicegrid.yaml" | k apply -f -
local_image "$examples/statefulsetgrid.yaml" | k apply -f -
local_image "$examples/deploymentgrid.yaml" | sed 's/gridUniqKey: zone1/gridUniqKey: zone/' | k apply -f -

ready() { k get "$1" "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
for g in ssg/statefulsetgrid-demo dg/deploymentgrid-demo sg/servicegrid-demo; do
	i=0
	until [ "$(ready "${g%%/*}" "${g#*/}")" = "True" ]; do
		i=$((i + 1))
		if [ $i -gt 360 ]; then
			echo "timed out waiting for $g to be Ready" >&2
			k get ssg,dg,sg,sts,deploy,pods -o wide >&2
			exit 1
		fi
		sleep 0.5
	done
done
echo; echo "== grids: one workload per node unit (nodes' zone label), one Service with topologyKeys =="
k get ssg,dg,sg,sts,deploy -o wide
echo; echo "== their pods, each on a node of its unit =="
k get pods -l appGrid=echo -o wide
echo; echo "== Service servicegrid-demo-svc =="
k get service servicegrid-demo-svc -o jsonpath='{.metadata.name} clusterIP={.spec.clusterIP} topologyKeys={.metadata.annotations.topologyKeys}{"\n"}'
