//go:build e2e

package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// testPDB is scenario 2. Soft pressure: the top-ranked pod is protected by a
// PodDisruptionBudget that allows no disruption, so evictiond's eviction is refused (429) and
// it evicts the next candidate instead. Hard pressure: with only the protected pod left to
// evict, evictiond follows the escalation (evictions refused, then a direct delete) with a
// Warning Event at each step.
func testPDB(t *testing.T, c *cluster.Cluster) {
	replayAfter(t, c, "evictiond")
	const ns = "e2e-pdb"
	ctx := context.Background()
	createNamespace(t, c.Client, ns)

	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	soft := strings.Replace(original, "evictionMinimumReclaim:",
		"evictionSoft:\n  allocatableMemory.available: 1100Mi\nevictionSoftGracePeriod:\n  allocatableMemory.available: 2s\nevictionMinimumReclaim:", 1)
	if soft == original {
		t.Fatal("the e2e config has no evictionMinimumReclaim section to insert the soft threshold before")
	}
	setEvictiondConfig(t, c, soft)
	waitConfigApplied(t, c, `evictiond_threshold_bytes{kind="soft",signal="allocatableMemory.available"}`, 1100<<20)

	minAvailable := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "protected"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "protected"}},
		},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PDB: %v", err)
	}
	m, err := cluster.ReadPodsMemory()
	if err != nil {
		t.Fatal(err)
	}
	// protected exceeds its request by far the most (first candidate) and alone leaves
	// ~1330 MiB available, above the soft 1100Mi threshold; next exceeds its request by
	// 500 MiB and brings kubepods to ~800 MiB available: under the soft threshold, above the
	// hard 500Mi. Evicting next ends the pressure (1330 > 1100 + 100Mi minimum reclaim).
	protectedMiB := (m.Available() >> 20) - 800 - 532
	pods := []*corev1.Pod{
		podOnNode(ns, "protected", workloadContainer("memhog", []string{"-rate-mib=400", "-target-mib=" + itoa(protectedMiB)}, resources("cpu", "100m", "memory", "64Mi"), nil)),
		podOnNode(ns, "next", workloadContainer("memhog", []string{"-rate-mib=400", "-target-mib=532", "-start-delay=3s"}, resources("cpu", "100m", "memory", "32Mi"), nil)),
	}
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	waitPDBStatus(t, c, ns, "protected", 0)

	next, err := c.Client.CoreV1().Pods(ns).Get(ctx, "next", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, c, ns, "next", next.UID, 90*time.Second)
	writes := auditedPodWrites(t, c.API.AuditLogPath, ns)
	if !hasWrite(writes, "eviction", "protected", 429) {
		t.Errorf("no eviction of protected refused with 429 before next went: evictiond did not try the PDB-protected pod first (API writes: %v)", writes)
	}
	if !hasWrite(writes, "eviction", "next", 201) {
		t.Errorf("next was not evicted through the Eviction API (API writes: %v)", writes)
	}
	if hasWrite(writes, "", "protected", 200) {
		t.Errorf("protected was deleted under soft pressure: soft pressure must never escalate")
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "protected", metav1.GetOptions{}); err != nil || !podReady(p) || p.DeletionTimestamp != nil {
		t.Fatalf("protected pod did not survive soft pressure: %v %s", err, describeStatus(p))
	}
	t.Logf("soft pressure: eviction of protected refused by its PDB (429), next evicted instead")

	// Hard pressure: a pod nobody may evict takes kubepods below 500Mi; protected is now the
	// only candidate, refused by its PDB, and the escalation deletes it (with a Warning Event).
	protected, err := c.Client.CoreV1().Pods(ns).Get(ctx, "protected", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startPressure(t, c, "pdb-hard-pressure", 350)
	waitPodGone(t, c, ns, "protected", protected.UID, 90*time.Second)
	writes = auditedPodWrites(t, c.API.AuditLogPath, ns)
	var refusedHard, deleted bool
	for _, w := range writes {
		if w.Name != "protected" || !strings.HasPrefix(w.User, "system:serviceaccount:"+cluster.EvictiondNamespace+":") {
			continue
		}
		switch {
		case w.Subresource == "eviction" && w.Code == 429:
			refusedHard = true
		case w.Verb == "delete" && w.Code == 200 && refusedHard:
			deleted = true
		}
	}
	if !deleted {
		t.Errorf("protected was not deleted by evictiond after its evictions were refused (API writes: %v)", writes)
	}
	// evictiond records each escalation step as a Warning Event on the Node.
	for _, reason := range []string{kube.EventReasonEvictionBlocked, kube.EventReasonEscalatedToDelete} {
		if !nodeEventSeen(t, c, reason, ns+"/protected") {
			t.Errorf("no %s Warning Event on the node naming %s/protected", reason, ns)
		}
	}
	t.Logf("hard pressure: evictions of protected refused, then protected deleted through the escalation")
}

func hasWrite(writes []auditedRequest, subresource, name string, code int) bool {
	for _, w := range writes {
		if w.Subresource == subresource && w.Name == name && w.Code == code {
			return true
		}
	}
	return false
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waitConfigApplied waits until evictiond's metrics show a series of the new configuration;
// with want >= 0, until its value is want. The edit reaches the agent's ConfigMap volume
// through the kubelet's ConfigMap watch, which after an API server restart can stay blind
// for over a minute (make soak's 60-minute run: 3 of 28 edits right after a restart took
// longer than 60 s), hence 3 minutes.
func waitConfigApplied(t *testing.T, c *cluster.Cluster, series string, want float64) {
	t.Helper()
	var last []string
	const timeout = 3 * time.Minute
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		lines, err := evictiondMetrics(c, series+" ")
		if err != nil || len(lines) == 0 {
			return false, nil
		}
		last = lines
		if want < 0 {
			return true, nil
		}
		v, err := strconv.ParseFloat(lines[0][len(series)+1:], 64)
		return err == nil && v == want, nil
	})
	if err != nil {
		t.Fatalf("configuration edit not applied after %v (%s = %v, want %v)\n--- evictiond ---\n%s", timeout, series, last, want, c.EvictiondLogTail(20))
	}
}

func waitPDBStatus(t *testing.T, c *cluster.Cluster, ns, name string, allowed int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy >= 1 && pdb.Status.DisruptionsAllowed == allowed, nil
	})
	if err != nil {
		t.Fatalf("PDB %s/%s: status never showed %d disruptions allowed with a healthy pod", ns, name, allowed)
	}
}

// nodeEventSeen reports whether evictiond recorded a Warning Event with reason on the node
// whose message contains text.
func nodeEventSeen(t *testing.T, c *cluster.Cluster, reason, text string) bool {
	t.Helper()
	found := false
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.Reason == reason && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, text) {
				found = true
			}
		}
		return found, nil
	})
	return found
}
