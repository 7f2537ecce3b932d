//go:build nodev2

package nodev2

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/testenv/hostprobe"
)

// testHostWritesRefused runs the host-write probe (internal/testenv/hostprobe) in the agent's
// pod on the cgroup v2 node, whose kernel (Debian's) has every probed file, sysrq-trigger
// included: each is refused (read-only file system), and what the agent writes is not.
func testHostWritesRefused(t *testing.T, n *node) {
	pod := n.evictiondPod(t, "", time.Minute)
	res, err := hostprobe.Run(context.Background(), n.client, pod, "evictiond", "host-write-probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe:\n%s", strings.Join(res.Lines, "\n"))
	for _, f := range res.Failures() {
		t.Error(f)
	}
	for _, p := range res.Absent() {
		t.Errorf("%s: absent on the node", p)
	}
	t.Run("AgentConfinesItself", func(t *testing.T) { testAgentConfinesItself(t, n, string(pod.UID), res) })
}

// testAgentConfinesItself checks, in the guest, what the running agent did to itself at start
// (internal/confine) on this cgroup v2 node: every thread carries one seccomp filter more than
// the probe (a container with the same security context, RuntimeDefault), and none holds
// CAP_KILL in its effective, permitted or inheritable set (the brake kills through cgroup.kill:
// BrakeFreezesAndKills, whose hog runs as another user, proves it still does).
func testAgentConfinesItself(t *testing.T, n *node, podUID string, probe hostprobe.Result) {
	summary, failures, err := hostprobe.CheckConfinement(probe, n.sh(t, hostprobe.AgentThreadsScript(podUID)), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
	for _, f := range failures {
		t.Error(f)
	}
	agentLog := n.evictiondLog(t, 400)
	for _, control := range []string{"seccomp", "cap_kill"} {
		if !hostprobe.LogHasLine(agentLog, `"msg":"confinement applied"`, `"control":"`+control+`"`) {
			t.Errorf("the agent's log has no \"confinement applied\" line for %s", control)
		}
	}
}
