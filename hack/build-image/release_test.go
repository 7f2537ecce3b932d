//go:build image

package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"sigs.k8s.io/yaml"
)

// TestRelease reads back what `make release` wrote (make test-release): every artifact is in
// SHA256SUMS with its digest, and the binary, the image and the chart say the same version —
// the binary's `version`, the image's tag and label, the chart's appVersion — so the packaged
// chart installed as it is runs the image of the same release.
func TestRelease(t *testing.T) {
	dir, ver, rev, repo := os.Getenv("EVICTIOND_RELEASE_DIR"), os.Getenv("EVICTIOND_RELEASE_VERSION"),
		os.Getenv("EVICTIOND_RELEASE_REVISION"), os.Getenv("EVICTIOND_RELEASE_IMAGE_REPO")
	if dir == "" || ver == "" || repo == "" {
		t.Fatal("EVICTIOND_RELEASE_DIR, _VERSION and _IMAGE_REPO are not set: run make test-release")
	}
	chartVersion := strings.TrimPrefix(ver, "v")
	want := []string{
		"evictiond-" + ver + "-linux-amd64", "evictiond-" + ver + "-linux-arm64",
		"evictiond-image-" + ver + ".oci.tar", "evictiond-" + chartVersion + ".tgz",
	}
	sums := readSums(t, filepath.Join(dir, "SHA256SUMS"))
	for _, name := range want {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("release artifact: %v", err)
		}
		got := sha256.Sum256(data)
		if sums[name] != hex.EncodeToString(got[:]) {
			t.Errorf("SHA256SUMS: %s is %q, the file's digest is %x", name, sums[name], got)
		}
	}
	if len(sums) != len(want) {
		t.Errorf("SHA256SUMS lists %d files, want %d: %v", len(sums), len(want), sums)
	}

	// The binary of this machine says the release's version and commit.
	out, err := exec.Command(filepath.Join(dir, "evictiond-"+ver+"-linux-"+runtime.GOARCH), "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("evictiond version: %v", err)
	}
	var info struct{ Version, Revision string }
	if err := json.Unmarshal(out, &info); err != nil || info.Version != ver || info.Revision != rev {
		t.Errorf("evictiond version -o json = %s (%v); want version %s, revision %s", out, err, ver, rev)
	}

	// The image: tagged with the version, labelled with it.
	layoutDir := t.TempDir()
	untar(t, filepath.Join(dir, "evictiond-image-"+ver+".oci.tar"), layoutDir)
	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatalf("the .oci.tar is not an OCI layout: %v", err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	// One image (an index of the platforms); the platforms' SBOMs (artifacts whose subject is
	// their image, make image) sit beside it.
	var tagged []v1.Descriptor
	for _, d := range tm.Manifests {
		if d.ArtifactType == "" {
			tagged = append(tagged, d)
		}
	}
	if len(tagged) != 1 {
		t.Fatalf("index.json: %d images among %d entries, want one", len(tagged), len(tm.Manifests))
	}
	imageRef := tagged[0].Annotations["io.containerd.image.name"]
	if tagged[0].Annotations["org.opencontainers.image.ref.name"] != ver || imageRef != repo+":"+ver {
		t.Errorf("the layout's image is %q tag %q; want %s:%s", imageRef, tagged[0].Annotations["org.opencontainers.image.ref.name"], repo, ver)
	}
	idx, err := top.ImageIndex(tagged[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 2 {
		t.Fatalf("the image index has %d platforms (%v), want linux/amd64 and linux/arm64", len(im.Manifests), err)
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if l := cfg.Config.Labels; l["org.opencontainers.image.version"] != ver || l["org.opencontainers.image.revision"] != rev {
			t.Errorf("%s: labels %v; want version %s, revision %s", d.Platform, l, ver, rev)
		}
	}

	// The chart: its version is the release's without the v, and its default image is the
	// release's image.
	files := tgzFiles(t, filepath.Join(dir, "evictiond-"+chartVersion+".tgz"), "evictiond/Chart.yaml", "evictiond/values.yaml")
	var chart struct{ Version, AppVersion string }
	var values struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal(files["evictiond/Chart.yaml"], &chart); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(files["evictiond/values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if chart.Version != chartVersion || chart.AppVersion != ver {
		t.Errorf("Chart.yaml: version %q appVersion %q; want %s, %s", chart.Version, chart.AppVersion, chartVersion, ver)
	}
	if values.Image.Tag != "" || values.Image.Repository+":"+chart.AppVersion != imageRef {
		t.Errorf("the chart's default image is %s:%s (image.tag %q); the release's image is %s",
			values.Image.Repository, chart.AppVersion, values.Image.Tag, imageRef)
	}
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("%s: line %q is not sha256sum's \"DIGEST  NAME\"", path, sc.Text())
		}
		sums[name] = sum
	}
	return sums
}

func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(target, data, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func tgzFiles(t *testing.T, path string, names ...string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if hdr.Name == n {
				if out[n], err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, n := range names {
		if out[n] == nil {
			t.Fatalf("%s has no %s", path, n)
		}
	}
	return out
}
