//go:build image

package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImageIndex reads what `make image` wrote (EVICTIOND_IMAGE_LAYOUT, EVICTIOND_IMAGE_TAR,
// set by make test-image): the OCI layout holds one index with linux/amd64 and linux/arm64,
// each image's /evictiond is an ELF binary of its platform's machine, the OCI labels name the
// source, version and revision, and the docker-archive is the index's image for this machine.
func TestImageIndex(t *testing.T) {
	dir, tarPath := os.Getenv("EVICTIOND_IMAGE_LAYOUT"), os.Getenv("EVICTIOND_IMAGE_TAR")
	if dir == "" || tarPath == "" {
		t.Fatal("EVICTIOND_IMAGE_LAYOUT and EVICTIOND_IMAGE_TAR are not set: run make test-image")
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("OCI layout %s: %v", dir, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil || len(topManifest.Manifests) != 1 {
		t.Fatalf("%s/index.json: %d entries (%v), want the one image index", dir, len(topManifest.Manifests), err)
	}
	idx, err := top.ImageIndex(topManifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	seen := map[string]bool{}
	var hostID v1.Hash
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Fatalf("index entry %s has no platform", desc.Digest)
		}
		arch := desc.Platform.Architecture
		seen[arch] = true
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != arch {
			t.Errorf("%s: config says %s/%s", desc.Platform, cfg.OS, cfg.Architecture)
		}
		for _, label := range []string{"org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.revision"} {
			if cfg.Config.Labels[label] == "" {
				t.Errorf("%s: label %s missing or empty (labels %v)", desc.Platform, label, cfg.Config.Labels)
			}
		}
		machine := binaryMachine(t, img, "evictiond")
		if machine != want[arch] {
			t.Errorf("%s: /evictiond is an ELF binary for %s, want %s", desc.Platform, machine, want[arch])
		}
		if arch == runtime.GOARCH {
			hostID, _ = img.ConfigName()
		}
	}
	for arch := range want {
		if !seen[arch] {
			t.Errorf("the index has no linux/%s image (platforms seen: %v)", arch, seen)
		}
	}
	tag, err := name.NewTag("evictiond.io/evictiond:dev")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatalf("docker-archive %s: %v", tarPath, err)
	}
	id, err := img.ConfigName()
	if err != nil || id != hostID {
		t.Errorf("docker-archive %s holds image %s (%v), want the index's linux/%s image %s", tarPath, id, err, runtime.GOARCH, hostID)
	}
}

// binaryMachine reads the ELF header of the image's file at path (no leading slash).
func binaryMachine(t *testing.T, img v1.Image, path string) elf.Machine {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Name != path {
				continue
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s in the image: not ELF: %v", path, err)
			}
			rc.Close()
			return f.Machine
		}
		rc.Close()
	}
	t.Fatalf("no %s in the image", path)
	return 0
}
