# staticip-scheduler (scheduler-plugins/) targets.
.PHONY: sched-test sched-bench sched-bench-full

sched-test: ## scheduler-plugins unit, config and integration tests (real kube-apiserver)
	$(GO) test -count=1 -p 1 ./scheduler-plugins/...

sched-bench: ## scheduler throughput, staticip plugins on vs off, small size (100 nodes / 300 pods)
	$(GO) test ./scheduler-plugins/test/integration -run '^$$' -bench SchedulingThroughput -benchtime 1x -timeout 60m

sched-bench-full: ## the same at issue 5's size: 5000 nodes / 10000 pods (about 5 minutes on 2 cores)
	$(GO) test ./scheduler-plugins/test/integration -run '^$$' -bench SchedulingThroughput -benchtime 1x -timeout 180m \
	  -args -sched-bench-nodes 5000 -sched-bench-pods 10000
