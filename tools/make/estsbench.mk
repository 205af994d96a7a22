# EnhancedStatefulSet rollout benchmark (tools/estsbench): 50 replicas rolled from testserver
# v1 to v2 as an EnhancedStatefulSet (maxUnavailable 10) and as a native StatefulSet, one
# after the other, on a running cluster whose staticip-controller-manager is running.
#   make ests-bench                                   # the default local cluster
#   make ests-bench ESTS_BENCH_KUBECONFIG=/var/lib/staticip-c3/kubeconfig ESTS_BENCH_FLAGS=--rounds=3

ESTS_BENCH_KUBECONFIG ?= /var/lib/staticip-localcluster/kubeconfig
ESTS_BENCH_FLAGS      ?= --rounds=2

.PHONY: ests-bench

ests-bench: ## time a 50-replica v1->v2 rollout: EnhancedStatefulSet vs native StatefulSet (running cluster + manager)
	$(GO) run ./tools/estsbench --kubeconfig=$(ESTS_BENCH_KUBECONFIG) $(ESTS_BENCH_FLAGS)
