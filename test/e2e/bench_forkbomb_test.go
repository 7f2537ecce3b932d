//go:build e2e && bench_ramp

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// The fork bomb of make bench-ramp (setups bomb-kubelet-only, bomb, bomb-brake): a pod forks
// as fast as the kernel lets it against the pid.available threshold that the kubelet and
// evictiond share.
//
// "The node's PIDs" here are a bounded budget, never the machine's: this machine is shared
// and its own shells need PIDs (pid_max is 32768). The bench's kubelet reserves PIDs
// (systemReserved pid = capacity - bombPodsPIDs, enforceNodeAllocatable: [pods]) so that the
// kubepods cgroup gets pids.max = bombPodsPIDs: every pod of the node shares that budget, and
// when the bomb has taken it no pod can fork or start a container — the pods' view of a node
// out of PIDs — while the machine outside kubepods keeps its PIDs. The bomb program has its
// own hard cap (bombCap) as a second bound. The kubelet and evictiond both compute
// pid.available node-wide (min(pid_max, threads-max) - the tasks of /proc/loadavg), so their
// shared threshold is placed so that it is crossed when kubepods has about bombHeadroom PIDs
// left (the machine's other tasks move that by tens; the table gives what was left at the
// crossing).
const (
	bombPodsPIDs = 3000
	bombHeadroom = 1500
	bombCap      = 6000
	// bombClusterTasks estimates the tasks the cluster's own processes add to the machine's
	// (control plane, containerd, kubelet, shims; /proc/loadavg counted 50-60 more after the
	// boot on this machine) when the threshold is computed before boot.
	bombClusterTasks = 60
)

var bombSetupsByName = map[string]hogSetup{
	"bomb-kubelet-only": {name: "fork bomb: kubelet alone"},
	"bomb":              {name: "fork bomb: kubelet + evictiond", evictiond: true},
	"bomb-brake":        {name: "fork bomb: kubelet + evictiond + brake", evictiond: true, brake: true},
}

// bombResult is one fork-bomb episode's outcome.
type bombResult struct {
	setup            string
	stoppedBy        string
	leftAtCrossing   int64         // kubepods PIDs left when the crossing was seen
	kubeletLatency   time.Duration // crossing -> kubelet's "must evict"; notActed when it did not act
	evictiondLatency time.Duration // crossing -> evictiond's eviction request; notActed when it did not act
	frozenLatency    time.Duration // crossing -> evictiond's brake froze the bomb; notActed when it did not
	peakLatency      time.Duration // crossing -> the bomb's last new task (kubepods' peak); notActed never crossed
	goneLatency      time.Duration // crossing -> half the bomb's tasks gone; notActed never seen
	exhausted        bool          // kubepods reached pids.max
	minPodsLeft      int64         // least kubepods pids.max - pids.current seen
	minNodeAvailable int64         // least node-wide pid.available seen
	probeRefused     int           // forks refused to the bystander probe
	probeAttempts    int
	bystanders       bystanderEvictions
	peakTasks        int64
	throttled        cluster.CPUThrottling // evictiond's CFS throttling during the episode
}

