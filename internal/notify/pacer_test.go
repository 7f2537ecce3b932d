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
		got := p.next(obs(s.at, s.alloc, s.node), ts, base, base, nil)
		if diff := got - s.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: next read in %v, want %v", s.name, got, s.want)
		}
	}
	if got := newPollPacer(5*time.Millisecond, 1<<30).next(nil, ts, base, time.Second, nil); got != base {
		t.Errorf("after a failed read: %v, want the base period %v", got, base)
	}
	if got := newPollPacer(50*time.Millisecond, 1<<30).next(obs(0, 100*mi+1, 900*mi), ts, 20*time.Millisecond, 20*time.Millisecond, nil); got != 20*time.Millisecond {
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
	if got := p.next(obs(0, 32000), ts, base, base, nil); got != base {
		t.Errorf("2000 PIDs above the threshold (200ms at 10000/s): next read in %v, want the base %v", got, base)
	}
	if got, want := p.next(obs(10*time.Second, 30500), ts, base, base, nil), 50*time.Millisecond; got != want {
		t.Errorf("500 PIDs above: next read in %v, want %v", got, want)
	}
	// 100 tasks in 10ms (10000/s): read at half the time to the threshold
	// (twice the measured rate, 20000/s): 400 above, 20ms.
	if got, want := p.next(obs(10*time.Second+10*time.Millisecond, 30400), ts, base, base, nil), 20*time.Millisecond; got-want > time.Microsecond || want-got > time.Microsecond {
		t.Errorf("falling 10000/s, 400 above: next read in %v, want %v", got, want)
	}
}

// Far from every threshold the pacer waits up to the idle period, but only as
// long as a ramp idleRampFactor times the assumed one could not reach a
// threshold; a met threshold, a signal missing from the reading or a failed
// read bring it back to the base period.
func TestPollPacerWaitsLongerOnlyWhereAFasterRampCouldNotArrive(t *testing.T) {
	const mi, gi = int64(1) << 20, int64(1) << 30
	base, idle := 100*time.Millisecond, time.Second
	mem := Threshold{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 100 * mi}
	pids := Threshold{Signal: policy.SignalPIDAvailable, Hard: true, Available: 1000}
	t0 := time.Unix(1000, 0)
	obs := func(at time.Duration, alloc, pid int64) policy.Observations {
		o := policy.Observations{policy.SignalAllocatableMemoryAvailable: {Available: alloc, Capacity: 16 * gi, Time: t0.Add(at)}}
		if pid >= 0 {
			o[policy.SignalPIDAvailable] = policy.Observation{Available: pid, Capacity: 4194304, Time: t0.Add(at)}
		}
		return o
	}
	ts := []Threshold{mem, pids}
	for _, s := range []struct {
		name       string
		alloc, pid int64
		want       time.Duration
	}{
		{"8Gi and 80000 PIDs of headroom: the idle period", 8*gi + 100*mi, 81000, idle},
		{"4Gi: what 8Gi/s covers in 500ms", 4*gi + 100*mi, 81000, 500 * time.Millisecond},
		{"20000 PIDs: what 40000/s covers in 500ms", 8 * gi, 21000, 500 * time.Millisecond},
		{"600Mi: 8Gi/s would need 73ms, the base period holds", 700 * mi, 81000, base},
		{"50Mi: the proximity rule as before", 150 * mi, 31000, time.Duration(float64(50*mi) / float64(gi) * float64(time.Second))},
		{"PID threshold met: the base period", 8 * gi, 500, base},
		{"pid.available missing from the reading: the base period", 8 * gi, -1, base},
	} {
		p := newPollPacer(5*time.Millisecond, gi)
		if got := p.next(obs(0, s.alloc, s.pid), ts, base, idle, nil); got-s.want > time.Microsecond || s.want-got > time.Microsecond {
			t.Errorf("%s: next read in %v, want %v", s.name, got, s.want)
		}
	}
	// A threshold the kernel watches (an armed memcg threshold): the poll reads
	// only for the brake's rate history, before a ramp of 4 × the assumed one
	// could arrive, not 8 ×; the unwatched PID threshold keeps its own bound.
	for _, s := range []struct {
		name    string
		alloc   int64
		watched []bool
		want    time.Duration
	}{
		{"2Gi, not watched: what 8Gi/s covers", 2*gi + 100*mi, nil, 250 * time.Millisecond},
		{"2Gi, watched by the kernel: what 4Gi/s covers", 2*gi + 100*mi, []bool{true, false}, 500 * time.Millisecond},
		{"2Gi, only the PID threshold watched", 2*gi + 100*mi, []bool{false, true}, 250 * time.Millisecond},
	} {
		p := newPollPacer(5*time.Millisecond, gi)
		if got := p.next(obs(0, s.alloc, 81000), ts, base, idle, s.watched); got-s.want > time.Microsecond || s.want-got > time.Microsecond {
			t.Errorf("%s: next read in %v, want %v", s.name, got, s.want)
		}
	}
	// Falling at 3Gi/s between two reads 1s apart, 5Gi above: half the time
	// to the threshold at the measured rate's double, not the idle period.
	p := newPollPacer(5*time.Millisecond, gi)
	p.next(obs(0, 8*gi+100*mi, 31000), ts, base, idle, nil)
	if got, want := p.next(obs(time.Second, 5*gi+100*mi, 31000), ts, base, idle, nil), time.Second*5/(idleRampFactorMemory*6); got-want > time.Microsecond || want-got > time.Microsecond {
		t.Errorf("falling 3Gi/s, 5Gi above: next read in %v, want %v", got, want)
	}
	if got := newPollPacer(5*time.Millisecond, gi).next(nil, ts, base, idle, nil); got != base {
		t.Errorf("after a failed read: %v, want the base period", got)
	}
	if got := newPollPacer(5*time.Millisecond, gi).next(obs(0, 8*gi, 31000), ts, base, base, nil); got != base {
		t.Errorf("idle period = base period (pollIdleInterval = pollInterval): %v, want %v", got, base)
	}
}

