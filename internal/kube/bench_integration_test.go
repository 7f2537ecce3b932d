//go:build integration

package kube

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// BenchmarkEvictThroughAPI is one Eviction API call (UID precondition, no PDB) against
// the real API server, made as the agent's ServiceAccount through the admission policy.
func BenchmarkEvictThroughAPI(b *testing.B) {
	n := newTestNode(b)
	inf := n.startInformers(b, nil)
	ev, err := NewEvictor(n.agent, inf.Pods, record.NewFakeRecorder(0), EvictorOptions{NodeName: n.name, Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, 0, b.N)
	for i := range b.N {
		pods = append(pods, createPod(b, n.namespace, fmt.Sprintf("p%d", i), n.name, nil, nil))
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := ev.evictThroughAPI(ctx, candidateFor(pods[i], true)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConditionReassert is the time from another writer flipping evictiond's
// MemoryPressure entry to False until the API server holds evictiond's True again
// (one kubelet-style write, the watch event, evictiond's patch, one GET to observe it).
func BenchmarkConditionReassert(b *testing.B) {
	n := newTestNode(b)
	status := startNodeStatus(b, n, NodeStatusOptions{})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeMemoryPressure})
	held := func() (bool, error) {
		s, r := conditionOf(getNode(b, n.name), corev1.NodeMemoryPressure)
		return s == corev1.ConditionTrue && r == ReasonMemoryPressure, nil
	}
	waitFor(b, 5*time.Second, "MemoryPressure held", held)
	b.ResetTimer()
	for range b.N {
		writeConditionAsKubelet(b, n.name, kubeletSufficientMemory())
		waitFor(b, 2*time.Second, "re-assertion", held)
	}
}
