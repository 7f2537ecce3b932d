//go:build nodev2 && bench_node

package nodev2

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/internal/testenv/vm"
)

// benchThreshold is the allocatableMemory.available threshold every actor works to: evictiond's
// hard threshold, or the kubelet's own in the kubelet-only setup.
const benchThreshold = 500 << 20

// benchConfig is evictiond's configuration in the bench: the hard threshold, the fast path,
// the brake on or off; nothing else that could act.
func benchConfig(brake bool) string {
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  allocatableMemory.available: 500Mi
evictionPressureTransitionPeriod: 20s
evictionMaxPodGracePeriod: 5
loop: {interval: 1s, podCleanupTimeout: 30s}
notifier: {psi: {enabled: true}, pollInterval: 100ms}
eviction:
  rateLimits: {maxPerPass: 1, perMinute: 30, burst: 5, cooldown: 1s}
brake: {enabled: %t}
exclusions: {daemonSetPods: true}
nodeStatus: {conditions: own}
`, brake)
}

type benchRate struct {
	label   string
	rateMiB int
	hogs    int
}

type benchResult struct {
	setup, rate          string
	oomKills             int64
	bystandersHurt       int
	request, frozen      time.Duration // from the crossing; -1: did not act
	lowestHeadroom       int64
	achievedMiBps        float64
	evictedBy, hogEnding string
}

// TestBenchNodeV2 is `make bench-node-v2`: memory ramps on the cgroup v2 node against the
// kubelet alone (its own threshold at 500Mi), evictiond, and evictiond with the brake, at a
// slow rate and the fastest the VM allows; prints the table of docs/benchmarks.md (the v2 rows).
func TestBenchNodeV2(t *testing.T) {
	runs := 2
	if v, err := strconv.Atoi(os.Getenv("BENCH_NODE_RUNS")); err == nil && v > 0 {
		runs = v
	}
	rates := []benchRate{{"100", 100, 1}, {"max", 4000, 2}}
	n := startNode(t)
	var results []benchResult
	// evictiond with the brake, then without, with the kubelet as the 100Mi backstop (its
	// configuration at boot); then the kubelet alone with the threshold at 500Mi.
	file := filepath.Join(n.dir, "bench-config.yaml")
	for i, setup := range []string{"evictiond + brake", "evictiond", "kubelet only"} {
		switch setup {
		case "evictiond + brake", "evictiond":
			if err := os.WriteFile(file, []byte(benchConfig(setup == "evictiond + brake")), 0o644); err != nil {
				t.Fatal(err)
			}
			verb := "install"
			if i > 0 {
				verb = "upgrade"
			}
			n.helmRun(t, verb, "evictiond", "charts/evictiond", "--namespace", evictiondNamespace, "--create-namespace", "--set-file", "configYAML="+file, noEvictionWebhook)
			var old types.UID
			if i > 0 {
				// A new pod, so that the fields that take effect on restart (the brake) do.
				p := n.evictiondPod(t, "", time.Minute)
				old = p.UID
				_ = n.client.CoreV1().Pods(evictiondNamespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
			}
			n.evictiondPod(t, old, 3*time.Minute)
		case "kubelet only":
			n.helmRun(t, "uninstall", "evictiond", "--namespace", evictiondNamespace, "--wait")
			cfg := kubeletConfiguration()
			cfg.EvictionHard["allocatableMemory.available"] = "500Mi"
			data, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.vm.WriteFile(context.Background(), guestKubelet, data); err != nil {
				t.Fatal(err)
			}
			n.sh(t, "systemctl restart kubelet")
			time.Sleep(10 * time.Second) // the kubelet's first status update and eviction manager
		}
		for _, rate := range rates {
			for run := range runs {
				r := runBenchEpisode(t, n, setup, rate, fmt.Sprintf("bench-%d-%s-%d", i, rate.label, run))
				t.Logf("%s %s run %d: %+v", setup, rate.label, run, r)
				results = append(results, r)
			}
		}
	}
	t.Logf("\n%s", benchTable(results))
}

// runBenchEpisode plays one ramp: two bystanders (a Guaranteed pod, a Burstable pod within its
// request), the hog, kubepods.slice sampled every 5 ms from inside the guest.
func runBenchEpisode(t *testing.T, n *node, setup string, rate benchRate, ns string) benchResult {
	ctx := context.Background()
	res := benchResult{setup: setup, rate: rate.label, request: -1, frozen: -1}
	createNamespace(t, n, ns)
	bystanders := []*corev1.Pod{
		guaranteedBystander(ns),
		podOnNode(ns, "burstable", workloadContainer("memhog", "memhog", []string{"-rate-mib=64", "-target-mib=64"}, resources("memory", "128Mi"), nil)),
	}
	n.startPods(t, 3*time.Minute, bystanders...)
	oomBefore := n.oomKills(t)
	if err := n.vm.StartSampling(ctx, "/sys/fs/cgroup/kubepods.slice", 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var hogs []corev1.Container
	for i := range rate.hogs {
		h := workloadContainer("memhog", "memhog", []string{"-rate-mib=" + strconv.Itoa(rate.rateMiB)}, resources("memory", "64Mi"), nil)
		if i > 0 {
			h.Name = fmt.Sprintf("memhog-%d", i+1)
		}
		hogs = append(hogs, h)
	}
	hog := n.createPod(t, podOnNode(ns, "hog", hogs...))
	last := n.waitPodGone(t, ns, "hog", hog.UID, 3*time.Minute)
	time.Sleep(5 * time.Second) // a second eviction on stale numbers would be counted
	samples, err := n.vm.StopSampling(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res.oomKills = n.oomKills(t) - oomBefore
	if term := terminatedState(last, "memhog"); term != nil {
		res.hogEnding = term.Reason
	}
	res.bystandersHurt = len(n.hurtBystanders(bystanders))
	for _, e := range n.events(t, ns, "Evicted") {
		res.evictedBy += e.Source.Component + ":" + e.InvolvedObject.Name + " "
	}
	crossing, headroom, mibps := crossingOf(samples)
	res.lowestHeadroom, res.achievedMiBps = headroom, mibps
	if !crossing.IsZero() {
		switch setup {
		case "kubelet only":
			if at, ok := n.kubeletEvictionTime(t, crossing.Add(-30*time.Second)); ok {
				res.request = at.Sub(crossing)
			}
		default:
			log := n.evictiondLog(t, 5000)
			if at, ok := evictiondLogTime(log, "evicted pod", ns, "time"); ok {
				res.request = at.Sub(crossing)
			}
			if at, ok := evictiondLogTime(log, "brake: pod frozen", ns, "frozenAt"); ok {
				res.frozen = at.Sub(crossing)
			}
		}
	}
	_ = n.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := n.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err != nil, nil
	})
	return res
}

// crossingOf finds the first sample below the threshold, the lowest headroom (the limit less
// the working set) and the rate over the second before the crossing.
func crossingOf(samples []vm.MemorySample) (time.Time, int64, float64) {
	var crossing time.Time
	lowest := int64(1 << 62)
	var rate float64
	for i, s := range samples {
		if s.Max <= 0 {
			continue
		}
		head := s.Max - s.WorkingSet()
		lowest = min(lowest, head)
		if crossing.IsZero() && head < benchThreshold {
			crossing = time.Unix(0, s.At)
			for j := i; j >= 0; j-- {
				if s.At-samples[j].At >= int64(time.Second) {
					rate = float64(s.WorkingSet()-samples[j].WorkingSet()) / float64(1<<20) / (float64(s.At-samples[j].At) / 1e9)
					break
				}
			}
		}
	}
	return crossing, lowest, rate
}

// evictiondLogTime finds the first log line of evictiond with msg about a pod in ns and
// returns its field (an RFC 3339 time).
func evictiondLogTime(log, msg, ns, field string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, "{")
		if i < 0 || !strings.Contains(line, `"msg":"`+msg) || !strings.Contains(line, ns+"/") {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line[i:]), &rec) != nil {
			continue
		}
		s, _ := rec[field].(string)
		if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}