func runBombSetup(t *testing.T, setup hogSetup) []bombResult {
	capacity, err := cluster.NodePIDCapacity()
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := cluster.NodeTasks()
	if err != nil {
		t.Fatal(err)
	}
	if free := capacity - tasks; free < bombCap+10000 {
		t.Fatalf("the machine has %d PIDs free (capacity %d): too few to run a bomb capped at %d and keep 10000 for everything else", free, capacity, bombCap)
	}
	// Crossed when kubepods has bombHeadroom PIDs left, with the machine's tasks as now plus
	// the cluster's.
	threshold := capacity - tasks - bombClusterTasks - (bombPodsPIDs - bombHeadroom)
	hard := map[string]string{}
	for k, v := range cluster.DefaultKubeletEvictionHard {
		hard[k] = v
	}
	hard["allocatableMemory.available"] = strconv.Itoa(rampThreshold>>20) + "Mi"
	hard["pid.available"] = strconv.FormatInt(threshold, 10)
	c := cluster.Start(t, cluster.Options{
		KubeletEvictionHard:            hard,
		KubeletKernelMemcgNotification: true,
		PodsPIDs:                       bombPodsPIDs,
		AuditLog:                       true,
	})
	ctx := context.Background()
	evictiondUID := ""
	if setup.evictiond {
		cfg := rampEvictiondConfigWith("notifier", setup.brake, fmt.Sprintf("  pid.available: %q\n", strconv.FormatInt(threshold, 10)))
		pod, err := c.DeployEvictiond(ctx, cluster.DeployOptions{Config: cfg})
		if err != nil {
			t.Fatalf("deploying evictiond: %v", err)
		}
		evictiondUID = string(pod.UID)
	}
	now, err := cluster.ReadPIDs()
	if err != nil {
		t.Fatal(err)
	}
	if now.PodsMax != bombPodsPIDs {
		t.Fatalf("kubepods pids.max is %d, want %d (the kubelet's systemReserved pid)", now.PodsMax, bombPodsPIDs)
	}
	t.Logf("PID budget: kubepods pids.max %d, %d used; node capacity %d, %d tasks; shared pid.available threshold %d (crossed at about %d kubepods PIDs left now)",
		now.PodsMax, now.PodsCurrent, capacity, now.NodeTasks, threshold, now.PodsLeft()-(capacity-now.NodeTasks-threshold))
	var results []bombResult
	for run := range rampRuns {
		r := runBombEpisode(t, c, setup, capacity, threshold, fmt.Sprintf("bomb-%d", run), evictiondUID)
		t.Logf("%s, run %d: stopped by %s; left at crossing %d; kubelet %s, evictiond %s, frozen %s, growth stopped %s, gone %s; exhausted %t; min left %d; probe refused %d of %d; bystanders evicted by the kubelet %d, by evictiond %d; peak tasks %d; evictiond CPU-throttled %d of %d periods, %s",
			setup.name, run+1, r.stoppedBy, r.leftAtCrossing, fmtBombLatency(r.kubeletLatency), fmtBombLatency(r.evictiondLatency), fmtBombLatency(r.frozenLatency),
			fmtBombLatency(r.peakLatency), fmtBombLatency(r.goneLatency), r.exhausted, r.minPodsLeft, r.probeRefused, r.probeAttempts, r.bystanders.kubelet, r.bystanders.evictiond, r.peakTasks,
			r.throttled.Throttled, r.throttled.Periods, r.throttled.ThrottledTime.Round(time.Millisecond))
		results = append(results, r)
	}
	return results
}

