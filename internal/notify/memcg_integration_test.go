//go:build integration && linux

package notify

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/evictiond/evictiond/internal/policy"
)

const hardAllocatable = "hard allocatableMemory.available"

// A child memcg stands in for kubepods: the threshold on
// allocatableMemory.available is armed on it, and a child process inside it
// allocates across the threshold, up and back down.
func TestMemcgThresholdWakesLoopWhenChildProcessAllocatesAcrossIt(t *testing.T) {
	requireMemcgV1(t)
	name := uniqueName(t)
	dir := makeMemcg(t, name, 256*mib)
	h := startHelper(t, dir)

	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		KubepodsCgroup:  name,
		MemcgThresholds: true,
		Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
		Metrics:         metrics,
	}, w)

	st := notifierStatus(t, m, SourceMemcg, hardAllocatable)
	if st.Mode != ModeArmed {
		t.Fatalf("memcg threshold not armed: %+v", st)
	}
	inactive, _ := readFlatKey(dir+"/memory.stat", "total_inactive_file")
	if want := 256*mib - 64*mib + inactive; st.UsageThreshold != want {
		t.Fatalf("armed usage threshold %d, want capacity-threshold+inactive_file = %d", st.UsageThreshold, want)
	}
	if got := testutil.ToFloat64(metrics.Armed.WithLabelValues("memcg", hardAllocatable)); got != 1 {
		t.Fatalf("evictiond_notifier_armed{memcg} = %v, want 1", got)
	}
	if m.Status().PollActive {
		t.Fatal("poll active although every threshold is armed in the kernel")
	}

	usage := readInt(t, dir+"/memory.usage_in_bytes")
	below := st.UsageThreshold - usage - 32*mib
	drain(w)
	h.alloc(below)
	expectNoWake(t, w, SourceMemcg, 300*time.Millisecond)

	h.alloc(64 * mib)
	expectWake(t, w, SourceMemcg, time.Second)
	if u := readInt(t, dir+"/memory.usage_in_bytes"); u < st.UsageThreshold {
		t.Fatalf("woken but usage %d is still below the threshold %d", u, st.UsageThreshold)
	}

	// The kernel fires in both directions: pressure ending wakes the loop too.
	h.freeAll()
	expectWake(t, w, SourceMemcg, time.Second)

	if got := testutil.ToFloat64(metrics.Wakes.WithLabelValues("memcg")); got < 2 {
		t.Fatalf("evictiond_notifier_wakes_total{memcg} = %v, want >= 2", got)
	}
}

// Page cache written into the memcg raises inactive_file, which must move the
// usage threshold up by as much: the kernel then fires at the new value and
// no longer at the old one.
func TestMemcgRearmMovesThresholdWithInactiveFile(t *testing.T) {
	requireMemcgV1(t)
	name := uniqueName(t)
	dir := makeMemcg(t, name, 1024*mib)
	h := startHelper(t, dir)

	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		KubepodsCgroup:  name,
		MemcgThresholds: true,
		RearmInterval:   MaxRearmInterval, // only the explicit Rearm below moves it
		Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 256 * mib}},
		Metrics:         metrics,
	}, w)
	before := notifierStatus(t, m, SourceMemcg, hardAllocatable).UsageThreshold

	h.do("writefile %s %d", filepath.Join(t.TempDir(), "cache"), 200*mib)
	inactive, _ := readFlatKey(dir+"/memory.stat", "total_inactive_file")
	if inactive < 150*mib {
		t.Fatalf("total_inactive_file %d after writing 200Mi, want >= 150Mi (page cache not charged here?)", inactive)
	}

	m.Rearm()
	var after int64
	waitFor(t, 2*time.Second, "the threshold to move", func() bool {
		after = notifierStatus(t, m, SourceMemcg, hardAllocatable).UsageThreshold
		return after != before
	})
	if want := 1024*mib - 256*mib + inactive; after < want-8*mib || after > want+8*mib {
		t.Fatalf("re-armed at %d, want about %d (capacity - threshold + inactive_file %d)", after, want, inactive)
	}
	if got := testutil.ToFloat64(metrics.Rearms); got != 1 {
		t.Fatalf("evictiond_notifier_memcg_rearms_total = %v, want 1", got)
	}

	// Between the old and the new threshold: the old registration is gone.
	usage := readInt(t, dir+"/memory.usage_in_bytes")
	midpoint := before + (after-before)/2
	drain(w)
	h.alloc(midpoint - usage)
	if u := readInt(t, dir+"/memory.usage_in_bytes"); u <= before {
		t.Fatalf("usage %d did not pass the old threshold %d", u, before)
	}
	expectNoWake(t, w, SourceMemcg, 500*time.Millisecond)

	h.alloc(after - midpoint + 16*mib)
	expectWake(t, w, SourceMemcg, time.Second)
}

