//go:build integration

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/eviction"
)

// startNodeStatus runs a NodeStatus as the agent on n until the test ends.
func startNodeStatus(t testing.TB, n *testNode, opts NodeStatusOptions) *NodeStatus {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stopRecorder := NewEventRecorder(ctx, n.agent, EventRecorderOptions{NodeName: n.name, Logger: testLogger(t)})
	opts.NodeName = n.name
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	var status *NodeStatus
	inf := n.startInformers(t, func(inf *NodeInformers) {
		var err error
		if status, err = NewNodeStatus(n.agent, inf, recorder, opts); err != nil {
			t.Fatal(err)
		}
	})
	_ = inf
	done := make(chan struct{})
	go func() { defer close(done); status.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; stopRecorder() })
	return status
}

func getNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	node, err := env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func conditionOf(node *corev1.Node, t corev1.NodeConditionType) (corev1.ConditionStatus, string) {
	if c := findCondition(node, t); c != nil {
		return c.Status, c.Reason
	}
	return "", ""
}

func hasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

// writeConditionAsKubelet patches a condition the way the kubelet's status update does.
func writeConditionAsKubelet(t testing.TB, node string, c corev1.NodeCondition) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

func kubeletSufficientMemory() corev1.NodeCondition {
	now := metav1.Now()
	return corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse,
		Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available",
		LastHeartbeatTime: now, LastTransitionTime: now}
}

// nodeWrites counts the agent's writes to node (object and status) in the audit log
// after offset, and returns the log's end as the next offset.
func nodeWrites(t testing.TB, node string, offset int64) (int, []string, int64) {
	t.Helper()
	_, seen, end := auditWrites(t, agentUsername, offset)
	var out []string
	for _, w := range seen {
		_, uri, _ := strings.Cut(w, " ")
		uri, _, _ = strings.Cut(uri, "?")
		if uri == "/api/v1/nodes/"+node || uri == "/api/v1/nodes/"+node+"/status" {
			out = append(out, w)
		}
	}
	return len(out), out, end
}

// nodeWatch records every version of the node from a watch (not sampling) until the
// test ends; versions returns what was seen so far.
type nodeWatch struct {
	mu   sync.Mutex
	seen []*corev1.Node
}

// watchNode records every version of the node from an informer (list, then watch, re-listed
// and re-watched by client-go if the stream breaks: a bare watch stream was seen delivering
// nothing for a whole test on a loaded machine).
func watchNode(t testing.TB, name string) *nodeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
	nw := &nodeWatch{}
	record := func(obj any) {
		if node, ok := obj.(*corev1.Node); ok {
			nw.mu.Lock()
			nw.seen = append(nw.seen, node)
			nw.mu.Unlock()
		}
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("node informer %v did not sync", typ)
		}
	}
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	return nw
}

