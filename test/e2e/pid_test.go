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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// pidAvailable computes pid.available as evictiond and the kubelet do:
// min(kernel.pid_max, kernel.threads-max) - tasks (the total of /proc/loadavg).
func pidAvailable(t *testing.T) int64 {
	t.Helper()
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	pidMax, err1 := strconv.ParseInt(read("/proc/sys/kernel/pid_max"), 10, 64)
	threadsMax, err2 := strconv.ParseInt(read("/proc/sys/kernel/threads-max"), 10, 64)
	fields := strings.Fields(read("/proc/loadavg"))
	if err1 != nil || err2 != nil || len(fields) < 4 {
		t.Fatalf("reading pid limits: %v %v %v", err1, err2, fields)
	}
	_, total, _ := strings.Cut(fields[3], "/")
	tasks, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		t.Fatalf("parsing /proc/loadavg %q: %v", fields[3], err)
	}
	return min(pidMax, threadsMax) - tasks
}

// testPIDPressure is scenario 4: a pod holding many threads is evicted under PID pressure,
// set relative to what the machine uses now, and a bystander keeps running.
func testPIDPressure(t *testing.T, c *cluster.Cluster) {
	const ns = "e2e-pids"
	ctx := context.Background()
	createNamespace(t, c.Client, ns)
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	// The hog takes 3000 threads; the threshold sits 1500 below today's availability, so the
	// machine's own churn (other work on it) is far from it and the hog crosses it halfway.
	threshold := pidAvailable(t) - 1500
	edited := strings.Replace(original, "pid.available: 2%", fmt.Sprintf("pid.available: %q", strconv.FormatInt(threshold, 10)), 1)
	if edited == original {
		t.Fatal("the e2e config has no `pid.available: 2%` hard threshold to replace")
	}
	setEvictiondConfig(t, c, edited)
	waitConfigApplied(t, c, fmt.Sprintf(`evictiond_threshold{kind="hard",signal="pid.available"} %d`, threshold))

	bystander := podOnNode(ns, "bystander", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil))
	hog := podOnNode(ns, "pidhog", workloadContainer("pidhog", []string{"-mode=threads", "-count=3000", "-rate=1000"}, resources("cpu", "100m", "memory", "64Mi"), nil))
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
		t.Fatalf("Evicted events %v, want exactly one, for pidhog, from evictiond", evicted)
	}
	t.Logf("pidhog evicted: %s", evicted[0].Message)
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "bystander", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("bystander hurt: %v %s", err, describeStatus(p))
	}
}
