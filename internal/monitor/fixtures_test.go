package monitor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// The fixture trees under testdata are written by hack/gen-monitor-fixtures.py;
// these are their numbers.
const (
	fixtureMemTotal      = 16384000 * 1024
	fixtureMemAvailable  = 9000000 * 1024
	fixtureRootWS        = (3<<30 + 2<<30) - 1<<30 // anon + file - inactive_file (v2); usage - total_inactive_file (v1)
	fixtureKubepodsLimit = 12 << 30
	fixtureKubepodsWS    = 2<<30 - 512<<20
	fixtureMaxPID        = 126942 // min(pid_max 4194304, threads-max 126942)
	fixtureTasks         = 1523

	podBurstable  = types.UID("0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111")
	podGuaranteed = types.UID("5b2d3c44-1a2b-4c3d-8e9f-00112233aabb")
	podBestEffort = types.UID("9f8e7d6c-5b4a-4392-8170-ffeeddccbbaa")
	appID         = "4c7a1f0e9b2d3c4a5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"
)

var fixturePods = []PodRef{
	{UID: podBurstable, Namespace: "shop", Name: "web-7d9f", QOSClass: string(v1.PodQOSBurstable)},
	{UID: podGuaranteed, QOSClass: string(v1.PodQOSGuaranteed)},
	{UID: podBestEffort, QOSClass: string(v1.PodQOSBestEffort)},
}

func fixtureMonitor(t *testing.T, tree string, driver CgroupDriver, mutate func(*Config)) *Monitor {
	t.Helper()
	cfg := Config{HostRoot: filepath.Join("testdata", tree), CgroupDriver: driver, DisableCAdvisor: true}
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", tree, err)
	}
	return m
}

func wantObservation(t *testing.T, s *Snapshot, sig policy.Signal, available, capacity int64) {
	t.Helper()
	o, ok := s.Observations[sig]
	if !ok {
		t.Errorf("%s: missing (%s), want available %d capacity %d", sig, s.Missing[sig], available, capacity)
		return
	}
	if o.Available != available || o.Capacity != capacity {
		t.Errorf("%s = available %d capacity %d, want %d / %d", sig, o.Available, o.Capacity, available, capacity)
	}
	if o.Time.IsZero() {
		t.Errorf("%s has no read time", sig)
	}
}

func TestFixtureMemorySignalsFollowTheKubeletFormulas(t *testing.T) {
	for _, tc := range []struct {
		tree    string
		driver  CgroupDriver
		version CgroupVersion
	}{
		{"v2-systemd", CgroupDriverSystemd, CgroupV2},
		{"v2-cgroupfs", CgroupDriverCgroupfs, CgroupV2},
		{"v1-cgroupfs", CgroupDriverCgroupfs, CgroupV1},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			m := fixtureMonitor(t, tc.tree, tc.driver, nil)
			if got := m.CgroupInfo().Version; got != tc.version {
				t.Fatalf("detected cgroup v%d, want v%d", got, tc.version)
			}
			s := m.ObserveMemory()
			wantObservation(t, s, policy.SignalMemoryAvailable, fixtureMemTotal-fixtureRootWS, fixtureMemTotal)
			wantObservation(t, s, policy.SignalAllocatableMemoryAvailable, fixtureKubepodsLimit-fixtureKubepodsWS, fixtureKubepodsLimit)
		})
	}
}

func TestFixtureMemAvailableFormula(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, func(c *Config) { c.MemoryFormula = MemoryFormulaMemAvailable })
	s := m.ObserveMemory()
	wantObservation(t, s, policy.SignalMemoryAvailable, fixtureMemAvailable, fixtureMemTotal)
	if r := readingOf(s, policy.SignalMemoryAvailable); r.Source != SourceMemAvailable {
		t.Errorf("source %q, want %q", r.Source, SourceMemAvailable)
	}
}

func readingOf(s *Snapshot, sig policy.Signal) SignalReading {
	for _, r := range s.Readings {
		if r.Signal == sig {
			return r
		}
	}
	return SignalReading{}
}

