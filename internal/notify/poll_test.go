package notify

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/evictiond/evictiond/internal/policy"
)

// TestPollWakesOnEachCrossingInBothDirections drives pollOnce with a scripted
// reader (a pure unit test of the crossing rule; the integration tests poll a
// real memcg).
func TestPollWakesOnEachCrossingInBothDirections(t *testing.T) {
	const mi = 1 << 20
	var next policy.Observations
	var readErr error
	w := NewWaker()
	metrics := NewMetrics()
	m, err := New(Options{
		Thresholds: []Threshold{
			{Signal: policy.SignalMemoryAvailable, Hard: true, Available: 100 * mi},
			{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Percentage: 0.25},
		},
		ReadMemory: func() (policy.Observations, error) { return next, readErr },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:    metrics,
	}, w)
	if err != nil {
		t.Fatal(err)
	}
	obs := func(node, alloc int64) policy.Observations {
		now := time.Now()
		return policy.Observations{
			policy.SignalMemoryAvailable:            {Available: node, Capacity: 1000 * mi, Time: now},
			policy.SignalAllocatableMemoryAvailable: {Available: alloc, Capacity: 400 * mi, Time: now},
		}
	}
	steps := []struct {
		name        string
		node, alloc int64
		err         error
		wantWake    bool
	}{
		{"both above", 500 * mi, 300 * mi, nil, false},
		{"still above", 400 * mi, 200 * mi, nil, false},
		{"node crosses below 100Mi", 99 * mi, 200 * mi, nil, true},
		{"node stays below", 50 * mi, 200 * mi, nil, false},
		{"read error changes nothing", 0, 0, errors.New("cgroupfs gone"), false},
		{"allocatable crosses below 25% of 400Mi", 50 * mi, 99 * mi, nil, true},
		{"node recovers above", 150 * mi, 99 * mi, nil, true},
		{"exactly at threshold is not met", 150 * mi, 100 * mi, nil, true},
	}
	met := map[string]bool{}
	lastErr := ""
	for _, s := range steps {
		next, readErr = obs(s.node, s.alloc), s.err
		w.Take()
		lastErr = m.pollOnce(met, lastErr)
		woke := false
		select {
		case <-w.C():
			woke = true
		default:
		}
		if woke != s.wantWake {
			t.Errorf("%s: woke=%v, want %v", s.name, woke, s.wantWake)
		}
	}
	if got := testutil.ToFloat64(metrics.PollErrors); got != 1 {
		t.Errorf("poll errors metric = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.PollReads); got != float64(len(steps)) {
		t.Errorf("poll reads metric = %v, want %d", got, len(steps))
	}
	if got := testutil.ToFloat64(metrics.Wakes.WithLabelValues("poll")); got != 4 {
		t.Errorf("wakes{notifier=poll} = %v, want 4", got)
	}
}

// A pid.available threshold: no kernel notifier watches PIDs, so it keeps the
// poll running even where every memory threshold is armed by a memcg
// notifier, and the poll wakes the loop when the task count crosses it.
func TestPollWatchesPIDAvailable(t *testing.T) {
	var next policy.Observations
	w := NewWaker()
	m, err := New(Options{
		Thresholds: []Threshold{
			{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 500 << 20},
			{Signal: policy.SignalPIDAvailable, Hard: true, Available: 30000},
		},
		ReadMemory: func() (policy.Observations, error) { return next, nil },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:    NewMetrics(),
	}, w)
	if err != nil {
		t.Fatal(err)
	}
	m.setArmed(NotifierStatus{Source: SourceMemcg, Target: "hard allocatableMemory.available"})
	if !m.pollNeeded() {
		t.Fatal("poll not needed with a pid.available threshold and the memory one armed")
	}
	met := map[string]bool{}
	for _, s := range []struct {
		avail    int64
		wantWake bool
	}{{31000, false}, {30500, false}, {29990, true}, {29000, false}, {30001, true}} {
		next = policy.Observations{policy.SignalPIDAvailable: {Available: s.avail, Capacity: 32768, Time: time.Now()}}
		w.Take()
		m.pollOnce(met, "")
		woke := false
		select {
		case <-w.C():
			woke = true
		default:
		}
		if woke != s.wantWake {
			t.Errorf("pid.available %d: woke=%v, want %v", s.avail, woke, s.wantWake)
		}
	}
	// Only the memory threshold, armed: no poll (as before PIDs were watched).
	m2, err := New(Options{
		Thresholds: []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 500 << 20}},
		ReadMemory: func() (policy.Observations, error) { return next, nil },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:    NewMetrics(),
	}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	m2.setArmed(NotifierStatus{Source: SourceMemcg, Target: "hard allocatableMemory.available"})
	if m2.pollNeeded() {
		t.Error("poll needed with every (memory) threshold armed")
	}
}

// The brake estimates the rate from the readings before a crossing; a memcg
// threshold event carries none, so with PollForRates (brake.enabled) the
// poll runs even where every threshold is armed, and a reload turning the
// brake off stops it.
func TestPollRunsForTheBrakesRatesWhereEveryThresholdIsArmed(t *testing.T) {
	opts := Options{
		Thresholds:   []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 500 << 20}},
		PollForRates: true,
		ReadMemory:   func() (policy.Observations, error) { return nil, nil },
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:      NewMetrics(),
	}
	m, err := New(opts, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	m.setArmed(NotifierStatus{Source: SourceMemcg, Target: "hard allocatableMemory.available"})
	if !m.pollNeeded() {
		t.Fatal("poll not needed with PollForRates and every threshold armed")
	}
	opts.PollForRates = false
	if err := m.Reconfigure(opts); err != nil {
		t.Fatal(err)
	}
	if m.pollNeeded() {
		t.Error("poll still needed after a reload without PollForRates, every threshold armed")
	}
}

