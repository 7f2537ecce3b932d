//go:build nodev2

package nodev2

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// The reclaim-before-evict scenario's sizes, small for TCG: a reader's file read twice (its
// page cache on the active list, so in the working set the kubelet ranks by), a leak that
// stops at leakMiB, and a threshold reclaimDeltaMiB above what the pods use at the start, so
// that cache and leak together cross it and the leak alone does not.
const (
	reclaimCacheMiB  = 128
	reclaimLeakMiB   = 96
	reclaimLeakRate  = 16
	reclaimDeltaMiB  = 180
	reclaimMarginMiB = 24
)

// reclaimConfig is evictiond's configuration in the scenario: allocatableMemory.available's
// hard threshold at the scenario's, reclaim before evict on (margin 30Mi, a pod asked at most
// every 5 s).
func reclaimConfig(thresholdBytes int64) string {
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  memory.available: 100Mi
  allocatableMemory.available: "%d"
evictionPressureTransitionPeriod: 20s
evictionMaxPodGracePeriod: 5
loop: {interval: 1s, podCleanupTimeout: 30s}
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
exclusions: {daemonSetPods: true}
nodeStatus: {conditions: own}
memoryReclaim: {enabled: true, margin: %dMi, podInterval: 5s}
`, thresholdBytes, reclaimMarginMiB)
}

// reclaimOutcome is one run of the scenario, a row of docs/benchmarks.md's table.
type reclaimOutcome struct {
	setup          string
	evicted        []string // "pod by component"
	wrongVictims   int      // the cache reader evicted: its memory was the kernel's to take back
	oomKills       int64
	reclaimedBytes int64
	readerActive   int64 // the reader's active_file once it holds
	// readerAfter is the reader's memory.stat file, active_file and inactive_file at the
	// end, when it is still there.
	readerAfter string
}

// testReclaimBeforeEvict is reclaim before evict on the v2 node: a pod whose file's page
// cache (read twice: active, so in the working set) and a small leak push kubepods past
// allocatableMemory.available's threshold. The kubelet alone (evictiond in dry run, the
// kubelet's own threshold at the scenario's) evicts the cache reader; evictiond with
// memoryReclaim asks the reader's cgroup for its page cache through memory.reclaim and
// evicts nothing (or only the leak), never asks the Guaranteed bystander, no OOM kill.
func testReclaimBeforeEvict(t *testing.T, n *node) {
	start := time.Now()
	// The Guaranteed bystander serves both runs (one pod start less under TCG).
	createNamespace(t, n, "v2-reclaim")
	bystander := guaranteedBystander("v2-reclaim")
	n.startPods(t, 2*time.Minute, bystander)
	limit, ws := n.kubepodsMemory(t)
	threshold := limit - ws - reclaimDeltaMiB<<20
	t.Logf("kubepods.slice: memory.max %d MiB, working set %d MiB: allocatableMemory.available threshold %d MiB (crossed when the pods use %d MiB more)",
		limit>>20, ws>>20, threshold>>20, reclaimDeltaMiB)

	// The kubelet alone, its threshold the scenario's. evictiond's configuration in force (the
	// chart's or the scenarios') has memoryReclaim off and its thresholds gigabytes away.
	n.setKubeletEviction(t, map[string]string{"allocatableMemory.available": strconv.FormatInt(threshold>>20, 10) + "Mi"})
	t.Logf("%v: the kubelet restarted with the scenario's threshold", time.Since(start).Round(time.Second))
	kubeletOnly := n.reclaimEpisode(t, "v2-reclaim-kubelet", "kubelet only", 30*time.Second, bystander)
	t.Logf("%v: the kubelet-alone run done", time.Since(start).Round(time.Second))

	// evictiond with reclaim before evict; the kubelet back at its 100Mi backstop (its restart
	// also refreshes evictiond's ConfigMap volume).
	limit, ws = n.kubepodsMemory(t)
	threshold = limit - ws - reclaimDeltaMiB<<20
	reloaded := startConfig(t, n, reclaimConfig(threshold))
	n.setKubeletEviction(t, nil)
	reloaded()
	t.Logf("%v: the kubelet restored, evictiond reloaded", time.Since(start).Round(time.Second))
	withReclaim := n.reclaimEpisode(t, "v2-reclaim-evictiond", "evictiond + memoryReclaim", 10*time.Second, bystander)
	t.Logf("%v: the evictiond run done", time.Since(start).Round(time.Second))
	if asked := n.events(t, "v2-reclaim", "MemoryReclaimed"); len(asked) > 0 {
		t.Errorf("memory reclaimed from the Guaranteed bystander: %s", describeEvents(asked))
	}
	restored := startConfig(t, n, scenarioConfig)
	n.deleteNamespace(t, "v2-reclaim")
	restored()

	t.Logf("\n| setup | evictions | wrong victims | OOM kills | reclaimed | reader's active_file |\n|---|---|---|---|---|---|\n%s\n%s",
		kubeletOnly.row(), withReclaim.row())
	if len(kubeletOnly.evicted) == 0 {
		t.Errorf("the kubelet alone evicted nothing: the scenario did not reach its threshold (reader's active_file %d MiB)", kubeletOnly.readerActive>>20)
	}
	if withReclaim.wrongVictims != 0 {
		t.Errorf("evictiond with memoryReclaim evicted the cache reader: %v", withReclaim.evicted)
	}
	for _, e := range withReclaim.evicted {
		if !strings.HasPrefix(e, "leak ") {
			t.Errorf("evictiond with memoryReclaim evicted %s; only the leak may go", e)
		}
	}
	if withReclaim.reclaimedBytes <= 0 {
		t.Errorf("evictiond reclaimed nothing from the reader")
	}
	if withReclaim.oomKills != 0 {
		t.Errorf("%d OOM kills with evictiond, want 0", withReclaim.oomKills)
	}
}

func (r reclaimOutcome) row() string {
	ev := "0"
	if len(r.evicted) > 0 {
		ev = fmt.Sprintf("%d (%s)", len(r.evicted), strings.Join(r.evicted, ", "))
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %d MiB | %d MiB |", r.setup, ev, r.wrongVictims, r.oomKills, r.reclaimedBytes>>20, r.readerActive>>20)
}

// reclaimEpisode plays the scenario once in namespace ns and says what happened; it
// watches until the leak has reached its size and then for watch more (or until the
// reader is gone).
func (n *node) reclaimEpisode(t *testing.T, ns, setup string, watch time.Duration, bystander *corev1.Pod) reclaimOutcome {
	t.Helper()
	out := reclaimOutcome{setup: setup}
	createNamespace(t, n, ns)
	defer n.deleteNamespace(t, ns)
	reader := podOnNode(ns, "cache-reader", workloadContainer("diskfill", "diskfill",
		[]string{"-dir=/scratch", "-rate-mib=96", fmt.Sprintf("-target-mib=%d", reclaimCacheMiB), "-read-passes=2"}, resources("memory", "16Mi"), nil))
	reader.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	reader.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	// The leak starts with the reader (one pod start, not two, under TCG) and ramps once the
	// reader has had time to write and read its file.
	leak := podOnNode(ns, "leak", workloadContainer("memhog", "memhog",
		[]string{fmt.Sprintf("-rate-mib=%d", reclaimLeakRate), fmt.Sprintf("-target-mib=%d", reclaimLeakMiB), "-start-delay=15s"}, resources("memory", "16Mi"), nil))
	started := time.Now()
	oomBefore := n.oomKills(t)
	n.startPods(t, 2*time.Minute, reader, leak)
	ready := time.Since(started)
	readerPod := n.waitPodLog(t, ns, "cache-reader", "diskfill", "holding", 2*time.Minute)
	t.Logf("%s: the reader Ready after %v, holding its page cache after %v", setup, ready.Round(time.Second), time.Since(started).Round(time.Second))
	out.readerActive = n.podMemoryStat(t, readerPod, "active_file")
	t.Logf("%s: the reader holds %d MiB of page cache, %d MiB active", setup, n.podMemoryStat(t, readerPod, "file")>>20, out.readerActive>>20)
	if out.readerActive < reclaimCacheMiB<<20/2 {
		t.Fatalf("the reader's page cache is not on the active list (%d MiB active of %d MiB): the working set does not count it and the scenario shows nothing",
			out.readerActive>>20, reclaimCacheMiB)
	}

	// The leak at its size (under TCG its ramp takes 20-60 s), then watch more: the kubelet
	// acts on its 10 s housekeeping; the watch ends early once the reader is gone.
	n.waitPodLog(t, ns, "leak", "memhog", fmt.Sprintf("allocated=%dMiB", reclaimLeakMiB), 3*time.Minute)
	t.Logf("%s: the leak at its size %v after the episode began", setup, time.Since(started).Round(time.Second))
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, watch, true, func(ctx context.Context) (bool, error) {
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, "cache-reader", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && (podFinished(p) || p.DeletionTimestamp != nil), nil
	})
	out.oomKills = n.oomKills(t) - oomBefore
	for _, e := range n.events(t, ns, "Evicted") {
		out.evicted = append(out.evicted, e.InvolvedObject.Name+" by "+e.Source.Component)
		if e.InvolvedObject.Name == "cache-reader" {
			out.wrongVictims++
		}
	}
	for _, e := range n.events(t, ns, "MemoryReclaimed") {
		if e.InvolvedObject.Name != "cache-reader" {
			t.Errorf("%s: memory reclaimed from %s: %s", setup, e.InvolvedObject.Name, e.Message)
		}
	}
	out.reclaimedBytes = n.reclaimedFromLog(t, ns)
	if p, err := n.client.CoreV1().Pods(ns).Get(context.Background(), "cache-reader", metav1.GetOptions{}); err == nil && !podFinished(p) {
		out.readerAfter = fmt.Sprintf("file %d MiB, active_file %d MiB, inactive_file %d MiB", n.podMemoryStat(t, p, "file")>>20,
			n.podMemoryStat(t, p, "active_file")>>20, n.podMemoryStat(t, p, "inactive_file")>>20)
	}
	leakLog := n.sh(t, fmt.Sprintf("tail -n 1 /var/log/pods/%s_leak_*/memhog/*.log 2>/dev/null || true", ns))
	if hurt := n.hurtBystanders([]*corev1.Pod{bystander}); len(hurt) > 0 {
		t.Errorf("%s: Guaranteed bystander hurt: %v", setup, hurt)
	}
	t.Logf("%s: %s; the reader at the end: %s; the leak's last line: %s\n--- evictiond ---\n%s", setup, out.row(), out.readerAfter, leakLog,
		grepRegexp(n.evictiondLog(t, 2000), `memory reclaim|reclaimed|evicted|would evict`))
	return out
}

// kubepodsMemory reads kubepods.slice's memory.max and working set (memory.current -
// inactive_file): what allocatableMemory.available is computed from, by the kubelet
// (cAdvisor's pods container) and by evictiond alike.
func (n *node) kubepodsMemory(t *testing.T) (limit, ws int64) {
	t.Helper()
	f := strings.Fields(n.sh(t, "cd /sys/fs/cgroup/kubepods.slice && cat memory.max memory.current && awk '$1 == \"inactive_file\" {print $2}' memory.stat"))
	if len(f) != 3 {
		t.Fatalf("reading kubepods.slice's memory: %v", f)
	}
	var v [3]int64
	for i := range f {
		var err error
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			t.Fatalf("kubepods.slice's memory: %q: %v", f[i], err)
		}
	}
	return v[0], v[1] - v[2]
}

// podMemoryStat reads a key of a Burstable pod's memory.stat in the guest.
func (n *node) podMemoryStat(t *testing.T, pod *corev1.Pod, key string) int64 {
	t.Helper()
	dir := fmt.Sprintf("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice", strings.ReplaceAll(string(pod.UID), "-", "_"))
	v, err := strconv.ParseInt(n.sh(t, fmt.Sprintf("awk '$1 == %q {print $2}' %s/memory.stat", key, dir)), 10, 64)
	if err != nil {
		t.Fatalf("reading %s of %s/memory.stat: %v", key, dir, err)
	}
	return v
}

// waitPodLog waits until a container's log on the node has a line containing text.
func (n *node) waitPodLog(t *testing.T, ns, name, container, text string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	pod, err := n.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("cat /var/log/pods/%s_%s_%s/%s/*.log 2>/dev/null || true", ns, name, pod.UID, container)
	var last string
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last = n.sh(t, script)
		return strings.Contains(last, text), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: no %q in its log within %v:\n%s", ns, name, text, timeout, last)
	}
	return pod
}

// reclaimedFromLog sums the bytes evictiond's log says pods of ns gave back.
func (n *node) reclaimedFromLog(t *testing.T, ns string) int64 {
	t.Helper()
	var total int64
	for _, line := range strings.Split(n.evictiondLog(t, 100000), "\n") {
		i := strings.IndexByte(line, '{')
		if i < 0 || !strings.Contains(line, "pod memory reclaimed") {
			continue
		}
		var rec struct {
			Pod        string `json:"pod"`
			FreedBytes int64  `json:"freedBytes"`
		}
		if json.Unmarshal([]byte(line[i:]), &rec) == nil && strings.HasPrefix(rec.Pod, ns+"/") {
			total += rec.FreedBytes
		}
	}
	return total
}

// setKubeletEviction restarts the kubelet with extra evictionHard thresholds (nil: its
// configuration at boot) and waits until the Node reports Ready again after the restart.
func (n *node) setKubeletEviction(t *testing.T, extra map[string]string) {
	t.Helper()
	cfg := kubeletConfiguration()
	for k, v := range extra {
		cfg.EvictionHard[k] = v
	}
	n.restartKubelet(t, cfg)
}

// restartKubelet restarts the kubelet with cfg and waits until the Node reports Ready
// again after the restart.
func (n *node) restartKubelet(t *testing.T, cfg kubeletv1beta1.KubeletConfiguration) {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.vm.WriteFile(context.Background(), guestKubelet, data); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	n.sh(t, "systemctl restart kubelet")
	// A fresh heartbeat of Ready=True: the restarted kubelet is syncing (and its eviction
	// manager, started with it, is running).
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		no, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := nodeCondition(no, corev1.NodeReady)
		// Heartbeats are kept to the second: one posted within the restart's own second
		// truncates to it, and the next comes only with nodeStatusReportFrequency.
		return c != nil && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(restarted.Truncate(time.Second)), nil
	})
	if err != nil {
		t.Fatalf("the kubelet did not report Ready within 2 minutes of its restart")
	}
}

// deleteNamespace deletes ns and waits until its pods are gone from the node.
func (n *node) deleteNamespace(t *testing.T, ns string) {
	t.Helper()
	_ = n.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
}

// grepRegexp keeps the lines of text that match pattern.
func grepRegexp(text, pattern string) string {
	re := regexp.MustCompile(pattern)
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
