package policy

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memInput is an input under memory pressure: available bytes of 8Gi at the clock's now.
func memInput(clock *fakeClock, available int64, pods []*v1.Pod, stats PodStatsByUID) Input {
	return Input{Observations: Observations{SignalMemoryAvailable: obsAt(available, 8*Gi, clock.now)}, Pods: pods, Stats: stats}
}

const memCfg = "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: []\nexclusions: {daemonSetPods: true}"

func TestExclusions(t *testing.T) {
	cfg := mustLoad(t, `
evictionHard: {memory.available: 500Mi}
exclusions:
  namespaces: [kube-system, monitoring]
  podSelector: {matchLabels: {evictiond.io/protect: "true"}}
  minPodAge: 10m`)
	now := t0
	trueVal := true
	dsOwned := func(controller *bool) podOpt {
		return func(p *v1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds", Controller: controller}}
		}
	}
	deleting := func(p *v1.Pod) { ts := metav1.NewTime(now); p.DeletionTimestamp = &ts }
	phase := func(ph v1.PodPhase) podOpt { return func(p *v1.Pod) { p.Status.Phase = ph } }
	cases := []struct {
		name   string
		pod    *v1.Pod
		reason string // "" = eligible
	}{
		{"ordinary pod", newPod("web"), ""},
		{"evictiond's own pod", newPod("self"), "evictiond's own pod"},
		{"static pod (config.source file)", newPod("etcd", withAnnotation("kubernetes.io/config.source", "file")), "critical pod (static, mirror, or priority >= system-critical)"},
		{"config.source api is not static", newPod("api", withAnnotation("kubernetes.io/config.source", "api")), ""},
		{"mirror pod", newPod("mirror", withAnnotation("kubernetes.io/config.mirror", "abc")), "critical pod (static, mirror, or priority >= system-critical)"},
		{"priority exactly system-critical", newPod("crit", withPriority(SystemCriticalPriority)), "critical pod (static, mirror, or priority >= system-critical)"},
		{"system-node-critical", newPod("node-crit", withPriority(2000001000)), "critical pod (static, mirror, or priority >= system-critical)"},
		{"priority just below system-critical", newPod("high", withPriority(SystemCriticalPriority-1)), ""},
		{"terminating", newPod("going", deleting), "already terminating"},
		{"succeeded", newPod("done", phase(v1.PodSucceeded)), "not running (phase Succeeded)"},
		{"failed", newPod("failed", phase(v1.PodFailed)), "not running (phase Failed)"},
		{"excluded namespace", newPod("prom", withNamespace("monitoring")), "namespace monitoring is excluded"},
		{"other namespace", newPod("app", withNamespace("shop")), ""},
		{"label selector match", newPod("db", withLabels("evictiond.io/protect", "true")), "labels match exclusions.podSelector"},
		{"label selector other value", newPod("db2", withLabels("evictiond.io/protect", "false")), ""},
		{"DaemonSet-owned", newPod("agent", dsOwned(&trueVal)), "owned by a DaemonSet"},
		{"DaemonSet owner that is not the controller", newPod("adopted", dsOwned(nil)), ""},
		{"younger than minPodAge", newPod("new", withCreated(now.Add(-9*time.Minute))), "younger than exclusions.minPodAge (10m0s)"},
		{"exactly minPodAge old", newPod("ten", withCreated(now.Add(-10*time.Minute))), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := exclusionReason(tc.pod, cfg, "self", now); got != tc.reason {
				t.Fatalf("exclusionReason = %q, want %q", got, tc.reason)
			}
		})
	}
	// DaemonSet pods may be allowed.
	cfg2 := mustLoad(t, "exclusions: {daemonSetPods: false}")
	if got := exclusionReason(newPod("agent", dsOwned(&trueVal)), cfg2, "", now); got != "" {
		t.Fatalf("daemonSetPods false: exclusionReason = %q, want eligible", got)
	}
	// An empty self UID matches no pod.
	if got := exclusionReason(newPod("x", func(p *v1.Pod) { p.UID = "" }), cfg2, "", now); got != "" {
		t.Fatalf("pod without UID excluded as evictiond's own: %q", got)
	}
}

