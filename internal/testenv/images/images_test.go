package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestArchivesAreReproducibleAndDistinct(t *testing.T) {
	spec := func(ref, seed string) Spec {
		return Spec{Ref: ref, Entrypoint: []string{"/app"},
			Files: []File{{Path: "/app", Data: []byte("#!/bin/true\n")}, Padding("/pad", 4096, seed)}}
	}
	build := func(s Spec) (Built, []byte) {
		t.Helper()
		var buf bytes.Buffer
		b, err := WriteDockerArchive(&buf, s)
		if err != nil {
			t.Fatal(err)
		}
		return b, buf.Bytes()
	}
	a1, tar1 := build(spec("example.test/app-a:v1", "a"))
	a2, tar2 := build(spec("example.test/app-a:v1", "a"))
	b, _ := build(spec("example.test/app-b:v1", "b"))
	if a1.ID != a2.ID || !bytes.Equal(tar1, tar2) {
		t.Errorf("same spec gave IDs %s and %s (archives equal: %v)", a1.ID, a2.ID, bytes.Equal(tar1, tar2))
	}
	if a1.ID == b.ID {
		t.Errorf("different padding seeds gave the same ID %s", a1.ID)
	}
}

// TestArchiveReadsBackAsTheImage reads the docker-archive back with go-containerregistry:
// one image tagged with the spec's reference, whose config digest is the ID returned, for the
// host's platform, with the command, labels and user, and one layer holding the files, their
// parent directories and the symlinks.
func TestArchiveReadsBackAsTheImage(t *testing.T) {
	var buf bytes.Buffer
	spec := Spec{Ref: "example.test/app:v1", Entrypoint: []string{"/bin/x"}, User: "65532:65532",
		Labels: map[string]string{"org.opencontainers.image.source": "https://example.test/x"},
		Files:  []File{{Path: "/bin/x", Data: []byte("x")}, {Path: "/bin/y", Symlink: "x"}}}
	built, err := WriteDockerArchive(&buf, spec)
	if err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	tag, err := name.NewTag(spec.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, &tag)
	if err != nil {
		t.Fatalf("reading the archive back as %s: %v", spec.Ref, err)
	}
	id, err := img.ConfigName()
	if err != nil || id.String() != built.ID {
		t.Errorf("config digest %v (%v), want the returned ID %s", id, err, built.ID)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if cfg.Config.User != spec.User || cfg.Config.Labels["org.opencontainers.image.source"] != "https://example.test/x" ||
		len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/bin/x" {
		t.Errorf("config %+v does not carry the spec's user, labels and entrypoint", cfg.Config)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	names := map[string]byte{}
	ltr := tar.NewReader(rc)
	for {
		hdr, err := ltr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[hdr.Name] = hdr.Typeflag
	}
	for name, typ := range map[string]byte{"bin/": tar.TypeDir, "bin/x": tar.TypeReg, "bin/y": tar.TypeSymlink} {
		if names[name] != typ {
			t.Errorf("layer entry %s type = %q, want %q (entries %v)", name, names[name], typ, names)
		}
	}
}

func TestRelativeFilePathIsRejected(t *testing.T) {
	_, err := WriteDockerArchive(io.Discard, Spec{Ref: "example.test/app:v1", Files: []File{{Path: "bin/x"}}})
	if err == nil || !strings.Contains(err.Error(), `file path "bin/x": must be absolute`) {
		t.Fatalf("relative path: error %v, want one naming the path and the rule", err)
	}
}
