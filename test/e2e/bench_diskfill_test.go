//go:build e2e && bench_ramp

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// The disk filler of make bench-ramp (setups disk-kubelet-only, disk, disk-brake): a pod writes
// to an emptyDir as fast as the disk takes (write(2) of 1 MiB blocks, fsync every 50 ms)
// against the nodefs.available threshold the kubelet and evictiond share.
//
// The filesystem is bounded: the bench's kubelet root dir (nodefs: emptyDirs) is a sparse ext4
// image of diskNodeFsBytes in the cluster directory, loop-mounted (cluster.Options.NodeFsBytes),
// so the filler can fill it to ENOSPC and never touches the machine's own filesystem (whose
// disk holds only what is written into the image, at most its size).
const (
	diskNodeFsBytes  = 3 << 30
	diskThreshold    = 1 << 30 // nodefs.available, both actors
	diskFillerTarget = 4096    // MiB: more than the filesystem holds
)

var diskSetupsByName = map[string]hogSetup{
	"disk-kubelet-only": {name: "disk filler: kubelet alone"},
	"disk":              {name: "disk filler: kubelet + evictiond", evictiond: true},
	"disk-brake":        {name: "disk filler: kubelet + evictiond + brake", evictiond: true, brake: true},
}

type diskResult struct {
	setup            string
	stoppedBy        string
	kubeletLatency   time.Duration // notActed when it did not act
	evictiondLatency time.Duration
	frozenLatency    time.Duration
	peakLatency      time.Duration // crossing -> the filesystem's fullest moment (the writer's last write)
	minAvailable     int64         // least nodefs available seen (statfs f_bavail)
	enospc           bool          // the filler got ENOSPC
	achievedMiBps    float64       // from 64 MiB above the start to the crossing
	bystanders       bystanderEvictions
	evicted          []string // actor:pod of every Evicted event
	throttled        cluster.CPUThrottling
}

func runDiskSetup(t *testing.T, setup hogSetup) []diskResult {
	hard := map[string]string{}
	for k, v := range cluster.DefaultKubeletEvictionHard {
		hard[k] = v
	}
	hard["allocatableMemory.available"] = strconv.Itoa(rampThreshold>>20) + "Mi"
	hard["nodefs.available"] = strconv.Itoa(diskThreshold>>20) + "Mi"
	c := cluster.Start(t, cluster.Options{
		KubeletEvictionHard:            hard,
		KubeletKernelMemcgNotification: true,
		NodeFsBytes:                    diskNodeFsBytes,
		AuditLog:                       true,
	})
	ctx := context.Background()
	evictiondUID := ""
	if setup.evictiond {
		cfg := rampEvictiondConfigWith("notifier", setup.brake, fmt.Sprintf("  nodefs.available: %dMi\n", diskThreshold>>20))
		pod, err := c.DeployEvictiond(ctx, cluster.DeployOptions{Config: cfg})
		if err != nil {
			t.Fatalf("deploying evictiond: %v", err)
		}
		evictiondUID = string(pod.UID)
	}
	if avail := statfsAvailable(t, c.KubeletRootDir); avail > diskNodeFsBytes || avail < diskThreshold*2 {
		t.Fatalf("nodefs at %s has %d MiB available: not the %d MiB image the bench mounted", c.KubeletRootDir, avail>>20, diskNodeFsBytes>>20)
	}
	var results []diskResult
	for run := range rampRuns {
		r := runDiskEpisode(t, c, setup, fmt.Sprintf("disk-%d", run), evictiondUID)
		t.Logf("%s, run %d: stopped by %s; kubelet %s, evictiond %s, frozen %s, fullest %s; min available %d MiB; ENOSPC %t; achieved %.0f MiB/s; evicted %v; evictiond CPU-throttled %d of %d periods, %s",
			setup.name, run+1, r.stoppedBy, fmtBombLatency(r.kubeletLatency), fmtBombLatency(r.evictiondLatency), fmtBombLatency(r.frozenLatency),
			fmtBombLatency(r.peakLatency), r.minAvailable>>20, r.enospc, r.achievedMiBps, r.evicted,
			r.throttled.Throttled, r.throttled.Periods, r.throttled.ThrottledTime.Round(time.Millisecond))
		results = append(results, r)
	}
	return results
}

