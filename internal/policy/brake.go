package policy

import (
	"fmt"
	"time"
)

// The brake: predictive hard-pressure handling. From consecutive fresh
// readings the engine knows how fast a signal falls; for a met hard
// threshold it estimates the time until the resource is gone (available
// reaches zero: the kubepods limit or the node's memory, pid_max or kubepods'
// pids.max when nearer, a full filesystem) and compares it with how long the normal eviction path takes
// on this node. When the resource would run out first, the agent freezes the
// victim's pod cgroup before it requests the eviction and kills it on the
// node once the API server accepts it (internal/brake does the cgroup part).

// Brake defaults.
const (
	DefaultBrakeInitialEvictionPath = 2 * time.Second
	DefaultBrakeSafetyFactor        = 1.5
	DefaultBrakeMaxFreeze           = 15 * time.Second
	DefaultBrakeSampleInterval      = 10 * time.Millisecond

	// BrakeEvictionPathMeasured is brake.evictionPath's value for "measured on
	// this node" (the default).
	BrakeEvictionPathMeasured = "measured"

	// brakeHistory is how many readings per signal the rate estimate keeps,
	// and brakeHistoryWindow how old the oldest may be. Enough for the
	// sustained window at the fast poll's fastest pace near a threshold (one
	// reading per 5 ms: 100 in 500 ms).
	brakeHistory       = 128
	brakeHistoryWindow = 5 * time.Second
	// brakeResampleSpans: a rate measured over more than this many
	// SampleIntervals may average a ramp that began within it with the calm
	// before, and understate it; when such a rate does not fire, the agent
	// reads again after SampleInterval to know the rate now. (A rate that
	// fires even so is only understated: the brake is right to fire.)
	brakeResampleSpans = 2
	// brakeRateWindow: the rate is the fastest fall from the newest reading
	// to each one from sampleInterval up to this much older.
	brakeRateWindow = 100 * time.Millisecond
	// brakeSustainedWindow: while the signal still falls over its latest
	// span, the falls from the newest reading to those up to this much older
	// count too: a writer starved of CPU ramps in fast and slow phases (issue
	// 30's busy node: a hog achieving 500 MiB/s was measured under the
	// brake's bar over the last 100 ms at the crossing, left to the graceful
	// path and frozen by the watch 67-135 ms later, when it sped up again),
	// and its sustained rate shows across a slow phase. A signal that no
	// longer falls (a writer that stopped, a frozen pod) is not judged on
	// its past.
	brakeSustainedWindow = 500 * time.Millisecond
	// evictionPathWeight is the weight of a new measurement in the moving
	// estimate of the eviction path.
	evictionPathWeight = 0.3
)

// BrakeConfig is the compiled BrakeSettings.
type BrakeConfig struct {
	Enabled bool
	// EvictionPath, when non-zero, is the configured duration of the normal
	// eviction path (request -> victim gone); zero means measured on this
	// node, starting from InitialEvictionPath.
	EvictionPath        time.Duration
	InitialEvictionPath time.Duration
	// SafetyFactor: brake when time to exhaustion < SafetyFactor × path.
	SafetyFactor float64
	// MaxFreeze bounds how long a pod stays frozen.
	MaxFreeze time.Duration
	// SampleInterval is how soon the agent reads again when the rate it has
	// spans too long a time to be trusted.
	SampleInterval time.Duration
	// Realtime: the agent's threads run SCHED_FIFO near and at a hard
	// threshold (brake.realtime.enabled).
	Realtime bool
}

// BrakeDecision is the brake's verdict on one pass's starved threshold.
type BrakeDecision struct {
	Signal Signal `json:"signal,omitempty"`
	// Fire: freeze the chosen victim now, then request its eviction; kill it
	// on the node when the eviction is accepted.
	Fire bool `json:"fire"`
	// Resample: not firing on a falling signal, or the rate not known well
	// enough (none, or averaged over more than two SampleIntervals); read
	// again after SampleInterval before the graceful path.
	Resample bool `json:"resample,omitempty"`
	// Rate is how fast available falls, in the signal's unit per second
	// (negative: it rises). Zero with RateSpan zero: unknown.
	Rate     float64       `json:"rate"`
	RateSpan time.Duration `json:"rateSpan"`
	// TimeToExhaustion is available / rate; -1 when the signal does not fall.
	TimeToExhaustion time.Duration `json:"timeToExhaustion"`
	// EvictionPath is the normal path's duration compared against, and
	// PathSource where it comes from ("configured", "measured", "initial").
	EvictionPath time.Duration `json:"evictionPath"`
	PathSource   string        `json:"pathSource,omitempty"`
	// Reason explains the verdict in words a user can check.
	Reason string `json:"reason"`
}

