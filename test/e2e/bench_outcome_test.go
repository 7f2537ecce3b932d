//go:build e2e && bench_ramp

package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// hogSetup is one cluster configuration of the fork-bomb and disk-filler benches: the
// kubelet alone, or with evictiond, with or without its brake.
type hogSetup struct {
	name      string
	evictiond bool
	brake     bool
}

// hogOutcome is what ended a bench episode's pod "hog", read from the namespace's Events: the
// pods evicted (component:pod, each once, in order: the kubelet records one Event per
// attempt), the bystanders among them by actor, and whether evictiond's brake killed the hog.
type hogOutcome struct {
	evicted    []string
	seen       map[string]bool
	bystanders bystanderEvictions
	braked     bool
}

// bystanderEvictions counts the pods other than the hog evicted in an episode, by the actor
// that evicted them: the component of the Evicted Event, the kubelet's eviction manager or
// evictiond (kube.EventComponent). The two act on the same threshold in the same run, so a
// single count could not say whose eviction hurt a bystander.
type bystanderEvictions struct {
	kubelet, evictiond int
}

// bystanderColumns are the header cells of bystanderCells.
const bystanderColumns = "bystanders evicted by the kubelet | bystanders evicted by evictiond"

// bystanderCells is a table row's two bystander cells over its runs: per actor the total, and
// each run's count in run order when several runs evicted any.
func bystanderCells(runs []bystanderEvictions) string {
	cell := func(count func(bystanderEvictions) int) string {
		total, perRun := 0, make([]string, len(runs))
		for i, r := range runs {
			total += count(r)
			perRun[i] = strconv.Itoa(count(r))
		}
		if total == 0 || len(runs) == 1 {
			return strconv.Itoa(total)
		}
		return fmt.Sprintf("%d (%s)", total, strings.Join(perRun, ", "))
	}
	return cell(func(b bystanderEvictions) int { return b.kubelet }) + " | " + cell(func(b bystanderEvictions) int { return b.evictiond })
}

func readHogOutcome(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) hogOutcome {
	o := hogOutcome{seen: map[string]bool{}}
	for _, e := range evictionEvents(t, c, ns) {
		key := e.Source.Component + ":" + e.InvolvedObject.Name
		if o.seen[key] {
			continue
		}
		o.seen[key] = true
		o.evicted = append(o.evicted, key)
		if e.InvolvedObject.Name == "hog" {
			continue
		}
		switch e.Source.Component {
		case "kubelet":
			o.bystanders.kubelet++
		case "evictiond":
			o.bystanders.evictiond++
		default:
			t.Errorf("%s: Evicted Event for %s from %q, neither the kubelet nor evictiond", ns, e.InvolvedObject.Name, e.Source.Component)
		}
	}
	if list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range list.Items {
			if e.Reason == "Braked" && e.InvolvedObject.Name == "hog" {
				o.braked = true
			}
		}
	}
	return o
}

// stoppedBy names who stopped a hog that is not a memory hog (no OOM killer in the picture):
// the brake, an eviction, nobody before the episode's bound (ended false), or the hog itself
// (last is its final state).
func (o hogOutcome) stoppedBy(ended bool, last *corev1.Pod) string {
	switch {
	case o.braked:
		return "brake kill (evictiond)"
	case o.seen["evictiond:hog"] && o.seen["kubelet:hog"]:
		return "eviction (evictiond and kubelet)"
	case o.seen["evictiond:hog"]:
		return "eviction (evictiond)"
	case o.seen["kubelet:hog"]:
		return "eviction (kubelet)"
	case !ended:
		return "nobody in 90 s"
	default:
		return "ended by itself: " + describeStatus(last)
	}
}

// latencySummary is "median / worst" of one latency over the runs that acted (acted reports
// whether a run's value is a latency), "(n of m runs)" added when some did not, "—" when none did.
func latencySummary[R any](rs []R, latency func(R) time.Duration, acted func(time.Duration) bool) string {
	var ds []time.Duration
	for _, r := range rs {
		if d := latency(r); acted(d) {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return "—"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	out := fmt.Sprintf("%s / %s", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	if len(ds) < len(rs) {
		out += fmt.Sprintf(" (%d of %d runs)", len(ds), len(rs))
	}
	return out
}

// waitKubeletAdmits waits until the kubelet admits pods again after a pressure episode. Its
// eviction manager refuses every new pod (but critical ones) while it holds DiskPressure or
// PIDPressure, and it holds one for its evictionPressureTransitionPeriod after the last reading
// under the threshold; the Node object is no proof of that view either way, since the kubelet
// posts its status every 10 s and a pod it refuses stays Failed for good. So the wait asks the
// kubelet itself: it creates throwaway pods, one at a time, in a namespace of their own (a
// refusal is recorded as an Evicted Event, which must not count in the episode's namespace),
// until one runs.
func waitKubeletAdmits(t *testing.T, c *cluster.Cluster, ns string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, c.Client, ns)
	grace := int64(0)
	refusals, lastRefusal := 0, ""
	deadline := time.Now().Add(timeout)
	for attempt := 1; ; attempt++ {
		name := fmt.Sprintf("admission-%d", attempt)
		pod := podOnNode(ns, name, workloadContainer("idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil))
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating admission probe %s/%s: %v", ns, name, err)
		}
		var last *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Until(deadline), true, func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			return p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed, nil
		})
		_ = c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err == nil && last.Status.Phase == corev1.PodRunning {
			if refusals > 0 {
				t.Logf("the kubelet admitted pods again after refusing %d (last: %s)", refusals, lastRefusal)
			}
			return
		}
		if err == nil {
			refusals, lastRefusal = refusals+1, last.Status.Reason+": "+last.Status.Message
			if refusals == 1 {
				t.Logf("the kubelet refused a new pod (%s) while the Node said %s", lastRefusal, nodePressure(ctx, c))
			}
		}
		if err != nil || time.Now().Add(time.Second).After(deadline) {
			t.Fatalf("the kubelet did not admit a pod within %s (waited for its eviction manager to stop refusing new pods: %d refused, last refusal %q; last probe %s)\n--- kubelet log ---\n%s",
				timeout, refusals, lastRefusal, describeStatus(last), c.LogTail("kubelet", 25))
		}
		time.Sleep(time.Second)
	}
}

// nodePressure is the Node's pressure conditions as the API server has them, for logs.
func nodePressure(ctx context.Context, c *cluster.Cluster) string {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		return "(node: " + err.Error() + ")"
	}
	var conds []string
	for _, cond := range node.Status.Conditions {
		switch cond.Type {
		case corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure:
			conds = append(conds, fmt.Sprintf("%s=%s (heartbeat %s, since %s)", cond.Type, cond.Status,
				cond.LastHeartbeatTime.Format(time.TimeOnly), cond.LastTransitionTime.Format(time.TimeOnly)))
		}
	}
	return strings.Join(conds, ", ")
}