func statfsAvailable(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * st.Bsize
}

func runDiskEpisode(t *testing.T, c *cluster.Cluster, setup hogSetup, ns, evictiondUID string) diskResult {
	ctx := context.Background()
	// The last filler's emptyDir gone (the kubelet removes it with the pod), then the kubelet's
	// own DiskPressure over: until then it refuses every new pod.
	room := int64(diskThreshold + diskThreshold/2)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		return statfsAvailable(t, c.KubeletRootDir) > room, nil
	}); err != nil {
		t.Fatalf("the last filler's data was not removed: nodefs has %d MiB available after 3m, want more than %d MiB", statfsAvailable(t, c.KubeletRootDir)>>20, room>>20)
	}
	waitKubeletAdmits(t, c, ns+"-admission", 3*time.Minute)
	createNamespace(t, c.Client, ns)
	res := diskResult{setup: setup.name, kubeletLatency: notActed, evictiondLatency: notActed, frozenLatency: notActed, peakLatency: notActed}
	bystander := podOnNode(ns, "guaranteed", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "32Mi"), resources("cpu", "10m", "memory", "32Mi")))
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, bystander, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, ns, "guaranteed", time.Minute, "Ready", podReady)

	throttle := startThrottleWatch(evictiondUID)
	s := startDiskSampler(c.KubeletRootDir, diskThreshold)
	enospc := watchFillerENOSPC(c, ns)
	filler := podOnNode(ns, "hog", workloadContainer("diskfill", []string{"-dir=/scratch", "-rate-mib=100000", "-target-mib=" + strconv.Itoa(diskFillerTarget)},
		resources("cpu", "1", "memory", "64Mi"), nil))
	filler.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	filler.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	episodeStart := time.Now()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the filler: %v", err)
	}
	last, ended := waitHogEnd(c, ns, "diskfill", 90*time.Second)
	time.Sleep(5 * time.Second)
	r := s.stop()
	res.throttled = throttle()
	res.enospc = enospc()
	res.minAvailable = r.minAvailable
	if !r.crossing.IsZero() {
		if !r.rampStart.IsZero() && r.crossing.After(r.rampStart) {
			res.achievedMiBps = float64(r.startAvail-r.crossingAvail) / float64(1<<20) / r.crossing.Sub(r.rampStart).Seconds()
		}
		if at, ok := kubeletEvictionTime(t, c.LogPath("kubelet"), episodeStart); ok {
			res.kubeletLatency = at.Sub(r.crossing)
		}
		if at, ok := auditEvictionTime(t, c.API.AuditLogPath, ns, episodeStart); ok {
			res.evictiondLatency = at.Sub(r.crossing)
		}
		if setup.evictiond {
			if f, ok := brakeFrozen(t, c, ns, episodeStart); ok {
				res.frozenLatency = offset(f.frozenAt, r.crossing)
			}
		}
		res.peakLatency = r.fullestAt.Sub(r.crossing)
	}
	outcome := readHogOutcome(ctx, t, c, ns)
	res.evicted, res.bystanders = outcome.evicted, outcome.bystanders
	res.stoppedBy = outcome.stoppedBy(ended, last)
	grace := int64(0)
	_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
	return res
}

// watchFillerENOSPC follows the filler's container log (on the machine's filesystem, not the
// filled one) until the returned function is called, which says whether it reported ENOSPC.
func watchFillerENOSPC(c *cluster.Cluster, ns string) func() bool {
	var seen atomic.Bool
	done := make(chan struct{})
	finished := make(chan struct{})
	read := func() {
		logs, _ := filepath.Glob(filepath.Join(c.PodLogsDir, ns+"_hog_*", "diskfill", "*.log"))
		for _, l := range logs {
			if data, err := os.ReadFile(l); err == nil && strings.Contains(string(data), "no space left on device") {
				seen.Store(true)
			}
		}
	}
	go func() {
		defer close(finished)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				read()
				return
			case <-ticker.C:
				read()
			}
		}
	}()
	return func() bool {
		close(done)
		<-finished
		return seen.Load()
	}
}

