# Upstream conformance (tools/conformance/README.md): Kubernetes' own e2e specs against a
# running cluster — the local cluster by default (make demo first), any cluster with
# KUBECONFIG (KIND_CLUSTER=name for kind's image loading).
# CONFORMANCE_FOCUS: a ginkgo focus regex, or `ci` for the subset make test runs.
CONFORMANCE_FOCUS ?=
CONFORMANCE_PROCS ?= 3

.PHONY: conformance conformance-prepare

conformance: k8s-bins ## upstream Conformance specs (sig-network, SchedulerPredicates, StatefulSet Basic) on the running cluster; JUnit in _output/conformance
	@CLUSTER_STATE_DIR=$(CLUSTER_STATE_DIR) CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' CONFORMANCE_PROCS=$(CONFORMANCE_PROCS) \
	  $(ROOT)/tools/conformance/run.sh

conformance-prepare: ## build e2e.test, agnhost, ginkgo (cached by k8s version) and the test images, no cluster needed
	@$(ROOT)/tools/conformance/run.sh prepare
