# Helm chart (charts/staticip). helm itself is built from the Go module proxy (tools/helm,
# its own module; tools/helm.sh skips the build when _output/bin/helm is up to date).
#   make helm          # _output/bin/helm
#   make chart-lint    # helm lint --strict charts/staticip (part of make verify)
#   make test-chart    # the chart/manifests comparison and the monitoring test
HELM := $(BIN)/helm

.PHONY: helm chart-lint test-chart

helm: ## build helm (helm.sh/helm/v3, pinned in tools/helm/go.mod) from the module proxy into _output/bin/helm
	@$(ROOT)/tools/helm.sh

chart-lint: helm ## helm lint --strict charts/staticip (default values and every alternative the tests render; the release namespace is kube-system: the chart refuses others)
	@$(HELM) lint --strict -n kube-system $(ROOT)/charts/staticip
	@$(HELM) lint --strict -n kube-system $(ROOT)/charts/staticip -f $(ROOT)/charts/testdata/knobs.yaml
	@$(HELM) lint --strict -n kube-system $(ROOT)/charts/staticip --set scheduler.mode=second-scheduler,edge.enabled=true,metrics.podMonitor.enabled=true,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true

test-chart: helm k8s-bins ## the chart renders what manifests/ renders (charts/), its monitoring objects decode and name real metrics (tools/helm)
	$(GO) test -count=1 ./charts/...
	cd tools/helm && $(GO) test -count=1 ./...

# The upgrade e2e (e2e/upgrade_test.go) on its own local cluster: up, the pinned commit's
# kustomize install with its own binaries (built from a git worktree of it, imaged as
# localhost/staticip/<binary>:$(UPGRADE_FROM)), an EnhancedStatefulSet, helm upgrade --install
# adopting the install and rolling the agent and controller-manager to the working tree's
# images, no pod/IP/StaticIP changed, uninstall.sh --delete-crds, leftover check; down.
# The clone must hold UPGRADE_FROM (a shallow clone fails, saying so).
# It uninstalls staticip, so it never runs inside the main suite (-upgrade is off there).
UPGRADE_FROM ?= ae99143

.PHONY: e2e-upgrade
e2e-upgrade: deps build localcluster helm ## local cluster up, kustomize install (commit UPGRADE_FROM) -> helm upgrade, no pod moved, uninstall, leftover check, down
	@if ! git -C $(ROOT) cat-file -e '$(UPGRADE_FROM)^{commit}' 2>/dev/null; then \
	  echo "e2e-upgrade: commit $(UPGRADE_FROM) (UPGRADE_FROM) is not in this clone (shallow: $$(git -C $(ROOT) rev-parse --is-shallow-repository)):" \
	    "the test installs that commit of main; fetch the full history (git fetch --unshallow) or set UPGRADE_FROM" >&2; exit 1; fi
	@start=$$SECONDS; rc=0; \
	  $(LOCALCLUSTER) up $(CLUSTER_FLAGS) || rc=$$?; \
	  if [ $$rc -eq 0 ]; then \
	    $(GO) -C e2e test -tags e2e $(E2E_FLAGS) -run TestUpgradeFromKustomizeInstallToChart . -args -kubeconfig=$(CLUSTER_KUBECONFIG) -upgrade -upgrade-from=$(UPGRADE_FROM) || rc=$$?; \
	  fi; \
	  $(LOCALCLUSTER) down --state-dir=$(CLUSTER_STATE_DIR) || rc=$$?; \
	  $(LOCALCLUSTER) leftovers --state-dir=$(CLUSTER_STATE_DIR) || rc=$$?; \
	  echo "e2e-upgrade: done in $$((SECONDS - start))s (exit $$rc)"; exit $$rc
