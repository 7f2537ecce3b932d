//go:build e2e && bench_ramp

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// The ramp benchmark (make bench-ramp): a hog pod ramps memory inside the kubepods cgroup
// at several rates, with the kubelet's eviction and evictiond watching the same threshold on
// the same node, and reports per rate who acted, how long after the crossing, and how many
// pods went. It is a measurement run, not a pass/fail test: it fails only when the harness
// itself cannot run an episode.

// rampThreshold is the allocatableMemory.available threshold the kubelet and evictiond share.
const rampThreshold = 500 << 20

// rampRate is one ramp of the benchmark: hogs containers in the hog pod, each allocating
// rateMiB per second (the machine's top rate needs several in parallel).
type rampRate struct {
	label   string
	rateMiB int
	hogs    int
}

var rampRates = []rampRate{
	{"100", 100, 1}, {"400", 400, 1}, {"1000", 1000, 1}, {"4000", 4000, 1},
	{"max (2 × 4000)", 4000, 2},
}

// rampSetup is one cluster configuration of the benchmark.
type rampSetup struct {
	name          string
	kubeletMemcg  bool
	evictiondMode string // "" (kubelet alone), "notifier" or "poll"
	brake         bool   // evictiond's brake (brake.enabled)
	// kubeletThreshold is the kubelet's allocatableMemory.available threshold
	// when not the shared rampThreshold: below evictiond's, the kubelet as the
	// backstop (docs/operations.md).
	kubeletThreshold int64
	// burners is how many CPU-bound pods share the node during each episode (the busy node):
	// Burstable, each with a 400m CPU request and two spinning threads, so that with the hog's
	// 1-CPU request the hog keeps about a core and evictiond's 100m weighs 5 % of the rest.
	burners int
	// realtime turns on brake.realtime (evictiond's threads in SCHED_FIFO near a threshold).
	realtime bool
}

// rampSetupsByName are the setups BENCH_RAMP_SETUPS can name.
var rampSetupsByName = map[string][]rampSetup{
	"notifier":        {{name: "kubelet memcg on, evictiond notifier", kubeletMemcg: true, evictiondMode: "notifier"}},
	"brake":           {{name: "kubelet memcg on, evictiond notifier + brake", kubeletMemcg: true, evictiondMode: "notifier", brake: true}},
	"brake-memcg-off": {{name: "kubelet memcg off, evictiond notifier + brake", kubeletMemcg: false, evictiondMode: "notifier", brake: true}},
	"memcg-off":       {{name: "kubelet memcg off, evictiond notifier", kubeletMemcg: false, evictiondMode: "notifier"}},
	// The recommended deployment: the kubelet's threshold below evictiond's.
	"brake-backstop": {{name: "kubelet memcg on at 250Mi (backstop), evictiond notifier + brake at 500Mi", kubeletMemcg: true,
		evictiondMode: "notifier", brake: true, kubeletThreshold: 250 << 20}},
	"poll": {{name: "kubelet memcg on, evictiond poll-only", kubeletMemcg: true, evictiondMode: "poll"}},
	// The cgroup v2 node's paths on this v1 one: no memcg threshold on either side, so
	// evictiond's fast poll is what sees the crossing (PSI off too: a ramp from far away
	// stalls nothing until the limit).
	"brake-poll": {{name: "kubelet memcg off, evictiond poll-only + brake", kubeletMemcg: false, evictiondMode: "poll", brake: true}},
	// The busy node: the same with every CPU taken by burner pods (rampBurners), without and
	// with brake.realtime.
	"brake-busy": {{name: "busy node: kubelet memcg on, evictiond notifier + brake", kubeletMemcg: true, evictiondMode: "notifier",
		brake: true, burners: rampBurners}},
	"brake-busy-rt": {{name: "busy node: kubelet memcg on, evictiond notifier + brake + realtime", kubeletMemcg: true,
		evictiondMode: "notifier", brake: true, burners: rampBurners, realtime: true}},
	"brake-memcg-off-busy": {{name: "busy node: kubelet memcg off, evictiond notifier + brake", evictiondMode: "notifier",
		brake: true, burners: rampBurners}},
	"brake-memcg-off-busy-rt": {{name: "busy node: kubelet memcg off, evictiond notifier + brake + realtime",
		evictiondMode: "notifier", brake: true, burners: rampBurners, realtime: true}},
	"brake-backstop-busy": {{name: "busy node: kubelet memcg on at 250Mi (backstop), evictiond notifier + brake at 500Mi", kubeletMemcg: true,
		evictiondMode: "notifier", brake: true, kubeletThreshold: 250 << 20, burners: rampBurners}},
	"brake-backstop-busy-rt": {{name: "busy node: kubelet memcg on at 250Mi (backstop), evictiond notifier + brake + realtime at 500Mi", kubeletMemcg: true,
		evictiondMode: "notifier", brake: true, kubeletThreshold: 250 << 20, burners: rampBurners, realtime: true}},
	"kubelet-only": {{name: "kubelet alone, memcg on", kubeletMemcg: true},
		{name: "kubelet alone, memcg off", kubeletMemcg: false}},
}

