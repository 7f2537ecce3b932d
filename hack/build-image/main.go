// Command build-image builds the evictiond container image without a Docker engine, with
// go-containerregistry: for each platform one layer holding that platform's static binary
// (the same content as the Dockerfile's final stage, FROM scratch), OCI labels naming the
// source, version and revision, gathered in one OCI image index. It writes
//
//   - the index as an OCI image layout directory (-oci), which `crane push DIR REF` or
//     `skopeo copy --all oci:DIR:TAG docker://REF` push as a multi-platform image;
//   - the host platform's image as a docker-archive tarball (-o), which `ctr images import`
//     and `docker load` read (the e2e tier imports it);
//   - with -sbom, each platform's CycloneDX SBOM (<binary>.cdx.json, from `cyclonedx-gomod
//     bin`) in the layout as an OCI artifact whose subject is that platform's image (a
//     referrer: `oras discover --oci-layout`, or the layout's index.json, annotation
//     org.opencontainers.image.ref.name sbom-<os>-<arch>);
//
// and prints the index digest. `make image` runs it. `build-image sign` and `build-image
// verify` add and check a key-based signature of the index in cosign's format (sign.go).
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
	"github.com/google/go-containerregistry/pkg/v1/static"
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
	if len(os.Args) > 1 && (os.Args[1] == "sign" || os.Args[1] == "verify") {
		os.Exit(signOrVerify(os.Args[1], os.Args[2:]))
	}
	var platforms platformFlag
	flag.Var(&platforms, "platform", "os/arch=binary, once per platform of the index")
	ref := flag.String("ref", "evictiond.io/evictiond:dev", "image reference")
	out := flag.String("o", "bin/evictiond-image.tar", "docker-archive tarball of the host platform's image")
	oci := flag.String("oci", "bin/evictiond-image.oci", "OCI image layout directory holding the index (replaced)")
	version := flag.String("version", "dev", "org.opencontainers.image.version")
	revision := flag.String("revision", "", "org.opencontainers.image.revision (the commit)")
	source := flag.String("source", "https://github.com/evictiond/evictiond", "org.opencontainers.image.source")
	sbom := flag.Bool("sbom", false, "attach each platform's <binary>.cdx.json (CycloneDX) to its image as an OCI referrer")
	flag.Parse()
	if err := run(platforms, *ref, *out, *oci, *version, *revision, *source, *sbom); err != nil {
		fmt.Fprintf(os.Stderr, "build-image: %v\n", err)
		os.Exit(1)
	}
}

// signOrVerify is `build-image sign -key KEY -oci DIR` and `build-image verify -key PUB -oci DIR`.
func signOrVerify(cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	key := fs.String("key", "", "sign: PEM PKCS#8 ECDSA P-256 private key; verify: PEM public key")
	oci := fs.String("oci", "bin/evictiond-image.oci", "OCI image layout holding the image index")
	repo := fs.String("repository", "evictiond.io/evictiond", "the repository the signature names (cosign's docker-reference)")
	fs.Parse(args)
	if *key == "" {
		fmt.Fprintf(os.Stderr, "build-image %s: -key is required\n", cmd)
		return 2
	}
	if cmd == "sign" {
		if err := signLayout(*oci, *key, *repo); err != nil {
			fmt.Fprintf(os.Stderr, "build-image sign: %v\n", err)
			return 1
		}
		return 0
	}
	digest, err := verifyLayout(*oci, *key, *repo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-image verify: %v\n", err)
		return 1
	}
	fmt.Printf("%s: index %s of %s: signature verified with %s\n", *oci, digest, *repo, *key)
	return 0
}

// SBOMMediaType is the CycloneDX JSON media type: the SBOM layer's and, as the artifact's
// config media type, its artifact type.
const SBOMMediaType types.MediaType = "application/vnd.cyclonedx+json"

// artifact is an OCI artifact manifest: config media type artifactType (its artifact type,
// OCI 1.1's rule when no artifactType field is set), one layer of data, and subject.
func artifact(artifactType, layerType types.MediaType, data []byte, layerAnnotations map[string]string, subject v1.Descriptor) (v1.Image, error) {
	art, err := mutate.Append(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), artifactType),
		mutate.Addendum{Layer: static.NewLayer(data, layerType), Annotations: layerAnnotations})
	if err != nil {
		return nil, err
	}
	return mutate.Subject(art, subject).(v1.Image), nil
}

// sbomArtifact is the OCI artifact holding a CycloneDX SBOM whose subject is img.
func sbomArtifact(sbomPath string, img v1.Image, platform v1.Platform) (v1.Image, error) {
	data, err := os.ReadFile(sbomPath)
	if err != nil {
		return nil, fmt.Errorf("the SBOM of %s: %w", platform, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	size, err := img.Size()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	return artifact(SBOMMediaType, SBOMMediaType, data, map[string]string{"org.opencontainers.image.title": "sbom.cdx.json"},
		v1.Descriptor{MediaType: mt, Digest: digest, Size: size})
}

func run(platforms platformFlag, ref, out, oci, version, revision, source string, sbom bool) error {
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
	sboms := map[string]v1.Image{} // by os-arch
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
		if sbom {
			art, err := sbomArtifact(p.binary+".cdx.json", img, plat)
			if err != nil {
				return err
			}
			sboms[plat.OS+"-"+plat.Architecture] = art
		}
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
	for _, p := range platforms {
		key := p.platform.OS + "-" + p.platform.Architecture
		if art := sboms[key]; art != nil {
			if err := lp.AppendImage(art, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "sbom-" + key})); err != nil {
				return fmt.Errorf("writing the SBOM of %s to %s: %w", key, oci, err)
			}
		}
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
