//go:build e2e && demo

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// TestDemo is `make demo-cluster`: a newcomer's first look at evictiond. It boots the local
// cluster, deploys evictiond, plays one memory-pressure episode and tells what happened,
// then tears everything down. It fails if the episode does not go as evictiond promises.
func TestDemo(t *testing.T) {
	say := func(format string, args ...any) { fmt.Printf("demo: "+format+"\n", args...) }
	say("booting a one-node Kubernetes cluster on this machine (etcd, kube-apiserver, controller manager, scheduler, containerd, kubelet)...")
	c := cluster.Start(t, cluster.Options{})
	say("cluster up in %s. The kubelet limits all pods together to %d MiB (the kubepods cgroup), so pressure is real but the machine stays safe.",
		c.BootDuration.Round(100*time.Millisecond), c.PodsMemoryLimitBytes>>20)
	say("the kubelet's own eviction is the backstop: %v", c.KubeletConfig.EvictionHard)

	ctx := context.Background()
	start := time.Now()
	pod, err := c.DeployEvictiond(ctx, cluster.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying evictiond: %v", err)
	}
	say("evictiond deployed from deploy/ (DaemonSet pod %s Ready in %s); it evicts when allocatableMemory.available < 500Mi.", pod.Name, time.Since(start).Round(100*time.Millisecond))

	say("starting two well-behaved pods (Guaranteed, and Burstable within its request) and a hog that requests 64 MiB and grows at 200 MiB/s:")
	e := &memoryEpisode{Namespace: "demo", HogRateMiB: 200}
	e.run(t, c, func(line string) { say("  %s", line) })

	switch {
	case len(e.Evicted) == 1 && e.Evicted[0].Source.Component == "evictiond":
		ev := e.Evicted[0]
		say("evictiond evicted %s/%s through the Eviction API, %s after it started; the lowest kubepods headroom was %d MiB (the limit was never reached).",
			ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, e.HogLifetime.Round(100*time.Millisecond), e.MinAvailable>>20)
		say("why, in its own words: %s", ev.Message)
	case e.OOMKills > 0:
		t.Errorf("the kernel OOM killer acted (%d kills): evictiond was too late", e.OOMKills)
	default:
		t.Errorf("unexpected evictions: %v", e.Evicted)
	}
	for _, b := range e.Bystanders {
		if podReady(b) {
			say("bystander %s is still running, untouched.", b.Name)
		} else {
			t.Errorf("bystander %s hurt: %s", b.Name, describeStatus(b))
		}
	}
	if e.OOMKills == 0 {
		say("no OOM kill on the machine during the episode.")
	}
	for _, ev := range e.PressureEvents {
		say("node event: %s: %s", ev.Reason, ev.Message)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err == nil {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeMemoryPressure || cond.Type == kube.ConditionMemoryPressure {
				say("node condition %s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
		for _, taint := range node.Spec.Taints {
			if strings.HasPrefix(taint.Key, "evictiond.io/") {
				say("node taint %s (until the pressure transition period ends)", taint.ToString())
			}
		}
	}
	if lines, err := evictiondMetrics(c, "evictiond_evictions_total", "evictiond_threshold_met{kind=\"hard\",signal=\"allocatableMemory.available\"}", "evictiond_signal_available_bytes{signal=\"allocatableMemory.available\"}", "evictiond_loop_wakeups_total"); err == nil {
		say("evictiond's metrics (https://<node>:9809/metrics, scraped with a ServiceAccount token):")
		for _, l := range lines {
			say("  %s", l)
		}
	} else {
		say("could not read evictiond's metrics: %v", err)
	}
	say("tearing the cluster down; the machine is left as it was.")
}
