package notify

import (
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

func TestPollPacerShortensNearAThresholdAndWithTheRateOfApproach(t *testing.T) {
	const mi = int64(1) << 20
	base := 100 * time.Millisecond
	ts := []Threshold{
		{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 100 * mi},
		{Signal: policy.SignalAllocatableMemoryAvailable, Hard: false, Available: 200 * mi},
		{Signal: policy.SignalMemoryAvailable, Hard: true, Percentage: 0.05}, // 50Mi of 1000Mi
	}
	t0 := time.Unix(1000, 0)
	obs := func(at time.Duration, alloc, node int64) policy.Observations {
		return policy.Observations{
			policy.SignalAllocatableMemoryAvailable: {Available: alloc, Capacity: 1000 * mi, Time: t0.Add(at)},
			policy.SignalMemoryAvailable:            {Available: node, Capacity: 1000 * mi, Time: t0.Add(at)},
		}
	}
	p := newPollPacer(5*time.Millisecond, 1<<30)
	steps := []struct {
		name        string
		at          time.Duration
		alloc, node int64
		want        time.Duration
	}{
		// Minutes apart, the signals move slower than the assumed 1Gi/s ramp
		// (which covers 1Mi in ~0.98ms): the nearest headroom sets the period.
		{"far from every threshold: the base period", 0, 900 * mi, 900 * mi, base},
		{"idle, still far", 10 * time.Second, 900 * mi, 900 * mi, base},
		{"50Mi above the soft threshold", 20 * time.Second, 250 * mi, 900 * mi, time.Duration(float64(50*mi) / (1 << 30) * float64(time.Second))},
		{"node 20Mi above its 5%", 30 * time.Second, 250 * mi, 70 * mi, time.Duration(float64(20*mi) / (1 << 30) * float64(time.Second))},
		{"soft met: the hard one, 50Mi away, counts", 40 * time.Second, 150 * mi, 900 * mi, time.Duration(float64(50*mi) / (1 << 30) * float64(time.Second))},
		// falling 10Mi in 10ms (1000Mi/s) reads at half its time to the
		// threshold: 40Mi at 2000Mi/s = 20ms, sooner than 40Mi at 1Gi/s.
		{"falling faster than the assumed ramp", 40*time.Second + 10*time.Millisecond, 140 * mi, 900 * mi, 20 * time.Millisecond},
		{"never below the minimum", 41 * time.Second, 100*mi + 1, 900 * mi, 5 * time.Millisecond},
		{"every threshold met: the base period", 42 * time.Second, 50 * mi, 10 * mi, base},
	}
	for _, s := range steps {
		got := p.next(obs(s.at, s.alloc, s.node), ts, base)
		if diff := got - s.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: next read in %v, want %v", s.name, got, s.want)
		}
	}
	if got := newPollPacer(5*time.Millisecond, 1<<30).next(nil, ts, base); got != base {
		t.Errorf("after a failed read: %v, want the base period %v", got, base)
	}
	if got := newPollPacer(50*time.Millisecond, 1<<30).next(obs(0, 100*mi+1, 900*mi), ts, 20*time.Millisecond); got != 20*time.Millisecond {
		t.Errorf("minimum above a reloaded shorter base: %v, want the base 20ms", got)
	}
}

func TestPollPacingOptionsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{PollMinInterval: 200 * time.Millisecond}, "pollMinInterval=200ms: must be within 1ms..pollInterval (100ms)"},
		{Options{PollMinInterval: time.Microsecond}, "pollMinInterval=1µs"},
		{Options{PollRampRate: -1}, "pollRampRate=-1: must be > 0"},
	} {
		err := tc.opts.withDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.opts, err, tc.want)
		}
	}
	d := Options{PollInterval: 20 * time.Millisecond}.withDefaults()
	if d.PollMinInterval != 5*time.Millisecond || d.PollRampRate != 1<<30 {
		t.Errorf("defaults: min %v rate %d", d.PollMinInterval, d.PollRampRate)
	}
	if d := (Options{PollInterval: 10 * time.Millisecond, PollMinInterval: 0}).withDefaults(); d.Validate() != nil {
		t.Errorf("a 10ms poll with the default minimum does not validate: %v", d.Validate())
	}
}

// Near a pid.available threshold the pacer assumes PollPIDRampRate tasks a
// second from rest, not the memory ramp in bytes (which would read at the
// minimum period whenever a PID threshold exists).
func TestPollPacerUsesThePIDRampForPIDs(t *testing.T) {
	base := 100 * time.Millisecond
	ts := []Threshold{{Signal: policy.SignalPIDAvailable, Hard: true, Available: 30000}}
	t0 := time.Unix(1000, 0)
	p := newPollPacer(5*time.Millisecond, 1<<30)
	obs := func(at time.Duration, avail int64) policy.Observations {
		return policy.Observations{policy.SignalPIDAvailable: {Available: avail, Capacity: 32768, Time: t0.Add(at)}}
	}
	if got := p.next(obs(0, 32000), ts, base); got != base {
		t.Errorf("2000 PIDs above the threshold (200ms at 10000/s): next read in %v, want the base %v", got, base)
	}
	if got, want := p.next(obs(10*time.Second, 30500), ts, base), 50*time.Millisecond; got != want {
		t.Errorf("500 PIDs above: next read in %v, want %v", got, want)
	}
	// 100 tasks in 10ms (10000/s): read at half the time to the threshold
	// (twice the measured rate, 20000/s): 400 above, 20ms.
	if got, want := p.next(obs(10*time.Second+10*time.Millisecond, 30400), ts, base), 20*time.Millisecond; got-want > time.Microsecond || want-got > time.Microsecond {
		t.Errorf("falling 10000/s, 400 above: next read in %v, want %v", got, want)
	}
}
