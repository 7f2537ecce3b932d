package notify

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

// Manager runs the fast path: it arms the kernel notifiers, keeps the memcg
// thresholds in step with inactive_file, runs the poll where needed, and
// turns everything into Waker.Wake calls.
type Manager struct {
	opts    Options
	waker   *Waker
	log     *slog.Logger
	metrics *Metrics

	mu         sync.Mutex
	dyn        settings
	mode       CgroupMode
	notifiers  map[notifierKey]*NotifierStatus
	pollActive bool

	// rearmRequests asks the kernel loop to recompute memcg thresholds now.
	rearmRequests chan struct{}
	// pollWanted nudges the idle poll to re-check whether it is needed.
	pollWanted chan struct{}

	armedOnce sync.Once
	firstArm  chan struct{}
	ran       atomic.Bool

	trail pollTrail // the poll goroutine's
}

// pollTarget is the poll's NotifierStatus target.
const pollTarget = "memory signals"

// settings are the options a configuration reload may change.
type settings struct {
	MemcgThresholds bool
	MemoryEvents    bool
	PSI             PSIOptions
	PollInterval    time.Duration
	PollIdle        time.Duration
	PollForRates    bool
	Thresholds      []Threshold
}

func settingsOf(o Options) settings {
	return settings{
		MemcgThresholds: o.MemcgThresholds,
		MemoryEvents:    o.MemoryEvents,
		PSI:             o.PSI,
		PollInterval:    o.PollInterval,
		PollIdle:        o.PollIdleInterval,
		PollForRates:    o.PollForRates,
		Thresholds:      slices.Clone(o.Thresholds),
	}
}

type notifierKey struct {
	source Source
	target string
}

// New validates the options (after defaults) and returns a Manager that will
// wake w. Nothing is armed before Run.
func New(opts Options, w *Waker) (*Manager, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("notify: a Waker is required")
	}
	return &Manager{
		opts:          opts,
		waker:         w,
		log:           opts.Logger, // the daemon names the component (run.go: log.With("component", "notify"))
		metrics:       opts.Metrics,
		dyn:           settingsOf(opts),
		mode:          opts.Mode,
		notifiers:     map[notifierKey]*NotifierStatus{},
		rearmRequests: make(chan struct{}, 1),
		pollWanted:    make(chan struct{}, 1),
		firstArm:      make(chan struct{}),
	}, nil
}

// Run arms the notifiers and blocks until ctx is done. Failures of single
// notifiers are logged, counted and replaced by the poll; Run itself returns
// only ctx's end. A Manager runs once.
func (m *Manager) Run(ctx context.Context) error {
	if !m.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("notify: Manager.Run called twice")
	}
	var wg sync.WaitGroup
	wg.Go(func() { m.runPoll(ctx) })
	m.runKernel(ctx)
	wg.Wait()
	return ctx.Err()
}

// Armed is closed once every notifier made its first arming attempt (armed,
// fell back or disabled): from then on Status is complete.
func (m *Manager) Armed() <-chan struct{} { return m.firstArm }

func (m *Manager) markArmed() { m.armedOnce.Do(func() { close(m.firstArm) }) }

// Rearm asks for the memcg thresholds to be recomputed now (the loop calls it
// after a pass that changed memory use, e.g. an eviction). It never blocks.
func (m *Manager) Rearm() {
	select {
	case m.rearmRequests <- struct{}{}:
	default:
	}
}

// SetThresholds replaces the watched thresholds (configuration reload) and
// re-arms.
func (m *Manager) SetThresholds(ts []Threshold) error {
	next := m.current()
	next.Thresholds = ts
	return m.apply(next)
}

// Reconfigure applies a reloaded configuration: the notifier switches, the
// PSI trigger, the poll interval and the thresholds. Paths, cgroup mode,
// re-arm interval, reader, logger and metrics are fixed at New. Invalid
// options are rejected and the running ones stay.
func (m *Manager) Reconfigure(opts Options) error {
	// Zero values take the defaults, as in New.
	d := Options{PSI: opts.PSI, PollInterval: opts.PollInterval, PollIdleInterval: opts.PollIdleInterval}.withDefaults()
	return m.apply(settings{
		MemcgThresholds: opts.MemcgThresholds,
		MemoryEvents:    opts.MemoryEvents,
		PSI:             d.PSI,
		PollInterval:    d.PollInterval,
		PollIdle:        d.PollIdleInterval,
		PollForRates:    opts.PollForRates,
		Thresholds:      opts.Thresholds,
	})
}

