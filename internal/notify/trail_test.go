package notify

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

// TestPollLogsItsTrailWhenAMemoryThresholdIsMet: the read that first finds a
// memory threshold met logs the reads before it (their offsets, headroom and
// the waits the pacer gave them), once per crossing, and a PID crossing or a
// read that stays met logs nothing.
func TestPollLogsItsTrailWhenAMemoryThresholdIsMet(t *testing.T) {
	const mi = 1 << 20
	var next policy.Observations
	var readErr error
	var logs bytes.Buffer
	m, err := New(Options{
		Thresholds: []Threshold{
			{Signal: policy.SignalMemoryAvailable, Hard: true, Available: 100 * mi},
			{Signal: policy.SignalPIDAvailable, Hard: true, Available: 1000},
		},
		ReadMemory: func() (policy.Observations, error) { return next, readErr },
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		Metrics:    NewMetrics(),
	}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	met := map[string]bool{}
	read := func(at time.Duration, mem, pids int64, wait time.Duration) {
		next, readErr = policy.Observations{
			policy.SignalMemoryAvailable: {Available: mem, Capacity: 1000 * mi, Time: t0.Add(at)},
			policy.SignalPIDAvailable:    {Available: pids, Capacity: 30000, Time: t0.Add(at)},
		}, nil
		m.pollOnce(met, "")
		m.trail.paced(wait)
	}
	read(0, 400*mi, 5000, 100*time.Millisecond)
	read(100*time.Millisecond, 300*mi, 500, 50*time.Millisecond) // PID crossing: no trail
	readErr = errors.New("cgroupfs gone")
	m.pollOnce(met, "")
	if logs.Len() != 0 && strings.Contains(logs.String(), "memory threshold met") {
		t.Fatalf("logged a trail before any memory crossing: %s", logs.String())
	}
	read(250*time.Millisecond, 90*mi, 500, 5*time.Millisecond)
	read(255*time.Millisecond, 80*mi, 500, 5*time.Millisecond) // still met: no second line

	lines := strings.Count(logs.String(), "fast poll: memory threshold met")
	if lines != 1 {
		t.Fatalf("%d trail lines, want 1:\n%s", lines, logs.String())
	}
	got := logs.String()
	for _, want := range []string{
		"-250ms headroom 300MiB read ",
		"-150ms headroom 200MiB read ",
		" wait 100ms; -150ms headroom 200MiB read ",
		" wait 50ms; ",
		"0s headroom -10MiB read ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("trail lacks %q:\n%s", want, got)
		}
	}
}

func TestPollTrailKeepsTheLastEightReads(t *testing.T) {
	var tr pollTrail
	t0 := time.Now()
	for i := range 20 {
		tr.queue(20 * time.Microsecond)
		tr.record(t0.Add(time.Duration(i)*time.Millisecond), int64(i)<<20, 300*time.Microsecond)
		tr.paced(time.Millisecond)
	}
	got := tr.String()
	if n := strings.Count(got, ";") + 1; n != 8 {
		t.Fatalf("%d reads kept, want 8: %s", n, got)
	}
	if !strings.HasPrefix(got, "-7ms headroom 12MiB queued 20µs read 300µs wait 1ms") || !strings.HasSuffix(got, "0s headroom 19MiB queued 20µs read 300µs wait 1ms") {
		t.Errorf("trail = %s", got)
	}
}
