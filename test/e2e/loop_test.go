//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// loopEvictiondConfig is evictiond's configuration for the eviction loop scenario and
// bench: the e2e node's memory thresholds, the given pressure transition period and the
// given evictionLoops section.
func loopEvictiondConfig(transition time.Duration, loops string) string {
	return `apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  memory.available: 100Mi
  allocatableMemory.available: 500Mi
evictionPressureTransitionPeriod: ` + transition.String() + `
loop: {interval: 1s, podCleanupTimeout: 30s}
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
evictionLoops: ` + loops + "\n"
}

// The loop scenario's compressed schedule: two evictions in 5 minutes are a loop, the
// backoff starts at 20 s and doubles to 80 s, the transition period is 10 s, so that every
// hold of the taint is told apart from the transition period alone and the scenario sees
// the backoff grow in about two minutes.
const (
	loopTransition     = 10 * time.Second
	loopInitialBackoff = 20 * time.Second
	loopMaxBackoff     = 80 * time.Second
)

var loopConfig = loopEvictiondConfig(loopTransition, fmt.Sprintf("{count: 2, window: 5m, initialBackoff: %s, maxBackoff: %s}", loopInitialBackoff, loopMaxBackoff))

// leakName is the leaking Deployment of the loop scenario and bench.
const leakName = "leak"

// leakRun is a Deployment of one leaking pod on the e2e node beside two bystanders (a
// Guaranteed pod and a Burstable pod within its request), with a watch on the Node.
type leakRun struct {
	ns         string
	start      time.Time
	deploy     *appsv1.Deployment
	bystanders []*corev1.Pod
	node       *nodeRecorder
}

// startLeak creates the namespace, the bystanders (Ready), the node watch, then the
// Deployment whose one pod runs memhog with args. Its pods go through the scheduler, so a
// NoSchedule taint keeps a replacement off the node.
func startLeak(t *testing.T, c *cluster.Cluster, ns string, args []string) *leakRun {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, c.Client, ns)
	r := &leakRun{ns: ns, bystanders: startBystanders(t, c, ns), node: recordNode(t, c.Client, cluster.NodeName)}
	one, grace := int32(1), int64(1)
	labels := map[string]string{"app": leakName}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leakName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{workloadContainer("memhog", args, resources("memory", "64Mi"), nil)}},
			},
		},
	}
	r.start = time.Now()
	created, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating deployment %s: %v", leakName, err)
	}
	r.deploy = created
	return r
}

// leakEviction is one pod evicted in the run's namespace, by actor (the Evicted Event's
// component: kubelet or evictiond), first Event only.
type leakEviction struct {
	pod, actor string
	at         time.Time
}

// evictions lists the run's evicted pods in order, each once.
func (r *leakRun) evictions(t *testing.T, c *cluster.Cluster) (leak, bystanders []leakEviction) {
	t.Helper()
	list, err := c.Client.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "Evicted").String()})
	if err != nil {
		t.Fatalf("listing Evicted events in %s: %v", r.ns, err)
	}
	seen := map[string]bool{}
	var all []leakEviction
	for _, e := range list.Items {
		if seen[e.InvolvedObject.Name] {
			continue
		}
		seen[e.InvolvedObject.Name] = true
		all = append(all, leakEviction{pod: e.InvolvedObject.Name, actor: e.Source.Component, at: e.FirstTimestamp.Time})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	for _, e := range all {
		if strings.HasPrefix(e.pod, leakName+"-") {
			leak = append(leak, e)
		} else {
			bystanders = append(bystanders, e)
		}
	}
	return leak, bystanders
}

// waitLeakEvictions waits until the leak's pods were evicted n times and returns them.
func (r *leakRun) waitLeakEvictions(t *testing.T, c *cluster.Cluster, n int, timeout time.Duration) []leakEviction {
	t.Helper()
	var leak []leakEviction
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(context.Context) (bool, error) {
		leak, _ = r.evictions(t, c)
		return len(leak) >= n, nil
	})
	if err != nil {
		t.Fatalf("%d evictions of %s after %s, want %d: %v\n--- evictiond ---\n%s", len(leak), leakName, time.Since(r.start).Round(time.Second), n, leak, c.EvictiondLogTail(30))
	}
	return leak
}

