package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// fakeFreezer records what the loop asks of the brake; the cgroup side is
// proven on real kernels in internal/brake.
type fakeFreezer struct {
	mu        sync.Mutex // the brake's kills run beside the loop
	held      map[types.UID]brake.Hold
	log       []string
	freezeErr error
}

func newFakeFreezer() *fakeFreezer { return &fakeFreezer{held: map[types.UID]brake.Hold{}} }

func (f *fakeFreezer) Freeze(pod *v1.Pod, max time.Duration) (brake.Hold, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "freeze "+pod.Name)
	if f.freezeErr != nil {
		return brake.Hold{}, f.freezeErr
	}
	if h, ok := f.held[pod.UID]; ok {
		return h, nil
	}
	now := time.Now()
	h := brake.Hold{UID: pod.UID, Pod: pod.Namespace + "/" + pod.Name, FrozenAt: now, Deadline: now.Add(max)}
	f.held[pod.UID] = h
	return h, nil
}

func (f *fakeFreezer) Thaw(uid types.UID) (brake.Hold, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.held[uid]
	if ok {
		f.log = append(f.log, "thaw "+string(uid))
		delete(f.held, uid)
	}
	return h, ok, nil
}

func (f *fakeFreezer) Kill(uid types.UID, _ time.Duration) (brake.Hold, int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.held[uid]
	if ok {
		f.log = append(f.log, "kill "+string(uid))
		delete(f.held, uid)
	}
	return h, 1, ok, nil
}

func (f *fakeFreezer) Held() []brake.Hold {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []brake.Hold
	for _, h := range f.held {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b brake.Hold) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

// ladderEvictor answers per candidate: refused ones are skipped as a PDB
// does, the first other one gets outcome.
type ladderEvictor struct {
	refuse  map[string]bool
	outcome eviction.Outcome
	calls   int
}

func (e *ladderEvictor) ReportPending(context.Context, *slog.Logger) {}

func (e *ladderEvictor) Evict(ctx context.Context, cands []policy.Candidate) eviction.Result {
	e.calls++
	for _, c := range cands {
		if e.refuse[c.Pod.Name] {
			continue
		}
		if !e.outcome.Disrupted() {
			return eviction.Result{Outcome: e.outcome, Err: fmt.Errorf("%s", e.outcome)}
		}
		v := c
		return eviction.Result{Outcome: e.outcome, Victim: &v}
	}
	return eviction.Result{Outcome: eviction.OutcomePDBBlocked}
}

// brakeAgent is an agent with the brake wired to a fake freezer, on a hard
// allocatableMemory threshold of 500Mi, after a pass 100ms earlier at avail0.
func brakeAgent(t *testing.T, extra string, ev Evictor) (*Agent, *fakeClock, *fakeStats, *fakeFreezer) {
	t.Helper()
	a, clock, stats, _, _, _ := newTestAgent(t, "evictionHard: {allocatableMemory.available: 500Mi}\n"+extra)
	fz := newFakeFreezer()
	a.freezer, a.evictor = fz, ev
	return a, clock, stats, fz
}

// ramp runs a pass at each available value, 100ms apart.
func ramp(a *Agent, clock *fakeClock, stats *fakeStats, avail ...int64) Report {
	var rep Report
	for _, av := range avail {
		clock.now = clock.now.Add(100 * time.Millisecond)
		stats.obs = policy.Observations{policy.SignalAllocatableMemoryAvailable: {Available: av, Capacity: 3 << 30}}
		rep = a.Pass(context.Background(), "test")
	}
	return rep
}

func TestBrake_FastRampFreezesThenKillsTheAcceptedVictim(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	rep := ramp(a, clock, stats, 700<<20, 470<<20) // 2.3 GiB/s
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q, want the hog frozen before the request and killed after", got)
	}
	if rep.Brake == nil || !rep.Brake.Fire || rep.Brake.Frozen != "ns/hog" || rep.Brake.Killed != "ns/hog" {
		t.Errorf("report %+v", rep.Brake)
	}
	if len(fz.Held()) != 0 {
		t.Errorf("holds left: %+v", fz.Held())
	}
}

