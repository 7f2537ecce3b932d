//go:build e2e

package e2e_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// TestCluster boots the one-node cluster once and runs the scenarios against it, in order.
func TestCluster(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	t.Run("NodeHasPodsMemoryLimit", func(t *testing.T) { testNodeHasPodsMemoryLimit(t, c) })
	t.Run("DeploymentRunsReady", func(t *testing.T) { testDeploymentRunsReady(t, c) })
	t.Run("MemoryHogWithoutEvictiond", func(t *testing.T) { testMemoryHogWithoutEvictiond(t, c) })
}

// testNodeHasPodsMemoryLimit proves the kubelet enforces node allocatable on pods: the
// kubepods cgroup's limit is the one asked for, and the Node's allocatable memory is that
// limit minus the kubelet's memory.available threshold, as the kubelet computes it.
func testNodeHasPodsMemoryLimit(t *testing.T, c *cluster.Cluster) {
	const want = int64(3 << 30)
	if c.PodsMemoryLimitBytes != want {
		t.Errorf("kubepods memory limit = %d bytes, want %d (MemTotal - systemReserved)", c.PodsMemoryLimitBytes, want)
	}
	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocatable := node.Status.Allocatable.Memory().Value()
	hard := cluster.DefaultKubeletEvictionHard["memory.available"]
	if wantAlloc := want - 100<<20; allocatable != wantAlloc {
		t.Errorf("node allocatable memory = %d, want %d (kubepods limit - evictionHard memory.available %s)", allocatable, wantAlloc, hard)
	}
}

// testDeploymentRunsReady proves scheduling, the workload controllers, CNI and the imported
// images: a Deployment of the idle image gets a Ready pod with a pod-network IP.
func testDeploymentRunsReady(t *testing.T, c *cluster.Cluster) {
	const ns = "e2e-deployment"
	createNamespace(t, c.Client, ns)
	ctx := context.Background()
	labels := map[string]string{"app": "idle"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers: []corev1.Container{workloadContainer("idle", nil,
						resources("cpu", "10m", "memory", "16Mi"), nil)},
				},
			},
		},
	}
	start := time.Now()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	var last *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "idle", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = d
		return d.Status.ReadyReplicas == 2, nil
	})
	if err != nil {
		pods, _ := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s: %s", p.Name, describeStatus(&p))
		}
		t.Fatalf("deployment idle: not 2 ready replicas after 2m (status %+v): %v\n--- kubelet ---\n%s", last.Status, err, c.LogTail("kubelet", 30))
	}
	t.Logf("deployment of 2 idle pods Ready in %s", time.Since(start).Round(time.Millisecond))
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != cluster.NodeName {
			t.Errorf("pod %s on node %q, want %s", p.Name, p.Spec.NodeName, cluster.NodeName)
		}
		if p.Status.PodIP == "" || p.Status.PodIP == p.Status.HostIP {
			t.Errorf("pod %s IP %q: want an address of the pod network %s", p.Name, p.Status.PodIP, cluster.PodSubnet)
		}
	}
}

// testMemoryHogWithoutEvictiond shows what this node does under memory pressure with only
// the kubelet: a Burstable pod ramping far beyond its request inside kubepods' real limit
// is OOM-killed by the kernel or evicted by the kubelet, and a Guaranteed bystander and a
// Burstable pod within its request keep running.
func testMemoryHogWithoutEvictiond(t *testing.T, c *cluster.Cluster) {
	const ns = "e2e-kubelet-memory"
	createNamespace(t, c.Client, ns)
	ctx := context.Background()

	bystanders := startBystanders(t, c, ns)

	oomKillsBefore := machineOOMKills(t)
	const rateMiB = 400
	hog := podOnNode(ns, "hog", workloadContainer("memhog", []string{"-rate-mib=400"}, resources("memory", "64Mi"), nil))
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod hog: %v", err)
	}
	// The ramp reaches the 3 GiB kubepods limit in about 8 s at 400 MiB/s.
	end := waitPod(t, c, ns, "hog", 2*time.Minute, "finished (OOM-killed or evicted)", podFinished)
	term := terminatedState(end, "memhog")
	switch {
	case end.Status.Reason == "Evicted":
		t.Logf("hog evicted by the kubelet: %s", end.Status.Message)
	case term != nil && term.Reason == "OOMKilled":
		// Proves the OOM kill counter scenario 1 relies on sees kills inside kubepods.
		if kills := machineOOMKills(t) - oomKillsBefore; kills < 1 {
			t.Errorf("hog OOMKilled but /proc/vmstat oom_kill grew by %d", kills)
		}
		t.Logf("hog OOM-killed by the kernel %s after its start (ramp %d MiB/s to the %d MiB kubepods limit)",
			term.FinishedAt.Sub(term.StartedAt.Time), rateMiB, c.PodsMemoryLimitBytes>>20)
	default:
		t.Fatalf("hog finished neither OOM-killed nor evicted: %s", describeStatus(end))
	}
	for _, p := range bystanders {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !podReady(got) || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("bystander %s hurt by the hog: %s", p.Name, describeStatus(got))
		}
	}
}
