# kind (tools/kind): staticip released (make release) into a registry on this machine and installed from it
# with README's commands (helm upgrade --install oci://...) into a kind cluster (1 control
# plane + 2 workers + a failover spare), the e2e suite against it. Where no Docker engine runs, tools/kind
# starts Debian's dockerd with its own config (no iptables, no docker0) and stops it again;
# where no node image can be pulled, it builds one offline (tools/kind/nodeimage.sh).
#   make kind-up        # no-op when the cluster is up
#   make e2e-kind       # cluster, upgrade from the previous release (its own make release, its README's
#                       # install) to the working tree's, README's five-minute workload, suite (a subset:
#                       # E2E_KIND_RUN), lifecycle test on that cluster, uninstall, down (always), leftover check
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

# The suite against the kind cluster (the two tests e2e-kind runs around it left out); prints how many tests ran, passed, skipped (and why).
# E2E_KIND_RUN picks the tests (go test -run): by default those whose outcome depends on how the
# cluster was made — kubeadm's control plane, the released chart pulled from a registry, kind's
# node image, kube-proxy and CoreDNS, the dual-stack network: the cluster's basics, the CNI and
# its routes, admission and the chart's RBAC, egress NAT, the scheduler replacement, the edge
# wrapper before kind's kube-proxy. The controllers' own scenarios (EnhancedStatefulSet, node
# failover and partition, BGP against FRR, the grids and StatefulSetGrid DNS, Prometheus, chaos) run on the
# local cluster in make e2e and are not repeated here (.ci/run's budget: tools/kind/README.md
# "Times"). E2E_KIND_RUN=. runs the whole suite on kind.
# E2E_KIND_CHAOS=1 E2E_KIND_RUN=. also runs TestNoDuplicateIPUnderChaos there (skipped on kind otherwise).
E2E_KIND_RUN ?= ^(TestNodesReady|TestPodsAnswerOnEveryNode|TestServiceAndDNS|TestLogsAndExec|TestCNI.*|TestDualStackStaticPod|TestIPAddressAdmission|TestPluginCredentialOnTheNode|TestEditUserManagesStaticIPWorkloads|TestPodsReachTheOutside|TestScheduler.*|TestGridWrapperTopology|TestIPWatcherDetectsViolations)$$
e2e-kind-suite:
	@mkdir -p $(OUT)
	@eval "export $$($(ROOT)/tools/kind/dockerd.sh env)"; rc=0; \
	  echo "e2e-kind: tests -run '$(E2E_KIND_RUN)' (E2E_KIND_RUN=. for the whole suite)"; \
	  $(GO) -C e2e test -tags e2e $(E2E_FLAGS) -run '$(E2E_KIND_RUN)' -skip '^(TestUpgradeFromRelease|TestUninstallRelease)$$' ./... -args -kubeconfig=$(KIND_KUBECONFIG) $(if $(filter 1,$(E2E_KIND_CHAOS)),-chaos-on-kind) 2>&1 | tee $(OUT)/e2e-kind.log || rc=$$?; \
	  $(ROOT)/tools/kind/summary.sh e2e-kind $(OUT)/e2e-kind.log; \
	  exit $$rc

# Standalone it makes its own cluster and removes it; make e2e-kind runs it on the suite's cluster
# (KIND_LIFECYCLE_ON_RUNNING_CLUSTER=1: the suite's cluster and install were the first up, which
# saves .ci/run a whole cluster creation and install, ~5 min), before its uninstall check and down.
e2e-kind-lifecycle: ## kind-up twice is a no-op, kind-down leaves nothing, kind-up after a killed dockerd recovers
	$(GO) -C tools test -tags e2e -count=1 -v -timeout 60m ./kind/lifecycle/

# The upgrade from the previous release (e2e/upgrade_release_test.go, RELEASING.md "Tested"),
# the first thing on e2e-kind's fresh cluster: UPGRADE_FROM_RELEASE released by its own
# `make release` (a git worktree of it, linux/amd64) as UPGRADE_FROM_RELEASE_VERSION into the
# cluster's registry and installed with its README's commands, an EnhancedStatefulSet with
# static IPs, then the working tree released and installed with this README's `helm upgrade
# --install` (kind.sh install: the install the suite then runs on); no pod, IP or StaticIP
# changed, every component on the new release's pulled digests. No release is tagged yet: the
# previous release is the newest commit of main whose `make release` works; once v0.1.0 is
# tagged, UPGRADE_FROM_RELEASE=v0.1.0 UPGRADE_FROM_RELEASE_VERSION=v0.1.0 (then the latest tag).
# Its version sorts before the working tree's <appVersion>-dev.<commit>, as a previous
# release's does. The clone must hold the commit (a shallow clone fails, saying so).
# E2E_KIND_UPGRADE=0: the plain install instead.
UPGRADE_FROM_RELEASE         ?= e2a675d
UPGRADE_FROM_RELEASE_VERSION ?= v0.1.0-alpha.0
E2E_KIND_UPGRADE             ?= 1

.PHONY: e2e-kind-install e2e-kind-uninstall e2e-kind-conformance

# Upstream specs on the kind cluster after the suite (tools/conformance): E2E_KIND_CONFORMANCE is a
# CONFORMANCE_FOCUS selection, e.g. dualstack (upstream's [Feature:IPv6DualStack] specs, which
# the dual-stack cluster's pools serve: tools/kind/README.md "Dual-stack"); empty (the default):
# none — it costs .ci/run ~6 min (tools/conformance/README.md, "Dual-stack").
E2E_KIND_CONFORMANCE ?=