func (w *nodeWatch) versions() []*corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func TestStandardConditionReassertedAfterKubeletFlipsIt(t *testing.T) {
	n := newTestNode(t)
	status := startNodeStatus(t, n, NodeStatusOptions{Conditions: ConditionsStandard})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeMemoryPressure}, nil)
	waitFor(t, 5*time.Second, "MemoryPressure True with evictiond's reason and its taint", func() (bool, error) {
		node := getNode(t, n.name)
		s, r := conditionOf(node, corev1.NodeMemoryPressure)
		return s == corev1.ConditionTrue && r == ReasonMemoryPressure && hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule), nil
	})
	waitForEvent(t, "default", "Node", n.name, EventReasonPressureCondition)
	if s, _ := conditionOf(getNode(t, n.name), ConditionMemoryPressure); s != "" {
		t.Fatalf("standard mode wrote evictiond's own condition type (%s)", s)
	}
	_, _, offset := nodeWrites(t, n.name, 0)

	for round := range 3 {
		writeConditionAsKubelet(t, n.name, kubeletSufficientMemory())
		flipped := time.Now()
		waitFor(t, 2*time.Second, fmt.Sprintf("re-assertion %d within 2 s", round+1), func() (bool, error) {
			s, r := conditionOf(getNode(t, n.name), corev1.NodeMemoryPressure)
			return s == corev1.ConditionTrue && r == ReasonMemoryPressure, nil
		})
		t.Logf("re-asserted %v after the kubelet-style write", time.Since(flipped).Round(time.Millisecond))
	}
	// The cost of the standard mode: one status patch per kubelet rewrite, the taint untouched.
	time.Sleep(time.Second)
	if count, seen, _ := nodeWrites(t, n.name, offset); count != 3 {
		t.Errorf("node writes for 3 kubelet rewrites = %d, want 3 (one re-assert each): %v", count, seen)
	}

	// Release: False once with evictiond's reason, taint gone.
	status.SetConditions(nil, nil)
	waitFor(t, 5*time.Second, "MemoryPressure False with evictiond's reason, taint removed", func() (bool, error) {
		node := getNode(t, n.name)
		s, r := conditionOf(node, corev1.NodeMemoryPressure)
		return s == corev1.ConditionFalse && r == ReasonNoMemoryPressure && !hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule), nil
	})
	waitForEvent(t, "default", "Node", n.name, EventReasonPressureReleased)

	// Not under pressure, the kubelet's entry is never touched again.
	writeConditionAsKubelet(t, n.name, kubeletSufficientMemory())
	time.Sleep(3 * time.Second)
	if s, r := conditionOf(getNode(t, n.name), corev1.NodeMemoryPressure); s != corev1.ConditionFalse || r != "KubeletHasSufficientMemory" {
		t.Fatalf("kubelet's entry was rewritten without pressure: %s/%s", s, r)
	}
}