// The root memcg is where memory.available is watched; its capacity is
// MemTotal. The test arms it (crossing it would need the machine's memory).
func TestMemcgArmsRootMemcgForMemoryAvailable(t *testing.T) {
	requireMemcgV1(t)
	w := NewWaker()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		MemcgThresholds: true,
		Thresholds: []Threshold{
			{Signal: policy.SignalMemoryAvailable, Hard: true, Available: 512 * mib},
			{Signal: policy.SignalMemoryAvailable, Hard: false, Percentage: 0.1},
		},
	}, w)
	sample, err := readMemcgV1(v1MemoryRoot, true, "/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for name, avail := range map[string]int64{
		"hard memory.available": 512 * mib,
		"soft memory.available": int64(float64(sample.Capacity) * 0.1),
	} {
		st := notifierStatus(t, m, SourceMemcg, name)
		want := sample.Capacity - avail + sample.InactiveFile
		if st.Mode != ModeArmed || st.UsageThreshold < want-64*mib || st.UsageThreshold > want+64*mib {
			t.Errorf("%s: %+v, want armed near %d", name, st, want)
		}
	}
}

// Arming fails (the kubepods memcg does not exist yet, as at node boot): the
// poll takes over, visibly, and wakes the loop on a real crossing read from
// cgroupfs; once the memcg appears the kernel threshold is armed and the poll
// stops.
func TestFallbackPollTakesOverWhenMemcgArmingFails(t *testing.T) {
	requireMemcgV1(t)
	watched := uniqueName(t) // not created yet
	measured := makeMemcg(t, uniqueName(t), 256*mib)
	h := startHelper(t, measured)

	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		KubepodsCgroup:  watched,
		MemcgThresholds: true,
		RearmInterval:   200 * time.Millisecond,
		PollInterval:    20 * time.Millisecond,
		Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
		ReadMemory:      memcgReader(measured),
		Metrics:         metrics,
	}, w)

	if st := notifierStatus(t, m, SourceMemcg, hardAllocatable); st.Mode != ModeFallback {
		t.Fatalf("memcg notifier on a missing memcg: %+v, want fallback", st)
	}
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("memcg", ReasonNotFound)); got != 1 {
		t.Fatalf("evictiond_notifier_fallback_total{memcg,not_found} = %v, want 1", got)
	}
	waitFor(t, 2*time.Second, "the poll to start", func() bool { return m.Status().PollActive })
	if got := testutil.ToFloat64(metrics.PollActive); got != 1 {
		t.Fatalf("evictiond_notifier_poll_active = %v, want 1", got)
	}

	drain(w)
	h.alloc(220 * mib) // available 256Mi - 220Mi < 64Mi
	expectWake(t, w, SourcePoll, time.Second)
	h.freeAll()
	expectWake(t, w, SourcePoll, time.Second)

	// Retrying keeps failing on the same error: counted once, not every 200ms.
	time.Sleep(500 * time.Millisecond)
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("memcg", ReasonNotFound)); got != 1 {
		t.Fatalf("fallback counted %v times for one unchanged failure, want 1", got)
	}

	makeMemcg(t, filepath.Join(v1MemoryRoot, watched)[len(v1MemoryRoot)+1:], 256*mib)
	waitFor(t, 2*time.Second, "the memcg threshold to be armed", func() bool {
		return notifierStatus(t, m, SourceMemcg, hardAllocatable).Mode == ModeArmed
	})
	waitFor(t, 2*time.Second, "the poll to stop", func() bool { return !m.Status().PollActive })
}