func runBombEpisode(t *testing.T, c *cluster.Cluster, setup hogSetup, capacity, threshold int64, ns, evictiondUID string) bombResult {
	ctx := context.Background()
	// Under PIDPressure the kubelet admits no pod: wait for the last episode's to be over.
	waitKubeletAdmits(t, c, ns+"-admission", 3*time.Minute)
	createNamespace(t, c.Client, ns)
	res := bombResult{setup: setup.name, kubeletLatency: notActed, evictiondLatency: notActed, frozenLatency: notActed, peakLatency: notActed, goneLatency: notActed}
	bystanders := []*corev1.Pod{
		podOnNode(ns, "guaranteed", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "32Mi"), resources("cpu", "10m", "memory", "32Mi"))),
		podOnNode(ns, "probe", workloadContainer("pidhog", []string{"-mode=probe", "-rate=50"}, resources("cpu", "50m", "memory", "32Mi"), nil)),
	}
	for _, p := range bystanders {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	for _, p := range bystanders {
		waitPod(t, c, ns, p.Name, time.Minute, "Ready", podReady)
	}
	// The previous bomb's tasks gone, and the node back above the threshold with room.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		p, err := cluster.ReadPIDs()
		return err == nil && capacity-p.NodeTasks > threshold+bombHeadroom/2, nil
	}); err != nil {
		t.Fatalf("node pid.available did not come back above %d", threshold+bombHeadroom/2)
	}
	throttle := startThrottleWatch(evictiondUID)
	probe := watchProbe(c, ns)
	s := startPIDSampler(capacity, threshold)
	bomb := podOnNode(ns, "hog", workloadContainer("pidhog", []string{"-mode=bomb", "-count=" + strconv.Itoa(bombCap)}, resources("cpu", "1", "memory", "64Mi"), nil))
	episodeStart := time.Now()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, bomb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the bomb: %v", err)
	}
	last, ended := waitHogEnd(c, ns, "pidhog", 90*time.Second)
	time.Sleep(5 * time.Second)
	r := s.stop()
	res.throttled = throttle()
	res.minPodsLeft, res.minNodeAvailable, res.exhausted, res.peakTasks = r.minPodsLeft, r.minNodeAvailable, r.exhausted, r.peak
	if !r.crossing.IsZero() {
		res.leftAtCrossing = r.leftAtCrossing
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
		res.peakLatency = r.peakAt.Sub(r.crossing)
		if !r.gone.IsZero() {
			res.goneLatency = r.gone.Sub(r.crossing)
		}
	}
	res.probeAttempts, res.probeRefused = probe()
	if res.probeAttempts < 0 {
		t.Logf("%s: no probe report in its container log", ns)
	}
	outcome := readHogOutcome(ctx, t, c, ns)
	res.bystanders = outcome.bystanders
	res.stoppedBy = outcome.stoppedBy(ended, last)
	grace := int64(0)
	_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
	return res
}

var probeLine = regexp.MustCompile(`probe: attempts=(\d+) refused=(\d+)`)

// watchProbe reads the bystander probe's reports (one a second) from its container log on the
// node every 100 ms until the returned function is called, which gives the last one (-1, -1:
// none). The log goes with the container when the kubelet evicts the probe, hence the watch.
func watchProbe(c *cluster.Cluster, ns string) func() (attempts, refused int) {
	done := make(chan struct{})
	result := make(chan [2]int, 1)
	go func() {
		last := [2]int{-1, -1}
		read := func() {
			logs, _ := filepath.Glob(filepath.Join(c.PodLogsDir, ns+"_probe_*", "pidhog", "*.log"))
			for _, l := range logs {
				data, err := os.ReadFile(l)
				if err != nil {
					continue
				}
				if m := probeLine.FindAllStringSubmatch(string(data), -1); len(m) > 0 {
					a, _ := strconv.Atoi(m[len(m)-1][1])
					r, _ := strconv.Atoi(m[len(m)-1][2])
					last = [2]int{a, r}
				}
			}
		}
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				read()
				result <- last
				return
			case <-ticker.C:
				read()
			}
		}
	}()
	return func() (int, int) {
		close(done)
		r := <-result
		return r[0], r[1]
	}
}

// pidSampler reads the node's tasks and kubepods' pids cgroup every 2 ms.
type pidSampler struct {
	done   chan struct{}
	result chan pidSamplerResult
}

type pidSamplerResult struct {
	crossing         time.Time // first node-wide pid.available below the threshold
	leftAtCrossing   int64
	peak             int64 // most kubepods tasks
	peakAt           time.Time
	gone             time.Time // after the peak: kubepods tasks back below base + half the growth
	minPodsLeft      int64
	minNodeAvailable int64
	exhausted        bool
}

