package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/policy"
)

// slowVictimAgent is a node whose soft eviction went to "slow", a pod with
// terminationGracePeriodSeconds 300 that ignores SIGTERM (it stays listed,
// its usage stays), under memory.available soft 2Gi (10 s) and hard 500Mi,
// evictionMaxPodGracePeriod 300. hog is slowUsage, then grows. It returns
// the agent after the soft eviction, the clock at that pass.
func slowVictimAgent(t *testing.T, slowUsage, hogUsage int64) (*Agent, *fakeClock, *fakeStats, *fakeEvictor, *fakeFreezer) {
	t.Helper()
	a, clock, stats, ev, _, _ := newTestAgent(t, `evictionHard: {memory.available: 500Mi}
evictionSoft: {memory.available: 2Gi}
evictionSoftGracePeriod: {memory.available: 10s}
evictionMaxPodGracePeriod: 300
`)
	fz := newFakeFreezer()
	a.freezer = fz
	slow, hog := pod("slow", ""), pod("hog", "")
	slow.Spec.TerminationGracePeriodSeconds = i64(300)
	a.pods = &fakePods{pods: []*v1.Pod{slow, hog}}
	stats.pods = policy.PodStatsByUID{"slow": {MemoryWorkingSet: i64(slowUsage)}, "hog": {MemoryWorkingSet: i64(hogUsage)}}
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 1800 << 20, Capacity: 8 << 30}}
	for range 11 { // soft threshold met for its 10 s grace period
		a.Pass(context.Background(), "ticker")
		clock.now = clock.now.Add(time.Second)
	}
	if len(ev.calls) != 1 || ev.calls[0][0].Pod.Name != "slow" || ev.calls[0][0].GracePeriodSeconds != 300 || ev.calls[0][0].Hard {
		t.Fatalf("setup: evictor calls %v, want one soft eviction of slow with grace 300", callNames(ev))
	}
	return a, clock, stats, ev, fz
}

func callNames(ev *fakeEvictor) []string {
	var out []string
	for _, c := range ev.calls {
		s := c[0].Pod.Name
		if c[0].Escalated {
			s += "(escalated)"
		}
		out = append(out, s)
	}
	return out
}

// A hard crossing while a victim ignores SIGTERM with a 300 s grace period
// is acted on in its own pass: the soft eviction is requested again with the
// hard grace period, and the next pod goes too when what the slow victim
// holds does not cover the need.
func TestEscalation_HardCrossingDuringASlowSoftEvictionActsInItsPass(t *testing.T) {
	for _, ignored := range []int{1, 5, 29} {
		t.Run(fmt.Sprintf("SIGTERM ignored %ds", ignored), func(t *testing.T) { testHardCrossingActsInItsPass(t, ignored) })
	}
}

func testHardCrossingActsInItsPass(t *testing.T, ignored int) {
	a, clock, stats, ev, _ := slowVictimAgent(t, 200<<20, 100<<20)
	// SIGTERM ignored for a while: the soft threshold waits for it, as it should.
	for range ignored {
		a.Pass(context.Background(), "ticker")
		clock.now = clock.now.Add(time.Second)
	}
	if len(ev.calls) != 1 {
		t.Fatalf("soft pressure chose another victim while the first terminates: %v", callNames(ev))
	}
	stats.pods["hog"] = policy.PodStats{MemoryWorkingSet: i64(3 << 30)}
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 100 << 20, Capacity: 8 << 30}}
	rep := a.Pass(context.Background(), "notifier")
	got := callNames(ev)
	if len(got) != 3 || got[1] != "slow(escalated)" || got[2] != "hog" {
		t.Fatalf("crossing pass: evictor calls %v, want slow escalated then hog evicted", got)
	}
	for _, c := range ev.calls[1:] {
		if c[0].GracePeriodSeconds != policy.ImmediateEvictionGracePeriodSeconds || !c[0].Hard {
			t.Fatalf("%s evicted with grace %d hard=%v, want the hard grace period", c[0].Pod.Name, c[0].GracePeriodSeconds, c[0].Hard)
		}
	}
	if len(rep.Escalations) != 1 || len(rep.Evictions) != 1 {
		t.Fatalf("report: %d escalations, %d evictions; want 1 and 1", len(rep.Escalations), len(rep.Evictions))
	}
}

