# Local cluster (tools/localcluster): real Kubernetes as processes on this machine.
# `make demo` leaves a 3-node cluster running; `make down` removes it; `make e2e` brings
# one up, runs the e2e suite, always takes it down and checks nothing is left behind.

LOCALCLUSTER       := $(OUT)/cluster/localcluster
CLUSTER_NODES      ?= 3
CLUSTER_STATE_DIR  ?= /var/lib/staticip-localcluster
# One failover spare and a short failover window: the node-failover e2e tests
# (e2e/failover_controller_test.go) need both; ordinary tests leave the tainted spare out.
CLUSTER_SPARE_NODES     ?= 1
CLUSTER_FAILOVER_WINDOW ?= 5s
CLUSTER_FLAGS      ?= --nodes=$(CLUSTER_NODES) --spare-nodes=$(CLUSTER_SPARE_NODES) --failover-window=$(CLUSTER_FAILOVER_WINDOW) --state-dir=$(CLUSTER_STATE_DIR)
CLUSTER_KUBECONFIG := $(CLUSTER_STATE_DIR)/kubeconfig
KUBECTL            := $(BIN)/kubectl --kubeconfig=$(CLUSTER_KUBECONFIG)
E2E_FLAGS          ?= -count=1 -p 1 -timeout 30m -v

.PHONY: localcluster images up down status demo e2e e2e-suite e2e-lifecycle

localcluster: ## build the local cluster tool into _output/cluster
	@mkdir -p $(dir $(LOCALCLUSTER))
	@$(GO) build -C tools -o $(LOCALCLUSTER) ./localcluster

images: ## build container images (pause, testserver, coredns) into _output/images
	@$(ROOT)/tools/run.sh images --out $(OUT)/images --bin-dir $(BIN)

up: deps build localcluster ## bring the local cluster up (no-op when it already is)
	@$(LOCALCLUSTER) up $(CLUSTER_FLAGS)

down: localcluster ## remove the local cluster and everything it made
	@$(LOCALCLUSTER) down --state-dir=$(CLUSTER_STATE_DIR)

status: localcluster ## show the local cluster's daemons and nodes
	@$(LOCALCLUSTER) status --state-dir=$(CLUSTER_STATE_DIR)

demo: up ## local 3-node cluster + a demo workload and an EnhancedStatefulSet rolled v1 -> v2 keeping its IPs, left running (make down removes it)
	@$(KUBECTL) apply -f tools/localcluster/demo.yaml
	@$(KUBECTL) rollout status deployment/hello --timeout=120s
	@echo; echo "== pods =="; $(KUBECTL) get pods -o wide
	@ip=$$($(KUBECTL) get service hello -o jsonpath='{.spec.clusterIP}'); \
	  pod=$$($(KUBECTL) get pods -l app=hello -o jsonpath='{.items[0].metadata.name}'); \
	  echo; echo "== the Service from this host (routed into node-1, through kube-proxy) =="; \
	  for i in 1 2 3; do curl -s -m 5 http://$$ip/; done; \
	  echo; echo "== the Service by name, from a pod (CoreDNS + kube-proxy) =="; \
	  $(KUBECTL) exec $$pod -- /testserver get http://hello.default.svc.cluster.local/; \
	  podip=$$($(KUBECTL) get pod $$pod -o jsonpath='{.status.podIP}'); \
	  echo; echo "== the datacenter router (FRR): every node announces its IPRange over BGP =="; \
	  vtysh --vty_socket $(CLUSTER_STATE_DIR)/router --config_dir $(CLUSTER_STATE_DIR)/router -c 'show bgp ipv4 unicast' 2>/dev/null; \
	  $(KUBECTL) get bgppeers,bgpnodestatuses; \
	  echo; echo "== pod $$pod by its IP $$podip from the outside namespace (routed only by what FRR learned) =="; \
	  ip netns exec cluster-outside curl -s -m 5 http://$$podip:8080/; \
	  KUBECTL="$(KUBECTL)" tools/localcluster/demo-ests.sh || exit 1; \
	  KUBECTL="$(KUBECTL)" tools/localcluster/demo-grids.sh || exit 1; \
	  echo; echo "The cluster keeps running. Use it with:"; \
	  echo "  export KUBECONFIG=$(CLUSTER_KUBECONFIG)"; \
	  echo "  $(BIN)/kubectl get pods -o wide"; \
	  echo "  curl http://$$ip/        # Service hello; pod IPs answer on :8080 too"; \
	  echo "  vtysh --vty_socket $(CLUSTER_STATE_DIR)/router -c 'show bgp ipv4 unicast'   # the router's view"; \
	  echo "  $(BIN)/kubectl exec $$pod -- /testserver get http://hello/"; \
	  echo "  $(BIN)/kubectl get ests,sip,pods -o wide   # EnhancedStatefulSet web and its StaticIPs"; \
	  echo "  $(BIN)/kubectl get ssg,dg,sg,sts,deploy -o wide   # grids and their unit workloads"; \
	  echo "  make status; make down"; \
	  KUBECTL="$(KUBECTL)" tools/localcluster/demo-dns.sh

# e2e: up, suite, down — always down, also on failure — then the leftover check and the
# up/down lifecycle test (no-op up, up after kill -9, down leaves nothing).
# E2E_CONFORMANCE=1 (default): the upstream conformance CI subset (tools/conformance) runs on
# the same cluster after the suite; its binaries and images are built before the cluster is up.
E2E_CONFORMANCE ?= 1

e2e: deps build localcluster ## local cluster up, e2e suite, conformance CI subset, down, leftover check, lifecycle test
	@start=$$SECONDS; rc=0; \
	  conformance=$(E2E_CONFORMANCE); \
	  if [ $$conformance = 1 ]; then $(ROOT)/tools/conformance/run.sh prepare || { rc=1; conformance=0; }; fi; \
	  up=0; $(LOCALCLUSTER) up $(CLUSTER_FLAGS) || { up=1; rc=1; }; \
	  if [ $$up -eq 0 ]; then \
	    $(GO) -C e2e test -tags e2e $(E2E_FLAGS) ./... -args -kubeconfig=$(CLUSTER_KUBECONFIG) || rc=$$?; \
	    if [ $$conformance = 1 ]; then \
	      c=$$SECONDS; CLUSTER_STATE_DIR=$(CLUSTER_STATE_DIR) CONFORMANCE_FOCUS=ci $(ROOT)/tools/conformance/run.sh || rc=$$?; \
	      echo "e2e: conformance CI subset took $$((SECONDS - c))s"; \
	    fi; \
	  fi; \
	  $(LOCALCLUSTER) down --state-dir=$(CLUSTER_STATE_DIR) || rc=$$?; \
	  $(LOCALCLUSTER) leftovers --state-dir=$(CLUSTER_STATE_DIR) || rc=$$?; \
	  if [ $$rc -eq 0 ]; then \
	    $(GO) -C tools test -tags e2e $(E2E_FLAGS) -run TestLifecycle ./localcluster/cluster/ || rc=$$?; \
	    $(LOCALCLUSTER) down --state-dir=$(CLUSTER_STATE_DIR) >/dev/null || rc=$$?; \
	  fi; \
	  echo "e2e: done in $$((SECONDS - start))s (exit $$rc)"; exit $$rc
