//go:build nodev2

package nodev2

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/evictiond/evictiond/internal/testenv/hostprobe"
)

// testRealtimeBoost is brake.realtime, on by default, on cgroup v2 + systemd (kubepods.slice;
// Debian's kernel, without RT group scheduling) with the chart's capabilities, which hold no
// CAP_SYS_NICE: with a hard threshold near, the agent's threads go SCHED_FIFO 1 (through
// RLIMIT_RTPRIO, which CAP_SYS_RESOURCE lets it raise), never higher; once the headroom is back
// they are all SCHED_OTHER again but the sentinels: the thread that waits on the kernel's
// notifications and the fast poll's, SCHED_FIFO 1 before and after the boost
// (rtboost.Sentinel). It runs with scenarioConfig (installed by
// MemoryRampAndNodeStatus: allocatableMemory.available 500Mi, the brake on, brake.realtime left
// at its default). A functional proof only: under qemu TCG no latency is measured here.
func testRealtimeBoost(t *testing.T, n *node) {
	pod := n.evictiondPod(t, "", time.Minute)
	threads, err := hostprobe.AgentThreads(n.sh(t, hostprobe.AgentThreadsScript(string(pod.UID))))
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		if th.CapEff&(1<<unix.CAP_SYS_NICE) != 0 {
			t.Fatalf("agent thread %d holds CAP_SYS_NICE (CapEff %016x): the chart grants it no more; this test proves the boost without it", th.TID, th.CapEff)
		}
	}
	if strings.Contains(scenarioConfig, "realtime") {
		t.Fatal("scenarioConfig sets brake.realtime: this test proves its default")
	}
	policiesScript := agentPoliciesScript(string(pod.UID))
	// Before any pressure: the sentinels alone (on this node both run: the reactor waits on
	// kubepods' PSI trigger and memory.events, and the poll is v2's memory fast path).
	var sentinels []string
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		sentinels, _ = n.agentPolicies(t, policiesScript)
		return len(sentinels) == 2, nil
	})
	if err != nil {
		_, all := n.agentPolicies(t, policiesScript)
		t.Fatalf("before any pressure, agent threads in SCHED_FIFO: %v of %v; want two, the sentinels (the notifiers' thread, the poll's)\n--- evictiond ---\n%s",
			sentinels, all, grepLines(n.evictiondLog(t, 400), "realtime"))
	}
	t.Logf("sentinels: %v", sentinels)

	// Fill kubepods to 50 MiB above the 500Mi allocatableMemory.available threshold: inside the
	// 100 MiB within which the poll asks for the boost, outside the threshold itself.
	ns := "v2-realtime"
	createNamespace(t, n, ns)
	defer n.deleteNamespace(t, ns)
	limit, ws := n.kubepodsMemory(t)
	fill := (limit-ws)>>20 - 550
	if fill < 100 {
		t.Fatalf("kubepods has %d MiB left under its limit %d MiB: no room for the test's fill", (limit-ws)>>20, limit>>20)
	}
	hog := n.createPod(t, podOnNode(ns, "near", workloadContainer("memhog", "memhog",
		[]string{"-rate-mib=1000", "-target-mib=" + strconv.FormatInt(fill, 10)}, resources("memory", "64Mi"), nil)))
	t.Logf("kubepods: limit %d MiB, working set %d MiB; filling %d MiB", limit>>20, ws>>20, fill)

	var fifo, all []string
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		fifo, all = n.agentPolicies(t, policiesScript)
		return len(fifo) > len(sentinels), nil
	})
	if err != nil {
		l, w := n.kubepodsMemory(t)
		t.Fatalf("no agent thread in SCHED_FIFO with the threshold near (brake.realtime on by default; kubepods: limit %d MiB, working set %d MiB; threads %v)\n--- evictiond ---\n%s",
			l>>20, w>>20, all, grepLines(n.evictiondLog(t, 400), "realtime"))
	}
	t.Logf("boosted: %d of %d threads SCHED_FIFO 1: %v", len(fifo), len(all), fifo)
	if log := n.evictiondLog(t, 400); strings.Contains(log, "realtime boost unavailable") {
		t.Errorf("the agent logged the boost unavailable:\n%s", grepLines(log, "realtime"))
	}

	// The pressure goes: every thread back in SCHED_OTHER (1 s after the last request) but the
	// sentinels.
	if err := n.client.CoreV1().Pods(ns).Delete(context.Background(), hog.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	n.waitPodGone(t, ns, hog.Name, hog.UID, 2*time.Minute)
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		fifo, all = n.agentPolicies(t, policiesScript)
		return slices.Equal(fifo, sentinels), nil
	})
	if err != nil {
		t.Fatalf("a minute after the pressure went, agent threads real-time: %v of %v; want the sentinels %v alone", fifo, all, sentinels)
	}
}

// agentPoliciesScript prints, for each thread of the agent's `evictiond run` process, its
// stat path, scheduling policy and real-time priority (stat fields 41 and 40).
func agentPoliciesScript(podUID string) string {
	return fmt.Sprintf(`for p in /proc/[0-9]*; do
	grep -qE 'pod(%s|%s)' $p/cgroup 2>/dev/null || continue
	case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *evictiond\ run*) ;; *) continue ;; esac
	for s in $p/task/*/stat; do sed 's/.*) //' $s 2>/dev/null | awk -v s=$s '{print s, $39, $38}'; done
done`, podUID, strings.ReplaceAll(podUID, "-", "_"))
}

// agentPolicies returns the agent's threads in SCHED_FIFO and all of them ("tid policy/prio");
// a real-time thread at any other class or priority than SCHED_FIFO 1 fails the test.
func (n *node) agentPolicies(t *testing.T, script string) (fifo, all []string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(n.sh(t, script)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		tid := strings.TrimSuffix(strings.TrimPrefix(f[0][strings.Index(f[0], "/task/"):], "/task/"), "/stat")
		th := tid + " " + f[1] + "/" + f[2]
		all = append(all, th)
		switch {
		case f[1] == "0":
		case f[1] == strconv.Itoa(unix.SCHED_FIFO) && f[2] == "1":
			fifo = append(fifo, th)
		default:
			t.Fatalf("agent thread %s: policy/priority %s/%s, want SCHED_OTHER or SCHED_FIFO 1", tid, f[1], f[2])
		}
	}
	if len(all) == 0 {
		t.Fatal("no thread of an `evictiond run` process in the agent pod's cgroup")
	}
	return fifo, all
}