// rampBurners is how many burner pods the busy setups run: two pods of two spinning threads
// keep both of this machine's cores runnable twice over beside the hog.
const rampBurners = 2

// rampResult is one episode's outcome.
type rampResult struct {
	setup    string
	rate     rampRate
	outcome  string // "evicted by kubelet", "evicted by evictiond", "OOM-killed", ...
	killedBy string // who ended the hog: "brake kill", "eviction", "kubelet eviction", "OOM killer"
	// Latencies from the bench's crossing; notActed when there is none. A negative one is
	// real: the actor saw the crossing before the bench's 2 ms sampler did (a memcg
	// threshold on usage, or the sampler descheduled).
	kubeletLatency   time.Duration // crossing -> kubelet's "must evict"
	evictiondLatency time.Duration // crossing -> evictiond's eviction request
	frozenLatency    time.Duration // crossing -> evictiond's brake froze the hog
	// freezeSplit is where that time went, from the crossing: the poll's reading of it, the
	// pass's start, its assessment, the freeze's write, frozen (brakeFreeze.split).
	freezeSplit     []time.Duration
	releasedLatency time.Duration // crossing -> kubepods working set back down by 3/4 of the ramp
	stoppedLatency  time.Duration // crossing -> the last new peak of kubepods' working set (growth stopped)
	passSteps       string        // evictiond's pass steps, as its frozen log line gives them
	passWaits       string        // what evictiond's process waited on in that pass (faults, blocking, preemption)
	// pollTrail is the fast poll's reads before its first read of the crossing (evictiond's
	// "fast poll: memory threshold met"), as offsets from that read: printed for a late read.
	pollTrail      string
	evicted        int // pods evicted in the episode, all actors
	bystanders     bystanderEvictions
	oomKills       int64
	peakWorkingSet int64
	achievedMiBps  float64
	throttled      cluster.CPUThrottling // evictiond's CFS throttling during the episode
	runQueueWait   time.Duration         // evictiond's threads' time runnable but not running in the episode; -1 unknown
}

func TestBenchRamp(t *testing.T) {
	names := "notifier,brake,brake-memcg-off,poll,bomb-kubelet-only,bomb,bomb-brake,disk-kubelet-only,disk,disk-brake"
	if only := os.Getenv("BENCH_RAMP_SETUPS"); only != "" {
		names = only // e.g. kubelet-only to measure the kubelet without evictiond
	}
	var setups []rampSetup
	var bombSetups []hogSetup
	var diskSetups []hogSetup
	for _, name := range strings.Split(names, ",") {
		if b, ok := bombSetupsByName[name]; ok {
			bombSetups = append(bombSetups, b)
			continue
		}
		if d, ok := diskSetupsByName[name]; ok {
			diskSetups = append(diskSetups, d)
			continue
		}
		s, ok := rampSetupsByName[name]
		if !ok {
			t.Fatalf("BENCH_RAMP_SETUPS=%q: unknown setup %q (known: notifier, brake, brake-memcg-off, brake-backstop, memcg-off, poll, kubelet-only, brake-busy[-rt], brake-memcg-off-busy[-rt], brake-backstop-busy[-rt], bomb-kubelet-only, bomb, bomb-brake, disk-kubelet-only, disk, disk-brake)", names, name)
		}
		setups = append(setups, s...)
	}
	if only := os.Getenv("BENCH_RAMP_RATES"); only != "" {
		// e.g. BENCH_RAMP_RATES=100,1000,max
		var rates []rampRate
		for _, name := range strings.Split(only, ",") {
			found := false
			for _, r := range rampRates {
				if r.label == name || name == "max" && r.hogs > 1 {
					rates, found = append(rates, r), true
				}
			}
			if !found {
				t.Fatalf("BENCH_RAMP_RATES=%q: unknown rate %q (known: 100, 400, 1000, 4000, max)", only, name)
			}
		}
		rampRates = rates
	}
	runs := 3
	if v := os.Getenv("BENCH_RAMP_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BENCH_RAMP_RUNS=%q: must be a number of runs per rate, at least 1", v)
		}
		runs = n
	}
	rampRuns = runs
	var results []rampResult
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			results = append(results, runRampSetup(t, setup)...)
		})
	}
	var bombResults []bombResult
	for _, setup := range bombSetups {
		t.Run(setup.name, func(t *testing.T) {
			bombResults = append(bombResults, runBombSetup(t, setup)...)
		})
	}
	var diskResults []diskResult
	for _, setup := range diskSetups {
		t.Run(setup.name, func(t *testing.T) {
			diskResults = append(diskResults, runDiskSetup(t, setup)...)
		})
	}
	var report string
	if len(results) > 0 {
		report = formatRampReport(results)
	}
	if len(bombResults) > 0 {
		if report != "" {
			report += "\n"
		}
		report += formatBombReport(bombResults)
	}
	if len(diskResults) > 0 {
		if report != "" {
			report += "\n"
		}
		report += formatDiskReport(diskResults)
	}
	t.Log("\n" + report)
	if out := os.Getenv("BENCH_RAMP_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			t.Errorf("writing %s: %v", out, err)
		}
	}
}

