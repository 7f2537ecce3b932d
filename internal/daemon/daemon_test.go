package daemon_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/kube/kubefake"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/simulate"
)

// quietNode is a node with no readings and no pods (a scenario's, on the
// real clock).
func quietNode() daemon.Node {
	return simulate.NewNode(&simulate.Scenario{Node: simulate.NodeSpec{Name: "node-1"}}, time.Now)
}

// An evictor New cannot build (options validation refuses what a configuration
// that bypassed policy's own validation holds) fails New after the informers
// started: New must stop them itself and return. (A corrupt local-stop journal
// no longer fails it: the journal is moved aside and the agent starts.)
func TestNewFailingAfterTheInformersStartedReturnsAndStopsThem(t *testing.T) {
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nreclaim: {imageGC: {stateFile: " +
		filepath.Join(t.TempDir(), "images.json") + "}}\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	cfg.Escalation.MaxCandidates = 0
	_, err := daemon.New(context.Background(), cfg, daemon.Deps{Client: fakeAPI(t), Node: quietNode()},
		daemon.Options{NodeName: "node-1", NodeStatus: true, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "Escalation.MaxCandidates") {
		t.Fatalf("New = %v, want the evictor's options error", err)
	}
}

func TestRestartOnlyChangesNamesWhatAReloadCannotApply(t *testing.T) {
	load := func(extra string) *policy.Config {
		c, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + extra))
		if errs != nil {
			t.Fatal(errs)
		}
		return c
	}
	base := load("")
	if got := daemon.RestartOnlyChanges(base, load("eviction: {rateLimits: {perMinute: 20}}\ndryRun: true\n")); got != "" {
		t.Errorf("rate limits and dryRun reported as restart-only: %q", got)
	}
	if got := daemon.RestartOnlyChanges(base, load("stats: {housekeepingInterval: 20s}\nreclaim: {imageGC: {minAge: 5m}}\n")); got != "stats.housekeepingInterval, reclaim.*" {
		t.Errorf("RestartOnlyChanges = %q", got)
	}
}

// lockedBuffer is a log written by the daemon's goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A daemon started on a node that still shows evictiond's memory pressure (a crash
// or an upgrade during an episode) holds it for the transition period instead of
// releasing it on its first pass.
func TestNewHoldsThePressureTheNodeShowsForTheTransitionPeriod(t *testing.T) {
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nevictionPressureTransitionPeriod: 30s\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:   v1.NodeSpec{Taints: []v1.Taint{{Key: kube.TaintKeyMemoryPressure, Effect: v1.TaintEffectNoSchedule}}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: kube.ConditionMemoryPressure, Status: v1.ConditionTrue}}}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	logs := &lockedBuffer{}
	d, err := daemon.New(context.Background(), cfg, daemon.Deps{Client: fakeAPI(t, node), Node: quietNode(), Clock: clk},
		daemon.Options{NodeName: "node-1", NodeStatus: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if rep := d.Agent.Pass(context.Background(), "test"); len(rep.Assessment.Conditions) != 1 || rep.Assessment.Conditions[0] != v1.NodeMemoryPressure {
		t.Fatalf("first pass after the start: conditions %v; want MemoryPressure held", rep.Assessment.Conditions)
	}
	if !strings.Contains(logs.String(), "pressure shown by the previous run held for the transition period") {
		t.Errorf("the hold is not in the log:\n%s", logs.String())
	}
	clk.Step(31 * time.Second)
	if rep := d.Agent.Pass(context.Background(), "test"); len(rep.Assessment.Conditions) != 0 {
		t.Fatalf("after the transition period: conditions %v; want released", rep.Assessment.Conditions)
	}
}

// A node without evictiond's pressure: nothing held.
func TestNewHoldsNothingOnAQuietNode(t *testing.T) {
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue, Reason: "KubeletHasInsufficientMemory"}}}}
	d, err := daemon.New(context.Background(), cfg, daemon.Deps{Client: fakeAPI(t, node), Node: quietNode()},
		daemon.Options{NodeName: "node-1", NodeStatus: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if rep := d.Agent.Pass(context.Background(), "test"); len(rep.Assessment.Conditions) != 0 {
		t.Fatalf("conditions %v; want none (the kubelet's MemoryPressure is not evictiond's)", rep.Assessment.Conditions)
	}
}

func fakeAPI(t *testing.T, objs ...runtime.Object) *kubefake.Clientset {
	t.Helper()
	c, err := kubefake.NewClientset(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