// TestOwnConditionWrittenOncePerTransition is the default mode: evictiond's own condition
// type and its NoSchedule taint, one taint update and one status patch per pressure
// transition, nothing in between whatever the kubelet writes to MemoryPressure, and
// neither the condition nor the taint ever missing while the pressure lasts (seen by a
// watch on the node).
func TestOwnConditionWrittenOncePerTransition(t *testing.T) {
	n := newTestNode(t)
	writeConditionAsKubelet(t, n.name, kubeletSufficientMemory())
	_, _, offset := nodeWrites(t, n.name, 0)
	status := startNodeStatus(t, n, NodeStatusOptions{ReassertInterval: 100 * time.Millisecond})
	status.SetConditions(nil, nil)
	time.Sleep(time.Second)
	if count, seen, _ := nodeWrites(t, n.name, offset); count != 0 {
		t.Fatalf("no pressure: %d node writes, want 0: %v", count, seen)
	}

	watch := watchNode(t, n.name)
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeMemoryPressure}, nil)
	waitFor(t, 5*time.Second, "EvictiondMemoryPressure True and the NoSchedule taint", func() (bool, error) {
		node := getNode(t, n.name)
		s, _ := conditionOf(node, ConditionMemoryPressure)
		return s == corev1.ConditionTrue && hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule), nil
	})
	waitForEvent(t, "default", "Node", n.name, EventReasonPressureCondition)
	onset := len(watch.versions())

	// The kubelet's status updates under held pressure: its entry stays its own.
	for i := range 5 {
		c := kubeletSufficientMemory()
		c.Message += fmt.Sprintf(" (update %d)", i) // a new node version each time
		writeConditionAsKubelet(t, n.name, c)
		time.Sleep(300 * time.Millisecond)
	}
	node := getNode(t, n.name)
	if s, r := conditionOf(node, corev1.NodeMemoryPressure); s != corev1.ConditionFalse || r != "KubeletHasSufficientMemory" {
		t.Errorf("the kubelet's MemoryPressure was rewritten in own mode: %s/%s", s, r)
	}
	// The watch delivers the versions a little after the writes (seen lagging by over a
	// second on a loaded machine): wait for the five rewrites before judging what it saw.
	waitFor(t, 15*time.Second, "the node watch to deliver the kubelet's 5 rewrites", func() (bool, error) {
		return len(watch.versions())-onset >= 5, nil
	})
	held := watch.versions()

	status.SetConditions(nil, nil)
	waitFor(t, 5*time.Second, "EvictiondMemoryPressure False and the taint gone", func() (bool, error) {
		node := getNode(t, n.name)
		s, r := conditionOf(node, ConditionMemoryPressure)
		return s == corev1.ConditionFalse && r == ReasonNoMemoryPressure && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return strings.HasPrefix(t.Key, TaintKeyPrefix)
		}), nil
	})
	waitForEvent(t, "default", "Node", n.name, EventReasonPressureReleased)
	time.Sleep(time.Second)

	count, seen, _ := nodeWrites(t, n.name, offset)
	t.Logf("node writes by the agent for one pressure episode with 5 kubelet rewrites: %d %v", count, seen)
	if count != 4 {
		t.Errorf("node writes = %d, want 4: one taint update and one status patch at each transition", count)
	}
	for i, v := range held[onset:] {
		s, _ := conditionOf(v, ConditionMemoryPressure)
		if s != corev1.ConditionTrue || !hasTaint(v, TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule) {
			t.Errorf("watch event %d under held pressure (rv %s): EvictiondMemoryPressure %q, taints %v", onset+i, v.ResourceVersion, s, v.Spec.Taints)
		}
	}
	if len(held)-onset < 5 {
		t.Errorf("the watch saw %d node versions during the kubelet rewrites, want at least 5", len(held)-onset)
	}

	// docs/install.md's removal of the entries after an uninstall (kubectl patch --subresource
	// status with this body) leaves the kubelet's entries alone.
	patch := `{"status":{"conditions":[{"type":"EvictiondMemoryPressure","$patch":"delete"},{"type":"EvictiondDiskPressure","$patch":"delete"},{"type":"EvictiondPIDPressure","$patch":"delete"}]}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), n.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("removing evictiond's conditions: %v", err)
	}
	node = getNode(t, n.name)
	if s, _ := conditionOf(node, ConditionMemoryPressure); s != "" {
		t.Errorf("EvictiondMemoryPressure still there after the documented removal (%s)", s)
	}
	if s, _ := conditionOf(node, corev1.NodeMemoryPressure); s != corev1.ConditionFalse {
		t.Errorf("the kubelet's MemoryPressure was removed too (%q)", s)
	}
}

func TestBothModesConditionsAndOnlyTheStandardOneFights(t *testing.T) {
	n := newTestNode(t)
	status := startNodeStatus(t, n, NodeStatusOptions{Conditions: ConditionsBoth})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeDiskPressure}, nil)
	waitFor(t, 5*time.Second, "DiskPressure and EvictiondDiskPressure True, the taint", func() (bool, error) {
		node := getNode(t, n.name)
		std, r := conditionOf(node, corev1.NodeDiskPressure)
		own, _ := conditionOf(node, ConditionDiskPressure)
		return std == corev1.ConditionTrue && r == ReasonDiskPressure && own == corev1.ConditionTrue &&
			hasTaint(node, TaintKeyDiskPressure, corev1.TaintEffectNoSchedule), nil
	})
	_, _, offset := nodeWrites(t, n.name, 0)
	now := metav1.Now()
	writeConditionAsKubelet(t, n.name, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse,
		Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now})
	waitFor(t, 3*time.Second, "DiskPressure re-asserted", func() (bool, error) {
		s, r := conditionOf(getNode(t, n.name), corev1.NodeDiskPressure)
		return s == corev1.ConditionTrue && r == ReasonDiskPressure, nil
	})
	time.Sleep(time.Second)
	if count, seen, _ := nodeWrites(t, n.name, offset); count != 1 {
		t.Errorf("node writes for one kubelet rewrite = %d, want 1 (the standard entry only): %v", count, seen)
	}
}

func TestStaleTaintsAndConditionsReconciledAfterRestart(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	// State the earlier design left behind: the standard MemoryPressure, DiskPressure and
	// PIDPressure held True with evictiond's reasons, its PreferNoSchedule memory and pid
	// taints, its disk taint, and a taint that belongs to someone else.
	node := getNode(t, n.name)
	node.Spec.Taints = []corev1.Taint{
		{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintKeyMemoryPressure, Effect: corev1.TaintEffectPreferNoSchedule},
		{Key: TaintKeyDiskPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintKeyPIDPressure, Effect: corev1.TaintEffectPreferNoSchedule},
	}
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: ReasonMemoryPressure, LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue, Reason: ReasonDiskPressure, LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionTrue, Reason: ReasonPIDPressure, LastHeartbeatTime: now, LastTransitionTime: now},
	} {
		writeConditionAsKubelet(t, n.name, c)
	}
	_, _, offset := nodeWrites(t, n.name, 0)

	// The new run (default: own conditions) sees PID pressure still, the rest no more.
	status := startNodeStatus(t, n, NodeStatusOptions{})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodePIDPressure}, nil)
	waitFor(t, 5*time.Second, "stale state reconciled", func() (bool, error) {
		node := getNode(t, n.name)
		for _, std := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
			if s, _ := conditionOf(node, std); s != corev1.ConditionFalse {
				return false, nil
			}
		}
		pid, _ := conditionOf(node, ConditionPIDPressure)
		mem, _ := conditionOf(node, ConditionMemoryPressure)
		return pid == corev1.ConditionTrue && mem == "" &&
			!hasTaint(node, TaintKeyDiskPressure, corev1.TaintEffectNoSchedule) &&
			!hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectPreferNoSchedule) &&
			hasTaint(node, TaintKeyPIDPressure, corev1.TaintEffectNoSchedule) &&
			hasTaint(node, "example.com/dedicated", corev1.TaintEffectNoSchedule), nil
	})
	node = getNode(t, n.name)
	if got := node.Spec.Taints; len(got) != 2 {
		t.Fatalf("taints after reconciliation = %v, want the foreign one and evictiond's pid-pressure", got)
	}
	if _, r := conditionOf(node, corev1.NodeMemoryPressure); r != ReasonNoMemoryPressure {
		t.Errorf("standard MemoryPressure reason %q after reconciliation, want %s", r, ReasonNoMemoryPressure)
	}
	time.Sleep(time.Second)
	if count, seen, _ := nodeWrites(t, n.name, offset); count != 2 {
		t.Errorf("reconciliation took %d node writes, want 2 (one taint update, one status patch): %v", count, seen)
	}
}

// TestModeChangeReleasesWhatTheNewModeDoesNotPublish: a writer with new settings (as
// after a reload) takes over the node from the old one's state.
func TestModeChangeReleasesWhatTheNewModeDoesNotPublish(t *testing.T) {
	n := newTestNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stopRecorder := NewEventRecorder(ctx, n.agent, EventRecorderOptions{NodeName: n.name, Logger: testLogger(t)})
	defer func() { cancel(); stopRecorder() }()
	var own, standard *NodeStatus
	n.startInformers(t, func(inf *NodeInformers) {
		var err error
		if own, err = NewNodeStatus(n.agent, inf, recorder, NodeStatusOptions{NodeName: n.name, Logger: testLogger(t)}); err != nil {
			t.Fatal(err)
		}
		if standard, err = NewNodeStatus(n.agent, inf, recorder, NodeStatusOptions{NodeName: n.name, Conditions: ConditionsStandard,
			TaintEffects: map[corev1.NodeConditionType]corev1.TaintEffect{corev1.NodeMemoryPressure: corev1.TaintEffectPreferNoSchedule}, Logger: testLogger(t)}); err != nil {
			t.Fatal(err)
		}
	})
	pressure := []corev1.NodeConditionType{corev1.NodeMemoryPressure}
	own.SetConditions(pressure, nil)
	if err := own.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "own mode under pressure", func() (bool, error) {
		s, _ := conditionOf(getNode(t, n.name), ConditionMemoryPressure)
		return s == corev1.ConditionTrue, nil
	})
	standard.SetConditions(pressure, nil)
	waitFor(t, 5*time.Second, "standard mode took over", func() (bool, error) {
		if err := standard.Sync(ctx); err != nil {
			return false, err
		}
		node := getNode(t, n.name)
		ownS, _ := conditionOf(node, ConditionMemoryPressure)
		std, r := conditionOf(node, corev1.NodeMemoryPressure)
		return ownS == corev1.ConditionFalse && std == corev1.ConditionTrue && r == ReasonMemoryPressure &&
			hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectPreferNoSchedule) &&
			!hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule), nil
	})
}

func TestQuietHourMakesNoAPIWrites(t *testing.T) {
	n := newTestNode(t)
	fakeClock := clocktesting.NewFakeClock(time.Now())
	status := startNodeStatus(t, n, NodeStatusOptions{Clock: fakeClock})
	inf := n.startInformers(t, nil)
	ev := newTestEvictor(t, n, inf, func(o *EvictorOptions) { o.Clock = fakeClock })
	_, _, offset := auditWrites(t, agentUsername, 0)

	// One simulated hour of 1 s loop passes without pressure: the loop publishes "no
	// conditions" and has no candidates each pass, the re-assert ticker fires each second.
	for range 3600 {
		status.SetConditions(nil, nil)
		if res := ev.Evict(context.Background(), nil); res.Outcome != eviction.OutcomeNoCandidates {
			t.Fatalf("quiet pass: outcome %s", res.Outcome)
		}
		fakeClock.Step(time.Second)
		if err := status.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // anything asynchronous (Events) would reach the audit log by now
	if count, seen, _ := auditWrites(t, agentUsername, offset); count != 0 {
		t.Fatalf("quiet hour made %d API writes: %v", count, seen)
	}

	// The counter sees the agent's writes when there is something to write.
	status.SetConditions([]corev1.NodeConditionType{corev1.NodePIDPressure}, nil)
	waitFor(t, 5*time.Second, "the agent's writes in the audit log", func() (bool, error) {
		count, _, _ := auditWrites(t, agentUsername, offset)
		return count >= 2, nil // condition patch + taint patch
	})
}

// TestTaintUpdateRetriesOnConflictAndKeepsConcurrentTaints gives the writer a stale
// node, as a lagging cache would, after another writer added a taint: the
// resourceVersion-guarded update conflicts, re-reads and keeps the other writer's taint.
func TestTaintUpdateRetriesOnConflictAndKeepsConcurrentTaints(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	stale := getNode(t, n.name)
	fresh := stale.DeepCopy()
	fresh.Spec.Taints = append(fresh.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	recorder, stop := NewEventRecorder(ctx, n.agent, EventRecorderOptions{NodeName: n.name, Logger: testLogger(t)})
	defer stop()
	inf, err := NewNodeInformers(n.agent, n.name)
	if err != nil {
		t.Fatal(err)
	}
	status, err := NewNodeStatus(n.agent, inf, recorder, NodeStatusOptions{NodeName: n.name, Conditions: ConditionsNone, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	status.node = staticNode{stale}
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeDiskPressure}, nil)
	if err := status.Sync(ctx); err != nil {
		t.Fatalf("sync with a stale node: %v", err)
	}
	node := getNode(t, n.name)
	if !hasTaint(node, TaintKeyDiskPressure, corev1.TaintEffectNoSchedule) || !hasTaint(node, "example.com/maintenance", corev1.TaintEffectNoSchedule) {
		t.Fatalf("taints = %v; want evictiond's disk-pressure taint and the concurrent maintenance taint", node.Spec.Taints)
	}
	if s, _ := conditionOf(node, corev1.NodeDiskPressure); s != "" {
		t.Fatalf("ConditionsNone: DiskPressure condition written (%s)", s)
	}
}
