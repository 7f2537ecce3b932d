//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// unevictableNamespace is excluded from eviction by the e2e overlay's config: a pod there
// holds pressure for as long as a scenario needs. TestEvictiond creates it.
const unevictableNamespace = "e2e-unevictable"

// holdPressure brings kubepods to about leaveMiB available with pods in the unevictable
// namespace, and waits until it is there. Memory freed late by earlier scenarios' pods would
// leave it above the mark, so it tops up with further pods (at most three in all). The pods
// are removed at the end of the test, or earlier by releasePressure.
func holdPressure(t *testing.T, c *cluster.Cluster, name string, leaveMiB int64) {
	t.Helper()
	for i := 0; i < 3; i++ {
		m, err := cluster.ReadPodsMemory()
		if err != nil {
			t.Fatal(err)
		}
		if m.Available()>>20 <= leaveMiB+48 {
			return
		}
		podName := name
		if i > 0 {
			podName = fmt.Sprintf("%s-%d", name, i)
		}
		startPressurePod(t, c, name, podName, (m.Available()>>20)-leaveMiB)
		// Wait for the pod's ramp (500 MiB/s) to end: available stops falling.
		last := int64(-1)
		_ = wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, false, func(context.Context) (bool, error) {
			m, err := cluster.ReadPodsMemory()
			if err != nil {
				return false, nil
			}
			now := m.Available() >> 20
			settled := last >= 0 && last-now < 8
			last = now
			return settled, nil
		})
	}
	m, _ := cluster.ReadPodsMemory()
	if m.Available()>>20 > leaveMiB+48 {
		t.Fatalf("pressure pods %s* did not bring kubepods to %d MiB available (now %d MiB)", name, leaveMiB, m.Available()>>20)
	}
}

// startPressure starts one pressure pod that takes what kubepods has above leaveMiB, and
// waits only for it to run.
func startPressure(t *testing.T, c *cluster.Cluster, name string, leaveMiB int64) {
	t.Helper()
	m, err := cluster.ReadPodsMemory()
	if err != nil {
		t.Fatal(err)
	}
	startPressurePod(t, c, name, name, (m.Available()>>20)-leaveMiB)
}

func startPressurePod(t *testing.T, c *cluster.Cluster, group, name string, sizeMiB int64) {
	t.Helper()
	if sizeMiB <= 0 {
		t.Fatalf("pressure pod %s: nothing to take (%d MiB)", name, sizeMiB)
	}
	pod := podOnNode(unevictableNamespace, name, workloadContainer("memhog",
		[]string{"-rate-mib=500", fmt.Sprintf("-target-mib=%d", sizeMiB)}, resources("cpu", "100m", "memory", "64Mi"), nil))
	pod.Labels["pressure"] = group
	if _, err := c.Client.CoreV1().Pods(unevictableNamespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() { deletePressurePods(c, group) })
	waitPod(t, c, unevictableNamespace, name, time.Minute, "Running", podReady)
}

func deletePressurePods(c *cluster.Cluster, group string) {
	grace := int64(0)
	_ = c.Client.CoreV1().Pods(unevictableNamespace).DeleteCollection(context.Background(),
		metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{LabelSelector: "pressure=" + group})
}

// releasePressure deletes the pressure pods of holdPressure/startPressure and waits until
// kubepods has its memory back; it returns when that was seen.
func releasePressure(t *testing.T, c *cluster.Cluster, name string) time.Time {
	t.Helper()
	deletePressurePods(c, name)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m, err := cluster.ReadPodsMemory()
		return err == nil && m.Available() > 1<<30, nil
	})
	if err != nil {
		t.Fatalf("kubepods memory not released after deleting the %s pods", name)
	}
	return time.Now()
}

// nodeMemoryStatus is what the scenarios look at on the Node.
type nodeMemoryStatus struct {
	conditionOurs bool // EvictiondMemoryPressure=True (the default nodeStatus.conditions: own)
	condition     corev1.NodeCondition
	standard      corev1.NodeCondition // MemoryPressure
	taint         bool                 // evictiond.io/memory-pressure present
}