func runRampSetup(t *testing.T, setup rampSetup) []rampResult {
	hard := map[string]string{}
	for k, v := range cluster.DefaultKubeletEvictionHard {
		hard[k] = v
	}
	kubeletThreshold := int64(rampThreshold)
	if setup.kubeletThreshold > 0 {
		kubeletThreshold = setup.kubeletThreshold
	}
	hard["allocatableMemory.available"] = strconv.FormatInt(kubeletThreshold>>20, 10) + "Mi"
	c := cluster.Start(t, cluster.Options{
		KubeletEvictionHard:            hard,
		KubeletKernelMemcgNotification: setup.kubeletMemcg,
		AuditLog:                       true,
	})
	ctx := context.Background()
	evictiondUID := ""
	if setup.evictiondMode != "" {
		deploy := cluster.DeployOptions{Config: rampEvictiondConfigRT(setup.evictiondMode, setup.brake, setup.realtime)}
		if setup.realtime {
			// The chart's way, RLIMIT_RTPRIO raised with CAP_SYS_RESOURCE, is closed on this
			// machine: its bounding set has no CAP_SYS_RESOURCE, and runc leaves it out of the
			// agent's container. CAP_SYS_NICE allows the same SCHED_FIFO 1 (docs/fast-path.md).
			deploy.AddCapabilities = []corev1.Capability{"SYS_NICE"}
		}
		pod, err := c.DeployEvictiond(ctx, deploy)
		if err != nil {
			t.Fatalf("deploying evictiond: %v", err)
		}
		evictiondUID = string(pod.UID)
		// BENCH_RAMP_EVICTIOND_CPU_SHARES: evictiond's CPU weight under contention instead of
		// what its 100m request gives (cpu.shares 102), to measure what CPU priority it needs.
		if v := os.Getenv("BENCH_RAMP_EVICTIOND_CPU_SHARES"); v != "" {
			shares, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("BENCH_RAMP_EVICTIOND_CPU_SHARES=%q: %v", v, err)
			}
			if err := cluster.SetPodCPUShares(evictiondUID, shares); err != nil {
				t.Fatalf("setting evictiond's cpu.shares: %v", err)
			}
			t.Logf("evictiond's pod cgroup cpu.shares set to %d", shares)
		}
	}
	var results []rampResult
	n := 0
	for _, rate := range rampRates {
		for run := range rampRuns {
			r := runRampEpisode(t, c, setup, rate, fmt.Sprintf("ramp-%d", n), evictiondUID)
			n++
			t.Logf("%s, %s MiB/s, run %d: %s; killed by %s; kubelet %s, evictiond %s, frozen %s (%s; pass steps: %s; pass waits: %s), growth stopped %s, released %s; %d evicted; peak working set %d MiB; achieved %.0f MiB/s; evictiond CPU-throttled %d of %d periods, %s; evictiond waited for a CPU %s",
				setup.name, rate.label, run+1, r.outcome, r.killedBy, fmtLatency(r.kubeletLatency), fmtLatency(r.evictiondLatency),
				fmtLatency(r.frozenLatency), formatFreezeSplit([][]time.Duration{r.freezeSplit}), r.passSteps, r.passWaits, fmtLatency(r.stoppedLatency), fmtLatency(r.releasedLatency), r.evicted, r.peakWorkingSet>>20, r.achievedMiBps,
				r.throttled.Throttled, r.throttled.Periods, r.throttled.ThrottledTime.Round(time.Millisecond), fmtWait(r.runQueueWait))
			if poll := r.freezeSplit; r.pollTrail != "" && (len(poll) == 0 || poll[0] == notActed || poll[0] > 10*time.Millisecond) {
				t.Logf("%s, %s MiB/s, run %d: the fast poll's reads before it read the crossing: %s", setup.name, rate.label, run+1, r.pollTrail)
			}
			results = append(results, r)
		}
	}
	return results
}

