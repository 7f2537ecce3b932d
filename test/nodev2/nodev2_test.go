//go:build nodev2

// Package nodev2 is the cgroup v2 node tier (make test-node-v2): a real Kubernetes node as
// users run it — systemd as PID 1, cgroup v2 only, containerd 2.x with the systemd cgroup
// driver, kubelet v1.35 — booted in qemu, registered with a control plane on this machine,
// evictiond installed from the chart with its default values, and the scenarios that carry
// the product's claims run there. One boot serves every scenario, in order.
package nodev2

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/testenv/vm"
)

// scenarioConfig is evictiond's configuration for the scenarios, installed over the chart's
// defaults once the default install has been checked: thresholds inside kubepods' real limit
// (the VM's memory less the kubelet's systemReserved), the kernel fast path and the brake on
// (it fires when the limit is less than 3 s away), the node's own conditions and taints, a
// short pressure transition period so the scenarios see them cleared, and image GC through
// containerd 2.x's CRI with the test's images pinned.
const scenarioConfig = `apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  memory.available: 100Mi
  allocatableMemory.available: 500Mi
  nodefs.available: 2%
  imagefs.available: 2%
  pid.available: 2%
evictionMinimumReclaim:
  allocatableMemory.available: 100Mi
evictionPressureTransitionPeriod: 20s
evictionMaxPodGracePeriod: 5
loop: {interval: 1s, podCleanupTimeout: 30s}
notifier: {psi: {enabled: true}, pollInterval: 100ms}
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
brake: {enabled: true}
exclusions:
  daemonSetPods: true
nodeStatus:
  conditions: own
  taints: {memoryPressure: NoSchedule, diskPressure: NoSchedule, pidPressure: NoSchedule}
reclaim:
  criEndpoint: unix:///run/containerd/containerd.sock
  imageGC:
    minAge: 10s
    stateFile: /var/lib/evictiond/images.json
    pinnedImages: [e2e.evictiond.io/idle, e2e.evictiond.io/memhog, e2e.evictiond.io/pidhog, e2e.evictiond.io/diskfill, evictiond.io/evictiond]
`

func TestNodeV2(t *testing.T) {
	n := startNode(t)
	t.Run("Node", func(t *testing.T) { testNode(t, n) })
	t.Run("InstallDefaults", func(t *testing.T) { testInstallDefaults(t, n) })
	t.Run("HostWritesRefused", func(t *testing.T) { testHostWritesRefused(t, n) })
	t.Run("MemoryRampAndNodeStatus", func(t *testing.T) { testMemoryRampAndNodeStatus(t, n) })
	t.Run("BrakeFreezesAndKills", func(t *testing.T) { testBrake(t, n) })
	t.Run("RealtimeBoost", func(t *testing.T) { testRealtimeBoost(t, n) })
	t.Run("PIDPressure", func(t *testing.T) { testPIDPressure(t, n) })
	t.Run("DiskPressureImageGC", func(t *testing.T) { testDiskPressure(t, n) })
	t.Run("ReclaimBeforeEvict", func(t *testing.T) { testReclaimBeforeEvict(t, n) })
	t.Run("SelfInflictedPressure", func(t *testing.T) { testSelfInflictedPressure(t, n) })
	t.Run("MemoryLivelock", func(t *testing.T) { testLivelock(t, n) })
	t.Run("HugepagesCountAsUsed", func(t *testing.T) { testHugepages(t, n) })
	t.Run("SwapPressure", func(t *testing.T) { testSwapPressure(t, n) }) // leaves the kubelet on LimitedSwap
	t.Run("AgentHitNoAppArmorDenial", func(t *testing.T) { testAgentHitNoAppArmorDenial(t, n) })
}

