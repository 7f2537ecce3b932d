package simulate

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/brake"
)

// The scenario's brake runs on the virtual clock: a hold lasts until its
// deadline there (brake.maxFreeze), and the first step past it thaws it and
// reports the expiry, as the node's timer would; a kill ends a hold at once.
func TestNodeBrakeHoldsExpireOnTheVirtualClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(Epoch)
	hog := v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hog", UID: "hog"}}
	calm := v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "calm", UID: "calm"}}
	n := NewNode(&Scenario{Pods: []v1.Pod{hog, calm}}, clk.Now)
	var expired []brake.Hold
	n.OnBrakeExpired(func(h brake.Hold, err error) { expired = append(expired, h) })

	if _, err := n.Freeze(&hog, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Freeze(&calm, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, killed, ok, err := n.Kill("calm", 0); !ok || err != nil || killed != 0 {
		t.Fatalf("kill of calm: ok %v, killed %d, err %v", ok, killed, err)
	}
	clk.Step(14 * time.Second)
	n.Apply(StepInput{})
	if len(expired) != 0 || len(n.Held()) != 1 {
		t.Fatalf("before the deadline: expired %v, held %v", expired, n.Held())
	}
	clk.Step(time.Second)
	n.Apply(StepInput{})
	if len(expired) != 1 || expired[0].Pod != "ns/hog" || len(n.Held()) != 0 {
		t.Fatalf("at the deadline: expired %v, held %v; want hog thawed", expired, n.Held())
	}
	if err := n.StopPodSandboxByPodUID(context.Background(), "hog"); err != nil {
		t.Errorf("local stop of a pod no longer held: %v", err)
	}
}