// Configuration reload: thresholds replaced at run time are armed, dropped
// ones disarmed.
func TestSetThresholdsRearmsAndDropsNotifiers(t *testing.T) {
	requireMemcgV1(t)
	name := uniqueName(t)
	makeMemcg(t, name, 256*mib)
	w := NewWaker()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		KubepodsCgroup:  name,
		MemcgThresholds: true,
		Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
	}, w)
	if err := m.SetThresholds([]Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: false, Available: 128 * mib}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the soft threshold to replace the hard one", func() bool {
		var hard, soft bool
		for _, n := range m.Status().Notifiers {
			hard = hard || n.Target == hardAllocatable
			soft = soft || (n.Target == "soft allocatableMemory.available" && n.Mode == ModeArmed)
		}
		return soft && !hard
	})
	if err := m.SetThresholds([]Threshold{{Signal: policy.SignalImageFsAvailable, Available: 1}}); err == nil {
		t.Fatal("SetThresholds accepted imagefs.available (read through the CRI, not polled)")
	}
}

// An armed notifier whose memcg disappears fails visibly at run time: the
// kernel signals the eventfd as the memcg goes offline, the next re-arm
// cannot sample it, and the poll takes over.
func TestMemcgNotifierFailingAtRunTimeFallsBackToPoll(t *testing.T) {
	requireMemcgV1(t)
	name := uniqueName(t)
	dir := filepath.Join(v1MemoryRoot, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	writeFile(t, filepath.Join(dir, "memory.limit_in_bytes"), strconv.FormatInt(256*mib, 10))
	measured := makeMemcg(t, uniqueName(t), 256*mib)

	w := NewWaker()
	metrics := NewMetrics()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		KubepodsCgroup:  name,
		MemcgThresholds: true,
		RearmInterval:   200 * time.Millisecond,
		Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
		ReadMemory:      memcgReader(measured),
		Metrics:         metrics,
	}, w)
	if st := notifierStatus(t, m, SourceMemcg, hardAllocatable); st.Mode != ModeArmed {
		t.Fatalf("not armed: %+v", st)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatalf("removing the watched memcg: %v", err)
	}
	waitFor(t, 3*time.Second, "the notifier to fall back", func() bool {
		return notifierStatus(t, m, SourceMemcg, hardAllocatable).Mode == ModeFallback
	})
	waitFor(t, 2*time.Second, "the poll to start", func() bool { return m.Status().PollActive })
	if got := testutil.ToFloat64(metrics.Armed.WithLabelValues("memcg", hardAllocatable)); got != 0 {
		t.Fatalf("evictiond_notifier_armed{memcg} = %v after failure, want 0", got)
	}
	if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues("memcg", ReasonNotFound)); got != 1 {
		t.Fatalf("evictiond_notifier_fallback_total{memcg,not_found} = %v, want 1", got)
	}
}