func startPIDSampler(capacity, threshold int64) *pidSampler {
	s := &pidSampler{done: make(chan struct{}), result: make(chan pidSamplerResult, 1)}
	go func() {
		r := pidSamplerResult{minPodsLeft: -1, minNodeAvailable: -1}
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
			p, err := cluster.ReadPIDs()
			if err != nil {
				continue
			}
			if base < 0 {
				base = p.PodsCurrent
			}
			avail := capacity - p.NodeTasks
			if r.crossing.IsZero() && avail < threshold {
				r.crossing, r.leftAtCrossing = p.At, p.PodsLeft()
			}
			if left := p.PodsLeft(); r.minPodsLeft < 0 || left < r.minPodsLeft {
				r.minPodsLeft = left
			}
			if r.minNodeAvailable < 0 || avail < r.minNodeAvailable {
				r.minNodeAvailable = avail
			}
			if p.PodsMax >= 0 && p.PodsCurrent >= p.PodsMax {
				r.exhausted = true
			}
			if p.PodsCurrent > r.peak {
				r.peak, r.peakAt, r.gone = p.PodsCurrent, p.At, time.Time{}
			}
			if r.gone.IsZero() && !r.peakAt.IsZero() && r.peak-base > 100 && p.PodsCurrent < base+(r.peak-base)/2 {
				r.gone = p.At
			}
		}
	}()
	return s
}

func (s *pidSampler) stop() pidSamplerResult {
	close(s.done)
	return <-s.result
}

// notActed marks a latency that has no value (the actor did not act, the crossing was not
// seen). A negative latency is real: evictiond's reading crossed before the bench's sampler
// saw it (both read /proc/loadavg, at different moments).
const notActed = time.Duration(-1 << 63)

func fmtBombLatency(d time.Duration) string {
	if d == notActed {
		return "did not act"
	}
	return d.Round(time.Millisecond).String()
}

// formatBombReport is one row per fork-bomb setup: the runs' outcomes, the median and worst
// of each latency, the least PIDs left.
func formatBombReport(results []bombResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| setup | runs: who stopped the bomb | kubepods PIDs left at the crossing | kubelet: crossing → decision | evictiond: crossing → request | crossing → frozen | crossing → bomb's last fork | crossing → bomb's PIDs freed | runs with kubepods out of PIDs | min kubepods PIDs left | bystander probe: forks refused | %s | evictiond CPU-throttled periods (runs) |\n", bystanderColumns)
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var order []string
	groups := map[string][]bombResult{}
	for _, r := range results {
		if _, ok := groups[r.setup]; !ok {
			order = append(order, r.setup)
		}
		groups[r.setup] = append(groups[r.setup], r)
	}
	for _, setup := range order {
		rs := groups[setup]
		var stopped, left, minLeft, probe, throttled []string
		var bystanders []bystanderEvictions
		exhausted := 0
		for _, r := range rs {
			stopped = append(stopped, r.stoppedBy)
			left = append(left, strconv.FormatInt(r.leftAtCrossing, 10))
			minLeft = append(minLeft, strconv.FormatInt(r.minPodsLeft, 10))
			probe = append(probe, fmt.Sprintf("%d of %d", r.probeRefused, r.probeAttempts))
			throttled = append(throttled, fmt.Sprintf("%d (%s)", r.throttled.Throttled, r.throttled.ThrottledTime.Round(time.Millisecond)))
			if r.exhausted {
				exhausted++
			}
			bystanders = append(bystanders, r.bystanders)
		}
		lat := func(f func(bombResult) time.Duration) string {
			return latencySummary(rs, f, func(d time.Duration) bool { return d != notActed })
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %d of %d | %s | %s | %s | %s |\n", setup,
			strings.Join(stopped, "; "), strings.Join(left, ", "),
			lat(func(r bombResult) time.Duration { return r.kubeletLatency }),
			lat(func(r bombResult) time.Duration { return r.evictiondLatency }),
			lat(func(r bombResult) time.Duration { return r.frozenLatency }),
			lat(func(r bombResult) time.Duration { return r.peakLatency }),
			lat(func(r bombResult) time.Duration { return r.goneLatency }),
			exhausted, len(rs), strings.Join(minLeft, ", "), strings.Join(probe, ", "), bystanderCells(bystanders), strings.Join(throttled, ", "))
	}
	fmt.Fprintf(&b, "\nLatencies: median / worst over the runs; — : never. Per-run values are listed in run order. Budget: kubepods pids.max %d; threshold set to be crossed at about %d left.\n", bombPodsPIDs, bombHeadroom)
	return b.String()
}
