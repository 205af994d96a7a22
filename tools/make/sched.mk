# staticip-scheduler (scheduler-plugins/) targets. The benchmarks are not part of `make test`.
.PHONY: sched-test sched-bench sched-bench-full sched-bench-pools

sched-test: ## scheduler-plugins unit, config and integration tests (real kube-apiserver)
	$(GO) test -count=1 -p 1 ./scheduler-plugins/...

SCHED_BENCH_ORDER ?= alternate
# Equal work only: rounds of SCHED_BENCH_ORDER in one process after a discarded warm-up round;
# the test log's SUMMARY line gives the median of the per-round on/off ratios.
SCHED_BENCH_ROUNDS ?= 6
SCHED_BENCH_WARMUP ?= true
sched-bench: ## plugins on vs off: equal-work throughput (300 nodes / 1000 pods) and the stressed backlog (100 nodes / 500 pods); SCHED_BENCH_ORDER=off,on|on,off for one fixed order (default alternate: each mode first in half the rounds)
	$(GO) test ./scheduler-plugins/test/integration -run '^$$' -bench 'SchedulingThroughput|StressedBacklog' -benchtime 1x -timeout 60m \
	  -args -sched-bench-nodes 300 -sched-bench-pods 1000 -sched-stress-nodes 100 -sched-stress-backlog 500 -sched-bench-order $(SCHED_BENCH_ORDER) \
	  -sched-bench-rounds $(SCHED_BENCH_ROUNDS) -sched-bench-warmup=$(SCHED_BENCH_WARMUP)

sched-bench-full: ## the equal-work case at issue 5's size: 5000 nodes / 10000 pods (several minutes on 2 cores)
	$(GO) test ./scheduler-plugins/test/integration -run '^$$' -bench SchedulingThroughput -benchtime 1x -timeout 180m \
	  -args -sched-bench-nodes 5000 -sched-bench-pods 10000 -sched-bench-order $(SCHED_BENCH_ORDER)

SCHED_BENCH_POOL_NODES ?= 1000
SCHED_BENCH_POOL_PODS ?= 5000
SCHED_BENCH_ROUNDS_POOLS ?= 3
sched-bench-pools: ## issue 39: the same pods in four namespaces, one pool vs four namespace pools (1000 nodes / 5000 pods, 3 alternating rounds after a warm-up; POOLS SUMMARY line)
	$(GO) test ./scheduler-plugins/test/integration -run '^$$' -bench SchedulingPools -benchtime 1x -timeout 90m \
	  -args -sched-bench-nodes $(SCHED_BENCH_POOL_NODES) -sched-bench-pods $(SCHED_BENCH_POOL_PODS) -sched-bench-pool-rounds $(SCHED_BENCH_ROUNDS_POOLS) -sched-bench-warmup
