//go:build nodev2

package nodev2

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/testenv/hostprobe"
)

// appArmorProfile is the profile containerd 2.x loads (apparmor_parser) and applies to every
// container that is not privileged and sets no profile of its own (contrib/apparmor).
const appArmorProfile = "cri-containerd.apparmor.d"

// psiRefusedByAppArmor is the probe's line for /proc/pressure/memory on a node with AppArmor:
// the default profile denies writes to every file under a non-numeric /proc directory.
const psiRefusedByAppArmor = "REFUSED /proc/pressure/memory: sh: can't create /proc/pressure/memory: Permission denied"

// testHostWritesRefused runs the host-write probe (internal/testenv/hostprobe) in the agent's
// pod on the cgroup v2 node, whose kernel (Debian's) has every probed file, sysrq-trigger
// included: each is refused (read-only file system), and what the agent writes is not — but
// for /proc/pressure/memory, which this node's AppArmor refuses (AppArmor, below).
func testHostWritesRefused(t *testing.T, n *node) {
	pod := n.evictiondPod(t, "", time.Minute)
	res, err := hostprobe.Run(context.Background(), n.client, pod, "evictiond", "host-write-probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe:\n%s", strings.Join(res.Lines, "\n"))
	for _, f := range res.Failures() {
		if f != psiRefusedByAppArmor {
			t.Error(f)
		}
	}
	for _, p := range res.Absent() {
		t.Errorf("%s: absent on the node", p)
	}
	t.Run("AgentConfinesItself", func(t *testing.T) { testAgentConfinesItself(t, n, string(pod.UID), res) })
	t.Run("AppArmor", func(t *testing.T) { testAppArmor(t, n, pod, res) })
}

// testAppArmor proves the runtime's default AppArmor profile on the agent where the node has
// AppArmor (this node: Debian's kernel enables it by default, the apparmor package gives
// containerd its apparmor_parser). The chart sets no profile: containerd applies
// cri-containerd.apparmor.d to every non-privileged container that asks for none.
//   - Every thread of the running agent, read from the node, is confined by it in enforce
//     mode, and so is the probe (the agent container's security context).
//   - Two attempts only AppArmor refuses, each with EACCES: opening the pod's own
//     /proc/pressure/memory for writing (mode 0666, not under a read-only mount, seccomp
//     does not look at paths) and SIGCONT to PID 1 (systemd runs as root: uid 0 needs no
//     CAP_KILL to signal it, RuntimeDefault allows kill(2)). The control: the same probe with
//     the same security context but `appArmorProfile: Unconfined` opens the file and sends
//     the signal, and every host write stays refused by the read-only mounts.
//   - The agent copes with the refusal it meets: its node-level PSI trigger falls back to
//     the poll (logged with the error), the kubepods trigger is armed.
//     AgentHitNoAppArmorDenial, the tier's last subtest, checks the rest of the run.
func testAppArmor(t *testing.T, n *node, pod *corev1.Pod, confined hostprobe.Result) {
	enforce := appArmorProfile + " (enforce)"
	if got := confined.AppArmorLabel(); got != enforce {
		t.Errorf("the probe runs under AppArmor label %q, want %q", got, enforce)
	}
	out := n.sh(t, hostprobe.AgentAppArmorScript(string(pod.UID)))
	t.Logf("the agent's threads:\n%s", out)
	for _, f := range hostprobe.AppArmorFailures(out, appArmorProfile) {
		t.Error(f)
	}
	if !slices.Contains(confined.Lines, psiRefusedByAppArmor) {
		t.Errorf("/proc/pressure/memory: want %q from the confined probe, got %q", psiRefusedByAppArmor, confined.Lines)
	}
	if got := confined.SignalInit(); !strings.Contains(got, "Permission denied") {
		t.Errorf("SIGCONT to PID 1 from the confined probe: %q, want Permission denied", got)
	}

	pod = n.evictiondPod(t, "", time.Minute) // with the first probe: ephemeral containers are only added
	control, err := hostprobe.RunWithAppArmor(context.Background(), n.client, pod, "evictiond", "host-write-probe-unconfined",
		corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the same probe with appArmorProfile Unconfined:\n%s", strings.Join(control.Lines, "\n"))
	if got := control.AppArmorLabel(); got != "unconfined" {
		t.Errorf("the control probe runs under AppArmor label %q, want unconfined", got)
	}
	for _, f := range control.Failures() {
		t.Errorf("without AppArmor: %s", f)
	}
	if got := control.SignalInit(); got != "sent" {
		t.Errorf("SIGCONT to PID 1 without AppArmor: %q, want sent (the other layers allow it)", got)
	}

	agentLog := n.evictiondLog(t, 400)
	if !hostprobe.LogHasLine(agentLog, `"msg":"notifier falls back to polling"`, `"target":"/proc/pressure/memory"`, `permission denied`) {
		t.Error("the agent's log has no poll fallback for /proc/pressure/memory naming the refusal")
	}
	if !hostprobe.LogHasLine(agentLog, `"msg":"PSI trigger armed"`, `kubepods.slice/memory.pressure`) {
		t.Error("the agent's log has no PSI trigger armed on kubepods.slice/memory.pressure")
	}
}

// testAgentHitNoAppArmorDenial reads the node's journal after every scenario: AppArmor denied
// the agent's processes (comm evictiond) nothing but what the brake's kill loop may meet. The
// default profile's `deny` rules (the files under /proc and /sys, mount) refuse silently, so
// the agent's expected /proc/pressure/memory refusal is not there; what AppArmor refuses for
// want of an allow rule is logged: a signal to a process under another profile, a ptrace-mode
// read of one. The control: the AppArmor subtest's SIGCONT to PID 1, logged for the probe
// (`signal=cont peer="unconfined"`, comm busybox).
//
// The one denial tolerated: SIGKILL to an unconfined process. After cgroup.kill the brake
// sends SIGKILL by kill(2) to the processes still listed in the pod's cgroup until it is empty
// (internal/brake PodCgroup.Kill); they are dying already, and the pod's sandbox (pause)
// process, which containerd runs unconfined, is refused (the brake ignores the error; the
// kernel's cgroup.kill has killed it). The audit line does not name the target, so such a
// line is accepted only if the agent logged a brake kill.
func testAgentHitNoAppArmorDenial(t *testing.T, n *node) {
	out := n.sh(t, `journalctl -o cat --no-pager | grep 'apparmor="DENIED"' || true`)
	t.Logf("AppArmor denials on the node:\n%s", out)
	if !hostprobe.LogHasLine(out, `operation="signal"`, `signal=cont`, `peer="unconfined"`) {
		t.Fatal("the probe's refused signal to PID 1 is not in the journal: AppArmor's denials are not logged here, nothing can be concluded")
	}
	kills := n.sh(t, fmt.Sprintf(`cat /var/log/pods/%s_*/evictiond/*.log 2>/dev/null | grep -c '"msg":"brake: pod killed' || true`, evictiondNamespace))
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, `comm="evictiond"`) {
			continue
		}
		if hostprobe.LogHasLine(l, `operation="signal"`, `signal=kill`, `peer="unconfined"`) && kills != "0" && kills != "" {
			t.Logf("tolerated: the brake's follow-up SIGKILL to an unconfined process after cgroup.kill (%s brake kills logged): %s", kills, l)
			continue
		}
		t.Errorf("AppArmor denied the agent: %s", l)
	}
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
