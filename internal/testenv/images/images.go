// Package images builds small container images locally, with no registry and no Docker engine,
// with go-containerregistry, and imports them into a containerd. An image is an OCI image of
// one layer, written as a docker-archive tar (the format `docker save` writes) and imported
// with `ctr images import`; hack/build-image makes evictiond's multi-platform index from the
// same Image.
//
// Typical use in a test:
//
//	img := images.Busybox("example.test/app:v1", "/bin/sh", "-c", "exit 0")
//	img.Files = append(img.Files, images.Padding("/pad", 8<<20, "app"))
//	id, err := images.Import(ctx, ctrdSocket, "k8s.io", img)
//
// Images are deterministic: the same Spec always gives the same image ID, and specs that differ
// in any file, the command or the reference-independent config give different IDs.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/evictiond/evictiond/internal/testenv/ctrdbin"
)

// BusyboxPath is where Debian's busybox-static installs its static binary.
const BusyboxPath = "/bin/busybox"

// PauseRef is the sandbox image tag containerd 2.2 asks for (its default
// pinned_images.sandbox); the testenv configures it explicitly too.
const PauseRef = "registry.k8s.io/pause:3.10.1"

// epoch is the fixed modification and creation time of every file and image, which keeps
// image IDs reproducible.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one entry of the image's single layer.
type File struct {
	// Path is absolute inside the image, e.g. "/bin/busybox". Parent directories are added.
	Path string
	// Mode holds the permission bits; 0 means 0o755 for files with Data, 0o644 otherwise.
	Mode int64
	// Data is the file's content.
	Data []byte
	// Symlink, when set, makes the entry a symbolic link to this target instead of a file.
	Symlink string
}

// Spec describes one image.
type Spec struct {
	// Ref is the image reference it is tagged with, e.g. "example.test/app:v1".
	Ref string
	// Files make up the image's one layer.
	Files []File
	// Entrypoint and Cmd are the image config's.
	Entrypoint []string
	Cmd        []string
	// Env is the image config's environment; PATH is added when absent.
	Env []string
	// Labels are the image config's labels (e.g. org.opencontainers.image.source).
	Labels map[string]string
	// User is the image config's user ("uid[:gid]"); empty means root.
	User string
	// Compress gzips the layer (for an image pushed to a registry); test images stay
	// uncompressed, as fast to write and import as a docker save.
	Compress bool
}

// Busybox returns a spec holding the host's static busybox (package busybox-static) with
// /bin/sh and /bin/sleep linked to it, running entrypoint.
func Busybox(ref string, entrypoint ...string) (Spec, error) {
	data, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return Spec{}, fmt.Errorf("reading %s (install Debian package busybox-static): %w", BusyboxPath, err)
	}
	return Spec{
		Ref: ref,
		Files: []File{
			{Path: BusyboxPath, Data: data, Mode: 0o755},
			{Path: "/bin/sh", Symlink: "busybox"},
			{Path: "/bin/sleep", Symlink: "busybox"},
			{Path: "/bin/true", Symlink: "busybox"},
			{Path: "/tmp/.keep", Data: nil, Mode: 0o644},
		},
		Entrypoint: entrypoint,
	}, nil
}

// Pause returns a busybox spec under PauseRef whose entrypoint blocks forever: what a pod
// sandbox needs.
func Pause() (Spec, error) {
	return Busybox(PauseRef, "/bin/sleep", "2147483647")
}

// Padding returns a file of size pseudo-random bytes seeded by seed: incompressible, so an
// image carrying it occupies about size bytes in the content store and again in a snapshot,
// and different seeds give different images.
func Padding(filePath string, size int64, seed string) File {
	sum := sha256.Sum256([]byte(seed))
	var key [32]byte
	copy(key[:], sum[:])
	rng := rand.NewChaCha8(key)
	data := make([]byte, size)
	_, _ = rng.Read(data)
	return File{Path: filePath, Data: data, Mode: 0o644}
}

// Built is a written archive.
type Built struct {
	// ID is the image ID containerd reports: the config digest, "sha256:<hex>".
	ID string
	// Ref is the reference the archive tags the image with.
	Ref string
}

