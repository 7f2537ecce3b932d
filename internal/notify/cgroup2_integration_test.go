//go:build integration && cgroup2 && linux

package notify

// cgroup v2 twins of the integration tests, run by `make test-cgroup2` inside
// a VM booted with cgroup v2 only (internal/testenv/vm): a kubepods cgroup at
// the root of the real unified hierarchy, pods as child cgroups, processes
// (this binary re-run as the helper) allocating inside them.

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/testenv/vm"
)

const v2Root = "/sys/fs/cgroup"

func requireCgroup2(t testing.TB) { t.Helper(); vm.RequireCgroup2(t, "memory", "pids") }

// makeKubepodsV2 creates a kubepods cgroup (under a unique name) at the root
// of the unified hierarchy with memory and pids delegated to its children,
// and one pod cgroup in it. It returns the kubepods name and the pod's dir.
func makeKubepodsV2(t testing.TB) (name, kubepods, pod string) {
	t.Helper()
	name = uniqueName(t)
	kubepods = filepath.Join(v2Root, name)
	makeCgroup(t, kubepods)
	writeFile(t, filepath.Join(kubepods, "cgroup.subtree_control"), "+memory +pids")
	pod = filepath.Join(kubepods, "pod"+strings.TrimPrefix(name, testCgroupBase))
	makeCgroup(t, pod)
	return name, kubepods, pod
}

// v2Reader reads allocatableMemory.available of a v2 cgroup as the monitor
// does: memory.max - (memory.current - inactive_file).
func v2Reader(dir string) MemoryReader {
	return func() (policy.Observations, error) {
		s, err := readV2(dir)
		if err != nil {
			return nil, err
		}
		return policy.Observations{policy.SignalAllocatableMemoryAvailable: {
			Available: s.Available(), Capacity: s.Capacity, Time: time.Now(),
		}}, nil
	}
}

