package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
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
	a1, tar1 := build(spec("example.test/a:v1", "a"))
	a2, tar2 := build(spec("example.test/a:v1", "a"))
	b, _ := build(spec("example.test/b:v1", "b"))
	if a1.ID != a2.ID || !bytes.Equal(tar1, tar2) {
		t.Errorf("same spec gave IDs %s and %s (archives equal: %v)", a1.ID, a2.ID, bytes.Equal(tar1, tar2))
	}
	if a1.ID == b.ID {
		t.Errorf("different padding seeds gave the same ID %s", a1.ID)
	}
}

func TestArchiveHasDockerSaveLayout(t *testing.T) {
	var buf bytes.Buffer
	built, err := WriteDockerArchive(&buf, Spec{Ref: "example.test/x:v1", Files: []File{{Path: "/bin/x", Data: []byte("x")}, {Path: "/bin/y", Symlink: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[hdr.Name] = data
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || manifest[0].RepoTags[0] != "example.test/x:v1" || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest = %+v", manifest)
	}
	if "sha256:"+manifest[0].Config[:len(manifest[0].Config)-len(".json")] != built.ID {
		t.Errorf("config file %s does not match ID %s", manifest[0].Config, built.ID)
	}
	var cfg struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(files[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	layer := files[manifest[0].Layers[0]]
	names := map[string]byte{}
	ltr := tar.NewReader(bytes.NewReader(layer))
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
	if len(cfg.RootFS.DiffIDs) != 1 {
		t.Errorf("diff_ids = %v, want one", cfg.RootFS.DiffIDs)
	}
}

func TestRelativeFilePathIsRejected(t *testing.T) {
	_, err := WriteDockerArchive(io.Discard, Spec{Ref: "x:1", Files: []File{{Path: "bin/x"}}})
	if err == nil {
		t.Fatal("relative path accepted")
	}
}