func (m *Manager) apply(next settings) error {
	probe := m.opts
	probe.MemcgThresholds, probe.MemoryEvents = next.MemcgThresholds, next.MemoryEvents
	probe.PSI, probe.PollInterval, probe.Thresholds = next.PSI, next.PollInterval, next.Thresholds
	probe.PollIdleInterval = next.PollIdle
	probe.PollForRates = next.PollForRates
	probe.PollMinInterval = min(probe.PollMinInterval, probe.PollInterval) // fixed at New; a shorter period caps it
	if err := probe.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	m.dyn = settingsOf(probe)
	m.mu.Unlock()
	m.Rearm()
	m.nudgePoll()
	return nil
}

// current returns a copy of the reloadable settings.
func (m *Manager) current() settings {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.dyn
	s.Thresholds = slices.Clone(s.Thresholds)
	return s
}

// Status returns a snapshot, notifiers sorted by source then target.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Mode: m.mode, PollActive: m.pollActive}
	for _, n := range m.notifiers {
		st.Notifiers = append(st.Notifiers, *n)
	}
	slices.SortFunc(st.Notifiers, func(a, b NotifierStatus) int {
		if a.Source != b.Source {
			if a.Source < b.Source {
				return -1
			}
			return 1
		}
		if a.Target < b.Target {
			return -1
		}
		if a.Target > b.Target {
			return 1
		}
		return 0
	})
	return st
}

func (m *Manager) currentThresholds() []Threshold {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dyn.Thresholds)
}

// deliver is every notifier's single action: wake the loop.
func (m *Manager) deliver(src Source, target string) {
	m.mu.Lock()
	if st, ok := m.notifiers[notifierKey{src, target}]; ok {
		st.Notifications++
	}
	m.mu.Unlock()
	m.metrics.wake(src)
	if src == SourceMemcg && m.opts.Urgent != nil {
		m.opts.Urgent() // before the wake: the loop's pass runs boosted
	}
	m.waker.Wake(src)
}

// setArmed records a notifier as armed.
func (m *Manager) setArmed(st NotifierStatus) {
	st.Mode = ModeArmed
	m.setStatus(st)
	m.metrics.armed(st.Source, st.Target, true)
	m.nudgePoll()
}

// setDisabled records a notifier turned off by configuration or not applicable.
func (m *Manager) setDisabled(src Source, target, why string) {
	m.setStatus(NotifierStatus{Source: src, Target: target, Mode: ModeDisabled, Detail: why})
	m.metrics.armed(src, target, false)
	m.nudgePoll()
}

// fallBack records a notifier that could not be armed or failed: logged at
// warning level and counted once per transition, then covered by the poll.
func (m *Manager) fallBack(src Source, target, reason string, err error) {
	key := notifierKey{src, target}
	m.mu.Lock()
	prev, had := m.notifiers[key]
	already := had && prev.Mode == ModeFallback && prev.Detail == err.Error()
	m.mu.Unlock()
	if !already {
		// A notifier this kernel or hierarchy does not have (memcg thresholds
		// on cgroup v2) is the expected state there: Info, not Warn.
		level := slog.LevelWarn
		if reason == ReasonUnsupported {
			level = slog.LevelInfo
		}
		m.log.Log(context.Background(), level, "notifier falls back to polling",
			"notifier", src, "target", target, "reason", reason, "err", err,
			"pollInterval", m.current().PollInterval, "pollAvailable", m.opts.ReadMemory != nil)
		m.metrics.fallback(src, reason)
	}
	m.setStatus(NotifierStatus{Source: src, Target: target, Mode: ModeFallback, Detail: err.Error()})
	m.metrics.armed(src, target, false)
	m.nudgePoll()
}

func (m *Manager) setStatus(st NotifierStatus) {
	key := notifierKey{st.Source, st.Target}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.notifiers[key]
	if ok && prev.Mode == st.Mode {
		st.Since = prev.Since
	} else {
		st.Since = time.Now()
	}
	if ok {
		st.Notifications = prev.Notifications
	}
	m.notifiers[key] = &st
}

