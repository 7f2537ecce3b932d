package monitor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

func TestFilesystemsNearIsWhetherAFillCouldReachAThresholdBeforeTheIdleWalk(t *testing.T) {
	const gi = int64(1) << 30
	ten := resource.MustParse("10Gi")
	ts := []policy.Threshold{
		{Signal: policy.SignalNodeFsAvailable, Value: policy.ThresholdValue{Quantity: &ten}},
		{Signal: policy.SignalNodeFsInodesFree, Value: policy.ThresholdValue{Percentage: 0.05}},
	}
	idle := 60 * time.Second // 128 MiB/s × 60 s = 7.5 GiB; 20,000 inodes/s × 60 s = 1.2M inodes
	obs := func(bytesFree, inodesFree int64) policy.Observations {
		return policy.Observations{
			policy.SignalNodeFsAvailable:  {Available: bytesFree, Capacity: 100 * gi},
			policy.SignalNodeFsInodesFree: {Available: inodesFree, Capacity: 10_000_000},
		}
	}
	for _, tc := range []struct {
		name string
		obs  policy.Observations
		want bool
	}{
		{"far on both", obs(20*gi, 5_000_000), false},
		{"bytes within 7.5 GiB of 10Gi", obs(17*gi, 5_000_000), true},
		{"bytes threshold met", obs(9*gi, 5_000_000), true},
		{"inodes within 1.2M of 500k", obs(20*gi, 1_600_000), true},
		{"a threshold's signal unread", policy.Observations{policy.SignalNodeFsAvailable: {Available: 20 * gi, Capacity: 100 * gi}}, true},
	} {
		if got := filesystemsNear(tc.obs, ts, idle); got != tc.want {
			t.Errorf("%s: near = %v, want %v", tc.name, got, tc.want)
		}
	}
	if filesystemsNear(obs(20*gi, 5_000_000), nil, idle) {
		t.Error("no filesystem threshold: near, want far")
	}
}

func TestLocalStorageLimitedPods(t *testing.T) {
	limit := resource.MustParse("1Gi")
	for _, tc := range []struct {
		name string
		spec v1.PodSpec
		want bool
	}{
		{"none", v1.PodSpec{Containers: []v1.Container{{Name: "a"}}, Volumes: []v1.Volume{{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}, false},
		{"emptyDir sizeLimit", v1.PodSpec{Volumes: []v1.Volume{{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &limit}}}}}, true},
		{"container limit", v1.PodSpec{Containers: []v1.Container{{Name: "a", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: limit}}}}}, true},
		{"init container limit", v1.PodSpec{InitContainers: []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: limit}}}}}, true},
	} {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u"}, Spec: tc.spec}
		if got := PodRefsFromPods([]*v1.Pod{p})[0].LocalStorageLimited; got != tc.want {
			t.Errorf("%s: LocalStorageLimited = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDiskRefresherPacing: far from every filesystem threshold the refresher
// re-measures only the pods with a local-storage limit, and every pod once the
// last full walk is an idle walk old; near, every pod; and ranking near a
// threshold re-measures a pod whose figures are older than one interval.
func TestDiskRefresherPacing(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "v2-systemd"))); err != nil {
		t.Fatal(err)
	}
	free := PodRef{UID: podBurstable, Namespace: "shop", Name: "web-7d9f"}
	limited := PodRef{UID: types.UID("11111111-2222-4333-8444-555555555555"), Namespace: "shop", Name: "capped", LocalStorageLimited: true}
	logDir := func(p PodRef) string {
		return filepath.Join(root, "var/log/pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), "app")
	}
	if err := os.MkdirAll(logDir(limited), 0o755); err != nil {
		t.Fatal(err)
	}
	grow := func(p PodRef, name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(logDir(p), name), make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(Config{HostRoot: root, CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.SetPods([]PodRef{free, limited})
	logs := func(p PodRef) int64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.disk[p.UID].containerLogs["app"].bytes
	}
	m.refreshDisk(ctx) // near (no pass yet): a full walk
	free0, limited0 := logs(free), logs(limited)

	m.fsFar.Store(true)
	grow(free, "far-1.log")
	grow(limited, "far-1.log")
	m.refreshDisk(ctx)
	if got := logs(free); got != free0 {
		t.Errorf("far, within the idle walk: the pod without a limit was re-measured (%d → %d bytes of logs)", free0, got)
	}
	if got := logs(limited); got <= limited0 {
		t.Errorf("far: the pod with a local-storage limit was not re-measured (%d → %d bytes of logs)", limited0, got)
	}

	m.lastFullWalk = time.Now().Add(-m.idleWalk())
	m.refreshDisk(ctx)
	free1 := logs(free)
	if free1 <= free0 {
		t.Errorf("far, an idle walk after the last full one: the pod without a limit was not re-measured (%d → %d)", free0, free1)
	}

	m.fsFar.Store(false)
	grow(free, "near.log")
	m.refreshDisk(ctx)
	free2 := logs(free)
	if free2 <= free1 {
		t.Errorf("near: the pod without a limit was not re-measured (%d → %d)", free1, free2)
	}

	// Ranking: near, figures older than one interval are measured again.
	grow(free, "step.log")
	m.mu.Lock()
	d := m.disk[free.UID]
	d.time = time.Now().Add(-2 * m.cfg.HousekeepingInterval)
	m.disk[free.UID] = d
	m.mu.Unlock()
	s, _ := newSnapshot(m)
	m.readPods(ctx, s, []PodRef{free}, true)
	if got := *s.Pods[free.UID].Containers["app"].LogsBytes; got <= free2 {
		t.Errorf("ranking near a threshold on figures %v old: logs %d bytes, want the fresh figure above %d", 2*m.cfg.HousekeepingInterval, got, free2)
	}
}
