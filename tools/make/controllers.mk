# controllers: staticip-controller-manager (EnhancedStatefulSet + StaticIP controllers).

.PHONY: test-controllers test-controllers-planner

test-controllers-planner: ## planner table tests and the other controller unit tests (no cluster)
	$(GO) test -count=1 ./controllers/pkg/...

test-controllers: k8s-bins ## controller unit + integration tests on a real kube-apiserver (race)
	$(GO) test -race -count=1 -p 1 -timeout 20m ./controllers/...
