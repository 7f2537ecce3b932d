# Image tier: `make image` (Makefile) builds the OCI image index for IMAGE_PLATFORMS with
# go-containerregistry; the test reads it back: both platforms present, each /evictiond an
# ELF binary of its platform's machine, OCI labels set, the docker-archive the host's image.
# Then the build again, into other files: both builds must give the same index digest and the
# same docker-archive (the binaries linked again, the packages from Go's build cache: what is
# checked is the link and the image's assembly — timestamps, file order, labels —, not the
# compiler run from nothing).
.PHONY: test-image
TIERS += test-image

test-image: image
	EVICTIOND_IMAGE_LAYOUT=$(abspath $(IMAGE_LAYOUT)) EVICTIOND_IMAGE_TAR=$(abspath $(IMAGE_TAR)) \
		$(GO) test -tags image -count=1 -run '^(TestImageIndex|TestImageSignsAndVerifies)$$' ./hack/build-image
	rm -f bin/linux_*/evictiond
	$(MAKE) --no-print-directory image IMAGE_LAYOUT=bin/evictiond-image-again.oci IMAGE_TAR=bin/evictiond-image-again.tar \
		IMAGE_VERSION="$(IMAGE_VERSION)" IMAGE_REVISION="$(IMAGE_REVISION)"
	@cmp $(IMAGE_LAYOUT)/index.json bin/evictiond-image-again.oci/index.json && cmp $(IMAGE_TAR) bin/evictiond-image-again.tar || \
		{ echo "two builds of the same commit gave different images: $$(cat $(IMAGE_LAYOUT)/index.json) vs $$(cat bin/evictiond-image-again.oci/index.json)"; exit 1; }
	@echo "reproducible: two builds, one index $$(grep -o 'sha256:[0-9a-f]*' $(IMAGE_LAYOUT)/index.json | head -1)"

# A release's signature of the index in IMAGE_LAYOUT, in cosign's format (hack/build-image
# sign.go): `make image-sign IMAGE_SIGNING_KEY=release.key` (PEM PKCS#8 ECDSA P-256), and
# anyone checks it offline with the public key: `make image-verify IMAGE_PUBLIC_KEY=release.pub`
# (docs/install.md).
.PHONY: image-sign image-verify
image-sign:
	$(GO) run ./hack/build-image sign -key "$(IMAGE_SIGNING_KEY)" -oci $(IMAGE_LAYOUT)
image-verify:
	$(GO) run ./hack/build-image verify -key "$(IMAGE_PUBLIC_KEY)" -oci $(IMAGE_LAYOUT)