// testNode checks the node is what users run: systemd as PID 1, cgroup v2 only, containerd
// 2.x, the kubelet's pods under kubepods.slice.
func testNode(t *testing.T, n *node) {
	facts := n.sh(t, `echo "pid1=$(cat /proc/1/comm)"; echo "fs=$(stat -fc %T /sys/fs/cgroup)"; `+
		`echo "containerd=$(/usr/local/bin/containerd --version | cut -d' ' -f3)"; echo "runc=$(runc --version | head -n1)"; `+
		`echo "kubelet=$(/usr/local/bin/kubelet --version)"; echo "kernel=$(uname -r)"; `+
		`echo "kubepods=$(ls -d /sys/fs/cgroup/kubepods.slice)"`)
	t.Logf("node facts:\n%s", facts)
	for _, want := range []string{"pid1=systemd", "fs=cgroup2fs", "containerd=2.", "kubepods=/sys/fs/cgroup/kubepods.slice"} {
		if !strings.Contains(facts, want) {
			t.Errorf("node facts lack %q", want)
		}
	}
	if mounts := n.sh(t, "grep -c ' cgroup ' /proc/mounts || true"); mounts != "0" {
		t.Errorf("%s cgroup v1 hierarchies mounted, want none", mounts)
	}
}

// noEvictionWebhook is the chart value the node tier sets (testInstallDefaults says why).
const noEvictionWebhook = "--set=evictionWebhook.enabled=false"

