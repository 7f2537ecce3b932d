# Image tier: `make image` (Makefile) builds the OCI image index for IMAGE_PLATFORMS with
# go-containerregistry; the test reads it back: both platforms present, each /evictiond an
# ELF binary of its platform's machine, OCI labels set, the docker-archive the host's image.
.PHONY: test-image
TIERS += test-image

test-image: image
	EVICTIOND_IMAGE_LAYOUT=$(abspath $(IMAGE_LAYOUT)) EVICTIOND_IMAGE_TAR=$(abspath $(IMAGE_TAR)) \
		$(GO) test -tags image -count=1 -run '^TestImageIndex$$' ./hack/build-image