func TestBrake_SlowRampKeepsTheGracefulPath(t *testing.T) {
	ev := &ladderEvictor{outcome: eviction.OutcomeEvicted}
	a, clock, stats, fz := brakeAgent(t, "", ev)
	rep := ramp(a, clock, stats, 510<<20, 500<<20, 490<<20) // 100 MiB/s: 4.9s to go
	if len(fz.log) != 0 {
		t.Errorf("freezer calls %v on a slow ramp, want none", fz.log)
	}
	if ev.calls != 1 || rep.Brake == nil || rep.Brake.Fire || !strings.Contains(rep.Brake.Reason, "graceful path") {
		t.Errorf("evictor calls %d, brake %+v: want one graceful eviction", ev.calls, rep.Brake)
	}
}

func TestBrake_RefusalsThaw(t *testing.T) {
	for _, outcome := range []eviction.Outcome{eviction.OutcomePDBBlocked, eviction.OutcomeGone, eviction.OutcomeThrottled, eviction.OutcomeRateLimited, eviction.OutcomeCoolingDown} {
		t.Run(string(outcome), func(t *testing.T) {
			ev := &ladderEvictor{outcome: outcome}
			if outcome == eviction.OutcomePDBBlocked {
				ev.refuse = map[string]bool{"hog": true, "calm": true}
			}
			a, clock, stats, fz := brakeAgent(t, "", ev)
			rep := ramp(a, clock, stats, 700<<20, 470<<20)
			if got := strings.Join(fz.log, ", "); got != "freeze hog, thaw hog" {
				t.Errorf("freezer calls %q, want the hog frozen then thawed at once", got)
			}
			if rep.Brake == nil || len(rep.Brake.Thawed) != 1 || rep.Brake.Killed != "" {
				t.Errorf("report %+v", rep.Brake)
			}
		})
	}
}

func TestBrake_LadderMovedOnThawsTheRefusedAndKillsTheAccepted(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted, refuse: map[string]bool{"hog": true}})
	ramp(a, clock, stats, 700<<20, 470<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog, thaw hog, freeze calm, kill calm" {
		t.Errorf("freezer calls %q", got)
	}
}

func TestBrake_APIErrorHoldsUntilCleared(t *testing.T) {
	ev := &ladderEvictor{outcome: eviction.OutcomeAPIError}
	a, clock, stats, fz := brakeAgent(t, "", ev)
	ramp(a, clock, stats, 700<<20, 470<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog" || len(fz.Held()) != 1 {
		t.Fatalf("freezer calls %q, holds %v: want the hog held while the API server does not answer", got, fz.Held())
	}
	// The pressure clears (the frozen pod's memory reclaimed by another actor): thaw at once.
	ramp(a, clock, stats, 470<<20, 2<<30)
	if got := strings.Join(fz.log, ", "); !strings.HasSuffix(got, "thaw hog") || len(fz.Held()) != 0 {
		t.Errorf("freezer calls %q, holds %v: want the hog thawed once no hard threshold is met", got, fz.Held())
	}
}

func TestBrake_HeldVictimAcceptedLaterIsKilledEvenWithoutFiring(t *testing.T) {
	ev := &ladderEvictor{outcome: eviction.OutcomeAPIError}
	a, clock, stats, fz := brakeAgent(t, "", ev)
	ramp(a, clock, stats, 700<<20, 470<<20)
	// Frozen, the hog no longer falls: the decision is the graceful path, but
	// a frozen pod's own stop would hang on its frozen tasks.
	ev.outcome = eviction.OutcomeEvicted
	rep := ramp(a, clock, stats, 470<<20)
	if rep.Brake == nil {
		t.Fatalf("no brake decision: starved %+v, selection %+v, err %q", rep.Assessment.Starved, rep.Selection, rep.Err)
	}
	if rep.Brake.Fire {
		t.Fatalf("the brake fired on a flat signal: %+v", rep.Brake)
	}
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q, want the held hog killed once its eviction was accepted", got)
	}
}