// pollTrailOf is the pollTrail of evictiond's first "fast poll: memory threshold met" line
// after since.
func pollTrailOf(t *testing.T, c *cluster.Cluster, since time.Time) string {
	for _, line := range evictiondLogLines(t, c, "fast poll: memory threshold met", since) {
		i := strings.IndexByte(line, '{')
		if i < 0 {
			continue
		}
		var rec struct{ PollTrail string }
		if json.Unmarshal([]byte(line[i:]), &rec) == nil && rec.PollTrail != "" {
			return rec.PollTrail
		}
	}
	return ""
}

// rampRuns is how many episodes each rate gets (BENCH_RAMP_RUNS, default 3).
var rampRuns = 3

// rampEvictiondConfigRT is evictiond's configuration for the benchmark: the same hard
// threshold as the kubelet's, with the kernel fast path on (notifier) or off (poll), the brake
// on or off, and brake.realtime on or off as realtime says (its default is on since
// 2026-11-26: the setups without -rt turn it off, so that they keep measuring the agent at its
// CPU weight alone).
func rampEvictiondConfigRT(mode string, brake, realtime bool) string {
	return strings.Replace(rampEvictiondConfigWith(mode, brake, ""), "brake: {enabled: "+strconv.FormatBool(brake)+"}",
		fmt.Sprintf("brake: {enabled: %t, realtime: {enabled: %t}}", brake, realtime), 1)
}

