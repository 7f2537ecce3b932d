//go:build image

package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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
	if err != nil {
		t.Fatal(err)
	}
	var indexes, artifacts []v1.Descriptor
	for _, d := range topManifest.Manifests {
		if d.MediaType.IsIndex() {
			indexes = append(indexes, d)
		} else {
			artifacts = append(artifacts, d)
		}
	}
	if len(indexes) != 1 {
		t.Fatalf("%s/index.json: %d image indexes, want one", dir, len(indexes))
	}
	idx, err := top.ImageIndex(indexes[0].Digest)
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
		checkSBOM(t, top, artifacts, desc)
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

// checkSBOM finds the layout's artifact whose subject is the platform image img and checks
// it holds a CycloneDX SBOM of evictiond's module that lists client-go at go.mod's version.
func checkSBOM(t *testing.T, top v1.ImageIndex, artifacts []v1.Descriptor, img v1.Descriptor) {
	t.Helper()
	for _, d := range artifacts {
		art, err := top.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := art.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == nil || m.Subject.Digest != img.Digest {
			continue
		}
		if m.Config.MediaType != SBOMMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != SBOMMediaType {
			t.Errorf("%s: the SBOM artifact %s has config %s and layers %v, want %s", img.Platform, d.Digest, m.Config.MediaType, m.Layers, SBOMMediaType)
			return
		}
		layers, _ := art.Layers()
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		var bom struct {
			BOMFormat string `json:"bomFormat"`
			Metadata  struct {
				Component struct{ Name string } `json:"component"`
			} `json:"metadata"`
			Components []struct{ Name, Version string } `json:"components"`
		}
		if err := json.NewDecoder(rc).Decode(&bom); err != nil {
			t.Fatalf("%s: the SBOM is not JSON: %v", img.Platform, err)
		}
		if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "github.com/evictiond/evictiond" {
			t.Errorf("%s: SBOM format %q of %q, want CycloneDX of github.com/evictiond/evictiond", img.Platform, bom.BOMFormat, bom.Metadata.Component.Name)
		}
		want := moduleVersion(t, "k8s.io/client-go")
		for _, c := range bom.Components {
			if c.Name == "k8s.io/client-go" {
				if c.Version != want {
					t.Errorf("%s: SBOM lists k8s.io/client-go %s, go.mod %s", img.Platform, c.Version, want)
				}
				return
			}
		}
		t.Errorf("%s: the SBOM lists no k8s.io/client-go (%d components)", img.Platform, len(bom.Components))
		return
	}
	t.Errorf("%s: no SBOM artifact in the layout has the image %s as its subject", img.Platform, img.Digest)
}

// moduleVersion is mod's version in the repository's go.mod.
func moduleVersion(t *testing.T, mod string) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == mod {
			return f[1]
		}
	}
	t.Fatalf("go.mod does not require %s", mod)
	return ""
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

// TestImageSignsAndVerifies signs a copy of what `make image` wrote with a new key and
// verifies it with the public key, as a release does (make image-sign, image-verify).
func TestImageSignsAndVerifies(t *testing.T) {
	dir := os.Getenv("EVICTIOND_IMAGE_LAYOUT")
	if dir == "" {
		t.Fatal("EVICTIOND_IMAGE_LAYOUT is not set: run make test-image")
	}
	tmp := t.TempDir()
	oci := filepath.Join(tmp, "layout")
	if err := os.CopyFS(oci, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	priv, pub := writeKeyPair(t, tmp, "release")
	if err := signLayout(oci, priv, "evictiond.io/evictiond"); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayout(oci, pub, "evictiond.io/evictiond"); err != nil {
		t.Fatal(err)
	}
}