// standardOurs: the standard MemoryPressure entry is evictiond's and True.
func standardOurs(c corev1.NodeCondition) bool {
	return c.Status == corev1.ConditionTrue && c.Reason == kube.ReasonMemoryPressure
}

func readNodeMemoryStatus(t *testing.T, c *cluster.Cluster) nodeMemoryStatus {
	t.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	var s nodeMemoryStatus
	for _, cond := range node.Status.Conditions {
		switch cond.Type {
		case kube.ConditionMemoryPressure:
			s.condition = cond
			s.conditionOurs = cond.Status == corev1.ConditionTrue
		case corev1.NodeMemoryPressure:
			s.standard = cond
		}
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == kube.TaintKeyMemoryPressure {
			s.taint = true
		}
	}
	return s
}

func waitNodeMemoryStatus(t *testing.T, c *cluster.Cluster, timeout time.Duration, what string, ok func(nodeMemoryStatus) bool) time.Time {
	t.Helper()
	var last nodeMemoryStatus
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = readNodeMemoryStatus(t, c)
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("node: not %s after %s: MemoryPressure=%s %s %q, taint %v\n--- evictiond ---\n%s",
			what, timeout, last.condition.Status, last.condition.Reason, last.condition.Message, last.taint, c.EvictiondLogTail(30))
	}
	return time.Now()
}

// waitNodeClearOfEvictiond waits until the node carries no evictiond.io taint and no True
// condition of evictiond's, for any resource.
func waitNodeClearOfEvictiond(t *testing.T, c *cluster.Cluster, timeout time.Duration) {
	t.Helper()
	var held []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		held = nil
		for _, taint := range n.Spec.Taints {
			if strings.HasPrefix(taint.Key, "evictiond.io/") {
				held = append(held, taint.Key+":"+string(taint.Effect))
			}
		}
		for _, cond := range n.Status.Conditions {
			if strings.HasPrefix(string(cond.Type), "Evictiond") && cond.Status == corev1.ConditionTrue {
				held = append(held, string(cond.Type)+"=True")
			}
		}
		return len(held) == 0, nil
	})
	if err != nil {
		t.Fatalf("node: still holds evictiond's %v after %s (a previous scenario's pressure)\n--- evictiond ---\n%s", held, timeout, c.EvictiondLogTail(30))
	}
}

// Node status scenario knobs.
const (
	// nodeStatusHold is how long the scenario holds the pressure.
	nodeStatusHold = 60 * time.Second
	// bestEffortNamespace holds the BestEffort pods the scenario keeps submitting.
	bestEffortNamespace = "e2e-besteffort"
	// standardMemoryTaint is the taint the node lifecycle controller derives from
	// MemoryPressure=True.
	standardMemoryTaint = "node.kubernetes.io/memory-pressure"
)

