# Scale by simulation (tools/scalebench): its own etcd + kube-apiserver on loopback, kwok faking
# SCALEBENCH_NODES nodes and their pods, each staticip component run alone as a process and
# measured (CPU seconds, peak RSS, API requests) next to the upstream component doing the same
# job. Never part of make test or .ci/run (bench/smoke_test.go runs it at 100 nodes).
#   make scale-bench SCALEBENCH_NODES=1000
#   make scale-bench SCALEBENCH_NODES=5000 SCALEBENCH_FLAGS="-scenarios=ippool,scheduler -pods-per-node=10"

SCALEBENCH_NODES ?= 1000
SCALEBENCH_FLAGS ?=

.PHONY: scale-bench

scale-bench: k8s-bins build ## simulated cluster (kwok): each component's CPU, memory and API requests at SCALEBENCH_NODES nodes
	$(ROOT)/tools/run.sh scalebench -nodes=$(SCALEBENCH_NODES) $(SCALEBENCH_FLAGS)