// rampEvictiondConfigWith is the configuration without brake.realtime, with extra evictionHard
// lines.
func rampEvictiondConfigWith(mode string, brake bool, extraHard string) string {
	notifier := "notifier: {memcgThresholds: true, psi: {enabled: true}, pollInterval: 100ms}"
	if mode == "poll" {
		notifier = "notifier: {memcgThresholds: false, memoryEvents: false, psi: {enabled: false}, pollInterval: 100ms}"
	}
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  memory.available: 100Mi
  allocatableMemory.available: %dMi
%sevictionPressureTransitionPeriod: 30s
loop: {interval: 1s, podCleanupTimeout: 30s}
%s
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
brake: {enabled: %t}
`, rampThreshold>>20, extraHard, notifier, brake)
}

func runRampEpisode(t *testing.T, c *cluster.Cluster, setup rampSetup, rate rampRate, ns, evictiondUID string) rampResult {
	ctx := context.Background()
	createNamespace(t, c.Client, ns)
	res := rampResult{setup: setup.name, rate: rate, kubeletLatency: notActed, evictiondLatency: notActed, frozenLatency: notActed, releasedLatency: notActed, stoppedLatency: notActed}

	bystanders := []*corev1.Pod{
		podOnNode(ns, "guaranteed", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "32Mi"), resources("cpu", "10m", "memory", "32Mi"))),
		podOnNode(ns, "burstable-a", workloadContainer("memhog", []string{"-rate-mib=64", "-target-mib=64"}, resources("memory", "128Mi"), nil)),
		podOnNode(ns, "burstable-b", workloadContainer("memhog", []string{"-rate-mib=64", "-target-mib=64"}, resources("memory", "128Mi"), nil)),
	}
	for i := range setup.burners {
		// Burners are bystanders like the others: an eviction of one is counted.
		bystanders = append(bystanders, podOnNode(ns, fmt.Sprintf("burner-%d", i+1),
			workloadContainer("idle", []string{"-burn=2"}, resources("cpu", "400m", "memory", "32Mi"), nil)))
	}
	for _, p := range bystanders {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	for _, p := range bystanders {
		waitPod(t, c, ns, p.Name, time.Minute, "Ready", podReady)
	}
	waitPodsMemoryCalm(t, 2*rampThreshold, 2*time.Minute)

	before, err := cluster.ReadPodsMemory()
	if err != nil {
		t.Fatal(err)
	}
	throttle := startThrottleWatch(evictiondUID)
	cpuWait := startRunQueueWatch(evictiondUID)
	sampler := startSampler(rampThreshold)
	// A CPU request: without one the hog gets cpu.shares=2 and, on a machine busy with other
	// work, cannot reach the higher rates.
	var hogs []corev1.Container
	for i := range rate.hogs {
		h := workloadContainer("memhog", []string{"-rate-mib=" + strconv.Itoa(rate.rateMiB)}, resources("cpu", "1", "memory", "64Mi"), nil)
		if i > 0 {
			h.Name = fmt.Sprintf("memhog-%d", i+1)
			h.Resources.Requests = resources("memory", "64Mi")
		}
		hogs = append(hogs, h)
	}
	hog := podOnNode(ns, "hog", hogs...)
	episodeStart := time.Now()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod hog: %v", err)
	}
	last := waitHogDone(t, c, ns, "memhog", 2*time.Minute)
	// Let a second eviction, if either actor makes one on stale numbers, happen and be counted.
	time.Sleep(5 * time.Second)
	s := sampler.stop()
	res.throttled = throttle()
	res.runQueueWait = cpuWait()

	after, err := cluster.ReadPodsMemory()
	if err != nil {
		t.Fatal(err)
	}
	res.oomKills = after.OOMKills - before.OOMKills
	res.peakWorkingSet = s.peak
	if !s.crossing.IsZero() && !s.rampStart.IsZero() {
		res.achievedMiBps = float64(s.crossingWS-s.startWS) / float64(1<<20) / s.crossing.Sub(s.rampStart).Seconds()
	}
	if at, ok := kubeletEvictionTime(t, c.LogPath("kubelet"), episodeStart); ok && !s.crossing.IsZero() {
		res.kubeletLatency = at.Sub(s.crossing)
	}
	if at, ok := auditEvictionTime(t, c.API.AuditLogPath, ns, episodeStart); ok && !s.crossing.IsZero() {
		res.evictiondLatency = at.Sub(s.crossing)
	}
	if setup.evictiondMode != "" && !s.crossing.IsZero() {
		if f, ok := brakeFrozen(t, c, ns, episodeStart); ok {
			res.frozenLatency = offset(f.frozenAt, s.crossing)
			res.freezeSplit = f.split(s.crossing)
			res.passSteps, res.passWaits = f.passSteps, f.passWaits
		}
		res.pollTrail = pollTrailOf(t, c, episodeStart)
	}
	if !s.released.IsZero() {
		res.releasedLatency = s.released.Sub(s.crossing)
	}
	if !s.grew.IsZero() && !s.crossing.IsZero() {
		res.stoppedLatency = s.grew.Sub(s.crossing)
	}
	outcome := readHogOutcome(ctx, t, c, ns)
	by, seen, braked := outcome.evicted, outcome.seen, outcome.braked
	res.evicted, res.bystanders = len(by), outcome.bystanders
	term := (*corev1.ContainerStateTerminated)(nil)
	if last != nil {
		term = terminatedState(last, "memhog")
	}
	switch {
	case len(by) > 0:
		res.outcome = "evicted (" + strings.Join(by, ", ") + ")"
	case term != nil && term.Reason == "OOMKilled":
		res.outcome = "OOM-killed"
	case res.oomKills > 0:
		res.outcome = fmt.Sprintf("OOM kill in kubepods (%d)", res.oomKills)
	default:
		res.outcome = "other: " + describeStatus(last)
	}
	if res.oomKills > 0 && len(by) > 0 {
		res.outcome += fmt.Sprintf(" + %d OOM kill(s)", res.oomKills)
	}
	switch {
	case braked:
		res.killedBy = "brake kill (evictiond)"
	case term != nil && term.Reason == "OOMKilled", res.oomKills > 0 && !seen["evictiond:hog"] && !seen["kubelet:hog"]:
		res.killedBy = "OOM killer"
	case seen["evictiond:hog"]:
		res.killedBy = "eviction (evictiond)"
	case seen["kubelet:hog"]:
		res.killedBy = "eviction (kubelet)"
	default:
		res.killedBy = "?"
	}
	if res.oomKills > 0 && res.killedBy != "OOM killer" {
		res.killedBy += " + OOM killer"
	}
	if setup.evictiondMode != "" && res.oomKills > 0 {
		// An OOM kill with the agent at work: its own account of the episode, to read why.
		var lines []string
		for _, l := range evictiondLogLines(t, c, `"level":"`, episodeStart) {
			if !strings.Contains(l, `"level":"DEBUG"`) {
				lines = append(lines, l)
			}
		}
		t.Logf("%s, %s MiB/s: an OOM kill; evictiond's log since the episode's start (last %d of %d lines):\n%s",
			setup.name, rate.label, min(len(lines), 40), len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}

	grace := int64(0)
	_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
	return res
}

