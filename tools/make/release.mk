# Releases (RELEASING.md): images, chart, kubectl-staticip archives, checksums, krew manifest.
#   make release VERSION=v0.2.0 REGISTRY=ghcr.io/staticip
# RELEASE_PLATFORMS: the images' platforms (default linux/amd64 and linux/arm64);
# RELEASE_PLUGIN_PLATFORMS: kubectl-staticip's archives (linux, darwin, windows × amd64, arm64);
# KREW_BASE_URL: where the archives are downloaded from ({VERSION} replaced), for the krew
# manifest. A registry with a private CA: SSL_CERT_FILE=ca.crt make release ...
# The tool is a module of its own (tools/release/go.mod): go-containerregistry's registry
# client needs packages the product's go.mod does not carry.
RELEASE_PLATFORMS        ?= linux/amd64,linux/arm64
RELEASE_PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64,windows/arm64
KREW_BASE_URL            ?= https://github.com/staticip/staticip/releases/download/{VERSION}

.PHONY: release registry test-release

release: helm ## publish VERSION to REGISTRY: multi-arch images, the chart (OCI), kubectl-staticip archives, checksums, krew manifest (RELEASING.md)
	@if [ -z "$(VERSION)" ] || [ -z "$(REGISTRY)" ]; then echo "usage: make release VERSION=vX.Y.Z REGISTRY=host[:port][/path] (RELEASING.md)" >&2; exit 2; fi
	@cd tools/release && $(GO) build -o $(BIN)/release .
	@$(BIN)/release --version '$(VERSION)' --registry '$(REGISTRY)' --platforms '$(RELEASE_PLATFORMS)' \
	  --plugin-platforms '$(RELEASE_PLUGIN_PLATFORMS)' --krew-base-url '$(KREW_BASE_URL)' --helm $(HELM) --out $(OUT)/release

registry: ## build the OCI registry (distribution v3, tools/registry) into _output/bin/registry
	@$(ROOT)/tools/registry/registry.sh build

# The release's own test: the linux/arm64 agent image's nft layer from Debian's arm64 packages
# (tools/images/imagebuilder TestArm64AgentNFTLayer; make test runs it too: ~14 MB from
# deb.debian.org once, cached in _output/debian), here also run under qemu-user: Debian's
# qemu-user-static (~60 MB, once) is downloaded with the machine's apt into _output/debian/qemu
# and only qemu-aarch64-static extracted — nothing installed, no binfmt registration.
QEMU_DIR := $(OUT)/debian/qemu
test-release: ## the release's arm64 agent nft layer: aarch64 ELF closure, and nft --version under qemu-user (downloads qemu-user-static once)
	@if [ ! -x $(QEMU_DIR)/usr/bin/qemu-aarch64-static ]; then \
	  mkdir -p $(QEMU_DIR)/deb && cd $(QEMU_DIR)/deb && rm -f *.deb && apt-get -q download qemu-user-static && \
	  dpkg-deb --fsys-tarfile qemu-user-static_*.deb | tar -x -C $(QEMU_DIR) ./usr/bin/qemu-aarch64-static && rm -f *.deb; fi
	@cd tools && $(GO) test -count=1 -v -run 'TestArm64AgentNFTLayer|TestParse' ./images/imagebuilder