func TestFixturePSIIsHeadroomOnPSIScale(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.ObserveMemory()
	// /proc/pressure/memory: some avg10=1.23 ... full avg300=0.05
	wantObservation(t, s, policy.SignalMemoryPSISomeAvg10, policy.PSIScale-123, policy.PSIScale)
	wantObservation(t, s, policy.SignalMemoryPSISomeAvg60, policy.PSIScale-50, policy.PSIScale)
	wantObservation(t, s, policy.SignalMemoryPSIFullAvg300, policy.PSIScale-5, policy.PSIScale)
	// kubepods.slice/memory.pressure: some avg10=12.50 ... full avg10=4.00
	wantObservation(t, s, policy.SignalAllocatableMemoryPSISomeAvg10, policy.PSIScale-1250, policy.PSIScale)
	wantObservation(t, s, policy.SignalAllocatableMemoryPSIFullAvg10, policy.PSIScale-400, policy.PSIScale)
	wantObservation(t, s, policy.SignalAllocatableMemoryPSIFullAvg300, policy.PSIScale-20, policy.PSIScale)
}

func TestFixtureKubepodsPSIIsAbsentOnCgroupV1WithoutCountingAnError(t *testing.T) {
	m := fixtureMonitor(t, "v1-cgroupfs", CgroupDriverCgroupfs, nil)
	s := m.ObserveMemory()
	if _, ok := s.Observations[policy.SignalAllocatableMemoryPSISomeAvg10]; ok {
		t.Fatal("allocatableMemory PSI observed on cgroup v1")
	}
	if s.Missing[policy.SignalAllocatableMemoryPSISomeAvg10] == "" {
		t.Error("no reason given for the missing allocatableMemory PSI")
	}
	if n := counterValue(t, m.metrics.signalReadErrors, string(policy.SignalAllocatableMemoryPSISomeAvg10)); n != 0 {
		t.Errorf("read error counted %v times for a signal that does not exist on v1", n)
	}
	wantObservation(t, s, policy.SignalMemoryPSISomeAvg10, policy.PSIScale, policy.PSIScale)
}

func TestFixturePIDAvailableUsesTheSmallerLimitAndLoadavgTasks(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.Observe(context.Background(), nil)
	wantObservation(t, s, policy.SignalPIDAvailable, fixtureMaxPID-fixtureTasks, fixtureMaxPID)
}

func TestFixtureNodefsIsTheFilesystemOfTheKubeletRootDir(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.Observe(context.Background(), nil)
	var st unix.Statfs_t
	if err := unix.Statfs("testdata/v2-systemd/var/lib/kubelet", &st); err != nil {
		t.Fatal(err)
	}
	o := s.Observations[policy.SignalNodeFsAvailable]
	if o.Capacity != int64(st.Blocks)*st.Frsize {
		t.Errorf("nodefs capacity %d, statfs says %d", o.Capacity, int64(st.Blocks)*st.Frsize)
	}
	if i := s.Observations[policy.SignalNodeFsInodesFree]; i.Capacity != int64(st.Files) {
		t.Errorf("nodefs inodes %d, statfs says %d", i.Capacity, st.Files)
	}
	// Without a runtime and without cAdvisor, imagefs is statfs of ImageFsDir.
	if r := readingOf(s, policy.SignalImageFsAvailable); r.Source != SourceStatfs {
		t.Errorf("imagefs source %q, want %q", r.Source, SourceStatfs)
	}
	if s.Layout.DedicatedImageFs || s.Layout.SplitContainerFs {
		t.Errorf("layout %+v, want one filesystem", s.Layout)
	}
}

