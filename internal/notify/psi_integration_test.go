//go:build integration && linux

package notify

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/evictiond/evictiond/internal/policy"
)

// A process re-reading a 100Mi file inside a 64Mi memcg thrashes its page
// cache: the file is larger than the memcg but within twice its size, so the
// kernel recognises the refaults as workingset and counts the waits as memory
// stall (a file much larger than the memcg streams through without stalling).
// The PSI triggers on /proc/pressure/memory and on the process's cgroup's
// memory.pressure (the cgroup2 "unified" hierarchy of this hybrid host, where
// PSI is tracked per cgroup without the memory controller) both fire. The
// requested 10ms/1s trigger is refused without CAP_SYS_RESOURCE and adapted to
// 20ms/2s. (Measured here: such thrashing stalls the cgroup 3-6% of the time
// on this machine's fast virtual disk, so the trigger is set low.)
func TestPSITriggerFiresWhenProcessThrashesPageCacheInSmallMemcg(t *testing.T) {
	requireMemcgV1(t)
	requirePSI(t)
	if _, err := os.Stat(v2UnifiedRoot + "/cgroup.procs"); err != nil {
		t.Fatalf("the cgroup2 hierarchy is required at %s (hybrid mount): %v", v2UnifiedRoot, err)
	}
	name := uniqueName(t)
	memcg := makeMemcg(t, name, 64*mib)
	unified := filepath.Join(v2UnifiedRoot, name)
	makeCgroup(t, unified)

	// Written and synced by the test (outside the memcg); the helper drops it
	// from the page cache before reading, so every read faults.
	file := filepath.Join(t.TempDir(), "thrash")
	if err := writeBytes(file, 100*mib); err != nil {
		t.Fatal(err)
	}
	syncFile(t, file)
	h := startHelper(t, memcg, unified)

	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode:           CgroupModeV1,
		KubepodsCgroup: name,
		PSI:            PSIOptions{Enabled: true, Type: PSISome, Stall: 10 * time.Millisecond, Window: time.Second},
		Metrics:        metrics,
	}, w)

	nodeFile := "/proc/pressure/memory"
	podsFile := filepath.Join(unified, "memory.pressure")
	for _, f := range []string{nodeFile, podsFile} {
		st := notifierStatus(t, m, SourcePSI, f)
		if st.Mode != ModeArmed {
			t.Fatalf("PSI trigger on %s: %+v, want armed", f, st)
		}
		if os.Getenv("NOTIFY_TEST_PRIVILEGED_PSI") == "" && (st.Window != 2*time.Second || st.Stall != 20*time.Millisecond) {
			t.Fatalf("PSI trigger on %s armed as stall %v window %v, want the unprivileged adaptation 20ms/2s", f, st.Stall, st.Window)
		}
	}

	drain(w)
	thrashed := make(chan struct{})
	start := time.Now()
	go func() { defer close(thrashed); h.do("thrash %s %d", file, 6) }()
	expectWake(t, w, SourcePSI, 10*time.Second)
	t.Logf("first PSI wake %v after the thrashing started", time.Since(start))
	waitFor(t, 10*time.Second, "the kubepods cgroup's own trigger to fire", func() bool {
		return notifierStatus(t, m, SourcePSI, podsFile).Notifications > 0
	})
	<-thrashed
	if got := testutil.ToFloat64(metrics.Wakes.WithLabelValues("psi")); got < 1 {
		t.Fatalf("wakes{psi} = %v, want >= 1", got)
	}
}

// Without PSI (no /proc/pressure, e.g. a kernel booted with psi=0) the
// trigger falls back visibly and the poll watches the memory signals.
func TestPSIFallsBackToPollWhenTriggerCannotBeArmed(t *testing.T) {
	requireMemcgV1(t)
	procWithoutPSI := t.TempDir()
	measured := makeMemcg(t, uniqueName(t), 128*mib)
	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode:       CgroupModeV1,
		ProcRoot:   procWithoutPSI,
		PSI:        PSIOptions{Enabled: true},
		Thresholds: []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 32 * mib}},
		ReadMemory: memcgReader(measured),
		Metrics:    metrics,
	}, w)
	st := notifierStatus(t, m, SourcePSI, filepath.Join(procWithoutPSI, "pressure", "memory"))
	if st.Mode != ModeFallback {
		t.Fatalf("PSI without /proc/pressure: %+v, want fallback", st)
	}
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("psi", ReasonUnsupported)); got != 1 {
		t.Fatalf("fallback{psi,unsupported} = %v, want 1", got)
	}
	waitFor(t, 2*time.Second, "the poll to start", func() bool { return m.Status().PollActive })
}

// Mode detection reads the filesystem type: this host mounts cgroup v1
// controllers under /sys/fs/cgroup and a real cgroup2 at /sys/fs/cgroup/unified.
func TestDetectsCgroupModeFromMountedFilesystem(t *testing.T) {
	requireMemcgV1(t)
	for root, want := range map[string]CgroupMode{"/sys/fs/cgroup": CgroupModeV1, v2UnifiedRoot: CgroupModeV2} {
		m, err := New(Options{CgroupRoot: root}, NewWaker())
		if err != nil {
			t.Fatal(err)
		}
		if got := m.resolveMode(); got != want {
			t.Errorf("mode of %s = %v, want %v", root, got, want)
		}
	}
}

func syncFile(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
