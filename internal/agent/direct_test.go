package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// cgroupStats is fakeStats that also names the pod cgroups on the node.
type cgroupStats struct {
	*fakeStats
	uids []types.UID
}

func (s cgroupStats) PodCgroupUIDs() ([]types.UID, error) { return s.uids, nil }

// behindPods is a pod cache that lacks pods the API server has.
type behindPods struct {
	cached, direct []*v1.Pod
	err            error
	directCalls    int
}

func (p *behindPods) ListPods() ([]*v1.Pod, error) { return p.cached, nil }
func (p *behindPods) ListPodsDirect(context.Context) ([]*v1.Pod, error) {
	p.directCalls++
	return p.direct, p.err
}

func behindAgent(t *testing.T, cgroups []types.UID, pods *behindPods) (*Agent, *fakeEvictor, *bytes.Buffer) {
	t.Helper()
	a, _, stats, ev, _, _ := newTestAgent(t, "evictionHard: {memory.available: 500Mi}\n")
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	a.stats = cgroupStats{fakeStats: stats, uids: cgroups}
	a.pods = pods
	logs := &bytes.Buffer{}
	a.log = slog.New(slog.NewTextHandler(logs, nil))
	return a, ev, logs
}

// The short soak's failure: under a hard threshold the cache held only pods that
// cannot be evicted while the hog ran in a cgroup the cache did not know. The loop
// asks the API server for the node's pods and evicts the hog in the same pass.
func TestPass_HardThresholdWithPodsBehindTheCacheListsDirectlyAndEvicts(t *testing.T) {
	calm := pod("calm", "1Gi")
	pods := &behindPods{cached: []*v1.Pod{}, direct: []*v1.Pod{pod("hog", "100Mi"), calm}}
	a, ev, logs := behindAgent(t, []types.UID{"hog", "calm"}, pods)
	rep := a.pass(context.Background(), "test")
	if pods.directCalls != 1 {
		t.Fatalf("direct lists: %d, want 1", pods.directCalls)
	}
	if len(ev.calls) != 1 || ev.calls[0][0].Pod.Name != "hog" {
		t.Fatalf("evictor calls %v, want one with hog first; log:\n%s", ev.calls, logs.String())
	}
	if len(rep.Evictions) != 1 {
		t.Fatalf("report: %d evictions, want the direct-list pass's one", len(rep.Evictions))
	}
	l := logs.String()
	if !strings.Contains(l, "pod cache behind the node") || !strings.Contains(l, "missingFromCache=\"[ns/hog ns/calm]\"") {
		t.Errorf("the direct list is not explained in the log:\n%s", l)
	}
	if strings.Contains(l, "unable to evict any pods") {
		t.Errorf("gave up although the direct list had a candidate:\n%s", l)
	}
}

// Every cgroup accounted for (a mirror pod's by its config.mirror annotation):
// no request to the API server, the usual "unable to evict".
func TestPass_NoUnknownCgroupsNoDirectList(t *testing.T) {
	static := pod("static-mirror", "")
	static.Annotations = map[string]string{policy.MirrorAnnotation: "static-runtime-uid"}
	pods := &behindPods{cached: []*v1.Pod{static}}
	a, ev, logs := behindAgent(t, []types.UID{"static-runtime-uid"}, pods)
	a.opts.SelfUID = static.UID // evictiond's own: never a candidate
	a.pass(context.Background(), "test")
	if pods.directCalls != 0 || len(ev.calls) != 0 {
		t.Fatalf("direct lists %d, evictions %d; want none", pods.directCalls, len(ev.calls))
	}
	if !strings.Contains(logs.String(), "unable to evict any pods") {
		t.Errorf("log:\n%s", logs.String())
	}
}

// Unknown cgroups the API server does not know either (pods being torn down), or a
// failing direct list: the loop gives up this pass, saying what it found.
func TestPass_UnknownCgroupsExplainedWhenTheDirectListDoesNotHelp(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"torn down", nil, "1 pod cgroups unknown to the pod cache and to the API server (pods being torn down)"},
		{"API down", errors.New("connection refused"), "1 pod cgroups unknown to the pod cache; listing the node's pods from the API server: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := &behindPods{cached: []*v1.Pod{}, err: tc.err}
			a, ev, logs := behindAgent(t, []types.UID{"gone"}, pods)
			a.pass(context.Background(), "test")
			if len(ev.calls) != 0 {
				t.Fatalf("evictions %v", ev.calls)
			}
			if l := logs.String(); !strings.Contains(l, "unable to evict any pods") || !strings.Contains(l, tc.want) {
				t.Errorf("log lacks %q:\n%s", tc.want, l)
			}
		})
	}
}
