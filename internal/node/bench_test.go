package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
func (n statsNode) LookInFlight(done <-chan struct{}, interval time.Duration) ([]policy.Observations, bool) {
	return n.stats.LookInFlight(done, interval)
}
func (n statsNode) PodCgroupUIDs() ([]types.UID, error) { return n.stats.PodCgroupUIDs() }

// BenchmarkIdlePass is one pass of the loop on a node without pressure, as the
// agent runs it every second: the default configuration, the cgroup v2 fixture
// node read by the monitor (signals, filesystems, the pods' volumes), the pod and
// node caches of the daemon's informers, the node status writer; with the
// fixture's one pod, and with 110 (the kubelet's default maxPods: the fixture's
// pod cgroup cloned). Besides allocs/op it reports kept-B/pass, what the heap
// holds after a GC per pass run: growth there is a leak a long idle agent would
// pay for. make bench-footprint prints both; its cluster part the whole
// process's memory and CPU on a node of 110 pods.
func BenchmarkIdlePass(b *testing.B) {
	b.Run("pods=1", func(b *testing.B) { benchIdlePass(b, "../monitor/testdata/v2-systemd", monitor.CgroupDriverSystemd, 1) })
	b.Run("pods=110", func(b *testing.B) { benchIdlePass(b, hostWithPods(b, 110, false), monitor.CgroupDriverSystemd, 110) })
	// kubepods stalling (the fixture's 12.5% some avg10): every pass reads the
	// pods' memory.pressure too, for the self-inflicted stall detection.
	b.Run("pods=110/kubepods-stalling", func(b *testing.B) {
		benchIdlePass(b, hostWithPods(b, 110, true), monitor.CgroupDriverSystemd, 110)
	})
	// cgroup v1 (cgroupfs driver), as on the e2e node: no pod memory.pressure to read.
	b.Run("v1/pods=110", func(b *testing.B) { benchIdlePass(b, hostV1WithPods(b, 110), monitor.CgroupDriverCgroupfs, 110) })
}

// fixturePod is the fixture host's Burstable pod.
const fixturePod = "0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111"

func benchIdlePass(b *testing.B, hostRoot string, driver monitor.CgroupDriver, pods int) {
	// The default configuration, but for the filesystem thresholds: the fixture's
	// filesystems are statfs of this machine's disk, whose free space other work moves
	// (at 14.7% free, imagefs.available's default 15% made the first pass evict).
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" +
		"evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}\n"))
	if errs != nil {
		b.Fatal(errs)
	}
	m, err := monitor.New(monitor.Config{HostRoot: hostRoot, CgroupDriver: driver, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	objs := []runtime.Object{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}
	for i := range pods {
		uid := fixturePod
		if i > 0 {
			uid = clonedPodUID(i)
		}
		objs = append(objs, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web-%03d", i), UID: types.UID(uid)},
			Spec:   v1.PodSpec{NodeName: "node-1", Containers: []v1.Container{{Name: "web"}}, Volumes: []v1.Volume{{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}},
			Status: v1.PodStatus{Phase: v1.PodRunning, QOSClass: v1.PodQOSBurstable}})
	}
	quiet := simulate.NewNode(&simulate.Scenario{Node: simulate.NodeSpec{Name: "node-1"}}, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api, err := kubefake.NewClientset(objs...)
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
	if got := len(r.Observed.Pods); got != pods {
		b.Fatalf("first pass observed %d pods, want %d", got, pods)
	}
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		d.Agent.Pass(ctx, "bench")
		n++
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "kept-B/pass")
}

// hostV1WithPods is the cgroup v1 fixture host (cgroupfs driver) with its
// Burstable pod's memory and pids cgroups cloned to pods pods in all.
func hostV1WithPods(b *testing.B, pods int) string {
	root := b.TempDir()
	if err := os.CopyFS(root, os.DirFS("../monitor/testdata/v1-cgroupfs")); err != nil {
		b.Fatal(err)
	}
	for _, ctl := range []string{"memory", "pids"} {
		burstable := filepath.Join(root, "sys/fs/cgroup", ctl, "kubepods/burstable")
		for i := 1; i < pods; i++ {
			if err := os.CopyFS(filepath.Join(burstable, "pod"+clonedPodUID(i)), os.DirFS(filepath.Join(burstable, "pod"+fixturePod))); err != nil {
				b.Fatal(err)
			}
		}
	}
	return root
}

// clonedPodUID is the UID of the i-th clone of the fixture's pod.
func clonedPodUID(i int) string { return fmt.Sprintf("0e7f5a36-9c1e-4f53-9d0a-%012d", i) }

// hostWithPods is the cgroup v2 fixture host with its Burstable pod's cgroup cloned to
// pods pods in all; unless stalling, kubepods' memory.pressure is at rest (0.00), as on
// an idle node.
func hostWithPods(b *testing.B, pods int, stalling bool) string {
	root := b.TempDir()
	if err := os.CopyFS(root, os.DirFS("../monitor/testdata/v2-systemd")); err != nil {
		b.Fatal(err)
	}
	if !stalling {
		rest := "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2345\n"
		if err := os.WriteFile(filepath.Join(root, "sys/fs/cgroup/kubepods.slice/memory.pressure"), []byte(rest), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	burstable := filepath.Join(root, "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice")
	slice := func(uid string) string {
		return filepath.Join(burstable, "kubepods-burstable-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	}
	for i := 1; i < pods; i++ {
		if err := os.CopyFS(slice(clonedPodUID(i)), os.DirFS(slice(fixturePod))); err != nil {
			b.Fatal(err)
		}
	}
	return root
}
