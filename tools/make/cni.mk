# CNI area targets (staticip plugin, ipam).
.PHONY: cnibench test-cni

cnibench: deps ## benchmark staticip vs bridge+host-local and the ptp+static floor: ADD+DEL p50/p99 and 32-process throughput
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/staticip ./cni/cmd/staticip
	$(ROOT)/tools/run.sh cnibench -staticip $(BIN)/staticip

test-cni: deps ## ipam + CNI tests only (root: real network namespaces)
	$(GO) test -race -count=1 -p 1 ./ipam/... ./cni/...
