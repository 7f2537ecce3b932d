//go:build nodev2

package nodev2

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/kube"
)

// selfPressureConfig is evictiond's configuration in the self-inflicted pressure scenario:
// a soft PSI threshold on kubepods (5% some avg10 for 10 s) and podPressure.stall at 8%.
// Under TCG the thrasher's own stall reads 12-16% (its disk reads are slow, so it spends
// less of its time refaulting than on hardware), kubepods' and the node's 8-11%.
const selfPressureConfig = `apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard: {memory.available: 100Mi}
evictionSoft: {allocatableMemory.pressure.some.avg10: "5%"}
evictionSoftGracePeriod: {allocatableMemory.pressure.some.avg10: 10s}
evictionPressureTransitionPeriod: 20s
evictionMaxPodGracePeriod: 5
loop: {interval: 1s, podCleanupTimeout: 30s}
exclusions: {daemonSetPods: true}
nodeStatus: {conditions: own}
podPressure: {stall: "8%"}
`

// testSelfInflictedPressure is a pod thrashing against its own memory limit on a quiet node:
// it re-reads a file twice its limit, so its page cache is refaulted all the time and its
// memory.pressure is high; PSI being hierarchical, so are kubepods' and the node's. evictiond
// reports the pod (a SelfInflictedMemoryPressure Event) and neither sets MemoryPressure nor
// evicts the bystander that a PSI threshold would have taken (the most above its request).
func testSelfInflictedPressure(t *testing.T, n *node) {
	ns := "v2-selfpressure"
	createNamespace(t, n, ns)
	reloaded := startConfig(t, n, selfPressureConfig)
	bystanders := []*corev1.Pod{
		guaranteedBystander(ns),
		podOnNode(ns, "above-request", workloadContainer("memhog", "memhog", []string{"-rate-mib=50", "-target-mib=64"}, resources("memory", "16Mi"), nil)),
	}
	n.startPods(t, 2*time.Minute, bystanders...)
	reloaded()
	thrasher := podOnNode(ns, "thrasher", workloadContainer("diskfill", "diskfill",
		[]string{"-dir=/scratch", "-rate-mib=200", "-target-mib=96", "-read-passes=100000"}, resources("memory", "16Mi"), resources("memory", "48Mi")))
	thrasher.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	thrasher.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	oomBefore := n.oomKills(t)
	// An earlier scenario's node pressure may still be within its transition period: the
	// sampler below must see only this one's.
	if err := n.waitMemoryPressureClear(time.Minute); err != nil {
		t.Fatalf("the node still under %s a minute into the scenario, before the thrasher: %v", kube.ConditionMemoryPressure, err)
	}
	n.createPod(t, thrasher)

	// The Node's own condition, sampled while the pod thrashes.
	sampled := n.sampleMemoryPressure(time.Second)
	reported := n.waitEvents(t, ns, "SelfInflictedMemoryPressure", 3*time.Minute)
	pressure := n.sh(t, "cat /proc/pressure/memory /sys/fs/cgroup/kubepods.slice/memory.pressure; "+
		"cat /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod*/memory.pressure")
	// The soft threshold's grace is 10 s: watch past it.
	time.Sleep(12 * time.Second)
	sawCondition, _ := sampled()
	t.Logf("PSI while the thrasher runs (node; kubepods; each Burstable pod):\n%s", pressure)
	if len(reported) == 0 {
		t.Fatalf("no SelfInflictedMemoryPressure Event in %s within 3 minutes\n--- evictiond ---\n%s", ns, n.evictiondLog(t, 40))
	}
	if reported[0].InvolvedObject.Name != "thrasher" {
		t.Errorf("SelfInflictedMemoryPressure on %s, want the thrasher: %s", reported[0].InvolvedObject.Name, reported[0].Message)
	}
	t.Logf("reported: %s", reported[0].Message)
	if evicted := n.events(t, ns, "Evicted"); len(evicted) > 0 {
		t.Errorf("evictions for a pod's own stall: %s", describeEvents(evicted))
	}
	if sawCondition {
		t.Errorf("%s set for one pod's stall against its own limit", kube.ConditionMemoryPressure)
	}
	for _, hurt := range n.hurtBystanders(bystanders) {
		t.Errorf("bystander hurt: %s", hurt)
	}
	if oom := n.oomKills(t) - oomBefore; oom != 0 {
		t.Logf("the kernel OOM-killed %d process(es) meanwhile (the thrasher's limit)", oom)
	}
	t.Logf("evictiond:\n%s", grepRegexp(n.evictiondLog(t, 2000), `stalled|threshold met|evict`))
	restored := startConfig(t, n, scenarioConfig)
	n.deleteNamespace(t, ns)
	restored()
}
