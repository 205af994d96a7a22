# staticip-scheduler (scheduler-plugins/) targets. The benchmarks are not part of `make test`.
.PHONY: sched-test sched-bench sched-bench-full

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