// testNodeStatusUnderPressure is scenario 6: evictiond's node status under held memory
// pressure, from a watch on the node (every version, not samples) and the audit log.
// For nodeStatusHold after the onset it asserts: evictiond's NoSchedule taint never lapses;
// the condition it publishes never dips (the default mode's EvictiondMemoryPressure; in
// standard mode the standard entry's dips are reported, they are the cost of that mode);
// no BestEffort pod the test keeps submitting is scheduled to the node; evictiond writes the
// node at most twice per transition in own mode (one taint update, one status patch) and
// never while the pressure holds. It reports Node writes per minute by actor and the
// lapses of the standard condition and taint. Once the pressure has been gone for the
// transition period (30 s in the e2e config), and not before, everything evictiond put on
// the node is gone, and the waiting BestEffort pods are scheduled.
//
// EVICTIOND_E2E_NODESTATUS_MODE=standard|both|own runs it with that nodeStatus.conditions
// (the measurement in docs/operations.md); unset, the deployed default (own).
func testNodeStatusUnderPressure(t *testing.T, c *cluster.Cluster) {
	const transition = 30 * time.Second
	ctx := context.Background()
	mode := os.Getenv("EVICTIOND_E2E_NODESTATUS_MODE")
	if mode != "" {
		setNodeStatusMode(t, c, mode)
	} else {
		mode = "own"
	}
	published := func(n *corev1.Node) bool { // the condition evictiond publishes in this mode
		if mode == "standard" {
			cond := nodeCondition(n, corev1.NodeMemoryPressure)
			return cond != nil && cond.Status == corev1.ConditionTrue && cond.Reason == kube.ReasonMemoryPressure
		}
		cond := nodeCondition(n, kube.ConditionMemoryPressure)
		return cond != nil && cond.Status == corev1.ConditionTrue
	}
	protected := func(n *corev1.Node) bool {
		return nodeHasTaint(n, kube.TaintKeyMemoryPressure, corev1.TaintEffectNoSchedule)
	}
	standardTaint := func(n *corev1.Node) bool { return nodeHasTaint(n, standardMemoryTaint, corev1.TaintEffectNoSchedule) }
	standardTrue := func(n *corev1.Node) bool {
		cond := nodeCondition(n, corev1.NodeMemoryPressure)
		return cond != nil && cond.Status == corev1.ConditionTrue
	}
	createNamespace(t, c.Client, bestEffortNamespace)
	// A previous scenario's memory pressure may still be within its transition period (and
	// its pods' memory not yet returned): start from a quiet node, so the onset is this one.
	waitNodeMemoryStatus(t, c, transition+30*time.Second, "clear of the previous scenario's memory pressure",
		func(s nodeMemoryStatus) bool { return !s.conditionOurs && !s.taint && !standardOurs(s.standard) })
	// Nor may another resource's pressure (the PID scenario's, in the full suite) end while this
	// one is held: its release would be counted as evictiond writing while the pressure holds.
	waitNodeClearOfEvictiond(t, c, transition+30*time.Second)
	rec := recordNode(t, c.Client, cluster.NodeName)
	start := time.Now()

	holdPressure(t, c, "pressure", 300)
	onset := waitNodeMemoryStatus(t, c, 15*time.Second, "under evictiond's MemoryPressure with its taint",
		func(s nodeMemoryStatus) bool { return s.taint && (mode == "standard" || s.conditionOurs) })

	// Hold, submitting a BestEffort pod every 5 s: none may be scheduled here meanwhile.
	submitted := 0
	for end := onset.Add(nodeStatusHold); time.Now().Before(end); time.Sleep(5 * time.Second) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: bestEffortNamespace, Name: fmt.Sprintf("besteffort-%d", submitted)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{workloadContainer("idle", nil, nil, nil)},
				TerminationGracePeriodSeconds: ptrTo(int64(0))},
		}
		if _, err := c.Client.CoreV1().Pods(bestEffortNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating BestEffort pod: %v", err)
		}
		submitted++
	}
	released := releasePressure(t, c, "pressure")

	cleared := waitNodeMemoryStatus(t, c, transition+30*time.Second, "clear of evictiond's memory condition and taint",
		func(s nodeMemoryStatus) bool {
			return !s.conditionOurs && !s.taint && (mode != "standard" || !standardOurs(s.standard))
		})
	after := cleared.Sub(released)
	t.Logf("pressure released; evictiond's condition and taint cleared %s later (transition period %s)", after.Round(time.Millisecond), transition)
	if after < transition-2*time.Second {
		t.Errorf("cleared %s after the pressure ended, before the %s transition period", after, transition)
	}
	time.Sleep(3 * time.Second) // the last writes reach the watch and the audit log
	versions, err := rec.snapshot()
	if err != nil {
		t.Fatalf("node watch: %v", err)
	}
	writes := auditedNodeWrites(t, c.API.AuditLogPath, cluster.NodeName)
	// A pod bound during a lapse may be evicted and gone by now: the audit log has them all.
	var scheduledUnderPressure []string
	for pod, at := range auditedBindings(t, c.API.AuditLogPath, bestEffortNamespace) {
		if at.Before(released) {
			scheduledUnderPressure = append(scheduledUnderPressure, pod+" at "+at.Format(time.StampMilli))
		}
	}
	sort.Strings(scheduledUnderPressure)

	// The protection and the published condition: one unbroken stretch each, from the
	// onset until after the pressure ended.
	checks := []struct {
		what string
		pred func(*corev1.Node) bool
	}{{"evictiond's NoSchedule taint " + kube.TaintKeyMemoryPressure, protected}}
	if mode != "standard" { // the standard entry's dips are that mode's cost, reported below
		checks = append(checks, struct {
			what string
			pred func(*corev1.Node) bool
		}{"the published " + string(kube.ConditionMemoryPressure) + " condition", published})
	}
	for _, check := range checks {
		ivs := intervals(versions, check.pred)
		// onset was seen by polling, which may run a few milliseconds ahead of the watch.
		if len(ivs) != 1 || ivs[0].from.After(onset.Add(time.Second)) || ivs[0].to.IsZero() || ivs[0].to.Before(released) {
			t.Errorf("%s: held in %d stretch(es) %v; want one from the onset (%s) until after the release (%s)",
				check.what, len(ivs), ivs, onset.Format(time.StampMilli), released.Format(time.StampMilli))
		}
	}
	held := released.Sub(onset)
	t.Logf("node status, %s mode, pressure held %s (%d node versions watched):", mode, held.Round(time.Second), len(versions))
	t.Logf("  Node writes per minute while held: %s", perMinute(writesBetween(writes, onset, released), held))
	t.Logf("  Node writes for the whole episode (%s): %v", cleared.Add(3*time.Second).Sub(start).Round(time.Second), writesBetween(writes, start, cleared.Add(3*time.Second)))
	t.Logf("  lapses while held: evictiond's taint %d, published condition %d, standard MemoryPressure=True %d, standard taint %s %d",
		lapses(versions, onset, released, protected), lapses(versions, onset, released, published),
		lapses(versions, onset, released, standardTrue), standardMemoryTaint, lapses(versions, onset, released, standardTaint))
	t.Logf("  BestEffort pods submitted while held: %d, scheduled to the node while held: %d", submitted, len(scheduledUnderPressure))
	if len(scheduledUnderPressure) > 0 {
		t.Errorf("BestEffort pods scheduled to the node under pressure: %v", scheduledUnderPressure)
	}
	ours := evictiondWrites(writesBetween(writes, start, cleared.Add(3*time.Second)))
	whileHeld := evictiondWrites(writesBetween(writes, onset, released))
	if mode == "own" && (ours > 4 || whileHeld > 0) {
		t.Errorf("evictiond wrote the node %d times in the episode (%d while the pressure held); want at most 4 (taint and condition at the onset and at the release) and none while held", ours, whileHeld)
	}

	// The waiting BestEffort pods land once the taint is gone: the check could fail.
	if len(scheduledUnderPressure) < submitted {
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return len(scheduledPods(t, c)) > 0, nil
		})
		if err != nil {
			t.Errorf("no waiting BestEffort pod was scheduled within 30 s after evictiond's taint was removed: the scheduling check above proves nothing")
		}
	}
	final := readNodeMemoryStatus(t, c)
	if final.condition.Status == corev1.ConditionTrue {
		t.Errorf("%s still True after clearing: %s %q", final.condition.Type, final.condition.Reason, final.condition.Message)
	}
}

