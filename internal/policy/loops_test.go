package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func ownedPod(name string, labels map[string]string, kind, owner string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name + "-uid"), Labels: labels}}
	if kind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner, UID: types.UID(owner + "-uid"), Controller: &yes}}
	}
	return p
}

func TestWorkloadOf_GroupsByOwningWorkload(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want Workload
	}{
		{"replica set of a deployment rolls up by its template hash",
			ownedPod("web-7d9f8c6b5-x2x4q", map[string]string{"pod-template-hash": "7d9f8c6b5"}, "ReplicaSet", "web-7d9f8c6b5"),
			Workload{Kind: "Deployment", APIVersion: "apps/v1", Namespace: "shop", Name: "web"}},
		{"replica set whose name does not end in the hash stays a replica set",
			ownedPod("rs-abc", map[string]string{"pod-template-hash": "zzz"}, "ReplicaSet", "hand-made"),
			Workload{Kind: "ReplicaSet", APIVersion: "apps/v1", Namespace: "shop", Name: "hand-made", UID: "hand-made-uid"}},
		{"stateful set", ownedPod("db-0", nil, "StatefulSet", "db"),
			Workload{Kind: "StatefulSet", APIVersion: "apps/v1", Namespace: "shop", Name: "db", UID: "db-uid"}},
		{"job", ownedPod("report-x1", nil, "Job", "report-28000000"),
			Workload{Kind: "Job", APIVersion: "apps/v1", Namespace: "shop", Name: "report-28000000", UID: "report-28000000-uid"}},
		{"bare pod by name", ownedPod("scratch", nil, "", ""),
			Workload{Kind: "Pod", APIVersion: "v1", Namespace: "shop", Name: "scratch", UID: "scratch-uid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WorkloadOf(tc.pod); got != tc.want {
				t.Errorf("WorkloadOf = %+v, want %+v", got, tc.want)
			}
		})
	}
	if k := (Workload{Kind: "CronTab"}).MetricKind(); k != WorkloadOther {
		t.Errorf("MetricKind of a custom kind = %q, want %q (bounded label values)", k, WorkloadOther)
	}
}

var testLoops = LoopsConfig{Enabled: true, Count: 3, Window: 10 * time.Minute, InitialBackoff: time.Minute, MaxBackoff: 8 * time.Minute}

func TestLoopTracker_CountInWindowMakesALoopAndBackoffDoubles(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	web := Workload{Kind: "Deployment", Namespace: "shop", Name: "web"}
	tr := NewLoopTracker(testLoops, nil, t0)
	at := func(d time.Duration) LoopEviction {
		return LoopEviction{At: t0.Add(d), Pod: "web-x", Signal: SignalMemoryAvailable, Memory: 1 << 30, GrowthRate: 1 << 25}
	}
	if v := tr.Record(web, at(0)); v.InLoop || v.Count != 1 {
		t.Fatalf("first eviction: %+v, want no loop, count 1", v)
	}
	// Another workload's evictions never count against web.
	tr.Record(Workload{Kind: "Pod", Namespace: "shop", Name: "other"}, at(30*time.Second))
	if v := tr.Record(web, at(time.Minute)); v.InLoop || v.Count != 2 {
		t.Fatalf("second eviction: %+v, want no loop, count 2", v)
	}
	v := tr.Record(web, at(2*time.Minute))
	if !v.InLoop || !v.Started || v.Count != 3 || v.Backoff != time.Minute || !v.Until.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("third eviction within the window: %+v, want a loop started, count 3, backoff 1m until +3m", v)
	}
	if h := tr.Holds(t0.Add(2 * time.Minute)); !h[v1.NodeMemoryPressure].Equal(v.Until) {
		t.Errorf("Holds = %v, want MemoryPressure until %v", h, v.Until)
	}
	wantBackoff := []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 8 * time.Minute}
	when := 2 * time.Minute
	for i, want := range wantBackoff {
		when += v.Backoff + 30*time.Second // the replacement returns after the backoff and grows for 30 s
		v = tr.Record(web, at(when))
		if !v.InLoop || v.Started || v.Backoff != want || v.Count != 4+i {
			t.Fatalf("eviction %d in the loop: %+v, want backoff %v, count %d", 4+i, v, want, 4+i)
		}
	}
	if v.Rate != 1<<25 {
		t.Errorf("growth rate %v, want %v", v.Rate, 1<<25)
	}
	// The workload stays away for the window after its backoff: the loop is over.
	tr.Expire(v.Until.Add(testLoops.Window))
	if _, looping := tr.Looping(web); looping {
		t.Errorf("still looping a window after the backoff ended")
	}
	if got := tr.Record(web, LoopEviction{At: v.Until.Add(testLoops.Window + time.Minute), Signal: SignalMemoryAvailable}); got.InLoop || got.Count != 1 {
		t.Errorf("eviction after the reset: %+v, want counting from 1", got)
	}
}