func TestSelect_ExcludedPodsListedAndNeverCandidates(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, memCfg), clock, "self")
	pods := []*v1.Pod{newPod("self"), newPod("crit", withPriority(SystemCriticalPriority)), newPod("ok")}
	stats := PodStatsByUID{"self": memStats(5 * Gi), "crit": memStats(5 * Gi), "ok": memStats(Mi)}
	a := e.Assess(memInput(clock, 100*Mi, pods, stats))
	sel := e.Select(a, nil, 10)
	if podNames(sel.Ranking) != "ok" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "ok" {
		t.Fatalf("ranking %s, candidates %d; want only ok", podNames(sel.Ranking), len(sel.Candidates))
	}
	if len(sel.Excluded) != 2 {
		t.Fatalf("excluded = %+v, want self and crit", sel.Excluded)
	}
}

// Section 3.4: hard 1 s; soft min(evictionMaxPodGracePeriod, TGPS), or
// evictionMaxPodGracePeriod without TGPS — never 0, which the Eviction API
// takes as a forced deletion that does not wait for the kubelet.
func TestSelect_GracePeriodChoice(t *testing.T) {
	cases := []struct {
		name     string
		maxGrace int
		hard     bool
		tgps     *int64
		want     int64
	}{
		{"hard ignores TGPS", 60, true, i64(300), 1},
		{"hard without TGPS", 0, true, nil, 1},
		{"soft: TGPS below the cap", 60, false, i64(20), 20},
		{"soft: cap below TGPS", 60, false, i64(300), 60},
		{"soft without TGPS: the cap", 45, false, nil, 45},
		{"soft with the default cap 0: 1 s, not a forced deletion", 0, false, i64(30), 1},
		{"soft with TGPS 0: 1 s, not a forced deletion", 60, false, i64(0), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: []\n"
			if !tc.hard {
				body = "evictionHard: {}\nevictionSoft: {memory.available: 500Mi}\nevictionSoftGracePeriod: {memory.available: 10s}\n"
			}
			body += "evictionMaxPodGracePeriod: " + itoa(tc.maxGrace)
			clock := newFakeClock()
			e := NewEngine(mustLoad(t, body), clock, "")
			pod := newPod("p")
			pod.Spec.TerminationGracePeriodSeconds = tc.tgps
			pods, stats := []*v1.Pod{pod}, PodStatsByUID{"p": memStats(Gi)}
			a := e.Assess(memInput(clock, 100*Mi, pods, stats))
			if !tc.hard {
				clock.Step(10 * time.Second)
				a = e.Assess(memInput(clock, 100*Mi, pods, stats))
			}
			sel := e.Select(a, nil, 1)
			if len(sel.Candidates) != 1 {
				t.Fatalf("no candidate (waiting %q)", sel.Waiting)
			}
			c := sel.Candidates[0]
			if c.Hard != tc.hard || c.GracePeriodSeconds != tc.want {
				t.Fatalf("hard %v grace %d, want hard %v grace %d", c.Hard, c.GracePeriodSeconds, tc.hard, tc.want)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Section 3.3: the kubelet's message, against the example from the field.
func TestSelect_KubeletStyleMessageAndAnnotations(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 100Mi}\nenforceNodeAllocatable: []"), clock, "")
	pod := newPod("mem-eater", withContainers(
		container("mem-eater", resourceList("memory", "100Mi"), nil),
		container("sidecar", resourceList("memory", "64Mi"), nil),
		container("quiet", resourceList("memory", "1Gi"), nil),
	))
	stats := PodStatsByUID{"mem-eater": {MemoryWorkingSet: i64(3694056*Ki + 100*Mi), Containers: map[string]ContainerStats{
		"mem-eater": {MemoryWorkingSet: i64(3694056 * Ki)},
		"sidecar":   {MemoryWorkingSet: i64(100 * Mi)},
		"quiet":     {MemoryWorkingSet: i64(10 * Mi)},
	}}}
	a := e.Assess(memInput(clock, 58472*Ki, []*v1.Pod{pod}, stats))
	sel := e.Select(a, nil, 1)
	if len(sel.Candidates) != 1 {
		t.Fatalf("no candidate (waiting %q)", sel.Waiting)
	}
	c := sel.Candidates[0]
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 58472Ki. " +
		"Container mem-eater was using 3694056Ki, request is 100Mi, has larger consumption of memory. " +
		"Container sidecar was using 100Mi, request is 64Mi, has larger consumption of memory. "
	if c.Message != want {
		t.Fatalf("message:\n%q\nwant:\n%q", c.Message, want)
	}
	wantAnn := map[string]string{"offending_containers": "mem-eater,sidecar", "offending_containers_usage": "3694056Ki,100Mi", "starved_resource": "memory"}
	if !maps.Equal(c.Annotations, wantAnn) {
		t.Fatalf("annotations = %v, want %v", c.Annotations, wantAnn)
	}
}

func TestSelect_DiskMessageResolvesPercentage(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {nodefs.available: 50%}\nreclaim: {containerGC: false, podLogs: false, imageGC: {enabled: false}}"), clock, "")
	pod := newPod("logger", withRequests("ephemeral-storage", "1Gi"))
	stats := PodStatsByUID{"logger": {Containers: map[string]ContainerStats{"c": {RootfsBytes: i64(Gi), LogsBytes: i64(2 * Gi)}}}}
	a := e.Assess(Input{Observations: Observations{SignalNodeFsAvailable: obsAt(40*Gi, 100*Gi, t0)}, Pods: []*v1.Pod{pod}, Stats: stats})
	sel := e.Select(a, nil, 1)
	if len(sel.Candidates) != 1 {
		t.Fatalf("no candidate")
	}
	want := "The node was low on resource: ephemeral-storage. Threshold quantity: 50Gi, available: 40Gi. " +
		"Container c was using 3Gi, request is 1Gi, has larger consumption of ephemeral-storage. "
	if c := sel.Candidates[0]; c.Message != want || c.Annotations["starved_resource"] != "ephemeral-storage" || c.ExpectedReclaim != 3*Gi {
		t.Fatalf("candidate message %q annotations %v expected reclaim %d;\nwant message %q, starved ephemeral-storage, 3Gi", c.Message, c.Annotations, c.ExpectedReclaim, want)
	}
}

// One victim per pass, and the wait for it: while it terminates nothing else
// is chosen; once gone, its expected reclaim is credited against stats older
// than its departure; stats taken after it are used as they are.
func TestEngine_OneVictimAndTheWaitForIt(t *testing.T) {
	clock := newFakeClock()
	cfg := mustLoad(t, "evictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []\nloop: {podCleanupTimeout: 30s}")
	e := NewEngine(cfg, clock, "")
	hog, second, third := newPod("hog"), newPod("second"), newPod("third")
	stats := PodStatsByUID{"hog": memStats(2 * Gi), "second": memStats(600 * Mi), "third": memStats(100 * Mi)}
	all := []*v1.Pod{hog, second, third}

	pass := func(avail int64, obsTime time.Time, pods []*v1.Pod) Selection {
		clock.Step(time.Second)
		in := Input{Observations: Observations{SignalMemoryAvailable: obsAt(avail, 8*Gi, obsTime)}, Pods: pods, Stats: stats}
		a := e.Assess(in)
		if a.Starved == nil {
			return Selection{}
		}
		return e.Select(a, nil, 3)
	}

	sel := pass(500*Mi, clock.now.Add(time.Second), all)
	if len(sel.Candidates) != 3 || sel.Candidates[0].Pod.Name != "hog" || sel.Candidates[0].ExpectedReclaim != 2*Gi {
		t.Fatalf("first pass: candidates %+v", sel.Candidates)
	}
	e.Evicted(sel.Candidates[0])
	if got := e.Pending(); len(got) != 1 || got[0] != "default/hog" {
		t.Fatalf("pending = %v", got)
	}

	// hog still terminating: wait, whatever the numbers say.
	sel = pass(400*Mi, clock.now.Add(time.Second), all)
	if !strings.HasPrefix(sel.Waiting, "waiting for default/hog to terminate") || len(sel.Candidates) != 0 {
		t.Fatalf("while terminating: waiting %q, %d candidates", sel.Waiting, len(sel.Candidates))
	}

	// hog gone, but the sample predates its departure: 400Mi + 2Gi credit
	// is above the threshold, so wait for newer stats instead of evicting.
	gone := []*v1.Pod{second, third}
	departure := clock.now.Add(time.Second)
	sel = pass(400*Mi, departure, gone)
	if !strings.HasPrefix(sel.Waiting, "expected reclaim of [default/hog] (2Gi) brings memory.available to 2448Mi") {
		t.Fatalf("stale stats after departure: waiting %q, %d candidates", sel.Waiting, len(sel.Candidates))
	}

	// Stats taken after the departure: hog is forgotten; pressure is real,
	// so the next victim is chosen.
	sel = pass(300*Mi, clock.now.Add(time.Second), gone)
	if sel.Waiting != "" || len(sel.Candidates) == 0 || sel.Candidates[0].Pod.Name != "second" {
		t.Fatalf("fresh stats: waiting %q, candidates %+v", sel.Waiting, sel.Candidates)
	}
	if len(e.Pending()) != 0 {
		t.Fatalf("pending after fresh stats = %v", e.Pending())
	}
}

// When the credit does not lift the signal above the threshold, the next
// victim is chosen at once: waiting would only let the OOM killer win.
func TestEngine_CreditTooSmallChoosesNextVictim(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []"), clock, "")
	small, big := newPod("small"), newPod("big")
	stats := PodStatsByUID{"small": memStats(100 * Mi), "big": memStats(50 * Mi)}
	// "small" ranks first (more above its zero request)
	a := e.Assess(memInput(clock, 100*Mi, []*v1.Pod{small, big}, stats))
	sel := e.Select(a, nil, 1)
	e.Evicted(sel.Candidates[0])
	clock.Step(time.Second)
	a = e.Assess(memInput(clock, 100*Mi, []*v1.Pod{big}, stats)) // gone now; sample at departure time
	sel = e.Select(a, nil, 1)
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "big" {
		t.Fatalf("waiting %q candidates %d; want big chosen", sel.Waiting, len(sel.Candidates))
	}
}

// After loop.podCleanupTimeout an evicted pod that is still there no longer
// blocks, as documented for loop.podCleanupTimeout and as the kubelet's
// waitForPodsCleanup does. Its usage is not credited either: it has freed
// nothing and, stuck terminating, may never do so; crediting it would
// stop every later eviction for the signal.
func TestEngine_PodCleanupTimeoutBoundsTheWait(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []\nloop: {podCleanupTimeout: 5s}"), clock, "")
	stuck, other := newPod("stuck"), newPod("other")
	stats := PodStatsByUID{"stuck": memStats(3 * Gi), "other": memStats(10 * Mi)}
	pods := []*v1.Pod{stuck, other}
	a := e.Assess(memInput(clock, 100*Mi, pods, stats))
	e.Evicted(e.Select(a, nil, 1).Candidates[0])
	clock.Step(4 * time.Second)
	if sel := e.Select(e.Assess(memInput(clock, 100*Mi, pods, stats)), nil, 1); !strings.HasPrefix(sel.Waiting, "waiting for default/stuck to terminate") {
		t.Fatalf("within the timeout: waiting %q", sel.Waiting)
	}
	for i := 0; i < 3; i++ {
		clock.Step(time.Second)
		sel := e.Select(e.Assess(memInput(clock, 100*Mi, pods, stats)), nil, 1)
		if sel.Waiting != "" || podNames(sel.Ranking) != "other" || len(sel.Candidates) != 1 {
			t.Fatalf("%v after the timeout: waiting %q, ranking %s; want other chosen", time.Duration(i+1)*time.Second, sel.Waiting, podNames(sel.Ranking))
		}
	}
}

// Local-storage limit violations (section 3.5), evicted before threshold
// evictions, several per pass, 1 s grace.
func TestLocalStorageViolations(t *testing.T) {
	logs := func(c string, root, logs int64) PodStats {
		return PodStats{Containers: map[string]ContainerStats{c: {RootfsBytes: i64(root), LogsBytes: i64(logs)}}}
	}
	cases := []struct {
		name    string
		pod     *v1.Pod
		stats   PodStats
		layout  FilesystemLayout
		signal  Signal
		message string
	}{
		{name: "emptyDir over its sizeLimit",
			pod:    newPod("p", withVolumes(emptyDir("cache", "1Gi", ""))),
			stats:  PodStats{Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(Gi + 1)}}},
			signal: SignalEmptyDirLimit, message: `Usage of EmptyDir volume "cache" exceeds the limit "1Gi". `},
		{name: "emptyDir at its sizeLimit",
			pod:   newPod("p", withVolumes(emptyDir("cache", "1Gi", ""))),
			stats: PodStats{Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(Gi)}}}},
		{name: "memory emptyDir over its sizeLimit counts too",
			pod:    newPod("p", withVolumes(emptyDir("shm", "64Mi", v1.StorageMediumMemory))),
			stats:  PodStats{Volumes: map[string]VolumeStats{"shm": {UsedBytes: i64(65 * Mi)}}},
			signal: SignalEmptyDirLimit, message: `Usage of EmptyDir volume "shm" exceeds the limit "64Mi". `},
		{name: "pod over the sum of its containers' limits",
			pod: newPod("p", withContainers(
				container("a", nil, resourceList("ephemeral-storage", "1Gi")),
				container("b", nil, resourceList("ephemeral-storage", "1Gi")))),
			stats:  PodStats{EphemeralStorageBytes: i64(2*Gi + 1), Containers: map[string]ContainerStats{"a": {LogsBytes: i64(Gi - 1)}, "b": {LogsBytes: i64(Gi - 1)}}},
			signal: SignalPodEphemeralLimit, message: "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. "},
		{name: "pod total derived from containers and local volumes",
			pod:    newPod("p", withLimits("ephemeral-storage", "2Gi"), withVolumes(emptyDir("scratch", "", ""))),
			stats:  PodStats{Containers: map[string]ContainerStats{"c": {LogsBytes: i64(Gi / 2)}}, Volumes: map[string]VolumeStats{"scratch": {UsedBytes: i64(2 * Gi)}}},
			signal: SignalPodEphemeralLimit, message: "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. "},
		{name: "container over its limit, single filesystem counts rootfs",
			pod:    newPod("p", withContainers(container("c", nil, resourceList("ephemeral-storage", "1Gi")), container("d", nil, resourceList("ephemeral-storage", "1Gi")))),
			stats:  logs("c", Gi+Gi/2, 1), // pod total 1.5Gi is within the pod's 2Gi
			signal: SignalContainerEphemeralLimit, message: `Container c exceeded its local ephemeral storage limit "1Gi". `},
		{name: "dedicated imagefs: rootfs not counted",
			pod:    newPod("p", withContainers(container("c", nil, resourceList("ephemeral-storage", "1Gi")), container("d", nil, resourceList("ephemeral-storage", "1Gi")))),
			stats:  logs("c", Gi+Gi/2, 1),
			layout: FilesystemLayout{DedicatedImageFs: true}},
		{name: "dedicated imagefs: logs alone over the limit",
			pod:    newPod("p", withContainers(container("c", nil, resourceList("ephemeral-storage", "1Gi")), container("d", nil, resourceList("ephemeral-storage", "1Gi")))),
			stats:  logs("c", 0, Gi+1),
			layout: FilesystemLayout{DedicatedImageFs: true},
			signal: SignalContainerEphemeralLimit, message: `Container c exceeded its local ephemeral storage limit "1Gi". `},
		{name: "emptyDir checked before the pod limit",
			pod:    newPod("p", withLimits("ephemeral-storage", "1Gi"), withVolumes(emptyDir("cache", "100Mi", ""))),
			stats:  PodStats{EphemeralStorageBytes: i64(5 * Gi), Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(200 * Mi)}}},
			signal: SignalEmptyDirLimit, message: `Usage of EmptyDir volume "cache" exceeds the limit "100Mi". `},
		{name: "no limits, no violation",
			pod:   newPod("p"),
			stats: PodStats{EphemeralStorageBytes: i64(500 * Gi)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sig, msg, _, violated := localStorageViolation(tc.pod, tc.stats, tc.layout)
			if violated != (tc.signal != "") || sig != tc.signal || msg != tc.message {
				t.Fatalf("violation %v %q %q, want %v %q %q", violated, sig, msg, tc.signal != "", tc.signal, tc.message)
			}
		})
	}
}