e2e-kind-conformance:
	@eval "export $$($(ROOT)/tools/kind/dockerd.sh env)"; \
	  KIND_CLUSTER=$${KIND_CLUSTER:-staticip} KUBECONFIG=$(KIND_KUBECONFIG) CONFORMANCE_FOCUS='$(E2E_KIND_CONFORMANCE)' \
	  CONFORMANCE_OUT=$(OUT)/conformance-kind $(ROOT)/tools/conformance/run.sh

# e2e-kind-install installs the working tree on the cluster: through the upgrade from the
# previous release (TestUpgradeFromRelease) where the cluster has no staticip yet, else
# (make kind-up before, or E2E_KIND_UPGRADE=0) kind.sh install, saying why.
e2e-kind-install:
	@mkdir -p $(OUT)
	@eval "export $$($(ROOT)/tools/kind/dockerd.sh env)"; \
	  if [ "$(E2E_KIND_UPGRADE)" != 1 ]; then \
	    echo "e2e-kind: E2E_KIND_UPGRADE=$(E2E_KIND_UPGRADE): no upgrade from $(UPGRADE_FROM_RELEASE), the plain install" >&2; $(KIND_SH) install; \
	  elif $(KIND_SH) installed; then \
	    echo "e2e-kind: staticip is installed on the cluster already (make kind-up before): the upgrade from $(UPGRADE_FROM_RELEASE) needs a cluster without it and is not run (make kind-down first); installing the working tree over it" >&2; \
	    $(KIND_SH) install; \
	  else \
	    start=$$SECONDS; rc=0; \
	    $(GO) -C e2e test -tags e2e $(E2E_FLAGS) -run '^TestUpgradeFromRelease$$' . -args -kubeconfig=$(KIND_KUBECONFIG) \
	      -upgrade-from-release=$(UPGRADE_FROM_RELEASE) -upgrade-from-release-version=$(UPGRADE_FROM_RELEASE_VERSION) 2>&1 | tee $(OUT)/e2e-kind-upgrade.log || rc=$$?; \
	    echo "e2e-kind: upgrade from $(UPGRADE_FROM_RELEASE) ($(UPGRADE_FROM_RELEASE_VERSION)) done in $$((SECONDS - start))s (exit $$rc)"; exit $$rc; \
	  fi

# e2e-kind-uninstall: charts/staticip/README.md's uninstall of the released chart and the
# leftover check (TestUninstallRelease), after the suite.
e2e-kind-uninstall:
	@eval "export $$($(ROOT)/tools/kind/dockerd.sh env)"; start=$$SECONDS; rc=0; \
	  $(GO) -C e2e test -tags e2e $(E2E_FLAGS) -run '^TestUninstallRelease$$' . -args -kubeconfig=$(KIND_KUBECONFIG) -uninstall-release 2>&1 | tee $(OUT)/e2e-kind-uninstall.log || rc=$$?; \
	  echo "e2e-kind: uninstall and leftover check done in $$((SECONDS - start))s (exit $$rc)"; exit $$rc

e2e-kind: deps build helm registry ## kind up, upgrade from the previous release, e2e suite (kind subset), lifecycle test on that cluster, uninstall, down (always), leftover check
	@if [ "$(E2E_KIND_UPGRADE)" = 1 ] && ! git -C $(ROOT) cat-file -e '$(UPGRADE_FROM_RELEASE)^{commit}' 2>/dev/null; then \
	  echo "e2e-kind: commit $(UPGRADE_FROM_RELEASE) (UPGRADE_FROM_RELEASE) is not in this clone (shallow: $$(git -C $(ROOT) rev-parse --is-shallow-repository)):" \
	    "the upgrade e2e releases and installs that commit of main first; fetch the full history (git fetch --unshallow), set UPGRADE_FROM_RELEASE, or E2E_KIND_UPGRADE=0" >&2; exit 1; fi
	@start=$$SECONDS; rc=0; installed=0; \
	  $(KIND_SH) cluster || rc=$$?; \
	  if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory e2e-kind-install || rc=$$?; fi; \
	  if [ $$rc -eq 0 ]; then installed=1; $(KIND_SH) quickstart || rc=$$?; fi; \
	  if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory e2e-kind-suite || rc=$$?; fi; \
	  if [ $$rc -eq 0 ] && [ -n "$(E2E_KIND_CONFORMANCE)" ]; then $(MAKE) --no-print-directory e2e-kind-conformance || rc=$$?; fi; \
	  if [ $$rc -eq 0 ] && [ "$${E2E_KIND_LIFECYCLE:-1}" = 1 ]; then \
	    t=$$SECONDS; KIND_LIFECYCLE_ON_RUNNING_CLUSTER=1 $(MAKE) --no-print-directory e2e-kind-lifecycle || rc=$$?; \
	    echo "e2e-kind: lifecycle on the suite's cluster (up again, killed engine, up) done in $$((SECONDS - t))s"; fi; \
	  if [ $$installed -eq 1 ]; then $(MAKE) --no-print-directory e2e-kind-uninstall || rc=$$?; fi; \
	  $(KIND_SH) down || rc=$$?; \
	  $(KIND_SH) leftovers || rc=$$?; \
	  $(KIND_SH) down >/dev/null || { echo "e2e-kind: a second kind.sh down failed" >&2; rc=1; }; \
	  echo "e2e-kind: done in $$((SECONDS - start))s (exit $$rc)"; exit $$rc