func (m *Manager) removeStatus(src Source, target string) {
	m.mu.Lock()
	delete(m.notifiers, notifierKey{src, target})
	m.mu.Unlock()
}

func (m *Manager) nudgePoll() {
	select {
	case m.pollWanted <- struct{}{}:
	default:
	}
}

// pollNeeded: the poll runs when it has a reader and thresholds, and the
// brake wants rates (PollForRates), or some threshold has no armed memcg
// notifier (a pid.available threshold never has one), or some notifier fell
// back.
func (m *Manager) pollNeeded() bool {
	if m.opts.ReadMemory == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.dyn.Thresholds) == 0 {
		return false
	}
	if m.dyn.PollForRates {
		return true
	}
	for _, t := range m.dyn.Thresholds {
		st, ok := m.notifiers[notifierKey{SourceMemcg, t.name()}]
		if !ok || st.Mode != ModeArmed {
			return true
		}
	}
	for _, st := range m.notifiers {
		if st.Mode == ModeFallback {
			return true
		}
	}
	return false
}

// memcgWatched says, threshold by threshold, whether an armed memcg
// threshold notification wakes the loop at its crossing (pollPacer.next's
// watched), reusing into.
func (m *Manager) memcgWatched(thresholds []Threshold, into []bool) []bool {
	into = into[:0]
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range thresholds {
		st, ok := m.notifiers[notifierKey{SourceMemcg, t.name()}]
		into = append(into, ok && st.Mode == ModeArmed)
	}
	return into
}

func (m *Manager) setPollActive(active bool) {
	m.mu.Lock()
	changed := m.pollActive != active
	m.pollActive = active
	if changed {
		m.metrics.pollActive(active) // under the lock: Status and the metric agree
	}
	m.mu.Unlock()
	if !changed {
		return
	}
	interval := m.current().PollInterval
	pacing := newPollPacer(min(m.opts.PollMinInterval, interval), m.opts.PollRampRate).describe(interval, m.current().PollIdle)
	m.log.Info("fast poll of the memory and PID signals", "active", active, "interval", interval, "pacing", pacing)
	st := NotifierStatus{Source: SourcePoll, Target: pollTarget, Mode: ModeDisabled,
		Detail: "every threshold is watched by the kernel"}
	if active {
		st.Mode, st.Detail = ModeArmed, pacing
	}
	m.setStatus(st)
}

// runPoll polls the memory signals while pollNeeded, and waits otherwise.
// The first pass after start waits for the kernel notifiers' first arming
// attempt (a nudge), so a node whose notifiers all arm never polls.
func (m *Manager) runPoll(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-m.firstArm:
	}
	sleep, release, onThread := m.pollSleeper(ctx)
	defer release()
	// On its own thread, the poll's trail counts the thread's waits for a CPU.
	runDelay := func() (time.Duration, bool) { return 0, false }
	if onThread {
		if read, closeRD, err := threadRunDelay(); err == nil {
			runDelay = read
			defer closeRD()
		}
	}
	lastDelay, haveDelay := runDelay()
	met := map[string]bool{}
	var lastErr string
	var watched []bool
	for {
		if !m.pollNeeded() {
			m.setPollActive(false)
			clear(met)
			select {
			case <-ctx.Done():
				return
			case <-m.pollWanted:
				continue
			}
		}
		m.setPollActive(true)
		pacer := newPollPacer(m.opts.PollMinInterval, m.opts.PollRampRate)
		for m.pollNeeded() {
			var obs policy.Observations
			if d, ok := runDelay(); ok && haveDelay {
				m.trail.queue(d - lastDelay)
				lastDelay = d
			} else {
				m.trail.queue(-1)
				lastDelay, haveDelay = d, ok
			}
			obs, lastErr = m.pollRead(met, lastErr, pacer)
			cur := m.current()
			watched = m.memcgWatched(cur.Thresholds, watched)
			d := pacer.next(obs, cur.Thresholds, cur.PollInterval, cur.PollIdle, watched)
			m.trail.paced(d)
			if !sleep(d) {
				m.setPollActive(false)
				return
			}
		}
	}
}

