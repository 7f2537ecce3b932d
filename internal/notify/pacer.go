package notify

import (
	"fmt"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

// pollPacer chooses when the fast poll reads next. cgroup v2 has no memcg
// threshold events, so on v2 the poll is what sees a ramp of memory use
// reach a threshold; a fixed 100 ms period would let a fast ramp run for up
// to 100 ms past it. The pacer keeps the fixed period where nothing is near
// (the idle cost is unchanged) and shortens it as a signal nears a threshold
// and as its rate of approach grows, so that the first read after a crossing
// comes at most MinInterval after it:
//
//   - proximity: the next read comes before a ramp at RampRate (the fastest
//     ramp assumed possible from rest) could cover the remaining headroom:
//     headroom / RampRate;
//   - approach: a signal falling faster than RampRate (measured between the
//     last two reads) is read again at half its time to the threshold.
//
// Both shrink geometrically toward the crossing, down to MinInterval; a
// threshold that is met already is read at the base period (the loop is
// awake and acting; a wake when it stops being met is not urgent).
type pollPacer struct {
	min      time.Duration
	rampRate float64 // bytes per second
	last     map[policy.Signal]policy.Observation
}

func newPollPacer(min time.Duration, rampRate int64) *pollPacer {
	return &pollPacer{min: min, rampRate: float64(rampRate), last: map[policy.Signal]policy.Observation{}}
}

// next returns the delay before the next read, at most base.
func (p *pollPacer) next(obs policy.Observations, thresholds []Threshold, base time.Duration) time.Duration {
	d := base
	for _, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		headroom := float64(o.Available - t.resolve(o.Capacity))
		if headroom < 0 {
			continue // met
		}
		rate := p.rampRate
		if t.Signal == policy.SignalPIDAvailable {
			rate = PollPIDRampRate
		}
		if prev, ok := p.last[t.Signal]; ok && o.Time.After(prev.Time) {
			falling := float64(prev.Available-o.Available) / o.Time.Sub(prev.Time).Seconds()
			rate = max(rate, 2*falling) // half the time to the threshold at the measured rate
		}
		if rate > 0 {
			d = min(d, time.Duration(headroom/rate*float64(time.Second)))
		}
	}
	for sig, o := range obs {
		p.last[sig] = o
	}
	return max(d, min(p.min, base))
}

// describe is the poll's status detail.
func (p *pollPacer) describe(base time.Duration) string {
	if p.min >= base {
		return fmt.Sprintf("every %v", base)
	}
	return fmt.Sprintf("every %v, down to %v near a threshold (assumed ramp %d MiB/s, %d PIDs/s)", base, p.min, int64(p.rampRate)>>20, PollPIDRampRate)
}