// waitHogDone waits until the hog pod is gone (evicted through the API) or finished
// (OOM-killed, or evicted by the kubelet), and returns its last seen state.
func waitHogDone(t *testing.T, c *cluster.Cluster, ns, container string, timeout time.Duration) *corev1.Pod {
	last, ok := waitHogEnd(c, ns, container, timeout)
	if !ok {
		t.Fatalf("hog in %s neither evicted nor killed after %s: %s", ns, timeout, describeStatus(last))
	}
	return last
}

// waitHogEnd is waitHogDone that reports a timeout instead of failing.
func waitHogEnd(c *cluster.Cluster, ns, container string, timeout time.Duration) (*corev1.Pod, bool) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, "hog", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		last = pod
		return podFinished(pod) || pod.DeletionTimestamp != nil && terminatedState(pod, container) != nil, nil
	})
	return last, err == nil
}

// sampler reads kubepods memory every 2 ms and notes when allocatableMemory.available first
// fell below the threshold.
type sampler struct {
	done    chan struct{}
	result  chan samplerResult
	thresh  int64
	started time.Time
}

type samplerResult struct {
	crossing, rampStart time.Time
	crossingWS, startWS int64
	peak                int64
	// released is when, after the crossing, the working set fell back below the ramp's
	// start plus a quarter of its growth: the hog's memory released.
	released time.Time
	// grew is the last sample, from the crossing to the release, at which the working set
	// rose at least 1 MiB above every earlier one (the crossing's own sample when none
	// after it did): when the growth stopped, to the sampler's 2 ms.
	grew time.Time
}

func startSampler(threshold int64) *sampler {
	s := &sampler{done: make(chan struct{}), result: make(chan samplerResult, 1), thresh: threshold, started: time.Now()}
	go func() {
		var r samplerResult
		var base int64 = -1
		ticker := time.NewTicker(2 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-s.done:
				s.result <- r
				return
			case <-ticker.C:
			}
			m, err := cluster.ReadPodsMemory()
			if err != nil {
				continue
			}
			if base < 0 {
				base = m.WorkingSet
			}
			// The ramp starts when the working set has grown 32 MiB above the baseline.
			if r.rampStart.IsZero() && m.WorkingSet > base+32<<20 {
				r.rampStart, r.startWS = m.At, m.WorkingSet
			}
			if r.crossing.IsZero() && m.Available() < s.thresh {
				r.crossing, r.crossingWS = m.At, m.WorkingSet
				r.grew = m.At // no new peak after this sample: stopped within one sample
			}
			if !r.crossing.IsZero() && r.released.IsZero() && m.WorkingSet >= r.peak+1<<20 {
				r.grew = m.At
			}
			r.peak = max(r.peak, m.WorkingSet)
			if !r.crossing.IsZero() && r.released.IsZero() && m.WorkingSet < r.startWS+(r.peak-r.startWS)/4 {
				r.released = m.At
			}
		}
	}()
	return s
}

func (s *sampler) stop() samplerResult {
	close(s.done)
	return <-s.result
}

// klogHeader matches a klog line's header: severity, MMDD, time.
var klogHeader = regexp.MustCompile(`^[IWE](\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6})`)

