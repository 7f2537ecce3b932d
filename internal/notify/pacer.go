package notify

import (
	"fmt"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

// idleRampFactor: the poll waits longer than PollInterval (up to
// PollIdleInterval) only while a ramp this many times the assumed one
// (PollRampRate, PollPIDRampRate) could not reach a threshold before the next
// read: 4 GiB/s of disk use and 40000 PIDs/s at the defaults, above the
// fastest ramps measured on this project's machine (make bench-ramp: a disk
// filler at 300-420 MiB/s, a fork loop at about 10000 tasks/s). Memory has
// its own factor where the poll alone sees the crossing
// (idleRampFactorMemory).
const idleRampFactor = 4

// idleRampFactorMemory replaces idleRampFactor for a memory threshold that no
// armed memcg threshold notification watches (cgroup v2; v1 with memcg
// thresholds off): 8 GiB/s at the default assumed ramp. Two hogs at "max"
// reach 4.5-5.0 GiB/s on the quiet machine (2026-11-26); with the factor 4
// such a ramp from 2.4 GiB away crossed within one idle wait and the poll read
// it 26-61 ms and 150-341 MiB past the threshold (make bench-ramp, setup
// brake-poll: the cgroup v2 node's paths on this v1 one). Where a memcg
// notification watches the threshold the kernel wakes the loop at the
// crossing whatever the poll does, and the poll reads only for the brake's
// rate history, for which 4 was dense enough (issue 30's grids: 60 runs
// without an OOM kill).
const idleRampFactorMemory = 8

// pollPacer chooses when the fast poll reads next. cgroup v2 has no memcg
// threshold events, so on v2 the poll is what sees a ramp of memory use
// reach a threshold; a fixed 100 ms period would let a fast ramp run for up
// to 100 ms past it. The pacer shortens the period as a signal nears a
// threshold and as its rate of approach grows, so that the first read after
// a crossing comes at most MinInterval after it, and lengthens it while
// every signal is far from its thresholds, where reading every PollInterval
// would cost CPU on every node of a fleet for nothing:
//
//   - proximity: the next read comes before a ramp at RampRate (the fastest
//     ramp assumed possible from rest) could cover the remaining headroom:
//     headroom / RampRate;
//   - approach: a signal falling faster than RampRate (measured between the
//     last two reads) is read again at half its time to the threshold;
//   - idle: where proximity allows more than the base period, the next read
//     comes before a ramp at idleRampFactor × RampRate could cover the
//     headroom, and at the latest after the idle period. A ramp up to that
//     rate that starts right after a read is therefore read again no later
//     than at its crossing, and from that read on the two rules above pace
//     the poll as they did with a fixed base period: for such ramps the
//     first read after a crossing comes no later than before. A faster ramp
//     (or a step) from far away is read at most the idle period after the
//     read before it, instead of the base period.
//
// Both shrink geometrically toward the crossing, down to MinInterval; a
// threshold that is met already, a signal missing from a reading, or a
// failed read are read again at the base period (the loop is awake and
// acting; a wake when it stops being met is not urgent).
type pollPacer struct {
	min      time.Duration
	rampRate float64 // bytes per second
	last     map[policy.Signal]policy.Observation
}

func newPollPacer(min time.Duration, rampRate int64) *pollPacer {
	return &pollPacer{min: min, rampRate: float64(rampRate), last: map[policy.Signal]policy.Observation{}}
}

// next returns the delay before the next read, at most idle (and at most
// base unless every threshold is far).
//
// watched[i] says that a memcg threshold notification watches
// thresholds[i] (idleRampFactorMemory); nil watches none.
func (p *pollPacer) next(obs policy.Observations, thresholds []Threshold, base, idle time.Duration, watched []bool) time.Duration {
	idle = max(idle, base)
	if obs == nil {
		return base // a failed read
	}
	d := idle
	for i, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			d = min(d, base)
			continue
		}
		headroom := float64(o.Available - t.resolve(o.Capacity))
		if headroom < 0 {
			d = min(d, base) // met
			continue
		}
		rate := p.rampRate
		if t.Signal == policy.SignalPIDAvailable {
			rate = PollPIDRampRate
		}
		rate = max(rate, 2*p.falling(t.Signal, o)) // half the time to the threshold at the measured rate
		near := time.Duration(headroom / rate * float64(time.Second))
		if near > base {
			// Far: before a ramp idleRampFactor times faster could get there.
			factor := float64(idleRampFactor)
			if isMemory(t.Signal) && (i >= len(watched) || !watched[i]) {
				factor = idleRampFactorMemory
			}
			near = max(base, time.Duration(headroom/(factor*rate)*float64(time.Second)))
		}
		d = min(d, near)
	}
	for sig, o := range obs {
		p.last[sig] = o
	}
	return max(d, min(p.min, base))
}

// falling is how fast sig's available amount fell from the read before to
// o, per second (0 without a read before; negative when it rose). Valid
// between a read and the next call of next, which makes o the read before.
func (p *pollPacer) falling(sig policy.Signal, o policy.Observation) float64 {
	prev, ok := p.last[sig]
	if !ok || !o.Time.After(prev.Time) {
		return 0
	}
	return float64(prev.Available-o.Available) / o.Time.Sub(prev.Time).Seconds()
}

// describe is the poll's status detail.
func (p *pollPacer) describe(base, idle time.Duration) string {
	if p.min >= base && idle <= base {
		return fmt.Sprintf("every %v", base)
	}
	s := fmt.Sprintf("every %v", base)
	if p.min < base {
		s += fmt.Sprintf(", down to %v near a threshold (assumed ramp %d MiB/s, %d PIDs/s)", p.min, int64(p.rampRate)>>20, PollPIDRampRate)
	}
	if idle > base {
		s += fmt.Sprintf(", up to %v while a ramp %d times as fast could not reach one", idle, idleRampFactor)
	}
	return s
}

// isMemory: a memory signal, which memcg threshold notifications can watch.
func isMemory(sig policy.Signal) bool {
	return sig == policy.SignalMemoryAvailable || sig == policy.SignalAllocatableMemoryAvailable
}
