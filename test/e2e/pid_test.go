//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// pidAvailable computes pid.available as evictiond and the kubelet do:
// min(kernel.pid_max, kernel.threads-max) - tasks (the total of /proc/loadavg).
func pidAvailable(t *testing.T) int64 {
	t.Helper()
	capacity := pidCapacity(t)
	fields := strings.Fields(readProc(t, "/proc/loadavg"))
	if len(fields) < 4 {
		t.Fatalf("/proc/loadavg: %v", fields)
	}
	_, total, _ := strings.Cut(fields[3], "/")
	tasks, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		t.Fatalf("parsing /proc/loadavg %q: %v", fields[3], err)
	}
	return capacity - tasks
}

// pidCapacity is min(kernel.pid_max, kernel.threads-max) as the node (the test runs in the
// host's PID namespace) sees it.
func pidCapacity(t *testing.T) int64 {
	t.Helper()
	pidMax, err1 := strconv.ParseInt(readProc(t, "/proc/sys/kernel/pid_max"), 10, 64)
	threadsMax, err2 := strconv.ParseInt(readProc(t, "/proc/sys/kernel/threads-max"), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("reading pid limits: %v %v", err1, err2)
	}
	return min(pidMax, threadsMax)
}

func readProc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// testPIDPressure is scenario 4: a pod holding many threads is evicted under PID pressure,
// set relative to what the machine uses now, and a bystander keeps running.
func testPIDPressure(t *testing.T, c *cluster.Cluster) {
	replayAfter(t, c, "evictiond")
	const ns = "e2e-pids"
	ctx := context.Background()
	createNamespace(t, c.Client, ns)
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	// evictiond must see the node's PID capacity. On kernels 6.14 and later kernel.pid_max is
	// per PID namespace: a container without hostPID reads its own namespace's (4194304 by
	// default), not the node's.
	if lines, err := evictiondMetrics(c, `evictiond_signal_capacity_pids{signal="pid.available"}`); err != nil || len(lines) != 1 {
		t.Fatalf("reading evictiond's pid.available capacity: %v %v", lines, err)
	} else if got, want := lines[0][strings.LastIndex(lines[0], " ")+1:], strconv.FormatInt(pidCapacity(t), 10); got != want {
		t.Fatalf("evictiond's pid.available capacity is %s, the node's is min(kernel.pid_max, kernel.threads-max) = %s: "+
			"it reads a pid_max that is not the node's (pid_max is per PID namespace since Linux 6.14; the DaemonSet needs hostPID, "+
			"or evictiond must read it another way)", got, want)
	}
	setPIDThresholdForHog(t, c, original)

	bystander := podOnNode(ns, "bystander", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil))
	hog := pidHog(ns)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, bystander, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, ns, "bystander", time.Minute, "Ready", podReady)
	created, err := c.Client.CoreV1().Pods(ns).Create(ctx, hog, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, c, ns, "pidhog", created.UID, 2*time.Minute)
	evicted := evictionEvents(t, c, ns)
	if len(evicted) != 1 || evicted[0].InvolvedObject.Name != "pidhog" || evicted[0].Source.Component != "evictiond" {
		t.Fatalf("Evicted events %s, want exactly one, for pidhog, from evictiond\n--- evictiond ---\n%s", describeEvents(evicted), c.EvictiondLogTail(15))
	}
	t.Logf("pidhog evicted: %s", evicted[0].Message)
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "bystander", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("bystander hurt: %v %s", err, describeStatus(p))
	}
}

// setPIDThresholdForHog sets evictiond's hard pid.available threshold and waits until it is
// in force. The hog takes 3000 threads; the threshold sits 1500 below today's availability,
// so the machine's own churn (other work on it) is far from it and the hog crosses it halfway.
func setPIDThresholdForHog(t *testing.T, c *cluster.Cluster, original string) {
	t.Helper()
	threshold := pidAvailable(t) - 1500
	edited := strings.Replace(original, "pid.available: 2%", fmt.Sprintf("pid.available: %q", strconv.FormatInt(threshold, 10)), 1)
	if edited == original {
		t.Fatal("the e2e config has no `pid.available: 2%` hard threshold to replace")
	}
	setEvictiondConfig(t, c, edited)
	waitConfigApplied(t, c, `evictiond_threshold_pids{kind="hard",signal="pid.available"}`, float64(threshold))
}

// pidHog is a pod starting 3000 threads, 1000 a second.
func pidHog(ns string) *corev1.Pod {
	return podOnNode(ns, "pidhog", workloadContainer("pidhog", []string{"-mode=threads", "-count=3000", "-rate=1000"}, resources("cpu", "100m", "memory", "64Mi"), nil))
}
