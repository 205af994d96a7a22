# Spiderpool v1.2.2, tools/podburst's third peer (tools/spiderpool/README.md): its binaries
# from the Go module proxy (tools/spiderpool, its own module) into _output/spiderpool/bin; the
# local cluster builds its images from them and installs its Helm chart (--cni=spiderpool).
#   make spiderpool helm
#   tools/run.sh localcluster up --cni=spiderpool ...

SPIDERPOOL_BIN := $(OUT)/spiderpool/bin

.PHONY: spiderpool

spiderpool: ## build Spiderpool's agent, controller, init, IPAM and coordinator plugins (a benchmark peer) into _output/spiderpool/bin
	@mkdir -p $(SPIDERPOOL_BIN)
	cd tools/spiderpool && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(SPIDERPOOL_BIN)/ tool ./coordinatorns
