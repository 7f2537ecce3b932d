//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// TestEvictiond boots a cluster, deploys evictiond from deploy/ through the e2e overlay, and
// runs the scenarios against it. Each scenario passes alone (-run '^TestEvictiond$/^PDB$')
// and after any other: E2E_SHUFFLE=<seed> runs them in an order drawn from the seed (the
// order is logged), so an order dependency shows up as a failure with a seed to replay it.
func TestEvictiond(t *testing.T) {
	// The audit log is how the scenarios see which requests reached the API server.
	c, _ := clusterWithEvictiond(t, cluster.Options{AuditLog: true}, cluster.DeployOptions{ExtraArgs: traceArgs})
	createNamespace(t, c.Client, unevictableNamespace)

	runScenarios(t, c, []scenario{
		{"EvictionsHeldToTheAgentsNode", testEvictionsHeldToTheAgentsNode},
		{"HostWritesRefused", testHostWritesRefused},
		{"MemoryHogEvictedBeforeOOMKill", testMemoryHogEvictedBeforeOOMKill},
		{"PrometheusSeesTheEviction", testPrometheusSeesTheEviction},
		{"PDB", testPDB},
		{"PIDPressure", testPIDPressure},
		{"NodeStatusUnderPressure", testNodeStatusUnderPressure},
		{"HotReload", testHotReload},
		// It garbage-collects the unused images; the scenarios after it in a shuffled
		// order get them back from EnsureWorkloadImages.
		{"DiskPressure", testDiskPressure},
	})
}

// scenario is one subtest of a test that shares a cluster between scenarios.
type scenario struct {
	name string
	run  func(*testing.T, *cluster.Cluster)
}

// runScenarios runs each scenario as a subtest on c, in the order given, or in the order
// E2E_SHUFFLE's seed draws. Each starts with the workload images present.
func runScenarios(t *testing.T, c *cluster.Cluster, scenarios []scenario) {
	t.Helper()
	if seed := os.Getenv("E2E_SHUFFLE"); seed != "" {
		n, err := strconv.ParseInt(seed, 10, 64)
		if err != nil {
			t.Fatalf("E2E_SHUFFLE=%q: want an integer seed", seed)
		}
		rand.New(rand.NewPCG(uint64(n), 0)).Shuffle(len(scenarios), func(i, j int) {
			scenarios[i], scenarios[j] = scenarios[j], scenarios[i]
		})
		var names []string
		for _, s := range scenarios {
			names = append(names, s.name)
		}
		t.Logf("E2E_SHUFFLE=%d: scenario order %s", n, strings.Join(names, ", "))
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.EnsureWorkloadImages(ctx); err != nil {
				t.Fatalf("importing the workload images again: %v", err)
			}
			s.run(t, c)
		})
	}
}

// testMemoryHogEvictedBeforeOOMKill is scenario 1: a Burstable pod ramping memory far beyond
// its request inside kubepods' real limit is evicted by evictiond through the Eviction API
// before the kernel OOM-kills anything and before the kubelet's backstop acts; a Guaranteed
// pod and a Burstable pod within its request keep running; exactly one pod is evicted.
func testMemoryHogEvictedBeforeOOMKill(t *testing.T, c *cluster.Cluster) {
	replayAfter(t, c, "evictiond")
	// 200 MiB/s reaches evictiond's threshold (500Mi below the 3 GiB limit) in about 13 s,
	// and the limit itself 2.5 s later: evictiond has those 2.5 s.
	e := &memoryEpisode{Namespace: "e2e-memory", HogRateMiB: 200}
	e.run(t, c, nil)
	if term := terminatedState(e.HogLast, "memhog"); term != nil && term.Reason == "OOMKilled" {
		t.Errorf("hog was OOM-killed, not evicted: %s", describeStatus(e.HogLast))
	}
	if e.OOMKills != 0 {
		t.Errorf("the kernel OOM-killed %d process(es) during the episode, want 0", e.OOMKills)
	}
	if len(e.Evicted) != 1 {
		t.Fatalf("Evicted events in %s: %d, want exactly 1: %s", e.Namespace, len(e.Evicted), describeEvents(e.Evicted))
	}
	ev := e.Evicted[0]
	if ev.InvolvedObject.Name != "hog" || ev.Source.Component != "evictiond" {
		t.Errorf("Evicted event for %s from %q, want for hog from evictiond: %s", ev.InvolvedObject.Name, ev.Source.Component, ev.Message)
	}
	if !strings.Contains(ev.Message, "memory") {
		t.Errorf("Evicted event message %q does not name the starved resource", ev.Message)
	}
	t.Logf("hog evicted after %s, lowest kubepods available %d MiB: %s", e.HogLifetime.Round(time.Millisecond), e.MinAvailable>>20, ev.Message)
	for _, got := range e.Bystanders {
		if !podReady(got) || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("bystander %s hurt: %s", got.Name, describeStatus(got))
		}
	}
}

