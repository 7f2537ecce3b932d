//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
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
	taint         bool // evictiond.io/memory-pressure present
}

func readNodeMemoryStatus(t *testing.T, c *cluster.Cluster) nodeMemoryStatus {
	t.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	var s nodeMemoryStatus
	for _, cond := range node.Status.Conditions {
		if cond.Type == kube.ConditionMemoryPressure {
			s.condition = cond
			s.conditionOurs = cond.Status == corev1.ConditionTrue
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

// testNodeStatusUnderPressure is scenario 6: under held memory pressure evictiond sets
// MemoryPressure (its reason) and its taint; the condition survives the kubelet's status
// rewrites (every 10 s) and the taint is never lost; both clear once the pressure has been
// gone for the transition period (30 s in the e2e config), not before.
func testNodeStatusUnderPressure(t *testing.T, c *cluster.Cluster) {
	const transition = 30 * time.Second
	holdPressure(t, c, "pressure", 300)
	waitNodeMemoryStatus(t, c, 15*time.Second, "under evictiond's MemoryPressure with its taint",
		func(s nodeMemoryStatus) bool { return s.conditionOurs && s.taint })

	// Hold across at least two of the kubelet's status updates; sample every 100 ms.
	var notOurs, samples int
	var longestGap, gap time.Duration
	lastSample := time.Now()
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		s := readNodeMemoryStatus(t, c)
		samples++
		now := time.Now()
		if !s.taint {
			t.Errorf("taint %s vanished under pressure", kube.TaintKeyMemoryPressure)
		}
		if !s.conditionOurs {
			notOurs++
			gap += now.Sub(lastSample)
			longestGap = max(longestGap, gap)
		} else {
			gap = 0
		}
		lastSample = now
	}
	t.Logf("under held pressure: condition not evictiond's in %d of %d samples, longest gap %s", notOurs, samples, longestGap.Round(time.Millisecond))
	// nodeStatus.reassertInterval is 1 s; a gap is the kubelet's rewrite until the re-assert.
	if longestGap > 3*time.Second {
		t.Errorf("MemoryPressure was not evictiond's for %s in a row: the kubelet's rewrite was not re-asserted", longestGap)
	}

	released := releasePressure(t, c, "pressure")
	cleared := waitNodeMemoryStatus(t, c, transition+30*time.Second, "clear of evictiond's MemoryPressure and taint",
		func(s nodeMemoryStatus) bool { return !s.conditionOurs && !s.taint })
	after := cleared.Sub(released)
	t.Logf("pressure released; condition and taint cleared %s later (transition period %s)", after.Round(time.Millisecond), transition)
	if after < transition-2*time.Second {
		t.Errorf("cleared %s after the pressure ended, before the %s transition period", after, transition)
	}
	final := readNodeMemoryStatus(t, c)
	if final.condition.Status == corev1.ConditionTrue {
		t.Errorf("MemoryPressure still True after clearing: %s %q", final.condition.Reason, final.condition.Message)
	}
}

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
		lines, err := evictiondMetrics("evictiond_config_last_reload_successful")
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