func TestBrake_NeverFreezesInDryRunOrWhenDisabledOrOnFreezeError(t *testing.T) {
	for name, tc := range map[string]struct {
		extra     string
		freezeErr error
		want      string
	}{
		"dry run":      {extra: "dryRun: true\n", want: ""},
		"disabled":     {extra: "brake: {enabled: false}\n", want: ""},
		"freeze error": {freezeErr: fmt.Errorf("no freezer.state"), want: "freeze hog"},
	} {
		t.Run(name, func(t *testing.T) {
			ev := &ladderEvictor{outcome: eviction.OutcomeEvicted}
			if tc.extra == "dryRun: true\n" {
				ev.outcome = eviction.OutcomeDryRun
			}
			a, clock, stats, fz := brakeAgent(t, tc.extra, ev)
			fz.freezeErr = tc.freezeErr
			ramp(a, clock, stats, 700<<20, 470<<20)
			if got := strings.Join(fz.log, ", "); got != tc.want {
				t.Errorf("freezer calls %q, want %q", got, tc.want)
			}
			if ev.calls != 1 {
				t.Errorf("evictor calls %d, want the eviction requested anyway", ev.calls)
			}
		})
	}
}

func TestBrake_LoopStoppingThawsEveryHold(t *testing.T) {
	ev := &ladderEvictor{outcome: eviction.OutcomeAPIError}
	a, clock, stats, fz := brakeAgent(t, "", ev)
	ramp(a, clock, stats, 700<<20, 470<<20)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.Run(ctx)
	if len(fz.Held()) != 0 {
		t.Errorf("holds left after the loop stopped: %v", fz.Held())
	}
}

// fastStats is a Stats with the fast read: the pass's ranking reads take
// usageTook of the (fake) clock, ObserveFast returns fast.
type fastStats struct {
	*fakeStats
	usageTook time.Duration
	fast      policy.Observations
	fastCalls int
}

func (s *fastStats) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *Observed) {
	s.clock.now = s.clock.now.Add(s.usageTook)
}

func (s *fastStats) ObserveFast() policy.Observations {
	s.fastCalls++
	out := policy.Observations{}
	for k, o := range s.fast {
		o.Time = s.clock.now
		out[k] = o
	}
	return out
}

// The brake's second reading: a ramp seen only by the 1 s ticker has a rate
// averaged over 1 s, so the agent reads again sampleInterval (10ms) after
// the pass's reading — waiting only what the pass's own ranking left of it
// (4ms taken: 6ms), and reading the fast signals alone, not every signal
// and filesystem again. The ramp turned fast in the meantime: brake.
func TestBrake_ResampleReadsTheFastSignalsAfterWhatIsLeftOfTheInterval(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	fs := &fastStats{fakeStats: stats, usageTook: 4 * time.Millisecond,
		fast: policy.Observations{policy.SignalAllocatableMemoryAvailable: {Available: 480<<20 - 23<<20, Capacity: 3 << 30}}}
	a.stats = fs
	var slept []time.Duration
	a.sleep = func(d time.Duration) { slept = append(slept, d); clock.now = clock.now.Add(d) }
	passesEverySecond(a, clock, stats, 580<<20, 480<<20) // 100 MiB/s over 1 s: 4.8 s to go
	if !slices.Equal(slept, []time.Duration{6 * time.Millisecond}) {
		t.Errorf("slept %v before the second reading, want [6ms] (10ms after the pass's reading, 4ms of which the ranking took)", slept)
	}
	if fs.fastCalls != 1 || stats.calls != 2 {
		t.Errorf("fast reads %d, full reads %d; want 1 fast read for the resample and one full read per pass", fs.fastCalls, stats.calls)
	}
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q, want the hog braked on the resampled 2.3 GiB/s", got)
	}
}