// brakeState is the engine's memory for the brake: recent readings per
// signal and the measured eviction path.
type brakeState struct {
	history      map[Signal][]Observation
	measuredPath time.Duration // moving estimate; zero until the first measurement
	measurements int
}

// Brakeable reports whether a signal has a point where the resource is gone
// (available reaches zero) that the brake can race against: every kubelet
// signal; not PSI, whose "available" is headroom below 100% stall.
func (s Signal) Brakeable() bool { return s.Valid() && !s.IsPSI() }

// recordHistory keeps the fresh readings of a pass for the rate estimate.
func (b *brakeState) recordHistory(obs Observations, now time.Time) {
	if b.history == nil {
		b.history = map[Signal][]Observation{}
	}
	for sig, o := range obs {
		if !sig.Brakeable() {
			continue
		}
		h := b.history[sig]
		if n := len(h); n > 0 && !o.Time.After(h[n-1].Time) {
			continue // not a new reading
		}
		h = append(h, o)
		drop := 0
		for drop < len(h)-1 && (len(h)-drop > brakeHistory || now.Sub(h[drop].Time) > brakeHistoryWindow) {
			drop++
		}
		if drop > 0 { // in place: a pass at 110 pods allocated the whole history again per reading
			h = h[:copy(h, h[drop:])]
		}
		b.history[sig] = h
	}
}

// fallRate estimates how fast available falls from a signal's readings: the
// fastest fall from the newest reading to each earlier one between minSpan
// and window older, and, while the signal still falls over the shortest of
// those spans, up to sustained older. Never over less than minSpan (the
// kernel's counters are batched: over microseconds the noise is a rate of
// its own); the fastest of several spans because a ramp is understated both
// over a long span (averaged with the calm before it began) and over a short
// one (a writer descheduled for a few milliseconds: make bench-ramp saw a
// 2.3 GiB/s hog measured at 290 MiB/s over 17 ms; or starved of CPU for a
// hundred: issue 30). When no reading is that recent, the slope to the latest
// one older than minSpan. shortest is the shortest span looked at: how recent
// the estimate is. ok is false when no reading is minSpan older.
func fallRate(h []Observation, minSpan, window, sustained time.Duration) (rate float64, span, shortest time.Duration, ok bool) {
	if len(h) < 2 {
		return 0, 0, 0, false
	}
	newest := h[len(h)-1]
	falling := false // over the shortest span
	for i := len(h) - 2; i >= 0; i-- {
		s := newest.Time.Sub(h[i].Time)
		if s < minSpan {
			continue
		}
		if ok && s > window && (s > sustained || !falling) {
			break
		}
		r := float64(h[i].Available-newest.Available) / s.Seconds()
		if !ok || r > rate {
			rate, span = r, s
		}
		if !ok {
			shortest, ok, falling = s, true, r > 0
		}
		if s > window && s == shortest { // none within the window: the latest older one alone
			break
		}
	}
	return rate, span, shortest, ok
}

// timeToExhaustion is how long until available reaches zero at rate; -1
// when it does not fall. Already at or below zero: 0.
func timeToExhaustion(available int64, rate float64) time.Duration {
	if rate <= 0 {
		return -1
	}
	if available <= 0 {
		return 0
	}
	secs := float64(available) / rate
	if secs > float64(24*time.Hour/time.Second) {
		return 24 * time.Hour
	}
	return time.Duration(secs * float64(time.Second))
}

// evictionPath is the normal eviction path's duration the brake compares
// with, and where it comes from.
func (e *Engine) evictionPath() (time.Duration, string) {
	cfg := e.cfg.Brake
	switch {
	case cfg.EvictionPath > 0:
		return cfg.EvictionPath, "configured"
	case e.brake.measurements > 0:
		return e.brake.measuredPath, "measured"
	}
	return cfg.InitialEvictionPath, "initial"
}

// EvictionPath is the moving estimate of the normal eviction path (request
// accepted -> pod gone) measured on this node, or the configured one; for
// the metric.
func (e *Engine) EvictionPath() (time.Duration, string) { return e.evictionPath() }

// observeEvictionPath feeds one measured request -> gone duration of a
// graceful eviction into the moving estimate.
func (e *Engine) observeEvictionPath(d time.Duration) {
	if d <= 0 {
		return
	}
	b := &e.brake
	if b.measurements == 0 {
		b.measuredPath = d
	} else {
		b.measuredPath = time.Duration(evictionPathWeight*float64(d) + (1-evictionPathWeight)*float64(b.measuredPath))
	}
	b.measurements++
}