func TestEngine_LocalStorageCandidates(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {}\nexclusions: {namespaces: [kube-system]}"), clock, "")
	over := func(name string, opts ...podOpt) *v1.Pod {
		return newPod(name, append(opts, withVolumes(emptyDir("cache", "1Gi", "")))...)
	}
	pods := []*v1.Pod{over("a"), over("b"), over("sys", withNamespace("kube-system")), over("within"), over("nostats")}
	st := PodStats{Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(2 * Gi)}}}
	stats := PodStatsByUID{"a": st, "b": st, "sys": st, "within": {Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(Mi)}}}}
	a := e.Assess(Input{Pods: pods, Stats: stats})
	if len(a.LocalStorage) != 2 || a.LocalStorage[0].Pod.Name != "a" || a.LocalStorage[1].Pod.Name != "b" {
		t.Fatalf("local-storage candidates = %+v, want a and b", a.LocalStorage)
	}
	c := a.LocalStorage[0]
	if !c.Hard || !c.LocalStorage || c.GracePeriodSeconds != 1 || c.Signal != SignalEmptyDirLimit || c.ExpectedReclaim != 2*Gi {
		t.Fatalf("candidate = %+v", c)
	}
	e.Evicted(c)
	clock.Step(time.Second)
	if a := e.Assess(Input{Pods: pods, Stats: stats}); len(a.LocalStorage) != 1 || a.LocalStorage[0].Pod.Name != "b" {
		t.Fatalf("after evicting a: %+v, want only b", a.LocalStorage)
	}
	off := NewEngine(mustLoad(t, "localStorageCapacityIsolation: false"), clock, "")
	if a := off.Assess(Input{Pods: pods, Stats: stats}); len(a.LocalStorage) != 0 {
		t.Fatalf("localStorageCapacityIsolation false still found %d", len(a.LocalStorage))
	}
}