func TestFixturePodCgroupsByDriverAndQoS(t *testing.T) {
	want := map[string]map[types.UID]string{
		"v2-systemd": {
			podBurstable:  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e7f5a36_9c1e_4f53_9d0a_7f8ac2a1b111.slice",
			podGuaranteed: "/kubepods.slice/kubepods-pod5b2d3c44_1a2b_4c3d_8e9f_00112233aabb.slice",
			podBestEffort: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9f8e7d6c_5b4a_4392_8170_ffeeddccbbaa.slice",
		},
		"v2-cgroupfs": {
			podBurstable:  "/kubepods/burstable/pod0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111",
			podGuaranteed: "/kubepods/pod5b2d3c44-1a2b-4c3d-8e9f-00112233aabb",
			podBestEffort: "/kubepods/besteffort/pod9f8e7d6c-5b4a-4392-8170-ffeeddccbbaa",
		},
	}
	want["v1-cgroupfs"] = want["v2-cgroupfs"]
	drivers := map[string]CgroupDriver{"v2-systemd": CgroupDriverSystemd, "v2-cgroupfs": CgroupDriverCgroupfs, "v1-cgroupfs": CgroupDriverCgroupfs}
	for tree, paths := range want {
		t.Run(tree, func(t *testing.T) {
			m := fixtureMonitor(t, tree, drivers[tree], nil)
			s := m.Observe(context.Background(), fixturePods)
			for uid, p := range paths {
				if got := s.PodCgroups[uid].Path; got != p {
					t.Errorf("pod %s cgroup %q, want %q", uid, got, p)
				}
			}
			// Discovery from the tree alone finds the same pods in their tiers.
			found, err := m.cgl().discoverPods()
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != 3 {
				t.Fatalf("discovered %d pods, want 3: %+v", len(found), found)
			}
			for _, pc := range found {
				if paths[pc.Pod.UID] != pc.Path {
					t.Errorf("discovered %s at %q (%s), want %q", pc.Pod.UID, pc.Path, pc.Pod.QOSClass, paths[pc.Pod.UID])
				}
			}
		})
	}
}

func TestFixturePerPodWorkingSetAndProcesses(t *testing.T) {
	want := map[types.UID]struct{ ws, procs int64 }{
		podBurstable:  {256<<20 - 16<<20, 4},
		podGuaranteed: {100 << 20, 2},
		podBestEffort: {50<<20 - 1<<20, 1},
	}
	for _, tc := range []struct {
		tree   string
		driver CgroupDriver
	}{{"v2-systemd", CgroupDriverSystemd}, {"v2-cgroupfs", CgroupDriverCgroupfs}, {"v1-cgroupfs", CgroupDriverCgroupfs}} {
		t.Run(tc.tree, func(t *testing.T) {
			m := fixtureMonitor(t, tc.tree, tc.driver, nil)
			// A pod whose QoS class is unknown is found by trying each tier.
			pods := append([]PodRef(nil), fixturePods...)
			pods[2].QOSClass = ""
			s := m.Observe(context.Background(), pods)
			for uid, w := range want {
				ps := s.Pods[uid]
				if ps.MemoryWorkingSet == nil || *ps.MemoryWorkingSet != w.ws {
					t.Errorf("pod %s working set %v, want %d (errors: %s)", uid, deref(ps.MemoryWorkingSet), w.ws, s.PodErrors[uid])
				}
				if ps.Processes == nil || *ps.Processes != w.procs {
					t.Errorf("pod %s processes %v, want %d", uid, deref(ps.Processes), w.procs)
				}
			}
		})
	}
}

func TestFixtureUnknownPodIsMissingNotZero(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	gone := types.UID("00000000-0000-4000-8000-000000000000")
	s := m.Observe(context.Background(), []PodRef{{UID: gone, QOSClass: string(v1.PodQOSBurstable)}})
	if ps := s.Pods[gone]; ps.MemoryWorkingSet != nil || ps.Processes != nil {
		t.Errorf("pod without a cgroup has usage %+v", ps)
	}
	if s.PodErrors[gone] == "" {
		t.Error("no error recorded for a pod without a cgroup")
	}
	if n := counterValue(t, m.metrics.podReadErrors, "cgroup"); n != 1 {
		t.Errorf("pod cgroup read errors counted %v, want 1", n)
	}
}

func TestFixtureMissingFileIsReportedMissingAndCounted(t *testing.T) {
	// procfs.NewFS refuses a missing mount point, so build the monitor on a
	// good tree and take /proc away after.
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	m.procDir = filepath.Join("testdata", "v2-systemd", "no-such-proc")
	s := m.Observe(context.Background(), nil)
	if _, ok := s.Observations[policy.SignalPIDAvailable]; ok {
		t.Fatal("pid.available observed from a missing /proc")
	}
	if s.Missing[policy.SignalPIDAvailable] == "" {
		t.Error("no reason for the missing pid.available")
	}
	if n := counterValue(t, m.metrics.signalReadErrors, string(policy.SignalPIDAvailable)); n != 1 {
		t.Errorf("read errors for pid.available = %v, want 1", n)
	}
}

