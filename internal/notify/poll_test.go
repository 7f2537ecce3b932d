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