// Image builds spec as an OCI image for the platform (one layer, the config with
// spec's command, environment, labels and user) with go-containerregistry. The same spec
// and platform always give the same image: every time in it is fixed.
func Image(spec Spec, platform v1.Platform) (v1.Image, error) {
	layer, err := layerTar(spec.Files)
	if err != nil {
		return nil, fmt.Errorf("image %s: building layer: %w", spec.Ref, err)
	}
	// Test images stay uncompressed (a 200 MiB padding file is not gzipped twice per import);
	// a shipped image is gzipped.
	l := static.NewLayer(layer, types.OCIUncompressedLayer)
	if spec.Compress {
		if l, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil },
			tarball.WithMediaType(types.OCILayer)); err != nil {
			return nil, fmt.Errorf("image %s: layer: %w", spec.Ref, err)
		}
	}
	img, err := mutate.Append(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON),
		mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "evictiond internal/testenv/images"}})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cfg = cfg.DeepCopy()
	env := spec.Env
	if !hasPath(env) {
		env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	}
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.Env = spec.Entrypoint, spec.Cmd, env
	cfg.Config.Labels, cfg.Config.User = spec.Labels, spec.User
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", spec.Ref, err)
	}
	return img, nil
}

// HostPlatform is linux on this machine's architecture: what a local containerd runs.
func HostPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// WriteDockerArchive writes spec, for the host's platform, as a docker-archive tar to w
// (go-containerregistry's tarball format, which `ctr images import` and `docker load` read).
func WriteDockerArchive(w io.Writer, spec Spec) (Built, error) {
	if spec.Ref == "" {
		return Built{}, fmt.Errorf("image spec: Ref is empty")
	}
	img, err := Image(spec, HostPlatform())
	if err != nil {
		return Built{}, err
	}
	return WriteImageArchive(w, spec.Ref, img)
}

// WriteImageArchive writes img tagged ref as a docker-archive tar to w.
func WriteImageArchive(w io.Writer, ref string, img v1.Image) (Built, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return Built{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return Built{}, fmt.Errorf("image %s: %w", ref, err)
	}
	if err := tarball.Write(tag, img, w); err != nil {
		return Built{}, fmt.Errorf("image %s: writing archive: %w", ref, err)
	}
	return Built{ID: id.String(), Ref: ref}, nil
}

// WriteDockerArchiveFile writes spec as a docker-archive tar at filePath.
func WriteDockerArchiveFile(filePath string, spec Spec) (Built, error) {
	f, err := os.Create(filePath)
	if err != nil {
		return Built{}, fmt.Errorf("creating %s: %w", filePath, err)
	}
	built, err := WriteDockerArchive(f, spec)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", filePath, cerr)
	}
	return built, err
}

// Import builds spec and imports it into the containerd listening on socket, in namespace
// (the CRI's is "k8s.io"), with `ctr images import`. It returns the image ID.
func Import(ctx context.Context, socket, namespace string, spec Spec) (Built, error) {
	tmp, err := os.CreateTemp("", "image-*.tar")
	if err != nil {
		return Built{}, fmt.Errorf("creating archive file: %w", err)
	}
	defer os.Remove(tmp.Name())
	built, err := WriteDockerArchive(tmp, spec)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Built{}, err
	}
	if err := ImportArchive(ctx, socket, namespace, tmp.Name()); err != nil {
		return Built{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	return built, nil
}

// ImportArchive imports a docker-archive or OCI tar into the containerd on socket with
// `ctr images import` (which also unpacks it into the default snapshotter). ctr is the one
// built with the tiers' containerd (ctrdbin, EVICTIOND_CONTAINERD_BIN).
func ImportArchive(ctx context.Context, socket, namespace, archivePath string) error {
	ctr, err := ctrdbin.Path("ctr")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, ctr, "--address", socket, "--namespace", namespace,
		"images", "import", "--no-unpack=false", archivePath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", archivePath, err, bytes.TrimSpace(out))
	}
	return nil
}

// layerTar writes files, plus their parent directories, as one uncompressed tar.
func layerTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var dirList []string
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("file path %q: must be absolute", f.Path)
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				dirList = append(dirList, d)
			}
		}
	}
	sort.Strings(dirList) // parents sort before their children
	for _, d := range dirList {
		hdr := &tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		if f.Symlink != "" {
			hdr := &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: f.Symlink, Mode: 0o777, ModTime: epoch}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
			if len(f.Data) > 0 {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(f.Data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}