// fakeRuntime answers the two CRI calls the monitor makes. It stands in for
// containerd only in these pure unit tests of the translation.
type fakeRuntime struct {
	fsInfo *runtimeapi.ImageFsInfoResponse
	stats  []*runtimeapi.ContainerStats
	err    error
	// fsInfoCalls counts ImageFsInfo calls.
	fsInfoCalls int
}

func (f *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	f.fsInfoCalls++
	return f.fsInfo, f.err
}

func (f *fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return f.stats, f.err
}

func TestFixtureRuntimeGivesImagefsWritableLayersAndContainerNames(t *testing.T) {
	rt := &fakeRuntime{
		fsInfo: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			FsId:      &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"},
			UsedBytes: &runtimeapi.UInt64Value{Value: 5 << 30},
		}}},
		stats: []*runtimeapi.ContainerStats{{
			Attributes: &runtimeapi.ContainerAttributes{
				Id:       appID,
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				Labels:   map[string]string{podUIDLabel: string(podBurstable)},
			},
			WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{Value: 7 << 20}, InodesUsed: &runtimeapi.UInt64Value{Value: 42}},
		}},
	}
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, func(c *Config) { c.Runtime = rt })
	s := m.Observe(context.Background(), fixturePods)
	for _, sig := range []policy.Signal{policy.SignalImageFsAvailable, policy.SignalContainerFsAvailable} {
		if r := readingOf(s, sig); r.Source != SourceCRI {
			t.Errorf("%s source %q, want %q (missing: %s)", sig, r.Source, SourceCRI, s.Missing[sig])
		}
	}
	app := s.Pods[podBurstable].Containers["app"]
	if orMinusOne(app.RootfsBytes) != 7<<20 || orMinusOne(app.RootfsInodes) != 42 {
		t.Errorf("app writable layer %v bytes %v inodes, want %d / 42", deref(app.RootfsBytes), deref(app.RootfsInodes), 7<<20)
	}
	if orMinusOne(app.MemoryWorkingSet) != 200<<20 {
		t.Errorf("app container working set %v, want %d", deref(app.MemoryWorkingSet), 200<<20)
	}
	if app.LogsBytes == nil || *app.LogsBytes <= 0 {
		t.Errorf("app logs %v, want the size of its log file", deref(app.LogsBytes))
	}
	ps := s.Pods[podBurstable]
	for _, vol := range []string{"cache", "config"} {
		if v, ok := ps.Volumes[vol]; !ok || v.UsedBytes == nil || *v.UsedBytes <= 0 {
			t.Errorf("volume %s usage %v, want > 0", vol, deref(v.UsedBytes))
		}
	}
	if ps.EphemeralStorageBytes == nil || *ps.EphemeralStorageBytes < 7<<20+10000 {
		t.Errorf("pod ephemeral storage %v, want at least writable layer + volumes", deref(ps.EphemeralStorageBytes))
	}

	// A runtime that fails: imagefs falls back, writable layers go missing.
	rt.err = errors.New("connection refused")
	m = fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, func(c *Config) { c.Runtime = rt })
	s = m.Observe(context.Background(), fixturePods)
	if r := readingOf(s, policy.SignalImageFsAvailable); r.Source != SourceStatfs {
		t.Errorf("imagefs source after a CRI failure %q, want the fallback %q", r.Source, SourceStatfs)
	}
	if s.Pods[podBurstable].EphemeralStorageBytes != nil {
		t.Error("pod ephemeral total given without writable layers")
	}
}