// Brake decides whether the pass's starved threshold calls for the brake.
// It never fires for soft thresholds, PSI signals, stale readings, or a
// signal that does not fall fast enough to run out before the normal path
// completes: slow ramps keep the graceful path.
func (e *Engine) Brake(a *Assessment) BrakeDecision {
	cfg := e.cfg.Brake
	d := BrakeDecision{TimeToExhaustion: -1}
	d.EvictionPath, d.PathSource = e.evictionPath()
	s := a.Starved
	switch {
	case s == nil:
		d.Reason = "no threshold to act on"
		return d
	case !cfg.Enabled:
		d.Signal, d.Reason = s.Threshold.Signal, "brake disabled (brake.enabled: false)"
		return d
	}
	sig := s.Threshold.Signal
	d.Signal = sig
	switch {
	case !s.Threshold.Hard():
		d.Reason = "soft threshold: graceful path"
		return d
	case !sig.Brakeable():
		d.Reason = fmt.Sprintf("%s has no point of exhaustion to race against", sig)
		return d
	case !s.Fresh:
		d.Reason = "reading not fresh"
		return d
	}
	rate, span, shortest, ok := fallRate(e.brake.history[sig], cfg.SampleInterval, brakeRateWindow, brakeSustainedWindow)
	if !ok {
		d.Resample = true
		d.Reason = fmt.Sprintf("no rate yet: one reading of %s; reading again in %v", sig, cfg.SampleInterval)
		return d
	}
	d.Rate, d.RateSpan = rate, span
	h := e.brake.history[sig]
	// The newest reading (a resample's), to the nearer wall: a fork bomb in a
	// kubepods with pids.max runs out at that limit, long before pid_max.
	newest := h[len(h)-1]
	d.TimeToExhaustion = timeToExhaustion(newest.Left(), rate)
	limit := time.Duration(cfg.SafetyFactor * float64(d.EvictionPath))
	rateText := FormatRate(sig, rate)
	gone := "gone"
	if newest.Left() < newest.Available {
		gone = fmt.Sprintf("at kubepods' limit (%d left)", newest.Left())
	}
	if d.TimeToExhaustion < 0 {
		d.Reason = fmt.Sprintf("%s not falling (%s rise over %v): graceful path", sig, FormatRate(sig, -rate), span.Round(time.Millisecond))
	} else if d.TimeToExhaustion < limit {
		d.Fire = true
		d.Reason = fmt.Sprintf("%s falls %s (over %v): %s in %v, before %.1f × the %s eviction path %v: brake",
			sig, rateText, span.Round(time.Millisecond), gone, d.TimeToExhaustion.Round(time.Millisecond), cfg.SafetyFactor, d.PathSource, d.EvictionPath.Round(time.Millisecond))
		return d
	} else {
		d.Reason = fmt.Sprintf("%s falls %s (over %v): %s in %v, after %.1f × the %s eviction path %v: graceful path",
			sig, rateText, span.Round(time.Millisecond), gone, d.TimeToExhaustion.Round(time.Millisecond), cfg.SafetyFactor, d.PathSource, d.EvictionPath.Round(time.Millisecond))
	}
	if shortest > brakeResampleSpans*cfg.SampleInterval {
		d.Resample = true
		d.Reason += fmt.Sprintf("; rate averaged over %v, reading again in %v", span.Round(time.Millisecond), cfg.SampleInterval)
	} else if d.TimeToExhaustion >= 0 {
		// A falling signal that does not call for the brake is read once
		// more sampleInterval later: a writer that was starved of CPU just
		// before the crossing ramps at full speed again right after it (the e2e
		// tier's hog did, and was OOM-killed: docs/benchmarks-history.md),
		// and the graceful path can spare 10 ms.
		d.Resample = true
	}
	return d
}

// RecordReadings adds readings taken outside the pass's own to the brake's
// history, oldest first: the fast poll's readings between passes (with
// them, a crossing's first pass has a rate over the last few milliseconds
// at once) and the brake's second reading within a pass (after Brake asked
// to read again). A reading not newer than the signal's newest is ignored.
func (e *Engine) RecordReadings(obs ...Observations) {
	now := e.clock.Now()
	for _, o := range obs {
		e.brake.recordHistory(o, now)
	}
}

// FormatRate prints a rate in the signal's unit per second: MiB/s for
// bytes (a measured slope is never a round number of bytes), counts per
// second for PIDs and inodes.
func FormatRate(s Signal, perSecond float64) string {
	switch s.Resource() {
	case ResourcePIDs, ResourceInodes:
		return fmt.Sprintf("%.0f/s", perSecond)
	}
	mib := perSecond / (1 << 20)
	if mib < 10 && mib > -10 {
		return fmt.Sprintf("%.1fMi/s", mib)
	}
	return fmt.Sprintf("%.0fMi/s", mib)
}