type diskSampler struct {
	done   chan struct{}
	result chan diskSamplerResult
}

type diskSamplerResult struct {
	rampStart, crossing, fullestAt time.Time
	startAvail, crossingAvail      int64
	minAvailable                   int64
}

// startDiskSampler statfs-es dir every 2 ms: when available first fell 64 MiB below its start
// (the ramp's start), below threshold (the crossing), and its least value and when.
func startDiskSampler(dir string, threshold int64) *diskSampler {
	s := &diskSampler{done: make(chan struct{}), result: make(chan diskSamplerResult, 1)}
	go func() {
		r := diskSamplerResult{minAvailable: -1}
		base := int64(-1)
		ticker := time.NewTicker(2 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-s.done:
				s.result <- r
				return
			case <-ticker.C:
			}
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				continue
			}
			now, avail := time.Now(), int64(st.Bavail)*st.Bsize
			if base < 0 {
				base = avail
			}
			if r.rampStart.IsZero() && avail < base-64<<20 {
				r.rampStart, r.startAvail = now, avail
			}
			if r.crossing.IsZero() && avail < threshold {
				r.crossing, r.crossingAvail = now, avail
			}
			if r.minAvailable < 0 || avail < r.minAvailable {
				r.minAvailable, r.fullestAt = avail, now
			}
		}
	}()
	return s
}

func (s *diskSampler) stop() diskSamplerResult {
	close(s.done)
	return <-s.result
}

func formatDiskReport(results []diskResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| setup | runs: who stopped the writer | write MiB/s (achieved, median) | kubelet: crossing → decision | evictiond: crossing → request | crossing → frozen | crossing → fullest | runs with ENOSPC | min nodefs available MiB | %s | evictiond CPU-throttled periods (runs) |\n", bystanderColumns)
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var order []string
	groups := map[string][]diskResult{}
	for _, r := range results {
		if _, ok := groups[r.setup]; !ok {
			order = append(order, r.setup)
		}
		groups[r.setup] = append(groups[r.setup], r)
	}
	for _, setup := range order {
		rs := groups[setup]
		var stopped, minAvail, throttled []string
		var achieved []float64
		var bystanders []bystanderEvictions
		enospc := 0
		for _, r := range rs {
			stopped = append(stopped, r.stoppedBy)
			minAvail = append(minAvail, strconv.FormatInt(r.minAvailable>>20, 10))
			throttled = append(throttled, fmt.Sprintf("%d (%s)", r.throttled.Throttled, r.throttled.ThrottledTime.Round(time.Millisecond)))
			achieved = append(achieved, r.achievedMiBps)
			if r.enospc {
				enospc++
			}
			bystanders = append(bystanders, r.bystanders)
		}
		sort.Float64s(achieved)
		lat := func(f func(diskResult) time.Duration) string {
			return latencySummary(rs, f, func(d time.Duration) bool { return d != notActed })
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %s | %d of %d | %s | %s | %s |\n", setup, strings.Join(stopped, "; "), achieved[len(achieved)/2],
			lat(func(r diskResult) time.Duration { return r.kubeletLatency }),
			lat(func(r diskResult) time.Duration { return r.evictiondLatency }),
			lat(func(r diskResult) time.Duration { return r.frozenLatency }),
			lat(func(r diskResult) time.Duration { return r.peakLatency }),
			enospc, len(rs), strings.Join(minAvail, ", "), bystanderCells(bystanders), strings.Join(throttled, ", "))
	}
	fmt.Fprintf(&b, "\nLatencies: median / worst over the runs; — : never. nodefs: a %d MiB ext4 image, loop-mounted as the kubelet's root dir; threshold nodefs.available < %d MiB for both actors.\n", diskNodeFsBytes>>20, diskThreshold>>20)
	return b.String()
}
