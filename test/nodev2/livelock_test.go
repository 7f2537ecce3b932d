//go:build nodev2

package nodev2

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
)

// livelockWindow is livelock.window in the scenario: long enough that a pod's start (its
// file written at the limit) is not taken for a livelock, short for the tier's time.
const livelockWindow = 20 * time.Second

// livelockConfig is evictiond's configuration in the livelock scenario, livelock.restart on
// or off. livelock.fullStall is 8%: the looping pod's own full avg10 reads 11-25% under TCG
// once its 10 s average has filled (the emulated page-fault path is most of each refault's
// time, and the kernel counts it as running, not stalled); an idle pod's reads 0.
func livelockConfig(restart bool) string {
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard: {memory.available: 100Mi}
evictionPressureTransitionPeriod: 20s
evictionMaxPodGracePeriod: 5
loop: {interval: 1s, podCleanupTimeout: 30s}
exclusions: {daemonSetPods: true}
nodeStatus: {conditions: own}
livelock: {window: %s, fullStall: "8%%", restart: {enabled: %v}}
`, livelockWindow, restart)
}

// livelocker is a pod that livelocks at its memory limit: it writes a 52 MiB file into an
// emptyDir under a 48Mi limit, maps it and touches every page in turn forever. All its
// memory is clean page cache: the kernel can always reclaim a page for the next one, so it
// never OOM-kills, and the next lap refaults what it reclaimed. A file just above the limit
// keeps the refault distance short, so the refaults count as thrashing in memory.pressure.
func livelocker(ns, name string) *corev1.Pod {
	p := podOnNode(ns, name, workloadContainer("diskfill", "diskfill",
		[]string{"-dir=/scratch", "-rate-mib=200", "-target-mib=52", "-mmap-loop"}, resources("memory", "16Mi"), resources("memory", "48Mi")))
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	return p
}

// testLivelock is livelock at the limit on the v2 kernel. With livelock.restart on, a pod
// looping over a file-backed working set larger than its limit is evicted (through the
// Eviction API) once it has sat at its limit, fully stalled, without an OOM kill, for the
// window. With it off, the same pod is reported (a MemoryLivelock Event with its numbers)
// and left alone: nothing else acts on it, the kubelet included — it stays Running, never
// restarted, never OOM-killed. Neither sets the node's MemoryPressure or touches the
// bystander.
func testLivelock(t *testing.T, n *node) {
	ns := "v2-livelock"
	createNamespace(t, n, ns)
	reloaded := startConfig(t, n, livelockConfig(true))
	bystanders := []*corev1.Pod{guaranteedBystander(ns)}
	n.startPods(t, 2*time.Minute, bystanders...)
	reloaded()
	oomBefore := n.oomKills(t)
	// An earlier scenario's node pressure may still be within its transition period (20 s):
	// this one's sampler must see only its own.
	if err := n.waitMemoryPressureClear(time.Minute); err != nil {
		t.Fatalf("the node still under %s a minute into the scenario, before any livelock: %v", kube.ConditionMemoryPressure, err)
	}
	sampled := n.sampleMemoryPressure(time.Second)

	// With the restart: evicted within the window (and a pass or two).
	restarted := n.createPod(t, livelocker(ns, "livelock-restart"))
	loopStart := n.waitPodLog(t, ns, restarted.Name, "diskfill", "mmap loop over", 2*time.Minute)
	t0 := time.Now()
	psi := n.samplePodPSI(loopStart, 2*time.Second)
	evicted := n.waitEvents(t, ns, "Evicted", livelockWindow+time.Minute)
	restartAfter := time.Since(t0)
	samples := psi()
	t.Logf("the looping pod's own cgroup, every 2 s (memory.current/memory.max, full avg10 avg60, oom_kill):\n%s", strings.Join(samples, "\n"))
	if len(evicted) == 0 {
		t.Fatalf("livelock.restart on: no eviction within %v of the loop's start\n--- evictiond ---\n%s", livelockWindow+time.Minute,
			grepRegexp(n.evictiondLog(t, 2000), `livelock|evict`))
	}
	if e := evicted[0]; e.InvolvedObject.Name != restarted.Name || !strings.Contains(e.Message, "livelocked at its memory limit") {
		t.Fatalf("Evicted %s: %s; want %s for its livelock", e.InvolvedObject.Name, e.Message, restarted.Name)
	}
	t.Logf("restarted %v after the loop began (livelock.window %v): %s", restartAfter.Round(100*time.Millisecond), livelockWindow, evicted[0].Message)
	if restartAfter < livelockWindow {
		t.Errorf("evicted %v after the loop began, before livelock.window %v", restartAfter, livelockWindow)
	}
	n.waitPodGone(t, ns, restarted.Name, restarted.UID, time.Minute)

	// Without it: reported, and left alone by everyone.
	startConfig(t, n, livelockConfig(false))()
	reportOnly := n.createPod(t, livelocker(ns, "livelock-report"))
	n.waitPodLog(t, ns, reportOnly.Name, "diskfill", "mmap loop over", 2*time.Minute)
	t0 = time.Now()
	// The restarted pod has its MemoryLivelock Event too: wait for this one's.
	var mine *corev1.Event
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, livelockWindow+time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, e := range n.events(t, ns, "MemoryLivelock") {
			if e.InvolvedObject.Name == reportOnly.Name {
				mine = &e
			}
		}
		return mine != nil, nil
	})
	reportAfter := time.Since(t0)
	if mine == nil {
		t.Fatalf("no MemoryLivelock Event on %s within %v of the loop's start\n--- evictiond ---\n%s", reportOnly.Name, livelockWindow+time.Minute,
			grepRegexp(n.evictiondLog(t, 2000), `livelock`))
	}
	t.Logf("reported %v after the loop began: %s", reportAfter.Round(100*time.Millisecond), mine.Message)
	// What the node does about it, evictiond only reporting: watch it go on for 15 s more.
	var last *corev1.Pod
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 15*time.Second, true, func(context.Context) (bool, error) {
		// Not ctx: the poll's deadline must not fail the last Get.
		p, err := n.client.CoreV1().Pods(ns).Get(context.Background(), reportOnly.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the reported pod: %v", err)
		}
		last = p
		return last.Status.Phase != corev1.PodRunning || last.Status.ContainerStatuses[0].RestartCount != 0, nil
	})
	aliveFor := time.Since(t0)
	progress := grepLines(n.sh(t, fmt.Sprintf("tail -n 3 /var/log/pods/%s_%s_%s/diskfill/*.log", ns, reportOnly.Name, reportOnly.UID)), "mmap loop:")
	t.Logf("livelock.restart off: %s %v after its loop began; its own progress (pages per 5 s): %s", describeStatus(last), aliveFor.Round(time.Second), progress)
	if last.Status.Phase != corev1.PodRunning || last.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("livelock.restart off: the pod was acted on: %s", describeStatus(last))
	}
	if got := n.events(t, ns, "Evicted"); len(got) != 1 {
		t.Errorf("Evicted Events %s: want only the restarted pod's", describeEvents(got))
	}
	if c, _ := sampled(); c {
		t.Errorf("%s set for a pod's livelock at its own limit", kube.ConditionMemoryPressure)
	}
	for _, hurt := range n.hurtBystanders(bystanders) {
		t.Errorf("bystander hurt: %s", hurt)
	}
	if oom := n.oomKills(t) - oomBefore; oom != 0 {
		t.Errorf("the kernel OOM-killed %d process(es): the workload is meant to livelock, not to be OOM-killed", oom)
	}
	t.Logf("evictiond:\n%s", grepRegexp(n.evictiondLog(t, 2000), `livelock`))
	restored := startConfig(t, n, scenarioConfig)
	n.deleteNamespace(t, ns)
	restored()
}

// samplePodPSI reads a Burstable pod's own memory.current, memory.max, memory.pressure
// full line and memory.events oom_kill every period until the returned func is called,
// which returns one line per sample.
func (n *node) samplePodPSI(pod *corev1.Pod, period time.Duration) (stop func() []string) {
	dir := fmt.Sprintf("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice", strings.ReplaceAll(string(pod.UID), "-", "_"))
	script := fmt.Sprintf(`cd %s 2>/dev/null && echo "$(cat memory.current)/$(cat memory.max) $(awk '$1 == "full" {print $2, $3}' memory.pressure) $(awk '$1 == "oom_kill"' memory.events)"`, dir)
	var out []string
	start := time.Now()
	stopSampling := sampleEvery(period, func() {
		// Not n.sh: the sampler must not fail the test; the pod's cgroup goes with it.
		r, err := n.vm.Sh(context.Background(), script)
		if err == nil {
			out = append(out, fmt.Sprintf("%5.1fs %s", time.Since(start).Seconds(), strings.TrimSpace(r)))
		}
	})
	return func() []string {
		stopSampling()
		return out
	}
}
