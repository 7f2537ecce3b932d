//go:build linux

package notify

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

// The kernel on this project's machines mounts cgroup v1 (hybrid), so the
// cgroup v2 kubepods files (memory.events, memory.current, memory.max) come
// from fixture trees laid out as on a cgroup v2 node with the systemd driver.
// Test names carry "FixtureTree" to say so.

// writeMemoryEvents rewrites memory.events in place with one write and
// fixed-width counters, as the kernel updates it (no truncate in between).
func writeMemoryEvents(t *testing.T, path string, low, high, max, oom, oomKill int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	content := fmt.Sprintf("low %010d\nhigh %010d\nmax %010d\noom %010d\noom_kill %010d\noom_group_kill %010d\n", low, high, max, oom, oomKill, 0)
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		t.Fatal(err)
	}
}

func v2FixtureTree(t *testing.T) (root, kubepods string) {
	t.Helper()
	root = t.TempDir()
	kubepods = filepath.Join(root, "kubepods.slice")
	if err := os.MkdirAll(kubepods, 0o755); err != nil {
		t.Fatal(err)
	}
	writeMemoryEvents(t, filepath.Join(kubepods, "memory.events"), 0, 0, 0, 0, 0)
	for name, v := range map[string]string{
		"memory.max":     "1073741824\n",
		"memory.current": "104857600\n",
		"memory.stat":    "anon 52428800\nfile 52428800\ninactive_file 20971520\nactive_file 31457280\n",
	} {
		if err := os.WriteFile(filepath.Join(kubepods, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, kubepods
}

func runFixtureManager(t *testing.T, opts Options, w *Waker) *Manager {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := New(opts, w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-m.Armed():
	case <-time.After(5 * time.Second):
		t.Fatal("no arming attempt within 5s")
	}
	return m
}

func waitWake(t *testing.T, w *Waker, src Source, d time.Duration) bool {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case <-w.C():
			if w.Take().Sources[src] > 0 {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func statusOf(m *Manager, src Source, target string) (NotifierStatus, bool) {
	for _, n := range m.Status().Notifiers {
		if n.Source == src && n.Target == target {
			return n, true
		}
	}
	return NotifierStatus{}, false
}

func TestCgroupV2FixtureTree_MemoryEventsWakeOnHighMaxOOMButNotLow(t *testing.T) {
	root, kubepods := v2FixtureTree(t)
	events := filepath.Join(kubepods, "memory.events")
	w := NewWaker()
	metrics := NewMetrics()
	m := runFixtureManager(t, Options{
		Mode: CgroupModeV2, CgroupRoot: root, KubepodsCgroup: "kubepods.slice",
		MemoryEvents: true, RearmInterval: MaxRearmInterval, Metrics: metrics,
	}, w)
	if st, _ := statusOf(m, SourceMemoryEvents, events); st.Mode != ModeArmed {
		t.Fatalf("memory.events watch: %+v, want armed", st)
	}

	writeMemoryEvents(t, events, 0, 1, 0, 0, 0)
	if !waitWake(t, w, SourceMemoryEvents, time.Second) {
		t.Fatal("no wake after memory.events high grew")
	}
	writeMemoryEvents(t, events, 5, 1, 0, 0, 0)
	if waitWake(t, w, SourceMemoryEvents, 200*time.Millisecond) {
		t.Fatal("woken by a growing low counter, which is not pressure of this cgroup")
	}
	writeMemoryEvents(t, events, 5, 1, 1, 0, 0)
	if !waitWake(t, w, SourceMemoryEvents, time.Second) {
		t.Fatal("no wake after memory.events max grew")
	}
	writeMemoryEvents(t, events, 5, 1, 1, 1, 1)
	if !waitWake(t, w, SourceMemoryEvents, time.Second) {
		t.Fatal("no wake after memory.events oom_kill grew")
	}
	if got := testutil.ToFloat64(metrics.Wakes.WithLabelValues("memory_events")); got != 3 {
		t.Fatalf("wakes{memory_events} = %v, want 3", got)
	}

	// The cgroup goes away: the watch fails visibly.
	if err := os.Remove(events); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if st, _ := statusOf(m, SourceMemoryEvents, events); st.Mode == ModeFallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch on a deleted memory.events not reported: %+v", m.Status().Notifiers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("memory_events", ReasonFailed)); got != 1 {
		t.Fatalf("fallback{memory_events,failed} = %v, want 1", got)
	}
}

// On cgroup v2 there are no memcg thresholds: each one is reported as
// unsupported and the poll watches the memory signals instead.
func TestCgroupV2FixtureTree_ThresholdsArePolledWithoutMemcgEvents(t *testing.T) {
	root, kubepods := v2FixtureTree(t)
	read := func() (policy.Observations, error) {
		limit, err := nodefs.ReadInt64(filepath.Join(kubepods, "memory.max"))
		if err != nil {
			return nil, err
		}
		usage, err := nodefs.ReadInt64(filepath.Join(kubepods, "memory.current"))
		if err != nil {
			return nil, err
		}
		inactive, err := readFlatKey(filepath.Join(kubepods, "memory.stat"), "inactive_file")
		if err != nil {
			return nil, err
		}
		s := memcgSample{Capacity: limit, Usage: usage, InactiveFile: inactive}
		return policy.Observations{policy.SignalAllocatableMemoryAvailable: {Available: s.Available(), Capacity: limit, Time: time.Now()}}, nil
	}
	w := NewWaker()
	metrics := NewMetrics()
	m := runFixtureManager(t, Options{
		Mode: CgroupModeV2, CgroupRoot: root, KubepodsCgroup: "kubepods.slice", ProcRoot: root,
		MemcgThresholds: true, PollInterval: 10 * time.Millisecond, RearmInterval: MaxRearmInterval,
		PSI:        PSIOptions{Enabled: true},
		Thresholds: []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 100 << 20}},
		ReadMemory: read, Metrics: metrics,
	}, w)
	if st, _ := statusOf(m, SourceMemcg, "hard allocatableMemory.available"); st.Mode != ModeFallback {
		t.Fatalf("memcg threshold on cgroup v2: %+v, want fallback", st)
	}
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("memcg", ReasonUnsupported)); got != 1 {
		t.Fatalf("fallback{memcg,unsupported} = %v, want 1", got)
	}
	// On v2 the kubepods trigger goes on <root>/kubepods.slice/memory.pressure
	// (absent from this fixture: not found) and the node's on
	// <proc>/pressure/memory (absent: no PSI in this kernel).
	for target, reason := range map[string]string{
		filepath.Join(kubepods, "memory.pressure"): ReasonNotFound,
		filepath.Join(root, "pressure", "memory"):  ReasonUnsupported,
	} {
		if st, ok := statusOf(m, SourcePSI, target); !ok || st.Mode != ModeFallback {
			t.Errorf("PSI trigger %s: %+v, want fallback", target, st)
		}
		if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("psi", reason)); got != 1 {
			t.Errorf("fallback{psi,%s} = %v, want 1", reason, got)
		}
	}
	// available = 1Gi - (1000Mi - 20Mi) = 44Mi < 100Mi
	if err := os.WriteFile(filepath.Join(kubepods, "memory.current"), []byte("1048576000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !waitWake(t, w, SourcePoll, time.Second) {
		t.Fatal("no poll wake after the fixture's available memory fell below the threshold")
	}
	if !m.Status().PollActive {
		t.Fatal("status does not show the poll active")
	}
}
