//go:build integration

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// startNodeStatus runs a NodeStatus as the agent on n until the test ends.
func startNodeStatus(t testing.TB, n *testNode, opts NodeStatusOptions) *NodeStatus {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stopRecorder := NewEventRecorder(ctx, n.agent, n.name)
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

func TestConditionReassertedWithinTwoSecondsAfterKubeletFlipsIt(t *testing.T) {
	n := newTestNode(t)
	status := startNodeStatus(t, n, NodeStatusOptions{})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeMemoryPressure})
	waitFor(t, 5*time.Second, "MemoryPressure True with evictiond's reason and its taint", func() (bool, error) {
		node := getNode(t, n.name)
		s, r := conditionOf(node, corev1.NodeMemoryPressure)
		return s == corev1.ConditionTrue && r == ReasonMemoryPressure && hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectPreferNoSchedule), nil
	})
	waitForEvent(t, "default", "Node", n.name, EventReasonPressureCondition)

	for round := range 3 {
		writeConditionAsKubelet(t, n.name, kubeletSufficientMemory())
		flipped := time.Now()
		waitFor(t, 2*time.Second, fmt.Sprintf("re-assertion %d within 2 s", round+1), func() (bool, error) {
			s, r := conditionOf(getNode(t, n.name), corev1.NodeMemoryPressure)
			return s == corev1.ConditionTrue && r == ReasonMemoryPressure, nil
		})
		t.Logf("re-asserted %v after the kubelet-style write", time.Since(flipped).Round(time.Millisecond))
	}

	// Release: False once with evictiond's reason, taint gone.
	status.SetConditions(nil)
	waitFor(t, 5*time.Second, "MemoryPressure False with evictiond's reason, taint removed", func() (bool, error) {
		node := getNode(t, n.name)
		s, r := conditionOf(node, corev1.NodeMemoryPressure)
		return s == corev1.ConditionFalse && r == ReasonNoMemoryPressure && !hasTaint(node, TaintKeyMemoryPressure, corev1.TaintEffectPreferNoSchedule), nil
	})
	waitForEvent(t, "default", "Node", n.name, EventReasonPressureReleased)

	// Not under pressure, the kubelet's entry is never touched again.
	writeConditionAsKubelet(t, n.name, kubeletSufficientMemory())
	time.Sleep(3 * time.Second)
	if s, r := conditionOf(getNode(t, n.name), corev1.NodeMemoryPressure); s != corev1.ConditionFalse || r != "KubeletHasSufficientMemory" {
		t.Fatalf("kubelet's entry was rewritten without pressure: %s/%s", s, r)
	}
}

func TestStaleTaintsAndConditionsReconciledAfterRestart(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	// State an earlier run left behind: DiskPressure and PIDPressure held True, their
	// taints, and a taint that belongs to someone else.
	node := getNode(t, n.name)
	node.Spec.Taints = []corev1.Taint{
		{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintKeyDiskPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintKeyPIDPressure, Effect: corev1.TaintEffectPreferNoSchedule},
	}
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue, Reason: ReasonDiskPressure, LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionTrue, Reason: ReasonPIDPressure, LastHeartbeatTime: now, LastTransitionTime: now},
	} {
		writeConditionAsKubelet(t, n.name, c)
	}

	// The new run sees PID pressure still (with the default NoSchedule effect), disk no more.
	status := startNodeStatus(t, n, NodeStatusOptions{})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodePIDPressure})
	waitFor(t, 5*time.Second, "stale state reconciled", func() (bool, error) {
		node := getNode(t, n.name)
		disk, diskReason := conditionOf(node, corev1.NodeDiskPressure)
		pid, pidReason := conditionOf(node, corev1.NodePIDPressure)
		return disk == corev1.ConditionFalse && diskReason == ReasonNoDiskPressure &&
			pid == corev1.ConditionTrue && pidReason == ReasonPIDPressure &&
			!hasTaint(node, TaintKeyDiskPressure, corev1.TaintEffectNoSchedule) &&
			hasTaint(node, TaintKeyPIDPressure, corev1.TaintEffectNoSchedule) &&
			!hasTaint(node, TaintKeyPIDPressure, corev1.TaintEffectPreferNoSchedule) &&
			hasTaint(node, "example.com/dedicated", corev1.TaintEffectNoSchedule), nil
	})
	if got := getNode(t, n.name).Spec.Taints; len(got) != 2 {
		t.Fatalf("taints after reconciliation = %v, want the foreign one and evictiond's pid-pressure", got)
	}
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
		status.SetConditions(nil)
		if res := ev.Evict(context.Background(), nil); res.Outcome != OutcomeNoCandidates {
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
	status.SetConditions([]corev1.NodeConditionType{corev1.NodePIDPressure})
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

	recorder, stop := NewEventRecorder(ctx, n.agent, n.name)
	defer stop()
	inf, err := NewNodeInformers(n.agent, n.name, 0)
	if err != nil {
		t.Fatal(err)
	}
	status, err := NewNodeStatus(n.agent, inf, recorder, NodeStatusOptions{NodeName: n.name, DisableConditions: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	status.node = staticNode{stale}
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeDiskPressure})
	if err := status.Sync(ctx); err != nil {
		t.Fatalf("sync with a stale node: %v", err)
	}
	node := getNode(t, n.name)
	if !hasTaint(node, TaintKeyDiskPressure, corev1.TaintEffectNoSchedule) || !hasTaint(node, "example.com/maintenance", corev1.TaintEffectNoSchedule) {
		t.Fatalf("taints = %v; want evictiond's disk-pressure taint and the concurrent maintenance taint", node.Spec.Taints)
	}
	if s, _ := conditionOf(node, corev1.NodeDiskPressure); s != "" {
		t.Fatalf("DisableConditions: DiskPressure condition written (%s)", s)
	}
}
