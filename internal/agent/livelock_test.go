package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// livelocked is a pod cgroup at its limit with every task stalled 80% of the time.
func livelocked(oomKills int64) *policy.PodMemoryPressure {
	return &policy.PodMemoryPressure{Some: [3]int64{9000, 8500, 4000}, Full: [3]int64{8000, 7600, 3000},
		Usage: 63 << 20, Limit: 64 << 20, OOMKills: oomKills}
}

// passes runs a pass every 10 s for d on the fake clock.
func passes(a *Agent, clock *fakeClock, d time.Duration) []Report {
	var out []Report
	for end := clock.now.Add(d); !clock.now.After(end); clock.now = clock.now.Add(10 * time.Second) {
		out = append(out, a.pass(context.Background(), "test"))
	}
	return out
}

func countEvents(rec *record.FakeRecorder, reason string) int {
	n := 0
	for len(rec.Events) > 0 {
		if strings.Contains(<-rec.Events, reason) {
			n++
		}
	}
	return n
}

func TestPass_LivelockIsReportedOnceAfterTheWindowAndRestartsNothingByDefault(t *testing.T) {
	a, clock, stats, ev, st, rec := newTestAgent(t, "evictionHard: {memory.available: 100Mi}\nlivelock: {window: 30s}\n")
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 6 << 30, Capacity: 8 << 30}}
	stats.pods["calm"] = policy.PodStats{MemoryWorkingSet: i64(60 << 20), MemoryPressure: livelocked(0)}
	reps := passes(a, clock, 20*time.Second)
	if reps[len(reps)-1].Livelock != nil {
		t.Fatalf("livelock reported after 20 s of a 30 s window: %+v", reps[len(reps)-1].Livelock)
	}
	reps = passes(a, clock, time.Minute)
	l := reps[len(reps)-1].Livelock
	if l == nil || len(l.Found) != 1 || l.Found[0].Pod.Name != "calm" || l.Restart != nil {
		t.Fatalf("livelock report %+v, want calm found and not restarted", l)
	}
	if !strings.Contains(l.Found[0].Reason, "63Mi of its 64Mi limit") || !strings.Contains(l.Found[0].Reason, "full avg10 80.00% avg60 76.00%") {
		t.Errorf("reason without the numbers: %s", l.Found[0].Reason)
	}
	if n := countEvents(rec, EventReasonMemoryLivelock); n != 1 {
		t.Errorf("%d MemoryLivelock Events, want 1 per episode", n)
	}
	if len(ev.calls) != 0 || len(st.last) != 0 {
		t.Errorf("a pod's livelock: %d evictions, conditions %v; want neither", len(ev.calls), st.last)
	}
}

func TestPass_LivelockEndsWithAnOOMKillOrBelowTheLimit(t *testing.T) {
	a, clock, stats, _, _, _ := newTestAgent(t, "livelock: {window: 30s}\n")
	stats.pods["calm"] = policy.PodStats{MemoryPressure: livelocked(0)}
	passes(a, clock, 20*time.Second)
	// The kernel OOM-killed a task: progress, the episode starts again.
	stats.pods["calm"] = policy.PodStats{MemoryPressure: livelocked(1)}
	if reps := passes(a, clock, 20*time.Second); reps[len(reps)-1].Livelock != nil {
		t.Fatal("an OOM kill within the window did not restart the episode")
	}
	// Below 90% of its limit for one pass.
	p := livelocked(1)
	p.Usage = 32 << 20
	stats.pods["calm"] = policy.PodStats{MemoryPressure: p}
	a.pass(context.Background(), "test")
	stats.pods["calm"] = policy.PodStats{MemoryPressure: livelocked(1)}
	if reps := passes(a, clock, 20*time.Second); reps[len(reps)-1].Livelock != nil {
		t.Fatal("a pass below the limit did not end the episode")
	}
	// memory.events unreadable: never a livelock.
	stats.pods["calm"] = policy.PodStats{MemoryPressure: livelocked(-1)}
	if reps := passes(a, clock, time.Minute); reps[len(reps)-1].Livelock != nil {
		t.Fatal("livelock found without oom_kill readable")
	}
}

func TestPass_LivelockRestartEvictsSoftlyOncePerInterval(t *testing.T) {
	a, clock, stats, ev, st, _ := newTestAgent(t, "evictionMaxPodGracePeriod: 20\nlivelock: {window: 30s, restart: {enabled: true, minInterval: 5m}}\n")
	stats.pods["calm"] = policy.PodStats{MemoryPressure: livelocked(0)}
	stats.pods["hog"] = policy.PodStats{MemoryWorkingSet: i64(3 << 30), MemoryPressure: livelocked(0)}
	ev.outcome = eviction.OutcomeEvicted
	var logged strings.Builder
	a.log = slog.New(slog.NewTextHandler(&logged, nil))
	passes(a, clock, 40*time.Second)
	if len(ev.calls) != 1 {
		t.Fatalf("%d evictions, want one (one restart per minInterval)", len(ev.calls))
	}
	c := ev.calls[0]
	if len(c) != 1 || c[0].Signal != policy.SignalPodMemoryLivelock || c[0].Hard || c[0].GracePeriodSeconds != 20 {
		t.Fatalf("candidates %+v, want one soft eviction for pod.memory.livelock, grace 20 s", c)
	}
	if len(st.last) != 0 {
		t.Errorf("conditions %v for a pod's livelock", st.last)
	}
	// The other pod waits for minInterval; the first is not asked again. Why is logged
	// once, not on every pass.
	passes(a, clock, 4*time.Minute)
	if n := strings.Count(logged.String(), "livelocked pod not restarted"); n != 1 {
		t.Errorf("%d \"not restarted\" lines over 25 passes held back for one reason, want 1:\n%s", n, logged.String())
	}
	if len(ev.calls) != 1 {
		t.Fatalf("%d evictions within minInterval", len(ev.calls))
	}
	passes(a, clock, time.Minute)
	if len(ev.calls) != 2 || ev.calls[1][0].Pod.Name == c[0].Pod.Name {
		t.Fatalf("after minInterval: calls %d, want the other livelocked pod", len(ev.calls))
	}
}

func TestPass_LivelockRestartKillsThroughTheBrake(t *testing.T) {
	a, clock, stats, ev, _, rec := newTestAgent(t, "livelock: {window: 30s, restart: {enabled: true, action: kill}}\n")
	f := newFakeFreezer()
	a.freezer = f
	stats.pods["calm"] = policy.PodStats{MemoryPressure: livelocked(0)}
	reps := passes(a, clock, 30*time.Second)
	a.settle(context.Background())
	r := reps[len(reps)-1].Livelock
	if r == nil || r.Restart == nil || r.Restart.Action != "kill" || r.Restart.Outcome != "killing" {
		t.Fatalf("restart %+v, want a kill", r)
	}
	if len(ev.calls) != 0 {
		t.Errorf("kill action evicted %d times", len(ev.calls))
	}
	if got := strings.Join(f.log, ","); got != "freeze calm,kill calm" {
		t.Errorf("freezer: %s, want freeze then kill of calm", got)
	}
	if n := countEvents(rec, EventReasonLivelockKilled); n != 1 {
		t.Errorf("%d LivelockKilled Events, want 1", n)
	}
}
