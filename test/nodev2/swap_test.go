//go:build nodev2

package nodev2

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/kube"
)

// The swap scenario's sizes: a swap file of swapFileMiB on the node's disk; the swapper, a
// Burstable pod requesting swapRequestMiB with a limit of swapLimitMiB, which the kubelet's
// LimitedSwap lets swap request/MemTotal of the swap (~265 MiB here); it allocates its
// limit and a quarter of that allowance on top, then holds, so the kernel swaps it out at
// its own memory.max while the node's memory stays far from any threshold. The allowance
// is kept well above what the swapper needs: a first version at 512 MiB of swap (allowance
// 133 MiB, the swapper at limit + 100 MiB) was OOM-killed with its allowance full and only
// 1104-1120 MiB of anonymous memory in its 1200 MiB, the rest of memory.current being pages
// on their way to swap.
const (
	swapFileMiB    = 1024
	swapRequestMiB = 1024
	swapLimitMiB   = 1200
)

// swapConfig is evictiond's configuration in the scenario: the kubelet's memory.available
// and a swap.available threshold (bytes), which no default sets.
func swapConfig(threshold int64) string {
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard: {memory.available: 100Mi, swap.available: "%d"}
evictionPressureTransitionPeriod: 20s
evictionMaxPodGracePeriod: 5
loop: {interval: 1s, podCleanupTimeout: 30s}
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
exclusions: {daemonSetPods: true}
nodeStatus: {conditions: own}
`, threshold)
}

// swapOutcome is one run of the scenario, a row of docs/benchmarks.md's table.
type swapOutcome struct {
	setup        string
	evicted      []string // "pod by component"
	wrongVictims int      // the BestEffort bystander evicted: it holds no swap
	oomKills     int64
	podSwap      int64 // the swapper's memory.swap.current at its peak sample
	nodeSwap     int64 // SwapTotal - SwapFree then
	memAvailable int64 // MemAvailable then
}

func (r swapOutcome) row() string {
	ev := "0"
	if len(r.evicted) > 0 {
		ev = fmt.Sprintf("%d (%s)", len(r.evicted), strings.Join(r.evicted, ", "))
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %d MiB | %d MiB | %d MiB |", r.setup, ev, r.wrongVictims, r.oomKills, r.podSwap>>20, r.nodeSwap>>20, r.memAvailable>>20)
}

// testSwapPressure is swap-aware eviction on the v2 node: with a swap file and the
// kubelet's LimitedSwap, a Burstable pod allocates past its memory limit into its swap
// allowance, filling the node's swap while memory.available stays gigabytes above its
// threshold. The kubelet alone (no swap signal) evicts nothing; evictiond with
// swap.available evicts the swapper — not the BestEffort bystander, which is further
// above its request by working set but holds no swap — and its MemoryPressure condition
// names swap.available. No OOM kill in either run. Runs last: it leaves the kubelet on
// LimitedSwap (the swap itself is turned off at the end).
func testSwapPressure(t *testing.T, n *node) {
	start := time.Now()
	n.sh(t, fmt.Sprintf("f=/var/lib/kubelet/swapfile; fallocate -l %dM $f && chmod 600 $f && mkswap $f >/dev/null && swapon $f", swapFileMiB))
	t.Cleanup(func() { n.sh(t, "swapoff /var/lib/kubelet/swapfile; rm -f /var/lib/kubelet/swapfile") })
	cfg := kubeletConfiguration()
	cfg.MemorySwap.SwapBehavior = "LimitedSwap"
	n.restartKubelet(t, cfg) // the kubelet reads the swap's size at start
	memTotal, swapTotal := n.meminfo(t, "MemTotal"), n.meminfo(t, "SwapTotal")
	allowance := int64(float64(swapRequestMiB<<20) / float64(memTotal) * float64(swapTotal)) // calcSwapForBurstablePods
	target := swapLimitMiB + allowance/4>>20
	t.Logf("%v: swap on (%d MiB), the kubelet on LimitedSwap; the swapper's allowance %d MiB, its target %d MiB",
		time.Since(start).Round(time.Second), swapTotal>>20, allowance>>20, target)

	createNamespace(t, n, "v2-swap")
	bystander := podOnNode("v2-swap", "besteffort", workloadContainer("memhog", "memhog", []string{"-rate-mib=100", "-target-mib=200"}, nil, nil))
	n.startPods(t, 2*time.Minute, bystander)

	// The kubelet alone: evictiond's configuration in force has no swap threshold.
	kubeletOnly := n.swapEpisode(t, "v2-swap-kubelet", "kubelet only", target, allowance, 15*time.Second, bystander)
	t.Logf("%v: the kubelet-alone run done", time.Since(start).Round(time.Second))
	if kubeletOnly.podSwap < 16<<20 {
		t.Fatalf("the swapper held %d MiB of swap at most: the scenario showed nothing", kubeletOnly.podSwap>>20)
	}
	// evictiond's threshold: crossed when the swapper holds half of what it held alone.
	threshold := swapTotal - kubeletOnly.nodeSwap + kubeletOnly.podSwap/2
	t.Logf("swap.available threshold %d MiB of %d MiB", threshold>>20, swapTotal>>20)
	setConfig(t, n, swapConfig(threshold))
	withSwap := n.swapEpisode(t, "v2-swap-evictiond", "evictiond + swap.available", target, allowance, 0, bystander)
	t.Logf("%v: the evictiond run done", time.Since(start).Round(time.Second))
	restored := startConfig(t, n, scenarioConfig)
	n.deleteNamespace(t, "v2-swap")
	restored()

	t.Logf("\n| setup | evictions | wrong victims | OOM kills | swapper's swap | node swap used | MemAvailable |\n|---|---|---|---|---|---|---|\n%s\n%s",
		kubeletOnly.row(), withSwap.row())
	if len(kubeletOnly.evicted) != 0 {
		t.Errorf("the kubelet alone evicted %v; it has no swap signal and memory.available was %d MiB", kubeletOnly.evicted, kubeletOnly.memAvailable>>20)
	}
	if len(withSwap.evicted) != 1 || !strings.HasPrefix(withSwap.evicted[0], "swapper by "+kube.EventComponent) {
		t.Errorf("evictiond with swap.available evicted %v, want the swapper", withSwap.evicted)
	}
	for _, o := range []swapOutcome{kubeletOnly, withSwap} {
		if o.oomKills != 0 || o.wrongVictims != 0 {
			t.Errorf("%s: %d OOM kills, %d wrong victims; want none", o.setup, o.oomKills, o.wrongVictims)
		}
	}
}

// swapEpisode plays one run in namespace ns: the swapper ramps to target MiB; the run
// ends when it is evicted, or watch after it reached its size.
func (n *node) swapEpisode(t *testing.T, ns, setup string, target, allowance int64, watch time.Duration, bystander *corev1.Pod) swapOutcome {
	t.Helper()
	out := swapOutcome{setup: setup}
	createNamespace(t, n, ns)
	defer n.deleteNamespace(t, ns)
	swapper := podOnNode(ns, "swapper", workloadContainer("memhog", "memhog",
		[]string{"-rate-mib=100", fmt.Sprintf("-target-mib=%d", target)},
		resources("memory", strconv.Itoa(swapRequestMiB)+"Mi"), resources("memory", strconv.Itoa(swapLimitMiB)+"Mi")))
	oomBefore := n.oomKills(t)
	began := time.Now()
	n.startPods(t, 2*time.Minute, swapper)
	pod, err := n.client.CoreV1().Pods(ns).Get(context.Background(), "swapper", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := fmt.Sprintf("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice", strings.ReplaceAll(string(pod.UID), "-", "_"))
	// The sandbox's scope is there too, with no swap limit of its own ("max"): the largest number is the container's.
	swapMax := n.sh(t, "cat "+dir+"/cri-containerd-*.scope/memory.swap.max | grep -vx max | sort -n | tail -n 1")
	if v, err := strconv.ParseInt(swapMax, 10, 64); err != nil || v < allowance/2 {
		t.Fatalf("%s: the swapper's container has memory.swap.max %q, want LimitedSwap's ~%d MiB", setup, swapMax, allowance>>20)
	}
	// Sample the pod's and the node's swap every second until the swapper is gone, or
	// until watch after its ramp reached its target.
	var reachedAt time.Time
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, "swapper", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && (podFinished(p) || p.DeletionTimestamp != nil) {
			return true, nil
		}
		f := strings.Fields(n.sh(t, "cat "+dir+"/memory.swap.current 2>/dev/null || echo 0; awk '$1 == \"SwapTotal:\" || $1 == \"SwapFree:\" || $1 == \"MemAvailable:\" {print $2}' /proc/meminfo"))
		if len(f) == 4 {
			pod, _ := strconv.ParseInt(f[0], 10, 64)
			memAvail, _ := strconv.ParseInt(f[1], 10, 64)
			total, _ := strconv.ParseInt(f[2], 10, 64)
			free, _ := strconv.ParseInt(f[3], 10, 64)
			if pod >= out.podSwap {
				out.podSwap, out.nodeSwap, out.memAvailable = pod, (total-free)<<10, memAvail<<10
			}
		}
		if reachedAt.IsZero() && strings.Contains(n.sh(t, fmt.Sprintf("tail -n 2 /var/log/pods/%s_swapper_%s/memhog/*.log 2>/dev/null || true", ns, p.UID)),
			fmt.Sprintf("allocated=%dMiB", target)) {
			reachedAt = time.Now()
			t.Logf("%s: the swapper at %d MiB %v after it was created", setup, target, reachedAt.Sub(began).Round(time.Second))
		}
		return !reachedAt.IsZero() && time.Since(reachedAt) >= watch && watch > 0, nil
	})
	if err != nil {
		t.Errorf("%s: the swapper neither left nor reached %d MiB within 3 minutes", setup, target)
	}
	if watch == 0 {
		// OOM kills are counted once the victim has stopped: it may still allocate while it
		// terminates. The recorder's Event may trail the pod's deletion.
		n.waitPodGone(t, ns, "swapper", pod.UID, time.Minute)
		n.waitEvents(t, ns, "Evicted", 30*time.Second)
	}
	out.oomKills = n.oomKills(t) - oomBefore
	for _, namespace := range []string{ns, bystander.Namespace} {
		for _, e := range n.events(t, namespace, "Evicted") {
			out.evicted = append(out.evicted, e.InvolvedObject.Name+" by "+e.Source.Component)
			if e.InvolvedObject.Name == bystander.Name {
				out.wrongVictims++
			}
			t.Logf("%s: Evicted %s: %s", setup, e.InvolvedObject.Name, e.Message)
		}
	}
	if no, err := n.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{}); err == nil {
		if c := nodeCondition(no, kube.ConditionMemoryPressure); c != nil {
			t.Logf("%s: %s %s: %s", setup, c.Type, c.Status, c.Message)
			if len(out.evicted) > 0 && (c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "swap.available")) {
				t.Errorf("%s: %s is %s %q after a swap eviction, want True naming swap.available", setup, c.Type, c.Status, c.Message)
			}
		}
	}
	t.Logf("%s: %s\n--- evictiond ---\n%s", setup, out.row(), grepRegexp(n.evictiondLog(t, 2000), `swap|threshold met|evict`))
	return out
}

// meminfo reads one /proc/meminfo field of the guest, in bytes.
func (n *node) meminfo(t *testing.T, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(n.sh(t, fmt.Sprintf("awk '$1 == %q {print $2}' /proc/meminfo", key+":")), 10, 64)
	if err != nil {
		t.Fatalf("reading %s of the guest's /proc/meminfo: %v", key, err)
	}
	return v << 10
}
