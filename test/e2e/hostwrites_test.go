//go:build e2e

package e2e_test

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

	"github.com/evictiond/evictiond/internal/testenv/images"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// hostWriteProbe opens each path for writing without writing a byte (`: >`: a refused open
// fails with the mount's error; an accepted one truncates nothing on procfs or sysfs) and
// prints one line per path. The first list must be refused, the second accepted (what the
// agent writes: its PSI trigger in its own /proc, the cgroup tree).
const hostWriteProbe = `
status=0
for p in /host/proc/sys/kernel/core_pattern /host/proc/sysrq-trigger /host/proc/sys/vm/drop_caches \
		/host/sys/power/state /host/sys/kernel/mm/transparent_hugepage/enabled /host/etc/evictiond-e2e-probe; do
	if out=$( (: > "$p") 2>&1 ); then echo "WRITABLE $p"; status=1; else echo "refused $p: $out"; fi
done
for p in /proc/pressure/memory; do
	if out=$( (: > "$p") 2>&1 ); then echo "writable $p"; else echo "REFUSED $p: $out"; status=1; fi
done
if [ -w /host/sys/fs/cgroup ]; then echo "writable /host/sys/fs/cgroup"; else echo "REFUSED /host/sys/fs/cgroup"; status=1; fi
exit $status
`

// testHostWritesRefused runs hostWriteProbe in an ephemeral container of the agent's pod with
// the agent container's security context and volume mounts: what code running as the agent
// could open for writing on the host. The host's procfs and sysfs are recursively read-only
// (chart host.recursiveReadOnly), so the kernel's core_pattern (a core dump handler runs as
// root on the host) and sysrq-trigger (crash or reboot the node) are refused.
func testHostWritesRefused(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	pod, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var agent *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "evictiond" {
			agent = &pod.Spec.Containers[i]
		}
	}
	if agent == nil {
		t.Fatalf("pod %s has no evictiond container", pod.Name)
	}
	var mounts []corev1.VolumeMount
	for _, m := range agent.VolumeMounts {
		if !strings.HasPrefix(m.Name, "kube-api-access") { // the token: not the probe's business
			mounts = append(mounts, m)
		}
	}
	const name = "host-write-probe"
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name:            name,
			Image:           images.PauseRef, // busybox
			ImagePullPolicy: corev1.PullNever,
			Command:         []string{images.BusyboxPath, "sh", "-c", hostWriteProbe},
			SecurityContext: agent.SecurityContext,
			VolumeMounts:    mounts,
		},
		TargetContainerName: "evictiond",
	})
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).UpdateEphemeralContainers(ctx, pod.Name, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("adding the probe to pod %s: %v", pod.Name, err)
	}
	var term *corev1.ContainerStateTerminated
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.EphemeralContainerStatuses {
			if s.Name == name && s.State.Terminated != nil {
				term = s.State.Terminated
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the probe did not finish: %v\n--- kubelet log ---\n%s", err, c.LogTail("kubelet", 25))
	}
	out, err := os.ReadFile(filepath.Join(c.PodLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), name, "0.log"))
	if err != nil {
		t.Fatalf("the probe's log: %v", err)
	}
	t.Logf("probe (exit %d):\n%s", term.ExitCode, out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "WRITABLE") || strings.Contains(line, "REFUSED") {
			t.Errorf("%s", line)
		}
	}
	if term.ExitCode != 0 {
		t.Errorf("probe exit code %d, want 0", term.ExitCode)
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
