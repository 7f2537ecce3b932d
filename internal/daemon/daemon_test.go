package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/kube/kubefake"
	"github.com/evictiond/evictiond/internal/metrics"
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

// The daemon's own recorder writes to its client: a repeated Event is one create
// and one merge patch to count 2 once Close has flushed the queue, and the
// dropped-Events metric shows each reason at 0 from the start.
func TestNewRecordsEventsThroughItsClientAndFlushesThemOnClose(t *testing.T) {
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	client := &eventsSpy{Interface: fakeAPI(t, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})}
	m := metrics.New()
	d, err := daemon.New(context.Background(), cfg, daemon.Deps{Client: client, Node: quietNode(), Metrics: m},
		daemon.Options{NodeName: "node-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.EventsDropped); n != len(kube.EventDropReasons) {
		t.Errorf("evictiond_events_dropped_total has %d series at the start, want one per reason (%d)", n, len(kube.EventDropReasons))
	}
	for range 2 {
		d.Recorder().Eventf(kube.NodeRef("node-1"), v1.EventTypeWarning, "ConfigRejected", "field %s", "x")
	}
	d.Close()
	client.mu.Lock()
	defer client.mu.Unlock()
	if len(client.writes) != 2 || client.writes[0] != "create default ConfigRejected count=1 host=node-1" ||
		client.writes[1] != "merge-patch default count=2" {
		t.Fatalf("Event writes after Close: %q; want one create, then one merge patch to count 2", client.writes)
	}
}

// eventsSpy notes the Event writes made through a client, then makes them.
type eventsSpy struct {
	kube.Interface
	mu     sync.Mutex
	writes []string
}

type spyCoreV1 struct {
	kube.CoreV1Interface
	s *eventsSpy
}

type spyEvents struct {
	kube.EventInterface
	s *eventsSpy
}

func (s *eventsSpy) CoreV1() kube.CoreV1Interface { return spyCoreV1{s.Interface.CoreV1(), s} }

// IsWatchListSemanticsUnSupported passes kubefake's answer on to the informers'
// reflector, which asks the client it is given.
func (s *eventsSpy) IsWatchListSemanticsUnSupported() bool { return true }
func (c spyCoreV1) Events(ns string) kube.EventInterface {
	return spyEvents{c.CoreV1Interface.Events(ns), c.s}
}

func (e spyEvents) Create(ctx context.Context, ev *v1.Event, o metav1.CreateOptions) (*v1.Event, error) {
	e.s.note(fmt.Sprintf("create %s %s count=%d host=%s", ev.Namespace, ev.Reason, ev.Count, ev.Source.Host))
	return e.EventInterface.Create(ctx, ev, o)
}

func (e spyEvents) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions, sub ...string) (*v1.Event, error) {
	out, err := e.EventInterface.Patch(ctx, name, pt, data, o, sub...)
	if err != nil {
		e.s.note(fmt.Sprintf("%s: %v", pt, err))
		return out, err
	}
	e.s.note(fmt.Sprintf("%s %s count=%d", map[types.PatchType]string{types.MergePatchType: "merge-patch"}[pt], out.Namespace, out.Count))
	return out, nil
}

func (s *eventsSpy) note(w string) {
	s.mu.Lock()
	s.writes = append(s.writes, w)
	s.mu.Unlock()
}