// A pass whose ranking took longer than sampleInterval reads again at once.
func TestBrake_ResampleDoesNotWaitWhenThePassTookTheInterval(t *testing.T) {
	a, clock, stats, _ := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	fs := &fastStats{fakeStats: stats, usageTook: 30 * time.Millisecond,
		fast: policy.Observations{policy.SignalAllocatableMemoryAvailable: {Available: 470 << 20, Capacity: 3 << 30}}}
	a.stats = fs
	var slept []time.Duration
	a.sleep = func(d time.Duration) { slept = append(slept, d) }
	passesEverySecond(a, clock, stats, 580<<20, 480<<20)
	if len(slept) != 0 || fs.fastCalls != 1 {
		t.Errorf("slept %v, fast reads %d; want no wait and one fast read", slept, fs.fastCalls)
	}
}

// historyStats is fastStats with a fast poll: readings queued by the test
// are what FastReadings hands the loop; during is handed only after the
// pass's ranking (a poll read while the loop ranked).
type historyStats struct {
	*fastStats
	poll, during []policy.Observations
}

func (s *historyStats) FastReadings() []policy.Observations {
	out := s.poll
	s.poll = nil
	return out
}

func (s *historyStats) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *Observed) {
	s.fastStats.ObserveUsage(ctx, pods, obs)
	s.poll, s.during = append(s.poll, s.during...), nil
}

func allocAt(avail int64, at time.Time) policy.Observations {
	return policy.Observations{policy.SignalAllocatableMemoryAvailable: {Available: avail, Capacity: 3 << 30, Time: at}}
}

// With the fast poll's readings of the last milliseconds, the crossing's
// first pass has a rate at once: it freezes without waiting for a second
// reading (the wait was up to brake.sampleInterval, half the 20 ms target).
func TestBrake_FastPollReadingsGiveTheRateWithoutASecondReading(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	hs := &historyStats{fastStats: &fastStats{fakeStats: stats}}
	a.stats = hs
	var slept []time.Duration
	a.sleep = func(d time.Duration) { slept = append(slept, d) }
	clock.now = clock.now.Add(time.Second)
	stats.obs = allocAt(900<<20, time.Time{})
	a.Pass(context.Background(), "test") // a calm pass, 1 s before
	// The poll read 12 and 6 ms before the crossing's pass: 2 GiB/s.
	clock.now = clock.now.Add(time.Second)
	hs.poll = []policy.Observations{allocAt(480<<20+24<<20, clock.now.Add(-12*time.Millisecond)), allocAt(480<<20+12<<20, clock.now.Add(-6*time.Millisecond))}
	stats.obs = allocAt(480<<20, time.Time{})
	rep := a.Pass(context.Background(), "memcg")
	if len(slept) != 0 || hs.fastCalls != 0 {
		t.Errorf("slept %v, fast reads %d; want neither (the poll's readings give the rate)", slept, hs.fastCalls)
	}
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q, want the hog braked", got)
	}
	if rep.Brake == nil || !strings.Contains(rep.Brake.Reason, "falls 2000Mi/s (over 12ms)") {
		t.Errorf("brake decision %+v, want the rate over the 12 ms since the poll's reading at least sampleInterval older", rep.Brake)
	}
}