// nodefs.available is polled like pid.available (one statfs per read; no
// kernel notifier for free space): a threshold in percent of the
// filesystem's capacity wakes the loop when crossed, and keeps the poll on.
func TestPollWatchesNodeFsAvailable(t *testing.T) {
	var next policy.Observations
	w := NewWaker()
	m, err := New(Options{
		Thresholds: []Threshold{{Signal: policy.SignalNodeFsAvailable, Hard: true, Percentage: 0.1}},
		ReadMemory: func() (policy.Observations, error) { return next, nil },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:    NewMetrics(),
	}, w)
	if err != nil {
		t.Fatal(err)
	}
	if !m.pollNeeded() {
		t.Fatal("poll not needed with a nodefs.available threshold")
	}
	met := map[string]bool{}
	for _, s := range []struct {
		avail    int64
		wantWake bool
	}{{50 << 30, false}, {11 << 30, false}, {9 << 30, true}, {5 << 30, false}, {12 << 30, true}} {
		next = policy.Observations{policy.SignalNodeFsAvailable: {Available: s.avail, Capacity: 100 << 30, Time: time.Now()}}
		w.Take()
		m.pollOnce(met, "")
		woke := false
		select {
		case <-w.C():
			woke = true
		default:
		}
		if woke != s.wantWake {
			t.Errorf("nodefs.available %d GiB of 100: woke=%v, want %v", s.avail>>30, woke, s.wantWake)
		}
	}
}

// TestPollAsksForUrgencyNearAHardThreshold: the poll calls Urgent (the realtime boost) when a
// hard threshold is met or nearer than a PollInterval of a ramp at PollRampRate, and not for a
// soft one or far from every threshold.
func TestPollAsksForUrgencyNearAHardThreshold(t *testing.T) {
	const mi = 1 << 20
	var next policy.Observations
	urgent := 0
	m, err := New(Options{
		Thresholds: []Threshold{
			{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 500 * mi},
			{Signal: policy.SignalMemoryAvailable, Hard: false, Available: 900 * mi},
		},
		PollInterval: 100 * time.Millisecond, PollRampRate: 1 << 30, // 102.4 MiB of ramp per PollInterval
		ReadMemory: func() (policy.Observations, error) { return next, nil },
		Urgent:     func() { urgent++ },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name       string
		node, pods int64
		want       bool
	}{
		{"far from both", 2000 * mi, 800 * mi, false},
		{"soft threshold met, hard far", 800 * mi, 800 * mi, false},
		{"hard 105 MiB away", 2000 * mi, 605 * mi, false},
		{"hard 99 MiB away", 2000 * mi, 599 * mi, true},
		{"hard met", 2000 * mi, 400 * mi, true},
	}
	met := map[string]bool{}
	for _, s := range steps {
		now := time.Now()
		next = policy.Observations{
			policy.SignalMemoryAvailable:            {Available: s.node, Capacity: 4000 * mi, Time: now},
			policy.SignalAllocatableMemoryAvailable: {Available: s.pods, Capacity: 3000 * mi, Time: now},
		}
		urgent = 0
		m.pollOnce(met, "")
		if (urgent > 0) != s.want {
			t.Errorf("%s: Urgent called %d times, want called=%v", s.name, urgent, s.want)
		}
	}
}

// TestPollAsksForUrgencyAheadOfAFastApproach: a hard threshold still far by
// the static rule asks for the boost as soon as the poll's reads measure a
// ramp that would reach it within urgentHorizon at twice the measured rate,
// and not for a signal that stays where it is or rises.
func TestPollAsksForUrgencyAheadOfAFastApproach(t *testing.T) {
	const mi = 1 << 20
	var next policy.Observations
	urgent := 0
	th := []Threshold{{Signal: policy.SignalMemoryAvailable, Hard: true, Available: 500 * mi}}
	m, err := New(Options{
		Thresholds:   th,
		PollInterval: 100 * time.Millisecond, PollRampRate: 1 << 30, // static rule: 102.4 MiB
		ReadMemory: func() (policy.Observations, error) { return next, nil },
		Urgent:     func() { urgent++ },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	pacer := newPollPacer(5*time.Millisecond, 1<<30)
	t0 := time.Now()
	steps := []struct {
		name     string
		at       time.Duration
		headroom int64
		want     bool
	}{
		{"first read, 900 MiB away", 0, 900 * mi, false},
		{"steady", 100 * time.Millisecond, 900 * mi, false},
		{"rising", 200 * time.Millisecond, 1000 * mi, false},
		{"falling 100 MiB in 100 ms: 900 MiB away, reached in 0.9 s, 0.45 s at twice the rate", 300 * time.Millisecond, 900 * mi, true},
		{"falling 60 MiB in 100 ms: 840 MiB away, 0.7 s at twice the rate", 400 * time.Millisecond, 840 * mi, true},
		{"falling 30 MiB in 100 ms: 810 MiB away, 1.35 s at twice the rate", 500 * time.Millisecond, 810 * mi, false},
	}
	met := map[string]bool{}
	for _, s := range steps {
		next = policy.Observations{policy.SignalMemoryAvailable: {Available: 500*mi + s.headroom, Capacity: 4000 * mi, Time: t0.Add(s.at)}}
		urgent = 0
		m.pollRead(met, "", pacer)
		pacer.next(next, th, 100*time.Millisecond, time.Second, nil)
		if (urgent > 0) != s.want {
			t.Errorf("%s: Urgent called %d times, want called=%v", s.name, urgent, s.want)
		}
	}
}