// waitPodGone polls until the pod with uid no longer exists (evicted pods are deleted) and
// returns its last seen state.
func waitPodGone(t *testing.T, c *cluster.Cluster, namespace, name string, uid types.UID, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		if pod.UID != uid {
			return true, nil
		}
		last = pod
		return podFinished(pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s still there after %s: %s\n--- evictiond ---\n%s", namespace, name, timeout, describeStatus(last), c.EvictiondLogTail(30))
	}
	return last
}

// evictionEvents lists the Evicted events in a namespace, whoever recorded them.
func evictionEvents(t *testing.T, c *cluster.Cluster, namespace string) []corev1.Event {
	t.Helper()
	var events []corev1.Event
	// Events are written asynchronously by the recorder: give it a moment.
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("reason", "Evicted").String(),
		})
		if err != nil {
			return false, nil
		}
		events = list.Items
		return len(events) > 0, nil
	})
	return events
}

// machineOOMKills reads the kernel's count of OOM kills on the machine.
func machineOOMKills(t *testing.T) int64 {
	t.Helper()
	m, err := cluster.ReadPodsMemory()
	if err != nil {
		t.Fatal(err)
	}
	return m.OOMKills
}

// testPrometheusSeesTheEviction is scenario 7: Prometheus discovers evictiond's pod
// through Kubernetes service discovery and its prometheus.io annotations, scrapes it, and a
// PromQL query sees scenario 1's eviction.
func testPrometheusSeesTheEviction(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	// Run alone (-run), the node has had no eviction yet: scenario 1 makes the one counted.
	if !memoryEvictionCounted(t, c) {
		t.Log("no memory eviction counted yet (run alone): scenario 1 first")
		testMemoryHogEvictedBeforeOOMKill(t, c)
	}
	// Started after scenario 1: evictions_total is a counter, so the first scrape has it.
	prom := c.StartPrometheus(t)
	pod, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queries := []struct{ promql, what string }{
		{fmt.Sprintf(`up{job="kubernetes-pods",namespace=%q,pod=%q} == 1`, cluster.EvictiondNamespace, pod.Name), "evictiond's pod discovered and scraped"},
		{`sum(evictiond_evictions_total{signal="allocatableMemory.available",result="evicted"}) >= 1`, "scenario 1's eviction counted"},
	}
	for _, q := range queries {
		var last []cluster.Sample
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last, lastErr = prom.Query(ctx, q.promql)
			return lastErr == nil && len(last) > 0, nil
		})
		if err != nil {
			t.Errorf("PromQL %s (%s): no result after 30s (last: %v, %v)\n--- prometheus ---\n%s", q.promql, q.what, last, lastErr, prom.LogTail(15))
			continue
		}
		t.Logf("PromQL %s -> %v (%s)", q.promql, last[0].Value, q.what)
	}
}

// memoryEvictionCounted says whether the agent's own /metrics counts an eviction for
// allocatableMemory.available.
func memoryEvictionCounted(t *testing.T, c *cluster.Cluster) bool {
	t.Helper()
	lines, err := evictiondMetrics(c, "evictiond_evictions_total{")
	if err != nil {
		t.Fatalf("scraping evictiond: %v", err)
	}
	for _, l := range lines {
		if strings.Contains(l, `signal="allocatableMemory.available"`) && strings.Contains(l, `result="evicted"`) && !strings.HasSuffix(l, " 0") {
			return true
		}
	}
	return false
}
