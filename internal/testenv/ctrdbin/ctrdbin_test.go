package ctrdbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDirNamesWhatIsMissingAndHowToGetIt(t *testing.T) {
	t.Setenv(EnvVar, "")
	if _, err := Dir(); err == nil || !strings.Contains(err.Error(), EnvVar+" is not set") || !strings.Contains(err.Error(), "make containerd-binaries") {
		t.Errorf("unset: err = %v, want it to name %s and make containerd-binaries", err, EnvVar)
	}

	dir := t.TempDir()
	t.Setenv(EnvVar, dir)
	for _, c := range []string{"containerd", "containerd-shim-runc-v2"} {
		if err := os.WriteFile(filepath.Join(dir, c), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Dir(); err == nil || !strings.Contains(err.Error(), "ctr") {
		t.Errorf("without ctr: err = %v, want it to name ctr", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ctr"), []byte("not executable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(); err == nil || !strings.Contains(err.Error(), "ctr is not an executable file") {
		t.Errorf("ctr not executable: err = %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, "ctr"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Dir()
	if err != nil || got != dir {
		t.Fatalf("Dir() = %q, %v; want %q", got, err, dir)
	}
	p, err := Path("ctr")
	if err != nil || p != filepath.Join(dir, "ctr") {
		t.Errorf("Path(ctr) = %q, %v", p, err)
	}
}
