// Package ctrdbin finds the containerd binaries the test tiers run: containerd 2.x built from the
// Go module proxy by hack/containerd.sh into a directory passed as EVICTIOND_CONTAINERD_BIN (the
// make targets set it). It never falls back to PATH: a containerd there is likely Debian's 1.6,
// which the tiers no longer prove.
package ctrdbin

import (
	"fmt"
	"os"
	"path/filepath"
)

// EnvVar names the directory holding containerd, containerd-shim-runc-v2 and ctr.
const EnvVar = "EVICTIOND_CONTAINERD_BIN"

// Components are the binaries hack/containerd.sh builds; the directory must hold all of them.
var Components = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// hint says how to get the binaries, for every error of this package.
const hint = "build them with `make containerd-binaries` (hack/containerd.sh prints their directory) and set " +
	EnvVar + " to it; the make targets of the tiers do both"

// Dir returns the directory named by EVICTIOND_CONTAINERD_BIN after checking that it holds every
// component as an executable file.
func Dir() (string, error) {
	dir := os.Getenv(EnvVar)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: %s", EnvVar, hint)
	}
	for _, c := range Components {
		fi, err := os.Stat(filepath.Join(dir, c))
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w: %s", EnvVar, dir, err, hint)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s: %s is not an executable file: %s", EnvVar, dir, c, hint)
		}
	}
	return dir, nil
}

// Path returns the absolute path of one component (containerd, containerd-shim-runc-v2, ctr).
func Path(name string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}
