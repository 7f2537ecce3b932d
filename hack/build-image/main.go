// Command build-image builds the evictiond container image without a Docker engine, with
// go-containerregistry: for each platform one layer holding that platform's static binary
// (the same content as the Dockerfile's final stage, FROM scratch), OCI labels naming the
// source, version and revision, gathered in one OCI image index. It writes
//
//   - the index as an OCI image layout directory (-oci), which `crane push DIR REF` or
//     `skopeo copy --all oci:DIR:TAG docker://REF` push as a multi-platform image;
//   - the host platform's image as a docker-archive tarball (-o), which `ctr images import`
//     and `docker load` read (the e2e tier imports it);
//
// and prints the index digest. `make image` runs it.
//
// The image runs as root, on purpose: the agent writes cgroup.event_control and PSI
// trigger files (root-owned, mode 0644), reads every process' /proc/<pid> on the host PID
// namespace, and talks to the CRI socket (root:root, mode 0660); the DaemonSet adds the three
// capabilities docs/security.md justifies, not privileged (docs/install.md).
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/evictiond/evictiond/internal/testenv/images"
)

// platformFlag collects -platform os/arch=binary.
type platformFlag []platformBinary

type platformBinary struct {
	platform v1.Platform
	binary   string
}

func (p *platformFlag) String() string { return fmt.Sprint(*p) }

func (p *platformFlag) Set(v string) error {
	plat, bin, ok := strings.Cut(v, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || osName == "" || arch == "" || bin == "" {
		return fmt.Errorf("-platform %q: want os/arch=binary, e.g. linux/arm64=bin/linux_arm64/evictiond", v)
	}
	*p = append(*p, platformBinary{v1.Platform{OS: osName, Architecture: arch}, bin})
	return nil
}

// elfMachines is the ELF machine each Go architecture's binaries carry.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV}

// checkELF refuses a binary built for another architecture than its platform's: the
// "exec format error" an image would otherwise ship with.
func checkELF(path string, platform v1.Platform) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s for %s: not an ELF binary: %w", path, platform, err)
	}
	defer f.Close()
	want, ok := elfMachines[platform.Architecture]
	if !ok {
		return fmt.Errorf("%s: architecture %q has no known ELF machine", platform, platform.Architecture)
	}
	if f.Machine != want {
		return fmt.Errorf("%s for %s: ELF machine %s, want %s", path, platform, f.Machine, want)
	}
	return nil
}

func main() {
	var platforms platformFlag
	flag.Var(&platforms, "platform", "os/arch=binary, once per platform of the index")
	ref := flag.String("ref", "evictiond.io/evictiond:dev", "image reference")
	out := flag.String("o", "bin/evictiond-image.tar", "docker-archive tarball of the host platform's image")
	oci := flag.String("oci", "bin/evictiond-image.oci", "OCI image layout directory holding the index (replaced)")
	version := flag.String("version", "dev", "org.opencontainers.image.version")
	revision := flag.String("revision", "", "org.opencontainers.image.revision (the commit)")
	source := flag.String("source", "https://github.com/evictiond/evictiond", "org.opencontainers.image.source")
	flag.Parse()
	if err := run(platforms, *ref, *out, *oci, *version, *revision, *source); err != nil {
		fmt.Fprintf(os.Stderr, "build-image: %v\n", err)
		os.Exit(1)
	}
}

func run(platforms platformFlag, ref, out, oci, version, revision, source string) error {
	if len(platforms) == 0 {
		return fmt.Errorf("no -platform given")
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("-ref %q: %w", ref, err)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "evictiond",
		"org.opencontainers.image.description": "Per-node eviction agent for Kubernetes",
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var hostImage v1.Image
	var sizes []string
	for _, p := range platforms {
		if err := checkELF(p.binary, p.platform); err != nil {
			return err
		}
		data, err := os.ReadFile(p.binary)
		if err != nil {
			return err
		}
		img, err := images.Image(images.Spec{
			Ref:        ref,
			Files:      []images.File{{Path: "/evictiond", Data: data, Mode: 0o755}, {Path: "/tmp/.keep", Mode: 0o644}},
			Entrypoint: []string{"/evictiond"},
			Cmd:        []string{"run"},
			Labels:     labels,
			Compress:   true,
		}, p.platform)
		if err != nil {
			return err
		}
		size, err := imageSize(img)
		if err != nil {
			return err
		}
		plat := p.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
		sizes = append(sizes, fmt.Sprintf("%s %d bytes compressed", plat, size))
		if plat.OS == "linux" && plat.Architecture == runtime.GOARCH {
			hostImage = img
		}
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(oci); err != nil {
		return err
	}
	lp, err := layout.Write(oci, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout %s: %w", oci, err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	})); err != nil {
		return fmt.Errorf("writing the index to %s: %w", oci, err)
	}
	fmt.Printf("%s: %s index %s (%s)\n", oci, ref, digest, strings.Join(sizes, ", "))
	if out == "" {
		return nil
	}
	if hostImage == nil {
		return fmt.Errorf("-o %s: the index has no linux/%s image to write for this machine", out, runtime.GOARCH)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	built, err := images.WriteImageArchive(f, ref, hostImage)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s linux/%s image %s (%d bytes)\n", out, built.Ref, runtime.GOARCH, built.ID, st.Size())
	return nil
}

// imageSize is what a registry stores for the image: manifest, config and compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	raw, err := img.RawManifest()
	return size + int64(len(raw)), err
}