// The root memcg's threshold (memory.available) fires when node usage crosses
// it: the threshold is put 512Mi above the node's usage and a child process
// allocates 1Gi. (Other processes on the machine move node usage too; the
// margin keeps them from crossing it in the test's few seconds.)
func TestMemcgRootThresholdWakesWhenNodeUsageCrossesIt(t *testing.T) {
	requireMemcgV1(t)
	h := startHelper(t, makeMemcg(t, uniqueName(t), 2048*mib))
	sample, err := readMemcgV1(v1MemoryRoot, true, "/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	available := sample.Capacity + sample.InactiveFile - sample.Usage - 512*mib
	w := NewWaker()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		MemcgThresholds: true,
		RearmInterval:   MaxRearmInterval,
		Thresholds:      []Threshold{{Signal: policy.SignalMemoryAvailable, Hard: true, Available: available}},
	}, w)
	st := notifierStatus(t, m, SourceMemcg, "hard memory.available")
	if st.Mode != ModeArmed {
		t.Fatalf("root memcg threshold not armed: %+v", st)
	}
	drain(w)
	woke := make(chan time.Duration, 1)
	go func() { // the decision loop's stand-in; the test goroutine enforces the timeout
		for range w.C() {
			at := monotonicNow()
			if w.Take().Sources[SourceMemcg] > 0 {
				woke <- at
				return
			}
		}
	}()
	touchStart, touchEnd := h.allocTimed(1024 * mib)
	select {
	case at := <-woke:
		t.Logf("root memcg threshold: woke %v into a 1Gi touch that took %v (the crossing is about half way); usage now %d, threshold %d",
			at-touchStart, touchEnd-touchStart, readInt(t, v1MemoryRoot+"/memory.usage_in_bytes"), st.UsageThreshold)
	case <-time.After(10 * time.Second):
		t.Fatal("no wake from the root memcg threshold within 10s")
	}
}

// A configuration reload changes the PSI trigger, turns memcg thresholds off
// (the poll takes over) and changes the poll interval, without a restart.
func TestReconfigureAppliesReloadedNotifierSettings(t *testing.T) {
	requireMemcgV1(t)
	requirePSI(t)
	name := uniqueName(t)
	dir := makeMemcg(t, name, 256*mib)
	thresholds := []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}}
	w := NewWaker()
	m := startManager(t, Options{
		Mode:            CgroupModeV1,
		KubepodsCgroup:  name,
		MemcgThresholds: true,
		PSI:             PSIOptions{Enabled: true},
		Thresholds:      thresholds,
		ReadMemory:      memcgReader(dir),
	}, w)
	if st := notifierStatus(t, m, SourcePSI, "/proc/pressure/memory"); st.Mode != ModeArmed || st.Window != 2*time.Second {
		t.Fatalf("PSI before reload: %+v, want armed with a 2s window", st)
	}
	if m.Status().PollActive {
		t.Fatal("poll active before reload although every threshold is armed")
	}

	err := m.Reconfigure(Options{
		MemcgThresholds: false,
		PSI:             PSIOptions{Enabled: true, Type: PSIFull, Stall: 300 * time.Millisecond, Window: 4 * time.Second},
		PollInterval:    250 * time.Millisecond,
		Thresholds:      thresholds,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the PSI trigger to be replaced", func() bool {
		st := notifierStatus(t, m, SourcePSI, "/proc/pressure/memory")
		return st.Mode == ModeArmed && st.Window == 4*time.Second && st.Stall == 300*time.Millisecond
	})
	waitFor(t, 2*time.Second, "memcg thresholds to be disabled and the poll to start", func() bool {
		return notifierStatus(t, m, SourceMemcg, hardAllocatable).Mode == ModeDisabled && m.Status().PollActive
	})
	if st := notifierStatus(t, m, SourcePoll, "memory signals"); !strings.HasPrefix(st.Detail, "every 250ms,") {
		t.Fatalf("poll status %+v, want every 250ms, paced", st)
	}

	if err := m.Reconfigure(Options{PSI: PSIOptions{Enabled: true, Stall: 3 * time.Second, Window: 2 * time.Second}}); err == nil {
		t.Fatal("Reconfigure accepted a stall longer than the window")
	}
	if st := notifierStatus(t, m, SourcePSI, "/proc/pressure/memory"); st.Window != 4*time.Second {
		t.Fatalf("a rejected reload changed the running trigger: %+v", st)
	}
}