// The frozen log line says where the time from the crossing went: the fast
// poll's reading that first saw the threshold met (the one that woke the
// loop), when the pass started and each of its steps.
func TestBrake_FrozenLogLineSplitsTheTimeFromTheCrossing(t *testing.T) {
	a, clock, stats, _ := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	hs := &historyStats{fastStats: &fastStats{fakeStats: stats}}
	a.stats = hs
	logs := &bytes.Buffer{}
	a.log = slog.New(slog.NewJSONHandler(logs, nil))
	a.sleep = func(time.Duration) {}
	clock.now = clock.now.Add(time.Second)
	stats.obs = allocAt(900<<20, time.Time{})
	a.Pass(context.Background(), "test")
	clock.now = clock.now.Add(time.Second)
	above, below := clock.now.Add(-12*time.Millisecond), clock.now.Add(-6*time.Millisecond)
	hs.poll = []policy.Observations{allocAt(510<<20, above), allocAt(498<<20, below)}
	stats.obs = allocAt(480<<20, time.Time{})
	a.Pass(context.Background(), "notifier")
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"brake: pod frozen"`) {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no frozen log line in:\n%s", logs)
	}
	for _, want := range []string{
		`"pollCrossing":"` + below.Format(time.RFC3339Nano) + `"`, // not the reading above the threshold
		`"passStart":"`, `"passSteps":"listed +`, `, read +`, `, observed +`, `, assessed +`, `, usage +`, `, selected +`,
		`"passWaits":"major faults `, `, preempted `,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("frozen log line lacks %s:\n%s", want, line)
		}
	}
}

// A poll reading taken while the pass ranked decides when the pass's own
// history could not (its previous reading 1 s old): no wait either.
func TestBrake_FastPollReadingDuringTheRankingIsUsedBeforeReadingAgain(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	hs := &historyStats{fastStats: &fastStats{fakeStats: stats, usageTook: 12 * time.Millisecond}}
	a.stats = hs
	var slept []time.Duration
	a.sleep = func(d time.Duration) { slept = append(slept, d) }
	for i, av := range []int64{580 << 20, 480 << 20} { // 100 MiB/s over 1 s: graceful, read again
		clock.now = clock.now.Add(time.Second)
		stats.obs = allocAt(av, time.Time{})
		if i == 1 {
			// The poll reads 11 ms after the pass's reading: 2.3 GiB/s now.
			hs.during = []policy.Observations{allocAt(480<<20-25<<20, clock.now.Add(11*time.Millisecond))}
		}
		a.Pass(context.Background(), "test")
	}
	if len(slept) != 0 || hs.fastCalls != 0 {
		t.Errorf("slept %v, fast reads %d; want neither (the poll's reading during the ranking gives the rate)", slept, hs.fastCalls)
	}
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q, want the hog braked on the poll's 2.3 GiB/s", got)
	}
}

// seqStats is fastStats whose fast readings follow a list, one per call.
type seqStats struct {
	*fakeStats
	seq   []int64 // allocatableMemory.available per fast read
	calls int
}

func (s *seqStats) ObserveFast() policy.Observations {
	av := s.seq[min(s.calls, len(s.seq)-1)]
	s.calls++
	return allocAt(av, s.clock.now)
}

// readInSequence makes the agent's fast readings follow seq, one per call, its
// sleeps advance the clock.
func readInSequence(a *Agent, clock *fakeClock, stats *fakeStats, seq ...int64) *seqStats {
	ss := &seqStats{fakeStats: stats, seq: seq}
	a.stats = ss
	a.sleep = func(d time.Duration) { clock.now = clock.now.Add(d) }
	return ss
}

// slowAfterCrossing is the fast readings after a crossing at 480 MiB: 476 MiB
// 10 ms later (400 MiB/s), then 1 MiB less per reading (100 MiB/s), n in all.
func slowAfterCrossing(n int) []int64 {
	seq := []int64{476 << 20}
	for av := int64(475 << 20); len(seq) < n; av -= 1 << 20 {
		seq = append(seq, av)
	}
	return seq
}

// A writer measured slow at the crossing (graceful path) that ramps at full
// speed right after it is braked once its eviction was accepted: frozen and
// killed on the node, without waiting for the graceful stop.
func TestBrake_GracefulVictimIsBrakedWhenTheRampSpeedsUpAfterTheCrossing(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	// 100 MiB/s up to the crossing and at the confirming read; then 2 GiB/s.
	ss := readInSequence(a, clock, stats, 479<<20, 478<<20, 458<<20, 438<<20, 418<<20)
	passesEverySecond(a, clock, stats, 580<<20, 480<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Fatalf("freezer calls %q, want the gracefully evicted hog frozen and killed once the ramp sped up", got)
	}
	if ss.calls < 3 || ss.calls > 4 {
		t.Errorf("%d fast reads, want the confirming read and the watch's until the ramp showed (3-4)", ss.calls)
	}
}

