package rtboost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOwnCPUCgroup(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cgroup"), "12:memory:/kubepods/burstable/podA/c1\n4:cpu,cpuacct:/kubepods/burstable/podA/c1\n1:name=systemd:/x\n")
	if got, err := OwnCPUCgroup(dir); err != nil || got != "/kubepods/burstable/podA/c1" {
		t.Fatalf("v1: %q, %v", got, err)
	}
	writeFile(t, filepath.Join(dir, "cgroup"), "0::/kubepods.slice/x.scope\n")
	if got, err := OwnCPUCgroup(dir); err != nil || got != "" {
		t.Fatalf("v2: %q, %v; want \"\" (no v1 cpu hierarchy)", got, err)
	}
}

// Grant on a file tree shaped like a cgroup v1 cpu hierarchy: every level below the root that
// has less than the budget gets it, top down; one with more, or -1 (unlimited), is left alone.
func TestGrantWritesEachLevelBelowTheRoot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "cpu.rt_runtime_us"), "950000\n")
	writeFile(t, filepath.Join(root, "kubepods", "cpu.rt_runtime_us"), "100000\n")
	writeFile(t, filepath.Join(root, "kubepods", "burstable", "cpu.rt_runtime_us"), "0\n")
	writeFile(t, filepath.Join(root, "kubepods", "burstable", "pod", "cpu.rt_runtime_us"), "-1\n")
	writeFile(t, filepath.Join(root, "kubepods", "burstable", "pod", "c", "cpu.rt_runtime_us"), "0\n")
	wrote, err := Grant(root, filepath.Join(root, "kubepods", "burstable", "pod", "c"), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(wrote) != 2 || !strings.Contains(wrote[0], "burstable/cpu.rt_runtime_us=50000") || !strings.Contains(wrote[1], "pod/c/cpu.rt_runtime_us=50000") {
		t.Fatalf("wrote %v, want burstable and the container", wrote)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "kubepods", "cpu.rt_runtime_us")); strings.TrimSpace(string(b)) != "100000" {
		t.Fatalf("kubepods changed to %q", b)
	}

	if _, err := Grant(root, "/elsewhere", time.Millisecond); err == nil {
		t.Fatal("a cgroup outside the root: no error")
	}
	noRT := t.TempDir() // cgroup v2, or no RT group scheduling: no cpu.rt_runtime_us
	if wrote, err := Grant(noRT, filepath.Join(noRT, "kubepods"), time.Millisecond); err != nil || wrote != nil {
		t.Fatalf("without RT group scheduling: %v, %v; want nothing", wrote, err)
	}
}