// testInstallDefaults installs the chart with its default values (what a user's first
// `helm install` does) and checks the agent runs on the node and sees it right.
func testInstallDefaults(t *testing.T, n *node) {
	// Defaults but one: the eviction webhook runs on the pod network of the VM, which the
	// API server on this machine cannot reach (qemu's user network), so every eviction by
	// the agent would fail closed. The e2e tier runs it.
	n.helmRun(t, "install", "evictiond", "charts/evictiond", "--namespace", evictiondNamespace, "--create-namespace", "--wait=false", noEvictionWebhook)
	pod := n.evictiondPod(t, "", 4*time.Minute)
	t.Logf("evictiond pod %s Ready with the chart's default values", pod.Name)
	// What it detected: cgroup v2, the systemd driver from the tree, containerd's socket.
	detected := grepLines(n.evictiondLog(t, 400), `"node detected"`)
	t.Logf("evictiond: %s", detected)
	for _, want := range []string{`"cgroupVersion":2`, `"cgroupDriver":"systemd"`, `"kubepods":"/kubepods.slice"`, `"kubepodsFound":true`, `"runtime":"containerd"`} {
		if !strings.Contains(detected, want) {
			t.Errorf("evictiond's detection log line lacks %s: %q", want, detected)
		}
	}
	// `evictiond observe` on the node, with no flags but the host root: the static pod (a
	// 32-character UID, not a UUID) is listed with its memory, and the allocatable signals read.
	mirror, err := n.client.CoreV1().Pods("default").Get(context.Background(), "static-idle-"+nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := mirror.Annotations[corev1.MirrorPodAnnotationKey]
	if len(uid) != 32 {
		t.Fatalf("the static pod's UID %q (annotation %s): want the kubelet's 32-character hash", uid, corev1.MirrorPodAnnotationKey)
	}
	observed := n.sh(t, "evictiond observe --once -o json --no-cadvisor 2>&1")
	if !strings.Contains(observed, uid) {
		t.Errorf("evictiond observe does not list the static pod %s:\n%s", uid, observed)
	}
	if !strings.Contains(observed, `"allocatableMemory.available"`) {
		t.Errorf("evictiond observe has no allocatableMemory.available:\n%s", observed)
	}
	// A wrong explicit driver stops it at start-up, naming the flag and what the node has.
	r, err := n.vm.Run(context.Background(), vm.ExecRequest{Argv: []string{"evictiond", "observe", "--once", "--no-cadvisor", "--cgroup-driver", "cgroupfs"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exit == 0 || !strings.Contains(r.Output, "--cgroup-driver") || !strings.Contains(r.Output, "kubepods.slice") {
		t.Errorf("evictiond observe --cgroup-driver cgroupfs on a systemd node: exit %d, want a start-up error naming the flag and kubepods.slice:\n%s", r.Exit, r.Output)
	} else {
		t.Logf("a wrong --cgroup-driver: exit %d: %s", r.Exit, strings.TrimSpace(r.Output))
	}
}

// installScenarioConfig replaces the chart's configuration with scenarioConfig (helm upgrade)
// and replaces the agent's pod, so that every field is in force, those that take effect on
// restart (the notifier, the brake) included.
func installScenarioConfig(t *testing.T, n *node) {
	t.Helper()
	file := filepath.Join(n.dir, "scenario-config.yaml")
	if err := os.WriteFile(file, []byte(scenarioConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	n.helmRun(t, "upgrade", "evictiond", "charts/evictiond", "--namespace", evictiondNamespace, "--reuse-values", "--set-file", "configYAML="+file)
	old := n.evictiondPod(t, "", time.Minute)
	if err := n.client.CoreV1().Pods(evictiondNamespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.evictiondPod(t, old.UID, 3*time.Minute)
}

// setConfig writes config into evictiond's ConfigMap and waits until the agent has reloaded
// it (the kubelet refreshes ConfigMap volumes within its sync period, 10 s here).
func setConfig(t *testing.T, n *node, config string) {
	t.Helper()
	startConfig(t, n, config)()
}

// startConfig writes config into evictiond's ConfigMap and returns the wait for the agent's
// reload, for a caller with other work to do meanwhile.
func startConfig(t *testing.T, n *node, config string) (waitReload func()) {
	t.Helper()
	ctx := context.Background()
	before := strings.Count(n.evictiondLog(t, 100000), "configuration reloaded")
	cm, err := n.client.CoreV1().ConfigMaps(evictiondNamespace).Get(ctx, evictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = config
	if _, err := n.client.CoreV1().ConfigMaps(evictiondNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating evictiond's ConfigMap: %v", err)
	}
	return func() {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			return strings.Count(n.evictiondLog(t, 100000), "configuration reloaded") > before, nil
		})
		if err != nil {
			t.Fatalf("evictiond did not reload its configuration within 2 minutes:\n%s", n.evictiondLog(t, 20))
		}
	}
}

// evictiondConfigMap is the default pool's ConfigMap of the release "evictiond".
const evictiondConfigMap = "evictiond-config"

// testMemoryRampAndNodeStatus is claim (1) and (5) on the v2 node: a Burstable pod ramping
// far beyond its request is evicted through the Eviction API before the kernel OOM-kills
// anything, a Guaranteed and a Burstable bystander keep running, and evictiond's own
// condition and taint are set on the Node during the pressure and cleared after it, with
// the kubelet running and writing the Node's status too.
func testMemoryRampAndNodeStatus(t *testing.T, n *node) {
	installScenarioConfig(t, n)
	ns := "v2-memory"
	createNamespace(t, n, ns)
	bystanders := []*corev1.Pod{
		guaranteedBystander(ns),
		podOnNode(ns, "burstable-within-request", workloadContainer("memhog", "memhog", []string{"-rate-mib=50", "-target-mib=50"}, resources("memory", "128Mi"), nil)),
	}
	n.startPods(t, 2*time.Minute, bystanders...)
	oomBefore := n.oomKills(t)
	hog := n.createPod(t, podOnNode(ns, "hog", workloadContainer("memhog", "memhog", []string{"-rate-mib=100"}, resources("memory", "64Mi"), nil)))
	// The Node's own condition and taint, sampled while the episode runs.
	sampled := n.sampleMemoryPressure(250 * time.Millisecond)
	last := n.waitPodGone(t, ns, "hog", hog.UID, 4*time.Minute)
	lifetime := time.Since(hog.CreationTimestamp.Time)
	oom := n.oomKills(t) - oomBefore
	evicted := n.waitEvents(t, ns, "Evicted", 10*time.Second)
	if term := terminatedState(last, "memhog"); term != nil && term.Reason == "OOMKilled" {
		t.Errorf("hog was OOM-killed, not evicted: %s", describeStatus(last))
	}
	if oom != 0 {
		t.Errorf("the guest kernel OOM-killed %d process(es) during the episode, want 0", oom)
	}
	if len(evicted) != 1 || evicted[0].InvolvedObject.Name != "hog" || evicted[0].Source.Component != "evictiond" {
		t.Fatalf("Evicted events in %s: %s; want exactly one, for hog, from evictiond", ns, describeEvents(evicted))
	}
	if !strings.Contains(evicted[0].Message, "memory") {
		t.Errorf("Evicted event message %q does not name the starved resource", evicted[0].Message)
	}
	t.Logf("hog evicted %v after it was created: %s", lifetime.Round(time.Second), evicted[0].Message)
	for _, hurt := range n.hurtBystanders(bystanders) {
		t.Errorf("bystander hurt: %s", hurt)
	}
	// Cleared once the pressure is over (transition period 20 s), the kubelet's own status
	// updates notwithstanding.
	err := n.waitMemoryPressureClear(2 * time.Minute)
	sawCondition, sawTaint := sampled()
	if !sawCondition || !sawTaint {
		t.Errorf("during the episode: %s=True seen %v, taint %s seen %v; want both", kube.ConditionMemoryPressure, sawCondition, kube.TaintKeyMemoryPressure, sawTaint)
	}
	if err != nil {
		t.Errorf("%s and its taint not cleared within 2 minutes of the eviction: %v", kube.ConditionMemoryPressure, err)
	}
	kubeletReady, err := n.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err == nil {
		if c := nodeCondition(kubeletReady, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("the kubelet's Ready condition after the episode: %+v", c)
		}
	}
	_ = n.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
}

// testBrake is claim (2) on the v2 node: a pod the kubelet and containerd manage under
// kubepods.slice/…/cri-containerd-<id>.scope, allocating as fast as the VM allows and
// ignoring SIGTERM, is frozen through cgroup.freeze and killed through cgroup.kill once its
// eviction is accepted; no OOM kill, bystanders untouched; systemd, containerd and the
// kubelet are left consistent (the pod's status, no scope unit or cgroup of the pod left, no
// frozen cgroup anywhere in kubepods, the next pod starts).
func testBrake(t *testing.T, n *node) {
	ns := "v2-brake"
	createNamespace(t, n, ns)
	const fillerMiB = 1700
	bystanders := []*corev1.Pod{
		guaranteedBystander(ns),
		podOnNode(ns, "filler", workloadContainer("memhog", "memhog", []string{"-rate-mib=1000", fmt.Sprintf("-target-mib=%d", fillerMiB)}, resources("memory", fmt.Sprintf("%dMi", fillerMiB+100)), nil)),
	}
	n.startPods(t, 2*time.Minute, bystanders...)
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.vm.Sh(ctx, "cat /sys/fs/cgroup/kubepods.slice/memory.current")
		var cur int64
		fmt.Sscan(strings.TrimSpace(out), &cur)
		return err == nil && cur > int64(fillerMiB)<<20, nil
	})
	if err != nil {
		t.Fatalf("the filler did not reach %d MiB", fillerMiB)
	}
	oomBefore := n.oomKills(t)
	args := []string{"-rate-mib=4000", "-ignore-sigterm"}
	h1 := workloadContainer("memhog", "memhog", args, resources("memory", "64Mi"), nil)
	h2 := workloadContainer("memhog-2", "memhog", args, resources("memory", "64Mi"), nil)
	// As another user than the agent's: the agent holds no CAP_KILL here (AgentConfinesItself),
	// so kill(2) of the hog's processes would fail with EPERM and only cgroup.kill can kill it.
	hogPod := podOnNode(ns, "hog", h1, h2)
	hogPod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)}
	hog := n.createPod(t, hogPod)
	running := n.waitPod(t, ns, "hog", 2*time.Minute, "running", func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodPending })
	var ids []string
	for _, cs := range running.Status.ContainerStatuses {
		ids = append(ids, strings.TrimPrefix(cs.ContainerID, "containerd://"))
	}
	last := n.waitPodGone(t, ns, "hog", hog.UID, 3*time.Minute)
	oom := n.oomKills(t) - oomBefore
	if oom != 0 {
		t.Errorf("the guest kernel OOM-killed %d process(es) during the episode, want 0", oom)
	}
	if term := terminatedState(last, "memhog"); term != nil && term.Reason == "OOMKilled" {
		t.Errorf("hog was OOM-killed: %s", describeStatus(last))
	}
	var events []corev1.Event
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		events = append(n.events(t, ns, "Braked"), n.events(t, ns, "Evicted")...)
		return len(events) >= 2, nil
	})
	var braked []corev1.Event
	for _, e := range events {
		if e.Reason == "Braked" {
			braked = append(braked, e)
		}
	}
	if len(braked) != 1 || !strings.Contains(braked[0].Message, "killed") {
		t.Fatalf("Braked events: %s; want one saying the hog was frozen and killed\n--- evictiond ---\n%s", describeEvents(events), n.evictiondLog(t, 40))
	}
	t.Logf("Braked: %s", braked[0].Message)
	t.Logf("evictiond:\n%s", grepLines(n.evictiondLog(t, 400), "brake: pod"))
	for _, hurt := range n.hurtBystanders(bystanders) {
		t.Errorf("bystander hurt: %s", hurt)
	}
	// systemd, containerd and the kubelet consistent afterwards.
	uid := strings.ReplaceAll(string(hog.UID), "-", "_")
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.vm.Sh(ctx, "find /sys/fs/cgroup/kubepods.slice -name '*pod"+uid+"*' | head -n 3")
		return err == nil && strings.TrimSpace(out) == "", nil
	})
	if err != nil {
		t.Errorf("the hog's cgroups are still in kubepods.slice a minute after it was gone:\n%s", n.sh(t, "find /sys/fs/cgroup/kubepods.slice -name '*pod"+uid+"*'"))
	}
	for _, id := range ids {
		if out := n.sh(t, "systemctl list-units --all --no-legend 'cri-containerd-"+id+".scope' | grep -v 'not-found' || true"); out != "" {
			t.Errorf("systemd still has the hog's scope unit: %s", out)
		}
	}
	if frozen := n.sh(t, "grep -l '^frozen 1' $(find /sys/fs/cgroup/kubepods.slice -name cgroup.events) || true"); frozen != "" {
		t.Errorf("cgroups left frozen in kubepods.slice: %s", frozen)
	}
	if out := n.sh(t, "systemctl is-system-running || true"); out != "running" {
		t.Logf("systemd state after the brake: %s (%s)", out, n.sh(t, "systemctl --failed --no-legend || true"))
	}
	next := n.createPod(t, podOnNode(ns, "next", workloadContainer("idle", "idle", nil, resources("memory", "16Mi"), nil)))
	n.waitPod(t, ns, next.Name, 2*time.Minute, "Ready after the brake", podReady)
	_ = n.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
}