func evictiondWrites(counts map[string]int) int {
	return counts["evictiond"] + counts["evictiond/status"]
}

// scheduledPods names the pods of bestEffortNamespace bound to a node.
func scheduledPods(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(bestEffortNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing BestEffort pods: %v", err)
	}
	var out []string
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			out = append(out, p.Name)
		}
	}
	return out
}

// setNodeStatusMode switches nodeStatus.conditions in evictiond's ConfigMap (restored at
// the end of the test) and waits until the reload is in force.
func setNodeStatusMode(t *testing.T, c *cluster.Cluster, mode string) {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(context.Background(), cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]
	lines, _ := evictiondMetrics(c, `evictiond_config_reloads_total{result="success"}`)
	before := strings.Join(lines, "")
	setEvictiondConfig(t, c, original+fmt.Sprintf("nodeStatus: {conditions: %s}\n", mode))
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		lines, err := evictiondMetrics(c, `evictiond_config_reloads_total{result="success"}`)
		return err == nil && strings.Join(lines, "") != before, nil
	})
	if err != nil {
		t.Fatalf("nodeStatus.conditions: %s not reloaded within 60 s\n--- evictiond ---\n%s", mode, c.EvictiondLogTail(30))
	}
}

func ptrTo[T any](v T) *T { return &v }

