//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// brakeConfig is evictiond's configuration for the brake scenarios: a hard
// allocatableMemory.available threshold 500Mi below the 3 GiB kubepods limit, the kernel
// fast path on, the brake at its defaults (2 s initial eviction path, safety factor 1.5: it
// fires when the limit is less than 3 s away).
const brakeConfig = `apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  memory.available: 100Mi
  allocatableMemory.available: 500Mi
evictionPressureTransitionPeriod: 30s
loop: {interval: 1s, podCleanupTimeout: 30s}
notifier: {memcgThresholds: true, psi: {enabled: true}, pollInterval: 100ms}
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
brake: {enabled: true}
`

// TestBrake boots a cluster with evictiond's brake configured and plays a slow ramp (the
// graceful path, nothing frozen) and the fastest ramp this machine produces (frozen
// milliseconds after the crossing, killed once the eviction is accepted, no OOM kill,
// bystanders untouched, the pod's cgroups gone from kubepods).
func TestBrake(t *testing.T) {
	c, _ := clusterWithEvictiond(t, cluster.Options{AuditLog: true}, cluster.DeployOptions{Config: brakeConfig, ExtraArgs: traceArgs})
	// First: the measured eviction path then still is the initial 2 s.
	t.Run("SlowRampKeepsTheGracefulPath", func(t *testing.T) { testSlowRampKeepsTheGracefulPath(t, c) })
	t.Run("FastRampFrozenAndKilled", func(t *testing.T) { testFastRampFrozenAndKilled(t, c) })
}

// brakeEpisode is a hog ramping in a namespace with a Guaranteed and a Burstable bystander
// and, optionally, a filler that takes most of kubepods quickly within its own request (so
// a slow ramp reaches the threshold in seconds, not minutes).
type brakeEpisode struct {
	Namespace string
	HogArgs   []string
	// Hogs is how many hog containers run in the hog pod (default 1); two keep the ramp
	// fast when one is descheduled for tens of milliseconds on this 2-CPU machine.
	Hogs      int
	FillerMiB int
	// Await lists the Event reasons on the hog that run waits for once it is gone
	// (default: Evicted). Events are written asynchronously, each when its step is done:
	// a Braked event after the kill, which can reach the API server after the pod is gone.
	Await []string
	// Filled in by run:
	HogUID     string
	HogLast    *corev1.Pod
	Bystanders []*corev1.Pod
	OOMKills   int64
	Events     []corev1.Event // every Event on the hog
	LogSince   time.Time
}