// kubeletEvictionTime finds the kubelet's first "must evict" decision after since.
func kubeletEvictionTime(t *testing.T, logPath string, since time.Time) (time.Time, bool) {
	var found time.Time
	forEachLine(t, logPath, func(line string) bool {
		if !strings.Contains(line, "must evict pod(s) to reclaim") {
			return true
		}
		m := klogHeader.FindStringSubmatch(line)
		if m == nil {
			return true
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s %s", since.Year(), m[1], m[2]), time.Local)
		if err != nil || !at.After(since) {
			return true
		}
		found = at
		return false
	})
	return found, !found.IsZero()
}

// auditEvictionTime finds the first eviction request for a pod in namespace after since,
// from the API server's audit log.
func auditEvictionTime(t *testing.T, auditPath, namespace string, since time.Time) (time.Time, bool) {
	for _, r := range auditedPodWrites(t, auditPath, namespace) {
		if r.Subresource == "eviction" && r.At.After(since) {
			return r.At, true
		}
	}
	return time.Time{}, false
}

// brakeFreeze is what evictiond's "brake: pod frozen" log line says of one freeze: when the
// fast poll read the crossing, when the pass started, when it assessed (evictiond's own
// crossing), when the freeze was written and when the kernel reported the pod frozen.
type brakeFreeze struct {
	pollCrossing, passStart, assessed, freezeStart, frozenAt time.Time
	passSteps, passWaits                                     string
}

// brakeFrozen finds evictiond's "brake: pod frozen" log line for the hog of namespace after
// since, and returns its times (freezeStart always; the others when logged). A "brake: pod
// freezing, not yet frozen" line (a task of the hog still in the kernel when the brake went
// ahead) has no frozenAt.
func brakeFrozen(t *testing.T, c *cluster.Cluster, namespace string, since time.Time) (brakeFreeze, bool) {
	for _, line := range evictiondLogLines(t, c, "brake: pod fr", since) {
		// A CRI log line: timestamp, stream, tag, then evictiond's JSON record.
		i := strings.IndexByte(line, '{')
		if i < 0 {
			continue
		}
		var rec struct {
			Pod          string
			FrozenAt     time.Time
			PollCrossing time.Time
			PassStart    time.Time
			Crossing     time.Time
			FreezeTook   time.Duration // slog's JSON: nanoseconds
			// FreezeWrittenAt: a freeze the kernel had not confirmed (no FrozenAt).
			FreezeWrittenAt time.Time
			PassSteps       string
			PassWaits       string
		}
		if json.Unmarshal([]byte(line[i:]), &rec) != nil || rec.Pod != namespace+"/hog" {
			continue
		}
		f := brakeFreeze{pollCrossing: rec.PollCrossing, passStart: rec.PassStart, assessed: rec.Crossing,
			freezeStart: rec.FreezeWrittenAt, frozenAt: rec.FrozenAt, passSteps: rec.PassSteps, passWaits: rec.PassWaits}
		switch {
		case !rec.FrozenAt.IsZero():
			f.freezeStart = rec.FrozenAt.Add(-rec.FreezeTook)
		case rec.FreezeWrittenAt.IsZero():
			continue
		}
		return f, true
	}
	return brakeFreeze{}, false
}

// split is the freeze's times as offsets from the bench's crossing, in freezeSplitNames' order
// (notActed where it was not logged).
func (f brakeFreeze) split(crossing time.Time) []time.Duration {
	return []time.Duration{offset(f.pollCrossing, crossing), offset(f.passStart, crossing), offset(f.assessed, crossing),
		offset(f.freezeStart, crossing), offset(f.frozenAt, crossing)}
}

var freezeSplitNames = []string{"poll", "pass", "assessed", "freeze", "frozen"}

func offset(at, from time.Time) time.Duration {
	if at.IsZero() {
		return notActed
	}
	return at.Sub(from)
}

// formatFreezeSplit is the median of each of the freeze's times over the runs that logged it.
func formatFreezeSplit(splits [][]time.Duration) string {
	var parts []string
	for i, name := range freezeSplitNames {
		var ds []time.Duration
		for _, s := range splits {
			if len(s) > i && s[i] != notActed {
				ds = append(ds, s[i])
			}
		}
		if len(ds) == 0 {
			continue
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		parts = append(parts, fmt.Sprintf("%s %s", name, ds[len(ds)/2].Round(100*time.Microsecond)))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

func fmtLatency(d time.Duration) string {
	if d == notActed {
		return "did not act"
	}
	return d.Round(time.Millisecond).String()
}

// formatRampReport is one row per setup and rate: the runs' outcomes, and the median and
// worst of each latency.
func formatRampReport(results []rampResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| setup | rate MiB/s (achieved, median) | runs: who ended the hog | kubelet: crossing → decision | evictiond: crossing → request | crossing → freeze written | crossing → frozen | crossing → frozen, split (medians from the crossing) | crossing → growth stopped | crossing → memory released | %s | OOM kills | peak working set MiB (worst) | evictiond CPU-throttled periods (runs) | evictiond run-queue wait (runs) |\n", bystanderColumns)
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	type key struct{ setup, rate string }
	var order []key
	groups := map[key][]rampResult{}
	for _, r := range results {
		k := key{r.setup, r.rate.label}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		rs := groups[k]
		var achieved []float64
		var killed, throttled, waited []string
		var bystanders []bystanderEvictions
		var splits [][]time.Duration
		var ooms int64
		var peak int64
		for _, r := range rs {
			achieved = append(achieved, r.achievedMiBps)
			killed = append(killed, r.killedBy)
			throttled = append(throttled, fmt.Sprintf("%d (%s)", r.throttled.Throttled, r.throttled.ThrottledTime.Round(time.Millisecond)))
			waited = append(waited, fmtWait(r.runQueueWait))
			bystanders = append(bystanders, r.bystanders)
			splits = append(splits, r.freezeSplit)
			ooms += r.oomKills
			peak = max(peak, r.peakWorkingSet)
		}
		sort.Float64s(achieved)
		lat := func(f func(rampResult) time.Duration) string {
			return latencySummary(rs, f, func(d time.Duration) bool { return d != notActed })
		}
		fmt.Fprintf(&b, "| %s | %s (%.0f) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s | %s |\n", k.setup, k.rate, achieved[len(achieved)/2],
			strings.Join(killed, "; "),
			lat(func(r rampResult) time.Duration { return r.kubeletLatency }),
			lat(func(r rampResult) time.Duration { return r.evictiondLatency }),
			lat(func(r rampResult) time.Duration {
				if len(r.freezeSplit) > 3 {
					return r.freezeSplit[3] // the freeze's write (freezeSplitNames)
				}
				return notActed
			}),
			lat(func(r rampResult) time.Duration { return r.frozenLatency }),
			formatFreezeSplit(splits),
			lat(func(r rampResult) time.Duration { return r.stoppedLatency }),
			lat(func(r rampResult) time.Duration { return r.releasedLatency }),
			bystanderCells(bystanders), ooms, peak>>20, strings.Join(throttled, ", "), strings.Join(waited, ", "))
	}
	b.WriteString("\nLatencies: median / worst over the runs; — : never.\n")
	return b.String()
}

// startThrottleWatch notes evictiond's CFS throttling now; the returned function gives what
// was added since. Without evictiond (uid "") or its cgroup, zero.
// startRunQueueWatch measures how long evictiond's threads waited for a CPU (runnable, not
// running) until the returned function is called; -1 when unknown. Under the max rate two hogs
// with a 1-CPU request each outweigh evictiond's 100m (cpu.shares 1024 vs 102) on two cores.
func startRunQueueWatch(uid string) func() time.Duration {
	unknown := func() time.Duration { return -1 }
	if uid == "" {
		return unknown
	}
	before, err := cluster.PodRunQueueWait(uid)
	if err != nil {
		return unknown
	}
	return func() time.Duration {
		after, err := cluster.PodRunQueueWait(uid)
		if err != nil {
			return -1
		}
		return after - before
	}
}

func startThrottleWatch(uid string) func() cluster.CPUThrottling {
	if uid == "" {
		return func() cluster.CPUThrottling { return cluster.CPUThrottling{} }
	}
	before, err := cluster.PodCPUThrottling(uid)
	return func() cluster.CPUThrottling {
		after, err2 := cluster.PodCPUThrottling(uid)
		if err != nil || err2 != nil {
			return cluster.CPUThrottling{}
		}
		return cluster.CPUThrottling{Periods: after.Periods - before.Periods, Throttled: after.Throttled - before.Throttled,
			ThrottledTime: after.ThrottledTime - before.ThrottledTime}
	}
}

func fmtWait(d time.Duration) string {
	if d < 0 {
		return "?"
	}
	return d.Round(time.Millisecond).String()
}