// When the slow victim holds enough, the crossing's pass only shortens its
// grace; if it still holds its memory past the hard grace period plus
// loop.victimReleaseTimeout, the brake freezes and kills it, and the next
// pass with the signal still crossed chooses the next victim.
func TestEscalation_SlowVictimPastItsBoundIsBrakedThenTheNextIsChosen(t *testing.T) {
	a, clock, stats, ev, fz := slowVictimAgent(t, 2<<30, 1<<30)
	clock.now = clock.now.Add(5 * time.Second)
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	rep := a.Pass(context.Background(), "notifier")
	if got := callNames(ev); len(got) != 2 || got[1] != "slow(escalated)" {
		t.Fatalf("crossing pass: evictor calls %v, want only slow escalated (its 2Gi covers the need)", got)
	}
	if rep.Selection == nil || rep.Selection.Waiting == "" {
		t.Fatalf("crossing pass did not wait on the escalated victim's credit: %+v", rep.Selection)
	}
	crossing := clock.now
	// It still ignores everything: waited for until 1 s + 5 s after the escalation.
	var braked time.Time
	for range 10 {
		clock.now = clock.now.Add(time.Second)
		a.Pass(context.Background(), "ticker")
		if braked.IsZero() && len(fz.log) > 0 {
			braked = clock.now
			if fz.log[0] != "freeze slow" || len(fz.log) != 2 || fz.log[1] != "kill slow" {
				t.Fatalf("brake actions %v, want freeze slow, kill slow", fz.log)
			}
			if len(ev.calls) != 2 {
				t.Fatalf("the pass that braked the overdue victim also evicted: %v", callNames(ev))
			}
			continue
		}
		if !braked.IsZero() {
			break
		}
	}
	if braked.IsZero() {
		t.Fatalf("slow victim never braked; brake log %v", fz.log)
	}
	if want := crossing.Add(time.Second + policy.DefaultVictimReleaseTimeout); braked.Before(want) || braked.After(want.Add(time.Second)) {
		t.Fatalf("braked at +%v after the escalation, want +%v (hard grace + loop.victimReleaseTimeout) within one pass",
			braked.Sub(crossing), want.Sub(crossing))
	}
	if got := callNames(ev); len(got) != 3 || got[2] != "hog" {
		t.Fatalf("the pass after the brake, signal still crossed: evictor calls %v, want hog evicted", got)
	}
}

// A victim that keeps its resource ignores nothing the engine counts on: a
// hard victim past its bound holds back no other victim even without a
// brake (dry run of the brake off).
func TestEscalation_OverdueVictimWithoutBrakeHoldsNothingBack(t *testing.T) {
	a, clock, stats, ev, _ := slowVictimAgent(t, 2<<30, 1<<30)
	a.freezer = nil
	clock.now = clock.now.Add(time.Second)
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	a.Pass(context.Background(), "notifier")
	for i := range 8 {
		clock.now = clock.now.Add(time.Second)
		a.Pass(context.Background(), "ticker")
		if n := len(ev.calls); i < 5 && n != 2 {
			t.Fatalf("%d s after the escalation: evictor calls %v, want the victim awaited", i+1, callNames(ev))
		}
	}
	if got := callNames(ev); len(got) != 3 || got[2] != "hog" {
		t.Fatalf("evictor calls %v, want hog evicted once slow was overdue", got)
	}
}

// The loop wakes at a victim's release bound: with loop.interval at a minute
// and no crossing to wake it, the victim (still listed: it ignores its
// eviction) is braked by a pass of its own once 1 s of hard grace plus
// loop.victimReleaseTimeout (1 s) have passed, not a minute later.
func TestRun_TheLoopWakesAtAVictimsReleaseBound(t *testing.T) {
	n := newLiveNode(1 << 20) // 1 MiB/s: the graceful path, the brake's rate never fires
	fz := &stuckFreezer{held: map[types.UID]brake.Hold{}, killing: make(chan types.UID, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(fz.release) })
	_, evicted, _, _ := runningAgent(t, n, fz, "loop: {interval: 1m, victimReleaseTimeout: 1s}\n")
	if got := waitFor(t, evicted, "the crossing's eviction"); got != "hog" {
		t.Fatalf("evicted %s, want hog", got)
	}
	start := time.Now()
	if uid := waitFor(t, fz.killing, "the overdue victim's kill"); uid != "hog" {
		t.Fatalf("killing %s, want hog", uid)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("braked %v after its eviction, before its 1 s grace and 1 s bound", d)
	}
}