func (e *brakeEpisode) run(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	ns := e.Namespace
	createNamespace(t, c.Client, ns)
	bystanders := []*corev1.Pod{
		podOnNode(ns, "guaranteed", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "32Mi"), resources("cpu", "10m", "memory", "32Mi"))),
		podOnNode(ns, "burstable-within-request", workloadContainer("memhog", []string{"-rate-mib=50", "-target-mib=50"}, resources("memory", "128Mi"), nil)),
	}
	if e.FillerMiB > 0 {
		req := fmt.Sprintf("%dMi", e.FillerMiB+100)
		bystanders = append(bystanders, podOnNode(ns, "filler", workloadContainer("memhog",
			[]string{"-rate-mib=1000", fmt.Sprintf("-target-mib=%d", e.FillerMiB)}, resources("memory", req), nil)))
	}
	for _, p := range bystanders {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	for _, p := range bystanders {
		waitPod(t, c, ns, p.Name, 2*time.Minute, "Ready", podReady)
	}
	if e.FillerMiB > 0 {
		// The filler holds its memory before the hog starts.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			m, err := cluster.ReadPodsMemory()
			return err == nil && m.WorkingSet > int64(e.FillerMiB)<<20, nil
		})
		if err != nil {
			t.Fatalf("the filler did not reach %d MiB", e.FillerMiB)
		}
	}
	if e.FillerMiB == 0 {
		// The previous episode's pods (a 2 GiB filler) are deleted when it ends and leave
		// kubepods over the next seconds: the ramp starts once they are gone, not with
		// memory coming back under it.
		waitPodsMemoryCalm(t, 2500<<20, 2*time.Minute)
	}
	oomBefore := machineOOMKills(t)
	e.LogSince = time.Now()
	hogs := []corev1.Container{workloadContainer("memhog", e.HogArgs, resources("cpu", "1", "memory", "64Mi"), nil)}
	for i := 2; i <= e.Hogs; i++ {
		h := workloadContainer("memhog", e.HogArgs, resources("memory", "64Mi"), nil)
		h.Name = fmt.Sprintf("memhog-%d", i)
		hogs = append(hogs, h)
	}
	hog := podOnNode(ns, "hog", hogs...)
	created, err := c.Client.CoreV1().Pods(ns).Create(ctx, hog, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod hog: %v", err)
	}
	e.HogUID = string(created.UID)
	e.HogLast = waitPodGone(t, c, ns, "hog", created.UID, 3*time.Minute)
	e.OOMKills = machineOOMKills(t) - oomBefore
	for _, p := range bystanders {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("bystander %s: %v", p.Name, err)
		}
		e.Bystanders = append(e.Bystanders, got)
	}
	// Events are written asynchronously: wait for the awaited ones (the checks after say
	// what is missing).
	await := e.Await
	if len(await) == 0 {
		await = []string{"Evicted"}
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "hog").String()})
		if err != nil {
			return false, nil
		}
		e.Events = list.Items
		for _, reason := range await {
			if len(eventsWithReason(e.Events, reason)) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

func eventsWithReason(events []corev1.Event, reason string) []corev1.Event {
	var out []corev1.Event
	for _, ev := range events {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// evictiondLogLines returns evictiond's log lines containing what, written after since.
func evictiondLogLines(t *testing.T, c *cluster.Cluster, what string, since time.Time) []string {
	t.Helper()
	path, err := c.EvictiondLogPath(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		// CRI log lines start with an RFC 3339 timestamp.
		ts, _, ok := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil || at.Before(since) {
			continue
		}
		if strings.Contains(line, what) {
			out = append(out, line)
		}
	}
	return out
}

func (e *brakeEpisode) checkBystanders(t *testing.T) {
	t.Helper()
	for _, got := range e.Bystanders {
		if !podReady(got) || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("bystander %s hurt: %s", got.Name, describeStatus(got))
		}
	}
	if e.OOMKills != 0 {
		t.Errorf("the kernel OOM-killed %d process(es) during the episode, want 0", e.OOMKills)
	}
	evicted := eventsWithReason(e.Events, "Evicted")
	if len(evicted) != 1 || evicted[0].Source.Component != "evictiond" {
		t.Errorf("Evicted events on the hog: %s; want one from evictiond", describeEvents(evicted))
	}
}

// testSlowRampKeepsTheGracefulPath: a hog growing 40 MiB/s crosses the threshold with
// 12.5 s left before the kubepods limit, far more than 1.5 × the eviction path: evictiond
// evicts it through the Eviction API and the kubelet stops it with its grace; nothing is
// frozen or killed by evictiond.
func testSlowRampKeepsTheGracefulPath(t *testing.T, c *cluster.Cluster) {
	e := &brakeEpisode{Namespace: "e2e-brake-slow", HogArgs: []string{"-rate-mib=40"}, FillerMiB: 2000}
	e.run(t, c)
	e.checkBystanders(t)
	if braked := eventsWithReason(e.Events, "Braked"); len(braked) != 0 {
		t.Errorf("the brake fired on a 40 MiB/s ramp: %s", describeEvents(braked))
	}
	if frozen := evictiondLogLines(t, c, "brake: pod frozen", e.LogSince); len(frozen) != 0 {
		t.Errorf("evictiond froze a pod on a 40 MiB/s ramp:\n%s", strings.Join(frozen, "\n"))
	}
	graceful := evictiondLogLines(t, c, "brake not needed", e.LogSince)
	if len(graceful) == 0 {
		t.Fatalf("evictiond logged no brake decision for the hog's eviction")
	}
	t.Logf("evictiond: %s", graceful[0])
}

// testFastRampFrozenAndKilled: a hog allocating as fast as it can (two containers) that
// ignores SIGTERM, so the graceful path cannot free its memory before the kubelet's 2 s
// minimum grace: evictiond freezes it milliseconds after the crossing (or, if the ramp was
// measured slow there, while it watches the graceful eviction), requests the eviction, kills
// it on the node once accepted; the kernel OOM-kills nothing, the bystanders run on, and the
// kubelet's stop of a pod whose tasks were frozen completes: no cgroup of the hog stays in
// kubepods. (A hog that stopped at SIGTERM was measured at 550-800 MiB/s at the crossing in
// 8 of 14 runs; against a measured eviction path of 0.4-1.2 s the graceful path could then
// be enough, and the scenario tested nothing of the brake.)
func testFastRampFrozenAndKilled(t *testing.T, c *cluster.Cluster) {
	replayAfter(t, c, "brake")
	e := &brakeEpisode{Namespace: "e2e-brake-fast", HogArgs: []string{"-rate-mib=4000", "-ignore-sigterm"}, Hogs: 2,
		Await: []string{"Evicted", "Braked"}}
	e.run(t, c)
	e.checkBystanders(t)
	braked := eventsWithReason(e.Events, "Braked")
	if len(braked) != 1 || !strings.Contains(braked[0].Message, "killed after the eviction was accepted") {
		t.Fatalf("Braked events on the hog: %s; want one saying it was frozen and killed after the eviction was accepted", describeEvents(braked))
	}
	t.Logf("Braked: %s", braked[0].Message)
	for _, line := range evictiondLogLines(t, c, "brake: pod", e.LogSince) {
		t.Logf("evictiond: %s", line)
	}
	if term := terminatedState(e.HogLast, "memhog"); term != nil && term.Reason == "OOMKilled" {
		t.Errorf("hog was OOM-killed: %s", describeStatus(e.HogLast))
	}
	// The kubelet tears the pod's cgroups down once its containers are gone; a stop hung
	// on frozen tasks would leave them (and the pod object) behind.
	for _, ctl := range []string{"memory", "freezer"} {
		dir := filepath.Join("/sys/fs/cgroup", ctl, "kubepods", "burstable", "pod"+e.HogUID)
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, err := os.Stat(dir)
			return os.IsNotExist(err), nil
		})
		if err != nil {
			tasks, _ := os.ReadFile(filepath.Join(dir, "tasks"))
			state, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
			t.Errorf("the hog's cgroup %s still exists 30s after the pod was gone (tasks %q, freezer.state %q)", dir, tasks, state)
		}
	}
	metrics, err := evictiondMetrics(c, "evictiond_brake_total", "evictiond_brake_crossing_to_frozen_seconds_sum", "evictiond_brake_crossing_to_frozen_seconds_count")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("metrics:\n%s", strings.Join(metrics, "\n"))
	if !containsLine(metrics, `evictiond_brake_total{result="killed",signal="allocatableMemory.available"} 1`) {
		t.Errorf("evictiond_brake_total has no killed allocatableMemory.available count of 1: %v", metrics)
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