// waitMemoryPressureClear waits until the Node's EvictiondMemoryPressure condition is False
// and its taint is gone.
func (n *node) waitMemoryPressureClear(timeout time.Duration) error {
	return wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		no, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := nodeCondition(no, kube.ConditionMemoryPressure)
		return c != nil && c.Status == corev1.ConditionFalse && !nodeHasTaint(no, kube.TaintKeyMemoryPressure), nil
	})
}

// sampleMemoryPressure samples the Node's EvictiondMemoryPressure condition and taint every
// period until the returned func is called; it says whether each was seen.
func (n *node) sampleMemoryPressure(period time.Duration) (stop func() (condition, taint bool)) {
	var sawCondition, sawTaint bool
	stopSampling := sampleEvery(period, func() {
		no, err := n.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		if err != nil {
			return
		}
		if c := nodeCondition(no, kube.ConditionMemoryPressure); c != nil && c.Status == corev1.ConditionTrue {
			sawCondition = true
		}
		if nodeHasTaint(no, kube.TaintKeyMemoryPressure) {
			sawTaint = true
		}
	})
	return func() (bool, bool) {
		stopSampling()
		return sawCondition, sawTaint
	}
}

// sampleEvery calls sample every period on its own goroutine until the returned func is
// called, which returns once the last call is over: what sample wrote can be read then.
// sample must not fail the test (it runs off the test's goroutine).
func sampleEvery(period time.Duration, sample func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(period):
			}
			sample()
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func nodeCondition(no *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range no.Status.Conditions {
		if no.Status.Conditions[i].Type == typ {
			return &no.Status.Conditions[i]
		}
	}
	return nil
}

func nodeHasTaint(no *corev1.Node, key string) bool {
	for _, t := range no.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func grepLines(text, what string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