func readV2(dir string) (memcgSample, error) {
	var s memcgSample
	var err error
	if s.Capacity, err = nodefs.ReadInt64(dir + "/memory.max"); err != nil {
		return s, err
	}
	if s.Usage, err = nodefs.ReadInt64(dir + "/memory.current"); err != nil {
		return s, err
	}
	if s.InactiveFile, err = readFlatKey(dir+"/memory.stat", "inactive_file"); err != nil {
		return s, err
	}
	s.Limited = s.Capacity < nodefs.UnlimitedMemory
	return s, nil
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// send writes a helper command without waiting for its reply (for one the
// kernel throttles or the OOM killer ends).
func (h *helper) send(format string, args ...any) {
	h.t.Helper()
	if _, err := fmt.Fprintf(h.in, format+"\n", args...); err != nil {
		h.t.Fatalf("helper %q: %v", fmt.Sprintf(format, args...), err)
	}
}

func TestCgroup2DetectsModeFromMountedFilesystem(t *testing.T) {
	requireCgroup2(t)
	m, err := New(Options{CgroupRoot: v2Root}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.resolveMode(); got != CgroupModeV2 {
		t.Fatalf("mode of %s = %v, want v2", v2Root, got)
	}
}

// A pod passing the kubepods cgroup's memory.high makes the kernel count a
// "high" event in kubepods' (hierarchical) memory.events; passing memory.max
// ends in the OOM killer ("max", "oom", "oom_kill"). Both wake the loop.
func TestCgroup2MemoryEventsWakeOnHighAndOOMKill(t *testing.T) {
	requireCgroup2(t)
	name, kubepods, pod := makeKubepodsV2(t)
	writeFile(t, filepath.Join(kubepods, "memory.high"), strconv.FormatInt(48*mib, 10))
	writeFile(t, filepath.Join(kubepods, "memory.max"), strconv.FormatInt(96*mib, 10))
	h := startHelper(t, pod)

	w := NewWaker()
	metrics := NewMetrics()
	events := filepath.Join(kubepods, "memory.events")
	m := startManager(t, Options{Mode: CgroupModeV2, KubepodsCgroup: name, MemoryEvents: true, Metrics: metrics}, w)
	if st := notifierStatus(t, m, SourceMemoryEvents, events); st.Mode != ModeArmed {
		t.Fatalf("memory.events watch on the real kubepods cgroup: %+v, want armed", st)
	}

	drain(w)
	h.alloc(16 * mib)
	expectNoWake(t, w, SourceMemoryEvents, 500*time.Millisecond)

	h.send("alloc %d", 40*mib) // crosses memory.high: throttled, not killed
	expectWake(t, w, SourceMemoryEvents, 10*time.Second)
	after, _ := os.ReadFile(events)
	if c := parseFlatKeyed(after); c["high"] < 1 {
		t.Fatalf("woken, but memory.events says %v", c)
	}

	// Lift memory.high (the throttled allocation completes), then allocate
	// beyond memory.max: the OOM killer ends the helper.
	writeFile(t, filepath.Join(kubepods, "memory.high"), "max")
	h.send("alloc %d", 128*mib)
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(events)
		if parseFlatKeyed(data)["oom_kill"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no oom_kill in %s after allocating past memory.max: %s", events, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
	expectWake(t, w, SourceMemoryEvents, 5*time.Second)
	if got := testutil.ToFloat64(metrics.Wakes.WithLabelValues(string(SourceMemoryEvents))); got < 2 {
		t.Fatalf("wakes{memory_events} = %v, want >= 2 (high, then max/oom_kill)", got)
	}
}

// As root the kernel accepts PSI triggers with a 500 ms window (no
// adaptation to 2 s). A pod throttled above kubepods' memory.high stalls on
// memory: the triggers on kubepods' memory.pressure and on
// /proc/pressure/memory both fire.
func TestCgroup2PSITriggersWithRootWindowOnKubepodsAndNode(t *testing.T) {
	requireCgroup2(t)
	requirePSI(t)
	name, kubepods, pod := makeKubepodsV2(t)
	writeFile(t, filepath.Join(kubepods, "memory.high"), strconv.FormatInt(32*mib, 10))
	h := startHelper(t, pod)

	w := NewWaker()
	m := startManager(t, Options{
		Mode: CgroupModeV2, KubepodsCgroup: name,
		PSI: PSIOptions{Enabled: true, Type: PSISome, Stall: 50 * time.Millisecond, Window: 500 * time.Millisecond},
	}, w)
	nodeFile, podsFile := "/proc/pressure/memory", filepath.Join(kubepods, "memory.pressure")
	for _, f := range []string{nodeFile, podsFile} {
		st := notifierStatus(t, m, SourcePSI, f)
		if st.Mode != ModeArmed || st.Window != 500*time.Millisecond || st.Stall != 50*time.Millisecond {
			t.Fatalf("PSI trigger on %s: %+v, want armed with stall 50ms, window 500ms", f, st)
		}
	}
	drain(w)
	start := time.Now()
	h.send("alloc %d", 64*mib) // 32 MiB over memory.high: throttled for seconds
	expectWake(t, w, SourcePSI, 20*time.Second)
	t.Logf("first PSI wake %v after the throttled allocation started", time.Since(start))
	for _, f := range []string{nodeFile, podsFile} {
		waitFor(t, 20*time.Second, "the trigger on "+f+" to fire", func() bool {
			return notifierStatus(t, m, SourcePSI, f).Notifications > 0
		})
	}
}

// There are no memcg threshold events on cgroup v2: the notifier reports
// itself unsupported and the poll, reading the real kubepods cgroup, wakes
// the loop when a pod's allocation crosses the threshold, and again when it
// is freed.
func TestCgroup2MemcgThresholdsUnsupportedAndPollWakesOnCrossing(t *testing.T) {
	requireCgroup2(t)
	name, kubepods, pod := makeKubepodsV2(t)
	writeFile(t, filepath.Join(kubepods, "memory.max"), strconv.FormatInt(256*mib, 10))
	h := startHelper(t, pod)

	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode: CgroupModeV2, KubepodsCgroup: name, MemcgThresholds: true,
		Thresholds: []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
		ReadMemory: v2Reader(kubepods), Metrics: metrics,
	}, w)
	if st := notifierStatus(t, m, SourceMemcg, hardAllocatable); st.Mode != ModeFallback {
		t.Fatalf("memcg threshold on cgroup v2: %+v, want fallback", st)
	}
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("memcg", ReasonUnsupported)); got != 1 {
		t.Fatalf("fallback{memcg,unsupported} = %v, want 1", got)
	}
	waitFor(t, 5*time.Second, "the poll to start", func() bool { return m.Status().PollActive })

	s, err := readV2(kubepods)
	if err != nil {
		t.Fatal(err)
	}
	drain(w)
	h.alloc(s.Available() - 64*mib - 32*mib) // 32 MiB short of the threshold
	expectNoWake(t, w, SourcePoll, 500*time.Millisecond)
	h.alloc(64 * mib)
	expectWake(t, w, SourcePoll, 5*time.Second)
	if s, _ := readV2(kubepods); s.Available() >= 64*mib {
		t.Fatalf("woken, but the kernel's numbers say available %d MiB (current %d, inactive_file %d)", s.Available()/mib, s.Usage, s.InactiveFile)
	}
	h.freeAll()
	expectWake(t, w, SourcePoll, 5*time.Second)
}
