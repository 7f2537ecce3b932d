//go:build e2e

package e2e_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/evictiond/evictiond/test/e2e/cluster"

	"github.com/evictiond/evictiond/internal/testenv/podstate"
)

// createNamespace creates a namespace for one scenario, waits for its default
// ServiceAccount (pods cannot be created before it exists), and deletes it at the end.
func createNamespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		grace := int64(0)
		_ = client.CoreV1().Pods(name).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: the default ServiceAccount did not appear: %v", name, err)
	}
}

// workloadContainer is a container running one of the e2e workload images.
func workloadContainer(workload string, args []string, requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{
		Name:            workload,
		Image:           cluster.WorkloadImage(workload),
		ImagePullPolicy: corev1.PullNever,
		Args:            args,
		Resources:       corev1.ResourceRequirements{Requests: requests, Limits: limits},
	}
}

// resources builds a ResourceList from "cpu", "memory", ... to quantity strings.
func resources(kv ...string) corev1.ResourceList {
	if len(kv)%2 != 0 {
		panic("resources: odd number of arguments")
	}
	list := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		list[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return list
}

// podOnNode is a pod pinned to the e2e node that is never restarted, so its end state stays
// visible (OOMKilled, Evicted, ...).
func podOnNode(namespace, name string, containers ...corev1.Container) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      cluster.NodeName,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    containers,
		},
	}
}

// waitPod polls a pod until done says so, and fails the test with the pod's status and the
// kubelet's log tail on timeout.
func waitPod(t *testing.T, c *cluster.Cluster, namespace, name string, timeout time.Duration, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, nil
		}
		last = pod
		return done(pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: waiting %s for it to be %s: %v\nlast status: %s\n--- kubelet log ---\n%s",
			namespace, name, timeout, what, err, describeStatus(last), c.LogTail("kubelet", 25))
	}
	return last
}

// The pod state helpers are internal/testenv/podstate's, shared with the other tiers.
var (
	podReady        = podstate.Ready
	podFinished     = podstate.Finished
	describeStatus  = podstate.Describe
	terminatedState = podstate.Terminated
	describeEvents  = podstate.DescribeEvents
)

// waitPodsMemoryCalm waits until kubepods has at least free bytes available, so an episode
// starts from the same place whatever the previous one left (dying pods, page cache).
func waitPodsMemoryCalm(t *testing.T, free int64, timeout time.Duration) {
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		m, err := cluster.ReadPodsMemory()
		return err == nil && m.Available() >= free, nil
	})
	if err != nil {
		m, _ := cluster.ReadPodsMemory()
		t.Fatalf("kubepods did not calm down: %d MiB available, want %d MiB", m.Available()>>20, free>>20)
	}
}

// startBystanders creates the memory scenarios' bystanders in ns, a Guaranteed pod and a
// Burstable pod within its request, and waits until both are Ready.
func startBystanders(t *testing.T, c *cluster.Cluster, ns string) []*corev1.Pod {
	t.Helper()
	bystanders := []*corev1.Pod{
		podOnNode(ns, "guaranteed", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "32Mi"), resources("cpu", "10m", "memory", "32Mi"))),
		podOnNode(ns, "burstable-within-request", workloadContainer("memhog", []string{"-rate-mib=50", "-target-mib=50"}, resources("memory", "128Mi"), nil)),
	}
	for _, p := range bystanders {
		if _, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	for _, p := range bystanders {
		waitPod(t, c, ns, p.Name, time.Minute, "Ready", podReady)
	}
	return bystanders
}

// clusterWithEvictiond boots a cluster and deploys evictiond with deploy, waits for its
// pod to be Ready (returned), and on failure logs evictiond's last lines at the teardown.
func clusterWithEvictiond(t *testing.T, opts cluster.Options, deploy cluster.DeployOptions) (*cluster.Cluster, *corev1.Pod) {
	t.Helper()
	c := cluster.Start(t, opts)
	start := time.Now()
	pod, err := c.DeployEvictiond(context.Background(), deploy)
	if err != nil {
		t.Fatalf("deploying evictiond: %v", err)
	}
	t.Logf("evictiond DaemonSet pod %s Ready %s after the apply", pod.Name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			if path, err := c.EvictiondLogPath(context.Background()); err != nil {
				t.Logf("no evictiond log to keep: %v", err)
			} else {
				c.KeepLog(t, "evictiond", path)
			}
		}
	})
	return c, pod
}