// A pass must not wait on the runtime: the CRI's filesystems are asked once,
// then refreshed by the housekeeping goroutine (refreshRuntimeFs), while each
// pass statfs's the mountpoints it was told. A failure is kept the same way,
// and the passes fall back without asking a runtime that may hang.
func TestRuntimeFilesystemsAreNotAskedOnEveryPass(t *testing.T) {
	mount := "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"
	rt := &fakeRuntime{fsInfo: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: mount}, UsedBytes: &runtimeapi.UInt64Value{Value: 5 << 30},
	}}}}
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, func(c *Config) { c.Runtime = rt })
	ctx := context.Background()
	for range 3 {
		s := m.ObserveNode(ctx)
		if r := readingOf(s, policy.SignalImageFsAvailable); r.Source != SourceCRI {
			t.Fatalf("imagefs source %q (missing: %s), want %q", r.Source, s.Missing[policy.SignalImageFsAvailable], SourceCRI)
		}
	}
	if rt.fsInfoCalls != 1 {
		t.Fatalf("ImageFsInfo called %d times in 3 passes, want once (the first pass has no answer yet)", rt.fsInfoCalls)
	}

	// The runtime fails; the housekeeping refresh sees it, the passes fall back.
	rt.err = errors.New("connection refused")
	m.refreshRuntimeFs(ctx)
	for range 2 {
		s := m.ObserveNode(ctx)
		if r := readingOf(s, policy.SignalImageFsAvailable); r.Source != SourceStatfs {
			t.Fatalf("imagefs source after a CRI failure %q, want the fallback %q", r.Source, SourceStatfs)
		}
	}
	if rt.fsInfoCalls != 2 {
		t.Fatalf("ImageFsInfo called %d times, want 2 (the first pass, the refresh)", rt.fsInfoCalls)
	}

	// An answer older than the housekeeping interval (the refresher not running) is asked again.
	rt.err = nil
	m.mu.Lock()
	m.runtimeFs.at = time.Now().Add(-m.cfg.HousekeepingInterval - m.cfg.RuntimeTimeout - time.Second)
	m.mu.Unlock()
	s := m.ObserveNode(ctx)
	if r := readingOf(s, policy.SignalImageFsAvailable); r.Source != SourceCRI || rt.fsInfoCalls != 3 {
		t.Fatalf("stale answer: imagefs source %q after %d calls, want %q after 3", r.Source, rt.fsInfoCalls, SourceCRI)
	}

	// With the refresher running, a pass never asks, however old the answer: a runtime
	// starved of CPU answers late, and the pass at a memory crossing must not wait for it.
	m.mu.Lock()
	m.refreshing = true
	m.runtimeFs.at = time.Now().Add(-10 * m.cfg.HousekeepingInterval)
	m.mu.Unlock()
	s = m.ObserveNode(ctx)
	if r := readingOf(s, policy.SignalImageFsAvailable); r.Source != SourceCRI || rt.fsInfoCalls != 3 {
		t.Fatalf("old answer, refresher running: imagefs source %q after %d calls, want %q after 3", r.Source, rt.fsInfoCalls, SourceCRI)
	}
}

func TestCgroupRootWithSystemdSlices(t *testing.T) {
	l, err := newCgroupLayout(CgroupV2, CgroupDriverSystemd, "/sys/fs/cgroup", "/node.slice/node-pods.slice")
	if err != nil {
		t.Fatal(err)
	}
	if l.kubepods != "/node.slice/node-pods.slice/node-pods-kubepods.slice" {
		t.Errorf("kubepods %q", l.kubepods)
	}
	p, err := l.podCgroupPath("a-b", string(v1.PodQOSBestEffort))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/node.slice/node-pods.slice/node-pods-kubepods.slice/node-pods-kubepods-besteffort.slice/node-pods-kubepods-besteffort-poda_b.slice"; p != want {
		t.Errorf("pod cgroup %q, want %q", p, want)
	}
	if _, err := newCgroupLayout(CgroupV2, CgroupDriverSystemd, "/sys/fs/cgroup", "/node"); err == nil {
		t.Error("a systemd cgroupRoot that is no slice was accepted")
	}
	if _, err := newCgroupLayout(CgroupV2, "docker", "/sys/fs/cgroup", "/"); err == nil {
		t.Error("an unknown cgroup driver was accepted")
	}
}

func TestPSIHeadroomClamps(t *testing.T) {
	for stall, want := range map[float64]int64{0: policy.PSIScale, 0.004: policy.PSIScale, 40: 6000, 99.99: 1, 100: 0, 150: 0} {
		if got := psiHeadroom(stall); got != want {
			t.Errorf("psiHeadroom(%v) = %d, want %d", stall, got, want)
		}
	}
}

