//go:build integration

package monitor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// BenchmarkObserveMemoryRealHost is the cost of one fresh read of the memory
// signals (memory.available, allocatableMemory.available and the PSI ones)
// from this machine's cgroupfs and procfs. Target: under 1 ms.
func BenchmarkObserveMemoryRealHost(b *testing.B) {
	requireCgroupV1(b)
	tree := newTestCgroupTree(b, "bench")
	if err := os.WriteFile(filepath.Join(v1CgroupMount, "memory", tree.root, "kubepods", "memory.limit_in_bytes"), []byte("1073741824"), 0o644); err != nil {
		b.Fatal(err)
	}
	m, err := New(tree.monitorConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	// CPU time per read beside ns/op: on a shared machine wall time includes
	// waiting for a core.
	cpu0 := cpuTime()
	for b.Loop() {
		s := m.ObserveMemory()
		if _, ok := s.Observations[policy.SignalMemoryAvailable]; !ok {
			b.Fatal(s.Missing)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkObserveFastRealHost is the cost of one read of what the fast poll
// and the brake's second reading take: the memory signals and pid.available
// (with kubepods' pids.max when set). Target: under 1 ms.
func BenchmarkObserveFastRealHost(b *testing.B) {
	requireCgroupV1(b)
	tree := newTestCgroupTree(b, "bench")
	if err := os.WriteFile(filepath.Join(v1CgroupMount, "memory", tree.root, "kubepods", "memory.limit_in_bytes"), []byte("1073741824"), 0o644); err != nil {
		b.Fatal(err)
	}
	m, err := New(tree.monitorConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		s := m.ObserveFast()
		if _, ok := s.Observations[policy.SignalPIDAvailable]; !ok {
			b.Fatal(s.Missing)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkObservePods100RealHost is one fresh read of 100 pods' usage
// (working set and process count from cgroupfs; disk usage from the cache):
// what a pass pays when it must rank pods.
func BenchmarkObservePods100RealHost(b *testing.B) {
	requireCgroupV1(b)
	tree := newTestCgroupTree(b, "bench100p")
	pods := make100Pods(b, tree)
	m, err := New(tree.monitorConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s := m.ObserveNode(ctx)
	m.ObservePods(ctx, s, pods) // fills the disk cache, as the refresher would
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		s := m.ObserveNode(ctx)
		m.ObservePods(ctx, s, pods)
		if len(s.PodErrors) > 0 {
			b.Fatal(s.PodErrors)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// make100Pods makes 100 pod cgroups across the QoS tiers, each with a
// container cgroup holding a sleeping process.
func make100Pods(b *testing.B, tree *testCgroupTree) []PodRef {
	var pods []PodRef
	tiers := []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort}
	for i := 0; i < 100; i++ {
		uid := types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i))
		qos := string(tiers[i%3])
		cg := tree.podCgroup(b, qos, uid)
		tree.mkdir(b, cg+"/ctr")
		startSleeper(b, tree, cg+"/ctr")
		pods = append(pods, PodRef{UID: uid, QOSClass: qos})
	}
	return pods
}

// BenchmarkMonitorWatching100Pods runs the daemon's shape for a while: the
// embedded cAdvisor watching 100 pod cgroups (each with a process in a
// container cgroup) and a loop that reads every node signal once a second. It
// reports the process's RSS and its CPU use in percent of one core over the
// window (the benchmark binary's own, so an upper bound). Targets: under 50 MiB
// RSS, under 1% of one core.
//
// Sub-benchmarks: cAdvisor watching the root cgroup only (the default) or also
// every pod and container cgroup under kubepods (Config.CAdvisorWatchPods);
// housekeeping at its default 10s or at 1s; the loop reading only node signals
// (no threshold met: nothing to rank) or also every pod's fresh usage each
// second (under pressure).
// EVICTIOND_BENCH_WINDOW sets each window (default 30s). Run one
// sub-benchmark per process (make bench-monitor does): cAdvisor registers its
// raw factory globally, so a second manager in one process keeps the first's
// memory and RSS figures would add up.
func BenchmarkMonitorWatching100Pods(b *testing.B) {
	requireCgroupV1(b)
	window := 30 * time.Second
	if v := os.Getenv("EVICTIOND_BENCH_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("EVICTIOND_BENCH_WINDOW %q: %v", v, err)
		}
		window = d
	}
	for _, tc := range []struct {
		name         string
		housekeeping time.Duration
		watchPods    bool
		podsEachPass bool
	}{
		{"cadvisor=root/housekeeping=10s/loop=signals", 10 * time.Second, false, false},
		{"cadvisor=root/housekeeping=10s/loop=signals+pods", 10 * time.Second, false, true},
		{"cadvisor=pods/housekeeping=10s/loop=signals", 10 * time.Second, true, false},
		{"cadvisor=pods/housekeeping=1s/loop=signals", time.Second, true, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tree := newTestCgroupTree(b, "bench100")
			pods := make100Pods(b, tree)
			cfg := tree.monitorConfig(b)
			cfg.DisableCAdvisor = false
			cfg.HousekeepingInterval = tc.housekeeping
			cfg.CAdvisorWatchPods = tc.watchPods
			m, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := m.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer m.Stop()
			m.SetPods(pods)
			for b.Loop() {
				// Let start-up (cAdvisor's first scan of every cgroup) settle first.
				loop(ctx, m, pods, tc.podsEachPass, 3*time.Second)
				cpu0, wall0 := cpuTime(), time.Now()
				worst := loop(ctx, m, pods, tc.podsEachPass, window)
				cpu := cpuTime() - cpu0
				wall := time.Since(wall0)
				b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%CPU")
				b.ReportMetric(float64(statusKB(b, "VmRSS"))/1024, "RSS-MiB")
				b.ReportMetric(float64(statusKB(b, "VmHWM"))/1024, "peakRSS-MiB")
				b.ReportMetric(float64(worst.Microseconds())/1000, "worstPass-ms")
			}
		})
	}
}

// loop observes every second for d and returns the slowest pass.
func loop(ctx context.Context, m *Monitor, pods []PodRef, withPods bool, d time.Duration) time.Duration {
	var worst time.Duration
	end := time.Now().Add(d)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Now().Before(end) {
		start := time.Now()
		s := m.ObserveNode(ctx)
		if withPods {
			m.ObservePods(ctx, s, pods)
			if len(s.PodErrors) > 0 {
				panic(fmt.Sprint(s.PodErrors))
			}
		}
		worst = max(worst, time.Since(start))
		<-t.C
	}
	return worst
}

func startSleeper(b *testing.B, tree *testCgroupTree, cg string) {
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting sleep: %v", err)
	}
	tree.procs = append(tree.procs, cmd)
	for _, ctl := range testControllers {
		if err := os.WriteFile(filepath.Join(v1CgroupMount, ctl, cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func statusKB(b *testing.B, key string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	b.Fatalf("no %s in /proc/self/status", key)
	return 0
}