// testHotReload is scenario 5: editing the ConfigMap changes evictiond's behaviour without a
// restart (a threshold raised above the current headroom makes the node report pressure),
// and a bad edit is rejected — visible in a Warning Event and the reload metrics — while the
// last good configuration stays in force.
func testHotReload(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	podBefore, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 800 MiB of headroom: under no threshold of the e2e config (hard 500Mi).
	holdPressure(t, c, "reload-pressure", 800)
	if s := readNodeMemoryStatus(t, c); s.conditionOurs {
		t.Fatalf("MemoryPressure already set with 800 MiB available: the test premise is wrong")
	}
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })

	raised := strings.Replace(original, "allocatableMemory.available: 500Mi", "allocatableMemory.available: 1Gi", 1)
	if raised == original {
		t.Fatal("the e2e config has no `allocatableMemory.available: 500Mi` hard threshold to raise")
	}
	edited := time.Now()
	setEvictiondConfig(t, c, raised)
	// The kubelet refreshes ConfigMap volumes on its pod sync (10 s here), then the file
	// watcher reloads.
	seen := waitNodeMemoryStatus(t, c, 60*time.Second, "under MemoryPressure after raising the threshold to 1Gi",
		func(s nodeMemoryStatus) bool { return s.conditionOurs })
	t.Logf("raised threshold in force %s after the ConfigMap edit", seen.Sub(edited).Round(time.Millisecond))

	bad := strings.Replace(raised, "kind: EvictionConfiguration", "kind: EvictionConfiguration\nevictionHardd: {memory.available: 1Gi}", 1)
	setEvictiondConfig(t, c, bad)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		lines, err := evictiondMetrics(c, "evictiond_config_last_reload_successful")
		return err == nil && len(lines) == 1 && strings.HasSuffix(lines[0], " 0"), nil
	})
	if err != nil {
		t.Fatalf("bad config edit: evictiond_config_last_reload_successful never went to 0\n--- evictiond ---\n%s", c.EvictiondLogTail(30))
	}
	if !nodeWarningMentions(t, c, "evictionHardd") {
		t.Errorf("no Warning Event on the node naming the bad field evictionHardd")
	}
	// The last good configuration stays: still under pressure by the 1Gi threshold.
	time.Sleep(3 * time.Second)
	if s := readNodeMemoryStatus(t, c); !s.conditionOurs {
		t.Errorf("after the rejected edit the node is no longer under evictiond's MemoryPressure: the last good config was dropped")
	}
	podAfter, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if podAfter.UID != podBefore.UID || podAfter.Status.ContainerStatuses[0].RestartCount != podBefore.Status.ContainerStatuses[0].RestartCount {
		t.Errorf("evictiond was restarted by the edits (pod %s restarts %d -> pod %s restarts %d)", podBefore.Name,
			podBefore.Status.ContainerStatuses[0].RestartCount, podAfter.Name, podAfter.Status.ContainerStatuses[0].RestartCount)
	}
	releasePressure(t, c, "reload-pressure")
}

func setEvictiondConfig(t *testing.T, c *cluster.Cluster, config string) {
	t.Helper()
	ctx := context.Background()
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = config
	if _, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating the evictiond ConfigMap: %v", err)
	}
}

// nodeWarningMentions reports whether evictiond recorded a Warning Event on the node whose
// message contains text.
func nodeWarningMentions(t *testing.T, c *cluster.Cluster, text string) bool {
	t.Helper()
	found := false
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.Type == corev1.EventTypeWarning && ev.Source.Component == "evictiond" && strings.Contains(ev.Message, text) {
				found = true
			}
		}
		return found, nil
	})
	return found
}
