package configfile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

const header = "apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"

// writeAtomic mimics the kubelet's AtomicWriter for a ConfigMap volume: the
// payload goes into a new timestamped directory, "..data" is swapped to it by
// renaming a temporary symlink, and the user-visible file is a symlink
// through "..data".
func writeAtomic(t *testing.T, dir, name, content string, gen int) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..2026_11_22_00_00_%02d.%d", gen, gen))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, name)
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

type recorder struct {
	mu       sync.Mutex
	applied  []*policy.Config
	rejected []error
}

func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applied), len(r.rejected)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestWatcher_ConfigMapSymlinkSwapAppliesValidAndRejectsInvalid(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, dir, "config.yaml", header+"evictionHard: {memory.available: 500Mi}\n", 1)
	path := filepath.Join(dir, "config.yaml")
	cfg, data, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Thresholds[0].Raw; got != "500Mi" {
		t.Fatalf("initial threshold %q, want 500Mi", got)
	}
	rec := &recorder{}
	w := &Watcher{Path: path, Resync: time.Hour,
		Apply:  func(c *policy.Config) { rec.mu.Lock(); rec.applied = append(rec.applied, c); rec.mu.Unlock() },
		Reject: func(err error) { rec.mu.Lock(); rec.rejected = append(rec.rejected, err); rec.mu.Unlock() }}
	w.Seed(data)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	<-w.Ready()

	writeAtomic(t, dir, "config.yaml", header+"evictionHard: {memory.available: 1Gi}\n", 2)
	waitFor(t, "the valid update to apply", func() bool { a, _ := rec.counts(); return a == 1 })
	if got := rec.applied[0].Thresholds[0].Raw; got != "1Gi" {
		t.Fatalf("applied threshold %q, want 1Gi", got)
	}

	writeAtomic(t, dir, "config.yaml", header+"evictionHard: {memory.available: -1Gi}\n", 3)
	waitFor(t, "the invalid update to be rejected", func() bool { _, r := rec.counts(); return r == 1 })
	if a, _ := rec.counts(); a != 1 {
		t.Fatalf("an invalid file was applied (%d applies)", a)
	}
	if msg := rec.rejected[0].Error(); !strings.Contains(msg, "evictionHard[memory.available]") || !strings.Contains(msg, "-1Gi") {
		t.Fatalf("rejection %q does not name the field and value", msg)
	}
	cancel()
	<-done
}

func TestWatcher_PollingCatchesChangeWithoutEvents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w := &Watcher{Path: path, Resync: 50 * time.Millisecond,
		Apply: func(c *policy.Config) { rec.mu.Lock(); rec.applied = append(rec.applied, c); rec.mu.Unlock() }}
	w.Seed([]byte(header))
	// check() is what both the event path and the resync path run.
	if err := os.WriteFile(path, []byte(header+"evictionHard: {nodefs.available: 5%}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.check(nopLogger())
	if a, _ := rec.counts(); a != 1 {
		t.Fatalf("changed file applied %d times, want 1", a)
	}
	w.check(nopLogger())
	if a, _ := rec.counts(); a != 1 {
		t.Fatalf("unchanged file re-applied (%d applies)", a)
	}
}

func TestWatcher_MissingFileKeepsConfig(t *testing.T) {
	rec := &recorder{}
	w := &Watcher{Path: filepath.Join(t.TempDir(), "gone.yaml"),
		Apply:  func(c *policy.Config) { rec.applied = append(rec.applied, c) },
		Reject: func(err error) { rec.rejected = append(rec.rejected, err) }}
	w.check(nopLogger())
	if a, r := rec.counts(); a != 0 || r != 0 {
		t.Fatalf("missing file caused %d applies and %d rejections, want none", a, r)
	}
}
