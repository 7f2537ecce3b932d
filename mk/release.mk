# Release tier. `make release` writes the versioned artifacts of this commit to RELEASE_DIR
# (bin/release/$(VERSION), VERSION from hack/version.sh: tag v1.2.3 first, then run it):
#   evictiond-$(VERSION)-linux-{amd64,arm64}   the static binaries (evictiond observe on a node)
#   evictiond-image-$(VERSION).oci.tar         the multi-arch image: an OCI image layout (index
#                                               of linux/amd64 and linux/arm64) tagged $(VERSION),
#                                               as a tar (skopeo's oci-archive:); docs/install.md
#                                               says how to push it to a registry
#   evictiond-$(VERSION:v%=%).tgz               the chart (helm package), appVersion $(VERSION):
#                                               its default image is $(RELEASE_IMAGE_REPO):$(VERSION)
#   SHA256SUMS                                  sha256sum -c SHA256SUMS
# make test-release builds a release into a temporary directory and reads it back.
RELEASE_DIR        ?= bin/release/$(VERSION)
RELEASE_IMAGE_REPO ?= evictiond.io/evictiond

TIERS += test-release
.PHONY: release test-release

release: helm
	@case "$(VERSION)" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "VERSION $(VERSION): want vMAJOR.MINOR.PATCH[-PRERELEASE] (hack/version.sh)"; exit 1;; esac
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	$(MAKE) --no-print-directory image VERSION=$(VERSION) REVISION=$(REVISION) IMAGE=$(RELEASE_IMAGE_REPO):$(VERSION) \
		IMAGE_LAYOUT=$(RELEASE_DIR)/oci IMAGE_TAR=
	for p in $(IMAGE_PLATFORMS); do cp bin/$${p%/*}_$${p#*/}/evictiond $(RELEASE_DIR)/evictiond-$(VERSION)-$${p%/*}-$${p#*/} || exit 1; done
	tar -C $(RELEASE_DIR)/oci --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
		-cf $(RELEASE_DIR)/evictiond-image-$(VERSION).oci.tar . && rm -rf $(RELEASE_DIR)/oci
	$(HELM) package $(CHART) --version $(VERSION:v%=%) --app-version $(VERSION) -d $(RELEASE_DIR)
	cd $(RELEASE_DIR) && sha256sum evictiond-* > SHA256SUMS && cat SHA256SUMS

test-release:
	rm -rf bin/release-test
	$(MAKE) --no-print-directory release RELEASE_DIR=bin/release-test
	EVICTIOND_RELEASE_DIR=$(abspath bin/release-test) EVICTIOND_RELEASE_VERSION=$(VERSION) EVICTIOND_RELEASE_REVISION=$(REVISION) \
		EVICTIOND_RELEASE_IMAGE_REPO=$(RELEASE_IMAGE_REPO) $(GO) test -tags image -count=1 -run '^TestRelease$$' ./hack/build-image
