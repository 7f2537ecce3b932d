package kube

import (
	"context"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

type staticNode struct{ node *corev1.Node }

func (s staticNode) Get(string) (*corev1.Node, error) { return s.node, nil }

// BenchmarkNodeStatusSyncSteadyState is the cost of one re-assert check when the node
// already is as evictiond wants it (the every-second path, with and without pressure).
func BenchmarkNodeStatusSyncSteadyState(b *testing.B) {
	for _, tc := range []struct {
		name    string
		desired []corev1.NodeConditionType
		node    *corev1.Node
	}{
		{"quiet", nil, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
			}},
		}},
		{"memory-pressure-held", []corev1.NodeConditionType{corev1.NodeMemoryPressure}, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: TaintKeyMemoryPressure, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
				{Type: ConditionMemoryPressure, Status: corev1.ConditionTrue, Reason: ReasonMemoryPressure},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
			}},
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			opts := NodeStatusOptions{NodeName: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			opts.setDefaults()
			s := &NodeStatus{node: staticNode{tc.node}, recorder: record.NewFakeRecorder(0), opts: opts,
				trigger: make(chan struct{}, 1), held: map[corev1.NodeConditionType]bool{}}
			s.SetConditions(tc.desired, nil)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
