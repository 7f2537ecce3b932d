# evictiond — build, test, lint, bench.
# Each test tier that needs real components lives in mk/<tier>.mk and adds itself to
# DEPS (what must be installed or built first) and TIERS (the test targets to run).
GO       ?= go
BIN      := bin/evictiond
PKGS     := ./...
DEPS     :=
TIERS    :=
FUZZTIME ?= 10s
# staticcheck, built from the Go module proxy at a pinned version (cached by the Go build cache).
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build image test test-unit test-fuzz deps lint bench demo demo-simulate clean

all: build

# VERSION and REVISION are stamped into every binary (`evictiond version`, the
# evictiond_build_info metric, the start-up log line) and the image's labels; hack/version.sh
# says how VERSION comes from git.
VERSION  ?= $(shell ./hack/version.sh)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -s -w -X github.com/evictiond/evictiond/internal/version.version=$(VERSION) \
	-X github.com/evictiond/evictiond/internal/version.revision=$(REVISION)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LDFLAGS)' -o $(BIN) ./cmd/evictiond

# make image: the container image for every platform of IMAGE_PLATFORMS, built without a
# Docker engine with go-containerregistry (same content as the Dockerfile's final stage): an
# OCI image index in the OCI layout IMAGE_LAYOUT (push: crane push $(IMAGE_LAYOUT) REF) with
# each platform's SBOM as a referrer, and
# this machine's platform as the docker-archive IMAGE_TAR the e2e tier imports. Prints the
# index digest. mk/image.mk checks each platform's binary (make test-image). The tag is the
# chart's appVersion (dev in the tree), so `helm install charts/evictiond` runs this image;
# `make release` tags it $(VERSION) and packages the chart with appVersion $(VERSION).
IMAGE           ?= evictiond.io/evictiond:dev
IMAGE_TAR       ?= bin/evictiond-image.tar
IMAGE_LAYOUT    ?= bin/evictiond-image.oci
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
# Each platform's SBOM (CycloneDX JSON, the modules linked into its binary, read back from
# the binary's build information), attached to its image as an OCI referrer.
CYCLONEDX_GOMOD ?= $(GO) run github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
image: build
	@for p in $(IMAGE_PLATFORMS); do \
		echo "building bin/$${p%/*}_$${p#*/}/evictiond"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags='$(LDFLAGS)' -o bin/$${p%/*}_$${p#*/}/evictiond ./cmd/evictiond || exit 1; \
		$(CYCLONEDX_GOMOD) bin -json -noserial -notimestamp -version "$(VERSION)" \
			-output bin/$${p%/*}_$${p#*/}/evictiond.cdx.json bin/$${p%/*}_$${p#*/}/evictiond || exit 1; \
	done
	$(GO) run ./hack/build-image -sbom $(foreach p,$(IMAGE_PLATFORMS),-platform $(p)=bin/$(subst /,_,$(p))/evictiond) \
		-ref $(IMAGE) -version $(VERSION) -revision "$(REVISION)" -oci $(IMAGE_LAYOUT) -o "$(IMAGE_TAR)"

-include mk/*.mk

# make test: every tier, on a fresh machine (installs what it needs first).
test: deps test-unit $(TIERS) test-fuzz

deps: $(DEPS)

test-unit:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 $(PKGS)

# Fuzz targets, each for a bounded time.
test-fuzz:
	GO=$(GO) hack/fuzz.sh ./internal/policy FuzzParseThresholds $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/policy FuzzDecodeConfig $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/simulate FuzzDecodeScenario $(FUZZTIME)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GO) vet -tags integration $(PKGS)
	$(GO) vet -tags e2e $(PKGS)
	$(STATICCHECK) -tags integration,e2e,cgroup2,bench_ramp,bench_loop,bench_footprint,demo,nodev2,bench_node $(PKGS)
	$(GO) vet -tags 'integration cgroup2' $(PKGS)
	$(GO) vet -tags "nodev2 bench_node" $(PKGS)

bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

# make demo: boot a local one-node cluster, deploy evictiond, play one memory
# pressure episode and narrate it, clean up (mk/e2e.mk, demo-cluster).
demo: demo-cluster

# make demo-simulate: the same decision path on a shipped scenario, no cluster.
demo-simulate: build
	./$(BIN) simulate -f examples/memory-pressure.yaml -o text

clean:
	rm -rf bin