// The watch outlasts the time to exhaustion estimated at the crossing: a ramp
// that slowed past it and sped up again before the victim stopped is braked.
func TestBrake_GracefulWatchOutlastsTheEstimateAtTheCrossing(t *testing.T) {
	// A measured path of 200 ms: the brake fires under 300 ms to exhaustion.
	a, clock, stats, fz := brakeAgent(t, "brake: {evictionPath: 200ms}\n", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	// 400 MiB/s at the crossing (1.2 s to go: graceful), then 100 MiB/s for 1.5 s,
	// then 2 GiB/s.
	seq := slowAfterCrossing(151)
	for last := seq[len(seq)-1]; last > 200<<20; {
		last -= 20 << 20
		seq = append(seq, last)
	}
	ss := readInSequence(a, clock, stats, seq...)
	passesEverySecond(a, clock, stats, 880<<20, 480<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Fatalf("freezer calls %q after %d fast reads, want the hog frozen and killed once the ramp sped up, 1.5 s after the crossing", got, ss.calls)
	}
	if ss.calls < 152 {
		t.Errorf("%d fast reads, want the hog braked after the slow 1.5 s (over 150)", ss.calls)
	}
}

// A victim that ignores SIGTERM outlives the watch: a later pass, waiting for
// it, brakes it once the ramp would reach the limit before the pod is gone.
func TestBrake_PendingVictimIsBrakedWhenTheRampOutlastsTheWatch(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "brake: {evictionPath: 200ms}\n", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	// 400 MiB/s at the crossing (1.2 s to go: graceful), then 100 MiB/s through the
	// watch's 2 s (2.7 s to go at its end: not braked).
	readInSequence(a, clock, stats, slowAfterCrossing(250)...)
	passesEverySecond(a, clock, stats, 880<<20, 480<<20)
	if len(fz.log) != 0 {
		t.Fatalf("freezer calls %v during the slow watch, want none", fz.log)
	}
	// The next pass waits for the hog, still on the node; 235 MiB/s since the watch's
	// last reading, 40 MiB left: 0.17 s, under 1.5 × the 200 ms path.
	clock.now = clock.now.Add(time.Second)
	stats.obs = allocAt(40<<20, time.Time{})
	rep := a.Pass(context.Background(), "test")
	if rep.Selection == nil || rep.Selection.Waiting == "" {
		t.Fatalf("selection %+v, want the pass waiting for the pending hog", rep.Selection)
	}
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Fatalf("freezer calls %q, want the pending hog frozen and killed", got)
	}
	if rep.Brake == nil || rep.Brake.Killed != "ns/hog" || !rep.Brake.Fire {
		t.Errorf("brake report %+v, want the hog killed", rep.Brake)
	}
	if v := a.engine.GracefulVictims(); len(v) != 0 {
		t.Errorf("graceful victims %v after the brake's kill, want none (its departure does not measure the path)", v)
	}
	// The pass after it, pressure unchanged: nothing braked twice.
	clock.now = clock.now.Add(time.Second)
	stats.obs = allocAt(30<<20, time.Time{})
	a.Pass(context.Background(), "test")
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q after another pass, want the hog braked once", got)
	}
}

