package node_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube/kubefake"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/node"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/simulate"
)

// statsNode is a node whose stats are the real monitor's (read from a fixture
// host) and whose other parts (freezer, reclaim, wake-ups) are a quiet
// simulated node's: what an idle pass touches is the stats.
type statsNode struct {
	daemon.Node
	stats node.Stats
}

func (n statsNode) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	return n.stats.Observe(ctx, pods)
}

func (n statsNode) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {
	n.stats.ObserveUsage(ctx, pods, obs)
}
func (n statsNode) ObserveFast() policy.Observations    { return n.stats.ObserveFast() }
func (n statsNode) FastReadings() []policy.Observations { return n.stats.FastReadings() }
func (n statsNode) PodCgroupUIDs() ([]types.UID, error) { return n.stats.PodCgroupUIDs() }

// BenchmarkIdlePass is one pass of the loop on a node without pressure, as the
// agent runs it every second: the default configuration, the cgroup v2 fixture
// node read by the monitor (signals, filesystems, the pod's volumes), the pod and
// node caches of the daemon's informers, the node status writer. make
// bench-footprint prints its allocations; BenchmarkIdleAgent (cmd/evictiond,
// integration) the whole process's memory and CPU.
func BenchmarkIdlePass(b *testing.B) {
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"))
	if errs != nil {
		b.Fatal(errs)
	}
	m, err := monitor.New(monitor.Config{HostRoot: "../monitor/testdata/v2-systemd", CgroupDriver: monitor.CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7d9f", UID: "0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111"},
		Spec:   v1.PodSpec{NodeName: "node-1", Containers: []v1.Container{{Name: "web"}}, Volumes: []v1.Volume{{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, QOSClass: v1.PodQOSBurstable}}
	no := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	quiet := simulate.NewNode(&simulate.Scenario{Node: simulate.NodeSpec{Name: "node-1"}}, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api, err := kubefake.NewClientset(no, pod)
	if err != nil {
		b.Fatal(err)
	}
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: api, Node: statsNode{Node: quiet, stats: node.Stats{M: m}}},
		daemon.Options{NodeName: "node-1", NodeStatus: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	r := d.Agent.Pass(ctx, "bench")
	if r.Err != "" || r.Assessment == nil || len(r.Evictions) != 0 || r.Reclaim != nil {
		b.Fatalf("first pass: err %q, evictions %v, reclaim %v; want an idle pass", r.Err, r.Evictions, r.Reclaim)
	}
	if len(r.Observed.Missing) != 0 {
		b.Logf("signals not read from the fixture: %v", r.Observed.Missing)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.Agent.Pass(ctx, "bench")
	}
}