// A pod container ephemeral-storage limit of 0 means no limit to the
// kubelet (containerEphemeralStorageLimitEviction skips it).
func TestLocalStorage_ZeroContainerLimitIgnored(t *testing.T) {
	pod := newPod("p", withContainers(container("c", nil, resourceList("ephemeral-storage", "0")), container("d", nil, resourceList("ephemeral-storage", "1Gi"))))
	st := PodStats{EphemeralStorageBytes: i64(Mi), Containers: map[string]ContainerStats{"c": {LogsBytes: i64(Mi)}}}
	if sig, msg, _, violated := localStorageViolation(pod, st, FilesystemLayout{}); violated {
		t.Fatalf("zero limit violated: %s %q", sig, msg)
	}
}

// PIDs and inodes are counts and print as plain integers everywhere, not
// as "4k" next to "3500".
func TestFormatValue_CountsArePlainIntegers(t *testing.T) {
	cases := []struct {
		signal Signal
		v      int64
		want   string
	}{
		{SignalPIDAvailable, 4000, "4000"},
		{SignalPIDAvailable, 3500, "3500"},
		{SignalNodeFsInodesFree, 5_000_000, "5000000"},
		{SignalMemoryAvailable, 500 * Mi, "500Mi"},
		{SignalNodeFsAvailable, 1536 * Mi, "1536Mi"},
		{SignalNodeFsAvailable, 1_000_000_000, "1000000000"},
		{SignalMemoryPSISomeAvg10, PSIScale - 4225, "42.25%"},
	}
	for _, tc := range cases {
		if got := FormatValue(tc.signal, tc.v); got != tc.want {
			t.Errorf("FormatValue(%s, %d) = %q, want %q", tc.signal, tc.v, got, tc.want)
		}
	}
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, `evictionHard: {pid.available: "5000"}`), clock, "")
	pods := []*v1.Pod{newPod("p")}
	a := e.Assess(Input{Observations: Observations{SignalPIDAvailable: obsAt(3100, 32768, t0)}, Pods: pods, Stats: PodStatsByUID{"p": {Processes: i64(10)}}})
	sel := e.Select(a, nil, 1)
	if want := "The node was low on resource: pids. Threshold quantity: 5000, available: 3100. "; len(sel.Candidates) != 1 || sel.Candidates[0].Message != want {
		t.Fatalf("candidates %+v, want message %q", sel.Candidates, want)
	}
}