// A writer starved of CPU pauses between its bursts (issue 30's busy node): a
// watch that ended at the first reading with no fall left such a hog to the
// kubelet and the next passes (crossing → freeze 2.06 s in one bench run).
// The watch goes on through a 200 ms pause and brakes the hog when it ramps
// again.
func TestBrake_GracefulWatchOutlastsAWritersPause(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	// 100 MiB/s up to the crossing and at the confirming read (graceful); then no
	// fall for 200 ms (20 readings); then 2 GiB/s.
	seq := []int64{479 << 20}
	for range 20 {
		seq = append(seq, 478<<20)
	}
	seq = append(seq, 458<<20, 438<<20, 418<<20, 398<<20)
	ss := readInSequence(a, clock, stats, seq...)
	passesEverySecond(a, clock, stats, 580<<20, 480<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Fatalf("freezer calls %q after %d fast reads, want the hog frozen and killed when it ramped again after its pause", got, ss.calls)
	}
	if ss.calls < 22 || ss.calls > 24 {
		t.Errorf("%d fast reads, want the watch's through the pause and one or two of the ramp (22-24)", ss.calls)
	}
}

// The watch ends when the victim releases part of its memory (a rise of a
// tenth of the threshold from the lowest reading), still under the threshold.
func TestBrake_GracefulWatchEndsOnARiseUnderTheThreshold(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	// 100 MiB/s down to 449 MiB (graceful throughout), then 499 MiB: 50 MiB up.
	var seq []int64
	for av := int64(479); av >= 449; av-- {
		seq = append(seq, av<<20)
	}
	seq = append(seq, 499<<20, 300<<20)
	ss := readInSequence(a, clock, stats, seq...)
	passesEverySecond(a, clock, stats, 580<<20, 480<<20)
	if len(fz.log) != 0 || ss.calls != 32 {
		t.Errorf("freezer calls %v, %d fast reads; want none frozen and the watch ended at the 50 MiB rise (32 reads)", fz.log, ss.calls)
	}
}

// The watch ends as soon as the victim releases its memory: nothing frozen.
func TestBrake_GracefulWatchEndsWhenTheVictimReleases(t *testing.T) {
	a, clock, stats, fz := brakeAgent(t, "", &ladderEvictor{outcome: eviction.OutcomeEvicted})
	ss := readInSequence(a, clock, stats, 479<<20, 478<<20, 600<<20, 400<<20)
	passesEverySecond(a, clock, stats, 580<<20, 480<<20)
	if len(fz.log) != 0 || ss.calls != 3 {
		t.Errorf("freezer calls %v, %d fast reads; want none frozen and the watch ended at the release (3 reads)", fz.log, ss.calls)
	}
}

// passesEverySecond runs a pass at each allocatableMemory.available value, a
// second apart: the 1 s ticker alone seeing a ramp.
func passesEverySecond(a *Agent, clock *fakeClock, stats *fakeStats, avail ...int64) {
	for _, av := range avail {
		clock.now = clock.now.Add(time.Second)
		stats.obs = allocAt(av, time.Time{})
		a.Pass(context.Background(), "test")
	}
}

// inFlightStats is fakeStats with a fast poll that goes on reading while an
// eviction request is in flight: slowEvictor queues its readings.
type inFlightStats struct {
	*fakeStats
	mu   sync.Mutex
	peek []policy.Observations
}

func (s *inFlightStats) LookInFlight(done <-chan struct{}, interval time.Duration) ([]policy.Observations, bool) {
	select {
	case <-done:
		return nil, false
	case <-time.After(interval):
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.peek), true
}

func (s *inFlightStats) poll(o policy.Observations) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peek = append(s.peek, o)
}

// slowEvictor is an API server slow to answer: while the request is in
// flight the poll reads allocatableMemory.available falling perStep every
// 5ms from `from` (at most steps readings, 2ms of real time apart, fewer if
// the pod is frozen meanwhile), then the ladder answers.
type slowEvictor struct {
	ladderEvictor
	stats         *inFlightStats
	start         time.Time
	from, perStep int64
	steps         int
	frozen        func() bool
}