// loopEvents are the EvictionLoop Events on the Deployment, selected as `kubectl describe
// deployment` selects them (involvedObject kind, name, namespace and uid).
func (r *leakRun) loopEvents(t *testing.T, c *cluster.Cluster) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Deployment", "involvedObject.name": leakName, "involvedObject.namespace": r.ns,
		"involvedObject.uid": string(r.deploy.UID), "reason": "EvictionLoop"}.AsSelector().String()
	list, err := c.Client.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("listing EvictionLoop events on deployment %s/%s: %v", r.ns, leakName, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].FirstTimestamp.Before(&list.Items[j].FirstTimestamp) })
	return list.Items
}

// memoryTainted reports whether the node carries a memory-pressure NoSchedule taint:
// evictiond's, or the standard one the node lifecycle controller derives from the kubelet's
// MemoryPressure condition.
func memoryTainted(n *corev1.Node) bool {
	return nodeHasTaint(n, kube.TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule) ||
		nodeHasTaint(n, corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
}

// taintIntervals are the stretches the node was memory-tainted since the run started,
// open ones closed at now.
func (r *leakRun) taintIntervals(t *testing.T) []interval {
	t.Helper()
	versions, err := r.node.snapshot()
	if err != nil {
		t.Fatalf("node watch: %v", err)
	}
	ivs := intervals(versions, memoryTainted)
	now := time.Now()
	for i := range ivs {
		if ivs[i].to.IsZero() {
			ivs[i].to = now
		}
	}
	return ivs
}

func tainted(ivs []interval) time.Duration {
	var sum time.Duration
	for _, iv := range ivs {
		sum += iv.to.Sub(iv.from)
	}
	return sum
}

// taintedAcross reports whether one interval covers [from, to].
func taintedAcross(ivs []interval, from, to time.Time) bool {
	for _, iv := range ivs {
		if !iv.from.After(from) && !iv.to.Before(to) {
			return true
		}
	}
	return false
}

// TestEvictionLoop boots a cluster with evictiond and a compressed loop schedule and runs a
// Deployment of one pod leaking 200 MiB/s (past the threshold in about 12 s): its second
// eviction makes a loop, the backoff holds evictiond's taint 20 s, then 40 s, then 80 s
// (loopConfig); evictiond is restarted (its pod deleted) right after the third eviction, and
// the 40 s backoff and the count survive it. The EvictionLoop Events land on the Deployment (as
// `kubectl describe deployment` finds them), no bystander is evicted, nothing is OOM-killed.
func TestEvictionLoop(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if _, err := c.DeployEvictiond(ctx, cluster.DeployOptions{Config: loopConfig}); err != nil {
		t.Fatalf("deploying evictiond: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of evictiond ---\n%s", c.EvictiondLogTail(60))
		}
	})
	oomBefore := machineOOMKills(t)
	r := startLeak(t, c, "e2e-loop", []string{"-rate-mib=200"})

	leak := r.waitLeakEvictions(t, c, 3, 4*time.Minute)
	e3 := leak[2].at
	before, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restartAt := time.Now()
	if err := c.Client.CoreV1().Pods(cluster.EvictiondNamespace).Delete(ctx, before.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the evictiond pod: %v", err)
	}
	after, err := c.WaitEvictiondReady(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if after.UID == before.UID {
		t.Fatalf("evictiond pod %s not replaced", before.Name)
	}
	t.Logf("third eviction at +%s; evictiond restarted at +%s (pod %s -> %s, Ready at +%s)", e3.Sub(r.start).Round(time.Second),
		restartAt.Sub(r.start).Round(time.Second), before.Name, after.Name, time.Since(r.start).Round(time.Second))

	leak = r.waitLeakEvictions(t, c, 4, 4*time.Minute)
	e4 := leak[3].at
	if err := c.Client.AppsV1().Deployments(r.ns).Delete(ctx, leakName, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting deployment %s: %v", leakName, err)
	}
	for i, e := range leak {
		t.Logf("eviction %d: %s by %s at +%s", i+1, e.pod, e.actor, e.at.Sub(r.start).Round(time.Second))
		if e.actor != kube.EventComponent {
			t.Errorf("eviction %d of %s by %q, want evictiond", i+1, e.pod, e.actor)
		}
	}

	// The third eviction's backoff (the second step, 40 s) outlives the restart: the taint
	// stays from the eviction to its end, where the transition period alone would have
	// released it, and the fourth eviction comes only after it.
	ivs := r.taintIntervals(t)
	const slack = 5 * time.Second // Event timestamps have second resolution
	third := 2 * loopInitialBackoff
	if !taintedAcross(ivs, e3.Add(slack), e3.Add(third-slack)) {
		t.Errorf("node not tainted throughout the third eviction's %s backoff across the restart: taints %v, eviction at %v", third, ivs, e3)
	}
	if gap := e4.Sub(e3); gap < third {
		t.Errorf("fourth eviction %s after the third, want at least the %s backoff", gap, third)
	}
	t.Logf("node memory-tainted %s in %s (%d intervals)", tainted(ivs).Round(time.Second), time.Since(r.start).Round(time.Second), len(ivs))
	// Never longer than the pressure needs plus the documented backoff: a taint that ended
	// did so by its last eviction's hold (none, 20 s, 40 s, 80 s) or the pressure's release
	// (the pod gone in a second or two) plus the transition period, whichever is later.
	holds := []time.Duration{0, loopInitialBackoff, 2 * loopInitialBackoff, loopMaxBackoff}
	for _, iv := range ivs[:len(ivs)-1] {
		k := -1
		for i, e := range leak {
			if !e.at.Before(iv.from.Add(-slack)) && !e.at.After(iv.to) {
				k = i
			}
		}
		if k < 0 {
			t.Errorf("taint %v..%v covers no eviction", iv.from, iv.to)
			continue
		}
		if bound := leak[k].at.Add(max(holds[k], loopTransition+5*time.Second) + 2*slack); iv.to.After(bound) {
			t.Errorf("taint after eviction %d lasted until +%s, want by +%s (its hold %s, or the release and the transition period)",
				k+1, iv.to.Sub(r.start).Round(time.Second), bound.Sub(r.start).Round(time.Second), holds[k])
		}
	}

	var events []corev1.Event
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		events = r.loopEvents(t, c)
		return len(events) >= 3, nil
	})
	if len(events) != 3 {
		t.Fatalf("EvictionLoop events on deployment %s (by uid): %d, want 3 (evictions 2, 3 and 4): %s", leakName, len(events), describeEvents(events))
	}
	for i, want := range []string{"2 evictions", "3 evictions", "4 evictions"} {
		msg := events[i].Message
		if events[i].Type != corev1.EventTypeWarning || !strings.Contains(msg, want) || !strings.Contains(msg, cluster.NodeName) ||
			!strings.Contains(msg, "working set") || !strings.Contains(msg, "growth") {
			t.Errorf("EvictionLoop event %d: %s %q, want a Warning naming the node, %q, the working set and the growth", i+1, events[i].Type, msg, want)
		}
	}
	if want := "for " + loopMaxBackoff.String(); !strings.Contains(events[2].Message, want) {
		t.Errorf("fourth eviction's Event %q, want %q: the backoff doubled to its maximum (the schedule survived the restart)", events[2].Message, want)
	}
	if lines, _ := evictiondMetrics(c, `evictiond_eviction_loop_evictions_total{kind="Deployment"}`); len(lines) != 1 {
		t.Errorf("evictiond_eviction_loop_evictions_total{kind=\"Deployment\"} after the restart: %v, want one series", lines)
	}

	_, hurt := r.evictions(t, c)
	if len(hurt) > 0 {
		t.Errorf("bystanders evicted: %v", hurt)
	}
	for _, b := range r.bystanders {
		p, err := c.Client.CoreV1().Pods(r.ns).Get(ctx, b.Name, metav1.GetOptions{})
		if err != nil || !podReady(p) || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("bystander %s hurt: %v %s", b.Name, err, describeStatus(p))
		}
	}
	if n := machineOOMKills(t) - oomBefore; n != 0 {
		t.Errorf("%d OOM kills during the loop, want 0", n)
	}
	t.Logf("EvictionLoop events on the Deployment:\n%s", describeEvents(events))
}
