# Node failover benchmark (tools/failoverbench): on a running local cluster with a spare
# (`make up` has --spare-nodes=1 --failover-window=5s), N rounds of power-off + out-of-service
# taint of one worker running an EnhancedStatefulSet with static IPs and a native StatefulSet;
# times taint -> every static-IP pod Running on the spare with its old IP, and taint -> every
# native pod Running again (new IPs). Stops and boots a node: never part of make test.
#   make failover-bench
#   make failover-bench FAILOVER_BENCH_KUBECONFIG=/var/lib/staticip-c3/kubeconfig FAILOVER_BENCH_FLAGS=--rounds=3

FAILOVER_BENCH_KUBECONFIG ?= $(CLUSTER_KUBECONFIG)
FAILOVER_BENCH_FLAGS      ?= --rounds=5

.PHONY: failover-bench

failover-bench: ## time node failover (static IPs kept) against a native StatefulSet, same taint (running local cluster with a spare)
	$(ROOT)/tools/run.sh failoverbench --kubeconfig=$(FAILOVER_BENCH_KUBECONFIG) $(FAILOVER_BENCH_FLAGS)