// kubeletEvictionTime is when the kubelet's eviction manager decided to evict, after since
// (its journal, the guest's clock).
func (n *node) kubeletEvictionTime(t *testing.T, since time.Time) (time.Time, bool) {
	out := n.sh(t, fmt.Sprintf("journalctl -u kubelet -o short-iso-precise --no-pager --since @%d | grep 'must evict pod' | head -n 1", since.Unix()))
	if out == "" {
		return time.Time{}, false
	}
	at, err := time.Parse("2006-01-02T15:04:05.999999-0700", strings.Fields(out)[0])
	return at, err == nil
}

func benchTable(rs []benchResult) string {
	var b strings.Builder
	b.WriteString("| setup | rate | runs | OOM kills | bystanders hurt | evicted by | crossing → request (median / worst) | crossing → frozen (median / worst) | lowest headroom | hog's rate at the crossing |\n|---|---|---|---|---|---|---|---|---|---|\n")
	type key struct{ setup, rate string }
	var keys []key
	groups := map[key][]benchResult{}
	for _, r := range rs {
		k := key{r.setup, r.rate}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range keys {
		g := groups[k]
		var oom int64
		hurt := 0
		var req, frz []time.Duration
		lowest := int64(1 << 62)
		var rates []float64
		by := map[string]int{}
		for _, r := range g {
			oom += r.oomKills
			hurt += r.bystandersHurt
			if r.request >= 0 {
				req = append(req, r.request)
			}
			if r.frozen >= 0 {
				frz = append(frz, r.frozen)
			}
			lowest = min(lowest, r.lowestHeadroom)
			rates = append(rates, r.achievedMiBps)
			for _, w := range strings.Fields(r.evictedBy) {
				by[w]++
			}
			if r.hogEnding == "OOMKilled" {
				by["OOMKilled:hog"]++
			}
		}
		var bys []string
		for w, c := range by {
			bys = append(bys, fmt.Sprintf("%s ×%d", w, c))
		}
		slices.Sort(bys)
		slices.Sort(rates)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %s | %s | %d MiB | %.0f MiB/s |\n", k.setup, k.rate, len(g), oom, hurt,
			strings.Join(bys, ", "), medianWorst(req, len(g)), medianWorst(frz, len(g)), lowest>>20, rates[(len(rates)-1)/2])
	}
	return b.String()
}

func medianWorst(ds []time.Duration, of int) string {
	if len(ds) == 0 {
		return "—"
	}
	slices.Sort(ds)
	// The lower median: with two runs, the better one; the worst is beside it.
	s := fmt.Sprintf("%v / %v", ds[(len(ds)-1)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	if len(ds) < of {
		s += fmt.Sprintf(" (%d of %d)", len(ds), of)
	}
	return s
}
