//go:build e2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
)

// Workloads are the Go programs under test/e2e/workloads, each built into its own image.
var Workloads = []string{"idle", "memhog", "pidhog", "diskfill"}

// WorkloadImage is the reference the image of workload name is imported under. Pods use it
// with imagePullPolicy Never: there is no registry.
func WorkloadImage(name string) string {
	return "e2e.evictiond.io/" + name + ":dev"
}

// repoRoot finds the module root (the directory holding go.mod) from the working directory,
// which `go test` sets to the package's directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// buildWorkloads compiles every workload as a static binary into outDir in one `go build`
// (which shares the build cache and links in parallel).
func buildWorkloads(ctx context.Context, outDir string) (map[string]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, fmt.Errorf("locating the repository: %w", err)
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", outDir + "/"}
	for _, w := range Workloads {
		args = append(args, "./test/e2e/workloads/"+w)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, out)
	}
	bins := map[string]string{}
	for _, w := range Workloads {
		bins[w] = filepath.Join(outDir, w)
	}
	return bins, nil
}

// importImages builds the pause image and one image per workload and imports them into
// the cluster's containerd (the pause image under its sandbox tag, reported pinned).
func importImages(ctx context.Context, ctrd *containerd.Containerd, workDir string) ([]images.Spec, error) {
	bins, err := buildWorkloads(ctx, workDir)
	if err != nil {
		return nil, err
	}
	var specs []images.Spec
	for _, w := range Workloads {
		data, err := os.ReadFile(bins[w])
		if err != nil {
			return nil, fmt.Errorf("reading built workload %s: %w", w, err)
		}
		specs = append(specs, images.Spec{
			Ref:        WorkloadImage(w),
			Files:      []images.File{{Path: "/" + w, Data: data, Mode: 0o755}},
			Entrypoint: []string{"/" + w},
		})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		_, err := ctrd.ImportSandboxImage(gctx)
		return err
	})
	g.Go(func() error { return importSpecs(gctx, ctrd, specs) })
	return specs, g.Wait()
}

// importSpecs imports the images of specs into ctrd's CRI namespace, in parallel.
func importSpecs(ctx context.Context, ctrd *containerd.Containerd, specs []images.Spec) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, spec := range specs {
		g.Go(func() error {
			_, err := images.Import(gctx, ctrd.Socket, containerd.CRINamespace, spec)
			return err
		})
	}
	return g.Wait()
}

// EnsureWorkloadImages imports the workload images again. A scenario that lets evictiond
// garbage-collect images (DiskPressure) removes the unused ones, so every scenario calls
// this first and passes whichever scenarios ran before it, in any order. Importing an image
// that is still there rewrites nothing but its record.
func (c *Cluster) EnsureWorkloadImages(ctx context.Context) error {
	return importSpecs(ctx, c.Containerd, c.workloadImages)
}

// ImportArchive imports an image archive (docker-archive or OCI tar, e.g. evictiond's from
// `make image`) into the cluster's containerd.
func (c *Cluster) ImportArchive(ctx context.Context, archivePath string) error {
	return images.ImportArchive(ctx, c.Containerd.Socket, containerd.CRINamespace, archivePath)
}