// pollSleeper returns how the poll waits between reads: sleep(d) waits d, or
// until ctx ends (then false). With a Sentinel the poll's goroutine is locked
// to its thread, which is kept real-time, and waits in the kernel (ppoll on
// an eventfd that ctx's end writes) rather than on a Go timer: a timer is
// fired by whichever runtime thread checks the timers, at the pod's CPU
// weight, so a real-time poll would still wake late on a node whose CPUs are
// all taken. The kernel wakes this thread itself at the deadline. onThread
// is whether the poll's goroutine is locked to its own thread.
func (m *Manager) pollSleeper(ctx context.Context) (sleep func(time.Duration) bool, release func(), onThread bool) {
	if m.opts.Sentinel != nil {
		s, release, err := newKernelSleeper(ctx, m.opts.Sentinel)
		if err == nil {
			return s, release, true
		}
		m.log.Warn("fast poll: waiting on Go timers, not on the kernel", "err", err)
	}
	return func(d time.Duration) bool { return sleepOnTimer(ctx, d) }, func() {}, false
}

// sleepOnTimer waits d on a Go timer, or until ctx ends (then false).
func sleepOnTimer(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pollOnce reads the memory signals and wakes the loop when any threshold
// changed sides since the last read (met or no longer met), as a memcg
// threshold does in both directions.
func (m *Manager) pollOnce(met map[string]bool, lastErr string) string {
	_, errText := m.pollRead(met, lastErr, nil)
	return errText
}

// urgentHorizon: a hard threshold that a ramp at twice the rate measured
// between the poll's last two reads would reach within this long asks for
// the boost (Urgent) now: the second Urgent promises the booster (the brake
// may have to act within it). The boost's first request must come while the
// agent's threads can still get a CPU: at the pod's weight, on a node whose
// CPUs are all taken, a thread of the agent holding the Go scheduler's P (or
// the garbage collector's stop-the-world waiting for it) kept the real-time
// poll from reading for 50-630 ms (286 ms once with a 500 ms horizon: a
// starved hog that sped up), its read later than its wait and its
// thread never runnable meanwhile (the trail's "queued 0s"; make bench-ramp,
// busy setups with the host's CPUs taken too, 2026-11-26). Boosted, every
// thread of the agent runs at once.
const urgentHorizon = time.Second

// pollRead is pollOnce that also returns what it read (nil on error), for
// the pacer. pacer, when not nil, is the poll's, before its next(): its
// last reads give the rate of approach for Urgent.
func (m *Manager) pollRead(met map[string]bool, lastErr string, pacer *pollPacer) (policy.Observations, string) {
	start := time.Now()
	obs, err := m.opts.ReadMemory()
	took := time.Since(start)
	m.metrics.pollRead()
	if err != nil {
		m.metrics.pollError()
		if err.Error() != lastErr { // one log line per distinct error, not 10 per second
			m.log.Warn("fast poll could not read the memory signals", "err", err)
		}
		m.trail.record(start, noHeadroom, took)
		return nil, err.Error()
	}
	crossed, urgent, memoryMet := false, false, false
	headroom, at := int64(noHeadroom), time.Time{}
	for _, t := range m.currentThresholds() {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		key := fmt.Sprintf("%s %d %g %s", t.name(), t.Available, t.Percentage, t.Bound)
		h := o.Available - t.resolve(o.Capacity) // negative: met
		now := h < 0
		if now != met[key] { // an unseen threshold counts as "not met" before
			crossed = true
			memoryMet = memoryMet || (now && t.memory())
		}
		met[key] = now
		if t.memory() && (headroom == noHeadroom || h < headroom) {
			headroom, at = h, o.Time
		}
		if t.Hard && !urgent {
			rate := float64(m.opts.PollRampRate)
			if t.Signal == policy.SignalPIDAvailable {
				rate = PollPIDRampRate
			}
			urgent = float64(h) < rate*m.current().PollInterval.Seconds()
			if pacer != nil {
				urgent = urgent || float64(h) < 2*pacer.falling(t.Signal, o)*urgentHorizon.Seconds()
			}
		}
	}
	if urgent && m.opts.Urgent != nil {
		m.opts.Urgent()
	}
	if at.IsZero() {
		at = start
	}
	m.trail.record(at, headroom, took)
	if crossed {
		m.deliver(SourcePoll, pollTarget)
	}
	if memoryMet {
		// After the wake: the trail is for the crossing's post-mortem, not on its path.
		m.log.Info("fast poll: memory threshold met", "pollTrail", m.trail.String())
	}
	return obs, ""
}