// A pod evicted for a local-storage limit is waited for like any other
// (the kubelet's waitForPodsCleanup gets those pods too): while it
// terminates no threshold victim is chosen on disk numbers that still hold
// its usage, and once gone its usage is credited until newer stats.
func TestEngine_LocalStorageEvictionIsWaitedFor(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {nodefs.available: 10Gi}\nreclaim: {containerGC: false, podLogs: false, imageGC: {enabled: false}}"), clock, "")
	filler := newPod("filler", withVolumes(emptyDir("cache", "1Gi", "")))
	other := newPod("other")
	stats := PodStatsByUID{
		"filler": {Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(3 * Gi)}}},
		"other":  {Containers: map[string]ContainerStats{"c": {RootfsBytes: i64(5 * Gi)}}},
	}
	input := func(avail int64, at time.Time, pods ...*v1.Pod) Input {
		return Input{Observations: Observations{SignalNodeFsAvailable: obsAt(avail, 100*Gi, at)}, Pods: pods, Stats: stats}
	}
	// Pass 1: plenty of space; filler is over its emptyDir limit.
	a := e.Assess(input(50*Gi, clock.now, filler, other))
	if len(a.LocalStorage) != 1 {
		t.Fatalf("local-storage candidates: %d", len(a.LocalStorage))
	}
	e.Evicted(a.LocalStorage[0])

	// Pass 2: nodefs below its threshold while filler still terminates: wait.
	clock.Step(time.Second)
	sel := e.Select(e.Assess(input(8*Gi, clock.now, filler, other)), nil, 1)
	if !strings.HasPrefix(sel.Waiting, "waiting for default/filler to be removed") {
		t.Fatalf("while the local-storage victim terminates: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}

	// Pass 3: filler gone, stats from the moment it left: 8Gi + 3Gi credit
	// is above the threshold, so wait for newer stats.
	clock.Step(time.Second)
	sel = e.Select(e.Assess(input(8*Gi, clock.now, other)), nil, 1)
	if !strings.HasPrefix(sel.Waiting, "expected reclaim of [default/filler] (3Gi)") {
		t.Fatalf("stale stats after departure: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}

	// Pass 4: newer stats, 1 s after it left, still below the threshold: its
	// space may show a moment later (diskSettleWindow).
	clock.Step(time.Second)
	sel = e.Select(e.Assess(input(9*Gi, clock.now, other)), nil, 1)
	if !strings.HasPrefix(sel.Waiting, "waiting for default/filler's space to show on the filesystem (removed 1s ago; up to 2s)") {
		t.Fatalf("newer stats within the settle window: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}

	// Pass 5: 2 s after it left, still below the threshold: evict for real.
	clock.Step(time.Second)
	sel = e.Select(e.Assess(input(9*Gi, clock.now, other)), nil, 1)
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "other" {
		t.Fatalf("fresh stats: waiting %q, candidates %+v", sel.Waiting, sel.Candidates)
	}
}

// A PSI average shows a departure only after its window: after a pod left
// for any memory signal (memory.available here), a PSI threshold does not
// choose a second victim until the window has passed since it left.
func TestEngine_PSIWaitsForItsWindowAfterAnyMemoryEviction(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, `
evictionHard: {memory.available: 500Mi}
evictionSoft: {memory.pressure.some.avg10: 30%}
evictionSoftGracePeriod: {memory.pressure.some.avg10: 5s}
enforceNodeAllocatable: []`), clock, "")
	a, b := newPod("a"), newPod("b")
	stats := PodStatsByUID{"a": memStats(4 * Gi), "b": memStats(2 * Gi)}
	pass := func(after time.Duration, mem int64, stall int64, pods ...*v1.Pod) Selection {
		clock.Step(after)
		return e.Select(e.Assess(Input{Observations: Observations{
			SignalMemoryAvailable:    obsAt(mem, 8*Gi, clock.now),
			SignalMemoryPSISomeAvg10: obsAt(PSIScale-stall, PSIScale, clock.now),
		}, Pods: pods, Stats: stats}), nil, 1)
	}
	pass(0, 2*Gi, 5000, a, b)
	sel := pass(5*time.Second, 400*Mi, 5000, a, b) // memory first
	if len(sel.Candidates) != 1 || sel.Candidates[0].Signal != SignalMemoryAvailable || sel.Candidates[0].Pod.Name != "a" {
		t.Fatalf("first victim: %+v", sel.Candidates)
	}
	e.Evicted(sel.Candidates[0])
	pass(time.Second, 400*Mi, 5000, b) // a gone now
	sel = pass(2*time.Second, 4*Gi, 4500, b)
	if !strings.HasPrefix(sel.Waiting, "waiting for memory.pressure.some.avg10's pressure average to settle after default/a left") {
		t.Fatalf("2 s after a left: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}
	sel = pass(8*time.Second, 4*Gi, 4500, b) // 10 s after a left
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "b" {
		t.Fatalf("10 s after a left, stall still 45%%: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}
}

// The same bound as for other signals: a pod evicted for PSI that is still
// there past loop.podCleanupTimeout does not block forever.
func TestEngine_PSIStuckPodDoesNotBlockForever(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.pressure.some.avg10: 30%}\nloop: {podCleanupTimeout: 5s}"), clock, "")
	a, b := newPod("a"), newPod("b")
	stats := PodStatsByUID{"a": memStats(4 * Gi), "b": memStats(2 * Gi)}
	in := func() Input {
		return Input{Observations: Observations{SignalMemoryPSISomeAvg10: obsAt(PSIScale-5000, PSIScale, clock.now)}, Pods: []*v1.Pod{a, b}, Stats: stats}
	}
	sel := e.Select(e.Assess(in()), nil, 1)
	e.Evicted(sel.Candidates[0])
	clock.Step(6 * time.Second)
	if sel := e.Select(e.Assess(in()), nil, 1); sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "b" {
		t.Fatalf("past the timeout with a still there: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}
}

// Degenerate inputs decide nothing rather than panic: no stats map, pods
// without containers, zero capacities, observations without time.
func TestEngine_DegenerateInputs(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 10%, nodefs.available: 1Gi, pid.available: \"10\"}"), clock, "")
	bare := &v1.Pod{}
	bare.Name, bare.UID = "bare", "bare"
	inputs := []Input{
		{},
		{Pods: []*v1.Pod{bare}},
		{Observations: Observations{SignalMemoryAvailable: {}}, Pods: []*v1.Pod{bare}},
		{Observations: Observations{SignalNodeFsAvailable: {Available: 0, Capacity: 0, Time: t0}}, Pods: []*v1.Pod{bare, newPod("p")}},
		{Observations: Observations{SignalPIDAvailable: {Available: -5, Capacity: 10, Time: t0}}, Pods: []*v1.Pod{bare}, Stats: PodStatsByUID{"bare": {}}},
	}
	for i, in := range inputs {
		clock.Step(time.Second)
		a := e.Assess(in)
		sel := e.Select(a, nil, 3)
		if i == 3 && (a.Starved == nil || len(sel.Candidates) != 2) {
			t.Fatalf("input %d: nodefs 0 < 1Gi should evict one of two pods: starved %v, candidates %d", i, a.Starved != nil, len(sel.Candidates))
		}
	}
}

// A pod evicted for a disk signal frees its space only when the kubelet
// removes it (its emptyDirs, logs and writable layer go with the pod), not
// when its containers exit: a terminated pod still on the node is waited
// for, and no second victim is chosen on disk numbers that still hold the
// first one's files (make bench-ramp's disk filler: the writer ended by
// SIGTERM showed Succeeded while its 2 GiB emptyDir was still there, and the
// Guaranteed bystander, which wrote nothing, was evicted next). A memory
// victim is gone as soon as it terminated, as before.
func TestEngine_DiskVictimIsWaitedForUntilRemovedNotJustTerminated(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {nodefs.available: 1Gi, memory.available: 100Mi}\nreclaim: {containerGC: false, podLogs: false, imageGC: {enabled: false}}"), clock, "")
	writer := newPod("writer", withVolumes(emptyDir("scratch", "", "")))
	bystander := newPod("bystander")
	stats := PodStatsByUID{
		"writer":    {Volumes: map[string]VolumeStats{"scratch": {UsedBytes: i64(2 * Gi)}}},
		"bystander": {Containers: map[string]ContainerStats{"c": {RootfsBytes: i64(1 * Mi)}}},
	}
	input := func(avail int64, pods ...*v1.Pod) Input {
		return Input{Observations: Observations{SignalNodeFsAvailable: obsAt(avail, 3*Gi, clock.now), SignalMemoryAvailable: obsAt(8*Gi, 16*Gi, clock.now)},
			Pods: pods, Stats: stats}
	}
	sel := e.Select(e.Assess(input(900*Mi, writer, bystander)), nil, 1)
	if len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "writer" {
		t.Fatalf("first victim: %+v (waiting %q), want the writer", sel.Candidates, sel.Waiting)
	}
	e.Evicted(sel.Candidates[0])

	terminated := writer.DeepCopy()
	terminated.Status.Phase = v1.PodSucceeded // SIGTERM: it exited 0; its emptyDir is still there
	for i := range 3 {
		clock.Step(time.Second)
		sel = e.Select(e.Assess(input(500*Mi, terminated, bystander)), nil, 1)
		if len(sel.Candidates) != 0 || !strings.HasPrefix(sel.Waiting, "waiting for default/writer to be removed") {
			t.Fatalf("pass %d, writer terminated but not removed: candidates %+v, waiting %q", i+2, sel.Candidates, sel.Waiting)
		}
	}
	// Removed from the API server, but a reading taken 10 ms after (node-level
	// reclaim's) does not show its space yet: the bystander is not the next
	// victim (make bench-ramp evicted it so before diskSettleWindow).
	clock.Step(time.Second)
	a := e.Assess(input(500*Mi, bystander))
	clock.Step(10 * time.Millisecond)
	sel = e.Select(a, Observations{SignalNodeFsAvailable: obsAt(500*Mi, 3*Gi, clock.now), SignalMemoryAvailable: obsAt(8*Gi, 16*Gi, clock.now)}, 1)
	if len(sel.Candidates) != 0 || !strings.HasPrefix(sel.Waiting, "waiting for default/writer's space to show on the filesystem") {
		t.Fatalf("writer removed, its space not shown yet: candidates %+v, waiting %q", sel.Candidates, sel.Waiting)
	}
	// Its space is back.
	clock.Step(time.Second)
	sel = e.Select(e.Assess(input(2500*Mi, bystander)), nil, 1)
	if len(sel.Candidates) != 0 {
		t.Fatalf("after the writer was removed and its space came back: candidates %+v", sel.Candidates)
	}
}