func (e *slowEvictor) Evict(ctx context.Context, cands []policy.Candidate) eviction.Result {
	for i := 1; i <= e.steps && !e.frozen(); i++ {
		e.stats.poll(allocAt(e.from-int64(i)*e.perStep, e.start.Add(time.Duration(i)*5*time.Millisecond)))
		time.Sleep(2 * time.Millisecond)
	}
	return e.ladderEvictor.Evict(ctx, cands)
}

// inFlightAgent has passed a crossing of the 500Mi threshold at 110 MiB/s,
// a ramp the graceful path outruns (4.5 s to go), and requests the eviction
// through ev, whose answer comes after its readings.
func inFlightAgent(t *testing.T, ev *slowEvictor) (*Agent, *fakeClock, *fakeStats, *fakeFreezer) {
	a, clock, stats, fz := brakeAgent(t, "", ev)
	s := &inFlightStats{fakeStats: stats}
	a.stats, ev.stats = s, s
	ev.frozen = func() bool { return len(fz.Held()) > 0 }
	ev.start, ev.from = clock.now.Add(200*time.Millisecond), 499<<20
	return a, clock, stats, fz
}

// An API server slow to accept the eviction (issue 30: 4.7 s on a busy node)
// leaves the ramp running before the graceful path even starts. The brake
// decides again on the poll's readings while the request is in flight: the
// ramp speeds up to 400 MiB/s and the hog is frozen before the answer, then
// killed once the eviction is accepted.
func TestBrake_RampSpeedingUpWhileTheRequestIsInFlightIsBraked(t *testing.T) {
	ev := &slowEvictor{ladderEvictor: ladderEvictor{outcome: eviction.OutcomeEvicted}, perStep: 2 << 20, steps: 200}
	a, clock, stats, fz := inFlightAgent(t, ev)
	rep := ramp(a, clock, stats, 510<<20, 499<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog, kill hog" {
		t.Errorf("freezer calls %q, want the hog frozen while its request was in flight, then killed", got)
	}
	if rep.Brake == nil || !rep.Brake.Fire || rep.Brake.Frozen != "ns/hog" || rep.Brake.Killed != "ns/hog" ||
		!strings.Contains(rep.Brake.Reason, ": brake") {
		t.Errorf("report %+v: want the brake fired on the in-flight readings", rep.Brake)
	}
}

// The same request refused (every candidate's PodDisruptionBudget): the pod
// frozen in flight is thawed, as one frozen before the request would be.
func TestBrake_PodFrozenInFlightIsThawedWhenTheRequestIsRefused(t *testing.T) {
	ev := &slowEvictor{ladderEvictor: ladderEvictor{outcome: eviction.OutcomeEvicted, refuse: map[string]bool{"hog": true, "calm": true}},
		perStep: 2 << 20, steps: 200}
	a, clock, stats, fz := inFlightAgent(t, ev)
	ramp(a, clock, stats, 510<<20, 499<<20)
	if got := strings.Join(fz.log, ", "); got != "freeze hog, thaw hog" || len(fz.Held()) != 0 {
		t.Errorf("freezer calls %q, holds %v: want the hog frozen in flight, then thawed", got, fz.Held())
	}
}

// A slow request while the ramp stays slow (110 MiB/s, 4.5 s to go, the
// request answered after 20 of the poll's readings): nothing is frozen.
func TestBrake_SlowRampWhileTheRequestIsInFlightKeepsTheGracefulPath(t *testing.T) {
	ev := &slowEvictor{ladderEvictor: ladderEvictor{outcome: eviction.OutcomeEvicted}, perStep: 550 << 10, steps: 20}
	a, clock, stats, fz := inFlightAgent(t, ev)
	rep := ramp(a, clock, stats, 510<<20, 499<<20)
	if len(fz.log) != 0 {
		t.Errorf("freezer calls %v, want none", fz.log)
	}
	if rep.Brake == nil || rep.Brake.Fire || ev.calls != 1 {
		t.Errorf("brake %+v, evictor calls %d: want one graceful eviction", rep.Brake, ev.calls)
	}
}