// rampDelayWith runs the pacer against a linear ramp of one signal on a virtual
// clock: available starts at start, and from rampAt falls at rate per second;
// it returns how long after the crossing (available below the threshold) the
// first read that sees it comes.
func rampDelayWith(th Threshold, start int64, capacity int64, rate float64, rampAt time.Duration, idle time.Duration) time.Duration {
	p := newPollPacer(DefaultPollMinInterval, DefaultPollRampRate)
	t0 := time.Unix(1000, 0)
	limit := th.resolve(capacity)
	at := func(t time.Duration) int64 {
		if t <= rampAt {
			return start
		}
		return start - int64(rate*(t-rampAt).Seconds())
	}
	crossing := rampAt + time.Duration(float64(start-limit)/rate*float64(time.Second))
	for now := time.Duration(0); now < time.Hour; {
		v := at(now)
		if v < limit {
			return now - crossing
		}
		now += p.next(policy.Observations{th.Signal: {Available: v, Capacity: capacity, Time: t0.Add(now)}}, []Threshold{th}, DefaultPollInterval, idle, nil)
	}
	return time.Hour
}

// The decision rule's promise, on a virtual clock: for ramps up to
// idleRampFactor × the assumed ramp, starting at any phase of the poll far
// from the threshold, the worst delay from the crossing to the read that sees
// it is no longer with the idle period (1s) than with the base period alone
// (100ms, the pacer before the idle rule); faster ramps are seen at most the
// idle period after the crossing.
func TestPollPacerIdleRuleDoesNotDelayRampsUpToItsFactorTimesTheAssumedOne(t *testing.T) {
	const mi, gi = int64(1) << 20, int64(1) << 30
	worst := func(th Threshold, start, capacity int64, rate float64, idle time.Duration) time.Duration {
		var w time.Duration
		// The ramp starts at 200 phases spread over 2s after a settled start.
		for i := range 200 {
			rampAt := 10*time.Second + time.Duration(i)*10*time.Millisecond + time.Duration(i%7)*time.Millisecond/7
			w = max(w, rampDelayWith(th, start, capacity, rate, rampAt, idle))
		}
		return w
	}
	mem := Threshold{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 500 * mi}
	pid := Threshold{Signal: policy.SignalPIDAvailable, Hard: true, Percentage: 0.05}
	for _, c := range []struct {
		name            string
		th              Threshold
		start, capacity int64
		rates           []float64
		unit            float64
		factor          float64 // the idle rule's: no ramp up to factor × the assumed one is seen later
	}{
		{"memory, 7.5Gi of headroom", mem, 8 * gi, 16 * gi, []float64{0.1, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8}, float64(gi), idleRampFactorMemory},
		{"memory, 1.5Gi of headroom", mem, 2 * gi, 16 * gi, []float64{0.1, 1, 2, 4, 8}, float64(gi), idleRampFactorMemory},
		{"PIDs, 30000 of headroom", pid, 31000 + 1638, 32768, []float64{0.1, 1, 2, 4}, PollPIDRampRate, idleRampFactor},
	} {
		for _, k := range c.rates {
			rate := k * c.unit
			before := worst(c.th, c.start, c.capacity, rate, DefaultPollInterval)
			after := worst(c.th, c.start, c.capacity, rate, DefaultPollIdleInterval)
			t.Logf("%s, ramp %.1f× the assumed: worst crossing → read %v with the idle rule, %v before", c.name, k, after, before)
			// Both see the crossing at the first read at the minimum period
			// (plus one step of the signal: PIDs are whole): which read that
			// is depends on the phase, within a fraction of a millisecond.
			if after > max(before, DefaultPollMinInterval)+time.Millisecond {
				t.Errorf("%s, ramp %.1f× the assumed: worst crossing → read %v with the idle rule, %v without", c.name, k, after, before)
			}
		}
		for _, k := range []float64{2 * c.factor, 100} {
			before := worst(c.th, c.start, c.capacity, k*c.unit, DefaultPollInterval)
			after := worst(c.th, c.start, c.capacity, k*c.unit, DefaultPollIdleInterval)
			t.Logf("%s, ramp %.0f× the assumed: worst crossing → read %v with the idle rule, %v before", c.name, k, after, before)
			if after > DefaultPollIdleInterval {
				t.Errorf("%s, ramp %.0f× the assumed: worst crossing → read %v, more than the idle period", c.name, k, after)
			}
		}
	}
}