func TestParseMemoryFormulaNamesTheFieldAndRule(t *testing.T) {
	_, err := ParseMemoryFormula("rss")
	if err == nil || err.Error() != `stats.memoryFormula "rss": must be "workingSet" or "memAvailable"` {
		t.Errorf("error %v", err)
	}
}

func orMinusOne(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func counterValue(t *testing.T, vec *prometheus.CounterVec, label string) float64 {
	t.Helper()
	return testutil.ToFloat64(vec.WithLabelValues(label))
}

func TestFixtureStaticPodIsReadUnderItsRuntimeUID(t *testing.T) {
	mirror := &v1.Pod{}
	mirror.UID = "11111111-2222-4333-8444-555555555555" // the mirror pod's API UID
	mirror.Namespace, mirror.Name = "kube-system", "etcd-node1"
	mirror.Annotations = map[string]string{"kubernetes.io/config.mirror": string(podGuaranteed)}
	mirror.Status.QOSClass = v1.PodQOSGuaranteed
	refs := PodRefsFromPods([]*v1.Pod{mirror})
	if refs[0].RuntimeUID != podGuaranteed || refs[0].QOSClass != string(v1.PodQOSGuaranteed) {
		t.Fatalf("ref %+v", refs[0])
	}
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.Observe(context.Background(), refs)
	ps, ok := s.Pods[mirror.UID]
	if !ok || orMinusOne(ps.MemoryWorkingSet) != 100<<20 {
		t.Errorf("static pod stats %+v (errors: %s), want its cgroup's 100 MiB under the API UID", ps, s.PodErrors[mirror.UID])
	}
}

func TestFixturePodDiskOnlyLeavesMemoryUnmeasured(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.ObserveNode(context.Background())
	m.ObservePodDisk(context.Background(), s, fixturePods)
	ps := s.Pods[podBurstable]
	if ps.MemoryWorkingSet != nil || ps.Processes != nil {
		t.Errorf("disk-only read measured memory %v / processes %v", deref(ps.MemoryWorkingSet), deref(ps.Processes))
	}
	if v, ok := ps.Volumes["cache"]; !ok || v.UsedBytes == nil {
		t.Errorf("disk-only read lacks the emptyDir volume: %+v", ps.Volumes)
	}
	m.ObservePods(context.Background(), s, fixturePods)
	if orMinusOne(s.Pods[podBurstable].MemoryWorkingSet) != 240<<20 {
		t.Errorf("working set after ObservePods %v", deref(s.Pods[podBurstable].MemoryWorkingSet))
	}
}

// With a pids.max on kubepods (the kubelet's systemReserved pid), pid.available
// stays node-wide, as the kubelet computes it, and carries the pods' nearer
// wall for the brake; without one (or "max") it carries none.
func TestFixturePIDAvailableCarriesTheKubepodsPIDsLimit(t *testing.T) {
	for _, tc := range []struct {
		name, max string
		want      *int64
	}{
		{name: "pids.max 3000, 1200 used", max: "3000\n", want: ptrTo(int64(1800))},
		{name: "pids.max max", max: "max\n"},
		{name: "no pids.max file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "v2-cgroupfs"))); err != nil {
				t.Fatal(err)
			}
			kubepods := filepath.Join(root, "sys/fs/cgroup/kubepods")
			if tc.max != "" {
				for name, v := range map[string]string{"pids.max": tc.max, "pids.current": "1200\n"} {
					if err := os.WriteFile(filepath.Join(kubepods, name), []byte(v), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			m := fixtureMonitor(t, "", CgroupDriverCgroupfs, func(c *Config) { c.HostRoot = root })
			s := m.ObserveNode(context.Background())
			wantObservation(t, s, policy.SignalPIDAvailable, fixtureMaxPID-fixtureTasks, fixtureMaxPID)
			got := s.Observations[policy.SignalPIDAvailable].PodsLeft
			switch {
			case tc.want == nil && got != nil:
				t.Errorf("PodsLeft = %d, want none", *got)
			case tc.want != nil && (got == nil || *got != *tc.want):
				t.Errorf("PodsLeft = %v, want %d", got, *tc.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// ObserveFast (the fast poll's and the brake's second reading) reads the
// memory signals, pid.available and nodefs (one statfs), and nothing that
// needs the CRI or the pod cgroups: no imagefs, no pod usage.
func TestFixtureObserveFastReadsMemoryPIDsAndNodefsOnly(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.ObserveFast()
	var st unix.Statfs_t
	if err := unix.Statfs("testdata/v2-systemd/var/lib/kubelet", &st); err != nil {
		t.Fatal(err)
	}
	if o, ok := s.Observations[policy.SignalNodeFsAvailable]; !ok || o.Capacity != int64(st.Blocks)*st.Frsize {
		t.Errorf("nodefs.available %+v (present %v), statfs capacity %d", o, ok, int64(st.Blocks)*st.Frsize)
	}
	wantObservation(t, s, policy.SignalPIDAvailable, fixtureMaxPID-fixtureTasks, fixtureMaxPID)
	wantObservation(t, s, policy.SignalMemoryAvailable, fixtureMemTotal-fixtureRootWS, fixtureMemTotal)
	for _, sig := range []policy.Signal{policy.SignalImageFsAvailable, policy.SignalContainerFsAvailable} {
		if _, ok := s.Observations[sig]; ok {
			t.Errorf("%s read by ObserveFast", sig)
		}
	}
	if len(s.Pods) != 0 {
		t.Errorf("pod usage read by ObserveFast: %d pods", len(s.Pods))
	}
}

// A pod measured while it started (no container log directory yet) has no
// disk stats until the next housekeeping; ranking measures it again, so a
// pod started seconds before a disk crossing is ranked by what it uses, not
// first for having no stats. The every-pass read keeps the cache.
func TestFixtureRankingMeasuresAgainAPodSeenBeforeItsContainersLogged(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "v2-systemd"))); err != nil {
		t.Fatal(err)
	}
	podLogs := filepath.Join(root, "var/log/pods/shop_web-7d9f_"+string(podBurstable))
	app := filepath.Join(podLogs, "app")
	saved := t.TempDir()
	if err := os.Rename(app, filepath.Join(saved, "app")); err != nil {
		t.Fatal(err)
	}
	m := fixtureMonitor(t, "", CgroupDriverSystemd, func(c *Config) { c.HostRoot = root })
	s := m.ObserveNode(context.Background())
	m.ObservePodDisk(context.Background(), s, fixturePods)
	if c := s.Pods[podBurstable].Containers["app"]; c.LogsBytes != nil {
		t.Fatalf("logs measured before the container's log directory existed: %v", deref(c.LogsBytes))
	}
	if err := os.Rename(filepath.Join(saved, "app"), app); err != nil { // the container starts
		t.Fatal(err)
	}
	m.ObservePodDisk(context.Background(), s, fixturePods)
	if c := s.Pods[podBurstable].Containers["app"]; c.LogsBytes != nil {
		t.Errorf("the every-pass read measured again (%v); it should keep the housekeeping cache", deref(c.LogsBytes))
	}
	m.ObservePods(context.Background(), s, fixturePods)
	if c := s.Pods[podBurstable].Containers["app"]; c.LogsBytes == nil || *c.LogsBytes == 0 {
		t.Errorf("ranking read: container logs %v, want the log directory measured now", deref(c.LogsBytes))
	}
}

// Every pass reads the pods' memory.pressure for the self-inflicted stall
// detection (cgroup v2), but only while kubepods itself stalls: at 0.00 no pod
// under it can (PSI is hierarchical), and the pass skips three reads a pod.
// The ranking's read (ObservePods) always takes it.
func TestFixturePodDiskReadsPodPressureOnlyWhileKubepodsStalls(t *testing.T) {
	m := fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, nil)
	s := m.ObserveNode(context.Background())
	m.ObservePodDisk(context.Background(), s, fixturePods)
	if pp := s.Pods[podBurstable].MemoryPressure; pp == nil || pp.Some[0] != 1250 {
		t.Fatalf("kubepods some avg10 12.50: pod pressure %+v, want the pod's 12.50", pp)
	}

	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("testdata/v2-systemd")); err != nil {
		t.Fatal(err)
	}
	idle := "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2345\n"
	if err := os.WriteFile(filepath.Join(root, "sys/fs/cgroup/kubepods.slice/memory.pressure"), []byte(idle), 0o644); err != nil {
		t.Fatal(err)
	}
	m = fixtureMonitor(t, "v2-systemd", CgroupDriverSystemd, func(c *Config) { c.HostRoot = root })
	s = m.ObserveNode(context.Background())
	m.ObservePodDisk(context.Background(), s, fixturePods)
	if pp := s.Pods[podBurstable].MemoryPressure; pp != nil {
		t.Errorf("kubepods some avg10 0.00: pod pressure read anyway: %+v", pp)
	}
	m.ObservePods(context.Background(), s, fixturePods)
	if pp := s.Pods[podBurstable].MemoryPressure; pp == nil || pp.Some[0] != 1250 {
		t.Errorf("ranking read: pod pressure %+v, want the pod's 12.50", pp)
	}
}

// An idle pass gives the disk figures of the pass before without building
// them again while neither the pod's measurement nor the writable layers
// changed, and new figures as soon as either did.
func TestFixtureIdlePassReusesDiskFiguresUntilTheyChange(t *testing.T) {
	rt := &fakeRuntime{
		fsInfo: &runtimeapi.ImageFsInfoResponse{},
		stats: []*runtimeapi.ContainerStats{{
			Attributes: &runtimeapi.ContainerAttributes{Id: appID, Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				Labels: map[string]string{podUIDLabel: string(podBurstable)}},
			WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{Value: 7 << 20}, InodesUsed: &runtimeapi.UInt64Value{Value: 42}},
		}},
	}
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "v2-systemd"))); err != nil {
		t.Fatal(err)
	}
	m := fixtureMonitor(t, "", CgroupDriverSystemd, func(c *Config) { c.HostRoot = root; c.Runtime = rt })
	idle := func() policy.PodStats {
		t.Helper()
		s := m.ObserveNode(context.Background())
		m.ObservePodDisk(context.Background(), s, fixturePods)
		return s.Pods[podBurstable]
	}
	same := func(a, b map[string]policy.ContainerStats) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	first, second := idle(), idle()
	if first.Containers == nil || !same(first.Containers, second.Containers) {
		t.Fatalf("two idle passes built the pod's container figures twice (%p, %p)", first.Containers, second.Containers)
	}
	if orMinusOne(second.Containers["app"].RootfsBytes) != 7<<20 || second.EphemeralStorageBytes == nil {
		t.Fatalf("reused figures: writable layer %v, ephemeral total %v", deref(second.Containers["app"].RootfsBytes), deref(second.EphemeralStorageBytes))
	}

	// The writable layer grows: the refresh's figures, in new maps.
	rt.stats[0].WritableLayer.UsedBytes.Value = 9 << 20
	m.refreshLayers(context.Background())
	third := idle()
	if same(third.Containers, second.Containers) || orMinusOne(third.Containers["app"].RootfsBytes) != 9<<20 {
		t.Errorf("after the layers' refresh: writable layer %v, want %d in new figures", deref(third.Containers["app"].RootfsBytes), 9<<20)
	}
	if *third.EphemeralStorageBytes-*second.EphemeralStorageBytes != 2<<20 {
		t.Errorf("ephemeral total %d after the layer grew by 2 MiB, was %d", *third.EphemeralStorageBytes, *second.EphemeralStorageBytes)
	}

	// The pod's logs grow and the refresher measures them again: new figures.
	log := filepath.Join(root, "var/log/pods/shop_web-7d9f_"+string(podBurstable), "app", "more.log")
	if err := os.WriteFile(log, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	m.refreshDisk(context.Background())
	fourth := idle()
	if same(fourth.Containers, third.Containers) || *fourth.Containers["app"].LogsBytes < *third.Containers["app"].LogsBytes+1<<20 {
		t.Errorf("after the refresher measured 1 MiB more logs: logs %v, were %v", deref(fourth.Containers["app"].LogsBytes), deref(third.Containers["app"].LogsBytes))
	}

	// A ranking read builds its own figures and never writes the reused ones.
	s := m.ObserveNode(context.Background())
	m.ObservePods(context.Background(), s, fixturePods)
	if same(s.Pods[podBurstable].Containers, fourth.Containers) {
		t.Error("the ranking read wrote into the idle pass's figures")
	}
	if fourth.Containers["app"].MemoryWorkingSet != nil {
		t.Error("the ranking read's working set went into the idle pass's figures")
	}
}
