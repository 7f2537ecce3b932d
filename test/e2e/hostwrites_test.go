//go:build e2e

package e2e_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/evictiond/evictiond/internal/testenv/hostprobe"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// testHostWritesRefused runs the host-write probe (internal/testenv/hostprobe) in the
// agent's pod, with the agent container's security context and mounts: the host's procfs
// and sysfs are recursively read-only (chart host.recursiveReadOnly), so core_pattern (a core
// dump handler runs as root on the host), sysrq-trigger (crash or reboot the node), sysctls
// and /sys/power are refused; what the agent writes is not.
func testHostWritesRefused(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	pod, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := hostprobe.Run(ctx, c.Client, pod, "evictiond", "host-write-probe")
	if err != nil {
		t.Fatalf("%v\n--- kubelet log ---\n%s", err, c.LogTail("kubelet", 25))
	}
	t.Logf("probe:\n%s", strings.Join(res.Lines, "\n"))
	for _, f := range res.Failures() {
		t.Error(f)
	}
	t.Run("AgentConfinesItself", func(t *testing.T) { testAgentConfinesItself(t, c, string(pod.UID), res) })
	for _, p := range res.Absent() {
		// This machine's kernel may lack SysRq (CONFIG_MAGIC_SYSRQ off): the node tier's
		// kernel has it and proves that refusal (test/nodev2 HostWritesRefused).
		if _, err := os.Stat(strings.TrimPrefix(p, "/host")); p == "/host/proc/sysrq-trigger" && errors.Is(err, fs.ErrNotExist) {
			t.Logf("%s: absent from this kernel (the node tier proves its refusal)", p)
			continue
		}
		t.Errorf("%s: absent in the agent's pod", p)
	}
	// The agent armed its PSI trigger in its own procfs (the host's is read-only).
	logPath, err := c.EvictiondLogPath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agentLog, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(agentLog), `"msg":"PSI trigger armed"`) || !strings.Contains(string(agentLog), `"file":"/proc/pressure/memory"`) {
		t.Errorf("the agent's log has no PSI trigger armed on /proc/pressure/memory")
	}
}

// testAgentConfinesItself checks, from the host, what the running agent did to itself at start
// (internal/confine) under the shipped security context: each of its threads carries one
// seccomp filter more than the probe, a container with the same security context
// (RuntimeDefault), so open_by_handle_at is refused to it (what the filter refuses is proven
// by internal/confine's tests); on this cgroup v1 node it keeps CAP_KILL (the brake kills with
// kill(2)); both say so on /metrics and in its log.
func testAgentConfinesItself(t *testing.T, c *cluster.Cluster, podUID string, probe hostprobe.Result) {
	out, err := exec.Command("sh", "-c", hostprobe.AgentThreadsScript(podUID)).CombinedOutput()
	if err != nil {
		t.Fatalf("reading the agent's threads: %v\n%s", err, out)
	}
	summary, failures, err := hostprobe.CheckConfinement(probe, string(out), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
	for _, f := range failures {
		t.Error(f)
	}
	page, err := c.EvictiondMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`evictiond_confinement{control="seccomp"} 1`, `evictiond_confinement{control="cap_kill"} 0`} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logPath, err := c.EvictiondLogPath(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	agentLog, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{{`"msg":"confinement applied"`, `"control":"seccomp"`}, {`"msg":"confinement not applicable"`, `"control":"cap_kill"`, `"detail":"CAP_KILL kept: `}} {
		if !hostprobe.LogHasLine(string(agentLog), want...) {
			t.Errorf("the agent's log has no line with %q", want)
		}
	}
}