func TestLoopTracker_EvictionsSpreadBeyondTheWindowAreNoLoop(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	web := Workload{Kind: "Deployment", Namespace: "shop", Name: "web"}
	tr := NewLoopTracker(testLoops, nil, t0)
	for i := range 10 {
		v := tr.Record(web, LoopEviction{At: t0.Add(time.Duration(i) * 6 * time.Minute), Signal: SignalMemoryAvailable})
		if v.InLoop {
			t.Fatalf("eviction %d, 6 min apart with a 10 min window and count 3: loop %+v", i, v)
		}
	}
}

// TestLoopTracker_EvictionsGrowLogarithmically replays a replacement that is
// evicted 30 s after each return, for a day: without the backoff that is one
// eviction a minute; with it, the count after the loop starts follows
// log2(time) until the backoff reaches its cap.
func TestLoopTracker_EvictionsGrowLogarithmically(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := LoopsConfig{Enabled: true, Count: 3, Window: 10 * time.Minute, InitialBackoff: time.Minute, MaxBackoff: 24 * time.Hour}
	web := Workload{Kind: "Deployment", Namespace: "shop", Name: "web"}
	tr := NewLoopTracker(cfg, nil, t0)
	now, n := t0, 0
	for now.Before(t0.Add(24 * time.Hour)) {
		now = now.Add(30 * time.Second)
		v := tr.Record(web, LoopEviction{At: now, Signal: SignalMemoryAvailable})
		n++
		now = now.Add(30 * time.Second) // the pressure transition period
		if v.InLoop {
			now = v.Until
		}
	}
	// 2 evictions before the loop, then k evictions take about 2^k minutes.
	if n > 14 {
		t.Errorf("%d evictions in a day, want at most 14 (3 + log2(1440))", n)
	}
}

func TestLoopTracker_JournalRecordsRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	web := Workload{Kind: "Deployment", Namespace: "shop", Name: "web"}
	tr := NewLoopTracker(testLoops, nil, t0)
	for i := range 4 {
		tr.Record(web, LoopEviction{At: t0.Add(time.Duration(i) * time.Minute), Signal: SignalMemoryAvailable})
	}
	restored := NewLoopTracker(testLoops, tr.Records(), t0.Add(4*time.Minute))
	r, looping := restored.Looping(web)
	if !looping || r.Level != 2 || r.Total != 4 {
		t.Fatalf("restored record %+v (looping %v), want level 2, total 4", r, looping)
	}
	v := restored.Record(web, LoopEviction{At: t0.Add(6 * time.Minute), Signal: SignalMemoryAvailable})
	if v.Count != 5 || v.Backoff != 4*time.Minute {
		t.Errorf("after the restart: %+v, want count 5 and backoff 4m (the schedule goes on)", v)
	}
}

func TestLoopsConfig_Validation(t *testing.T) {
	for _, tc := range []struct{ doc, field string }{
		{"evictionLoops: {count: 1}", "evictionLoops.count"},
		{"evictionLoops: {window: 10s}", "evictionLoops.window"},
		{"evictionLoops: {initialBackoff: 10m, maxBackoff: 1m}", "evictionLoops.maxBackoff"},
	} {
		errs := loadErrors(t, tc.doc)
		if len(errs) != 1 || !strings.HasPrefix(errs[0], tc.field+": ") {
			t.Errorf("%s: errors %q, want one naming %s", tc.doc, errs, tc.field)
		}
	}
	cfg := mustLoad(t, "evictionLoops: {count: 2, window: 3m, initialBackoff: 20s, maxBackoff: 2m}")
	if want := (LoopsConfig{Enabled: true, Count: 2, Window: 3 * time.Minute, InitialBackoff: 20 * time.Second, MaxBackoff: 2 * time.Minute}); cfg.Loops != want {
		t.Errorf("Loops = %+v, want %+v", cfg.Loops, want)
	}
	if d := mustLoad(t, ""); d.Loops != (LoopsConfig{Enabled: true, Count: DefaultLoopCount, Window: DefaultLoopWindow,
		InitialBackoff: DefaultLoopInitialBackoff, MaxBackoff: DefaultLoopMaxBackoff}) {
		t.Errorf("default Loops = %+v", d.Loops)
	}
}
