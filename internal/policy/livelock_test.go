package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func livelockedStats(pods ...*v1.Pod) PodStatsByUID {
	out := PodStatsByUID{}
	for _, p := range pods {
		out[p.UID] = PodStats{MemoryPressure: &PodMemoryPressure{Some: [3]int64{9000, 9000, 9000}, Full: [3]int64{7000, 6500, 3000},
			Usage: 250 << 20, Limit: 256 << 20}}
	}
	return out
}

// A livelocked pod excluded from eviction (evictiond's own, an excluded
// namespace) is reported and never restarted; the others are, one per
// minInterval.
func TestLivelockTracker_RestartSkipsExcludedPodsAndIsRateLimited(t *testing.T) {
	cfg := mustLoad(t, "exclusions: {namespaces: [infra]}\nlivelock: {window: 10s, restart: {enabled: true, minInterval: 1m}}\n")
	self, infra, app := newPod("evictiond"), newPod("db", withNamespace("infra")), newPod("app")
	pods := []*v1.Pod{self, infra, app}
	tr := NewLivelockTracker()
	tr.Assess(cfg.Livelock, t0, pods, livelockedStats(pods...))
	found := tr.Assess(cfg.Livelock, t0.Add(15*time.Second), pods, livelockedStats(pods...))
	if len(found) != 3 || !found[0].New {
		t.Fatalf("found %d, want 3 new livelocks", len(found))
	}
	l, why := tr.NextRestart(cfg, types.UID("evictiond"), t0.Add(15*time.Second), found)
	if l == nil || l.Pod.Name != "app" {
		t.Fatalf("restart %v (%s), want app: evictiond's own pod and the infra namespace are excluded", l, why)
	}
	tr.Restarted(l.Pod.UID, t0.Add(15*time.Second), true)
	found = tr.Assess(cfg.Livelock, t0.Add(30*time.Second), pods, livelockedStats(pods...))
	if found[0].New {
		t.Error("a livelock reported twice in one episode")
	}
	if l, why = tr.NextRestart(cfg, types.UID("evictiond"), t0.Add(30*time.Second), found); l != nil ||
		!strings.Contains(why, "app: restart already requested") || !strings.Contains(why, "infra/db: ") {
		t.Fatalf("restart %v, why %q; want none, each pod's reason", l, why)
	}
}

func TestLivelockTracker_PDBRefusalIsAskedAgainAfterMinInterval(t *testing.T) {
	cfg := mustLoad(t, "livelock: {window: 10s, restart: {enabled: true, minInterval: 1m}}\n")
	app := newPod("app")
	pods := []*v1.Pod{app}
	tr := NewLivelockTracker()
	tr.Assess(cfg.Livelock, t0, pods, livelockedStats(app))
	at := t0.Add(10 * time.Second)
	l, _ := tr.NextRestart(cfg, "", at, tr.Assess(cfg.Livelock, at, pods, livelockedStats(app)))
	tr.Restarted(l.Pod.UID, at, false)
	at = at.Add(30 * time.Second)
	if l, why := tr.NextRestart(cfg, "", at, tr.Assess(cfg.Livelock, at, pods, livelockedStats(app))); l != nil || !strings.Contains(why, "minInterval 1m0s") {
		t.Fatalf("within minInterval: %v, %q", l, why)
	}
	at = at.Add(31 * time.Second)
	if l, _ := tr.NextRestart(cfg, "", at, tr.Assess(cfg.Livelock, at, pods, livelockedStats(app))); l == nil {
		t.Fatal("a refused restart was not asked again after minInterval")
	}
}

func TestLivelockTracker_OffFindsNothing(t *testing.T) {
	cfg := mustLoad(t, "livelock: {enabled: false, window: 10s}\n")
	app := newPod("app")
	tr := NewLivelockTracker()
	for i := range 5 {
		if f := tr.Assess(cfg.Livelock, t0.Add(time.Duration(i)*10*time.Second), []*v1.Pod{app}, livelockedStats(app)); f != nil {
			t.Fatalf("livelock.enabled false found %d", len(f))
		}
	}
}
