# EnhancedStatefulSet rollout benchmark (tools/estsbench): 50 replicas rolled from testserver
# v1 to v2 as an EnhancedStatefulSet (maxUnavailable 10) and as a native StatefulSet, one
# after the other, on a running cluster whose staticip-controller-manager is running.
#   make ests-bench                                   # the default local cluster
#   make ests-bench ESTS_BENCH_KUBECONFIG=/var/lib/staticip-c3/kubeconfig ESTS_BENCH_FLAGS=--rounds=3
# The manager as a host process, scheduled like kube-controller-manager (tools/estsbench/README.md):
#   make ests-bench ESTS_BENCH_FLAGS="--rounds=3 --manager-on-host=_output/bin/staticip-controller-manager"
# The OpenKruise peer (workloads kruise, kruise-inplace; tools/estsbench/README.md):
#   make kruise-asts                                  # builds _output/bin/kruise-asts (tools/kruise, its own module)
#   make kruise-crd ESTS_BENCH_KUBECONFIG=...         # installs the Advanced StatefulSet CRD
#   _output/bin/kruise-asts --kubeconfig=... &        # its controller alone, no webhook

ESTS_BENCH_KUBECONFIG ?= /var/lib/staticip-localcluster/kubeconfig
ESTS_BENCH_FLAGS      ?= --rounds=2

.PHONY: ests-bench kruise-asts kruise-crd

ests-bench: ## time a 50-replica v1->v2 rollout: EnhancedStatefulSet vs native StatefulSet (running cluster + manager)
	$(ROOT)/tools/run.sh estsbench --kubeconfig=$(ESTS_BENCH_KUBECONFIG) $(ESTS_BENCH_FLAGS)

kruise-asts: ## build OpenKruise's Advanced StatefulSet controller alone (estsbench's third peer) into _output/bin
	cd tools/kruise && $(GO) build -o $(abspath $(BIN))/kruise-asts .

kruise-crd: ## install OpenKruise's Advanced StatefulSet CRD (from the module cache) on ESTS_BENCH_KUBECONFIG's cluster
	$(BIN)/kubectl --kubeconfig=$(ESTS_BENCH_KUBECONFIG) apply --server-side -f \
	  "$$(cd tools/kruise && $(GO) list -m -f '{{.Dir}}' github.com/openkruise/kruise)/config/crd/bases/apps.kruise.io_statefulsets.yaml"
