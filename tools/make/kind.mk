# kind (tools/kind): staticip released (make release) into a registry on this machine and installed from it
# with README's commands (helm upgrade --install oci://...) into a kind cluster (1 control
# plane + 2 workers + a failover spare), the e2e suite against it. Where no Docker engine runs, tools/kind
# starts Debian's dockerd with its own config (no iptables, no docker0) and stops it again;
# where no node image can be pulled, it builds one offline (tools/kind/nodeimage.sh).
#   make kind-up        # no-op when the cluster is up
#   make e2e-kind       # up, README's five-minute workload, suite, down (always), leftover check, lifecycle test
#   make kind-down      # cluster, network and our engine gone; the node image stays cached
# KIND_NODE_IMAGE=kindest/node:v1.36.x uses the stock image where Docker can pull it.

KIND_SH         := $(ROOT)/tools/kind/kind.sh
KIND_STATE_DIR  ?= /var/lib/staticip-kind
KIND_KUBECONFIG := $(KIND_STATE_DIR)/kubeconfig
export KIND_STATE_DIR

.PHONY: kind-up kind-down kind-leftovers kind-node-image e2e-kind e2e-kind-suite e2e-kind-lifecycle

kind-up: deps build helm registry ## kind cluster (offline node image where nothing can be pulled) with staticip installed with the chart
	@$(KIND_SH) up

kind-down: ## delete the kind cluster, its network and the Docker engine kind-up started
	@$(KIND_SH) down

kind-leftovers: ## fail when kind-down left anything (containers, bridge, mounts, processes, iptables rules)
	@$(KIND_SH) leftovers

kind-node-image: deps build ## build the offline kind node image (cached by content)
	@$(ROOT)/tools/kind/dockerd.sh up && eval "export $$($(ROOT)/tools/kind/dockerd.sh env)" && $(ROOT)/tools/kind/nodeimage.sh

# The suite against the kind cluster; prints how many tests ran, passed, skipped (and why).
# E2E_KIND_CHAOS=1 also runs TestNoDuplicateIPUnderChaos there (skipped on kind otherwise).
e2e-kind-suite:
	@mkdir -p $(OUT)
	@eval "export $$($(ROOT)/tools/kind/dockerd.sh env)"; rc=0; \
	  $(GO) -C e2e test -tags e2e $(E2E_FLAGS) ./... -args -kubeconfig=$(KIND_KUBECONFIG) $(if $(filter 1,$(E2E_KIND_CHAOS)),-chaos-on-kind) 2>&1 | tee $(OUT)/e2e-kind.log || rc=$$?; \
	  $(ROOT)/tools/kind/summary.sh e2e-kind $(OUT)/e2e-kind.log; \
	  exit $$rc

e2e-kind-lifecycle: ## kind-up twice is a no-op, kind-down leaves nothing, kind-up after a killed dockerd recovers
	$(GO) -C tools test -tags e2e -count=1 -v -timeout 60m ./kind/lifecycle/

e2e-kind: deps build helm registry ## kind up, e2e suite, down (always), leftover check, lifecycle test
	@start=$$SECONDS; rc=0; \
	  $(KIND_SH) up || rc=$$?; \
	  if [ $$rc -eq 0 ]; then $(KIND_SH) quickstart || rc=$$?; fi; \
	  if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory e2e-kind-suite || rc=$$?; fi; \
	  $(KIND_SH) down || rc=$$?; \
	  $(KIND_SH) leftovers || rc=$$?; \
	  if [ $$rc -eq 0 ] && [ "$${E2E_KIND_LIFECYCLE:-1}" = 1 ]; then $(MAKE) --no-print-directory e2e-kind-lifecycle || rc=$$?; fi; \
	  echo "e2e-kind: done in $$((SECONDS - start))s (exit $$rc)"; exit $$rc
